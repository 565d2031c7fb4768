"""The per-file document transform that stages rewriting documents share (user stages, quality, line
dedup, PII): each documents file of the input step becomes a file of the same name in the step's
``outputs/main/`` (what is kept, sorted by id) and ``outputs/removed/`` (id, reason, detail, and for
the built-in stages the measured value that removed it and what else they record of a removed row:
its language for the quality stage), one engine task per file.

A transform that changes a document's text gives it the new text's content id (ids are content hashes)
and re-sorts the file; two documents made identical keep one, the other is removed as a duplicate.
"""

from __future__ import annotations

import contextlib
import dataclasses
import posixpath
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datakit.core import arrow_numpy as an
from datakit.core.documents import parquet_options
from datakit.core.fsio import (
    atomic_output, is_local, link_or_copy, local_path, open_read, read_parquet_metadata, read_table, write_noted,
)
from datakit.core.layout import DocumentsDir, join
from datakit.core.results import DocumentsResult
from datakit.shuffle import Dataset, counters, small_job_config_for_files
from datakit.steps import StepContext, reuse

REMOVED_SCHEMA = pa.schema([("id", pa.string()), ("reason", pa.string()), ("detail", pa.string())])
REMOVED_VALUE_SCHEMA = REMOVED_SCHEMA.append(pa.field("value", pa.float64()))
# A per-file function: (file name, its table) -> (kept table, removed rows, stats); removed rows are
# tuples in the order of the step's removed schema (id, reason, detail, then the stage's own columns;
# missing trailing values are null). The transform reads the file (through the store
# module) and writes the results, so stage code never opens a file.
FileFn = Callable[[str, pa.Table], tuple[pa.Table, list[tuple], dict[str, int]]]
# A row-wise per-file function (one that keeps the rows it keeps in their order and looks at no other
# row: scoring) can be given a file in batches of about this many bytes of column data
# (`run_per_file(batch_bytes=)`): a worker then holds one batch, not the file.
BATCH_BYTES = 1 << 20


def table_bytes(table: pa.Table) -> bytes:
    """The table as a documents file's bytes. Encoded into Arrow's own buffer, not a Python BytesIO: the
    same bytes, 7-8% less CPU over a takedown's files (12 of 12 interleaved rounds on 16 files)."""
    buf = pa.BufferOutputStream()
    pq.write_table(table, buf, **parquet_options(table.schema))
    return buf.getvalue().to_pybytes()


def removed_table(removed: list[tuple], schema: pa.Schema = REMOVED_SCHEMA) -> pa.Table:
    """The removed rows as a table of ``schema`` (REMOVED_SCHEMA's columns first), sorted by id."""
    if not removed:  # built without pa.array, which imports pandas (~50 MB) into a worker that has no use for it
        return an.empty(schema)
    cols = [an.column([r[i] if i < len(r) else None for r in removed], f.type) for i, f in enumerate(schema)]
    t = pa.Table.from_arrays(cols, schema=schema)
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
    """The two outputs of one file, each noted with its digest (`fsio.write_noted`: the step's manifest
    does not read them back)."""
    write_noted(dst_main, table_bytes(kept))
    write_noted(dst_removed, table_bytes(removed_table(removed, schema)))


def transform_file(src: str, dst_main: str, dst_removed: str, file_fn: FileFn, removed_schema: pa.Schema,
                   batch_bytes: int | None = None, table: pa.Table | None = None) -> dict[str, int]:
    """One documents file through ``file_fn``, its two outputs written: the stats. ``batch_bytes``
    None: the function gets the whole file. Otherwise it gets the file's record batches of about
    ``batch_bytes`` of column data one by one (it must be row-wise: `BATCH_BYTES`), each result
    written as the output's next row group as it comes, the removed rows and stats summed: a worker
    never holds the file's table, its scoring arrays or its encoded copy. The quality classifier's
    scoring of benchmarks/classifier.py's 10 MB file peaked at 142-146 MB RSS this way, 225 whole.
    ``table``: the file's table, when the caller has read it already (whole files only). What is
    written whole is noted with its digest (`write_file`); a streamed output is hashed by the manifest."""
    name = src.rstrip("/").rsplit("/", 1)[-1]
    if batch_bytes is None:
        kept, removed, stats = file_fn(name, read_table(src) if table is None else table)
        write_file(dst_main, dst_removed, kept, removed, removed_schema)
        return stats
    removed, stats, writer = [], {}, None
    with _parquet_file(src) as reader, atomic_output(dst_main) as out:
        try:
            for batch in _batches(reader, batch_bytes):
                kept, gone, got = file_fn(name, pa.Table.from_batches([batch]))
                if writer is None:
                    writer = _writer(out, kept.schema)
                writer.write_table(kept)
                removed += gone
                for k, v in got.items():
                    stats[k] = stats.get(k, 0) + v
            if writer is None:  # no rows: the function's output schema, from an empty table
                kept, removed, stats = file_fn(name, an.empty(reader.schema_arrow))
                writer = _writer(out, kept.schema)
                writer.write_table(kept)
        finally:
            if writer is not None:  # also on an error: the writer must not close itself later on a closed file
                writer.close()
    # The reader's page buffers come from Arrow's default pool (mimalloc), which keeps the pages it
    # freed: given back here, the next file's batches do not pile up on them (5 MB of the benchmark
    # worker's peak RSS, one call per file).
    pa.default_memory_pool().release_unused()
    write_noted(dst_removed, table_bytes(removed_table(removed, removed_schema)))
    return stats


def _writer(out: Any, schema: pa.Schema) -> pq.ParquetWriter:
    """The streamed output's writer, encoding as `table_bytes` (`parquet_options`)."""
    return pq.ParquetWriter(out, schema, **parquet_options(schema))


@contextlib.contextmanager
def _parquet_file(path: str) -> Iterator[Any]:
    """A documents file opened for reading in batches (a ``pq.ParquetReader``, which takes a memory
    pool where ``pq.ParquetFile`` does not): a local one memory-mapped (its column chunks are not
    copied), without pre-buffering (which reads every column chunk of a row group before the first
    batch).

    Its arrays come from the system allocator, not Arrow's default mimalloc: the reader reserves
    each batch's text buffer for the rest of its page (a page holds 1,024 documents as the stages
    write them: 7 MB on the classifier benchmark) then shrinks it to the batch, and mimalloc keeps the
    pages those reserves touch (reading that 10 MB file in 1 MB batches: 46 MB more anonymous memory;
    15 MB with the system allocator, which maps a large reserve and unmaps what is shrunk away)."""
    with (contextlib.nullcontext(local_path(path)) if is_local(path) else open_read(path)) as f:
        reader = pq.ParquetReader(memory_pool=pa.system_memory_pool())
        reader.open(f, pre_buffer=False, use_memory_map=is_local(path))
        try:
            yield reader
        finally:
            reader.close()


def _batches(reader: Any, batch_bytes: int) -> Iterator[pa.RecordBatch]:
    """The file's rows in record batches of about ``batch_bytes`` of uncompressed column data (rows
    of the file's average size; at least one row), read on this thread (Arrow's reader threads each
    take their own allocator pages)."""
    meta = reader.metadata
    size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    rows = max(1, batch_bytes * meta.num_rows // max(size, 1))
    return reader.iter_batches(rows, list(range(meta.num_row_groups)), use_threads=False)


class FileColumns:
    """A documents file's columns, each read at most once: a per-file key reads the few it needs
    (`read`), and a rewrite then reads only the rest (`table`). A first takedown had read each file's id
    columns for its key, then the whole file again; a file whose key says it stays as it is was, and is,
    read no further."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._schema: pa.Schema | None = None
        self._columns: dict[str, pa.ChunkedArray] = {}

    @property
    def schema(self) -> pa.Schema:
        if self._schema is None:
            self._schema = read_parquet_metadata(self.path).schema.to_arrow_schema()
        return self._schema

    def read(self, names: Sequence[str]) -> pa.Table:
        """These columns (each read once, whatever was asked before), as a table in this order."""
        missing = [n for n in names if n not in self._columns]
        if missing:
            got = read_table(self.path, columns=missing)
            self._columns.update(zip(missing, got.columns))
        return pa.Table.from_arrays([self._columns[n] for n in names], names=list(names))

    def table(self) -> pa.Table:
        """The whole file, as `read_table` gives it: the columns not read yet are read now."""
        names = self.schema.names
        return pa.Table.from_arrays(self.read(names).columns, schema=self.schema)


@dataclass(frozen=True)
class _Job:
    """One file of a per-file transform: where it is read and written, and (with reuse) its content key
    and the earlier build to look the key up in."""

    src: str
    dst_main: str
    dst_removed: str
    key: str | None = None
    earlier: reuse.Earlier | None = None
    key_fn: Callable[[FileColumns], Any] | None = None
    is_unchanged: Callable[[Any], dict[str, int] | None] | None = None
    unchanged: dict[str, int] | None = None  # the file passes through as it is, with these stats
    part_to_fn: bool = False  # the file function takes the per-file part (`FileKey.part_to_fn`)


# One file's outcome: (key, the two files relative to the step dir, stats, whether it was taken).
Done = tuple[str | None, tuple[str, str], dict[str, int], bool]


def _result(job: _Job, stats: dict[str, int], taken: bool) -> Done:
    rel = (f"{DocumentsDir.MAIN}/{posixpath.basename(job.dst_main)}",
           f"{DocumentsDir.REMOVED}/{posixpath.basename(job.dst_removed)}")
    return job.key, rel, stats, taken


def _take(job: _Job, output: str) -> Done | None:
    """The file's earlier result taken whole (a link and a hash check), or None."""
    unit = reuse.take(job.earlier, job.key, output) if job.key is not None else None
    return None if unit is None else _result(job, dict(unit.stats), True)


def _apply(job: _Job, file_fn: FileFn, removed_schema: pa.Schema, output: str, batch_bytes: int | None = None
           ) -> Done:
    """One file through ``file_fn``, or its earlier result taken whole (a file keyed by a per-file part,
    which only its task reads): `_result`."""
    columns = None
    if job.key is not None and job.key_fn is not None:
        columns = FileColumns(job.src)
        part = job.key_fn(columns)
        job = dataclasses.replace(job, key=reuse.content_key(job.key, part),
                                  unchanged=job.is_unchanged(part) if job.is_unchanged else None)
        if job.part_to_fn:
            file_fn = partial(file_fn, part=part)
    done = _take(job, output)
    if done is None and job.unchanged is not None:  # nothing to do to this file: its bytes, an empty removed file
        link_or_copy(job.src, job.dst_main)
        write_noted(job.dst_removed, table_bytes(removed_table([], removed_schema)))
        done = _result(job, job.unchanged, False)
    elif done is None:
        table = columns.table() if columns is not None and batch_bytes is None else None
        stats = transform_file(job.src, job.dst_main, job.dst_removed, file_fn, removed_schema, batch_bytes, table)
        done = _result(job, stats, False)
    for k, v in done[2].items():
        counters.increment(k, v)
    return done


def _take_known(jobs: list[_Job], output: str) -> tuple[list[tuple], list[_Job]]:
    """(the files taken here, in the driver, the jobs left to compute). A file whose key is known before
    its task is taken here: a link and a hash check cost less than a task, and an edit of one file of
    many then starts no worker pool for the others. A file keyed by a per-file part is left to its task
    (only reading it gives the key); a job taking nothing here does not try again in its task."""
    done, todo = [], []
    for job in jobs:
        taken = _take(job, output) if job.key_fn is None else None
        if taken is not None:
            done.append(taken)
        else:
            todo.append(job if job.key_fn is not None else dataclasses.replace(job, earlier=None))
    return done, todo


def input_names(ctx: StepContext, documents: str, what: str) -> tuple[DocumentsDir, list[str]]:
    src = DocumentsDir(ctx.deps[documents].output)
    names = src.parquet_names("main")
    if not names:
        raise ValueError(f"{what}: no documents under {src.main} (its input step {documents} wrote none)")
    return src, names


@dataclass(frozen=True)
class FileKey:
    """How a per-file step keys its files for reuse (steps/reuse.py): ``settings``, what besides the
    file its output depends on (None: the step's whole config); ``by_name``, what else a file's output
    depends on, by file name (computed before the tasks); and ``per_file``, a function of the input
    file's `FileColumns` giving what of the file and the settings decides its output, when that is less
    than the settings (a takedown list: only the entries found in that file), read in the file's task
    (what it reads there is not read again if the file is then rewritten)."""

    settings: Any = None
    per_file: Callable[[FileColumns], Any] | None = None
    # A function of the file's name, computed before the tasks, giving what else its output depends on
    # (line dedup: the digest of that file's removals).
    by_name: Callable[[str], Any] | None = None
    # Given the per-file part: the file's stats when the step leaves the file exactly as it is (then its
    # bytes are linked, not re-encoded: a later step's key for it is unchanged too), else None.
    unchanged: Callable[[Any], dict[str, int] | None] | None = None
    # The file function takes the per-file part as its ``part`` argument, so that what the key found (a
    # takedown's matches) is not looked for again when the file is rewritten.
    part_to_fn: bool = False


def _jobs(ctx: StepContext, names: list[str], src: DocumentsDir, reuse_key: FileKey | None) -> list[_Job]:
    dst = DocumentsDir(ctx.output)
    if reuse_key is None:
        return [_Job(join(src.main, n), join(dst.main, n), join(dst.removed, n)) for n in names]
    hashes = reuse.output_hashes(src.root)
    earlier = reuse.load(ctx.earlier)
    settings = ctx.step.config if reuse_key.settings is None else reuse_key.settings
    jobs = []
    for n in names:
        digest = hashes.get(f"{DocumentsDir.MAIN}/{n}")
        extra = reuse_key.by_name(n) if reuse_key.by_name is not None else None
        key = None if digest is None else reuse.content_key(ctx.step.name, ctx.step.version, settings, extra, n,
                                                            digest)
        jobs.append(_Job(join(src.main, n), join(dst.main, n), join(dst.removed, n), key, earlier,
                         reuse_key.per_file, reuse_key.unchanged, part_to_fn=reuse_key.part_to_fn))
    return jobs


def run_per_file(ctx: StepContext, documents: str, file_fn: FileFn, what: str,
                 removed_schema: pa.Schema = REMOVED_SCHEMA, reuse_key: FileKey | None = None,
                 batch_bytes: int | None = None) -> tuple[list[str], dict[str, int]]:
    """Every documents file of step ``documents`` through ``file_fn`` on the engine, one task per file:
    (the file names, the summed stats); removed rows are written with ``removed_schema``.

    ``reuse_key``: None when a file's output depends on more than that file and the step's settings.
    Otherwise each file's output is keyed by (step name, version, the key's settings, the input file's
    name and recorded xxh3, and its ``per_file`` part) and taken from the earlier build of this step
    when its key is there (steps/reuse.py): an edit to one input file recomputes that file only. Files
    whose key needs no read are taken here, before any task; the files left to compute run inline
    when they are few bytes (`small_job_config_for_files`). The counts of taken and computed files are
    the step's ``files/reused`` and ``files/computed`` counters. ``batch_bytes``: a row-wise
    ``file_fn`` sees each file in batches (`transform_file`)."""
    src, names = input_names(ctx, documents, what)
    jobs = _jobs(ctx, names, src, reuse_key)
    done, todo = _take_known(jobs, ctx.output)
    if todo:  # a few files (an edit's) run in this process: the pool would cost more to start than they do
        engine = small_job_config_for_files(ctx.exec_config, [j.src for j in todo])
        done += (Dataset.from_items(todo, num_shards=len(todo))
                 .map(partial(_apply, file_fn=file_fn, removed_schema=removed_schema, output=ctx.output,
                              batch_bytes=batch_bytes))
                 .collect(engine))
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
