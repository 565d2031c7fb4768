"""The per-file document transform that stages rewriting documents share (user stages, quality, line
dedup, PII): each documents file of the input step becomes a file of the same name in the step's
``outputs/main/`` (what is kept, sorted by id) and ``outputs/removed/`` (id, reason, detail, and for
the built-in stages the measured value that removed it), one engine task per file.

A transform that changes a document's text gives it the new text's content id (ids are content hashes)
and re-sorts the file; two documents made identical keep one, the other is removed as a duplicate.
"""

from __future__ import annotations

import io
import posixpath
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datakit.core.fsio import atomic_write_bytes, read_table
from datakit.core.layout import DocumentsDir, join
from datakit.core.results import DocumentsResult
from datakit.shuffle import Dataset, counters
from datakit.steps import StepContext, reuse

REMOVED_SCHEMA = pa.schema([("id", pa.string()), ("reason", pa.string()), ("detail", pa.string())])
REMOVED_VALUE_SCHEMA = REMOVED_SCHEMA.append(pa.field("value", pa.float64()))
# A per-file function: (file name, its table) -> (kept table, removed rows, stats); removed rows are
# (id, reason, detail) or (id, reason, detail, value). The transform reads the file (through the store
# module) and writes the results, so stage code never opens a file.
FileFn = Callable[[str, pa.Table], tuple[pa.Table, list[tuple], dict[str, int]]]


def table_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def removed_table(removed: list[tuple], with_value: bool = False) -> pa.Table:
    """The removed rows as a table sorted by id (with a float ``value`` column when asked)."""
    schema = REMOVED_VALUE_SCHEMA if with_value else REMOVED_SCHEMA
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


def write_file(dst_main: str, dst_removed: str, kept: pa.Table, removed: list[tuple], with_value: bool) -> None:
    atomic_write_bytes(dst_main, table_bytes(kept))
    atomic_write_bytes(dst_removed, table_bytes(removed_table(removed, with_value)))


@dataclass(frozen=True)
class _Job:
    """One file of a per-file transform: where it is read and written, and (with reuse) its content key
    and the earlier build to look the key up in."""

    src: str
    dst_main: str
    dst_removed: str
    key: str | None = None
    earlier: reuse.Earlier | None = None


def _apply(job: _Job, file_fn: FileFn, with_value: bool, output: str
           ) -> tuple[str | None, tuple[str, str], dict[str, int], bool]:
    """One file through ``file_fn``, or its earlier result taken whole: (key, the two files relative to
    the step dir, stats, whether it was taken)."""
    unit = reuse.take(job.earlier, job.key, output) if job.key is not None else None
    if unit is not None:
        stats = unit.stats
    else:
        kept, removed, stats = file_fn(job.src.rstrip("/").rsplit("/", 1)[-1], read_table(job.src))
        write_file(job.dst_main, job.dst_removed, kept, removed, with_value)
    for k, v in stats.items():
        counters.increment(k, v)
    rel = (f"{DocumentsDir.MAIN}/{posixpath.basename(job.dst_main)}",
           f"{DocumentsDir.REMOVED}/{posixpath.basename(job.dst_removed)}")
    return job.key, rel, stats, unit is not None


def input_names(ctx: StepContext, documents: str, what: str) -> tuple[DocumentsDir, list[str]]:
    src = DocumentsDir(ctx.deps[documents].output)
    names = src.parquet_names("main")
    if not names:
        raise ValueError(f"{what}: no documents under {src.main} (its input step {documents} wrote none)")
    return src, names


def _jobs(ctx: StepContext, documents: str, names: list[str], src: DocumentsDir,
          reuse_key: tuple | Callable[[str], Any] | None) -> list[_Job]:
    dst = DocumentsDir(ctx.output)
    if reuse_key is None:
        return [_Job(join(src.main, n), join(dst.main, n), join(dst.removed, n)) for n in names]
    hashes = reuse.output_hashes(src.root)
    earlier = reuse.load(ctx.earlier)
    jobs = []
    for n in names:
        digest = hashes.get(f"{DocumentsDir.MAIN}/{n}")
        extra = reuse_key(n) if callable(reuse_key) else reuse_key
        key = None if digest is None else reuse.content_key(
            ctx.step.name, ctx.step.version, ctx.step.config, extra, n, digest)
        jobs.append(_Job(join(src.main, n), join(dst.main, n), join(dst.removed, n), key, earlier))
    return jobs


def run_per_file(ctx: StepContext, documents: str, file_fn: FileFn, what: str,
                 with_value: bool = False, reuse_key: tuple | Callable[[str], Any] | None = None
                 ) -> tuple[list[str], dict[str, int]]:
    """Every documents file of step ``documents`` through ``file_fn`` on the engine, one task per file:
    (the file names, the summed stats).

    ``reuse_key``: None when a file's output depends on more than that file and the step's settings;
    otherwise the content of whatever else it depends on (a model's hash; ``()`` for nothing else), or a
    function of the file's name giving that per file (line dedup: the digest of the file's removals).
    Then each file's output is keyed by (step name, version, settings, ``reuse_key``, the input file's
    name and recorded xxh3) and taken from the earlier build of this step when its key is there
    (steps/reuse.py): an edit to one input file recomputes that file only. The counts of taken and
    computed files are the step's ``files/reused`` and ``files/computed`` counters."""
    src, names = input_names(ctx, documents, what)
    jobs = _jobs(ctx, documents, names, src, reuse_key)
    done = (Dataset.from_items(jobs, num_shards=len(jobs))
            .map(partial(_apply, file_fn=file_fn, with_value=with_value, output=ctx.output))
            .collect(ctx.exec_config))
    totals: dict[str, int] = {}
    units: dict[str, reuse.Unit] = {}
    taken = 0
    for key, rel, stats, was_taken in done:
        for k, v in stats.items():
            totals[k] = totals.get(k, 0) + v
        taken += was_taken
        if key is not None:
            units[key] = reuse.Unit(rel, dict(stats))
    if reuse_key is not None:
        reuse.write(ctx.output, units)
        ctx.increment("files/reused", taken)
        ctx.increment("files/computed", len(jobs) - taken)
    return names, dict(sorted(totals.items()))


def documents_result(names: list[str], counters: dict[str, int], **keys: Any) -> dict[str, Any]:
    """What a documents-rewriting step returns: its DocumentsResult (the files it wrote, paths relative
    to its output dir, and the stage's own ``keys``) with its counters."""
    return DocumentsResult.written({**keys, "main_files": [f"{DocumentsDir.MAIN}/{n}" for n in names],
                                    "removed_files": [f"{DocumentsDir.REMOVED}/{n}" for n in names],
                                    "counters": counters})
