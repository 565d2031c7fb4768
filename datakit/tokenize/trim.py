"""Building a token shard by cutting removed documents out of an earlier build's shard, instead of encoding.

Why: a takedown of 1% of the documents by id touches nearly every part (the documents are spread), but
each touched part differs from its earlier version only by documents removed. Every document is encoded
on its own (its text cut into pieces of its own, the pieces encoded independently, EOS and optional BOS
appended per document: datakit/tokenize/encode.py, no state crosses documents), and its split depends on
its id only, so the shard of the smaller part is the earlier shard with the removed documents' token
spans cut out, byte for byte.

What proves the new part is the earlier one minus some documents: per document two 64-bit hashes, kept
per unit of the earlier build (``reuse/ids/<key>.npy``, an ``(N, 2)`` uint64 array, in document order):
column 0 is the salted hash of the id that also routes the document to train or validation (so the
earlier documents' splits are known without their ids), column 1 hashes the id and the text together
(so an edited text with the same id never passes for an unchanged document). The new part's pairs must
appear among the earlier part's in the same order; anything else is encoded.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pyarrow as pa
import xxhash

__all__ = ["SPLIT_SALT", "IDS_DIR", "ids_rel", "doc_hashes", "validation_mask", "kept_rows", "cut", "to_npy_bytes",
           "from_npy_bytes"]

SPLIT_SALT = b"datakit.tokenize.split\x00"
IDS_DIR = "reuse/ids/"


def ids_rel(key: str) -> str:
    """Where a unit's document hashes live, relative to the cache dir (named by the unit's key)."""
    return f"{IDS_DIR}{key}.npy"


def _utf8(arr: pa.Array) -> tuple[memoryview, list[int]]:
    """A string array's UTF-8 bytes and its value offsets into them (no Python string per value)."""
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    if arr.null_count:
        raise ValueError("document hashes need every id and text (a null reached the hashing)")
    width = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    _validity, offsets, data = arr.buffers()
    ends = np.frombuffer(offsets, dtype=width)[arr.offset:arr.offset + len(arr) + 1]
    return memoryview(data if data is not None else b""), ends.tolist()


def doc_hashes(ids: pa.Array, texts: pa.Array) -> np.ndarray:
    """``(N, 2)`` uint64: the split hash of each id, and the hash of id and text together, read from the
    arrays' UTF-8 bytes (what ``str.encode`` gives)."""
    out = np.empty((len(ids), 2), dtype="<u8")
    id_data, id_at = _utf8(ids)
    text_data, text_at = _utf8(texts)
    for n in range(len(ids)):
        b = id_data[id_at[n]:id_at[n + 1]]
        split = xxhash.xxh3_64(SPLIT_SALT)
        split.update(b)
        whole = xxhash.xxh3_64(b)
        whole.update(b"\x00")
        whole.update(text_data[text_at[n]:text_at[n + 1]])
        out[n, 0] = split.intdigest()
        out[n, 1] = whole.intdigest()
    return out


def validation_mask(split_hashes: np.ndarray, fraction: float) -> np.ndarray:
    """Which documents go to validation: hash < fraction * 2**64, compared exactly (for an integer h,
    h < x holds exactly when h < ceil(x); a float comparison of uint64s would round)."""
    if fraction <= 0:
        return np.zeros(len(split_hashes), dtype=bool)
    return split_hashes < np.uint64(math.ceil(fraction * 2.0**64))


def kept_rows(earlier: np.ndarray, new: np.ndarray, fraction: float) -> dict[str, np.ndarray] | None:
    """Per split ("train", "validation"), a mask over the earlier shard's rows of the documents the new
    part keeps; None when the new part is not the earlier one with documents removed (an added or
    edited document, or another order)."""
    order = np.argsort(earlier[:, 1], kind="stable")  # searched by the id+text hash, then both checked
    ordered = earlier[order, 1]
    if len(ordered) and (ordered[1:] == ordered[:-1]).any():
        return None  # the same hash twice: positions would be ambiguous
    at = np.minimum(np.searchsorted(ordered, new[:, 1]), max(len(ordered) - 1, 0))
    pos = order[at] if len(ordered) else at
    if len(new) and (not len(ordered) or (earlier[pos] != new).any()):
        return None  # a document the earlier part did not have
    if (np.diff(pos) <= 0).any():
        return None
    keep = np.zeros(len(earlier), dtype=bool)
    keep[pos] = True
    val = validation_mask(earlier[:, 0], fraction)
    return {"train": keep[~val], "validation": keep[val]}


def cut(tokens: np.ndarray, offsets: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The shard's tokens and offsets with only the rows ``keep`` marks (offsets: int64, rows+1). The
    kept tokens are copied run by run (a takedown removes a few rows, so a shard is a few long runs),
    not through a mask over every token."""
    lengths = np.diff(offsets)
    kept_offsets = np.concatenate([[0], np.cumsum(lengths[keep], dtype=np.int64)]).astype("<i8")
    edges = np.flatnonzero(np.diff(np.concatenate([[0], keep.astype(np.int8), [0]])))
    runs = [tokens[offsets[a]:offsets[b]] for a, b in zip(edges[0::2].tolist(), edges[1::2].tolist())]
    return (np.concatenate(runs) if runs else tokens[:0].copy()), kept_offsets


def to_npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def from_npy_bytes(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data), allow_pickle=False)
