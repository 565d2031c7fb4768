"""Global exact dedup: the same document (same content id) in several sources is kept once.

Normalize already removed exact duplicates inside each source; this step works across sources. Ids are
content hashes, so duplicates share the id: shuffle (id, node) by id, and within each id keep the copy
from the highest-priority source (lowest rank; then the lowest file/row, which only matters if a source
still holds a repeated id). Every other copy is marked in a co-partitioned attribute file of its own
source: `{id, duplicate_of}` (the surviving copy's source name), one row per marked document.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import partial
from typing import Sequence

import numpy as np
import pyarrow as pa

from datakit.core import arrow_numpy as an
from datakit.core.layout import AttributesDir
from datakit.shuffle import ExecConfig, counters

from datakit.steps import reuse

from . import batches, exact_incremental, key_index
from .keyed import Reuse, recorded_hashes
from .hashing import ids_to_u64, node_file, node_rank, node_row, pack_nodes, route_keys, u64_to_ids
from .layout import (
    FileEntry,
    SourceRef,
    as_sources,
    attr_dir,
    file_table,
    invalidate,
    parquet_num_rows,
    per_file_tasks,
    rank_bases,
    read_columns,
    write_meta,
    write_parquet_atomic,
)

EXACT_SCHEMA = pa.schema([("id", pa.string()), ("duplicate_of", pa.string())])
EXACT_PARAMS = {"kind": "exact", "format": 1}


@dataclass
class ExactResult:
    """Per source: attribute dir (relative to out_dir), docs seen and duplicates marked."""

    sources: dict[str, dict] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    params: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ExactResult":
        return cls(**d)


def _read_ids(job: tuple[FileEntry, "exact_incremental.IdsSink | None"], num_parts: int):
    entry, sink = job
    table = read_columns(entry.path, ["id"])
    hi, lo = ids_to_u64(table.column("id"), entry.path)
    if sink is not None:
        sink.write(hi, lo)
    n = len(hi)
    counters.increment(f"docs/{entry.source}", n)
    if n == 0:
        return []
    nodes = pack_nodes(entry.rank, entry.file_idx, np.arange(n))
    return batches.split({"hi": hi, "lo": lo, "node": nodes}, route_keys(hi, num_parts))


def _pick_survivors(_part: int, b: batches.Batch, index: "key_index.IndexSink | None" = None):
    """Within each id, the smallest node survives; the rest are returned with their survivor. With
    ``index``, the partition's ids are also written as a part of the id index the next build queries."""
    if index is not None:
        index.write(_part, b["hi"], b["node"])
    order = np.lexsort((b["node"], b["lo"], b["hi"]))
    hi, lo, node = b["hi"][order], b["lo"][order], b["node"][order]
    first = np.ones(len(hi), dtype=bool)
    first[1:] = (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])
    if first.all():
        return None
    run_start = np.maximum.accumulate(np.where(first, np.arange(len(hi)), 0))
    dup = ~first
    return {"hi": hi[dup], "lo": lo[dup], "node": node[dup], "survivor": node[run_start[dup]]}


def _by_file(item, bases: np.ndarray):
    _, b = item
    gidx = bases[node_rank(b["node"])] + node_file(b["node"])
    return batches.split(b, gidx)


def _write_marks(gidx: int, b: batches.Batch, entries: Sequence[FileEntry], out_dir: str, names: Sequence[str]):
    entry = entries[gidx]
    order = np.argsort(node_row(b["node"]), kind="stable")
    survivor_names = np.asarray(names, dtype=object)[node_rank(b["survivor"][order])]
    table = pa.Table.from_arrays([u64_to_ids(b["hi"][order], b["lo"][order]), an.strings(survivor_names.tolist())],
                                 schema=EXACT_SCHEMA)
    write_parquet_atomic(table, AttributesDir.of(out_dir, entry.source).file(entry.name), EXACT_PARAMS)
    counters.increment(f"exact_duplicates/{entry.source}", len(order))
    return len(order)


# Ids a reducer of the survivor shuffle holds (24 bytes each: two id words and the node).
IDS_PER_PARTITION = 1 << 20


def default_partitions(rows: int, files: int) -> int:
    """Reducers of the survivor shuffle, sized by the ids (`batches.reducers_for`)."""
    return batches.reducers_for(rows, IDS_PER_PARTITION, files)


def exact_dups(
    sources: Sequence[SourceRef | tuple],
    out_dir: str,
    exec_config: ExecConfig | None = None,
    *,
    num_partitions: int | None = None,
    reuse_from: Reuse | None = None,
) -> ExactResult:
    """Mark every cross-source (or leftover in-source) exact duplicate except one survivor per id.

    Writes `out_dir/attributes/<source>/<same file names>` + `attrs.json` for every source (a file with
    no duplicates gets an empty attribute file: a missing file is an error downstream, never "keep").
    ``reuse_from``: keep a state for the next build, and apply this build as a change to the earlier
    build's state when it has a usable one (exact_incremental.py): the same marks, byte for byte.
    """
    srcs = as_sources(sources)
    entries = file_table(srcs)
    names = [s.name for s in srcs]
    for s in srcs:
        invalidate(attr_dir(out_dir, s.name))
    rows = np.array([parquet_num_rows(e.path) for e in entries], np.int64)
    parts = num_partitions or default_partitions(int(rows.sum()), len(entries))
    state, tokens = _state(srcs, entries, out_dir, reuse_from)
    counters = None
    if state is not None:
        old = exact_incremental.load(reuse_from.earlier, state.folder)
        if old is not None:
            counters = exact_incremental.run(exact_incremental.Change(
                entries, tokens, rows, names, out_dir, EXACT_PARAMS, EXACT_SCHEMA, old, state, reuse_from.earlier))
    if counters is None:
        counters = _full(entries, names, out_dir, parts, exec_config, state, tokens)
        if state is not None:
            exact_incremental.record_full(state, entries, tokens, rows, parts)
    result = ExactResult(counters=dict(sorted(counters.items())), params=dict(EXACT_PARAMS))
    for rank, src in enumerate(srcs):
        files = [e.name for e in entries if e.rank == rank]
        c = {
            "docs": counters.get(f"docs/{src.name}", 0),
            "duplicates": counters.get(f"exact_duplicates/{src.name}", 0),
        }
        write_meta(attr_dir(out_dir, src.name), {
            "kind": "exact", "source": src.name, "params": EXACT_PARAMS, "files": files, "counters": c,
            "priority": src.priority,
        })
        result.sources[src.name] = {"attributes": AttributesDir.rel(src.name), **c}
    return result


def _state(srcs: Sequence[SourceRef], entries: Sequence[FileEntry], out_dir: str, reuse_from: Reuse | None
           ) -> tuple["exact_incremental.State | None", np.ndarray | None]:
    """The state this build keeps for the next (None: no reuse, or an input file without a recorded
    content hash), and each file's token."""
    if reuse_from is None:
        return None, None
    reuse.write(out_dir, {})  # no per-file units: reuse.json only lets the next build load this one
    hashes = recorded_hashes([s.dir for s in srcs])
    if not all(e.path in hashes for e in entries):
        return None, None
    tokens = np.array([key_index.file_token(e.source, e.name, hashes[e.path]) for e in entries], np.uint64)
    return exact_incremental.State(out_dir, exact_incremental.folder_for(reuse_from.settings), [s.name for s in srcs]), tokens


def _full(entries: Sequence[FileEntry], names: Sequence[str], out_dir: str, parts: int,
          exec_config: ExecConfig | None, state: "exact_incremental.State | None", tokens: np.ndarray | None
          ) -> dict[str, int]:
    """Every id of every file on the engine (and the state's ids and index on the way)."""
    file_shards = max(1, min(len(entries), parts))
    bases = rank_bases(entries)
    sinks = ([exact_incremental.IdsSink(state.root, int(t)) for t in tokens] if state is not None
             else [None] * len(entries))
    index = (key_index.IndexSink(state.root, exact_incremental.SEGMENT_REL, parts, tokens, bases) if state is not None
             else None)
    ds = per_file_tasks([(e, sinks[e.gidx]) for e in entries], [e.path for e in entries])
    ds = ds.flat_map(partial(_read_ids, num_parts=parts))
    ds = batches.shuffle(ds, partial(_pick_survivors, index=index), parts).filter(batches.drop_empty)
    ds = ds.flat_map(partial(_by_file, bases=bases))
    ds = batches.shuffle(ds, partial(_write_marks, entries=entries, out_dir=out_dir, names=names), file_shards)
    run = ds.run(exec_config)
    written = {gidx for gidx, _ in run.items}
    empty = an.empty(EXACT_SCHEMA)
    for e in entries:
        if e.gidx not in written:
            write_parquet_atomic(empty, AttributesDir.of(out_dir, e.source).file(e.name), EXACT_PARAMS)
    return dict(run.counters)
