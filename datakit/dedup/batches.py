"""Columnar batches through the engine's shuffle: partition-level group_by.

Dedup moves tens of items per document (one per LSH band, one per graph edge). Shuffling them as
individual Python objects would cost microseconds each in pickling and per-key reducer calls, more than
all the hashing. So the dedup stages shuffle *batches*: a map task splits its numpy columns by target
partition and emits one `(partition, batch)` item per partition; `group_by` on the partition number
(an int in [0, N), which the engine routes to shard N unchanged) hands each reducer all batches of its
partition, which it concatenates and processes with array operations. The engine still does all the
data movement (files, sidecars, spills, retries); we only choose coarser items.

A batch is a dict of equal-length columns; a `Ragged` column holds a variable-length array per row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from datakit.shuffle import Dataset


@dataclass
class Ragged:
    """Row i is values[offsets[i]:offsets[i+1]]."""

    values: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1


Batch = dict  # str -> np.ndarray | Ragged


def batch_len(batch: Batch) -> int:
    for v in batch.values():
        return len(v)
    return 0


def take_ragged(col: Ragged, idx: np.ndarray) -> Ragged:
    """Rows `idx` of a ragged column, concatenated in that order.

    One slice per row and a single concatenate: rows are long (hundreds of values), so this beats an
    element-wise index gather, which would materialize an index array as large as the data.
    """
    idx = np.asarray(idx, dtype=np.int64)
    starts = col.offsets[idx]
    lengths = col.offsets[idx + 1] - starts
    offs = np.zeros(len(idx) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offs[1:])
    if len(idx) == 0:
        return Ragged(col.values[:0].copy(), offs)
    vals = col.values
    return Ragged(np.concatenate([vals[s : s + n] for s, n in zip(starts.tolist(), lengths.tolist())]), offs)


def take(batch: Batch, idx: np.ndarray) -> Batch:
    return {k: take_ragged(v, idx) if isinstance(v, Ragged) else v[idx] for k, v in batch.items()}


def concat(batches: Iterable[Batch]) -> Batch:
    batches = [b for b in batches if b is not None]
    if not batches:
        return {}
    if len(batches) == 1:
        return batches[0]
    out: Batch = {}
    for k, v0 in batches[0].items():
        if isinstance(v0, Ragged):
            vals = np.concatenate([b[k].values for b in batches])
            lengths = np.concatenate([np.diff(b[k].offsets) for b in batches])
            offs = np.zeros(len(lengths) + 1, dtype=np.int64)
            np.cumsum(lengths, out=offs[1:])
            out[k] = Ragged(vals, offs)
        else:
            out[k] = np.concatenate([b[k] for b in batches])
    return out


def split(batch: Batch, part: np.ndarray) -> list[tuple[int, Batch]]:
    """[(partition, rows of that partition)] for every partition present, in partition order."""
    if batch_len(batch) == 0:
        return []
    order = np.argsort(part, kind="stable")
    sorted_parts = part[order]
    cuts = np.flatnonzero(np.diff(sorted_parts)) + 1
    bounds = np.concatenate([[0], cuts, [len(order)]])
    return [
        (int(sorted_parts[b0]), take(batch, order[b0:b1])) for b0, b1 in zip(bounds[:-1], bounds[1:])
    ]


def split_sorted(batch: Batch, part: np.ndarray) -> list[tuple[int, Batch]]:
    """Like `split`, for rows already ordered by partition: every piece is a view, nothing is copied."""
    if batch_len(batch) == 0:
        return []
    cuts = np.flatnonzero(np.diff(part)) + 1
    bounds = np.concatenate([[0], cuts, [len(part)]]).tolist()
    out = []
    for b0, b1 in zip(bounds[:-1], bounds[1:]):
        piece = {}
        for k, v in batch.items():
            if isinstance(v, Ragged):
                o0, o1 = int(v.offsets[b0]), int(v.offsets[b1])
                piece[k] = Ragged(v.values[o0:o1], v.offsets[b0 : b1 + 1] - o0)
            else:
                piece[k] = v[b0:b1]
        out.append((int(part[b0]), piece))
    return out


def _partition_key(item):
    return item[0]


class _Reduce:
    """reducer(partition, concatenated batch) -> result; the engine gets (partition, result)."""

    def __init__(self, fn: Callable) -> None:
        self.fn = fn

    def __call__(self, key, items):
        return (key, self.fn(key, concat(b for _, b in items)))


def shuffle(ds: Dataset, reducer: Callable[[int, Batch], object], num_shards: int) -> Dataset:
    """group_by partition over `(partition, batch)` items; yields `(partition, reducer result)`.

    Partitions are ints; those in [0, num_shards) land on that shard, larger ones (e.g. a global file
    index when there are fewer shards than files) are spread by the engine's hash, still one reducer
    call per partition.
    """
    return ds.group_by(_partition_key, _Reduce(reducer), num_shards=max(1, num_shards))


MAX_REDUCERS = 512


def reducers_for(keys: int, per_reducer: int, files: int) -> int:
    """Reducers for a shuffle of ``keys`` items, ``per_reducer`` each, at most one per input file and
    ``MAX_REDUCERS`` in all. Never simply one per file: with ~8 MiB normalize parts the file count
    grows with the corpus, and a shuffle's map x reduce frames with its square (exact dedup at 4 GB,
    about 500 files: 164 CPU-s where 5 at 1 GB; 400 files of 229k documents: 51.5 CPU-s with 400
    reducers, 4.2 with one). The count changes speed and memory, never a result."""
    return max(1, min(MAX_REDUCERS, files, -(-keys // per_reducer)))


def drop_empty(item) -> bool:
    return item[1] is not None
