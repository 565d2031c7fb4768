"""Building a token shard from an earlier build's shard of the same part, encoding only the documents
that shard lacks, instead of encoding the whole part.

Why: a takedown of 1% of the documents by id touches nearly every part (the documents are spread), and an
edit of one input document changes one part by one document; each such part differs from its earlier
version by a few documents removed, added or changed. Every document is encoded on its own (its text cut
into pieces of its own, the pieces encoded independently, EOS and optional BOS appended per document:
datakit/tokenize/encode.py, no state crosses documents), and its split depends on its id only, so the
new shard is the earlier shard's token spans of the documents it keeps, spliced in document order with
the new documents' encodings: byte for byte what encoding the whole part gives.

What proves a document is the earlier one: per document two 64-bit hashes, kept per unit of the earlier
build (``reuse/ids/<key>.npy``, an ``(N, 2)`` uint64 array, in document order): column 0 is the salted
hash of the id that also routes the document to train or validation (so the earlier documents' splits
are known without their ids), column 1 hashes the id and the text together (so an edited text with the
same id never passes for an unchanged document). A new document whose pair the earlier part has takes
that document's tokens; any other is encoded.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pyarrow as pa
import xxhash

from datakit.core import arrow_numpy as an

__all__ = ["SPLIT_SALT", "IDS_DIR", "ids_rel", "doc_hashes", "validation_mask", "split_rows", "splice", "to_npy_bytes",
           "from_npy_bytes"]

SPLIT_SALT = b"datakit.tokenize.split\x00"
IDS_DIR = "reuse/ids/"


def ids_rel(key: str) -> str:
    """Where a unit's document hashes live, relative to the cache dir (named by the unit's key)."""
    return f"{IDS_DIR}{key}.npy"


def _utf8(arr: pa.Array) -> tuple[memoryview, list[int]]:
    """A string array's UTF-8 bytes and its value offsets into them (no Python string per value)."""
    arr = an.combined(arr)
    if arr.null_count:
        raise ValueError("document hashes need every id and text (a null reached the hashing)")
    data = arr.buffers()[2]
    return memoryview(data if data is not None else b""), an.offsets(arr).tolist()


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


def split_rows(earlier: np.ndarray, new: np.ndarray, fraction: float) -> dict[str, np.ndarray] | None:
    """Per split ("train", "validation"), for each of the new part's documents in that split, in order:
    its row in the earlier shard of that split, or -1 for a document the earlier part did not have (added,
    or its text edited: the id+text hash differs). None when the earlier hashes are ambiguous (the same
    id+text hash twice). A document keeps its split (the split hangs on its id), so a matched row is
    always in the same split's shard."""
    order = np.argsort(earlier[:, 1], kind="stable")  # searched by the id+text hash, then both checked
    ordered = earlier[order, 1]
    if len(ordered) and (ordered[1:] == ordered[:-1]).any():
        return None  # the same hash twice: positions would be ambiguous
    if len(ordered):
        at = np.minimum(np.searchsorted(ordered, new[:, 1]), len(ordered) - 1)
        pos = order[at]
        pos = np.where((earlier[pos] == new).all(axis=1), pos, -1)
    else:
        pos = np.full(len(new), -1, dtype=np.int64)
    earlier_val = validation_mask(earlier[:, 0], fraction)
    within = np.empty(len(earlier), dtype=np.int64)  # earlier row -> its row in its split's shard
    within[~earlier_val] = np.arange(int((~earlier_val).sum()))
    within[earlier_val] = np.arange(int(earlier_val.sum()))
    new_val = validation_mask(new[:, 0], fraction)
    out = {}
    for s, mask in (("train", ~new_val), ("validation", new_val)):
        p = pos[mask]
        out[s] = np.where(p >= 0, within[np.maximum(p, 0)], -1)
    return out


def splice(tokens: np.ndarray, offsets: np.ndarray, rows: np.ndarray, fresh: np.ndarray,
           fresh_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A split's shard (tokens, int64 offsets with rows+1 entries) whose documents are, in order, the
    earlier shard's document ``rows[i]`` or, where ``rows[i] == -1``, the next of the ``fresh`` documents
    (``fresh_offsets``: their bounds, one more than their count). Tokens are copied run by run (a run:
    earlier documents that follow each other there too, or consecutive fresh ones), not document by
    document: a takedown or an edit leaves a shard a few long runs."""
    old = rows >= 0
    if int((~old).sum()) != len(fresh_offsets) - 1:
        raise ValueError(f"splice: {int((~old).sum())} documents to encode, {len(fresh_offsets) - 1} encoded")
    starts = np.empty(len(rows), dtype=np.int64)
    ends = np.empty(len(rows), dtype=np.int64)
    starts[old], ends[old] = offsets[rows[old]], offsets[rows[old] + 1]
    starts[~old], ends[~old] = fresh_offsets[:-1], fresh_offsets[1:]
    lengths = ends - starts
    new_offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype("<i8")
    # a run breaks where the source changes or a document does not start where the previous one ended
    breaks = np.flatnonzero((old[1:] != old[:-1]) | (starts[1:] != ends[:-1])) + 1
    bounds = np.concatenate([[0], breaks, [len(rows)]]).tolist()
    runs = [(tokens if old[a] else fresh)[starts[a]:ends[b - 1]] for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
    out = np.concatenate(runs).astype(tokens.dtype, copy=False) if runs else tokens[:0].copy()
    return out, new_offsets


def to_npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def from_npy_bytes(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data), allow_pickle=False)
