"""A part as read, staged as an uncompressed Arrow IPC file until finishing writes its parquet once.

Why not parquet: a part learns only after every unit is read which ids it loses to earlier units
(`finish.py`), and on a corpus with copies across files nearly every part loses some. Written as
parquet first, such a part was encoded and zstd-compressed, read back and encoded again. Staged as
Arrow IPC it costs a copy into the page cache, is read back by memory map (no decoding), and its
parquet is written once, by finishing, with its losses and the source-wide schema applied.

Each batch carries the number of the row group it belongs to (``_RG`` in its custom metadata), so the
parquet file is cut into the same row groups (content-cut batches, `write._Batched`) whatever chunks
pyarrow made of a batch. Parts taken from an earlier build may be parquet (finished as read, at their
final place): every reader here takes either, by suffix.
"""

from __future__ import annotations

from typing import IO, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from datakit.core.fsio import atomic_output, is_local, local_path, open_read

SUFFIX = ".arrow"
_RG = b"row_group"


def staged_name(name: str) -> str:
    """The staged file's name for the part named ``name`` (``unit-<hex>.parquet``)."""
    return name[: -len(".parquet")] + SUFFIX if name.endswith(".parquet") else name + SUFFIX


def is_staged(path: str) -> bool:
    return path.endswith(SUFFIX)


class StagedWriter:
    """Row groups appended to one IPC file under a fixed schema (the file object is the caller's)."""

    def __init__(self, f: IO[bytes], schema: pa.Schema) -> None:
        self._w = pa.ipc.new_file(f, schema)
        self.groups = 0

    def write_group(self, table: pa.Table) -> None:
        meta = {_RG: str(self.groups).encode()}
        for batch in table.to_batches():
            self._w.write_batch(batch, custom_metadata=meta)
        self.groups += 1

    def close(self) -> None:
        self._w.close()


def _open_ipc(path: str) -> pa.ipc.RecordBatchFileReader:
    """A reader over the file, memory-mapped when local (the batches are then views, not copies)."""
    if is_local(path):
        return pa.ipc.open_file(pa.memory_map(local_path(path)))
    with open_read(path) as f:
        return pa.ipc.open_file(pa.BufferReader(f.read()))


def read_groups(path: str, schema: pa.Schema | None = None) -> Iterator[pa.Table]:
    """The part's row groups as tables, in order (parquet or staged)."""
    if not is_staged(path):
        with open_read(path) as f:
            pf = pq.ParquetFile(f)
            for i in range(pf.num_row_groups):
                yield pf.read_row_group(i)
        return
    r = _open_ipc(path)
    batches: list[pa.RecordBatch] = []
    current = None
    for i in range(r.num_record_batches):
        batch, meta = r.get_batch_with_custom_metadata(i)
        rg = meta[_RG] if meta is not None else str(i).encode()
        if batches and rg != current:
            yield pa.Table.from_batches(batches, r.schema)
            batches = []
        current = rg
        batches.append(batch)
    if batches:
        yield pa.Table.from_batches(batches, r.schema)


def stage_parquet(src: str, dst: str) -> None:
    """Stage a parquet part as read (taken from an earlier build, where finishing had left it as it
    was): the same row groups under the same schema, as a fresh build stages it."""
    with open_read(src) as f:
        schema = pq.ParquetFile(f).schema_arrow
    with atomic_output(dst) as out:
        w = StagedWriter(out, schema)
        for t in read_groups(src):
            w.write_group(t)
        w.close()


def read_schema(path: str) -> pa.Schema:
    """The part's Arrow schema as written (parquet footer or IPC header)."""
    if is_staged(path):
        return _open_ipc(path).schema
    with open_read(path) as f:
        return pq.ParquetFile(f).schema_arrow


def read_ids(path: str) -> list[str]:
    """The part's id column (a staged file reads only the id buffers, through the memory map)."""
    if not is_staged(path):
        with open_read(path) as f:
            return pq.read_table(f, columns=["id"]).column("id").to_pylist()
    r = _open_ipc(path)
    i = r.schema.get_field_index("id")
    return [v for k in range(r.num_record_batches) for v in r.get_batch(k).column(i).to_pylist()]


__all__ = ["SUFFIX", "StagedWriter", "is_staged", "read_groups", "read_ids", "read_schema", "stage_parquet", "staged_name"]
