"""The per-file document transform that stages rewriting documents share (user stages, quality, line
dedup, PII): each documents file of the input step becomes a file of the same name in the step's
``outputs/main/`` (what is kept, sorted by id) and ``outputs/removed/`` (id, reason, detail, and for
the built-in stages the measured value that removed it and what else they record of a removed row:
its language for the quality stage), one engine task per file.

A transform that changes a document's text gives it the new text's content id (ids are content hashes)
and re-sorts the file; two documents made identical keep one, the other is removed as a duplicate.
"""

from __future__ import annotations

import io
from functools import partial
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datakit.core.fsio import atomic_write_bytes, read_table
from datakit.core.layout import DocumentsDir, join
from datakit.core.results import DocumentsResult
from datakit.shuffle import Dataset, counters
from datakit.steps import StepContext

REMOVED_SCHEMA = pa.schema([("id", pa.string()), ("reason", pa.string()), ("detail", pa.string())])
REMOVED_VALUE_SCHEMA = REMOVED_SCHEMA.append(pa.field("value", pa.float64()))
# A per-file function: (file name, its table) -> (kept table, removed rows, stats); removed rows are
# tuples in the order of the step's removed schema (id, reason, detail, then the stage's own columns;
# missing trailing values are null). The transform reads the file (through the store
# module) and writes the results, so stage code never opens a file.
FileFn = Callable[[str, pa.Table], tuple[pa.Table, list[tuple], dict[str, int]]]


def table_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def removed_table(removed: list[tuple], schema: pa.Schema = REMOVED_SCHEMA) -> pa.Table:
    """The removed rows as a table of ``schema`` (REMOVED_SCHEMA's columns first), sorted by id."""
    cols = {}
    for i, f in enumerate(schema):
        cols[f.name] = pa.array([r[i] if i < len(r) else None for r in removed], f.type)
    t = pa.table(cols, schema=schema)
    return t.take(pc.sort_indices(t, [("id", "ascending")]))


def sort_unique(docs: list[dict], reason: str, detail: str) -> tuple[list[dict], list[tuple]]:
    """Sort documents by id and keep the first of each id: (kept, removed rows for the others). Two
    documents a transform made identical share a content id; one of them is enough."""
    docs.sort(key=lambda d: d["id"])
    unique, removed, seen = [], [], set()
    for doc in docs:
        if doc["id"] in seen:
            removed.append((doc["id"], reason, detail))
        else:
            seen.add(doc["id"])
            unique.append(doc)
    return unique, removed


def write_file(dst_main: str, dst_removed: str, kept: pa.Table, removed: list[tuple], schema: pa.Schema) -> None:
    atomic_write_bytes(dst_main, table_bytes(kept))
    atomic_write_bytes(dst_removed, table_bytes(removed_table(removed, schema)))


def _apply(job: tuple[str, str, str], file_fn: FileFn, removed_schema: pa.Schema) -> dict[str, int]:
    src, dst_main, dst_removed = job
    kept, removed, stats = file_fn(src.rstrip("/").rsplit("/", 1)[-1], read_table(src))
    write_file(dst_main, dst_removed, kept, removed, removed_schema)
    for k, v in stats.items():
        counters.increment(k, v)
    return stats


def input_names(ctx: StepContext, documents: str, what: str) -> tuple[DocumentsDir, list[str]]:
    src = DocumentsDir(ctx.deps[documents].output)
    names = src.parquet_names("main")
    if not names:
        raise ValueError(f"{what}: no documents under {src.main} (its input step {documents} wrote none)")
    return src, names


def run_per_file(ctx: StepContext, documents: str, file_fn: FileFn, what: str,
                 removed_schema: pa.Schema = REMOVED_SCHEMA) -> tuple[list[str], dict[str, int]]:
    """Every documents file of step ``documents`` through ``file_fn`` on the engine, one task per file:
    (the file names, the summed stats); removed rows are written with ``removed_schema``."""
    src, names = input_names(ctx, documents, what)
    dst = DocumentsDir(ctx.output)
    jobs = [(join(src.main, n), join(dst.main, n), join(dst.removed, n)) for n in names]
    stats = (Dataset.from_items(jobs, num_shards=len(jobs))
             .map(partial(_apply, file_fn=file_fn, removed_schema=removed_schema)).collect(ctx.exec_config))
    totals: dict[str, int] = {}
    for s in stats:
        for k, v in s.items():
            totals[k] = totals.get(k, 0) + v
    return names, dict(sorted(totals.items()))


def documents_result(names: list[str], counters: dict[str, int], **keys: Any) -> dict[str, Any]:
    """What a documents-rewriting step returns: its DocumentsResult (the files it wrote, paths relative
    to its output dir, and the stage's own ``keys``) with its counters."""
    return DocumentsResult.written({**keys, "main_files": [f"{DocumentsDir.MAIN}/{n}" for n in names],
                                    "removed_files": [f"{DocumentsDir.REMOVED}/{n}" for n in names],
                                    "counters": counters})
