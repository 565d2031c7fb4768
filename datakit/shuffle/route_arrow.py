"""Columnar shuffle routing: one reducer target per row of an Arrow key column, without a Python call per row.

The record path routes a key with `keys.route(key, keys.encode_key(key), n)`. The columnar fast path must put
every key on *exactly* the same reducer, or a key would live in two places when both paths feed one shuffle.
So this module reproduces the record path bit for bit, just vectorized:

- Integers are hashed by an XXH3-64 (seed 0, default secret) written in numpy for the one input shape ints
  have: the 9-byte encoding b"\\x04" + big-endian (key + 2**63). That is XXH3's "9 to 16 bytes" branch, which
  needs only two 64-bit reads, a 64x64->128 multiply (emulated with 32-bit halves) and the avalanche, so a
  whole column hashes in a few dozen array operations (tens of millions of rows/s on one core).
- Strings, binaries and bools are hashed with the real `xxhash` once per *distinct* value and spread to the
  rows with `np.take`, so low-cardinality columns are nearly free; for columns that look unique (sampled),
  deduplicating would cost more than it saves, and each row is hashed directly (one xxh3 call per row).
- Ints in [0, n) pass through unchanged (as in `keys.route`); nulls are the key None: hashed, never passed.

Types the record path encodes differently (floats, tuples) or cannot encode (lists, structs, ...) raise
`KeyEncodingError`: use a key function on the record path for those.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from .keys import KeyEncodingError

__all__ = ["key_hashes", "route_column"]

_xxh3 = xxhash.xxh3_64_intdigest

# Canonical encodings from keys.py for the scalar-only tags.
_TAG_STR = b"\x06"
_TAG_BYTES = b"\x07"
_HASH_NULL = _xxh3(b"\x01")
_HASH_FALSE = _xxh3(b"\x02")
_HASH_TRUE = _xxh3(b"\x03")

# --- XXH3-64 for the 9-byte integer encoding -------------------------------------------------------------
# XXH3_len_9to16_64b(input, len=9, secret=kSecret, seed=0):
#   lo  = readLE64(input[0:8]) ^ (readLE64(secret[24:]) ^ readLE64(secret[32:]))
#   hi  = readLE64(input[1:9]) ^ (readLE64(secret[40:]) ^ readLE64(secret[48:]))
#   acc = 9 + bswap64(lo) + hi + fold64(lo * hi as 128 bits)
#   return avalanche(acc)
# The input is 0x04 followed by the big-endian bytes of u = key ^ 2**63 (two's complement + 2**63), so with
# bs = bswap64(key bits):  readLE64(input[1:9]) = bs ^ 0x80  and  readLE64(input[0:8]) = (bs << 8) ^ 0x8004,
# and bswap64(lo) = (key >> 8 logical) ^ bswap64(lo's constant part). Folding the constants leaves one
# byteswap per row. Checked bit for bit against xxhash in tests/test_route_arrow.py.
# Bytes 24..55 of XXH3's default secret (kSecret in xxhash.h), the only part this branch reads.
_SECRET_24_56 = bytes.fromhex(
    "7240a4a4b7b3671f" "cb79e64eccc0e578" "825ad07dccff7221" "b8084674f743248e"
)


def _secret_u64(offset: int) -> int:
    return int.from_bytes(_SECRET_24_56[offset - 24:offset - 16], "little")


_BITFLIP1 = _secret_u64(24) ^ _secret_u64(32)
_BITFLIP2 = _secret_u64(40) ^ _secret_u64(48)
_U64_MASK = (1 << 64) - 1
_C_LO = np.uint64(0x8004 ^ _BITFLIP1)
_C_HI = np.uint64(0x80 ^ _BITFLIP2)
_C_LO_SWAPPED = np.uint64(int.from_bytes((0x8004 ^ _BITFLIP1).to_bytes(8, "little"), "big"))
_PRIME_MX = np.uint64(0x165667919E3779F9)
_M32 = np.uint64(0xFFFFFFFF)
_S8, _S32, _S37 = np.uint64(8), np.uint64(32), np.uint64(37)
_NINE = np.uint64(9)
# Rows per block: the ~8 scratch arrays of one block stay in L2, instead of streaming ~30 full-column temps
# through memory.
_BLOCK = 1 << 14


def _xxh3_int64(values: np.ndarray) -> np.ndarray:
    """xxh3_64(b"\\x04" + (v + 2**63).to_bytes(8, "big")) for every int64 `v`, as uint64."""
    raw = np.ascontiguousarray(values, dtype=np.int64).view(np.uint64)
    n = len(raw)
    out = np.empty(n, dtype=np.uint64)
    m = min(n, _BLOCK)
    lo, hi, a0, a1, p00, p01, p10, t = (np.empty(m, dtype=np.uint64) for _ in range(8))
    for start in range(0, n, _BLOCK):
        u = raw[start:start + _BLOCK]
        k = len(u)
        lo_, hi_, a0_, a1_, p00_, p01_, p10_, t_ = lo[:k], hi[:k], a0[:k], a1[:k], p00[:k], p01[:k], p10[:k], t[:k]
        acc = out[start:start + k]
        bs = u.byteswap()
        np.bitwise_xor(bs, _C_HI, out=hi_)
        np.left_shift(bs, _S8, out=lo_)
        np.bitwise_xor(lo_, _C_LO, out=lo_)
        # acc = 9 + bswap(lo) + hi
        np.right_shift(u, _S8, out=acc)
        np.bitwise_xor(acc, _C_LO_SWAPPED, out=acc)
        np.add(acc, hi_, out=acc)
        np.add(acc, _NINE, out=acc)
        # 128-bit product lo * hi from 32-bit halves; fold = low64 ^ high64.
        np.bitwise_and(lo_, _M32, out=a0_)
        np.right_shift(lo_, _S32, out=a1_)
        np.bitwise_and(hi_, _M32, out=t_)  # b0
        np.right_shift(hi_, _S32, out=hi_)  # b1 (hi no longer needed)
        np.multiply(a0_, t_, out=p00_)
        np.multiply(a0_, hi_, out=p01_)
        np.multiply(a1_, t_, out=p10_)
        np.multiply(a1_, hi_, out=a1_)  # p11
        # cross = (p00 >> 32) + (p10 & M32) + p01
        np.right_shift(p00_, _S32, out=t_)
        np.bitwise_and(p10_, _M32, out=a0_)
        np.add(t_, a0_, out=t_)
        np.add(t_, p01_, out=t_)
        # high64 = (p10 >> 32) + (cross >> 32) + p11
        np.right_shift(p10_, _S32, out=p10_)
        np.add(a1_, p10_, out=a1_)
        np.right_shift(t_, _S32, out=a0_)
        np.add(a1_, a0_, out=a1_)
        # low64 = (cross << 32) | (p00 & M32)
        np.left_shift(t_, _S32, out=t_)
        np.bitwise_and(p00_, _M32, out=p00_)
        np.bitwise_or(t_, p00_, out=t_)
        np.bitwise_xor(t_, a1_, out=t_)
        np.add(acc, t_, out=acc)
        # avalanche: h ^= h >> 37; h *= PRIME_MX1; h ^= h >> 32
        np.right_shift(acc, _S37, out=t_)
        np.bitwise_xor(acc, t_, out=acc)
        np.multiply(acc, _PRIME_MX, out=acc)
        np.right_shift(acc, _S32, out=t_)
        np.bitwise_xor(acc, t_, out=acc)
    return out


# --- per-chunk helpers -------------------------------------------------------------------------------------

def _unsupported(t: pa.DataType) -> KeyEncodingError:
    return KeyEncodingError(
        f"cannot route an Arrow column of type {t} on the columnar path: supported key columns are integers, "
        "bool, string/large_string/string_view, binary/large_binary/binary_view, null, and dictionaries of "
        "these; use a key function (record path) for other key types"
    )


def _null_mask(arr: pa.Array) -> np.ndarray | None:
    """Boolean mask of null rows, or None when the chunk has no nulls (the common, free case)."""
    if arr.null_count == 0:
        return None
    return arr.is_null().to_numpy(zero_copy_only=False)


def _int_values(arr: pa.Array) -> np.ndarray:
    """The chunk's integers as int64, straight from the data buffer (null slots hold arbitrary values).

    uint64 values >= 2**63 are outside the record path's signed 64-bit key range and are refused here, as
    `encode_key` refuses them there.
    """
    dtype = np.dtype(arr.type.to_pandas_dtype())
    buf = arr.buffers()[1]
    vals = np.frombuffer(buf, dtype=dtype, count=arr.offset + len(arr))[arr.offset:] if buf is not None \
        else np.zeros(len(arr), dtype=dtype)
    if dtype == np.uint64:
        too_big = vals >= np.uint64(1 << 63)
        nulls = _null_mask(arr)
        if nulls is not None:
            too_big &= ~nulls
        if too_big.any():
            first = int(np.argmax(too_big))
            raise KeyEncodingError(
                f"uint64 key column has value {int(vals[first])} at row {first} of its chunk, outside the signed 64-bit "
                "key range; cast or map it in a key function (record path) instead"
            )
    return vals.astype(np.int64, copy=False)


def _with_nulls(values: np.ndarray, arr: pa.Array, null_value: int) -> np.ndarray:
    nulls = _null_mask(arr)
    if nulls is not None:
        values[nulls] = null_value
    return values


def _is_varlen(t: pa.DataType) -> bool:
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t))


def _normalize_views(arr: pa.Array) -> pa.Array:
    """string_view/binary_view -> string/binary: the hashing below reads classic offset layouts."""
    t = arr.type
    if pa.types.is_string_view(t):
        return arr.cast(pa.string())
    if pa.types.is_binary_view(t):
        return arr.cast(pa.binary())
    return arr


def _hash_varlen_each(arr: pa.Array) -> np.ndarray:
    """xxh3 of the canonical encoding of every row of a string/binary chunk: one xxhash call per row.

    Arrow prepends the tag byte in C (and nulls become the None encoding), which leaves the Python loop
    nothing to do per row but the hash call itself.
    """
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    is_str = pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)
    bin_type = pa.large_binary() if large else pa.binary()
    tag = pa.scalar(_TAG_STR if is_str else _TAG_BYTES, type=bin_type)
    encoded = pc.binary_join_element_wise(tag, arr.view(bin_type), pa.scalar(b"", type=bin_type))
    if encoded.null_count:
        encoded = encoded.fill_null(pa.scalar(b"\x01", type=bin_type))
    return np.fromiter(map(_xxh3, encoded.to_pylist()), dtype=np.uint64, count=len(encoded))


_SAMPLE = 1024


def _looks_unique(arr: pa.Array) -> bool:
    """Whether deduplicating a string chunk before hashing is likely a loss.

    Dictionary-encoding costs about as much per row as one xxh3 call from Python (more, for unique ids), so
    it only pays on repetitive columns. An evenly spaced sample of rows decides; either way the hashes are
    identical, only the speed differs.
    """
    n = len(arr)
    if n <= _SAMPLE:
        return False
    idx = pa.array(np.linspace(0, n - 1, _SAMPLE).astype(np.int64))
    sample = arr.take(idx).to_pylist()
    return len(set(sample)) > _SAMPLE // 2


def _dictionary_parts(arr: pa.Array) -> tuple[pa.Array, np.ndarray, np.ndarray | None]:
    """(dictionary, int64 indices with nulls set to 0, null mask or None) of a dictionary-typed chunk."""
    indices = arr.indices
    nulls = _null_mask(arr)  # a row is null if its index is null (null dictionary values are handled there)
    idx = indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return arr.dictionary, idx, nulls


def _hash_chunk(arr: pa.Array, dedup: bool = True) -> np.ndarray:
    """uint64 xxh3_64 of the canonical key encoding of every row of one Arrow chunk.

    `dedup=False` is for dictionaries (already distinct, and re-encoding them would recurse forever).
    """
    arr = _normalize_views(arr)
    t = arr.type
    n = len(arr)
    if pa.types.is_dictionary(t):
        dictionary, idx, nulls = _dictionary_parts(arr)
        if len(dictionary) == 0:
            return np.full(n, _HASH_NULL, dtype=np.uint64)
        out = _hash_chunk(dictionary, dedup=False)[idx] if n else np.empty(0, dtype=np.uint64)
        if nulls is not None:
            out[nulls] = _HASH_NULL
        return out
    if pa.types.is_integer(t):
        return _with_nulls(_xxh3_int64(_int_values(arr)), arr, _HASH_NULL)
    if pa.types.is_boolean(t):
        vals = arr.fill_null(False).to_numpy(zero_copy_only=False)
        return _with_nulls(np.where(vals, np.uint64(_HASH_TRUE), np.uint64(_HASH_FALSE)), arr, _HASH_NULL)
    if _is_varlen(t):
        if not dedup or _looks_unique(arr):
            return _hash_varlen_each(arr)
        return _hash_chunk(pc.dictionary_encode(arr))
    if pa.types.is_null(t):
        return np.full(n, _HASH_NULL, dtype=np.uint64)
    raise _unsupported(t)


def _route_chunk(arr: pa.Array, n: int, dedup: bool = True) -> np.ndarray:
    """int64 reducer per row of one chunk, equal to `keys.route` on each row's Python value."""
    arr = _normalize_views(arr)
    t = arr.type
    null_target = _HASH_NULL % n
    if pa.types.is_dictionary(t):
        # Route the distinct values once (this keeps int pass-through right), then spread by index.
        dictionary, idx, nulls = _dictionary_parts(arr)
        if len(dictionary) == 0:
            return np.full(len(arr), null_target, dtype=np.int64)
        out = _route_chunk(dictionary, n, dedup=False)[idx] if len(arr) else np.empty(0, dtype=np.int64)
        if nulls is not None:
            out[nulls] = null_target
        return out
    if pa.types.is_integer(t):
        vals = _int_values(arr)
        out = _mod(_xxh3_int64(vals), n)
        keep = vals < n
        if pa.types.is_signed_integer(t):
            keep &= vals >= 0
        np.copyto(out, vals, where=keep)
        return _with_nulls(out, arr, null_target)
    return _mod(_hash_chunk(arr, dedup), n)  # strings, bytes, bools, nulls: never pass through


def _mod(hashes: np.ndarray, n: int) -> np.ndarray:
    """hash % n as int64 (a mask when n is a power of two: a 64-bit divide per row is the slow part)."""
    if n & (n - 1) == 0:
        return (hashes & np.uint64(n - 1)).view(np.int64)
    return (hashes % np.uint64(n)).view(np.int64)


def _chunks(col: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    if isinstance(col, pa.ChunkedArray):
        return list(col.chunks)
    if isinstance(col, pa.Array):
        return [col]
    raise TypeError(f"expected a pyarrow Array or ChunkedArray, got {type(col).__name__}")


def _check_type(col: pa.Array | pa.ChunkedArray) -> None:
    """Refuse unsupported types up front, so even empty columns (no chunks) report them."""
    t = col.type
    value_t = t.value_type if pa.types.is_dictionary(t) else t
    if not (pa.types.is_integer(value_t) or pa.types.is_boolean(value_t) or _is_varlen(value_t)
            or pa.types.is_string_view(value_t) or pa.types.is_binary_view(value_t) or pa.types.is_null(value_t)):
        raise _unsupported(t)


def key_hashes(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """xxh3_64 of `keys.encode_key(v)` for every row value v (nulls are None), as a uint64 array."""
    chunks = _chunks(col)
    _check_type(col)
    parts = [_hash_chunk(c) for c in chunks]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64)


def route_column(col: pa.Array | pa.ChunkedArray, num_targets: int) -> np.ndarray:
    """The reducer of every row: `keys.route(v, keys.encode_key(v), num_targets)`, as an int64 array.

    Raises KeyEncodingError for column types the record path would encode differently or not at all, and
    for uint64 values outside the signed 64-bit key range.
    """
    if isinstance(num_targets, bool) or not isinstance(num_targets, (int, np.integer)) \
            or not 1 <= num_targets < 2**63:
        raise ValueError(f"num_targets must be a positive integer below 2**63, got {num_targets!r}")
    n = int(num_targets)
    chunks = _chunks(col)
    _check_type(col)
    parts = [_route_chunk(c, n) for c in chunks]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
