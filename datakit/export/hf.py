"""Hugging Face ``datasets`` directories, as ``Dataset.save_to_disk`` lays them out and
``datasets.load_from_disk`` reads them: per component and split a directory of Arrow IPC *stream* files
(``data-NNNNN-of-MMMMM.arrow``, one per cache shard) with ``state.json`` (the file list) and
``dataset_info.json`` (the features: ``input_ids``, a list of token ids; spelled ``Sequence``, which
every `datasets` release reads, 2.x included). The same rows also go to ``parquet/data-NNNNN-of-MMMMM
.parquet`` beside them, for ``load_dataset("parquet", data_files=...)`` and any other parquet reader.

Rows are one per document (EOS included), or, with ``seq_len``, rows of exactly ``seq_len`` tokens cut
from the split's documents back to back (as `run_clm`'s ``group_texts`` packs them: the remainder under
one row is left out). Each cache shard is one task either way, written in record batches, so memory
stays bounded by one batch. A packed row starting near a shard's end takes its last tokens from the
head of the shards after it (read alone, a ranged read on an object store), so rows never depend on
how the cache was sharded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from datakit.core.fsio import atomic_output, atomic_write_bytes

from .inputs import ShardRef, head_tokens, iter_chunks, load_shard, rel

BATCH_TOKENS = 1 << 22
COLUMN = "input_ids"
PARQUET_DIR = "parquet"


@dataclass(frozen=True)
class HfShard:
    """One task: cache shard ``ref`` (shard ``ref.index`` of ``total``) into ``dest_dir``. Packed
    (``seq_len``): ``start`` is the shard's first token's position in its split, ``rows`` the number of
    whole rows the split holds, ``following`` the shards after it that the last row may reach into."""

    ref: ShardRef
    total: int
    dest_dir: str
    dtype: str
    seq_len: int | None = None
    start: int = 0
    rows: int = 0
    following: tuple[ShardRef, ...] = ()


def value_type(dtype: np.dtype) -> pa.DataType:
    return pa.from_numpy_dtype(np.dtype(dtype).newbyteorder("="))


def data_file(index: int, total: int, suffix: str = "arrow") -> str:
    return f"data-{index:05d}-of-{total:05d}.{suffix}"


def _batch(tokens: np.ndarray, offsets: np.ndarray, dtype: str, schema: pa.Schema) -> pa.RecordBatch:
    values = pa.array(tokens.astype(dtype, copy=False))
    return pa.record_batch([pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values)], schema=schema)


def _document_batches(job: HfShard, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    for tokens, offsets in iter_chunks(job.ref, BATCH_TOKENS):
        yield _batch(tokens, offsets, job.dtype, schema)


def row_range(start: int, tokens: int, seq_len: int, rows: int) -> tuple[int, int]:
    """The packed rows that start inside a shard holding split positions [start, start + tokens)."""
    return min(-(-start // seq_len), rows), min(-(-(start + tokens) // seq_len), rows)


def _packed_batches(job: HfShard, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    n = job.seq_len
    lo, hi = row_range(job.start, job.ref.tokens, n, job.rows)
    if lo == hi:
        return
    tokens, _ = load_shard(job.ref)
    per_batch = max(1, BATCH_TOKENS // n)
    offsets = np.arange(0, (per_batch + 1) * n, n, dtype=np.int64)
    for r in range(lo, hi, per_batch):
        stop = min(hi, r + per_batch)
        a, b = r * n - job.start, stop * n - job.start
        chunk = np.asarray(tokens[a:min(b, len(tokens))])
        if b > len(tokens):  # the last row runs into the next shards
            chunk = np.concatenate([chunk, head_tokens(job.following, b - len(tokens))])
        yield _batch(chunk, offsets[:stop - r + 1], job.dtype, schema)


def shard_jobs(refs: list[ShardRef], dest_dir: str, dtype: str, seq_len: int | None) -> list[HfShard]:
    """One task per cache shard of a component's split; packed, each knows where it starts in the split
    and the shards after it that hold the rest of its last row (at most ``seq_len - 1`` tokens)."""
    if not seq_len:
        return [HfShard(r, len(refs), dest_dir, dtype) for r in refs]
    ends = np.cumsum([r.tokens for r in refs], dtype=np.int64)
    rows = int(ends[-1]) // seq_len if len(refs) else 0
    jobs = []
    for i, ref in enumerate(refs):
        start = int(ends[i]) - ref.tokens
        reach = int(np.searchsorted(ends, ends[i] + seq_len - 1, side="left"))
        jobs.append(HfShard(ref, len(refs), dest_dir, dtype, seq_len, start, rows, tuple(refs[i + 1:reach + 1])))
    return jobs


def write_shard(job: HfShard) -> dict:
    """One cache shard -> one Arrow stream file and one parquet file of ``input_ids`` rows."""
    schema = pa.schema([pa.field(COLUMN, pa.list_(value_type(np.dtype(job.dtype))))])
    name, rows, tokens = data_file(job.ref.index, job.total), 0, 0
    batches = _packed_batches(job, schema) if job.seq_len else _document_batches(job, schema)
    parquet = rel(job.dest_dir, PARQUET_DIR, data_file(job.ref.index, job.total, "parquet"))
    with atomic_output(rel(job.dest_dir, name)) as a, atomic_output(parquet) as p, \
            pa.ipc.new_stream(a, schema) as stream, pq.ParquetWriter(p, schema) as table:
        for batch in batches:
            stream.write_batch(batch)
            table.write_batch(batch)
            rows, tokens = rows + batch.num_rows, tokens + len(batch.column(0).values)
    return {"file": name, "rows": rows, "tokens": tokens}


def write_metadata(dest_dir: str, files: list[str], dtype: str, fingerprint: str) -> None:
    """``state.json`` and ``dataset_info.json``: what ``load_from_disk`` needs besides the data files."""
    state = {"_data_files": [{"filename": f} for f in files], "_fingerprint": fingerprint,
             "_format_columns": None, "_format_kwargs": {}, "_format_type": None,
             "_output_all_columns": False, "_split": None}
    features = {COLUMN: {"feature": {"dtype": np.dtype(dtype).name, "_type": "Value"}, "_type": "Sequence"}}
    info = {"citation": "", "description": "", "features": features, "homepage": "", "license": ""}
    atomic_write_bytes(rel(dest_dir, "state.json"), json.dumps(state, indent=2, sort_keys=True).encode())
    atomic_write_bytes(rel(dest_dir, "dataset_info.json"), json.dumps(info, indent=2, sort_keys=True).encode())
