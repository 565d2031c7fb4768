"""The ``linededup-index`` step: which documents hold a segment (line or paragraph) that an earlier
document already holds, over the whole corpus; incremental per file.

Two phases:

1. Per documents file, the keys of its long-enough segments (``quality.linededup.keys``), written as a
   content-addressed unit ``reuse/segments/<key>.parquet`` (row, segment key). Its key is the file's
   recorded content and the source's rules (unit, min_chars) only, so a later build takes every file
   that did not change from the earlier build (dedup/keyed.py): segmenting and hashing text in Python
   is the index's cost, and an edit to one file recomputes that file only.
2. The global counts, recomputed from every file's keys each build (numbers only, on the engine): the
   keys are shuffled by value and, for each key held by several documents, every holder after the
   first in the pipeline's order (source in manifest order, file name, row; rows are sorted by id) is
   listed. One parquet per source (file, id, key), sorted, as the per-source rewrite reads it.

Recomputing phase 2 rather than patching a stored count table keeps "which copy survives" a pure
function of the final inputs: it never depends on the order in which files arrived.
"""

from __future__ import annotations

import io
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datakit.core import arrow_numpy as an
from datakit.core.fsio import atomic_write_bytes, read_table
from datakit.core.layout import DocumentsDir, join
from datakit.dedup import batches, keyed
from datakit.dedup.hashing import node_file, node_rank, node_row, pack_nodes, route_keys
from datakit.dedup.layout import parquet_num_rows
from datakit.quality import linededup as ld
from datakit.shuffle import Dataset
from datakit.steps import StepContext, reuse

REMOVALS_SCHEMA = pa.schema([("file", pa.string()), ("id", pa.string()), ("key", pa.int64())])
SEGMENTS_SCHEMA = pa.schema([("row", pa.int32()), ("key", pa.int64())])
SEGMENTS_DIR = "reuse/segments"
KEYS_FORMAT = 1  # bump when the segment keys of a text change


def _file_segments(job: tuple[str, str, str, int]) -> dict[str, int]:
    """One documents file -> its (row, key) table: every long-enough segment's key, once per document."""
    path, dst, unit, min_chars = job
    texts = read_table(path, columns=["text"]).column("text").to_pylist()
    rows, keys = [], []
    for row, text in enumerate(texts):
        ks = ld.keys(text, unit, min_chars)
        rows += [row] * len(ks)
        keys += ks
    table = an.numbers_table({"row": np.array(rows, np.int32), "key": np.array(keys, np.int64)}, SEGMENTS_SCHEMA)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    atomic_write_bytes(dst, buf.getvalue())
    return {"docs": len(texts), "segments": len(keys)}


def _segment_jobs(ctx: StepContext, inputs: list[tuple[str, str, str, int]]
                  ) -> tuple[list[tuple[int, int, str, str, str]], list[keyed.Job]]:
    """(every file as (rank, file index, source, name, its segments file), the unique keyed jobs)."""
    earlier = reuse.load(ctx.earlier)
    files, jobs, seen = [], [], set()
    for rank, (source, step, unit, min_chars) in enumerate(inputs):
        docs = DocumentsDir(ctx.deps[step].output)
        hashes = reuse.output_hashes(docs.root)
        for idx, name in enumerate(sorted(docs.parquet_names("main"))):
            digest = hashes.get(f"{DocumentsDir.MAIN}/{name}")
            # the stage's version too: the version lock then guards the keys (KEYS_FORMAT alone was a
            # bump nothing checks), and every reuse key holds its step's version (`run --dry-run` relies on it)
            key = keyed.key_of(("linededup-keys", ctx.step.version, KEYS_FORMAT, unit, min_chars), digest)
            rel = f"{SEGMENTS_DIR}/{key or reuse.content_key('unrecorded', source, name)}.parquet"
            files.append((rank, idx, source, name, rel))
            if rel not in seen:
                seen.add(rel)
                jobs.append(keyed.Job(key, (rel,), (join(docs.main, name), join(ctx.output, rel), unit, min_chars),
                                      earlier))
    return files, jobs


def _emit(job: tuple[int, int, str], parts: int):
    """One file's segments as (key, node) batches routed by key; node = (source rank, file, row)."""
    rank, idx, path = job
    t = read_table(path)
    cols = an.columns(t, ["key", "row"])
    keys = cols["key"]
    nodes = pack_nodes(rank, idx, cols["row"].astype(np.int64))
    return batches.split({"key": keys, "node": nodes}, route_keys(keys, parts))


def _later_holders(_part: int, b: batches.Batch):
    """Every (key, node) whose document is not the first holder of its key (keys occur once a document)."""
    order = np.lexsort((b["node"], b["key"]))
    key, node = b["key"][order], b["node"][order]
    later = np.zeros(len(key), dtype=bool)
    later[1:] = key[1:] == key[:-1]
    return {"key": key[later], "node": node[later]} if later.any() else None


def _removal_tables(found: batches.Batch, files: list[tuple[int, int, str, str, str]], ctx: StepContext,
                    inputs: list[tuple[str, str, str, int]]) -> dict[str, pa.Table]:
    """Per source: (file, id, key) of every later holder, sorted (ids read from the files that have one)."""
    by_place = {(rank, idx): (source, name) for rank, idx, source, name, _ in files}
    key, node = found.get("key", np.empty(0, np.int64)), found.get("node", np.empty(0, np.int64))
    rank, idx, row = node_rank(node), node_file(node), node_row(node)
    out = {}
    for r, (source, step, _unit, _min) in enumerate(inputs):
        docs = DocumentsDir(ctx.deps[step].output)
        names, ids, keys = [], [], []
        for i in np.unique(idx[rank == r]).tolist():
            sel = (rank == r) & (idx == i)
            name = by_place[(r, i)][1]
            file_ids = read_table(join(docs.main, name), columns=["id"]).column("id")
            names += [name] * int(sel.sum())
            ids += file_ids.take(an.from_numpy(row[sel])).to_pylist()
            keys += key[sel].tolist()
        t = pa.Table.from_arrays([an.strings(names), an.strings(ids), an.column(keys, pa.int64())],
                                 schema=REMOVALS_SCHEMA)
        out[source] = t.take(pc.sort_indices(t, [("file", "ascending"), ("id", "ascending"), ("key", "ascending")]))
    return out


# Segment keys a reducer of the index shuffle holds (16 bytes each: the key and the node).
KEYS_PER_PARTITION = 4 << 20


def default_partitions(keys: int, files: int) -> int:
    """Reducers of the index shuffle, sized by the segment keys (`batches.reducers_for`)."""
    return batches.reducers_for(keys, KEYS_PER_PARTITION, files)


def index(ctx: StepContext, inputs: list[tuple[str, str, str, int]]) -> dict:
    """The step. inputs: (source, its documents step, unit, min_chars), in manifest order."""
    files, jobs = _segment_jobs(ctx, inputs)
    done = keyed.run_all(jobs, [j.job[0] for j in jobs], ctx.output, _file_segments, ctx.exec_config)
    emit = [(rank, idx, join(ctx.output, rel)) for rank, idx, _s, _n, rel in files]
    parts = default_partitions(sum(parquet_num_rows(path) for _r, _i, path in emit), len(files))
    ds = Dataset.from_items(emit, num_shards=max(1, len(emit))).flat_map(partial(_emit, parts=parts))
    found = batches.concat(b for _, b in batches.shuffle(ds, _later_holders, parts).filter(batches.drop_empty)
                           .collect(ctx.exec_config))
    tables = _removal_tables(found, files, ctx, inputs)
    counters = {"removals": int(len(found.get("key", ()))),
                "repeated_keys": int(len(np.unique(found["key"]))) if found else 0}
    for source, t in tables.items():
        buf = io.BytesIO()
        pq.write_table(t, buf, compression="zstd")
        atomic_write_bytes(join(ctx.output, f"{source}.parquet"), buf.getvalue())
        counters[f"removals/{source}"] = t.num_rows
    counters.update(keyed.record(ctx.output, done))
    return {"sources": {s: f"{s}.parquet" for s in tables}, "counters": counters}
