"""The takedown stage: documents listed in the manifest's `takedown:` section (ids, URLs, domains, or a
file of them; `datakit.quality.takedown`) are removed from every source's final documents, after PII
redaction and before the quality classifier, the tokenizer and the token caches, so no model sees them.

Why that late: a taken-down document still takes part in deduplication, so its copies elsewhere (exact
or near duplicates removed because it was kept) do not come back when it goes; and a new takedown
leaves every step before it as it was (normalize, dedup, consolidate are reused whole). One step
`takedown-<source>` per source, a per-file transform with per-file reuse: a file holding no listed
document passes through as it is (linked), a new entry rewrites only the files holding a listed
document, and each removed document is listed in outputs/removed/ with the entry that matched (reason
``takedown``). Ids match the document's current id or the id it had in its input (``source_id``)."""

from __future__ import annotations

from functools import partial

import numpy as np
import pyarrow as pa

from datakit.core import arrow_numpy as an
from datakit.manifest import Section
from datakit.quality.takedown import TakedownConfig, Takedowns
from datakit.steps import Step, StepContext

from .contract import DOCUMENTS, Graph, Stage, step_identity
from .transform import FileColumns, FileKey, documents_result, run_per_file

VERSION = "2"
REASON = "takedown"


def _matches(table: pa.Table, cfg: TakedownConfig) -> list[tuple[int, str, str]]:
    """(row, id, the entry that matched) of every listed document of one file."""
    return Takedowns.of(cfg).rows(table)


def file_matches(columns: FileColumns, cfg: TakedownConfig) -> dict:
    """The per-file part of a file's reuse key: its rows and the listed documents it holds (read from
    the id and URL columns only). A new entry therefore rewrites only the files holding a document it
    lists (the list itself is not in the key). The URL column is read only when URLs or domains are listed."""
    lists = Takedowns.of(cfg)
    wanted = ("id", "source_id", cfg.url_column) if lists.urls or lists.domains else ("id", "source_id")
    table = columns.read([c for c in wanted if c in columns.schema.names])
    return {"rows": table.num_rows, "matches": lists.rows(table)}


def untouched(part: dict) -> dict[str, int] | None:
    """A file holding no listed document passes through as it is (linked, not re-encoded, so every later
    step still knows it by the same content): its stats; None when it holds one."""
    if part["matches"]:
        return None
    n = part["rows"]
    return {"docs_in": n, "docs_out": n, "removed": 0, f"removed/{REASON}": 0}


def takedown_file(name: str, table: pa.Table, cfg: TakedownConfig, part: dict | None = None
                  ) -> tuple[pa.Table, list, dict[str, int]]:
    """One documents file without its listed documents (id order and every column kept). ``part``: the
    file's `file_matches`, found when its reuse key was made (the rows are the file's rows, so they are
    not looked for again); None when the file had no key."""
    matches = part["matches"] if part is not None else _matches(table, cfg)
    removed = [(doc_id, REASON, why) for _row, doc_id, why in matches]
    keep = np.ones(table.num_rows, bool)
    keep[[row for row, _id, _why in matches]] = False
    kept = table.take(an.from_numpy(np.flatnonzero(keep))) if matches else table
    stats = {"docs_in": table.num_rows, "docs_out": kept.num_rows, "removed": len(removed),
             f"removed/{REASON}": len(removed)}
    return kept, removed, stats


def _run(ctx: StepContext, source: str, documents: str, cfg: TakedownConfig) -> dict:
    key = FileKey(settings=cfg.url_column, per_file=partial(file_matches, cfg=cfg), unchanged=untouched,
                  part_to_fn=True)
    names, totals = run_per_file(ctx, documents, partial(takedown_file, cfg=cfg), f"takedown-{source}",
                                 reuse_key=key)
    for k in ("docs_in", "docs_out", "removed", f"removed/{REASON}"):
        totals.setdefault(k, 0)
    return documents_result(names, totals, stage=STAGE.name, source=source)


def build(graph: Graph) -> None:
    cfg: TakedownConfig | None = graph.config(STAGE)
    if cfg is None or not cfg.enabled:
        return
    for n in graph.source_names:
        docs = graph.documents[n]
        step = Step(f"takedown-{n}", partial(_run, source=n, documents=docs.name, cfg=cfg),
                    {"takedown": step_identity(cfg)}, deps=(docs,), version=VERSION, stage=STAGE.name, source=n)
        graph.advance(n, step)


STAGE = Stage(name="takedown", version=VERSION, build=build,
              section=Section("takedown", TakedownConfig, optional=True),
              consumes=(DOCUMENTS,), produces=(DOCUMENTS,),
              code=("datakit.quality.takedown", "datakit.quality.urls", "datakit.stages.takedown",
                    "datakit.stages.transform"),
              ferry_check="datakit.ferry.checks_quality:check_takedown", reasons=(REASON,))
