"""Scoring a 2-label fastText model without fastText's per-word loop: the same probabilities, computed with
Arrow and numpy over a whole batch of documents.

fastText's supervised predict reads a line as words (split on " \\t\\n\\v\\f\\r\\0", the line's end as the
word "</s>"), looks every word up in its dictionary (open addressing over FNV-1a hashes, one string compare
per probe: half its time on the benchmark corpus), adds each word n-gram's hashed bucket, averages the input
rows of those ids, and applies softmax to the output layer. For two labels softmax(W h)[pos] =
sigmoid(h . (w_pos - w_neg)) = sigmoid(mean over ids of s[id]) with s = E (w_pos - w_neg):
``model.compact_model`` writes that model (dimension 1, still a fastText model), and :class:`Scorer`
computes it here: words split by Arrow, looked up with one hash-table pass (``index_in``), FNV-1a hashes
of the vocabulary precomputed (and computed for unknown words), n-gram buckets and per-document means in
numpy. The result is fastText's ``predict`` probability (smoothing included: fastText reports
exp(log(p + 1e-5))) up to float rounding (float64 here, float32 there: differences ~1e-7; the tests check
it against fastText on real and adversarial text).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

MAGIC, VERSION = 793712314, 12
EOS = b"</s>"
LABEL_PREFIX = b"__label__"
_SOFTMAX, _SUPERVISED = 3, 3
_FNV_OFFSET, _FNV_PRIME = 2166136261, 16777619
_NGRAM_PRIME = 116049371
_LONG = 256  # tokens longer than this are hashed one by one
_BATCH_BYTES = 16 << 20


def fnv1a(tokens: pa.Array) -> np.ndarray:
    """fastText's word hash (FNV-1a over the bytes, each byte sign-extended as a C ``char``) per token, as
    int32 (fastText keeps word hashes in an int32 vector)."""
    tokens = tokens.cast(pa.large_binary())
    n = len(tokens)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    offsets = np.frombuffer(tokens.buffers()[1], np.int64, n + 1, tokens.offset)
    data = np.frombuffer(tokens.buffers()[2], np.int8) if tokens.buffers()[2] is not None else np.zeros(0, np.int8)
    lens = np.diff(offsets)
    h = np.full(n, _FNV_OFFSET, dtype=np.uint32)
    short = np.flatnonzero(lens <= _LONG)
    order = short[np.argsort(-lens[short], kind="stable")]  # longest first: position j is a prefix
    starts, sl = offsets[:-1][order], lens[order]
    hs = h[order]
    active = np.searchsorted(-sl, -np.arange(int(sl[0]) if len(sl) else 0), side="left")  # lengths > j
    prime = np.uint32(_FNV_PRIME)
    for j, k in enumerate(active.tolist()):
        part = hs[:k]
        part ^= data[starts[:k] + j].astype(np.int32).view(np.uint32)
        part *= prime
    h[order] = hs
    for i in np.flatnonzero(lens > _LONG).tolist():
        x = _FNV_OFFSET
        for byte in data[offsets[i]:offsets[i + 1]].tolist():
            x = ((x ^ (byte & 0xFFFFFFFF)) * _FNV_PRIME) & 0xFFFFFFFF
        h[i] = x
    return h.view(np.int32)


class Scorer:
    """A compact (dimension 1) 2-label fastText model file, read for :meth:`score`."""

    def __init__(self, path: str, positive: str) -> None:
        with open(path, "rb") as fh:
            blob = fh.read()
        magic, version = struct.unpack_from("<ii", blob, 0)
        (dim, _ws, _epoch, _min_count, _neg, self.word_ngrams, loss, model, self.bucket, _minn, maxn, _lr_rate,
         _t) = struct.unpack_from("<12id", blob, 8)
        off = 8 + 56
        size, self.nwords, nlabels, _ntokens, prune = struct.unpack_from("<iiiqq", blob, off)
        off += 28
        words = []
        for _ in range(size):
            end = blob.index(b"\0", off)
            words.append(blob[off:end])
            off = end + 10  # NUL, int64 count, int8 type
        off += max(prune, 0) * 8
        quant = blob[off]
        rows, cols = struct.unpack_from("<qq", blob, off + 1)
        off += 17
        if (magic, version) != (MAGIC, VERSION) or dim != 1 or cols != 1 or quant or loss != _SOFTMAX or \
                model != _SUPERVISED or maxn > 0 or prune > 0 or nlabels != 2 or rows != self.nwords + self.bucket:
            raise ValueError(f"{path}: not a compact 2-label supervised fastText model (model.compact_model)")
        self.s = np.frombuffer(blob, np.float32, rows, off).astype(np.float64)
        off += 4 * rows
        quant_out, out_rows, out_cols = struct.unpack_from("<?qq", blob, off)
        out = np.frombuffer(blob, np.float32, out_rows * out_cols, off + 17)
        labels = [w.decode() for w in words[self.nwords:]]
        if quant_out or out_rows != 2 or out_cols != 1 or positive not in labels:
            raise ValueError(f"{path}: not a compact 2-label supervised fastText model (model.compact_model)")
        pos = labels.index(positive)
        # logits [x * out[pos], x * out[neg]]: P(pos) = sigmoid(x * (out[pos] - out[neg]))
        self.scale = float(out[pos]) - float(out[1 - pos])
        self.vocab = pa.array(words[:self.nwords], pa.large_binary())
        self.hashes = fnv1a(self.vocab)
        self.eos = words.index(EOS)

    def score(self, texts: Any, max_chars: int) -> np.ndarray:
        """fastText's P(positive) (smoothed as its predict reports it) per text, float64; ``texts`` is a
        list of str or an Arrow string array."""
        arr = texts if isinstance(texts, (pa.Array, pa.ChunkedArray)) else pa.array(texts, pa.large_string())
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks() if arr.num_chunks else pa.array([], pa.large_string())
        arr = arr.cast(pa.large_string())
        if len(arr) == 0:
            return np.zeros(0, dtype=np.float64)
        # batches of about _BATCH_BYTES of text bound the memory the token arrays take
        ends = np.frombuffer(arr.buffers()[1], np.int64, len(arr) + 1, arr.offset)
        cuts = np.unique(np.searchsorted(ends - ends[0], np.arange(1, int(ends[-1] - ends[0]) // _BATCH_BYTES + 1)
                                         * _BATCH_BYTES, side="right"))
        bounds = [0] + [int(c) for c in cuts if 0 < c < len(arr)] + [len(arr)]
        return np.concatenate([self._score(arr.slice(a, b - a), max_chars) for a, b in zip(bounds, bounds[1:])])

    def _score(self, arr: pa.Array, max_chars: int) -> np.ndarray:
        ndocs = len(arr)
        arr = pc.utf8_slice_codeunits(arr, 0, max_chars)
        data = arr.buffers()[2]
        if data is not None and len(data) and np.frombuffer(data, np.uint8).min() == 0:
            arr = pc.replace_substring(arr, "\0", " ")
        lists = pc.ascii_split_whitespace(arr)
        ntok = pc.list_value_length(lists).fill_null(0).to_numpy(zero_copy_only=False)
        tokens = pc.list_flatten(lists)
        doc = np.repeat(np.arange(ndocs), ntok)
        offsets = np.frombuffer(tokens.buffers()[1], np.int64, len(tokens) + 1, tokens.offset)
        empty = offsets[1:] == offsets[:-1]  # Arrow's split leaves "" at a text's ends and for an empty text
        if empty.any():
            tokens, doc = tokens.filter(pa.array(~empty)), doc[~empty]
        found = pc.index_in(tokens, value_set=self.vocab)
        ids = found.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        hashes = self.hashes[ids]  # the unknown ones fixed below
        unknown = np.flatnonzero(ids < 0)
        if len(unknown):
            rest = tokens.take(pa.array(unknown))
            is_label = pc.starts_with(rest, LABEL_PREFIX.decode()).to_numpy(zero_copy_only=False)
            hashes[unknown[~is_label]] = fnv1a(rest.filter(pa.array(~is_label)))
            if is_label.any():  # label-like tokens are not words: no id, no n-gram
                word = np.ones(len(ids), bool)
                word[unknown[is_label]] = False
                ids, hashes, doc = ids[word], hashes[word], doc[word]
        # Every document's words then its "</s>", document after document.
        nw = np.bincount(doc, minlength=ndocs)
        eos_at = np.cumsum(nw) + np.arange(ndocs)
        at = np.arange(len(ids)) + doc
        wid = np.empty(len(ids) + ndocs, np.int64)
        wid[at], wid[eos_at] = ids, self.eos
        whash = np.empty(len(ids) + ndocs, np.int32)
        whash[at], whash[eos_at] = hashes, self.hashes[self.eos]
        wdoc = np.repeat(np.arange(ndocs), nw + 1)
        if np.count_nonzero(wid == self.eos) > ndocs:  # fastText stops reading a line at its first "</s>"
            seen = np.cumsum(wid == self.eos) - (wid == self.eos)
            keep = seen == seen[eos_at - nw][wdoc]
            wid, whash, wdoc = wid[keep], whash[keep], wdoc[keep]
        known = wid >= 0
        total = np.bincount(wdoc[known], weights=self.s[wid[known]], minlength=ndocs)
        count = np.bincount(wdoc[known], minlength=ndocs).astype(np.float64)
        acc = h64 = whash.astype(np.int64).view(np.uint64)
        for n in range(1, self.word_ngrams):  # n-grams of n + 1 words within a document
            acc = acc[:-1] * np.uint64(_NGRAM_PRIME) + h64[n:]
            same = wdoc[n:] == wdoc[:-n]
            rows = (acc % np.uint64(self.bucket)).astype(np.intp) + self.nwords
            total += np.bincount(wdoc[:-n], weights=self.s[rows] * same, minlength=ndocs)
            count += np.bincount(wdoc[:-n], weights=same, minlength=ndocs)
        mean = np.divide(total, count, out=np.zeros(ndocs), where=count > 0)
        p = 1.0 / (1.0 + np.exp(-mean * self.scale))
        return np.clip(p + 1e-5, 0.0, 1.0)
