"""fastText's ``predict`` for the lid.176 language-ID model, in numpy and Arrow, each word's sum kept.

Why: fastText builds and hashes a word's character n-grams again at every occurrence (2.4 µs a word on
this machine's man pages and code), which made language ID two thirds of the FineWeb quality step. Its
sentence vector is a sum over words, so here a word's contribution (its own row and its n-grams' rows)
is computed once and kept (`_CACHE_MAX` words per process), and a batch of texts is split into words
and made distinct by Arrow (`_tokens`), in C++: on the pipeline benchmark's corpus (6,000 documents,
4.0M words of which 538k distinct, 63% of them seen once) 2.0x fastText's CPU, 2.6x on man pages in 24
languages and the Debian Reference.

What is computed is fastText 0.9.2's supervised predict with k=1 (``Dictionary::getLine``,
``computeSubwords``, ``Model::computeHidden``, ``HierarchicalSoftmaxLoss::dfs``) read from the model file
itself (`load`): words split at the bytes `` \\n\\r\\t\\v\\f\\0`` only, up to a ``</s>`` token; a
word's ids its vocabulary id and the ids of the 2-4 character n-grams of ``<word>`` that the pruned model
kept (FNV-1a over UTF-8 bytes, each byte read as a signed char, modulo ``bucket``); a token starting
``__label__`` no word; the mean of the product-quantized rows with ``</s>``'s; the best leaf of the
Huffman tree over the label counts. The one difference is the order of float additions (a word's rows
are summed once, then weighted by its count), so a probability can differ from fastText's in the fifth
decimal: tests/test_lid176.py holds labels and scores to fastText's on real text in 24 languages.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from itertools import compress, repeat
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datakit.core import arrow_numpy as an
from datakit.core.fasttext_format import EOS, FNV_OFFSET, FNV_PRIME, LABEL_PREFIX, MAGIC, VERSION

# fastText's word separators besides the space (Dictionary::readWord), each replaced by a space.
_SEPARATORS = "\n\r\t\v\f\x00"
_POOL = pa.system_memory_pool()
_LOG_EPS = 1e-5  # fastText's std_log(x) = log(x + 1e-5)
# Words kept per process: a cache of this many words takes about 10 MB (each word's 16 float32s, its
# string and dict entry); when full, the half used last stays, so memory stays bounded on text with an
# endless tail of words. What is kept never changes a result (a word's sum is computed alike). On the
# pipeline benchmark's corpus 150,000 words with 1 MB batches took 10% less CPU than 50,000 with 512 kB,
# for about 50 MB more per worker (a quality worker's peak RSS +107 MB over 6,000 documents against +58).
_CACHE_MAX = 50_000
# Lines split and looked up together (numpy's and Arrow's cost per call spread over them), up to 512 kB
# of text: a batch's Arrow arrays, word lists and rows take about 8 MB, from the system allocator, which
# gives them back (Arrow's default pool keeps the pages it freed).
_BATCH = 1024
_BATCH_CHARS = 1 << 19
# A line of more tokens than this is summed over its distinct words, not token by token (a 16-float row
# per token: 64 MB at this length).
_LONG_LINE = 1 << 20


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> tuple:
        out = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return out

    def array(self, dtype: str, n: int) -> np.ndarray:
        a = np.frombuffer(self.data, dtype=dtype, count=n, offset=self.at)
        self.at += a.nbytes
        return a

    def cstring(self) -> bytes:
        end = self.data.index(b"\x00", self.at)
        out = self.data[self.at:end]
        self.at = end + 1
        return out


def _pq(r: _Reader) -> tuple[int, int, int, np.ndarray]:
    """A ProductQuantizer: (nsubq, dsub, lastdsub, centroids)."""
    dim, nsubq, dsub, lastdsub = r.take("<4i")
    return nsubq, dsub, lastdsub, r.array("<f4", dim * 256)


def _quant_rows(r: _Reader) -> np.ndarray:
    """A QuantMatrix's rows, decoded as ``ProductQuantizer::addcode`` adds them (float32, norm x centroid)."""
    (qnorm,) = r.take("<?")
    m, n = r.take("<2q")
    (codesize,) = r.take("<i")
    codes = r.array("u1", codesize)
    nsubq, dsub, lastdsub, cent = _pq(r)
    codes = codes.reshape(m, nsubq)
    rows = np.empty((m, n), np.float32)
    for s in range(nsubq):
        d = lastdsub if s == nsubq - 1 else dsub
        table = cent[s * 256 * dsub:s * 256 * dsub + 256 * d].reshape(256, d)
        rows[:, s * dsub:s * dsub + d] = table[codes[:, s]]
    if qnorm:
        norm_codes = r.array("u1", m)
        _, _, _, norm_cent = _pq(r)
        rows *= norm_cent[norm_codes][:, None]
    return rows


def _dense_rows(r: _Reader) -> np.ndarray:
    m, n = r.take("<2q")
    return r.array("<f4", m * n).reshape(m, n)


def _tree(counts: list[int]) -> np.ndarray:
    """fastText's Huffman tree over the label counts (HierarchicalSoftmaxLoss::buildTree), as each leaf's
    path from the root: (labels x depth) indices into a row of [log(1 - f) per internal node, log(f) per
    internal node, 0] (the path goes left or right there; the 0 pads the shorter paths)."""
    osz = len(counts)
    count = [float(c) for c in counts] + [1e15] * (osz - 1)
    parent, binary = [-1] * (2 * osz - 1), [False] * (2 * osz - 1)
    leaf, node = osz - 1, osz
    for i in range(osz, 2 * osz - 1):
        mini = []
        for _ in range(2):
            if leaf >= 0 and count[leaf] < count[node]:
                mini.append(leaf)
                leaf -= 1
            else:
                mini.append(node)
                node += 1
        count[i] = count[mini[0]] + count[mini[1]]
        parent[mini[0]] = parent[mini[1]] = i
        binary[mini[1]] = True
    paths = []
    for label in range(osz):
        steps, at = [], label
        while parent[at] != -1:  # leaf to root; summed root first, as dfs adds them
            steps.append(parent[at] - osz + (osz - 1 if binary[at] else 0))
            at = parent[at]
        paths.append(steps[::-1])
    pad = 2 * (osz - 1)
    depth = max(map(len, paths))
    return np.array([p + [pad] * (depth - len(p)) for p in paths], np.int64)


@dataclass
class Model:
    """lid.176 as numpy arrays (`load`)."""

    labels: list[str]
    vocab: dict[str, int]  # word -> its input row
    bucket_row: np.ndarray  # n-gram bucket -> its input row, or -1 where the pruned model dropped it (8 MB;
    # a bitmap and the kept buckets sorted would take 0.5 MB, for 10% more of language ID's CPU)
    rows: np.ndarray  # float32 (input rows, dim)
    nodes: np.ndarray  # float64 (labels - 1, dim): the tree's internal nodes' output rows
    paths: np.ndarray  # each label's path (`_tree`)
    minn: int
    maxn: int
    bucket: int
    eos: int


def load(path: str) -> Model:
    """The model file (fastText's binary format, version 12, quantized or not, hierarchical softmax)."""
    with open(path, "rb") as f:
        r = _Reader(f.read())
    magic, version = r.take("<2i")
    if (magic, version) != (MAGIC, VERSION):
        raise ValueError(f"{path}: not a fastText model of format version {VERSION}")
    dim, _ws, _epoch, _mincount, _neg, word_ngrams, loss, _model, bucket, minn, maxn, _lr = r.take("<12i")
    r.take("<d")
    if loss != 1 or word_ngrams > 1:  # loss_name::hs is 1; word n-grams would tie a word to its neighbours
        raise ValueError(f"{path}: expected hierarchical softmax without word n-grams (loss {loss}, "
                         f"wordNgrams {word_ngrams})")
    size, nwords, nlabels = r.take("<3i")
    _ntokens, pruneidx_size = r.take("<2q")
    words, labels, counts = [], [], []
    for _ in range(size):
        word = r.cstring().decode("utf-8", "surrogateescape")
        count, kind = r.take("<qb")
        if kind == 0:
            words.append(word)
        else:
            labels.append(word[len(LABEL_PREFIX):] if word.startswith(LABEL_PREFIX) else word)
            counts.append(count)
    pairs = r.array("<i4", 2 * max(pruneidx_size, 0)).reshape(-1, 2)
    (quant_input,) = r.take("<?")
    rows = _quant_rows(r) if quant_input else _dense_rows(r)
    (qout,) = r.take("<?")
    out = _quant_rows(r) if quant_input and qout else _dense_rows(r)
    bucket_row = np.full(bucket, -1, np.int32)
    if pruneidx_size > 0:
        bucket_row[pairs[:, 0]] = nwords + pairs[:, 1]
    elif pruneidx_size < 0:  # not pruned: every bucket has its row
        bucket_row[:] = nwords + np.arange(bucket, dtype=np.int32)
    vocab = {w: i for i, w in enumerate(words)}
    assert len(words) == nwords and len(labels) == nlabels and rows.shape[1] == dim
    return Model(labels, vocab, bucket_row, rows,
                 out[:nlabels - 1].astype(np.float64), _tree(counts), minn, maxn, bucket, vocab[EOS])


def _ngram_rows(words: list[str], m: "Model") -> tuple[np.ndarray, np.ndarray]:
    """(which word, input row) of every ``minn``..``maxn`` character n-gram of each ``<word>`` that the
    pruned model kept, as ``computeSubwords`` finds them: FNV-1a over UTF-8 bytes, a byte 0x80 or above
    read as a negative char, modulo ``bucket``. ASCII words (a character is a byte) are hashed a whole
    level at a time; the others character by character (`_utf8_ngram_hashes`)."""
    flags = list(map(str.isascii, words))
    if all(flags):
        return _ascii_ngram_rows(words, m)
    ascii_at = np.flatnonzero(flags)
    other_at = np.flatnonzero(~np.array(flags))
    wa, ra = _ascii_ngram_rows(list(compress(words, flags)), m)
    wo, ho = _utf8_ngram_hashes([words[i] for i in other_at.tolist()], m.minn, m.maxn)
    ro = m.bucket_row[ho % np.uint32(m.bucket)]
    kept = ro >= 0
    return np.concatenate([ascii_at[wa], other_at[wo[kept]]]), np.concatenate([ra, ro[kept]])


def _ascii_ngram_rows(words: list[str], m: "Model") -> tuple[np.ndarray, np.ndarray]:
    """`_ngram_rows` of ASCII words: the n-grams starting at each byte, one array pass per length."""
    if not words:
        return np.zeros(0, np.int64), np.zeros(0, np.int32)
    data = ("<" + "><".join(words) + ">").encode("ascii")
    size = np.fromiter(map(len, words), np.int64, len(words)) + 2
    word_end = np.cumsum(size)
    buf = np.frombuffer(data + b"\x00" * m.maxn, np.uint8).astype(np.uint32)
    room = np.repeat(word_end, size) - np.arange(len(data))  # bytes from each to its word's end
    out_at, out_row = [], []
    h = np.full(len(data), FNV_OFFSET, np.uint32)
    bucket = np.uint32(m.bucket)
    for n in range(1, m.maxn + 1):
        np.bitwise_xor(h, buf[n - 1:n - 1 + len(data)], out=h)
        np.multiply(h, FNV_PRIME, out=h)
        if n >= m.minn:
            row = m.bucket_row[h % bucket]
            at = np.flatnonzero((row >= 0) & (room >= n))
            out_at.append(at)
            out_row.append(row[at])
    at = np.concatenate(out_at)
    word_of = np.searchsorted(word_end, at, side="right")
    return word_of, np.concatenate(out_row)


def _utf8_ngram_hashes(words: list[str], minn: int, maxn: int) -> tuple[np.ndarray, np.ndarray]:
    """The n-gram hashes of any words (`_ngram_rows`): each n-gram grown a character (1-4 bytes) at a time
    from the one a character shorter, the same hashes as `fnv1a_spans` of each n-gram's bytes (a test holds
    them equal), which hashes every n-gram from its first byte: 1.45x this path's CPU on 51k distinct
    non-ASCII words of man pages in 8 languages."""
    if not words:
        return np.zeros(0, np.int64), np.zeros(0, np.uint32)
    pieces = [f"<{w}>".encode("utf-8", "surrogatepass") for w in words]
    buf = np.frombuffer(b"".join(pieces), np.uint8)
    signed = buf.view(np.int8).astype(np.int32).view(np.uint32)
    word_end = np.cumsum(np.fromiter(map(len, pieces), np.int64, len(pieces)))
    starts = np.flatnonzero((buf & 0xC0) != 0x80)  # each character's first byte
    word_of = np.searchsorted(word_end, starts, side="right")
    next_start = np.append(starts[1:], len(buf))
    char_end = np.minimum(next_start, word_end[word_of])  # a character ends at the next one or its word's end
    last_char = np.searchsorted(starts, word_end[word_of], side="left") - 1  # each char's word's last char
    out_word, out_hash = [], []
    h = np.full(len(starts), FNV_OFFSET, np.uint32)
    alive = np.arange(len(starts))  # n-gram starts still growing
    for n in range(1, maxn + 1):
        alive = alive[alive + n - 1 <= last_char[alive]]
        if not len(alive):
            break
        c = alive + n - 1  # the n-th character of each n-gram
        pos, end = starts[c], char_end[c]
        hh = h[alive]
        for b in range(int((end - pos).max())):
            more = pos + b < end
            at = np.where(more, pos + b, 0)
            hh = np.where(more, (hh ^ signed[at]) * FNV_PRIME, hh)
        h[alive] = hh
        if n >= minn:
            out_word.append(word_of[alive])
            out_hash.append(hh)
    if not out_word:
        return np.zeros(0, np.int64), np.zeros(0, np.uint32)
    return np.concatenate(out_word), np.concatenate(out_hash)


def _tokens(lines: list[str]) -> tuple[pa.Array, np.ndarray]:
    """Every line's words as fastText reads them (split at `` \\n\\r\\t\\v\\f\\0`` and nothing else;
    up to a "</s>" token, where ``Dictionary::getLine`` stops: it stands for the line's end), as one
    Arrow string array split by Arrow (the per-word work stays in C++), and how many each line has."""
    spaced = []
    for line in lines:
        for c in _SEPARATORS:
            if c in line:
                line = line.replace(c, " ")
        spaced.append(line)
    lists = pc.split_pattern(an.strings(spaced), " ", memory_pool=_POOL)
    tokens = lists.flatten()
    line_of = np.repeat(np.arange(len(lines)), np.diff(an.offsets(lists)))
    keep = an.byte_lengths(tokens) > 0
    if any(EOS in line for line in spaced):
        keep &= _before_eos(tokens, line_of, len(lines))
    tokens = pc.filter(tokens, an.from_bools(keep), memory_pool=_POOL)
    return tokens, np.bincount(line_of[keep], minlength=len(lines))


def _before_eos(tokens: pa.Array, line_of: np.ndarray, n: int) -> np.ndarray:
    """Which tokens come before their line's first "</s>" token."""
    starts = an.offsets(tokens)[:-1].astype(np.int64)
    data = np.frombuffer(tokens.buffers()[2] or b"", np.uint8)
    eos = an.byte_lengths(tokens) == len(EOS)  # compared on the bytes: pc.equal with a str imports pandas
    for k, byte in enumerate(EOS.encode()):
        eos[eos] &= data[starts[eos] + k] == byte
    first = np.full(n, len(tokens), np.int64)
    at = np.flatnonzero(eos)
    np.minimum.at(first, line_of[at], at)
    return np.arange(len(tokens)) < first[line_of]


def _batches(lines: list[str]) -> Iterator[list[str]]:
    """The lines in runs of at most `_BATCH` lines and `_BATCH_CHARS` characters (a longer line alone)."""
    run: list[str] = []
    size = 0
    for line in lines:
        if run and (len(run) == _BATCH or size + len(line) > _BATCH_CHARS):
            yield run
            run, size = [], 0
        run.append(line)
        size += len(line)
    if run:
        yield run


class Predictor:
    """lid.176's predict, each word's summed rows kept (at most `_CACHE_MAX` words, float32 as fastText
    sums them) for the next texts of the process."""

    def __init__(self, model: Model) -> None:
        self.m = model
        self.index: dict[str, int] = {}  # word -> row; inserted in row order (`_add`, `_make_room`)
        self.sums = np.zeros((0, model.rows.shape[1]), np.float32)
        self.nids = np.zeros(0, np.float64)
        self.used = np.zeros(0, np.int64)  # row -> the last batch that used it
        self.batch = 0

    def _add(self, words: list[str]) -> np.ndarray:
        """Each new word's summed input rows and its number of ids, kept, and the rows they got (the caller
        makes room first when these would overfill the cache). A word starting "__label__" is a label to
        fastText: no ids. A word's sum is over its own rows in a fixed order, whatever else is added."""
        m, first = self.m, len(self.index)
        need = first + len(words)
        if need > len(self.nids):
            size = max(need, 2 * len(self.nids), 1024)
            self.sums = np.resize(self.sums, (size, self.sums.shape[1]))
            self.nids = np.resize(self.nids, size)
            self.used = np.resize(self.used, size)
        sums = np.zeros((len(words), self.sums.shape[1]), np.float64)
        nids = np.zeros(len(words), np.float64)
        own = [(i, v) for i, v in enumerate(map(m.vocab.get, words)) if v is not None]
        if own:
            at, row = map(np.array, zip(*own))
            sums[at] += m.rows[row]
            nids[at] += 1
        if LABEL_PREFIX in "\n".join(words):
            plain = np.array([i for i, w in enumerate(words) if not w.startswith(LABEL_PREFIX)], np.int64)
            which, row = _ngram_rows([words[i] for i in plain.tolist()], m)
            at = plain[which]
        else:
            at, row = _ngram_rows(words, m)
        picked = np.ascontiguousarray(m.rows[row].T)
        for d in range(sums.shape[1]):  # np.add.at is ten times slower
            sums[:, d] += np.bincount(at, weights=picked[d], minlength=len(words))
        nids += np.bincount(at, minlength=len(words))
        self.sums[first:need], self.nids[first:need] = sums, nids
        self.index.update(zip(words, range(first, need)))
        return np.arange(first, need)

    def _hidden(self, ids: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """Each line's sentence vector from its words' cache rows (``ids``, ``sizes`` per line): the mean
        of all its ids' rows, ``</s>`` included, summed by numpy's ``add.reduceat`` over the line's run
        (in an order of numpy's own, not one by one, but fixed by the run: the same bits whatever precedes
        it; no BLAS, whose kernels may order additions by memory alignment), so a line's sums depend on
        the line alone, never on the cache or the lines beside it. A line of more than `_LONG_LINE` tokens is
        summed over its distinct words instead (`_hidden_by_words`), so memory follows its words."""
        m = self.m
        hidden = np.zeros((len(sizes), self.sums.shape[1]), np.float64)
        total = np.ones(len(sizes), np.float64)  # </s>
        long = sizes > _LONG_LINE
        short = (sizes > 0) & ~long
        if short.any():
            mine = ids[np.repeat(short, sizes)]
            starts = (np.cumsum(sizes[short]) - sizes[short])
            hidden[short] = np.add.reduceat(self.sums[mine], starts, axis=0, dtype=np.float64)
            total[short] += np.add.reduceat(self.nids[mine], starts)
        ends = np.cumsum(sizes)
        for i in np.flatnonzero(long).tolist():
            hidden[i], total[i] = self._hidden_by_words(ids[ends[i] - sizes[i]:ends[i]])
        return (hidden + m.rows[m.eos]) / total[:, None]

    def _hidden_by_words(self, ids: np.ndarray) -> tuple[np.ndarray, float]:
        """One long line's sum of rows and count of ids (``</s>`` included), over its distinct words
        weighted by their counts, in the order they first occur."""
        rows, first, counts = np.unique(ids, return_index=True, return_counts=True)
        order = np.argsort(first)
        rows, weight = rows[order], counts[order].astype(np.float64)
        return (self.sums[rows] * weight[:, None]).sum(axis=0), float((self.nids[rows] * weight).sum()) + 1.0

    def _make_room(self) -> None:
        """Keep the half of the cache used last (the batch at hand's words first: they carry its number),
        moved to the front in their order."""
        used = self.used[:len(self.index)]
        keep = max(_CACHE_MAX // 2, int((used == self.batch).sum()))
        rows = np.sort(np.argsort(-used, kind="stable")[:keep])
        n = len(rows)
        self.sums[:n], self.nids[:n], self.used[:n] = self.sums[rows], self.nids[rows], self.used[rows]
        words = list(self.index)
        self.index = dict(zip([words[r] for r in rows.tolist()], range(n)))

    def _labels(self, hidden: np.ndarray) -> list[tuple[str, float]]:
        """The best leaf of the label tree for each sentence vector (HierarchicalSoftmaxLoss::dfs with
        k=1 and threshold 0: a leaf under log(1e-5) is never returned). Row by row, in a fixed order of
        additions (no matrix product, whose blocking depends on the number of rows), so a text's score
        never depends on the texts beside it."""
        m = self.m
        dots = np.concatenate([(part[:, None, :] * m.nodes[None, :, :]).sum(axis=2)  # 128 lines: 2.8 MB
                               for part in np.split(hidden, range(128, len(hidden), 128))])
        f = 1.0 / (1.0 + np.exp(-dots))
        logs = np.concatenate([np.log(1.0 - f + _LOG_EPS), np.log(f + _LOG_EPS), np.zeros((len(f), 1))], axis=1)
        scores = np.zeros((len(f), len(m.labels)))
        for k in range(m.paths.shape[1]):
            scores += logs[:, m.paths[:, k]]
        best = np.argmax(scores, axis=1)
        top = scores[np.arange(len(best)), best]
        return [("", 0.0) if s < np.log(_LOG_EPS) else (m.labels[b], float(np.exp(s)))
                for b, s in zip(best.tolist(), top.tolist())]

    def predict_many(self, lines: list[str]) -> list[tuple[str, float]]:
        """(label, probability) of fastText's ``predict(line, k=1)`` for each line (no newline in it);
        ("", 0.0) where it predicts none. Up to `_BATCH` lines at a time: their words split and made
        distinct by Arrow, each distinct word looked up in the cache (the new ones computed together; a
        full cache keeps the half used last), each line's sum taken over its words' rows."""
        out: list[tuple[str, float]] = []
        for batch in _batches(lines):
            tokens, sizes = _tokens(batch)
            encoded = pc.dictionary_encode(tokens, memory_pool=_POOL)
            distinct = encoded.dictionary.to_pylist()
            self.batch += 1
            rows = np.fromiter(map(self.index.get, distinct, repeat(-1)), np.int64, len(distinct))
            missing = rows < 0
            self.used[rows[~missing]] = self.batch
            if missing.any():
                new = list(compress(distinct, missing.tolist()))
                if len(self.index) + len(new) > _CACHE_MAX:
                    self._make_room()
                    rows = np.fromiter(map(self.index.get, distinct, repeat(-1)), np.int64, len(distinct))
                rows[missing] = self._add(new)
                self.used[rows[missing]] = self.batch
            ids = rows[an.to_numpy(encoded.indices, np.int32)] if len(tokens) else np.zeros(0, np.int64)
            out += self._labels(self._hidden(ids, sizes))
        return out

    def predict(self, line: str) -> tuple[str, float]:
        """`predict_many` of one line."""
        return self.predict_many([line])[0]
