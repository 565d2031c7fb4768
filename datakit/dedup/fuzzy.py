"""Fuzzy dedup across sources: LSH buckets -> candidate pairs -> (true Jaccard) -> components -> marks.

1. Buckets: every document with shingles contributes one (bucket key, node) per band. Members of a
   bucket, in node order, are each paired with the `clique_max - 1` before them (default 8): a small
   bucket gives its clique (with verification, a rejected pair cannot hide a true one), a big one
   (boilerplate, templates, a large family of copies) at most clique_max - 1 pairs per member, so the
   work per bucket is linear in its size and one false neighbour does not cut a member off. Without
   verification a chain (clique_max 1) gives the same components as a clique.
2. Verification (on by default): each candidate pair's true Jaccard similarity is computed on the full
   shingle sets, re-derived from the normalized text with the same shingle parameters the minhashes
   used (as 32-bit fingerprints: exact up to a ~1e-4 chance per pair of one spurious shared shingle).
   Pairs below the verification threshold are LSH false positives and are dropped; by default it is
   where the minhashes' bands x rows make a pair a candidate half the time (0.685 for 14 x 8), so
   verification keeps what the LSH was built to find. Texts are streamed from each file by row group,
   only for documents in some candidate pair; each verification partition gets a document's set once,
   however many of its pairs it is in, and merges a bounded chunk of pairs at a time: memory follows
   the documents in pairs, not the file sizes or the number of pairs. Ids are content hashes, so a
   pair's Jaccard is a function of its two ids: each pair is first looked up in the earlier build's
   verified-pair cache (pair_cache.py) and only the pairs it lacks are verified.
3. The keep rule (forest.py): a document with an earlier near-duplicate (a verified pair; by source
   priority, then id) links to the earliest of them, and goes. The trees of that forest are the
   clusters, found as connected components on the engine (components.py). Not the components of all
   pairs: there a later document similar to two earlier ones that share no pair removes one of them.
4. Canonical per cluster: its root, the member from the highest-priority source, then the lowest id (the
   one with no earlier near-duplicate). It does not depend on worker counts, partitioning or the order
   data arrived in. Every member of a non-singleton cluster gets a row in its
   source's co-partitioned attribute file `{id, cluster_id, is_canonical, cluster_size,
   canonical_source, parent_id, parent_source}`; cluster_id is the canonical document's id, parent_id
   the removed member's parent in the forest (step 3 writes each child's parent beside its edges; they
   join the members on the way to the marks). Consolidation drops members with is_canonical == False.

Documents are "nodes": int64 numbers packing (source rank, file, row) (see hashing.py), so every
shuffle moves fixed-width numbers and a node says where to find its text and id again.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Sequence

import numpy as np
import pyarrow as pa

from datakit.core import arrow_numpy as an
from datakit.core.fsio import remove
from datakit.core.layout import AttributesDir, work_part_name
from datakit.shuffle import Dataset, ExecConfig, counters

from datakit.steps import reuse

from . import batches, forest, fuzzy_incremental, fuzzy_state, key_index, pair_cache
from .batches import Ragged
from .fuzzy_core import FUZZY_SCHEMA, file_keys, jaccard_of, marks_digest, marks_table, shingle_rows, window_pairs
from .components import connected_components, write_edges
from .config import DedupConfig
from .hashing import (
    U64,
    ids_to_u64,
    node_file,
    node_rank,
    node_row,
    pack_nodes,
    route_keys,

)
from .layout import (
    AttributeMismatch,
    DedupInputError,
    FileEntry,
    SourceRef,
    as_sources,
    attr_dir,
    check_files_match,
    check_same_params,
    file_table,
    invalidate,
    parquet_num_rows,
    per_file_tasks,
    rank_bases,
    read_columns,
    read_meta,
    resolve_attr_dir,
    write_meta,
    write_parquet_atomic,
)
from .keyed import Reuse, recorded_hashes
from .largest import SampleTexts, file_top, merge_tops, with_samples
from .lsh_params import candidate_threshold

FUZZY_FORMAT = 1
# A forest child's parent, as step 3 writes it for the marks (step 4).
PARENT_SCHEMA = pa.schema([("node", pa.int64()), ("p_hi", pa.uint64()), ("p_lo", pa.uint64()),
                           ("p_rank", pa.int64())])
EDGES_PER_PARTITION = 2_000_000  # graph shuffles: ~64 MB of edge entries per reducer



CLIQUE_MAX = 8  # with verification, buckets up to this size contribute all their pairs (see window_pairs)
MAX_ROUNDS = 100  # connected-components rounds before giving up


def verify_threshold(cfg: DedupConfig, minhash_params: dict) -> float:
    """The verification threshold: ``verify_threshold`` when given, else ``threshold`` when given, else
    the median of the minhashes' LSH S-curve (0.685 for 14 x 8), so candidates and verification aim at
    the same similarity. Read from the minhash sets' recorded bands x rows, not the config's."""
    if cfg.verify_threshold is not None:
        return cfg.verify_threshold
    if cfg.threshold is not None:
        return cfg.threshold
    return round(candidate_threshold(minhash_params["bands"], minhash_params["rows"]), 4)


def _verify_params(cfg: DedupConfig, minhash_params: dict, clique_max: int) -> dict:
    """How candidate pairs were verified, as the attribute sets record it."""
    if not cfg.verify:
        return {"verify": False}
    return {"verify": True, "verify_threshold": verify_threshold(cfg, minhash_params), "clique_max": clique_max}


@dataclass(frozen=True)
class FuzzySource:
    """A normalized source and its minhash step output (either the step dir or attributes/<name>)."""

    name: str
    normalized_dir: str
    minhash_dir: str
    priority: int = 0


@dataclass
class FuzzyResult:
    sources: dict[str, dict] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    cc_rounds: int = 0
    cc_history: list[dict] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)  # seconds per phase (not part of the output)
    largest: list[dict] = field(default_factory=list)  # the largest clusters, with samples (largest.py)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "FuzzyResult":
        return cls(**d)


# ---------------------------------------------------------------- 1. buckets -> candidate pairs
def _bucket_items(job: tuple[FileEntry, str, "fuzzy_state.KeysSink | None"], parts: int):
    entry, mh_path, sink = job
    n, rows, keys = file_keys(mh_path)
    counters.increment("docs", n)
    counters.increment(f"docs/{entry.source}", n)
    counters.increment("docs_without_shingles", n - len(rows))
    if sink is not None:
        sink.write(rows, keys)
    if not len(rows):
        return []
    nodes = pack_nodes(entry.rank, entry.file_idx, rows)
    flat_keys = keys.reshape(-1)
    return batches.split({"key": flat_keys, "node": np.repeat(nodes, keys.shape[1])}, route_keys(flat_keys, parts))


def _bucket_pairs(_part: int, b: batches.Batch, clique_max: int, index: "key_index.IndexSink | None" = None):
    """Candidate pairs of each bucket of this partition (`window_pairs`); with ``index``, the
    partition's entries are also written as a part of the bucket index the next build queries."""
    if index is not None:
        index.write(_part, b["key"], b["node"])
    u, v = window_pairs(b["key"], b["node"], clique_max)
    counters.increment("bucket_pairs", len(u))
    if not len(u):
        return None
    return {"u": u, "v": v}


def _write_candidates(item, out_dir: str):
    part, b = item
    counters.increment("candidate_pairs", len(b["u"]))
    return write_edges(f"{out_dir}/{work_part_name(part)}", b["u"], b["v"])


# ---------------------------------------------------------------- 2. verification by true Jaccard
def _gidx(nodes: np.ndarray, bases: np.ndarray) -> np.ndarray:
    return bases[node_rank(nodes)] + node_file(nodes)


def _request_sides(item, bases: np.ndarray):
    """Each pair to the files of both its nodes (with whatever else the pair carries: its ids)."""
    _, b = item
    u, v = b["u"], b["v"]
    req = {"node": np.concatenate([u, v]), **{k: np.concatenate([c, c]) for k, c in b.items()}}
    return batches.split(req, _gidx(req["node"], bases))


_edge_part = pair_cache.edge_part


def _shingle_sides(gidx: int, b: batches.Batch, entries: Sequence[FileEntry], minhash_params: dict, parts: int):
    """Read the texts this file must supply, once each, and send each verification partition what it needs.

    A pair (u, v) is verified in partition _edge_part(u, v). Each partition gets every node of this file
    that it needs ONCE, as a set row {node, sh}, however many of its pairs the node is in (a member of a
    big bucket is in up to (clique_max - 1) x bands pairs: sending its set per pair made verification
    memory grow with the pairs, not the documents); and each pair as a pair row {u, v}, sent from u's file
    only. Rows of the other kind carry -1 and an empty set.
    """
    order = np.lexsort((b["v"], b["u"], b["node"]))
    node, u, v = b["node"][order], b["u"][order], b["v"][order]
    keep = np.ones(len(node), dtype=bool)
    keep[1:] = (node[1:] != node[:-1]) | (u[1:] != u[:-1]) | (v[1:] != v[:-1])
    node, u, v = node[keep], u[keep], v[keep]
    ids = {k: b[k][order][keep] for k in pair_cache.IDS}
    part = _edge_part(u, v, parts)
    by_part = np.lexsort((node, part))
    first = np.ones(len(by_part), dtype=bool)
    first[1:] = (part[by_part][1:] != part[by_part][:-1]) | (node[by_part][1:] != node[by_part][:-1])
    set_node, set_part = node[by_part][first], part[by_part][first]
    uniq, inverse = np.unique(node_row(set_node), return_inverse=True)
    sets = shingle_rows(entries[gidx].path, uniq, minhash_params)
    counters.increment("verify_texts_read", len(uniq))
    counters.increment("verify_sets_sent", len(set_node))
    is_u = node == u
    pair_u, pair_v, pair_part = u[is_u], v[is_u], part[is_u]
    pair_ids = {k: np.concatenate([np.zeros(len(set_node), U64), c[is_u]]) for k, c in ids.items()}
    n_sets, n_pairs = len(set_node), len(pair_u)
    none = np.full(n_pairs, -1, dtype=np.int64)
    all_part = np.concatenate([set_part, pair_part])
    order = np.argsort(all_part, kind="stable")
    sh = batches.take_ragged(sets, inverse)  # one set per (partition, node)
    empty = np.zeros(n_pairs, dtype=np.int64)
    sh = Ragged(sh.values, np.concatenate([sh.offsets, sh.offsets[-1] + empty]))
    out = {"node": np.concatenate([set_node, none])[order], "u": np.concatenate([np.full(n_sets, -1, np.int64), pair_u])[order],
           "v": np.concatenate([np.full(n_sets, -1, np.int64), pair_v])[order],
           "sh": batches.take_ragged(sh, order), **{k: c[order] for k, c in pair_ids.items()}}
    return batches.split_sorted(out, all_part[order])


def _explode(item):
    return item[1]


def _verify_pairs(part: int, b: batches.Batch, threshold: float, out_dir: str, pairs_dir: str) -> dict:
    """Exact Jaccard of every pair in this partition, vectorized, a bounded chunk of pairs at a time;
    the edges of the pairs at or above the threshold, and every pair with its Jaccard (for the cache).

    The partition holds one set row per node it needs and one row per pair (see _shingle_sides). For a
    chunk of pairs, keys (pair << 32 | fp) of all u sides form one sorted run, those of the v sides
    another; a stable sort of the two runs is a linear merge, and equal neighbours are exactly the
    shared fingerprints of a pair.
    """
    is_set = b["node"] >= 0
    set_rows = np.flatnonzero(is_set)
    set_rows = set_rows[np.argsort(b["node"][set_rows], kind="stable")]
    nodes = b["node"][set_rows]
    pair_rows = np.flatnonzero(~is_set)
    u, v = b["u"][pair_rows], b["v"][pair_rows]
    order = np.lexsort((v, u))
    u, v = u[order], v[order]
    ids = {k: b[k][pair_rows][order] for k in pair_cache.IDS}
    iu, iv = np.searchsorted(nodes, u), np.searchsorted(nodes, v)
    if (len(nodes) and len(np.unique(nodes)) != len(nodes)) or (len(u) and (
            iu.max() >= len(nodes) or iv.max() >= len(nodes)
            or not (np.array_equal(nodes[iu], u) and np.array_equal(nodes[iv], v)))):
        raise RuntimeError(f"verification partition {part}: pairs and shingle sets do not match up (internal error)")
    jac = jaccard_of(b["sh"], set_rows[iu], set_rows[iv])
    ok = jac >= threshold
    counters.increment("pairs_verified_now", len(u))
    counters.increment("verified_pairs", int(ok.sum()))
    counters.increment("rejected_pairs", int(len(u) - ok.sum()))
    name = work_part_name(part)
    return {"edges": write_edges(f"{out_dir}/{name}", u[ok], v[ok]) if ok.any() else None,
            "pairs": pair_cache.write_pairs(f"{pairs_dir}/{name}", u, v, ids, jac) if len(u) else None}


# ---------------------------------------------------------------- 3. the forest of earliest near-duplicates
def _edge_sides(path: str, bases: np.ndarray):
    """Each near-duplicate pair of an edge file to the files of both its documents (`pair_cache.side_ids`
    reads their ids there)."""
    cols = an.columns(read_columns(path, ["u", "v"]), ["u", "v"])
    u, v = cols["u"], cols["v"]
    req = {"node": np.concatenate([u, v]), "u": np.concatenate([u, u]), "v": np.concatenate([v, v])}
    return batches.split(req, _gidx(req["node"], bases))


def _orient_pairs(part: int, b: batches.Batch, parts: int):
    """Each pair with both its ids as (later, earlier, the earlier's priority key) (`forest.orient`), sent
    to the partition of its later document."""
    u, v, uh, ul, vh, vl = pair_cache.both_sides(part, b)
    later, earlier, key = forest.orient(u, v, (node_rank(u), uh, ul), (node_rank(v), vh, vl))
    out = {"later": later, "earlier": earlier, "rank": key[0], "hi": key[1], "lo": key[2]}
    return batches.split(out, route_keys(later, parts))


def _parent_edges(part: int, b: batches.Batch, out_dir: str) -> tuple[str, str] | None:
    """This partition's documents' links to their earliest earlier near-duplicate: the (parent, child)
    edges, and each child's parent by id and source rank (the marks' parent columns)."""
    pick = forest.earliest(b["later"], (b["rank"], b["hi"], b["lo"]))
    if not len(pick):
        return None
    child, parent = b["later"][pick], b["earlier"][pick]
    name = work_part_name(part)
    parents_file = f"{out_dir}/parents/{name}"
    parents = {"node": child, "p_hi": b["hi"][pick], "p_lo": b["lo"][pick], "p_rank": b["rank"][pick]}
    write_parquet_atomic(an.numbers_table(parents, PARENT_SCHEMA), parents_file)
    return write_edges(f"{out_dir}/edges/{name}", parent, child), parents_file


def _forest(edge_files: list[str], b: _Build, graph_parts: int) -> tuple[list[str], list[str]]:
    """Step 3: the forest of the near-duplicate pairs (forest.py): the ids of each pair's documents read
    from their files, then each document's edge to its earliest earlier near-duplicate kept. (The
    forest's edge files, its parent files.)"""
    if not edge_files:
        return [], []
    file_parts = max(1, min(len(b.entries), b.parts))
    ds = Dataset.from_items(edge_files, num_shards=len(edge_files)).flat_map(partial(_edge_sides, bases=b.bases))
    ds = batches.shuffle(ds, partial(pair_cache.side_ids, paths=[e.path for e in b.entries], parts=graph_parts),
                         file_parts)
    ds = batches.shuffle(ds.flat_map(_explode), partial(_orient_pairs, parts=graph_parts), graph_parts)
    ds = batches.shuffle(ds.flat_map(_explode), partial(_parent_edges, out_dir=f"{b.work}/forest"), graph_parts)
    written = sorted(r for _, r in ds.run(b.exec_config).items if r)
    return [e for e, _ in written], [p for _, p in written]


# ---------------------------------------------------------------- 4. canonical members and marks
def _marks_inputs(item: tuple[str, str], bases: np.ndarray):
    """A components file's members (node, its tree's label) or a forest parents file's children (node,
    its parent's id and source rank), in one layout, to the files of their nodes."""
    kind, path = item
    if kind == "parents":
        p = an.columns(read_columns(path, list(PARENT_SCHEMA.names)), list(PARENT_SCHEMA.names))
        node = p["node"]
        out = {"node": node, "root": np.zeros(len(node), np.int64), "is_parent": np.ones(len(node), bool),
               "p_hi": p["p_hi"], "p_lo": p["p_lo"], "p_rank": p["p_rank"]}
        return batches.split(out, _gidx(node, bases))
    cols = an.columns(read_columns(path, ["u", "v"]), ["u", "v"])
    a, b = cols["u"], cols["v"]
    leaf, root = np.maximum(a, b), np.minimum(a, b)
    node = np.concatenate([leaf, root])
    zero = np.zeros(len(node), U64)
    out = {"node": node, "root": np.concatenate([root, root]), "is_parent": np.zeros(len(node), bool),
           "p_hi": zero, "p_lo": zero, "p_rank": np.zeros(len(node), np.int64)}
    return batches.split(out, _gidx(node, bases))


def _attach_ids(gidx: int, b: batches.Batch, entries: Sequence[FileEntry], parts: int):
    """One file's cluster members with their ids, and each child's parent (zero for a root)."""
    is_parent = b["is_parent"]
    kids = batches.take(b, np.flatnonzero(is_parent))
    order = np.flatnonzero(~is_parent)
    order = order[np.argsort(b["node"][order], kind="stable")]
    node, root = b["node"][order], b["root"][order]
    keep = np.ones(len(node), dtype=bool)
    keep[1:] = node[1:] != node[:-1]
    node, root = node[keep], root[keep]
    at = np.searchsorted(node, kids["node"])
    if len(at) and (at.max() >= len(node) or not np.array_equal(node[at], kids["node"])):
        raise RuntimeError(f"fuzzy dedup: a forest child is in no cluster ({entries[gidx].path}); "
                           "this is a bug in datakit, please report it")
    p_hi, p_lo, p_rank = np.zeros(len(node), U64), np.zeros(len(node), U64), np.zeros(len(node), np.int64)
    p_hi[at], p_lo[at], p_rank[at] = kids["p_hi"], kids["p_lo"], kids["p_rank"]
    entry = entries[gidx]
    ids = read_columns(entry.path, ["id"]).column("id").take(an.from_numpy(node_row(node)))
    hi, lo = ids_to_u64(ids, entry.path)
    out = {"node": node, "root": root, "hi": hi, "lo": lo, "p_hi": p_hi, "p_lo": p_lo, "p_rank": p_rank}
    return batches.split(out, route_keys(root, parts))


def _choose_canonical(_part: int, b: batches.Batch, bases: np.ndarray):
    order = np.lexsort((b["lo"], b["hi"], node_rank(b["node"]), b["root"]))
    b = batches.take(b, order)
    root = b["root"]
    first = np.ones(len(root), dtype=bool)
    first[1:] = root[1:] != root[:-1]
    starts = np.flatnonzero(first)
    sizes = np.diff(np.append(starts, len(root)))
    head = np.repeat(starts, sizes)
    counters.increment("clusters", len(starts))
    counters.increment("cluster_members", len(root))
    out = {
        "node": b["node"], "hi": b["hi"], "lo": b["lo"], "is_canonical": first,
        "c_hi": b["hi"][head], "c_lo": b["lo"][head], "c_rank": node_rank(b["node"][head]),
        "size": np.repeat(sizes, sizes), "p_hi": b["p_hi"], "p_lo": b["p_lo"], "p_rank": b["p_rank"],
    }
    return batches.split(out, _gidx(b["node"], bases))


def _write_marks(gidx: int, b: batches.Batch, entries: Sequence[FileEntry], out_dir: str, names: Sequence[str],
                 meta: dict):
    entry = entries[gidx]
    b = batches.take(b, np.argsort(node_row(b["node"]), kind="stable"))
    write_parquet_atomic(marks_table(b, names), AttributesDir.of(out_dir, entry.source).file(entry.name), meta)
    dups = int((~b["is_canonical"]).sum())
    counters.increment(f"duplicates/{entry.source}", dups)
    counters.increment(f"cluster_members/{entry.source}", len(b["node"]))
    return {"rows": len(b["node"]), "max_cluster": int(b["size"].max()), "top": file_top(b, entry.source),
            "digest": marks_digest(b, names)}


# ---------------------------------------------------------------- driver
def _check_inputs(srcs: Sequence[FuzzySource], entries: Sequence[FileEntry]) -> tuple[dict, dict[str, str], np.ndarray]:
    """Every source has a minhash set for exactly its files, all made with one set of parameters; the
    parameters, each source's minhash dir and each file's rows (by gidx)."""
    mh_dirs, metas = {}, []
    rows = np.zeros(len(entries), np.int64)
    for s in srcs:
        d = resolve_attr_dir(s.minhash_dir, s.name)
        meta = read_meta(d)
        if meta.get("kind") != "minhash":
            raise AttributeMismatch(f"{d}: expected a minhash attribute set, found kind {meta.get('kind')!r}")
        files = [e for e in entries if e.source == s.name]
        check_files_match(meta, [e.name for e in files], d)
        for e, covered in zip(files, meta.get("rows", [])):
            have = rows[e.gidx] = parquet_num_rows(e.path)
            if have != covered:
                raise AttributeMismatch(
                    f"{d}/{e.name}: minhashes cover {covered} rows but {e.path} has {have}; the source changed "
                    "after its minhash step ran"
                )
        mh_dirs[s.name] = d
        metas.append((d, meta["params"]))
    return check_same_params(metas, "minhash attribute sets"), mh_dirs, rows


@dataclass(frozen=True)
class _Cache:
    """Where this build writes its verified-pair cache (None: it keeps none), and the earlier build's
    (None: none)."""

    folder: str | None
    earlier: pair_cache.EarlierPairs | None


def _pair_cache(out_dir: str, mh_params: dict, reuse_from: Reuse | None) -> _Cache | None:
    """The verified-pair cache of a build that keeps one (None: a build without reuse keeps none)."""
    if reuse_from is None:
        return None
    rel = pair_cache.cache_dir(mh_params, reuse_from.settings)
    return _Cache(f"{out_dir.rstrip('/')}/{rel}", pair_cache.earlier_pairs(reuse_from.earlier, rel))


@dataclass(frozen=True)
class _Build:
    """One fuzzy build's inputs and settings, as its phases need them."""

    entries: Sequence[FileEntry]
    names: list[str]
    mh_paths: list[str]
    mh_params: dict
    params: dict
    threshold: float | None
    clique_max: int
    parts: int
    bases: np.ndarray
    out_dir: str
    exec_config: ExecConfig | None
    cache: _Cache | None
    state: fuzzy_state.State | None  # the state this build writes for the next (None: it keeps none)
    tokens: np.ndarray | None

    @property
    def work(self) -> str:
        return f"{self.out_dir.rstrip('/')}/work"


@dataclass
class _Candidates:
    """The verified edge files, the pair work files (nodes, ids, Jaccard) and the counters."""

    edges: list[str]
    pairs: list[str]
    counters: dict[str, int]


SEGMENT_REL = "seg-full"  # the one index segment a full build writes


def _candidate_edges(b: _Build) -> _Candidates:
    """Steps 1 + 2: LSH candidate pairs, verified by exact shingle Jaccard >= threshold (None: not
    verified). With verification, each pair is first looked up in the verified-pair cache
    (pair_cache.py) and only the pairs it lacks are verified. A build that keeps a state writes each
    file's bucket keys and the bucket index on the way (fuzzy_state.py)."""
    entries, parts, bases, work = b.entries, b.parts, b.bases, b.work
    sinks = ([fuzzy_state.KeysSink(b.state.root, int(t)) for t in b.tokens] if b.state is not None
             else [None] * len(entries))
    index = (key_index.IndexSink(b.state.root, SEGMENT_REL, parts, b.tokens, bases) if b.state is not None
             else None)
    jobs = [(e, b.mh_paths[e.gidx], sinks[e.gidx]) for e in entries]
    ds = per_file_tasks(jobs, [j[1] for j in jobs]).flat_map(partial(_bucket_items, parts=parts))
    clique_max = b.clique_max if b.threshold is not None else 1
    ds = batches.shuffle(ds, partial(_bucket_pairs, clique_max=clique_max, index=index), parts)
    ds = ds.filter(batches.drop_empty)
    if b.threshold is None:
        run = ds.map(partial(_write_candidates, out_dir=f"{work}/edges")).run(b.exec_config)
        return _Candidates(sorted(run.items), sorted(run.items), run.counters)
    cache = b.cache or _Cache(None, None)
    bits = pair_cache.cache_bits(parts)
    file_parts = max(1, min(len(entries), parts))
    dirs = pair_cache.LookupDirs(f"{work}/edges-cached", f"{work}/pairs-cached", f"{work}/pairs-unknown")
    ds = ds.flat_map(partial(_request_sides, bases=bases))
    ds = batches.shuffle(ds, partial(pair_cache.side_ids, paths=[e.path for e in entries], parts=parts), file_parts)
    ds = batches.shuffle(ds.flat_map(_explode), partial(pair_cache.join_ids, bits=bits), parts)
    ds = batches.shuffle(ds.flat_map(_explode), partial(pair_cache.lookup, bits=bits, earlier=cache.earlier,
                                                        threshold=b.threshold, dirs=dirs), 1 << bits)
    looked = ds.run(b.exec_config)
    total = dict(looked.counters)
    edges = [r["edges"] for _, r in looked.items if r["edges"]]
    pairs = [r["known"] for _, r in looked.items if r["known"]]
    unknown = sorted(r["unknown"] for _, r in looked.items if r["unknown"])
    if unknown:
        ds = Dataset.from_items(unknown, num_shards=len(unknown)).flat_map(pair_cache.read_unknown)
        ds = batches.shuffle(ds.flat_map(partial(_request_sides, bases=bases)),
                             partial(_shingle_sides, entries=entries, minhash_params=b.mh_params, parts=parts),
                             file_parts)
        ds = batches.shuffle(ds.flat_map(_explode), partial(_verify_pairs, threshold=b.threshold,
                                                            out_dir=f"{work}/edges", pairs_dir=f"{work}/pairs-verified"),
                             parts)
        run = ds.run(b.exec_config)
        _add(total, run.counters)
        edges += [r["edges"] for _, r in run.items if r["edges"]]
        pairs += [r["pairs"] for _, r in run.items if r["pairs"]]
    if cache.folder is not None:
        _write_cache(sorted(pairs), cache.folder, bits, b.exec_config)
    return _Candidates(sorted(edges), sorted(pairs), total)


def _write_cache(pairs: list[str], folder: str, bits: int, exec_config: ExecConfig | None) -> None:
    """The new verified-pair cache: every candidate pair of this build with its Jaccard."""
    if not pairs:
        return
    ds = Dataset.from_items(pairs, num_shards=len(pairs)).flat_map(partial(pair_cache.emit_pairs, bits=bits))
    batches.shuffle(ds, partial(pair_cache.write_cache, folder=folder, bits=bits), 1 << bits).run(exec_config)


def _file_meta(params: dict) -> dict:
    """The metadata of each marks file: the parameters without the list of sources (attrs.json has it),
    so a file whose marks did not change stays byte for byte the same when a source is added, and
    consolidate takes its output from the earlier build."""
    return {"kind": "fuzzy", "params": {k: v for k, v in params.items() if k != "sources"}}


def _cluster_marks(cc_files: list[str], parent_files: list[str], b: _Build, graph_parts: int
                   ) -> tuple[dict[str, int], int, list[dict], dict[int, str]]:
    """Step 4: the canonical member of each cluster, and marks per source file (an empty marks file for
    a file with no cluster member), each member with its parent (``parent_files``, from `_forest`); the
    run's counters, the largest cluster's size, the largest clusters (`largest.merge_tops`) and each
    file's marks digest."""
    entries, names = b.entries, b.names
    file_parts = max(1, min(len(entries), b.parts))
    digests: dict[int, str] = {}
    max_cluster = 0
    counters: dict[str, int] = {}
    tops: list[dict] = []
    meta_params = _file_meta(b.params)
    if cc_files:
        items = [("members", f) for f in cc_files] + [("parents", f) for f in parent_files]
        ds = Dataset.from_items(items, num_shards=len(items)).flat_map(partial(_marks_inputs, bases=b.bases))
        mark_parts = min(file_parts, graph_parts)
        ds = batches.shuffle(ds, partial(_attach_ids, entries=entries, parts=graph_parts), mark_parts)
        ds = batches.shuffle(ds.flat_map(_explode), partial(_choose_canonical, bases=b.bases), graph_parts)
        ds = batches.shuffle(ds.flat_map(_explode), partial(_write_marks, entries=entries, out_dir=b.out_dir,
                                                            names=names, meta=meta_params), mark_parts)
        run = ds.run(b.exec_config)
        counters = run.counters
        for gidx, r in run.items:
            digests[gidx] = r["digest"]
            max_cluster = max(max_cluster, r["max_cluster"])
            tops += r["top"]
    empty = an.empty(FUZZY_SCHEMA)
    for e in entries:
        if e.gidx not in digests:
            write_parquet_atomic(empty, AttributesDir.of(b.out_dir, e.source).file(e.name), meta_params)
            digests[e.gidx] = EMPTY_MARKS
    return counters, max_cluster, merge_tops(tops, names), digests


EMPTY_MARKS = marks_digest({k: np.empty(0, t) for k, t in (("hi", U64), ("lo", U64), ("c_hi", U64), ("c_lo", U64),
                                                           ("is_canonical", bool), ("size", np.int64),
                                                           ("c_rank", np.int64), ("p_hi", U64), ("p_lo", U64),
                                                           ("p_rank", np.int64))}, [])


def _add(total: dict[str, int], counters: dict[str, int]) -> None:
    for k, v in counters.items():
        total[k] = total.get(k, 0) + v


def _ranked(sources: Sequence[FuzzySource | tuple]) -> tuple[list[FuzzySource], list[SourceRef]]:
    """The sources in rank order (highest priority first), as given and as SourceRefs."""
    raw = [s if isinstance(s, FuzzySource) else FuzzySource(*s) if len(s) == 4 else FuzzySource(*s, priority=i)
           for i, s in enumerate(sources)]
    if not raw:
        raise DedupInputError("fuzzy_dups needs at least one source")
    by_name = {s.name: s for s in raw}
    ranked = as_sources([SourceRef(s.name, s.normalized_dir, s.priority) for s in raw])
    return [by_name[s.name] for s in ranked], ranked


def _checked(cfg: DedupConfig, clique_max: int) -> DedupConfig:
    if clique_max < 1:
        raise ValueError(f"clique_max must be >= 1, got {clique_max}")
    if cfg.verify_threshold is not None and not 0.0 <= cfg.verify_threshold <= 1.0:
        raise ValueError(f"verify_threshold must be in [0, 1], got {cfg.verify_threshold}")
    return cfg


def fuzzy_dups(
    sources: Sequence[FuzzySource | tuple],
    out_dir: str,
    cfg: DedupConfig | None = None,
    exec_config: ExecConfig | None = None,
    *,
    clique_max: int = CLIQUE_MAX,
    num_partitions: int | None = None,
    max_rounds: int = MAX_ROUNDS,
    reuse_from: Reuse | None = None,
) -> FuzzyResult:
    """Cluster near-duplicates across all given sources; write per-source co-partitioned marks.

    `sources`: FuzzySource(name, normalized_dir, minhash_dir, priority) or tuples in that order.
    `cfg`: the `dedup:` section (default: its defaults); fuzzy_dups reads its verification keys
    (verify, verify_threshold, threshold: see `verify_threshold`), the shingling and bands come from
    the minhash sets. Not manifest keys: clique_max (with verification, buckets up to this size
    contribute all their pairs; in larger ones each member is paired with the clique_max - 1 before it,
    so work per bucket stays linear in its size); num_partitions (reducers per internal shuffle,
    default: `default_partitions`, sized by the bucket entries; it changes speed and memory, never the result);
    max_rounds (connected-components rounds); reuse_from: keep the verified-pair cache in out_dir and
    read the earlier build's (pair_cache.py), so only pairs it lacks are verified (counters
    ``pairs_cached`` and ``pairs_verified_now``).
    Output: `out_dir/attributes/<source>/` (same file names as the source, rows only for members of
    clusters of 2+ documents, sorted by id) and attrs.json with parameters and counters.
    """
    cfg = _checked(cfg or DedupConfig(), clique_max)
    srcs, ranked = _ranked(sources)
    entries = file_table(ranked)
    mh_params, mh_dirs, rows = _check_inputs(srcs, entries)
    for s in srcs:
        invalidate(attr_dir(out_dir, s.name))
    b = _setup(srcs, entries, mh_params, mh_dirs, cfg, clique_max, num_partitions, out_dir, exec_config, reuse_from,
               rows)
    outcome = _incremental(b, rows, reuse_from) if b.state is not None else None
    if outcome is not None:
        result = FuzzyResult(counters=outcome.counters, params=b.params, largest=outcome.largest)
    else:
        result = _full(b, rows, max_rounds)
    for s in srcs:
        files = [e.name for e in entries if e.source == s.name]
        c = {"duplicates": result.counters.get(f"duplicates/{s.name}", 0),
             "cluster_members": result.counters.get(f"cluster_members/{s.name}", 0)}
        write_meta(attr_dir(out_dir, s.name), {
            "kind": "fuzzy", "source": s.name, "params": b.params, "files": files, "counters": c,
            "priority": s.priority,
        })
        result.sources[s.name] = {"attributes": AttributesDir.rel(s.name), **c}
    return result


ENTRIES_PER_PARTITION = 1 << 19  # bucket entries (key, node) per reducer of the candidate shuffles: ~8 MB


def default_partitions(rows: int, minhash_params: dict, files: int) -> int:
    """Reducers per internal shuffle, sized by the bucket entries (rows x bands: `batches.reducers_for`;
    at 405 MB in 64 files, one reducer per file cost 15.9 CPU-s where 4 cost 9.3, the same clusters)."""
    return batches.reducers_for(rows * int(minhash_params.get("bands", 1)), ENTRIES_PER_PARTITION, files)


def _setup(srcs: list[FuzzySource], entries: list[FileEntry], mh_params: dict, mh_dirs: dict[str, str],
           cfg: DedupConfig, clique_max: int, num_partitions: int | None, out_dir: str,
           exec_config: ExecConfig | None, reuse_from: Reuse | None, rows: np.ndarray) -> _Build:
    """The build's settings, and the state it keeps for the next build when it keeps one: with reuse, and
    when every input file has a recorded content hash (its token)."""
    names = [s.name for s in srcs]
    params = {"kind": "fuzzy", "fuzzy_format": FUZZY_FORMAT, "minhash": mh_params,
              **_verify_params(cfg, mh_params, clique_max), "sources": names}
    threshold = verify_threshold(cfg, mh_params) if cfg.verify else None
    cache = _pair_cache(out_dir, mh_params, reuse_from) if threshold is not None else None
    state, tokens = None, None
    if reuse_from is not None:
        reuse.write(out_dir, {})  # no per-file units: reuse.json only lets the next build load this one
        hashes = recorded_hashes([s.normalized_dir for s in srcs])
        if all(e.path in hashes for e in entries):
            tokens = np.array([key_index.file_token(e.source, e.name, hashes[e.path]) for e in entries], U64)
            folder = fuzzy_state.folder_for(reuse_from.settings, mh_params, _verify_params(cfg, mh_params, clique_max))
            state = fuzzy_state.State(out_dir, folder, names)
    return _Build(entries, names, [AttributesDir(mh_dirs[e.source]).file(e.name) for e in entries], mh_params, params,
                  threshold, clique_max, num_partitions or default_partitions(int(rows.sum()), mh_params, len(entries)),
                  rank_bases(entries),
                  out_dir, exec_config, cache, state, tokens)


def _incremental(b: _Build, rows: np.ndarray, reuse_from: Reuse) -> "fuzzy_incremental.Outcome | None":
    """The build as a change to the earlier one's state, when there is a usable one (None: build in full)."""
    old = fuzzy_state.load(reuse_from.earlier, b.state.folder)
    if old is None:
        return None
    change = fuzzy_incremental.Change(
        b.entries, b.tokens, rows, b.names, b.mh_paths, b.mh_params, b.threshold, b.clique_max, b.out_dir,
        _file_meta(b.params), old, b.state, reuse_from.earlier,
        b.cache.folder if b.cache is not None else None, pair_cache.cache_bits(b.parts))
    return fuzzy_incremental.run(change)


def _full(b: _Build, rows: np.ndarray, max_rounds: int) -> FuzzyResult:
    """The whole corpus on the engine: candidates, components, marks (and the state for the next build)."""
    total: dict[str, int] = {}
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    cand = _candidate_edges(b)
    _add(total, cand.counters)
    timings["candidates"] = time.perf_counter() - t0

    # 3: the forest, and its trees as components. The pair graph is usually far smaller than the corpus,
    # so its shuffles get partitions by its own size (not by worker count: results never depend on it).
    n_edges = total.get("verified_pairs" if b.threshold is not None else "candidate_pairs", 0)
    graph_parts = max(1, min(b.parts, -(-n_edges // EDGES_PER_PARTITION)))
    t0 = time.perf_counter()
    links, parent_files = _forest(cand.edges, b, graph_parts)
    cc = connected_components(links, f"{b.work}/cc", graph_parts, b.exec_config, max_rounds)
    timings["components"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    counters, max_cluster, largest, digests = _cluster_marks(cc.files, parent_files, b, graph_parts)
    _add(total, counters)
    timings["marks"] = time.perf_counter() - t0
    total["max_cluster_size"] = max_cluster
    total["cc_rounds"] = cc.rounds
    texts = SampleTexts(b.tokens if b.state is not None else None)
    largest = with_samples(largest, b.entries, partial(_gidx, bases=b.bases), texts)
    if b.state is not None:
        t0 = time.perf_counter()
        b.state.samples = texts.used
        fuzzy_incremental.record_full(b.state, b.entries, b.tokens, rows, b.names, cand.pairs, b.threshold, digests,
                                      SEGMENT_REL, b.parts, b.mh_paths)
        timings["state"] = time.perf_counter() - t0
    remove(b.work)
    return FuzzyResult(counters=dict(sorted(total.items())), params=b.params, cc_rounds=cc.rounds,
                       cc_history=cc.history, timings=timings, largest=largest)
