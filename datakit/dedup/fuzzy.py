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
3. Connected components of the (verified) pair graph, on the engine (components.py).
4. Canonical per cluster: the member from the highest-priority source, then the lowest id. It does not
   depend on worker counts or partitioning. Every member of a non-singleton cluster gets a row in its
   source's co-partitioned attribute file `{id, cluster_id, is_canonical, cluster_size,
   canonical_source}`; cluster_id is the canonical document's id. Consolidation drops members with
   is_canonical == False.

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

from datakit.core.fsio import remove
from datakit.core.layout import AttributesDir, work_part_name
from datakit.shuffle import Dataset, ExecConfig, counters

from datakit.steps import reuse

from . import batches, pair_cache
from .batches import Ragged
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
    u64_to_ids,
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
    open_parquet,
    parquet_num_rows,
    per_file_tasks,
    rank_bases,
    read_columns,
    read_meta,
    require_columns,
    resolve_attr_dir,
    write_meta,
    write_parquet_atomic,
)
from .keyed import Reuse
from .largest import file_top, merge_tops, with_samples
from .lsh_params import candidate_threshold
from .minhash import shingles_of, text_batches

FUZZY_FORMAT = 1
EDGES_PER_PARTITION = 2_000_000  # graph shuffles: ~64 MB of edge entries per reducer
FUZZY_SCHEMA = pa.schema([
    ("id", pa.string()),
    ("cluster_id", pa.string()),
    ("is_canonical", pa.bool_()),
    ("cluster_size", pa.int64()),
    ("canonical_source", pa.string()),
])


CLIQUE_MAX = 8  # with verification, buckets up to this size contribute all their pairs (see _bucket_pairs)
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
def _bucket_items(job: tuple[FileEntry, str], parts: int):
    entry, mh_path = job
    t = read_columns(mh_path, ["buckets"])
    col = t.column("buckets").combine_chunks()
    n = len(col)
    counters.increment("docs", n)
    counters.increment(f"docs/{entry.source}", n)
    valid = ~np.asarray(col.is_null(), dtype=bool) if col.null_count else np.ones(n, dtype=bool)
    rows = np.flatnonzero(valid)
    counters.increment("docs_without_shingles", n - len(rows))
    if not len(rows):
        return []
    width = col.type.list_size
    keys = col.flatten().to_numpy().astype(U64, copy=False).reshape(len(rows), width)
    nodes = pack_nodes(entry.rank, entry.file_idx, rows)
    flat_keys = keys.reshape(-1)
    return batches.split({"key": flat_keys, "node": np.repeat(nodes, width)}, route_keys(flat_keys, parts))


def _bucket_pairs(_part: int, b: batches.Batch, clique_max: int):
    """Candidate pairs of each bucket, de-duplicated within the partition.

    Members of a bucket, in node order, are each paired with the `clique_max - 1` members before them.
    So a bucket of up to `clique_max` members gives all its pairs (verification may reject some, and
    a sparser graph would then lose true pairs that only the clique holds), and a larger one (boilerplate,
    templates, a big family of copies) costs at most clique_max - 1 pairs per member, not n^2/2: work
    per bucket is linear in its size. Each member is tried against several neighbours, so one rejected
    pair (an LSH false positive next to it) does not cut it off, as it did when large buckets were
    linked as a chain. Without verification clique_max is 1: a chain, which gives the same components.
    """
    order = np.lexsort((b["node"], b["key"]))
    key, node = b["key"][order], b["node"][order]
    us, vs = [], []
    for d in range(1, max(1, clique_max - 1) + 1):
        same = key[d:] == key[:-d]  # sorted by key: equal keys d apart are in one bucket
        if not same.any():
            break  # no bucket has more than d members
        us.append(node[:-d][same])
        vs.append(node[d:][same])
    u = np.concatenate(us) if us else node[:0]
    v = np.concatenate(vs) if vs else node[:0]
    u, v = np.minimum(u, v), np.maximum(u, v)
    mask = u != v  # the same document twice in one bucket (cannot happen, but never a self-edge)
    u, v = u[mask], v[mask]
    counters.increment("bucket_pairs", len(u))
    if not len(u):
        return None
    order = np.lexsort((v, u))
    u, v = u[order], v[order]
    keep = np.ones(len(u), dtype=bool)
    keep[1:] = (u[1:] != u[:-1]) | (v[1:] != v[:-1])
    return {"u": u[keep], "v": v[keep]}


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


VERIFY_READ_ROWS = 1024  # rows decoded at a time when fetching texts for verification


def shingle_rows(path: str, rows: np.ndarray, minhash_params: dict) -> Ragged:
    """Shingle sets of the given rows (sorted, unique) of one documents file, in that order, shingled as
    the minhashes with these (recorded) params were.

    Streamed: only the row groups holding a wanted row are read, `VERIFY_READ_ROWS` rows of the `text`
    column at a time, and only the wanted rows become Python strings. So memory is bounded by one such
    batch of texts (plus the column chunk pyarrow buffers for its row group) and the sets returned,
    never by the file: reading the whole column made a 256 MB shard cost ~1 GB in one worker. Sets are
    per document, so shingling batch by batch gives the same bytes as shingling all texts at once.
    """
    rows = np.asarray(rows, dtype=np.int64)
    parts: list[Ragged] = []
    with open_parquet(path) as pf:
        require_columns(path, pf.schema_arrow, ["text"])
        meta = pf.metadata
        if len(rows) and rows[-1] >= meta.num_rows:
            raise AttributeMismatch(f"{path}: row {int(rows[-1])} wanted, the file has {meta.num_rows} rows; "
                                    "the source changed after its minhash step ran (rerun it)")
        ends = np.cumsum([meta.row_group(i).num_rows for i in range(meta.num_row_groups)], dtype=np.int64)
        for g in np.unique(np.searchsorted(ends, rows, side="right")).tolist():
            start = int(ends[g - 1]) if g else 0
            try:
                for rb in pf.iter_batches(batch_size=VERIFY_READ_ROWS, row_groups=[g], columns=["text"]):
                    lo, hi = np.searchsorted(rows, [start, start + rb.num_rows])
                    if hi > lo:
                        texts = rb.column(0).take(pa.array(rows[lo:hi] - start)).to_pylist()
                        parts.append(shingle_sets(texts, minhash_params))
                    start += rb.num_rows
            except (pa.ArrowException, OSError) as e:
                raise DedupInputError(f"{path}: cannot read parquet: {e}") from None
    if not parts:
        return Ragged(np.empty(0, np.uint32), np.zeros(1, np.int64))
    return batches.concat([{"sh": r} for r in parts])["sh"]


def shingle_sets(texts: list, minhash_params: dict) -> Ragged:
    """Sorted unique 32-bit shingle fingerprints of each text (shingled as the minhashes with these
    params were), hashed in batches of ~256k characters.

    Fingerprints are the top 32 bits of the 64-bit shingle hashes: half the bytes to move, and the
    Jaccard computed on them is exact up to fingerprint collisions, i.e. a pair of 500-shingle documents
    gains a spurious shared shingle with probability ~6e-5 (|A||B| / 2^32). One sort per batch (the
    document index in the high 32 bits of the key) replaces a np.unique per document.
    """
    vals, lengths = [], []
    for a, b in text_batches(texts, minhash_params["max_text_chars"]):
        sh = shingles_of(texts[a:b], minhash_params)
        n = len(sh.offsets) - 1
        doc = np.repeat(np.arange(n, dtype=U64), np.diff(sh.offsets))
        keys = np.sort((doc << U64(32)) | (sh.values >> U64(32)))
        keep = np.ones(len(keys), dtype=bool)
        keep[1:] = keys[1:] != keys[:-1]
        keys = keys[keep]
        vals.append(keys.astype(np.uint32))  # the low 32 bits: the fingerprint
        lengths.append(np.bincount((keys >> U64(32)).astype(np.int64), minlength=n))
    lengths = np.concatenate(lengths) if lengths else np.empty(0, np.int64)
    offs = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offs[1:])
    return Ragged(np.concatenate(vals) if vals else np.empty(0, np.uint32), offs)


def _explode(item):
    return item[1]


VERIFY_CHUNK_FINGERPRINTS = 1 << 23  # per merge step: 64 MB of uint64 keys, whatever the partition's size


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
    sizes = np.diff(b["sh"].offsets)
    work = np.cumsum(sizes[set_rows[iu]] + sizes[set_rows[iv]])
    jac = np.empty(len(u), dtype=np.float64)
    start = 0
    while start < len(u):
        stop = max(start + 1, int(np.searchsorted(work, (work[start - 1] if start else 0) + VERIFY_CHUNK_FINGERPRINTS,
                                                  side="right")))
        jac[start:stop] = _pair_jaccard(batches.take_ragged(b["sh"], set_rows[iu[start:stop]]),
                                        batches.take_ragged(b["sh"], set_rows[iv[start:stop]]))
        start = stop
    ok = jac >= threshold
    counters.increment("pairs_verified_now", len(u))
    counters.increment("verified_pairs", int(ok.sum()))
    counters.increment("rejected_pairs", int(len(u) - ok.sum()))
    name = work_part_name(part)
    return {"edges": write_edges(f"{out_dir}/{name}", u[ok], v[ok]) if ok.any() else None,
            "pairs": pair_cache.write_pairs(f"{pairs_dir}/{name}", ids, jac) if len(u) else None}


def _pair_jaccard(a: Ragged, c: Ragged) -> np.ndarray:
    """Jaccard of a[i] and c[i] (sorted unique fingerprints) for every i, by one merge of sorted runs."""
    n = len(a)
    size_a, size_b = np.diff(a.offsets), np.diff(c.offsets)
    pair = np.arange(n, dtype=U64)
    keys = np.concatenate([
        (np.repeat(pair, size_a) << U64(32)) | a.values.astype(U64),
        (np.repeat(pair, size_b) << U64(32)) | c.values.astype(U64),
    ])
    keys.sort(kind="stable")
    shared = keys[1:][keys[1:] == keys[:-1]]
    inter = np.bincount((shared >> U64(32)).astype(np.int64), minlength=n)
    union = size_a + size_b - inter
    return np.where(union > 0, inter / np.maximum(union, 1), 0.0)


# ---------------------------------------------------------------- 4. canonical members and marks
def _members(path: str, bases: np.ndarray):
    t = read_columns(path, ["u", "v"])
    a, b = t.column("u").to_numpy(), t.column("v").to_numpy()
    leaf, root = np.maximum(a, b), np.minimum(a, b)
    node = np.concatenate([leaf, root])
    lab = np.concatenate([root, root])
    return batches.split({"node": node, "root": lab}, _gidx(node, bases))


def _attach_ids(gidx: int, b: batches.Batch, entries: Sequence[FileEntry], parts: int):
    order = np.argsort(b["node"], kind="stable")
    node, root = b["node"][order], b["root"][order]
    keep = np.ones(len(node), dtype=bool)
    keep[1:] = node[1:] != node[:-1]
    node, root = node[keep], root[keep]
    entry = entries[gidx]
    ids = read_columns(entry.path, ["id"]).column("id").take(pa.array(node_row(node)))
    hi, lo = ids_to_u64(ids, entry.path)
    return batches.split({"node": node, "root": root, "hi": hi, "lo": lo}, route_keys(root, parts))


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
        "size": np.repeat(sizes, sizes),
    }
    return batches.split(out, _gidx(b["node"], bases))


def _write_marks(gidx: int, b: batches.Batch, entries: Sequence[FileEntry], out_dir: str, names: Sequence[str],
                 meta: dict):
    entry = entries[gidx]
    b = batches.take(b, np.argsort(node_row(b["node"]), kind="stable"))
    table = pa.table({
        "id": u64_to_ids(b["hi"], b["lo"]),
        "cluster_id": u64_to_ids(b["c_hi"], b["c_lo"]),
        "is_canonical": b["is_canonical"],
        "cluster_size": b["size"].astype(np.int64),
        "canonical_source": pa.array(np.asarray(names, dtype=object)[b["c_rank"]], pa.string()),
    }, schema=FUZZY_SCHEMA)
    write_parquet_atomic(table, AttributesDir.of(out_dir, entry.source).file(entry.name), meta)
    dups = int((~b["is_canonical"]).sum())
    counters.increment(f"duplicates/{entry.source}", dups)
    counters.increment(f"cluster_members/{entry.source}", len(b["node"]))
    return {"rows": len(b["node"]), "max_cluster": int(b["size"].max()), "top": file_top(b, entry.source)}


# ---------------------------------------------------------------- driver
def _check_inputs(srcs: Sequence[FuzzySource], entries: Sequence[FileEntry]) -> tuple[dict, dict[str, str]]:
    """Every source has a minhash set for exactly its files, all made with one set of parameters."""
    mh_dirs, metas = {}, []
    for s in srcs:
        d = resolve_attr_dir(s.minhash_dir, s.name)
        meta = read_meta(d)
        if meta.get("kind") != "minhash":
            raise AttributeMismatch(f"{d}: expected a minhash attribute set, found kind {meta.get('kind')!r}")
        files = [e for e in entries if e.source == s.name]
        check_files_match(meta, [e.name for e in files], d)
        for e, rows in zip(files, meta.get("rows", [])):
            have = parquet_num_rows(e.path)
            if have != rows:
                raise AttributeMismatch(
                    f"{d}/{e.name}: minhashes cover {rows} rows but {e.path} has {have}; the source changed "
                    "after its minhash step ran"
                )
        mh_dirs[s.name] = d
        metas.append((d, meta["params"]))
    return check_same_params(metas, "minhash attribute sets"), mh_dirs


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
    reuse.write(out_dir, {})  # no per-file units: reuse.json only lets the next build load this one
    return _Cache(f"{out_dir.rstrip('/')}/{rel}", pair_cache.earlier_pairs(reuse_from.earlier, rel))


def _candidate_edges(entries: Sequence[FileEntry], mh_dirs: dict[str, str], mh_params: dict,
                     threshold: float | None, clique_max: int, parts: int, bases: np.ndarray, work: str,
                     exec_config: ExecConfig | None, cache: _Cache | None = None
                     ) -> tuple[list[str], dict[str, int]]:
    """Steps 1 + 2: LSH candidate pairs, verified by exact shingle Jaccard >= threshold (None: not
    verified): the edge files and the counters. With verification, each pair is first looked up in
    the verified-pair cache (pair_cache.py) and only the pairs it lacks are verified."""
    jobs = [(e, AttributesDir(mh_dirs[e.source]).file(e.name)) for e in entries]
    ds = per_file_tasks(jobs, [mh for _, mh in jobs]).flat_map(partial(_bucket_items, parts=parts))
    clique_max = clique_max if threshold is not None else 1
    ds = batches.shuffle(ds, partial(_bucket_pairs, clique_max=clique_max), parts).filter(batches.drop_empty)
    if threshold is None:
        run = ds.map(partial(_write_candidates, out_dir=f"{work}/edges")).run(exec_config)
        return sorted(run.items), run.counters
    cache = cache or _Cache(None, None)
    bits = pair_cache.cache_bits(parts)
    file_parts = max(1, min(len(entries), parts))
    dirs = pair_cache.LookupDirs(f"{work}/edges-cached", f"{work}/pairs-cached", f"{work}/pairs-unknown")
    ds = ds.flat_map(partial(_request_sides, bases=bases))
    ds = batches.shuffle(ds, partial(pair_cache.side_ids, paths=[e.path for e in entries], parts=parts), file_parts)
    ds = batches.shuffle(ds.flat_map(_explode), partial(pair_cache.join_ids, bits=bits), parts)
    ds = batches.shuffle(ds.flat_map(_explode), partial(pair_cache.lookup, bits=bits, earlier=cache.earlier,
                                                        threshold=threshold, dirs=dirs), 1 << bits)
    looked = ds.run(exec_config)
    total = dict(looked.counters)
    edges = [r["edges"] for _, r in looked.items if r["edges"]]
    pairs = [r["known"] for _, r in looked.items if r["known"]]
    unknown = sorted(r["unknown"] for _, r in looked.items if r["unknown"])
    if unknown:
        ds = Dataset.from_items(unknown, num_shards=len(unknown)).flat_map(pair_cache.read_unknown)
        ds = batches.shuffle(ds.flat_map(partial(_request_sides, bases=bases)),
                             partial(_shingle_sides, entries=entries, minhash_params=mh_params, parts=parts), file_parts)
        ds = batches.shuffle(ds.flat_map(_explode), partial(_verify_pairs, threshold=threshold, out_dir=f"{work}/edges",
                                                            pairs_dir=f"{work}/pairs-verified"), parts)
        run = ds.run(exec_config)
        _add(total, run.counters)
        edges += [r["edges"] for _, r in run.items if r["edges"]]
        pairs += [r["pairs"] for _, r in run.items if r["pairs"]]
    if cache.folder is not None:
        _write_cache(sorted(pairs), cache.folder, bits, exec_config)
    return sorted(edges), total


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


def _cluster_marks(cc_files: list[str], entries: Sequence[FileEntry], out_dir: str, names: Sequence[str],
                   params: dict, parts: int, graph_parts: int, bases: np.ndarray,
                   exec_config: ExecConfig | None) -> tuple[dict[str, int], int, list[dict]]:
    """Step 4: the canonical member of each cluster, and marks per source file (an empty marks file for
    a file with no cluster member); the run's counters, the largest cluster's size and the largest
    clusters (`largest.merge_tops`)."""
    file_parts = max(1, min(len(entries), parts))
    written: set[int] = set()
    max_cluster = 0
    counters: dict[str, int] = {}
    tops: list[dict] = []
    if cc_files:
        meta_params = _file_meta(params)
        ds = Dataset.from_items(cc_files, num_shards=len(cc_files)).flat_map(partial(_members, bases=bases))
        mark_parts = min(file_parts, graph_parts)
        ds = batches.shuffle(ds, partial(_attach_ids, entries=entries, parts=graph_parts), mark_parts)
        ds = batches.shuffle(ds.flat_map(_explode), partial(_choose_canonical, bases=bases), graph_parts)
        ds = batches.shuffle(ds.flat_map(_explode), partial(_write_marks, entries=entries, out_dir=out_dir,
                                                            names=names, meta=meta_params), mark_parts)
        run = ds.run(exec_config)
        counters = run.counters
        for gidx, r in run.items:
            written.add(gidx)
            max_cluster = max(max_cluster, r["max_cluster"])
            tops += r["top"]
    empty = FUZZY_SCHEMA.empty_table()
    for e in entries:
        if e.gidx not in written:
            write_parquet_atomic(empty, AttributesDir.of(out_dir, e.source).file(e.name),
                                 _file_meta(params))
    return counters, max_cluster, merge_tops(tops, names)


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
    default: the number of input files, at most 512; it changes speed and memory, never the result);
    max_rounds (connected-components rounds); reuse_from: keep the verified-pair cache in out_dir and
    read the earlier build's (pair_cache.py), so only pairs it lacks are verified (counters
    ``pairs_cached`` and ``pairs_verified_now``).
    Output: `out_dir/attributes/<source>/` (same file names as the source, rows only for members of
    clusters of 2+ documents, sorted by id) and attrs.json with parameters and counters.
    """
    cfg = _checked(cfg or DedupConfig(), clique_max)
    srcs, ranked = _ranked(sources)
    names = [s.name for s in srcs]
    entries = file_table(ranked)
    mh_params, mh_dirs = _check_inputs(srcs, entries)
    for s in srcs:
        invalidate(attr_dir(out_dir, s.name))
    params = {"kind": "fuzzy", "fuzzy_format": FUZZY_FORMAT, "minhash": mh_params,
              **_verify_params(cfg, mh_params, clique_max), "sources": names}
    parts = num_partitions or max(1, min(len(entries), 512))
    bases = rank_bases(entries)
    work = f"{out_dir.rstrip('/')}/work"
    total: dict[str, int] = {}
    timings: dict[str, float] = {}

    t0 = time.perf_counter()
    threshold = verify_threshold(cfg, mh_params) if cfg.verify else None
    cache = _pair_cache(out_dir, mh_params, reuse_from) if threshold is not None else None
    edge_files, counters = _candidate_edges(entries, mh_dirs, mh_params, threshold, clique_max, parts, bases,
                                            work, exec_config, cache)
    _add(total, counters)
    timings["candidates"] = time.perf_counter() - t0

    # 3: connected components. The pair graph is usually far smaller than the corpus, so its shuffles
    # get partitions by its own size (not by worker count: results never depend on partitioning).
    n_edges = total.get("verified_pairs" if cfg.verify else "candidate_pairs", 0)
    graph_parts = max(1, min(parts, -(-n_edges // EDGES_PER_PARTITION)))
    t0 = time.perf_counter()
    cc = connected_components(edge_files, f"{work}/cc", graph_parts, exec_config, max_rounds)
    timings["components"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    counters, max_cluster, largest = _cluster_marks(cc.files, entries, out_dir, names, params, parts, graph_parts, bases,
                                           exec_config)
    _add(total, counters)
    timings["marks"] = time.perf_counter() - t0
    total["max_cluster_size"] = max_cluster
    total["cc_rounds"] = cc.rounds
    result = FuzzyResult(counters=dict(sorted(total.items())), params=params, cc_rounds=cc.rounds,
                         cc_history=cc.history, timings=timings,
                         largest=with_samples(largest, entries, partial(_gidx, bases=bases)))
    for s in srcs:
        files = [e.name for e in entries if e.source == s.name]
        c = {"duplicates": total.get(f"duplicates/{s.name}", 0),
             "cluster_members": total.get(f"cluster_members/{s.name}", 0)}
        write_meta(attr_dir(out_dir, s.name), {
            "kind": "fuzzy", "source": s.name, "params": params, "files": files, "counters": c,
            "priority": s.priority,
        })
        result.sources[s.name] = {"attributes": AttributesDir.rel(s.name), **c}
    remove(work)
    return result
