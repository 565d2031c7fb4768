"""Building a token shard from an earlier build's shard of the same part, encoding only the documents
that shard lacks, instead of encoding the whole part.

Why: a takedown of 1% of the documents by id touches nearly every part (the documents are spread), and an
edit of one input document changes one part by one document; each such part differs from its earlier
version by a few documents removed, added or changed. Every document is encoded on its own (its text cut
into pieces of its own, the pieces encoded independently, EOS and optional BOS appended per document:
datakit/tokenize/encode.py, no state crosses documents), and its split depends on its id only, so the
new shard is the earlier shard's token spans of the documents it keeps, spliced in document order with
the new documents' encodings: byte for byte what encoding the whole part gives.

What proves a document is the earlier one: per document, kept per unit of the earlier build
(``reuse/ids/<key>.npy``, an ``(N, 3)`` uint64 array, in document order): column 0 is the salted hash of
the id that also routes the document to train or validation (so the earlier documents' splits are known
without their ids), column 1 hashes the id and the text together (so an edited text with the same id
never passes for an unchanged document), column 2 is the text's UTF-8 byte count (the shard's byte
counts). A new document whose two hashes the earlier part has takes that document's tokens; any other
is encoded. (Builds before the byte counts kept ``(N, 2)`` arrays: they are matched the same way.)

A part whose every document the earlier part has by id alone (a takedown's part) is cut without reading
its texts (`id_rows`), when the caller knows an id decides its text: the earlier build's documents had
the same text lineage (the steps that change a text but keep its id, such as PII redaction, with the
same settings; `Graph.text_lineage`), and an id is otherwise the content hash of its text.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pyarrow as pa
import xxhash

from datakit.core import arrow_numpy as an

__all__ = ["SPLIT_SALT", "IDS_DIR", "ids_rel", "id_hashes", "doc_hashes", "validation_mask", "split_rows", "id_rows",
           "splice", "to_npy_bytes", "from_npy_bytes"]

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


def _split_hashes(id_data: memoryview, id_at: list[int]) -> np.ndarray:
    out = np.empty(len(id_at) - 1, dtype="<u8")
    for n in range(len(out)):
        split = xxhash.xxh3_64(SPLIT_SALT)
        split.update(id_data[id_at[n]:id_at[n + 1]])
        out[n] = split.intdigest()
    return out


def id_hashes(ids: pa.Array) -> np.ndarray:
    """The split hash of each id (column 0 of `doc_hashes`), from its UTF-8 bytes."""
    return _split_hashes(*_utf8(ids))


def doc_hashes(ids: pa.Array, texts: pa.Array) -> np.ndarray:
    """``(N, 3)`` uint64: the split hash of each id, the hash of id and text together, and the text's
    UTF-8 byte count, read from the arrays' UTF-8 bytes (what ``str.encode`` gives)."""
    out = np.empty((len(ids), 3), dtype="<u8")
    id_data, id_at = _utf8(ids)
    text_data, text_at = _utf8(texts)
    out[:, 0] = _split_hashes(id_data, id_at)
    for n in range(len(ids)):
        whole = xxhash.xxh3_64(id_data[id_at[n]:id_at[n + 1]])
        whole.update(b"\x00")
        whole.update(text_data[text_at[n]:text_at[n + 1]])
        out[n, 1] = whole.intdigest()
    out[:, 2] = np.diff(np.asarray(text_at, dtype=np.int64))
    return out


def validation_mask(split_hashes: np.ndarray, fraction: float) -> np.ndarray:
    """Which documents go to validation: hash < fraction * 2**64, compared exactly (for an integer h,
    h < x holds exactly when h < ceil(x); a float comparison of uint64s would round)."""
    if fraction <= 0:
        return np.zeros(len(split_hashes), dtype=bool)
    return split_hashes < np.uint64(math.ceil(fraction * 2.0**64))


def _positions(earlier: np.ndarray, new: np.ndarray, column: int) -> np.ndarray | None:
    """Each new document's row in the earlier part, matched by ``column`` and then checked on the two
    hash columns the new rows have; -1 where none matches. None when the earlier column holds a value
    twice (positions would be ambiguous)."""
    order = np.argsort(earlier[:, column], kind="stable")
    ordered = earlier[order, column]
    if len(ordered) and (ordered[1:] == ordered[:-1]).any():
        return None
    if not len(ordered):
        return np.full(len(new), -1, dtype=np.int64)
    pos = order[np.minimum(np.searchsorted(ordered, new[:, column]), len(ordered) - 1)]
    width = new.shape[1]
    return np.where((earlier[pos, :width] == new).all(axis=1), pos, -1)


def split_rows(earlier: np.ndarray, new: np.ndarray, fraction: float) -> dict[str, np.ndarray] | None:
    """Per split ("train", "validation"), for each of the new part's documents in that split, in order:
    its row in the earlier shard of that split, or -1 for a document the earlier part did not have (added,
    or its text edited: the id+text hash differs). None when the earlier hashes are ambiguous (the same
    id+text hash twice). A document keeps its split (the split hangs on its id), so a matched row is
    always in the same split's shard."""
    pos = _positions(earlier, new[:, :2], 1)
    return None if pos is None else _by_split(earlier, pos, new[:, 0], fraction)


def id_rows(earlier: np.ndarray, split_hashes: np.ndarray, fraction: float
            ) -> tuple[dict[str, np.ndarray], np.ndarray] | None:
    """`split_rows` of a part every one of whose documents the earlier part has, matched by id alone
    (their split hashes, `id_hashes`), and each document's earlier row: None when the earlier hashes
    lack the byte counts, an id is there twice, or a document is not there."""
    if earlier.ndim != 2 or earlier.shape[1] < 3:
        return None
    pos = _positions(earlier, split_hashes[:, None], 0)
    if pos is None or (pos < 0).any():
        return None
    return _by_split(earlier, pos, split_hashes, fraction), pos


def _by_split(earlier: np.ndarray, pos: np.ndarray, split_hashes: np.ndarray, fraction: float
              ) -> dict[str, np.ndarray]:
    """Per split, each new document's row in the earlier shard of its split (or -1), from its row in
    the earlier part (``pos``)."""
    earlier_val = validation_mask(earlier[:, 0], fraction)
    within = np.empty(len(earlier), dtype=np.int64)  # earlier row -> its row in its split's shard
    within[~earlier_val] = np.arange(int((~earlier_val).sum()))
    within[earlier_val] = np.arange(int(earlier_val.sum()))
    new_val = validation_mask(split_hashes, fraction)
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
    """The array an .npy file's bytes hold, as a read-only view of them (``np.load`` would copy: a takedown
    reads every earlier shard, 200 MB of tokens on the incremental benchmark)."""
    f = io.BytesIO(data)
    version = np.lib.format.read_magic(f)
    header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}.get(version)
    if header is None:  # another format version: np.load reads it
        return np.load(io.BytesIO(data), allow_pickle=False)
    shape, fortran, dtype = header(f)
    if fortran or dtype.hasobject:
        return np.load(io.BytesIO(data), allow_pickle=False)
    count = int(np.prod(shape, dtype=np.int64))
    return np.frombuffer(data, dtype=dtype, count=count, offset=f.tell()).reshape(shape)
