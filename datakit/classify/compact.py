"""Scoring a 2-label fastText model without fastText's per-word loop: the same probabilities, computed with
numpy over a whole batch of documents.

fastText's supervised predict reads a line as words (split on " \\t\\n\\v\\f\\r\\0", the line's end as the
word "</s>"), looks every word up in its dictionary (open addressing over FNV-1a hashes, one string compare
per probe: half its time on the benchmark corpus), adds each word n-gram's hashed bucket, averages the input
rows of those ids, and applies softmax to the output layer. For two labels softmax(W h)[pos] =
sigmoid(h . (w_pos - w_neg)) = sigmoid(mean over ids of s[id]) with s = E (w_pos - w_neg):
``model.compact_model`` writes that model (dimension 1, still a fastText model), and :class:`Scorer`
computes it here. The words are byte spans of the texts' own buffer, found by numpy (no token strings);
a word of up to 128 bytes is its own exact key (its bytes as 1 to 16 uint64s: it holds no NUL), looked up
in the open-addressing table of its length class, built once per model, a few numpy gathers per token
(Arrow's ``index_in`` rebuilt a hash table of the vocabulary on every call and probed it once per token:
most of the scoring time); the few longer words are a dict of their bytes. fastText's FNV-1a hashes
(`core/fasttext_format.py`, shared with language ID) of the vocabulary are precomputed (computed for unknown
words), n-gram buckets and per-document sums in numpy, in fastText's order. The result is fastText's
``predict`` probability (smoothing included: fastText reports exp(log(p + 1e-5))) up to float rounding
(float64 here, float32 there: differences ~1e-7; the tests check it against fastText on real and
adversarial text, and against a word-by-word reading of fastText's predict on synthetic models).
"""

from __future__ import annotations

import struct
from array import array
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datakit.core import arrow_numpy as an
from datakit.core.fasttext_format import EOS, LABEL_PREFIX, MAGIC, VERSION, fnv1a_spans

_SOFTMAX, _SUPERVISED = 3, 3
_NGRAM_PRIME = 116049371
# Text per scoring batch. Its per-token arrays (about 75 bytes per token at their peak, 10 MB for 1 MB
# of text) bound the step's memory. Their size also decides whether glibc's malloc keeps their pages:
# arrays past its (dynamic) mmap threshold are mapped and unmapped per batch, and every page faults
# again (2.5 us a fault on this VM). A qscore worker over the benchmark's 10 MB (1,439 documents) took
# 0 faults and 87-97 ms of scoring per pass at 1 MB, 4-11k faults and 90-112 ms at 2 MB (peak RSS 243-259
# vs 265 MB); main's 4 MB batches took 7.3k. The scores are the same whatever the batch (each document
# is scored on its own).
_BATCH_BYTES = 1 << 20
_SPREAD = 2  # a table has 2 to 4 slots per key: more spread fewer probes but cache misses (no faster)
_BLOCK = 1 << 13  # the probes left of a table lookup done as one 2-d gather below this many slots
# Vocabulary tables by word length in bytes: a word of up to 8k bytes is a key of k uint64 words. The
# few longer words (683 of a 146k vocabulary, 0.06% of the tokens) are a dict of their bytes.
_CLASSES = (8, 16, 32, 64, 128)
_MASKS = np.array([(1 << (8 * i)) - 1 for i in range(9)], dtype=np.uint64)
_WORD_BYTES = bytes(b not in b" \t\n\v\f\r\0" for b in range(256))


def _word_view(u8: np.ndarray) -> np.ndarray:
    """Every 8 bytes of ``u8`` (at least 8 long) from every offset, as little-endian uint64 (unaligned
    view, no copy): ``_word`` gathers a span's words from it."""
    return np.ndarray((len(u8) - 7,), np.dtype("<u8"), buffer=u8, offset=0, strides=(1,))


def _words(view: np.ndarray, starts: np.ndarray, lens: np.ndarray, k: int, full: int = 0) -> np.ndarray:
    """Bytes [0, 8k) of every span (``starts`` ascending, lengths in (8 * full, 8k]: one length class) as
    k little-endian uint64 words, shape (k, spans): row j holds bytes [8j, 8j + 8), zero past the span's
    end; the first ``full`` rows lie within every span (no mask). A token holds no NUL (NUL splits words), so
    a token of up to 8k bytes and its first k words determine each other: exact integer keys for the
    vocabulary tables. One 2-d gather for all k rows."""
    at = starts[None, :] if k == 1 else starts + np.arange(0, 8 * k, 8)[:, None]
    last = len(view) - 1
    inside = int(np.searchsorted(starts, last - 8 * (k - 1), side="right"))  # spans whose reads fit the buffer
    if inside == len(starts):
        w = view[at]
    else:  # the last spans (a batch's buffer ends with its last word): its last 8 bytes, shifted down
        w = np.empty((k, len(starts)), np.uint64)
        w[:, :inside] = view[at[:, :inside]]
        tail = at[:, inside:]
        w[:, inside:] = view[np.minimum(tail, last)] >> (np.clip(tail - last, 0, 7) * 8).astype(np.uint64)
    for j in range(full, k):  # the bytes of row j in the span: 8 for those within it, 0 past its end
        rest = lens - 8 * j if j else lens
        if j > full:
            rest = np.maximum(rest, 0)
        if j < k - 1:
            rest = np.minimum(rest, 8)
        w[j] &= _MASKS.take(rest)
    return w


def _in_word(data: Any) -> np.ndarray:
    """Whether each byte of ``data`` (any bytes-like) belongs to a word: not one of the bytes fastText
    splits on (" \\t\\n\\v\\f\\r\\0", Arrow's ascii_split_whitespace's and NUL). A writable bool
    array; one ``bytearray.translate`` pass, faster than numpy's compares."""
    return np.frombuffer(bytearray(data).translate(_WORD_BYTES), bool)


class _Table:
    """Exact lookup of keys of ``k`` uint64 words (columns of a (k, keys) array, the first word never
    zero) to int32 ids: open addressing with linear probing, built and probed with numpy over whole
    arrays. The keys sit in the slots themselves (a probe gathers the words, then the id), at a load of
    1/4 to 1/2. Arrow's ``index_in`` rebuilt a hash table of the whole vocabulary per call and probed it
    with a string hash and compare per token."""

    def __init__(self, keys: np.ndarray, ids: np.ndarray) -> None:
        m = keys.shape[1]
        self.bits = max(4, (_SPREAD * m - 1).bit_length())
        self.keys = np.zeros((len(keys), 1 << self.bits), np.uint64)  # first word 0: an empty slot
        self.ids = np.full(1 << self.bits, -1, np.int32)
        home, mask = self._home(keys), (1 << self.bits) - 1
        todo, self.probes = np.arange(m), 0
        while len(todo):  # round r: every key still unplaced tries home + r; the first one per free slot wins
            slot = (home[todo] + self.probes) & mask
            free = self.keys[0][slot] == 0
            taken, first = np.unique(slot[free], return_index=True)
            win = todo[free][first]
            self.keys[:, taken], self.ids[taken] = keys[:, win], ids[win]
            placed = np.zeros(m, bool)
            placed[win] = True
            todo = todo[~placed[todo]]
            self.probes += 1

    def _home(self, keys: np.ndarray) -> np.ndarray:
        """Each key's home slot, computed in place in one new array: a scoring batch's memory is its
        per-token arrays and their temporaries."""
        h = keys[0].copy()
        for key in keys[1:]:
            h *= np.uint64(_NGRAM_PRIME)
            h += key
        h *= np.uint64(0x9E3779B97F4A7C15)
        h >>= np.uint64(64 - self.bits)
        return h.view(np.intp)  # below 2 ** bits

    def find(self, keys: np.ndarray) -> np.ndarray:
        """The id of every key (a column of ``keys``), -1 for the absent ones. Probing goes round by round
        while many keys are left; the last few are checked at every remaining distance at once (a small
        2-d gather instead of up to ``probes`` rounds of numpy calls on a handful of keys): a key of the
        table sits at one slot within ``probes`` of its home, so a match anywhere in that window is it."""
        slot, mask = self._home(keys), len(self.ids) - 1
        got = self.keys[0].take(slot)  # take: twice the speed of [] with these indices
        hit = got == keys[0]
        for col, key in zip(self.keys[1:], keys[1:]):
            hit &= col.take(slot) == key
        out = self.ids.take(slot)
        miss = ~hit
        out[miss] = -1
        miss &= got != 0  # another key's slot: probe on
        todo = np.flatnonzero(miss)
        slot = (slot.take(todo) + 1) & mask
        for r in range(1, self.probes):
            want = keys[:, todo]
            if len(todo) * (self.probes - r) <= _BLOCK:
                at = (slot[:, None] + np.arange(self.probes - r)) & mask
                row, dist = np.nonzero(self.keys[0][at] == want[0][:, None])
                at = at[row, dist]
                for col, key in zip(self.keys[1:], want[1:]):  # the first words match: compare the others
                    same = col[at] == key[row]
                    row, at = row[same], at[same]
                out[todo[row]] = self.ids[at]
                break
            got = self.keys[0].take(slot)
            hit = got == want[0]
            for col, key in zip(self.keys[1:], want[1:]):
                hit &= col.take(slot) == key
            out[todo[hit]] = self.ids[slot[hit]]
            more = ~hit & (got != 0)
            todo, slot = todo[more], (slot[more] + 1) & mask
        return out


def _first(keys: np.ndarray) -> np.ndarray:
    """Whether each key (a column of uint64 words) is the first of its value: a repeated vocabulary word
    keeps its first id, as ``index_in`` would."""
    order = np.lexsort(keys[::-1])  # stable: equal keys in id order
    same = np.ones(max(len(order) - 1, 0), bool)
    for key in keys:
        k = key[order]
        same &= k[1:] == k[:-1]
    first = np.ones(len(order), bool)
    first[order[1:][same]] = False
    return first


def _vocabulary(blob: bytes, off: int, size: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The dictionary's ``size`` entries (word, NUL, int64 count, int8 type) from ``off``: (their bytes
    end to end as uint8, their offsets (size + 1), the offset past the dictionary). The words are never
    Python objects: 146k bytes objects and a set of them were most of the model's load-time memory."""
    view, words, ends = memoryview(blob), bytearray(), array("q", [0])
    for _ in range(size):  # a word holds no NUL; the 9 bytes after it may
        end = blob.index(b"\0", off)
        words += view[off:end]
        ends.append(len(words))
        off = end + 10
    return np.frombuffer(bytes(words), np.uint8), np.frombuffer(ends, np.int64), off


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
        u8, ends, off = _vocabulary(blob, off + 28, size)
        off += max(prune, 0) * 8
        quant = blob[off]
        rows, cols = struct.unpack_from("<qq", blob, off + 1)
        off += 17
        if (magic, version) != (MAGIC, VERSION) or dim != 1 or cols != 1 or quant or loss != _SOFTMAX or \
                model != _SUPERVISED or maxn > 0 or prune > 0 or nlabels != 2 or rows != self.nwords + self.bucket:
            raise ValueError(f"{path}: not a compact 2-label supervised fastText model (model.compact_model)")
        # float32 as the file holds them (float64 sums of them are the same): half the bytes to gather
        s = np.frombuffer(blob, np.float32, rows, off)
        off += 4 * rows
        quant_out, out_rows, out_cols = struct.unpack_from("<?qq", blob, off)
        out = np.frombuffer(blob, np.float32, out_rows * out_cols, off + 17)
        labels = [bytes(u8[a:b]).decode() for a, b in zip(ends[self.nwords:-1], ends[self.nwords + 1:])]
        if quant_out or out_rows != 2 or out_cols != 1 or positive not in labels:
            raise ValueError(f"{path}: not a compact 2-label supervised fastText model (model.compact_model)")
        pos = labels.index(positive)
        # logits [x * out[pos], x * out[neg]]: P(pos) = sigmoid(x * (out[pos] - out[neg]))
        self.scale = float(out[pos]) - float(out[1 - pos])
        starts, lens = ends[:self.nwords], np.diff(ends[:self.nwords + 1])
        # FNV-1a as fastText's int32, sign-extended to the uint64 its n-gram hashing computes with
        self.hashes = fnv1a_spans(u8.view(np.int8), starts, lens).astype(np.int64).view(np.uint64)
        self.s_words = np.append(s[:self.nwords], np.float32(0.0))  # id -1 (unknown): a +0.0 term
        self.s_buckets = s[self.nwords:].copy()
        self.finite = bool(np.isfinite(s).all())
        self._tables(u8[:ends[self.nwords]], starts, lens)
        eos = self._short.find(np.array([[int.from_bytes(EOS.encode(), "little")]], np.uint64))[0]
        if eos < 0:
            raise ValueError(f"{path}: the model's vocabulary has no {EOS} (not a fastText model)")
        self.eos = int(eos)

    def _tables(self, u8: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> None:
        """The vocabulary as exact-key tables, one per length class (``_CLASSES``), the few longer words
        a dict of their bytes. Words that no token can equal (empty, or holding a separator byte) are
        left out, and a repeated word keeps its first id, as ``index_in`` would."""
        ok = lens > 0
        ok[np.searchsorted(starts, np.flatnonzero(~_in_word(u8)), side="right") - 1] = False
        view = _word_view(np.concatenate([u8, np.zeros(8, np.uint8)]))
        self._classes = []
        for lo, hi in zip((0,) + _CLASSES, _CLASSES):
            ids = np.flatnonzero(ok & (lens > lo) & (lens <= hi))
            keys = _words(view, starts[ids], lens[ids], hi // 8, lo // 8)
            first = _first(keys)
            self._classes.append((hi, _Table(keys[:, first], ids[first].astype(np.int32))))
        self._short = self._classes[0][1]
        self._long: dict[bytes, int] = {}
        for i in np.flatnonzero(ok & (lens > _CLASSES[-1])).tolist():
            self._long.setdefault(u8[starts[i]:starts[i] + lens[i]].tobytes(), i)

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
        ids, nw = self._lookup(u8, starts, lens).astype(np.intp), ntok
        hashes = self.hashes.take(ids)  # the unknown ones fixed below
        unknown = np.flatnonzero(ids < 0)
        if len(unknown):
            at, size = starts[unknown], lens[unknown]
            is_label = size > 8
            for j, byte in enumerate(LABEL_PREFIX.encode()):
                is_label[is_label] = u8[at[is_label] + j] == byte
            hashes[unknown[~is_label]] = fnv1a_spans(u8.view(np.int8), at[~is_label], size[~is_label]).astype(
                np.int64).view(np.uint64)
        del starts, lens  # not needed past here: the means' arrays take their place
        doc = np.repeat(np.arange(ndocs), ntok)
        if len(unknown) and is_label.any():  # label-like tokens are not words: no id, no n-gram
            word = np.ones(len(ids), bool)
            word[unknown[is_label]] = False
            ids, hashes, doc, nw = ids[word], hashes[word], doc[word], None
        return self._means(ids, hashes, doc, ndocs, nw)

    def _lookup(self, u8: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
        """Every token's vocabulary id (-1: not a word of the vocabulary), exactly the ids ``index_in`` over
        the vocabulary gives: each length class looked up in its own table, the few longer tokens in
        the dict of the longer words."""
        view = _word_view(u8 if len(u8) >= 8 else np.concatenate([u8, np.zeros(8, np.uint8)]))
        ids = np.empty(len(lens), np.int32)
        over = lens > 8
        short = np.flatnonzero(~over)
        ids[short] = self._short.find(_words(view, starts.take(short), lens.take(short), 1))
        rest = np.flatnonzero(over)
        if not len(rest):
            return ids
        size, lo = lens[rest], 8
        for hi, table in self._classes[1:]:
            at = rest[(size > lo) & (size <= hi)]
            ids[at] = table.find(_words(view, starts.take(at), lens.take(at), hi // 8, lo // 8))
            lo = hi
        for i in rest[size > lo].tolist():
            ids[i] = self._long.get(u8[starts[i]:starts[i] + lens[i]].tobytes(), -1)
        return ids

    def _means(self, ids: np.ndarray, hashes: np.ndarray, doc: np.ndarray, ndocs: int,
               nw: np.ndarray | None = None) -> np.ndarray:
        """fastText's reading of each document's words (``ids``, -1 unknown; FNV-1a ``hashes``; ``doc``
        ascending; ``nw`` words per document when the caller knows them) into P(positive): the words up to the first "</s>" then "</s>", the word n-grams'
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
            ids, hashes, doc, nw = ids[keep], hashes[keep], doc[keep], None
        if nw is None:
            nw = np.bincount(doc, minlength=ndocs)
        end = np.cumsum(nw)  # one past each document's last word
        total = np.bincount(doc, weights=self.s_words.take(ids), minlength=ndocs) + self.s_words[self.eos]
        count = (nw + 1 - _doc_counts(ids < 0, end - nw, nw)).astype(np.float64)
        acc = h = hashes
        h_eos, prime, bucket = self.hashes[self.eos], np.uint64(_NGRAM_PRIME), np.uint64(self.bucket)
        for n in range(1, self.word_ngrams):  # n-grams of n + 1 words within a document
            prev, acc = acc, acc[:-1] * prime + h[n:]
            weight = self.s_buckets.take(_remainder(acc, bucket).view(np.intp))
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
        whash = np.empty(len(ids) + ndocs, np.uint64)
        whash[at], whash[eos_at] = hashes, self.hashes[self.eos]
        wdoc = np.repeat(np.arange(ndocs), nw + 1)
        if np.count_nonzero(wid == self.eos) > ndocs:  # fastText stops reading a line at its first "</s>"
            seen = np.cumsum(wid == self.eos) - (wid == self.eos)
            keep = seen == seen[eos_at - nw][wdoc]
            wid, whash, wdoc = wid[keep], whash[keep], wdoc[keep]
        known = wid >= 0
        total = np.bincount(wdoc[known], weights=self.s_words[wid[known]], minlength=ndocs)
        count = np.bincount(wdoc[known], minlength=ndocs).astype(np.float64)
        acc = h64 = whash
        for n in range(1, self.word_ngrams):  # n-grams of n + 1 words within a document
            acc = acc[:-1] * np.uint64(_NGRAM_PRIME) + h64[n:]
            same = wdoc[n:] == wdoc[:-n]
            rows = (acc % np.uint64(self.bucket)).astype(np.intp)
            total += np.bincount(wdoc[:-n], weights=self.s_buckets[rows].astype(np.float64) * same, minlength=ndocs)
            count += np.bincount(wdoc[:-n], weights=same, minlength=ndocs)
        mean = np.divide(total, count, out=np.zeros(ndocs), where=count > 0)
        p = 1.0 / (1.0 + np.exp(-mean * self.scale))
        return np.clip(p + 1e-5, 0.0, 1.0)


def _doc_counts(hit: np.ndarray, first: np.ndarray, nw: np.ndarray) -> np.ndarray:
    """Per document, how many of its run of ``hit`` (bools; the documents' runs consecutive, from
    ``first``, ``nw`` long) are true: an integer sum of each run by ``np.add.reduceat``, without
    ``np.bincount``'s scatter of the hits' documents. (Not for the float sums: reduceat adds a run in
    an order of its own, whose last bits differ from bincount's in-order sum on values of a wide range.)"""
    out = np.zeros(len(first), np.int64)
    has = np.flatnonzero(nw > 0)
    if len(has):
        out[has] = np.add.reduceat(hit, first[has], dtype=np.int64)
    return out


def _remainder(a: np.ndarray, m: np.uint64) -> np.ndarray:
    """``a % m`` for uint64 ``a`` and a scalar ``m``: numpy divides by a scalar with libdivide (a multiply
    and shifts), where its remainder divides per element; 2.1 against 3.5 ms on 1.2M n-grams."""
    return a - (a // m) * m


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
    starts = edge[0::2] + lo
    ntok = np.diff(np.searchsorted(starts, off))
    return u8, starts, edge[1::2] - edge[0::2], ntok


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
