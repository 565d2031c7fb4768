"""Stateless index permutations for shuffling training windows.

Why a Feistel network: the training reader must map "the k-th sequence of the run" to a window of the
corpus without storing a permutation table (the corpus may hold billions of windows) and without any
state beyond the seed, so that resuming needs only the step number. A keyed Feistel network over
``2h`` bits is a bijection on ``[0, 2**(2h))`` for any round function; cycle-walking (re-encrypt while
the value is >= n) restricts it to a bijection on ``[0, n)`` for any n. Five rounds with keyed
64-bit mixing give batches that look independent of the corpus order.

The linear/LCG permutation ``(a*i + c) mod n`` is kept only as a selectable baseline: it is a bijection
too, but neighbouring indices always land a fixed distance ``a`` apart, so on a corpus sorted in blocks
(by source, topic, date...) the make-up of a batch is structured rather than random (see the tests).

Everything is vectorised over numpy index arrays and works in uint64 with half-widths <= 32 bits, so
n up to 2**63 never overflows.
"""

from __future__ import annotations

import math

import numpy as np
import xxhash

__all__ = ["derive_key", "feistel_permute", "feistel_inverse", "lcg_permute", "permute", "ROUNDS"]

ROUNDS = 5
_MASK64 = (1 << 64) - 1
_MAX_N = 1 << 63


def derive_key(*parts: object) -> int:
    """A 64-bit key from a seed and labels (source name, epoch, block...), stable across runs/platforms.

    Uses xxh3 over a canonical text form instead of Python's ``hash`` (salted per process)."""
    text = "\x1f".join(f"{type(p).__name__}:{p}" for p in parts)
    return xxhash.xxh3_64_intdigest(text.encode("utf-8"))


def _mix64(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser: a bijective mixer with full avalanche (uint64 in, uint64 out)."""
    x = x ^ (x >> np.uint64(33))
    x = x * np.uint64(0xFF51AFD7ED558CCD)
    x = x ^ (x >> np.uint64(33))
    x = x * np.uint64(0xC4CEB9FE1A85EC53)
    return x ^ (x >> np.uint64(33))


def _round_keys(key: int, rounds: int) -> list[np.uint64]:
    base = np.array([(key + 0x9E3779B97F4A7C15 * (i + 1)) & _MASK64 for i in range(rounds)], dtype=np.uint64)
    return list(_mix64(base))


def _half_bits(n: int) -> int:
    bits = max(2, (n - 1).bit_length())
    return (bits + 1) // 2


def _check(indices, n: int) -> tuple[np.ndarray, bool]:
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool):
        raise TypeError(f"permutation length must be an int, got {type(n).__name__}")
    n = int(n)
    if n <= 0 or n > _MAX_N:
        raise ValueError(f"permutation length must be in [1, 2**63], got {n}")
    scalar = np.ndim(indices) == 0
    arr = np.asarray(indices)
    if arr.dtype.kind not in "iu":
        if arr.size == 0:
            arr = arr.astype(np.int64)
        else:
            raise TypeError(f"indices must be integers, got dtype {arr.dtype}")
    if arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi >= n:
            bad = lo if lo < 0 else hi
            raise IndexError(f"index {bad} out of range for a permutation of length {n} (valid: 0..{n - 1})")
    return arr, scalar


def _feistel(x: np.ndarray, h: int, keys: list[np.uint64], inverse: bool) -> np.ndarray:
    mask = np.uint64((1 << h) - 1)
    sh = np.uint64(h)
    left, right = x >> sh, x & mask
    if not inverse:
        for k in keys:
            left, right = right, left ^ (_mix64(right ^ k) & mask)
    else:
        for k in reversed(keys):
            left, right = right ^ (_mix64(left ^ k) & mask), left
    return (left << sh) | right


def _cycle_walk(indices, n: int, key: int, rounds: int, inverse: bool):
    arr, scalar = _check(indices, n)
    n = int(n)
    keys = _round_keys(int(key) & _MASK64, rounds)
    h = _half_bits(n)
    x = _feistel(arr.astype(np.uint64).ravel(), h, keys, inverse)
    limit = np.uint64(n)
    out_of_range = np.flatnonzero(x >= limit)
    while out_of_range.size:  # domain is < 4n, so on average < 4 walks
        x[out_of_range] = _feistel(x[out_of_range], h, keys, inverse)
        out_of_range = out_of_range[x[out_of_range] >= limit]
    out = x.astype(np.int64).reshape(arr.shape)
    return int(out) if scalar else out


def feistel_permute(indices, n: int, key: int, rounds: int = ROUNDS):
    """Image of ``indices`` (int or int array, each in [0, n)) under the keyed permutation of [0, n).

    Raises IndexError for an index outside [0, n). Returns int64 (an int for a scalar input)."""
    return _cycle_walk(indices, n, key, rounds, inverse=False)


def feistel_inverse(values, n: int, key: int, rounds: int = ROUNDS):
    """Inverse of :func:`feistel_permute` (same n and key): ``feistel_inverse(feistel_permute(i)) == i``."""
    return _cycle_walk(values, n, key, rounds, inverse=True)


def _lcg_params(n: int, key: int) -> tuple[int, int]:
    """Multiplier a (coprime to n, so the map is a bijection) and offset c, both from the key."""
    if n == 1:
        return 1, 0
    k = int(key) & _MASK64
    a = 1 + k % (n - 1)
    while math.gcd(a, n) != 1:
        a = 1 + a % (n - 1)
    c = derive_key(k, "lcg-offset") % n
    return a, c


def lcg_permute(indices, n: int, key: int):
    """Baseline linear permutation ``(a*i + c) mod n``; a bijection, but a poorly mixing one."""
    arr, scalar = _check(indices, n)
    n = int(n)
    a, c = _lcg_params(n, key)
    if a * (n - 1) + c < _MAX_N:
        out = (arr.astype(np.int64) * np.int64(a) + np.int64(c)) % np.int64(n)
    else:  # exact big-int arithmetic; the baseline does not need to be fast at huge n
        out = np.array([(a * int(i) + c) % n for i in arr.ravel()], dtype=np.int64).reshape(arr.shape)
    return int(out) if scalar else out


def permute(indices, n: int, key: int, kind: str = "feistel"):
    """Dispatch on the permutation kind named in configs: "feistel" (default) or "lcg" (baseline)."""
    if kind == "feistel":
        return feistel_permute(indices, n, key)
    if kind == "lcg":
        return lcg_permute(indices, n, key)
    raise ValueError(f"unknown permutation {kind!r}; expected 'feistel' or 'lcg'")
