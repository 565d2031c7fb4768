"""The linededup stage: a line or paragraph repeated across documents (cookie banners, license headers,
navigation) is removed from every copy after the first, after consolidate (whole-document dedup has
already run, so only what survived it is compared) and before PII redaction.

Two kinds of steps, when the optional `line_dedup:` section is given:

- ``linededup-index`` (corpus-wide, `linededup_index.py`): keys every long-enough segment of every
  document (per file, reused from the earlier build for unchanged files), shuffles the keys on the
  engine, and for each key repeated in several documents lists the documents after the first, in the
  pipeline's deterministic order (source in manifest order, file name, row: rows are sorted by id).
  Writes one parquet per source (file, id, key), sorted.
- ``linededup-<source>``: rewrites the source's documents without those segments (the per-file
  transform): a changed text gets its new content id; a document emptied by it is removed with reason
  ``linededup.emptied``. A file whose content and removals (a digest of exactly its ids and their
  repeated keys) are unchanged is taken from the earlier build.

Counters: segments_removed, docs_changed (per source step), docs_emptied; ``keys`` and ``repeated_keys``
on the index step.
"""

from __future__ import annotations

from functools import partial

import pyarrow as pa

from datakit.core import arrow_numpy as an
from datakit.core.fsio import read_table
from datakit.core.layout import join
from datakit.manifest import Section
from datakit.quality import linededup as ld
from datakit.quality.config import LineDedupConfig, LineDedupRules
from datakit.steps import Step, StepContext, reuse

from . import linededup_index
from .contract import DOCUMENTS, Graph, Stage, step_identity
from .transform import FileKey, documents_result, run_per_file, sort_unique

VERSION = "2"


def rewrite_file(name: str, table: pa.Table, removals: dict[str, dict[str, set[int]]], rules: LineDedupRules):
    """One documents file without its later copies of repeated segments."""
    from datakit.core.documents import content_id

    plan = removals.get(name, {})
    rows = table.to_pylist()
    kept, removed, stats = [], [], {"docs_in": len(rows), "docs_changed": 0, "segments_removed": 0}
    for doc in rows:
        drop = plan.get(doc["id"])
        if drop:
            text, gone = ld.drop(doc["text"], rules.unit, rules.min_chars, drop)
            stats["segments_removed"] += gone
            if not text.strip():
                removed.append((doc["id"], "linededup.emptied", f"all {gone} segments repeat earlier documents"))
                continue
            if text != doc["text"]:
                stats["docs_changed"] += 1
                doc = {**doc, "text": text, "id": content_id(text)}
        kept.append(doc)
    kept, dups = sort_unique(kept, "linededup.duplicate", "identical to another document after line dedup")
    removed += dups
    stats.update(docs_out=len(kept), removed=len(removed), docs_emptied=sum(r[1] == "linededup.emptied"
                                                                              for r in removed))
    return an.rows_table(kept, table.schema), removed, stats


def _plan_digests(removals: dict[str, dict[str, set[int]]]) -> dict[str, str]:
    """Per file, a digest of exactly its segments counted as repeated (id -> keys): with the file's
    content, all its rewrite depends on."""
    return {name: reuse.content_key(sorted((i, sorted(ks)) for i, ks in plan.items()))
            for name, plan in removals.items()}


def _apply(ctx: StepContext, source: str, documents: str, index: str, rules: LineDedupRules) -> dict:
    t = read_table(join(ctx.deps[index].output, f"{source}.parquet"))
    removals: dict[str, dict[str, set[int]]] = {}
    for name, doc_id, k in zip(*(t.column(c).to_pylist() for c in ("file", "id", "key"))):
        removals.setdefault(name, {}).setdefault(doc_id, set()).add(k)
    digests = _plan_digests(removals)
    names, totals = run_per_file(ctx, documents, partial(rewrite_file, removals=removals, rules=rules),
                                 f"linededup-{source}", reuse_key=FileKey(by_name=partial(_file_plan, digests=digests)))
    for k in ("docs_in", "docs_out", "removed", "docs_changed", "segments_removed", "docs_emptied"):
        totals.setdefault(k, 0)
    totals["removed/linededup.emptied"] = totals["docs_emptied"]
    if totals["removed"] > totals["docs_emptied"]:
        totals["removed/linededup.duplicate"] = totals["removed"] - totals["docs_emptied"]
    return documents_result(names, totals, stage=STAGE.name, source=source)


def _file_plan(name: str, digests: dict[str, str]) -> str | None:
    """A file's reuse key part: the digest of its removal plan (None: nothing to remove)."""
    return digests.get(name)


def build(graph: Graph) -> None:
    cfg: LineDedupConfig | None = graph.config(STAGE)
    if cfg is None:
        return
    rules = {n: cfg.for_source(n) for n in graph.source_names}
    active = [n for n in graph.source_names if rules[n].enabled]
    if not active:
        return
    inputs = [(n, graph.documents[n].name, rules[n].unit, rules[n].min_chars) for n in active]
    index = graph.add(Step("linededup-index", partial(linededup_index.index, inputs=inputs),
                           {"sources": {n: step_identity(rules[n]) for n in active}},
                           deps=tuple(graph.documents[n] for n in active), version=VERSION, stage=STAGE.name))
    for n in active:
        docs = graph.documents[n]
        step = Step(f"linededup-{n}", partial(_apply, source=n, documents=docs.name, index=index.name, rules=rules[n]),
                    {"rules": step_identity(rules[n])}, deps=(docs, index), version=VERSION, stage=STAGE.name, source=n)
        graph.advance(n, step)


STAGE = Stage(name="linededup", version=VERSION, build=build,
              section=Section("line_dedup", LineDedupConfig, optional=True), consumes=(DOCUMENTS,),
              produces=(DOCUMENTS,),
              code=("datakit.quality.linededup", "datakit.quality.config", "datakit.core.documents",
                    "datakit.stages.linededup", "datakit.stages.linededup_index", "datakit.dedup.keyed",
                    "datakit.dedup.batches", "datakit.dedup.hashing", "datakit.stages.quality_common", "datakit.stages.transform"),
              ferry_check="datakit.ferry.checks_quality:check_linededup")
