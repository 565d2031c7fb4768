"""MinHash signatures and LSH band buckets, vectorized over whole batches of documents.

Permutation i maps the top 32 bits x of a shingle hash to a_i * x + b_i (mod 2^32) with a_i odd: a
bijection on 32-bit values, applied to inputs that are already uniformly distributed. The signature
value is the minimum over the document's shingles. 32-bit lanes rather than 64: numpy's SIMD loops
multiply, add and reduce uint32 about four times faster than uint64, and the statistics are those of
ideal MinHash (equal-value rate = Jaccard, band collision rate = Jaccard^rows, variance binomial;
tested). Two different shingles of one document pair share a 32-bit value with probability
~|A||B|/2^32, i.e. never in practice. All permutations of a block of shingles are one broadcast
multiply-add into a (perms x block) buffer, and the per-document minima are one `np.minimum.reduceat`
along the block; blocks are sized to stay in cache. Documents are processed a batch at a time, so there
is no Python loop per shingle, per permutation or per document.

Band j of a signature is reduced to one 64-bit bucket key by mixing its `rows` values together with j,
so buckets of different bands never collide and a bucket key alone identifies (band, values).
"""

from __future__ import annotations

import dataclasses
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache, partial

import numpy as np
import pyarrow as pa

from datakit.core import arrow_numpy as an
from datakit.core.layout import AttributesDir
from datakit.shuffle import ExecConfig

from . import keyed
from .config import DedupConfig
from .hashing import U64, mix64, seeded_constants
from .keyed import Reuse
from .layout import (
    basename,
    invalidate,
    iter_batches,
    main_files,
    write_meta,
    write_parquet_atomic,
)
from .shingles import PUNCTUATION, SHINGLE_FORMAT, Tokens, check_shingling, shingle_hashes

MINHASH_FORMAT = 1  # bump when permutations or band hashing change
_BLOCK = 8192
_MAX = np.iinfo(np.uint32).max


def minhash_params(cfg: DedupConfig) -> dict:
    """What a minhash step computes, from the `dedup:` section: everything that changes the bucket values
    (bands x rows resolved from the threshold, punctuation and the format versions included). Punctuation
    always separates words (`PUNCTUATION`, as datatrove's MinHash does; "drop" was the first format's
    behaviour, see shingles.py): a constant of the format, not a manifest key.

    Derived once per step, it is the one description of the hashing: the per-file work reads it, it is
    recorded with the output (attrs.json and every file's metadata), compared before minhash sets are
    mixed, and read back by fuzzy verification to shingle the same way (`shingles_of`). Raises
    ValueError for parameters the hashing has no meaning for.
    """
    check_shingling(cfg.ngram, cfg.ngram_unit, cfg.max_text_chars, PUNCTUATION)
    bands, rows = cfg.lsh()
    if not isinstance(cfg.seed, int) or not 0 <= cfg.seed < 2**63:
        raise ValueError(f"seed must be a non-negative integer, got {cfg.seed!r}")
    return {
        "ngram": cfg.ngram, "ngram_unit": cfg.ngram_unit, "num_perms": cfg.num_perms, "bands": bands, "rows": rows,
        "seed": cfg.seed, "max_text_chars": cfg.max_text_chars, "punctuation": PUNCTUATION,
        "shingle_format": SHINGLE_FORMAT, "minhash_format": MINHASH_FORMAT,
        "unicode_version": unicodedata.unidata_version,
    }


def shingles_of(texts, params: dict) -> Tokens:
    """The shingle hashes of texts as a minhash step with these (recorded) params made them; sets
    recorded before `punctuation` existed deleted punctuation."""
    return shingle_hashes(texts, params["ngram"], params["ngram_unit"], params["max_text_chars"],
                          params.get("punctuation", "drop"))


@lru_cache(maxsize=8)
def permutations(seed: int, num_perms: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) uint32 of the permutations a*x + b mod 2^32, a odd; fixed by (seed, index) forever."""
    a = (seeded_constants(seed, num_perms, stream=1) >> U64(32)).astype(np.uint32) | np.uint32(1)
    b = (seeded_constants(seed, num_perms, stream=2) >> U64(32)).astype(np.uint32)
    return a, b


def signatures(sh: Tokens, num_perms: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(signatures (docs x num_perms) uint32, has_shingles bool per doc).

    Docs without shingles get an all-max row and has_shingles False: they must never be bucketed (all
    empty documents would otherwise be one giant cluster).
    """
    a, b = permutations(seed, num_perms)
    n_docs = len(sh.offsets) - 1
    sig = np.full((n_docs, num_perms), _MAX, dtype=np.uint32)
    counts = np.diff(sh.offsets)
    has = counts > 0
    docs = np.flatnonzero(has)
    if len(docs) == 0:
        return sig, has
    starts = sh.offsets[docs]  # strictly increasing: every listed doc is non-empty
    values = (sh.values >> U64(32)).astype(np.uint32)
    total = len(values)
    buf = np.empty((num_perms, min(_BLOCK, total)), dtype=np.uint32)
    a_col, b_col = a[:, None], b[:, None]
    for c0 in range(0, total, _BLOCK):
        block = values[c0 : c0 + _BLOCK]
        out = buf[:, : len(block)]
        np.multiply(a_col, block[None, :], out=out)
        np.add(out, b_col, out=out)
        lo = int(np.searchsorted(starts, c0, side="right")) - 1  # doc containing position c0
        hi = int(np.searchsorted(starts, c0 + len(block), side="left"))  # docs starting inside the block
        local = starts[lo:hi] - c0
        local[0] = 0
        mins = np.minimum.reduceat(out, local, axis=1).T  # (docs in block, perms)
        rows = docs[lo:hi]
        np.minimum(sig[rows], mins, out=mins)
        sig[rows] = mins
    return sig, has


@lru_cache(maxsize=8)
def _band_constants(rows: int) -> np.ndarray:
    return seeded_constants(0xBA5D, rows, stream=3) | U64(1)


def band_buckets(sig: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """(docs x bands) uint64 bucket keys; band j mixes sig[:, j*rows:(j+1)*rows] with j."""
    n = sig.shape[0]
    view = sig[:, : bands * rows].astype(U64).reshape(n, bands, rows)
    k = _band_constants(rows)
    acc = view[:, :, 0] * k[0]
    for r in range(1, rows):
        acc += view[:, :, r] * k[r]
    acc += (np.arange(bands, dtype=U64) * U64(0x9E3779B97F4A7C15))[None, :]
    return mix64(acc)


def buckets_for_texts(texts, params: dict) -> tuple[np.ndarray, np.ndarray]:
    """(bucket keys docs x bands, has_shingles) for a batch of texts (params: `minhash_params`)."""
    bands, rows = params["bands"], params["rows"]
    sig, has = signatures(shingles_of(texts, params), bands * rows, params["seed"])
    return band_buckets(sig, bands, rows), has


@dataclass
class MinHashResult:
    """What the minhash step produced for one source (paths relative to its out_dir)."""

    source: str
    attributes: str
    num_files: int
    counters: dict[str, int] = field(default_factory=dict)
    params: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "MinHashResult":
        return cls(**d)


BATCH_ROWS = 1024
BATCH_CHARS = 1 << 18  # ~256k characters per vectorized batch: temporaries stay cache-sized


def text_batches(texts: list, max_chars: int):
    """Split a list of texts into runs of about BATCH_CHARS (capped) characters."""
    start, size = 0, 0
    for i, t in enumerate(texts):
        size += min(len(t), max_chars) if isinstance(t, str) else 0
        if size >= BATCH_CHARS:
            yield start, i + 1
            start, size = i + 1, 0
    if start < len(texts):
        yield start, len(texts)


def bucket_schema(bands: int) -> pa.Schema:
    return pa.schema([("id", pa.string()), ("buckets", pa.list_(pa.uint64(), bands))])


def _minhash_file(job: tuple[str, str], params: dict) -> dict[str, int]:
    """One normalized file -> its co-partitioned {id, buckets} file (buckets null: no shingles); its
    counts (a file's output depends on its content and ``params`` only: keyed.py can reuse it)."""
    src, dst = job
    max_chars, bands = params["max_text_chars"], params["bands"]
    ids, bucket_rows, valid = [], [], []
    rows = no_shingles = truncated = null_text = 0
    for rb in iter_batches(src, ["id", "text"], BATCH_ROWS):
        texts = rb.column(1).to_pylist()
        ids.append(rb.column(0))
        for a, b in text_batches(texts, max_chars):
            chunk = texts[a:b]
            null_text += sum(t is None for t in chunk)
            truncated += sum(1 for t in chunk if t is not None and len(t) > max_chars)
            bk, has = buckets_for_texts(chunk, params)
            bucket_rows.append(bk)
            valid.append(has)
        rows += len(texts)
    bk = np.concatenate(bucket_rows) if bucket_rows else np.empty((0, bands), U64)
    has = np.concatenate(valid) if valid else np.empty(0, bool)
    no_shingles = int((~has).sum())
    flat = an.from_numpy(bk.reshape(-1).astype(np.uint64, copy=False))  # (not pa.array: it imports pandas)
    lists = pa.FixedSizeListArray.from_arrays(flat, bands, mask=an.from_bools(~has))
    id_col = pa.chunked_array(ids, pa.string()) if ids else pa.chunked_array([], pa.string())
    table = pa.table({"id": id_col, "buckets": lists}, schema=bucket_schema(bands))
    write_parquet_atomic(table, dst, {"kind": "minhash", "params": params})
    return {"docs": rows, "no_shingles": no_shingles, "truncated": truncated, "null_text": null_text}


COUNTS = ("docs", "no_shingles", "truncated", "null_text")


def _jobs(name: str, normalized_dir: str, out_dir: str, params: dict, reuse_from: Reuse | None
          ) -> list[keyed.Job]:
    """One keyed job per normalized file: its key is the minhash parameters and the file's recorded
    content (nothing else changes its signatures), None without reuse."""
    files = main_files(normalized_dir)
    adir = AttributesDir.of(out_dir, name)
    hashes = keyed.recorded_hashes([normalized_dir]) if reuse_from is not None else {}
    jobs = []
    for f in files:
        rel = f"{AttributesDir.rel(name)}/{basename(f.path)}"
        key = None if reuse_from is None else keyed.key_of(reuse_from.settings, params, rel, hashes.get(f.path))
        jobs.append(keyed.Job(key, (rel,), (f.path, adir.file(f.path)),
                              reuse_from.earlier if reuse_from is not None else None))
    return jobs


def minhash_source(
    name: str,
    normalized_dir: str,
    out_dir: str,
    cfg: DedupConfig | None = None,
    exec_config: ExecConfig | None = None,
    reuse_from: Reuse | None = None,
) -> MinHashResult:
    """The minhash step for one source: `out_dir/attributes/<name>/` co-partitioned `{id, buckets}` files.

    `cfg` is the `dedup:` section (default: its defaults). One engine task per normalized file. The
    parameters (`minhash_params`, format versions included) go into attrs.json and every file's parquet
    metadata; fuzzy_dups refuses to combine sources whose parameters differ. ``reuse_from``: take each
    file's signatures from the earlier build when the file is unchanged (counters ``files/reused`` and
    ``files/computed``).
    """
    params = minhash_params(cfg or DedupConfig())
    jobs = _jobs(name, normalized_dir, out_dir, params, reuse_from)
    adir = AttributesDir.of(out_dir, name)
    invalidate(adir.root)
    compute = partial(_minhash_file, params=params)
    done = keyed.run_all(jobs, [j.job[0] for j in jobs], out_dir, compute, exec_config)
    per_file = sorted(done, key=lambda d: d.files[0])
    c = {k: sum(d.stats[k] for d in per_file) for k in COUNTS}
    write_meta(adir.root, {
        "kind": "minhash", "source": name, "params": params, "files": [basename(d.files[0]) for d in per_file],
        "rows": [d.stats["docs"] for d in per_file], "counters": c,
    })
    if reuse_from is not None:
        c.update(keyed.record(out_dir, per_file))
    return MinHashResult(source=name, attributes=AttributesDir.rel(name), num_files=len(jobs), counters=c,
                         params=params)
