"""Text -> normalized tokens -> 64-bit shingle hashes, for a whole batch of documents at once.

Near-duplicate detection should not care about case, punctuation, numbers or spacing ("Page 3 of 10"
vs "page 4 of 12"), so text is normalized first: lowercased, invisible format characters (Cf) removed,
decimal digits folded to "0", whitespace runs collapsed. Punctuation and symbols (Unicode P*, S*)
either separate words (`punctuation="split"`, what datatrove's and FineWeb's MinHash do: "os.path.join"
is three words) or are deleted (`"drop"`: one word "ospathjoin"; decontamination's matching and the
first minhash format). Splitting matters for near-duplicate recall on code, man pages and other
punctuation-dense text: gluing words makes fewer, longer words, so each edited word spoils a larger
share of the 5-grams and a copy with 3% of its words edited falls from Jaccard ~0.78 to ~0.75, where
14 x 8 LSH bands find it 77% of the time instead of 88%.
Shingles are word n-grams (default 5) or character n-grams of that normalized text.

The work is done on a numpy array of code points for the whole batch: one `str.lower()` and one
`encode("utf-32")` per document, then every step (character classes through a lookup table, word
boundaries, per-word hashes, n-gram combination) is an array operation. There is no Python loop per
character, word or shingle: on typical web text this is several times faster than `str.split()` plus
hashing each word from Python, and it is the same speed for non-ASCII text (where `str.translate`
falls off a cliff).

Hash construction (fixed: it is part of the on-disk minhash format, see `SHINGLE_FORMAT`):
  word  = mix64(sum_j code_j * R^j + salt)   (polynomial in a fixed odd R, mod 2^64)
  char  = mix64(code ^ salt)
  ngram = mix64(sum_k token[i+k] * K[k] ^ salt_n)   (K odd constants, so order matters)
A document with fewer than n tokens (but at least one) gets one shingle made of all its tokens, so short
documents can still match each other; a document with no tokens gets no shingles.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np

from .hashing import U64, mix64, seeded_constants

SHINGLE_FORMAT = 1  # bump when any hash construction here changes

KEEP, DROP, DIGIT, SPACE = 0, 1, 2, 3
_LUT_SIZE = 0x30000  # planes 0-2; everything above is treated as a letter (KEEP)
_SALT_WORD = U64(0x5851F42D4C957F2D)
_SALT_CHAR = U64(0x14057B7EF767814F)
_SALT_NGRAM = U64(0x2545F4914F6CDD1D)


PUNCTUATION = "split"  # what minhash shingles do with punctuation (recorded in its params; not a manifest key)


def check_shingling(ngram: int, unit: str, max_chars: int, punctuation: str) -> None:
    """Refuse shingle parameters the hashing below has no meaning for.

    ngram: tokens per shingle; unit: "word" (robust for space-separated languages) or "char" (needed for
    scripts without spaces, and for very short texts); max_chars: only the first max_chars characters
    count, so one mega-document cannot pull unrelated clusters together; punctuation: "split"
    (punctuation and symbols separate words) or "drop" (they are deleted), see the module doc.
    """
    if punctuation not in ("split", "drop"):
        raise ValueError(f"punctuation must be 'split' or 'drop', got {punctuation!r}")
    if unit not in ("word", "char"):
        raise ValueError(f"shingle unit must be 'word' or 'char', got {unit!r}")
    if not isinstance(ngram, int) or ngram < 1:
        raise ValueError(f"ngram must be a positive integer, got {ngram!r}")
    if not isinstance(max_chars, int) or max_chars < 1:
        raise ValueError(f"max_chars must be a positive integer, got {max_chars!r}")


_CLASS_OF_CATEGORY = {"Nd": DIGIT, "Cc": SPACE, "Zs": SPACE, "Zl": SPACE, "Zp": SPACE, "Cf": DROP}


def _computed_categories() -> tuple[list[str], np.ndarray]:
    """(the Unicode general categories that occur below _LUT_SIZE, sorted; each code point's index into
    them), from `unicodedata` one code point at a time (39 ms)."""
    cats = list(map(unicodedata.category, map(chr, range(_LUT_SIZE))))
    uniq = sorted(set(cats))
    index = {c: i for i, c in enumerate(uniq)}
    return uniq, np.fromiter(map(index.__getitem__, cats), dtype=np.int64, count=_LUT_SIZE)


@lru_cache(maxsize=1)
def _categories() -> tuple[list[str], np.ndarray]:
    """`_computed_categories`, the one pass over the code points both lookup tables below are derived
    from: expanded from the generated runs (`_unicode_categories`, under 1 ms) when they were made from
    this Python's Unicode version, computed otherwise."""
    from . import _unicode_categories as gen

    if gen.UNIDATA_VERSION != unicodedata.unidata_version or gen.SIZE != _LUT_SIZE:
        return _computed_categories()
    lengths = np.diff(np.append(np.asarray(gen.RUN_STARTS, dtype=np.int64), _LUT_SIZE))
    return list(gen.CATEGORIES), np.repeat(np.asarray(gen.RUN_CATEGORIES, dtype=np.int64), lengths)


@lru_cache(maxsize=1)
def char_classes() -> np.ndarray:
    """Code point -> class lookup table, built once per process (~50 ms).

    KEEP letters, marks (combining accents, Indic vowel signs) and non-decimal numbers; DROP
    punctuation (P*), symbols (S*) and format characters (Cf); DIGIT for decimal digits (Nd); SPACE
    for whitespace, separators (Z*) and control characters (Cc).
    """
    uniq, of = _categories()
    per_cat = np.array([_CLASS_OF_CATEGORY.get(c, DROP if c[0] in "PS" else KEEP) for c in uniq], dtype=np.uint8)
    lut = per_cat[of]
    spaces = [cp for cp in range(_LUT_SIZE) if cp < 0x3100 and chr(cp).isspace()]  # no isspace() chars above
    lut[spaces] = SPACE
    return np.concatenate([lut, np.array([KEEP], dtype=np.uint8)])  # index _LUT_SIZE: "above the table"


def normalize_text(text: str, max_chars: int | None = None, punctuation: str = "drop") -> str:
    """Reference (pure Python) form of the normalization: words separated by single spaces.

    The batch functions below never build this string; it exists so tests and users can see exactly
    what text the shingles are taken from.
    """
    lut = char_classes()
    split = _punctuation_classes() if punctuation == "split" else None
    out = []
    for ch in text[:max_chars].lower():
        cls = int(lut[min(ord(ch), _LUT_SIZE)])
        if cls == DROP and split is not None and split[min(ord(ch), _LUT_SIZE)]:
            cls = SPACE
        if cls == DROP:
            continue
        out.append(" " if cls == SPACE else "0" if cls == DIGIT else ch)
    return " ".join(w for w in "".join(out).split(" ") if w)


@dataclass
class Tokens:
    """Flat token hashes for a batch, with doc d's tokens at values[offsets[d]:offsets[d+1]]."""

    values: np.ndarray  # uint64
    offsets: np.ndarray  # int64, len = docs + 1


def _code_points(texts: Sequence[str], max_chars: int) -> tuple[np.ndarray, np.ndarray]:
    """Lowercased code points of all texts, each followed by one separator space; and doc starts.

    The trailing separator keeps words from running across documents and makes every doc's segment
    non-empty (so `reduceat` over segments is well defined even for empty texts).
    """
    lowered = []
    for t in texts:
        if t is None:
            t = ""
        elif not isinstance(t, str):
            raise TypeError(f"text must be a string, got {type(t).__name__}")
        lowered.append(t[:max_chars].lower())
    lengths = np.fromiter((len(t) for t in lowered), dtype=np.int64, count=len(lowered))
    cp = np.frombuffer((" ".join(lowered) + " ").encode("utf-32-le", "surrogatepass"), dtype="<u4")
    starts = np.zeros(len(lowered) + 1, dtype=np.int64)
    np.cumsum(lengths + 1, out=starts[1:])
    return cp, starts


def word_tokens(texts: Sequence[str], max_chars: int = 500_000, *, with_chars: bool = False,
                punctuation: str = "drop"):
    """Hash of every normalized word of every text, grouped by doc.

    With `with_chars`, also returns the normalized character stream (words joined by one space) as
    premixed uint64 codes, for character shingles. `punctuation="split"` makes punctuation and symbols
    word boundaries instead of deleting them (word_spans follows "drop").
    """
    n_docs = len(texts)
    cp, starts = _code_points(texts, max_chars)
    c = np.take(_normalizing_table(punctuation == "split"), cp.astype(np.intp), mode="clip")
    if len(cp) and int(cp.max()) >= _LUT_SIZE:  # rare scripts above the table are letters: keep as is
        big = cp >= _LUT_SIZE
        c[big] = cp[big]
    keep = c != 0
    if n_docs:  # every doc's segment ends with its (kept) separator, so reduceat is well defined
        kept = np.add.reduceat(keep.view(np.uint8), starts[:-1], dtype=np.int64)
    else:
        kept = np.empty(0, dtype=np.int64)
    c = c[keep]
    doc_start = np.zeros(n_docs, dtype=np.int64)  # doc starts in the compacted stream
    np.cumsum(kept[:-1], out=doc_start[1:])
    nonspace = c != 32
    word_start = nonspace.copy()
    word_start[1:] &= ~nonspace[:-1]
    word_first = np.flatnonzero(word_start)  # positions in the compacted stream
    n_words = len(word_first)
    word_doc = np.searchsorted(doc_start, word_first, side="right") - 1
    word_offsets = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(np.bincount(word_doc, minlength=n_docs), out=word_offsets[1:])
    if n_words:
        # Polynomial hash over the stream, rebased per word: the segment from a word's start to the
        # next word's start is the word plus the spaces after it, which contribute nothing; so
        # sum_j code[s+j] R^(s+j) times R^-s = sum_j code[s+j] R^j, the same wherever the word occurs.
        codes = np.multiply(c, nonspace, dtype=np.uint32).astype(U64)
        pw, inv = _powers(len(codes))
        codes *= pw[: len(codes)]
        words = mix64(np.add.reduceat(codes, word_first) * inv[word_first] + _SALT_WORD)
    else:
        words = np.empty(0, dtype=U64)
    tokens = Tokens(words, word_offsets)
    if not with_chars:
        return tokens
    # Character stream: the words' characters with one space before every word that is not its doc's first.
    premixed = mix64(c[nonspace].astype(U64) ^ _SALT_CHAR)
    first_ns = np.flatnonzero(word_start[nonspace])  # word starts in the non-space stream
    ns_per_doc = np.add.reduceat(nonspace.view(np.uint8), doc_start, dtype=np.int64) if n_docs else kept
    words_per_doc = np.diff(word_offsets)
    not_first = np.ones(n_words, dtype=bool)
    not_first[word_offsets[:-1][words_per_doc > 0]] = False
    space_code = mix64(np.array([ord(" ")], dtype=U64) ^ _SALT_CHAR)[0]
    chars = np.insert(premixed, first_ns[not_first], space_code)
    char_counts = ns_per_doc + np.maximum(words_per_doc - 1, 0)
    char_offsets = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(char_counts, out=char_offsets[1:])
    return tokens, Tokens(chars, char_offsets)


_R = 0x9FB21C651E98DF25  # odd, so invertible mod 2^64
_powers_cache: list = []


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(R^k, R^-k) mod 2^64 for k < n (at least): a table grown by doubling, kept per process."""
    if not _powers_cache or len(_powers_cache[0]) < n:
        size = 1 << max(16, (n - 1).bit_length())
        pw = np.full(size, _R, dtype=U64)
        pw[0] = 1
        np.multiply.accumulate(pw, out=pw)
        inv = np.full(size, pow(_R, -1, 1 << 64), dtype=U64)
        inv[0] = 1
        np.multiply.accumulate(inv, out=inv)
        _powers_cache[:] = [pw, inv]
    return _powers_cache[0], _powers_cache[1]


@lru_cache(maxsize=1)
def _punctuation_classes() -> np.ndarray:
    """Code point -> True for punctuation and symbols (Unicode P*, S*): the DROP class less Cf."""
    uniq, of = _categories()
    punct = np.array([c[0] in "PS" for c in uniq], dtype=bool)[of]
    return np.concatenate([punct, np.array([False])])


@lru_cache(maxsize=2)
def _normalizing_table(split_punctuation: bool = False) -> np.ndarray:
    """Code point -> normalized code point: 0 (drop), 32 (any space), 48 (any digit), else itself.
    With split_punctuation, punctuation and symbols map to 32 (a word boundary) instead of 0."""
    cls = char_classes()
    table = np.arange(len(cls), dtype=np.uint32)
    table[cls == DROP] = 0
    if split_punctuation:
        table[_punctuation_classes()] = 32
    table[cls == SPACE] = 32
    table[cls == DIGIT] = 48
    table[-1] = 0x10FFFF  # index _LUT_SIZE (clipped lookups) is overwritten with the real code point
    return table


@lru_cache(maxsize=16)
def _ngram_constants(n: int) -> np.ndarray:
    return seeded_constants(0x5EED, n, stream=7) | U64(1)


def ngrams(tokens: Tokens, n: int) -> Tokens:
    """Hash every window of n consecutive tokens inside each doc (never across docs)."""
    vals, offs = tokens.values, tokens.offsets
    n_docs = len(offs) - 1
    seg = np.diff(offs)
    full = seg >= n
    counts = np.where(full, seg - n + 1, (seg > 0).astype(np.int64))
    out_offs = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(counts, out=out_offs[1:])
    out = np.empty(int(out_offs[-1]), dtype=U64)
    k_const = _ngram_constants(n)
    total = len(vals)
    if total >= n and full.any():
        m = total - n + 1
        acc = vals[:m] * k_const[0]
        for k in range(1, n):
            acc += vals[k : k + m] * k_const[k]
        doc_of = np.repeat(np.arange(n_docs), seg)[:m]
        starts = np.arange(m, dtype=np.int64)
        valid = starts + n <= offs[1:][doc_of]
        sel = np.flatnonzero(valid)
        out[out_offs[doc_of[sel]] + (sel - offs[doc_of[sel]])] = acc[sel]
    short = np.flatnonzero((seg > 0) & ~full)
    if len(short):
        idx = offs[short][:, None] + np.arange(n)[None, :]
        mask = np.arange(n)[None, :] < seg[short][:, None]
        picked = np.where(mask, vals[np.minimum(idx, total - 1)], U64(0))
        out[out_offs[short]] = (picked * k_const[None, :]).sum(axis=1, dtype=U64)
    return Tokens(mix64(out ^ (_SALT_NGRAM + U64(n))), out_offs)


def shingle_hashes(texts: Sequence[str], ngram: int, unit: str = "word", max_chars: int = 500_000,
                   punctuation: str = PUNCTUATION) -> Tokens:
    """The shingle hashes of each text (duplicates within a doc kept; MinHash ignores them).

    Plain arguments, not a config: minhash passes its `dedup:` section's values, fuzzy verification the
    values recorded with the minhashes, tests their own (parameters: `check_shingling`).
    """
    check_shingling(ngram, unit, max_chars, punctuation)
    if unit == "word":
        return ngrams(word_tokens(texts, max_chars, punctuation=punctuation), ngram)
    _, chars = word_tokens(texts, max_chars, with_chars=True, punctuation=punctuation)
    return ngrams(chars, ngram)


def unique_per_doc(sh: Tokens) -> Tokens:
    """Sorted, de-duplicated shingle set of each doc (what true Jaccard is computed on)."""
    n_docs = len(sh.offsets) - 1
    doc = np.repeat(np.arange(n_docs), np.diff(sh.offsets))
    order = np.lexsort((sh.values, doc))
    v, d = sh.values[order], doc[order]
    keep = np.ones(len(v), dtype=bool)
    keep[1:] = (v[1:] != v[:-1]) | (d[1:] != d[:-1])
    offs = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(np.bincount(d[keep], minlength=n_docs), out=offs[1:])
    return Tokens(v[keep], offs)


def shingle_set(text: str, ngram: int, unit: str = "word", max_chars: int = 500_000,
                punctuation: str = PUNCTUATION) -> np.ndarray:
    """One document's sorted unique shingle hashes (convenience for tests and small jobs)."""
    return unique_per_doc(shingle_hashes([text], ngram, unit, max_chars, punctuation)).values


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """True Jaccard similarity of two sorted unique hash arrays (0.0 when both are empty)."""
    if len(a) == 0 and len(b) == 0:
        return 0.0
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)


def word_spans(text: str) -> np.ndarray:
    """(start, end) character offsets in `text` of each normalized word, in the order `word_tokens`
    hashes them: token k of a document is text[spans[k, 0]:spans[k, 1]].

    Why it exists: decontamination finds matches as token positions and must show (and cut) them as
    character ranges of the original text. Words are the runs between whitespace that keep at least one
    letter or digit once punctuation is dropped ("a.b" is one word, "a . b" two); a word's span runs
    from its first to its last kept character. Character classes do not change with case, so the
    original text is classified directly (no lowercasing, whose length may differ).
    """
    if not text:
        return np.empty((0, 2), dtype=np.int64)
    cp = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    cls = char_classes()[np.minimum(cp, _LUT_SIZE)]
    space = cls == SPACE
    kept = (cls == KEEP) | (cls == DIGIT)
    run_start = ~space
    run_start[1:] &= space[:-1]
    run_id = np.cumsum(run_start) - 1
    idx = np.flatnonzero(kept)
    if not len(idx):
        return np.empty((0, 2), dtype=np.int64)
    rid = run_id[idx]
    change = np.flatnonzero(rid[1:] != rid[:-1])
    starts = idx[np.concatenate(([0], change + 1))]
    ends = idx[np.concatenate((change, [len(idx) - 1]))] + 1
    return np.stack([starts, ends], axis=1).astype(np.int64)
