"""Vectorized 64-bit hashing primitives shared by every dedup module.

Everything here works on whole numpy arrays: dedup touches every shingle of every document, so a Python
call per value would dominate the run time. Arithmetic is uint64 with wrap-around (numpy never warns for
array overflow), which is exactly the ring the mixers below are designed for.

Document ids are 32-hex strings (xxh3-128 of the text). Inside the dedup shuffles they travel as two
uint64 (hi, lo): 16 bytes instead of a Python str, sortable with numpy, and (hi, lo) order equals the
string order of lowercase hex, so "lowest id" means the same thing in both forms.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from datakit.core import arrow_numpy as an

U64 = np.uint64
_M1 = U64(0xBF58476D1CE4E5B9)
_M2 = U64(0x94D049BB133111EB)
_GOLDEN = U64(0x9E3779B97F4A7C15)


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: a bijection on uint64 with full avalanche. Returns a new array."""
    x = np.asarray(x, dtype=U64)
    x = x ^ (x >> U64(30))
    x *= _M1
    x ^= x >> U64(27)
    x *= _M2
    x ^= x >> U64(31)
    return x


def seeded_constants(seed: int, count: int, stream: int) -> np.ndarray:
    """`count` pseudo-random uint64 derived from (seed, stream) by splitmix64.

    Defined here rather than drawn from numpy's Generator so the values can never change with a numpy
    upgrade: permutation and n-gram constants are part of the on-disk format of the minhash attributes.
    """
    base = (int(seed) * 0x9E3779B97F4A7C15 + int(stream) * 0xD1B54A32D192ED03) & 0xFFFFFFFFFFFFFFFF
    idx = np.arange(1, count + 1, dtype=U64)
    return mix64(U64(base) + idx * _GOLDEN)


def route_keys(keys: np.ndarray, num_shards: int) -> np.ndarray:
    """Shard of each uint64/int64 key (hashed first, so structured keys such as node numbers spread)."""
    k = np.ascontiguousarray(keys).view(U64) if np.asarray(keys).dtype != U64 else np.asarray(keys)
    return (mix64(k ^ U64(0x243F6A8885A308D3)) % U64(num_shards)).astype(np.int64)


# ------------------------------------------------------------------ ids
_HEX_VALUE = np.full(256, 255, dtype=np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX_VALUE[_c] = _i
_HEX_DIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


class IdFormatError(ValueError):
    """An id column does not hold 32-character lowercase hex strings."""


def ids_to_u64(ids: pa.Array | pa.ChunkedArray, where: str = "") -> tuple[np.ndarray, np.ndarray]:
    """32-hex id strings -> (hi, lo) uint64 arrays, without a Python loop.

    `where` names the file for the error message: a malformed id would otherwise surface much later as
    a wrong survivor.
    """
    ids = an.combined(ids)
    n = len(ids)
    if n == 0:
        return np.empty(0, U64), np.empty(0, U64)
    if ids.null_count:
        row = int(np.flatnonzero(np.asarray(ids.is_null()))[0])
        raise IdFormatError(f"{where}: row {row}: field 'id' is null")
    if pa.types.is_large_string(ids.type):
        ids = ids.cast(pa.string())
    offsets = np.frombuffer(ids.buffers()[1], dtype=np.int32, count=n + 1, offset=ids.offset * 4)
    lengths = np.diff(offsets)
    if (lengths != 32).any():
        row = int(np.flatnonzero(lengths != 32)[0])
        raise IdFormatError(
            f"{where}: row {row}: field 'id' must be a 32-character hex string, got {ids[row].as_py()!r:.60}"
        )
    raw = np.frombuffer(ids.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]].reshape(n, 32)
    nib = _HEX_VALUE[raw]
    if (nib == 255).any():
        row = int(np.flatnonzero((nib == 255).any(axis=1))[0])
        raise IdFormatError(f"{where}: row {row}: field 'id' is not lowercase hex: {ids[row].as_py()!r:.60}")
    packed = (nib[:, 0::2] << 4) | nib[:, 1::2]  # (n, 16) bytes, big-endian
    words = np.ascontiguousarray(packed).view(">u8").astype(U64)
    return words[:, 0].copy(), words[:, 1].copy()


def u64_to_ids(hi: np.ndarray, lo: np.ndarray) -> pa.Array:
    """Inverse of `ids_to_u64`: a pyarrow string array of 32-hex ids."""
    n = len(hi)
    words = np.empty((n, 2), dtype=">u8")
    words[:, 0] = hi
    words[:, 1] = lo
    raw = words.view(np.uint8).reshape(n, 16)
    chars = np.empty((n, 32), dtype=np.uint8)
    chars[:, 0::2] = _HEX_DIGITS[raw >> 4]
    chars[:, 1::2] = _HEX_DIGITS[raw & 15]
    offsets = np.arange(0, 32 * n + 1, 32, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(chars.tobytes())])


# ------------------------------------------------------------------ node numbers
# A node is one document of one source file, packed into an int64: (rank, file, row). Packing keeps the
# dedup shuffles numeric, and the number itself says where the document lives, so no lookup table is
# needed to get back to it. Rank is the source's priority rank, so a smaller node is a preferred source.
RANK_BITS, FILE_BITS, ROW_BITS = 10, 21, 32
MAX_SOURCES, MAX_FILES, MAX_ROWS = 1 << RANK_BITS, 1 << FILE_BITS, 1 << ROW_BITS


def pack_nodes(rank: int, file_idx: int, rows: np.ndarray) -> np.ndarray:
    if not (0 <= rank < MAX_SOURCES and 0 <= file_idx < MAX_FILES):
        raise ValueError(f"too many sources or files for node numbering (rank {rank}, file {file_idx})")
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) and rows.max() >= MAX_ROWS:
        raise ValueError(f"file {file_idx} of source rank {rank} has more than {MAX_ROWS} rows")
    return (np.int64(rank) << np.int64(FILE_BITS + ROW_BITS)) | (np.int64(file_idx) << np.int64(ROW_BITS)) | rows


def node_rank(nodes: np.ndarray) -> np.ndarray:
    return np.asarray(nodes, dtype=np.int64) >> np.int64(FILE_BITS + ROW_BITS)


def node_file(nodes: np.ndarray) -> np.ndarray:
    return (np.asarray(nodes, dtype=np.int64) >> np.int64(ROW_BITS)) & np.int64(MAX_FILES - 1)


def node_row(nodes: np.ndarray) -> np.ndarray:
    return np.asarray(nodes, dtype=np.int64) & np.int64(MAX_ROWS - 1)
