"""Scoring a 2-label fastText model without fastText's per-word loop: the same probabilities, computed with
numpy over a whole batch of documents.

fastText's supervised predict reads a line as words (split on " \\t\\n\\v\\f\\r\\0", the line's end as the
word "</s>"), looks every word up in its dictionary (open addressing over FNV-1a hashes, one string compare
per probe: half its time on the benchmark corpus), adds each word n-gram's hashed bucket, averages the input
rows of those ids, and applies softmax to the output layer. For two labels softmax(W h)[pos] =
sigmoid(h . (w_pos - w_neg)) = sigmoid(mean over ids of s[id]) with s = E (w_pos - w_neg):
``model.compact_model`` writes that model (dimension 1, still a fastText model), and :class:`Scorer`
computes it here. The words are byte spans of the texts' own buffer, found by numpy (no token strings);
a word of up to 32 bytes is its own exact key (1 or 4 uint64s: it holds no NUL), looked up in open-addressing
tables built once per model, a few numpy gathers per token (Arrow's ``index_in`` rebuilt a hash table of the
vocabulary on every call and probed it once per token: most of the scoring time); the few longer words
still go through ``index_in``. FNV-1a hashes of the vocabulary are precomputed (computed for unknown
words), n-gram buckets and per-document sums in numpy, in fastText's order. The result is fastText's
``predict`` probability (smoothing included: fastText reports exp(log(p + 1e-5))) up to float rounding
(float64 here, float32 there: differences ~1e-7; the tests check it against fastText on real and
adversarial text, and against a word-by-word reading of fastText's predict on synthetic models).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datakit.core import arrow_numpy as an

MAGIC, VERSION = 793712314, 12
EOS = b"</s>"
LABEL_PREFIX = b"__label__"
_SOFTMAX, _SUPERVISED = 3, 3
_FNV_OFFSET, _FNV_PRIME = 2166136261, 16777619
_NGRAM_PRIME = 116049371
_LONG = 256  # tokens longer than this are hashed one by one
# Text per scoring batch. The per-token arrays (about 10 of them, 8 bytes per token) stay within the
# CPU caches' reach and bound the step's memory: on 25 MB of real text (3,734 documents) 4 MB batches
# took 0.35-0.36 CPU-s and 279-287 MB peak against 16 MB batches' 0.45-0.57 CPU-s and 378-391 MB, with
# the same scores (each document is scored on its own, whatever the batch); 1 MB batches were slower.
_BATCH_BYTES = 4 << 20
_MID = 4  # words of 9 to 8 * _MID bytes: keys of 4 uint64 words; longer ones looked up by Arrow
_MASKS = np.array([(1 << (8 * i)) - 1 for i in range(9)], dtype=np.uint64)
_WORD_BYTES = bytes(b not in b" \t\n\v\f\r\0" for b in range(256))
_LABEL_WORD = int.from_bytes(LABEL_PREFIX[:8], "little")


def fnv1a(tokens: pa.Array) -> np.ndarray:
    """fastText's word hash (FNV-1a over the bytes, each byte sign-extended as a C ``char``) per token, as
    int32 (fastText keeps word hashes in an int32 vector)."""
    tokens = tokens.cast(pa.large_binary())
    n = len(tokens)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    offsets = an.offsets(tokens)
    data = np.frombuffer(tokens.buffers()[2], np.int8) if tokens.buffers()[2] is not None else np.zeros(0, np.int8)
    return _fnv1a_spans(data, offsets[:-1], np.diff(offsets))


def _fnv1a_spans(data: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """:func:`fnv1a` of the byte spans ``data[starts[i]:starts[i] + lens[i]]`` (``data`` int8): one numpy
    pass per byte position over the spans still that long (short ones sorted first out), Python's loop only
    for the rare spans longer than _LONG."""
    n = len(starts)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    h = np.full(n, _FNV_OFFSET, dtype=np.uint32)
    short = np.flatnonzero(lens <= _LONG)
    order = short[np.argsort(-lens[short], kind="stable")]  # longest first: position j is a prefix
    first, sl = starts[order], lens[order]
    hs = h[order]
    active = np.searchsorted(-sl, -np.arange(int(sl[0]) if len(sl) else 0), side="left")  # lengths > j
    prime = np.uint32(_FNV_PRIME)
    for j, k in enumerate(active.tolist()):
        part = hs[:k]
        part ^= data[first[:k] + j].astype(np.int32).view(np.uint32)
        part *= prime
    h[order] = hs
    for i in np.flatnonzero(lens > _LONG).tolist():
        x = _FNV_OFFSET
        for byte in data[starts[i]:starts[i] + lens[i]].tolist():
            x = ((x ^ (byte & 0xFFFFFFFF)) * _FNV_PRIME) & 0xFFFFFFFF
        h[i] = x
    return h.view(np.int32)


def _word_view(u8: np.ndarray) -> np.ndarray:
    """Every 8 bytes of ``u8`` (at least 8 long) from every offset, as little-endian uint64 (unaligned
    view, no copy): ``_word`` gathers a span's words from it."""
    return np.ndarray((len(u8) - 7,), np.dtype("<u8"), buffer=u8, offset=0, strides=(1,))


def _word(view: np.ndarray, starts: np.ndarray, lens: np.ndarray, k: int) -> np.ndarray:
    """Bytes [8k, 8k + 8) of every span (``starts`` ascending) as a little-endian uint64, zero past the
    span's end. A token holds no NUL (NUL splits words), so a token of up to 8m bytes and its first m
    words determine each other: exact integer keys for the vocabulary tables."""
    at = starts + 8 * k if k else starts
    last = len(view) - 1
    inside = int(np.searchsorted(at, last, side="right"))  # the others start within 8 bytes of the end
    w = view[at] if inside == len(at) else view[np.minimum(at, last)]
    if inside < len(at):  # read the buffer's last 8 bytes, shift the span's bytes down
        w[inside:] >>= (np.minimum(at[inside:] - last, 7) * 8).astype(np.uint64)
    rest = np.minimum(lens, 8) if not k else np.clip(lens - 8 * k, 0, 8)
    w &= _MASKS[rest]
    return w


def _in_word(data: Any) -> np.ndarray:
    """Whether each byte of ``data`` (any bytes-like) belongs to a word: not one of the bytes fastText
    splits on (" \\t\\n\\v\\f\\r\\0", Arrow's ascii_split_whitespace's and NUL). A writable bool
    array; one ``bytearray.translate`` pass, faster than numpy's compares."""
    return np.frombuffer(bytearray(data).translate(_WORD_BYTES), bool)


class _Table:
    """Exact lookup of keys made of ``k`` uint64 words (never all zero) to ids: open addressing with
    linear probing, built and probed with numpy over whole arrays. A slot holds the key's position in
    the key arrays (a small table: the probes stay in cache); Arrow's ``index_in`` rebuilt a hash table of
    the whole vocabulary per call and probed it with a string hash and compare per token."""

    def __init__(self, keys: list[np.ndarray], ids: np.ndarray) -> None:
        m = len(ids)
        self.bits = max(4, (2 * m).bit_length())  # load factor 1/4 to 1/2
        self.slots = np.full(1 << self.bits, -1, np.int32)
        # position -1 (an empty slot): an all-zero key no token has, id -1
        self.cols = [np.append(key, np.uint64(0)) for key in keys]
        self.ids = np.append(ids.astype(np.int64), -1)
        home, mask = self._home(keys), len(self.slots) - 1
        todo, self.probes = np.arange(m), 0
        while len(todo):  # round r: every key still unplaced tries home + r; the first one per free slot wins
            slot = (home[todo] + self.probes) & mask
            free = self.slots[slot] < 0
            taken, first = np.unique(slot[free], return_index=True)
            win = todo[free][first]
            self.slots[taken] = win
            placed = np.zeros(m, bool)
            placed[win] = True
            todo = todo[~placed[todo]]
            self.probes += 1

    def _home(self, keys: list[np.ndarray]) -> np.ndarray:
        h = keys[0]
        for key in keys[1:]:
            h = h * np.uint64(_NGRAM_PRIME) + key
        return ((h * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(64 - self.bits)).astype(np.intp)

    def find(self, keys: list[np.ndarray], among: np.ndarray | None = None) -> np.ndarray:
        """The id of every key, -1 for the absent ones (and for those not ``among``, when given)."""
        slot = self._home(keys)
        at = self.slots[slot]
        hit = self.cols[0][at] == keys[0]
        for col, key in zip(self.cols[1:], keys[1:]):
            hit &= col[at] == key
        probe = ~hit & (at >= 0)  # another key's slot: probe on
        if among is not None:
            hit &= among
            probe &= among
        todo, at = np.flatnonzero(probe), np.where(hit, at, -1)
        slot = slot[todo]
        for _ in range(1, self.probes):  # no key sits further than probes - 1 slots past its home
            if not len(todo):
                break
            slot = (slot + 1) & (len(self.slots) - 1)
            got = self.slots[slot]
            hit = self.cols[0][got] == keys[0][todo]
            for col, key in zip(self.cols[1:], keys[1:]):
                hit &= col[got] == key[todo]
            at[todo[hit]] = got[hit]
            more = ~hit & (got >= 0)
            todo, slot = todo[more], slot[more]
        return self.ids[at]


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
        self.vocab = an.binary_array(pa.large_binary(), words[:self.nwords])
        self.hashes = fnv1a(self.vocab)
        self.eos = words.index(EOS)
        self.s_words = np.append(self.s[:self.nwords], 0.0)  # id -1 (unknown): a +0.0 term
        self.s_buckets = self.s[self.nwords:]
        self.finite = bool(np.isfinite(self.s).all())
        self._tables(words[:self.nwords])

    def _tables(self, words: list[bytes]) -> None:
        """The vocabulary as exact-key tables: words of up to 8 bytes keyed by one uint64, up to 8 * _MID by
        _MID of them, longer ones an Arrow array for ``index_in`` (few words, few tokens). Words that no
        token can equal (holding a separator byte) are left out, and a repeated word keeps its first id,
        as ``index_in`` would."""
        offsets = an.offsets(self.vocab)
        u8 = np.frombuffer(self.vocab.buffers()[2], np.uint8)[offsets[0]:offsets[-1]].copy()
        starts, lens = offsets[:-1] - offsets[0], np.diff(offsets)
        ok = lens > 0
        ok[np.searchsorted(starts, np.flatnonzero(~_in_word(u8)), side="right") - 1] = False
        if len(set(words)) < len(words):
            first: dict[bytes, int] = {}
            ok &= np.array([first.setdefault(w, i) == i for i, w in enumerate(words)], bool)
        view = _word_view(np.concatenate([u8, np.zeros(8, np.uint8)]))
        ids = np.arange(self.nwords, dtype=np.int32)
        short, mid = ok & (lens <= 8), ok & (lens > 8) & (lens <= 8 * _MID)
        self._short = _Table([_word(view, starts[short], lens[short], 0)], ids[short])
        self._mid = _Table([_word(view, starts[mid], lens[mid], k) for k in range(_MID)], ids[mid])
        long = np.flatnonzero(ok & (lens > 8 * _MID))
        self._long, self._long_ids = self.vocab.take(an.from_numpy(long)), long

    def score(self, texts: Any, max_chars: int) -> np.ndarray:
        """fastText's P(positive) (smoothed as its predict reports it) per text, float64; ``texts`` is a
        list of str or an Arrow string array (a file's column: scored without importing pandas)."""
        arr = texts if isinstance(texts, (pa.Array, pa.ChunkedArray)) else pa.array(texts, pa.large_string())
        if isinstance(arr, pa.ChunkedArray):  # one chunk (a parquet file's column): no copy
            if arr.num_chunks == 0:
                return np.zeros(0, dtype=np.float64)
            arr = arr.chunk(0) if arr.num_chunks == 1 else arr.combine_chunks()
        arr = arr.cast(pa.large_string())
        if len(arr) == 0:
            return np.zeros(0, dtype=np.float64)
        # batches of about _BATCH_BYTES of text bound the memory the token arrays take
        ends = an.offsets(arr)
        cuts = np.unique(np.searchsorted(ends - ends[0], np.arange(1, int(ends[-1] - ends[0]) // _BATCH_BYTES + 1)
                                         * _BATCH_BYTES, side="right"))
        bounds = [0] + [int(c) for c in cuts if 0 < c < len(arr)] + [len(arr)]
        return np.concatenate([self._score(arr.slice(a, b - a), max_chars) for a, b in zip(bounds, bounds[1:])])

    def _score(self, arr: pa.Array, max_chars: int) -> np.ndarray:
        """:meth:`score` of one batch: its words as byte spans, their ids and hashes, the means."""
        ndocs = len(arr)
        u8, starts, lens, ntok = _tokens(arr, max_chars)
        doc = np.repeat(np.arange(ndocs), ntok)
        ids, w0 = self._lookup(u8, starts, lens)
        hashes = self.hashes[ids]  # the unknown ones fixed below
        unknown = np.flatnonzero(ids < 0)
        if len(unknown):
            at, size = starts[unknown], lens[unknown]
            is_label = (size > 8) & (w0[unknown] == np.uint64(_LABEL_WORD))
            is_label[is_label] = u8[at[is_label] + 8] == LABEL_PREFIX[8]
            hashes[unknown[~is_label]] = _fnv1a_spans(u8.view(np.int8), at[~is_label], size[~is_label])
            if is_label.any():  # label-like tokens are not words: no id, no n-gram
                word = np.ones(len(ids), bool)
                word[unknown[is_label]] = False
                ids, hashes, doc = ids[word], hashes[word], doc[word]
        return self._means(ids, hashes, doc, ndocs)

    def _lookup(self, u8: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every token's vocabulary id (-1: not a word of the vocabulary), exactly the ids ``index_in`` over
        the vocabulary gives, and its first 8 bytes as a uint64 (the label-prefix test reuses them)."""
        view = _word_view(u8 if len(u8) >= 8 else np.concatenate([u8, np.zeros(8, np.uint8)]))
        w0 = _word(view, starts, lens, 0)
        short = lens <= 8
        ids = self._short.find([w0], short)
        mid = np.flatnonzero(~short)
        if len(mid):
            long = lens[mid] > 8 * _MID
            mid, long = mid[~long], mid[long]
            at, size = starts[mid], lens[mid]
            ids[mid] = self._mid.find([w0[mid]] + [_word(view, at, size, k) for k in range(1, _MID)])
            if len(long) and len(self._long):
                found = pc.index_in(_spans_array(u8, starts[long], lens[long]), value_set=self._long)
                found = an.to_numpy(found.fill_null(an.from_numpy(np.full(1, -1, np.int32))[0]), np.int32)
                ids[long] = np.where(found >= 0, self._long_ids[found], -1)
        return ids, w0

    def _means(self, ids: np.ndarray, hashes: np.ndarray, doc: np.ndarray, ndocs: int) -> np.ndarray:
        """fastText's reading of each document's words (``ids``, -1 unknown; FNV-1a ``hashes``; ``doc``
        ascending) into P(positive): the words up to the first "</s>" then "</s>", the word n-grams'
        hashed buckets, the mean of their rows, the sigmoid, fastText's smoothing. Each sum runs over the
        terms of :meth:`_means_exact` in its order but for its +0.0 and -0.0 ones (unknown words, n-grams
        across documents), which leave a sum that starts at +0.0 unchanged when every row is finite: the
        same bits, without building the word sequence with every "</s>" in it."""
        if not self.finite:  # a NaN or infinite row times 0 is NaN: only the exact sequence gives it
            return self._means_exact(ids, hashes, doc, ndocs)
        eos = np.flatnonzero(ids == self.eos)
        if len(eos):  # fastText stops reading a line at its first "</s>": the words before it, then "</s>"
            docs, first = np.unique(doc[eos], return_index=True)
            cut = np.full(ndocs, len(ids))
            cut[docs] = eos[first]
            keep = np.arange(len(ids)) < cut[doc]
            ids, hashes, doc = ids[keep], hashes[keep], doc[keep]
        nw = np.bincount(doc, minlength=ndocs)
        end = np.cumsum(nw)  # one past each document's last word
        total = np.bincount(doc, weights=self.s_words[ids], minlength=ndocs) + self.s[self.eos]
        count = (nw + 1 - np.bincount(doc[ids < 0], minlength=ndocs)).astype(np.float64)
        acc = h = hashes.astype(np.int64).view(np.uint64)
        h_eos, prime, bucket = np.int64(self.hashes[self.eos]).view(np.uint64), np.uint64(_NGRAM_PRIME), \
            np.uint64(self.bucket)
        for n in range(1, self.word_ngrams):  # n-grams of n + 1 words within a document
            prev, acc = acc, acc[:-1] * prime + h[n:]
            weight = self.s_buckets.take((acc % bucket).view(np.intp))
            across = (end[:, None] - np.arange(1, n + 1)).ravel()  # windows past their document's words
            weight[across[(across >= 0) & (across < len(weight))]] = 0.0
            part = np.bincount(doc[:len(weight)], weights=weight, minlength=ndocs).astype(np.float64, copy=False)
            full = np.flatnonzero(nw >= n)  # then the window of the last n words and "</s>"
            part[full] += self.s_buckets.take(((prev[end[full] - n] * prime + h_eos) % bucket).view(np.intp))
            total += part
            count += np.maximum(nw + 1 - n, 0)
        mean = np.divide(total, count, out=np.zeros(ndocs), where=count > 0)
        p = 1.0 / (1.0 + np.exp(-mean * self.scale))
        return np.clip(p + 1e-5, 0.0, 1.0)

    def _means_exact(self, ids: np.ndarray, hashes: np.ndarray, doc: np.ndarray, ndocs: int) -> np.ndarray:
        """:meth:`_means` over the word sequence itself (every document's words, then "</s>"), each
        n-gram across documents weighted by 0: the reference the fast path is tested against, and the
        path for a model with a non-finite row."""
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


def _tokens(arr: pa.Array, max_chars: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every text's words as fastText reads them from its first max_chars characters: maximal runs of
    non-separator bytes (the tokens Arrow's ascii_split_whitespace gives once NUL is a space), as spans
    of the texts' byte buffer: (buffer as uint8, starts, lengths, words per text). numpy over the bytes,
    no token arrays: a few passes over the text where Arrow built a list array of strings."""
    empty = an.binary_array(arr.type, [b""])[0]  # a scalar without pa.scalar, which imports pandas
    arr, off, ends = _truncate(arr.fill_null(empty) if arr.null_count else arr, max_chars)
    buf = arr.buffers()[2]
    u8 = np.frombuffer(buf, np.uint8) if buf is not None else np.zeros(0, np.uint8)
    lo, hi = int(off[0]), int(off[-1])
    word = _in_word(u8[lo:hi])
    cut = ends < off[1:]
    for a, b in zip((ends[cut] - lo).tolist(), (off[1:][cut] - lo).tolist()):
        word[a:b] = False  # the characters past max_chars
    change = np.empty(len(word) + 1, bool)  # word[i] != word[i - 1], outside the text not a word
    change[0], change[-1] = (word[0], word[-1]) if len(word) else (False, False)
    np.not_equal(word[1:], word[:-1], out=change[1:-1])
    edge = np.flatnonzero(change)  # start, stop, start, stop, ...
    inner = np.unique(off[1:-1] - lo)
    inner = inner[(inner > 0) & (inner < hi - lo)]
    cross = inner[word[inner - 1] & word[inner]]  # a word running from one text into the next: two words
    if len(cross):
        edge = np.insert(edge, np.repeat(np.searchsorted(edge, cross), 2), np.repeat(cross, 2))
    starts, stops = edge[0::2] + lo, edge[1::2] + lo
    ntok = np.diff(np.searchsorted(starts, off))
    return u8, starts, stops - starts, ntok


def _truncate(arr: pa.Array, max_chars: int) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """(texts, offsets, end of each text's first max_chars characters). Only texts of more than max_chars
    bytes can be longer: their cut is measured by Arrow's utf8_slice_codeunits (what the scores have
    always read); where much would be cut, every text is sliced instead, not to scan the rest."""
    off = an.offsets(arr)
    over = np.flatnonzero(np.diff(off) > max_chars)
    if not len(over):
        return arr, off, off[1:]
    if int((off[over + 1] - off[over] - max_chars).sum()) * 4 > int(off[-1] - off[0]):
        arr = pc.utf8_slice_codeunits(arr, 0, max_chars)
        off = an.offsets(arr)
        return arr, off, off[1:]
    kept = pc.binary_length(pc.utf8_slice_codeunits(arr.take(an.from_numpy(over)), 0, max_chars))
    ends = off[1:].copy()
    ends[over] = off[over] + an.to_numpy(kept, np.int64)
    return arr, off, ends


def _spans_array(u8: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> pa.Array:
    """The byte spans as an Arrow large_binary array (for ``index_in`` on the few long tokens)."""
    offsets = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    data = u8[np.repeat(starts - offsets[:-1], lens) + np.arange(offsets[-1])]
    return pa.Array.from_buffers(pa.large_binary(), len(lens), [None, pa.py_buffer(offsets), pa.py_buffer(data)])
