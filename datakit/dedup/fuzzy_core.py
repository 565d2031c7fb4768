"""The pure functions both fuzzy builds share (fuzzy.py in full on the engine, fuzzy_incremental.py as a
change on the driver): a bucket's candidate pairs, shingle sets re-derived from the texts, the exact
Jaccard of pairs of sets, and a file's marks. Sharing them is what makes the two builds' outputs equal.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import xxhash
from typing import Iterator, Sequence

from datakit.core import arrow_numpy as an
from datakit.shuffle.worker import MMAP_THRESHOLD_BYTES

from . import batches
from .batches import Ragged
from .hashing import U64, u64_to_ids
from .layout import AttributeMismatch, DedupInputError, open_parquet, read_columns, require_columns
from .minhash import shingles_of, text_batches

FUZZY_SCHEMA = pa.schema([
    ("id", pa.string()),
    ("cluster_id", pa.string()),
    ("is_canonical", pa.bool_()),
    ("cluster_size", pa.int64()),
    ("canonical_source", pa.string()),
    # The document's parent in the forest (forest.py): its earliest earlier verified near-duplicate, the
    # one it goes for; null for the canonical member (the root). Stable when a later source is added.
    ("parent_id", pa.string()),
    ("parent_source", pa.string()),
])


def file_keys(mh_path: str) -> tuple[int, np.ndarray, np.ndarray]:
    """One minhash file's rows, the rows with shingles, and their bucket keys (rows x bands)."""
    col = an.combined(read_columns(mh_path, ["buckets"]).column("buckets"))
    n = len(col)
    rows = np.flatnonzero(an.valid(col))  # read through buffers: to_numpy would import pandas
    keys = an.to_numpy(col.flatten(), np.uint64).astype(U64, copy=False).reshape(len(rows), col.type.list_size)
    return n, rows, keys


def window_pairs(key: np.ndarray, node: np.ndarray, clique_max: int) -> tuple[np.ndarray, np.ndarray]:
    """The candidate pairs (u < v, distinct, sorted) of the buckets given as (key, node) entries.

    Members of a bucket, in node order, are each paired with the `clique_max - 1` members before them.
    So a bucket of up to `clique_max` members gives all its pairs (verification may reject some, and
    a sparser graph would then lose true pairs that only the clique holds), and a larger one (boilerplate,
    templates, a big family of copies) costs at most clique_max - 1 pairs per member, not n^2/2: work
    per bucket is linear in its size. Each member is tried against several neighbours, so one rejected
    pair (an LSH false positive next to it) does not cut it off, as it did when large buckets were
    linked as a chain. Without verification clique_max is 1: a chain, which gives the same components.
    A bucket's pairs depend only on its members' order, which every change to the corpus keeps for the
    members it keeps (fuzzy_incremental.py relies on it).
    """
    order = np.lexsort((node, key))
    key, node = key[order], node[order]
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
    order = np.lexsort((v, u))
    u, v = u[order], v[order]
    keep = np.ones(len(u), dtype=bool)
    keep[1:] = (u[1:] != u[:-1]) | (v[1:] != v[:-1])
    return u[keep], v[keep]


VERIFY_READ_ROWS = 1024  # rows decoded at a time when fetching texts for verification


def row_texts(path: str, rows: np.ndarray) -> Iterator[tuple[np.ndarray, list]]:
    """The texts of the given rows (sorted, unique) of one documents file, in that order, as (their
    positions in ``rows``, texts) a batch at a time.

    Streamed: only the row groups holding a wanted row are read, `VERIFY_READ_ROWS` rows of the `text`
    column at a time, and only the wanted rows become Python strings. So memory is bounded by one such
    batch of texts (plus the column chunk pyarrow buffers for its row group), never by the file: reading
    the whole column made a 256 MB shard cost ~1 GB in one worker. One column on this thread: Arrow's
    reader threads cost CPU and do nothing for one column (the add of benchmarks/incremental.py read its
    9,654 texts in 0.49 CPU-s against 0.55 with them, four interleaved rounds)."""
    rows = np.asarray(rows, dtype=np.int64)
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
                for rb in pf.iter_batches(batch_size=VERIFY_READ_ROWS, row_groups=[g], columns=["text"],
                                          use_threads=False):
                    lo, hi = np.searchsorted(rows, [start, start + rb.num_rows])
                    if hi > lo:
                        yield np.arange(lo, hi), rb.column(0).take(an.from_numpy(rows[lo:hi] - start)).to_pylist()
                    start += rb.num_rows
            except (pa.ArrowException, OSError) as e:
                raise DedupInputError(f"{path}: cannot read parquet: {e}") from None


def shingle_rows(path: str, rows: np.ndarray, minhash_params: dict) -> Ragged:
    """Shingle sets of the given rows (sorted, unique) of one documents file, in that order, shingled as
    the minhashes with these (recorded) params were, streamed (`row_texts`): memory is bounded by one
    batch of texts and the sets returned. Sets are per document, so shingling batch by batch gives the
    same bytes as shingling all texts at once."""
    parts = [shingle_sets(texts, minhash_params) for _, texts in row_texts(path, rows)]
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


def pair_jaccard(a: Ragged, c: Ragged) -> np.ndarray:
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


# Fingerprints per merge step, whatever the pairs' sizes: its uint64 keys fill half the size a worker's
# malloc serves with a mapping of its own (`shuffle.worker.MMAP_THRESHOLD_BYTES`, 8 MB: 512k fingerprints,
# 4 MB of keys; the other half is room for the one pair a chunk can pass its size by). Bigger arrays are
# mapped and unmapped per chunk, and every page faults again. At 8M fingerprints (64 MB of keys) the
# pipeline benchmark's 400 MB fuzzy step took 7.8-8.3 CPU-s, 2.2-2.7 of them in the kernel; at 1M and
# 512k, 6.7-7.1 (interleaved runs; jaccard_of alone on 34k real pairs 0.52 -> 0.26 CPU-s, 38k page faults
# -> 0). The Jaccards are the same whatever the chunk (each pair is computed on its own).
VERIFY_CHUNK_FINGERPRINTS = MMAP_THRESHOLD_BYTES // 2 // np.dtype(U64).itemsize


def jaccard_of(sets: Ragged, iu: np.ndarray, iv: np.ndarray) -> np.ndarray:
    """The Jaccard of sets[iu[i]] and sets[iv[i]] for every i, a bounded chunk of pairs at a time (so
    memory follows the chunk, not the number of pairs)."""
    sizes = np.diff(sets.offsets)
    work = np.cumsum(sizes[iu] + sizes[iv])
    jac = np.empty(len(iu), dtype=np.float64)
    start = 0
    while start < len(iu):
        base = work[start - 1] if start else 0
        stop = max(start + 1, int(np.searchsorted(work, base + VERIFY_CHUNK_FINGERPRINTS, side="right")))
        jac[start:stop] = pair_jaccard(batches.take_ragged(sets, iu[start:stop]), batches.take_ragged(sets, iv[start:stop]))
        start = stop
    return jac


def marks_table(b: batches.Batch, names: Sequence[str]) -> pa.Table:
    """One file's marks (``b``: its cluster members sorted by row) as the attribute file holds them
    (arrays built from buffers: ``pa.array`` would import pandas into the process)."""
    canonical = b["is_canonical"].tolist()
    parent = [None if c else p for c, p in zip(canonical, u64_to_ids(b["p_hi"], b["p_lo"]).to_pylist())]
    parent_source = [None if c else names[r] for c, r in zip(canonical, b["p_rank"].tolist())]
    return pa.Table.from_arrays([
        u64_to_ids(b["hi"], b["lo"]),
        u64_to_ids(b["c_hi"], b["c_lo"]),
        an.from_bools(b["is_canonical"]),
        an.from_numpy(b["size"].astype(np.int64)),
        an.strings(np.asarray(names, dtype=object)[b["c_rank"]].tolist()),
        an.strings(parent),
        an.strings(parent_source),
    ], schema=FUZZY_SCHEMA)


def marks_digest(b: batches.Batch, names: Sequence[str]) -> str:
    """A digest of exactly what one file's marks say (``b`` sorted by row), so a later build can tell a
    file whose marks did not change and take its attribute file as it is. A canonical member's parent
    columns are zero in both builds (the file shows null)."""
    h = xxhash.xxh3_128()
    for k in ("hi", "lo", "c_hi", "c_lo", "p_hi", "p_lo"):
        h.update(np.ascontiguousarray(b[k], dtype=U64).tobytes())
    h.update(np.ascontiguousarray(b["is_canonical"], dtype=np.uint8).tobytes())
    h.update(np.ascontiguousarray(b["size"], dtype=np.int64).tobytes())
    h.update("\0".join(np.asarray(names, dtype=object)[b["c_rank"]].tolist()).encode())
    h.update(np.ascontiguousarray(b["p_rank"], dtype=np.int64).tobytes())
    return h.hexdigest()
