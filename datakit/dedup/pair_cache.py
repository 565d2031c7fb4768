"""The verified-pair cache of fuzzy dedup: candidate pair (id, id) -> true Jaccard, kept across builds.

Why: verification is the part of fuzzy dedup that reads texts (every document in a candidate pair is
re-shingled). Document ids are content hashes, so a pair's Jaccard is a pure function of its two ids
(and the shingling, which names the cache: `cache_dir`). A build looks every candidate pair up in the
earlier build's cache and verifies only the pairs it does not find; an edit to one file re-reads the
texts of that file's new pairs (and their partners), not the corpus.

Layout: ``reuse/pairs/<shingling digest>/part-KKKKK-of-NNNNN.parquet`` (ah, al, bh, bl: the two ids as
uint64 halves, the smaller id first; jaccard), each file sorted, partitioned by the top bits of a hash
of the id pair (`partition`), so a build with another partition count still finds a pair's rows: the
files of the earlier build that cover a partition's hash range are read and filtered. A full build's
cache holds exactly its own candidate pairs (the earlier pairs it found and the ones it verified), so it
is a pure function of the build's inputs (no history), bounded by its candidates, and a pair whose
document went away leaves it. An incremental build's (fuzzy_incremental.py) holds the candidate pairs
whose Jaccard it knows: a pair it never had to verify is left out, so it can hold fewer pairs than a full
build on the same inputs (a cache answers lookups, it is not an output; the marks are byte for byte a
full build's). Its partitions that hold the bytes the earlier build recorded are linked from there, not
written. An earlier cache file that no longer hashes to what its build recorded is ignored (its pairs are
verified again).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pyarrow as pa
import xxhash

from datakit.core import arrow_numpy as an
from datakit.core.fsio import is_local, join, makedirs, write_noted, xxh3_file
from datakit.core.layout import work_part_name
from datakit.shuffle import counters
from datakit.steps import reuse

from . import batches
from .components import write_edges
from .hashing import U64, ids_to_u64, mix64, node_row, route_keys
from .layout import parquet_bytes, read_columns, write_parquet_atomic

PAIRS_FORMAT = 1
CACHE_ROOT = "reuse/pairs"
IDS = ("ah", "al", "bh", "bl")  # a pair's ids as uint64 halves, the smaller id first
CACHE_SCHEMA = pa.schema([("ah", pa.uint64()), ("al", pa.uint64()), ("bh", pa.uint64()), ("bl", pa.uint64()),
                          ("jaccard", pa.float64())])
PAIRS_SCHEMA = pa.schema([("u", pa.int64()), ("v", pa.int64()), *CACHE_SCHEMA])  # a build's work files
MAX_BITS = 9  # at most 512 cache files
_PART_NAME = re.compile(r"part-(\d{5})-of-(\d{5})\.parquet$")


@dataclass(frozen=True)
class EarlierPairs:
    """The earlier build's cache files for this shingling: their paths, partition bits and recorded
    hashes. Small and picklable (the lookup reducers receive it)."""

    step_dir: str
    files: dict[int, str]  # partition -> relative path
    bits: int
    hashes: dict[str, str]


def cache_dir(minhash_params: dict, settings: tuple) -> str:
    """The cache's folder for this shingling (any change to it or to the stage's version: a new folder)."""
    return f"{CACHE_ROOT}/{reuse.content_key(PAIRS_FORMAT, settings, minhash_params)}"


def cache_bits(parts: int) -> int:
    """Partition bits for a build with ``parts`` reducers: about one cache file per reducer."""
    return min(MAX_BITS, max(0, int(parts - 1).bit_length()))


def earlier_pairs(earlier: reuse.Earlier | None, folder: str) -> EarlierPairs | None:
    """The earlier build's cache in ``folder`` (None: none, or its files disagree on their count)."""
    if earlier is None:
        return None
    files, totals = {}, set()
    for rel in earlier.hashes:
        m = _PART_NAME.search(rel)
        if rel.startswith(folder + "/") and m:
            files[int(m[1])] = rel
            totals.add(int(m[2]))
    if len(totals) != 1:
        return None
    total = totals.pop()
    if total & (total - 1):
        return None
    return EarlierPairs(earlier.step_dir, files, total.bit_length() - 1,
                        {rel: earlier.hashes[rel] for rel in files.values()})


def partition(ah: np.ndarray, al: np.ndarray, bh: np.ndarray, bl: np.ndarray, bits: int) -> np.ndarray:
    """The cache partition of each id pair: the top ``bits`` of a hash of the four halves."""
    h = mix64(ah ^ mix64(al ^ mix64(bh ^ mix64(bl))))
    return (h >> U64(64 - bits)).astype(np.int64) if bits else np.zeros(len(h), np.int64)


def edge_part(u: np.ndarray, v: np.ndarray, parts: int) -> np.ndarray:
    """The verification partition of each node pair."""
    return route_keys(mix64(u.astype(U64)) ^ v.astype(U64), parts)


def side_ids(gidx: int, b: batches.Batch, paths: Sequence[str], parts: int):
    """The ids of one file's nodes in candidate pairs (read once each from the documents file), sent
    with their pair to the pair's partition."""
    order = np.lexsort((b["v"], b["u"], b["node"]))
    node, u, v = b["node"][order], b["u"][order], b["v"][order]
    uniq, inverse = np.unique(node_row(node), return_inverse=True)
    ids = read_columns(paths[gidx], ["id"]).column("id").take(an.from_numpy(uniq))
    hi, lo = ids_to_u64(ids, paths[gidx])
    out = {"node": node, "u": u, "v": v, "hi": hi[inverse], "lo": lo[inverse]}
    return batches.split(out, edge_part(u, v, parts))


def both_sides(part: int, b: batches.Batch) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                     np.ndarray]:
    """The distinct pairs of a partition that `side_ids` sent both sides of: (u, v, u's id hi, lo, v's id
    hi, lo)."""
    order = np.lexsort((b["node"], b["v"], b["u"]))
    rows = {k: b[k][order] for k in ("node", "u", "v", "hi", "lo")}
    keep = np.ones(len(order), dtype=bool)
    keep[1:] = (np.diff(rows["node"]) != 0) | (np.diff(rows["u"]) != 0) | (np.diff(rows["v"]) != 0)
    rows = {k: c[keep] for k, c in rows.items()}
    first, second = slice(0, None, 2), slice(1, None, 2)
    if len(rows["u"]) % 2 or not (np.array_equal(rows["node"][first], rows["u"][first])
                                  and np.array_equal(rows["node"][second], rows["v"][second])):
        raise RuntimeError(f"pair partition {part}: a pair lacks one side's id (internal error)")
    return (rows["u"][first], rows["v"][first], rows["hi"][first], rows["lo"][first], rows["hi"][second],
            rows["lo"][second])


def join_ids(_part: int, b: batches.Batch, bits: int):
    """Each distinct pair with both its ids (the smaller first), sent to its cache partition."""
    u, v, xh, xl, yh, yl = both_sides(_part, b)
    swap = (xh > yh) | ((xh == yh) & (xl > yl))
    ah, al = np.where(swap, yh, xh), np.where(swap, yl, xl)
    bh, bl = np.where(swap, xh, yh), np.where(swap, xl, yl)
    out = {"u": u, "v": v, "ah": ah, "al": al, "bh": bh, "bl": bl}
    return batches.split(out, partition(ah, al, bh, bl, bits))


def _earlier_rows(part: int, bits: int, earlier: EarlierPairs | None) -> dict[str, np.ndarray]:
    """The earlier cache's rows in this partition's hash range (files that changed are skipped)."""
    empty = {k: np.empty(0, U64) for k in IDS} | {"jaccard": np.empty(0, np.float64)}
    if earlier is None:
        return empty
    lo_e, hi_e = ((part << (earlier.bits - bits), (part + 1) << (earlier.bits - bits)) if earlier.bits >= bits
                  else (part >> (bits - earlier.bits), (part >> (bits - earlier.bits)) + 1))
    tables = []
    for p in range(lo_e, hi_e):
        rel = earlier.files.get(p)
        if rel is None:
            continue
        path = join(earlier.step_dir, rel)
        try:
            if xxh3_file(path) != earlier.hashes[rel]:
                continue
        except FileNotFoundError:
            continue
        tables.append(read_columns(path, list(CACHE_SCHEMA.names)))
    if not tables:
        return empty
    t = pa.concat_tables(tables)
    rows = an.columns(t, CACHE_SCHEMA.names)
    mine = partition(rows["ah"], rows["al"], rows["bh"], rows["bl"], bits) == part
    return {k: c[mine] for k, c in rows.items()}


def match(b: batches.Batch, cache: dict[str, np.ndarray]) -> np.ndarray:
    """The cached Jaccard of each pair of ``b`` (NaN: not in the cache), by one sort of both."""
    nq, nc = len(b["u"]), len(cache["ah"])
    cols = [np.concatenate([cache[k], b[k]]) for k in IDS]
    flag = np.concatenate([np.zeros(nc, np.int8), np.ones(nq, np.int8)])
    order = np.lexsort((flag, cols[3], cols[2], cols[1], cols[0]))
    pos = np.arange(len(order))
    last_cache = np.maximum.accumulate(np.where(flag[order] == 0, pos, -1))
    out = np.full(nq, np.nan)
    q = np.flatnonzero(flag[order] == 1)
    c = last_cache[q]
    ok = c >= 0
    same = ok.copy()
    for col in cols:
        same[ok] &= col[order][c[ok]] == col[order][q[ok]]
    qi = order[q[same]] - nc
    out[qi] = np.concatenate([cache["jaccard"], np.full(nq, np.nan)])[order[c[same]]]
    return out


@dataclass(frozen=True)
class LookupDirs:
    """Where the lookup writes: edges of cached pairs at or above the threshold, the cached pairs (for
    the new cache) and the pairs to verify."""

    edges: str
    known: str
    unknown: str


def lookup(part: int, b: batches.Batch, bits: int, earlier: EarlierPairs | None, threshold: float,
           dirs: LookupDirs) -> dict:
    """Split one cache partition's candidate pairs into cached (their edges written when verified)
    and unknown (written for verification)."""
    jac = match(b, _earlier_rows(part, bits, earlier))
    known = ~np.isnan(jac)
    ok = known & (jac >= threshold)
    counters.increment("candidate_pairs", len(jac))
    counters.increment("pairs_cached", int(known.sum()))
    counters.increment("verified_pairs", int(ok.sum()))
    counters.increment("rejected_pairs", int((known & ~ok).sum()))
    name = work_part_name(part)
    out = {"edges": None, "known": None, "unknown": None}
    if ok.any():
        out["edges"] = write_edges(f"{dirs.edges}/{name}", b["u"][ok], b["v"][ok])
    if known.any():
        out["known"] = write_pairs(f"{dirs.known}/{name}", b["u"][known], b["v"][known],
                                   {k: b[k][known] for k in IDS}, jac[known])
    if (~known).any():
        cols = {k: b[k][~known] for k in ("u", "v", *IDS)}
        t = an.numbers_table(cols, pa.schema([(k, pa.from_numpy_dtype(c.dtype)) for k, c in cols.items()]))
        write_parquet_atomic(t, f"{dirs.unknown}/{name}")
        out["unknown"] = f"{dirs.unknown}/{name}"
    return out


def write_pairs(path: str, u: np.ndarray, v: np.ndarray, ids: dict[str, np.ndarray], jac: np.ndarray) -> str:
    """Pairs with their nodes and Jaccard (PAIRS_SCHEMA), as a work file for the cache writer and for the
    state the next build starts from (fuzzy_state.py)."""
    write_parquet_atomic(an.numbers_table({"u": u, "v": v, **ids, "jaccard": jac}, PAIRS_SCHEMA), path)
    return path


def read_unknown(path: str):
    """A lookup's unknown pairs as one batch item for verification."""
    t = read_columns(path, ["u", "v", *IDS])
    return [(0, an.columns(t, ("u", "v", *IDS)))]


def emit_pairs(path: str, bits: int):
    """A pairs work file split by cache partition."""
    t = read_columns(path, list(CACHE_SCHEMA.names))
    b = an.columns(t, CACHE_SCHEMA.names)
    return batches.split(b, partition(b["ah"], b["al"], b["bh"], b["bl"], bits))


def write_cache(part: int, b: batches.Batch, folder: str, bits: int, earlier: reuse.Earlier | None = None,
                rel_folder: str | None = None) -> str:
    """One cache file: the partition's distinct pairs, sorted by ids (a pair found twice, through two
    copies of one document, has one Jaccard). With ``earlier`` (that build's step dir holds the cache at
    ``rel_folder``, as this one does): a local file whose bytes that build recorded for the same name is
    linked from there (`reuse.take_file`), not written: an edit changes a few of an incremental build's
    partitions, and each written file is a new inode and an fsync."""
    order = np.lexsort((b["bl"], b["bh"], b["al"], b["ah"]))
    cols = {k: b[k][order] for k in CACHE_SCHEMA.names}
    first = np.ones(len(order), dtype=bool)
    first[1:] = False
    for k in IDS:
        first[1:] |= cols[k][1:] != cols[k][:-1]
    name = f"part-{part:05d}-of-{1 << bits:05d}.parquet"
    path = f"{folder}/{name}"
    table = an.numbers_table({k: c[first] for k, c in cols.items()}, CACHE_SCHEMA)
    if earlier is None or rel_folder is None:
        write_parquet_atomic(table, path)
        return path
    data = parquet_bytes(table)
    rel = f"{rel_folder}/{name}"
    local = is_local(path) and is_local(earlier.step_dir)  # on an object store a copy costs what a write does
    if (local and rel in earlier.hashes and earlier.hashes[rel] == xxhash.xxh3_128_hexdigest(data)
            and reuse.take_file(earlier, rel, path)):
        return path
    makedirs(folder)
    write_noted(path, data)  # replaces whatever a failed take left there
    return path
