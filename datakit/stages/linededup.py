"""The linededup stage: a line or paragraph repeated across documents (cookie banners, license headers,
navigation) is removed from every copy after the first, after consolidate (whole-document dedup has
already run, so only what survived it is compared) and before PII redaction.

Two kinds of steps, when the optional `line_dedup:` section is given:

- ``linededup-index`` (corpus-wide): keys every long-enough segment of every document, shuffles the
  keys on the engine, and for each key repeated in several documents lists the documents after the
  first, in the pipeline's deterministic order (source in manifest order, file name, row: rows are
  sorted by id). Writes one parquet per source (file, id, key), sorted.
- ``linededup-<source>``: rewrites the source's documents without those segments (the per-file
  transform): a changed text gets its new content id; a document emptied by it is removed with reason
  ``linededup.emptied``.

Counters: segments_removed, docs_changed (per source step), docs_emptied; ``keys`` and ``repeated_keys``
on the index step.
"""

from __future__ import annotations

import io
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datakit.core.fsio import atomic_write_bytes, read_table
from datakit.core.layout import DocumentsDir, join
from datakit.manifest import Section
from datakit.quality import linededup as ld
from datakit.quality.config import LineDedupConfig, LineDedupRules
from datakit.shuffle import Dataset
from datakit.steps import Step, StepContext

from .contract import DOCUMENTS, Graph, Stage, step_identity
from .transform import documents_result, run_per_file, sort_unique

VERSION = "1"
REMOVALS_SCHEMA = pa.schema([("file", pa.string()), ("id", pa.string()), ("key", pa.int64())])


def _file_keys(job: tuple, unit: str, min_chars: int) -> list[tuple]:
    """(key, (rank, file, row), source, file, id) for every long-enough segment of one documents file."""
    rank, source, name, path = job
    table = read_table(path, columns=["id", "text"])
    out = []
    for row, (doc_id, text) in enumerate(zip(table.column("id").to_pylist(), table.column("text").to_pylist())):
        for k in ld.keys(text, unit, min_chars):
            out.append((k, (rank, name, row), source, name, doc_id))
    return out


def _later_copies(k: int, rows) -> list[tuple]:
    """Every document holding key ``k`` after the first one, as (source, file, id, key)."""
    rows = list(rows)
    first = min(r[1] for r in rows)
    return [(r[2], r[3], r[4], k) for r in rows if r[1] != first]


def _index(ctx: StepContext, inputs: list[tuple[str, str, str, int]]) -> dict:
    """inputs: (source, its documents step, unit, min_chars), in manifest order."""
    jobs = []
    for rank, (source, step, unit, min_chars) in enumerate(inputs):
        docs = DocumentsDir(ctx.deps[step].output)
        jobs += [((rank, source, n, join(docs.main, n)), unit, min_chars) for n in docs.parquet_names("main")]
    ds = Dataset.from_items(jobs, num_shards=max(1, len(jobs))).flat_map(lambda j: _file_keys(*j))
    removals = ds.group_by(lambda r: r[0], _later_copies).flat_map(lambda x: x).collect(ctx.exec_config)
    by_source: dict[str, list[tuple]] = {s: [] for s, *_ in inputs}
    for source, name, doc_id, k in removals:
        by_source[source].append((name, doc_id, k))
    counters = {"removals": len(removals), "repeated_keys": len({r[3] for r in removals})}
    for source, rows in by_source.items():
        t = pa.table({"file": [r[0] for r in rows], "id": [r[1] for r in rows], "key": [r[2] for r in rows]},
                     schema=REMOVALS_SCHEMA)
        t = t.take(pc.sort_indices(t, [("file", "ascending"), ("id", "ascending"), ("key", "ascending")]))
        buf = io.BytesIO()
        pq.write_table(t, buf, compression="zstd")
        atomic_write_bytes(join(ctx.output, f"{source}.parquet"), buf.getvalue())
        counters[f"removals/{source}"] = len(rows)
    return {"sources": {s: f"{s}.parquet" for s in by_source}, "counters": counters}


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
    return pa.Table.from_pylist(kept, schema=table.schema), removed, stats


def _apply(ctx: StepContext, source: str, documents: str, index: str, rules: LineDedupRules) -> dict:
    t = read_table(join(ctx.deps[index].output, f"{source}.parquet"))
    removals: dict[str, dict[str, set[int]]] = {}
    for name, doc_id, k in zip(*(t.column(c).to_pylist() for c in ("file", "id", "key"))):
        removals.setdefault(name, {}).setdefault(doc_id, set()).add(k)
    names, totals = run_per_file(ctx, documents, partial(rewrite_file, removals=removals, rules=rules),
                                 f"linededup-{source}")
    for k in ("docs_in", "docs_out", "removed", "docs_changed", "segments_removed", "docs_emptied"):
        totals.setdefault(k, 0)
    totals["removed/linededup.emptied"] = totals["docs_emptied"]
    if totals["removed"] > totals["docs_emptied"]:
        totals["removed/linededup.duplicate"] = totals["removed"] - totals["docs_emptied"]
    return documents_result(names, totals, stage=STAGE.name, source=source)


def build(graph: Graph) -> None:
    cfg: LineDedupConfig | None = graph.config(STAGE)
    if cfg is None:
        return
    rules = {n: cfg.for_source(n) for n in graph.source_names}
    active = [n for n in graph.source_names if rules[n].enabled]
    if not active:
        return
    inputs = [(n, graph.documents[n].name, rules[n].unit, rules[n].min_chars) for n in active]
    index = graph.add(Step("linededup-index", partial(_index, inputs=inputs),
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
                    "datakit.stages.linededup", "datakit.stages.quality_common", "datakit.stages.transform"),
              ferry_check="datakit.ferry.checks_quality:check_linededup")
