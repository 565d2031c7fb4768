"""Generic readers and streaming sinks (the listing they read from is `datakit.core.listing`).

Readers are strict: a malformed line raises
with file and line; stages that must tolerate bad records (normalize) bring their own lenient readers.
Sinks stream rows into row groups and publish with temp + rename.
"""

from __future__ import annotations

import gzip
import io
import json
import pickle
from typing import Any, Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from datakit.core.fsio import commit, discard, is_local, open_atomic, open_read
from datakit.core.json_exact import loads
from datakit.core.listing import FileInfo


def open_decompressed(path: str) -> io.BufferedIOBase:
    """Open for reading, decompressing by extension (.gz, .zst)."""
    raw = open_read(path)
    if path.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw)
    if path.endswith((".zst", ".zstd")):
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw, closefd=True))
    return raw


def read_jsonl(file: FileInfo | str) -> Iterator[dict]:
    path = file.path if isinstance(file, FileInfo) else file
    with open_decompressed(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: malformed JSON ({e.msg} at column {e.colno})") from None


def read_parquet(file: FileInfo | str, columns: Sequence[str] | None = None) -> Iterator[dict]:
    path = file.path if isinstance(file, FileInfo) else file
    with open_read(path) as f:
        pf = pq.ParquetFile(f)
        for batch in pf.iter_batches(batch_size=8192, columns=list(columns) if columns else None):
            yield from batch.to_pylist()


def read_parquet_batches(file: FileInfo | str, columns: Sequence[str] | None = None,
                         batch_size: int = 65536) -> Iterator[pa.Table]:
    """The file as Arrow tables (for column-keyed shuffles and map_batches): no Python object per row."""
    path = file.path if isinstance(file, FileInfo) else file
    with open_read(path) as f:
        pf = pq.ParquetFile(f)
        for batch in pf.iter_batches(batch_size=batch_size, columns=list(columns) if columns else None):
            yield pa.Table.from_batches([batch])


def read_text(file: FileInfo | str) -> Iterator[dict]:
    path = file.path if isinstance(file, FileInfo) else file
    with open_decompressed(path) as f:
        yield {"path": path, "text": f.read().decode("utf-8", errors="replace")}


def format_output(pattern: str, shard: int, total: int) -> str:
    return pattern.format(shard=shard, total=total)


class _ParquetSink:
    """Buffers rows into row groups bounded by rows AND estimated bytes, so memory stays flat."""

    def __init__(self, path: str, schema: pa.Schema | None, rows_per_group: int = 65536,
                 bytes_per_group: int = 8 << 20):
        self.path, self.schema, self.rows_per_group = path, schema, rows_per_group
        self.bytes_per_group = bytes_per_group
        self.buffer: list[dict] = []
        self.writer: pq.ParquetWriter | None = None
        self.file, self.tmp = open_atomic(path)
        self.rows = 0
        self.next_check = 256

    def add(self, row: dict) -> None:
        buf = self.buffer
        buf.append(row)
        if len(buf) >= self.next_check:
            avg = len(pickle.dumps(buf[-16:], protocol=5)) / 16 * 3  # Python objects weigh ~3x their pickle
            if len(buf) >= self.rows_per_group or len(buf) * avg >= self.bytes_per_group:
                self._write()
            self.next_check = len(self.buffer) + 256

    def add_table(self, table: pa.Table | pa.RecordBatch) -> None:
        """Arrow batches go straight to row groups (after any buffered rows, keeping input order)."""
        self._write()
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        if self.schema is not None and table.schema != self.schema:
            try:
                table = table.select(self.schema.names).cast(self.schema)
            except (KeyError, pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as e:
                raise ValueError(
                    f"write_parquet {self.path}: a batch does not fit the schema {self.schema}: {e}; "
                    "pass schema= to write_parquet or give every batch the same columns") from None
        self._write_table(table, table.num_rows)

    def _write_table(self, table: pa.Table, rows: int) -> None:
        if self.writer is None:
            self.schema = table.schema
            self.writer = pq.ParquetWriter(self.file, table.schema, compression="zstd")
        self.writer.write_table(table, row_group_size=self.rows_per_group)
        self.rows += rows

    def _write(self) -> None:
        if not self.buffer:
            return
        try:
            table = pa.Table.from_pylist(self.buffer, schema=self.schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise ValueError(
                f"write_parquet {self.path}: rows do not fit the schema {self.schema}: {e}; "
                "pass schema= to write_parquet to fix column types"
            ) from None
        self._write_table(table, len(self.buffer))
        self.buffer = []
        self.next_check = 256

    def close(self) -> None:
        self._write()
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.file, self.schema or pa.schema([]), compression="zstd")
        self.writer.close()
        self.file.close()
        commit(self.tmp, self.path)

    def abort(self) -> None:
        self.file.close()
        discard(self.tmp)


class _JsonlSink:
    def __init__(self, path: str):
        self.path = path
        self.file, self.tmp = open_atomic(path)
        self.stream: Any = self.file
        if path.endswith(".gz"):
            self.stream = gzip.GzipFile(fileobj=self.file, mode="wb", mtime=0)
        elif path.endswith((".zst", ".zstd")):
            self.stream = zstandard.ZstdCompressor(level=3).stream_writer(self.file, closefd=False)
        self.rows = 0

    def add(self, row: Any) -> None:
        self.stream.write(json.dumps(row, ensure_ascii=False).encode("utf-8") + b"\n")
        self.rows += 1

    def add_table(self, table: pa.Table | pa.RecordBatch) -> None:
        for row in table.to_pylist():
            self.add(row)

    def close(self) -> None:
        if self.stream is not self.file:
            self.stream.close()
        self.file.close()
        commit(self.tmp, self.path)

    def abort(self) -> None:
        self.file.close()
        discard(self.tmp)


def write_shard(items: Iterable[Any], kind: str, path: str, schema: pa.Schema | None = None) -> str:
    """Stream one shard into `path` atomically and return the path."""
    sink = _ParquetSink(path, schema) if kind == "parquet" else _JsonlSink(path)
    try:
        for item in items:
            if isinstance(item, (pa.Table, pa.RecordBatch)):
                sink.add_table(item)
            else:
                sink.add(item)
    except BaseException:
        sink.abort()
        raise
    sink.close()
    return path


__all__ = ["read_jsonl", "read_parquet", "read_text", "write_shard", "is_local"]
