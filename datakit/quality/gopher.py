"""Gopher quality and repetition measures (Rae et al. 2021, "Scaling Language Models", appendix A).

Pure functions of one text returning named measures; `datakit.quality.rules` compares them with the
thresholds. Every measure is defined so that an empty text gives finite values (0 or 1). Words are split
the way of the document's language (``split``: `datakit.quality.text`) and stop words are that language's
(`datakit.quality.languages`); the defaults are English's, as the Gopher paper and FineWeb measured them.

Quality (per document):
    gopher_words            content words (tokens with a character other than punctuation; words are
                            spaCy's English tokens, as datatrove counts them: `datakit.quality.text`)
    gopher_avg_word_length  mean length of the content words
    gopher_hash_ratio       '#' characters per token
    gopher_ellipsis_ratio   '...' and '…' per token
    gopher_bullet_lines     share of lines starting with a bullet ('•' or '-')
    gopher_ellipsis_lines   share of lines ending with an ellipsis
    gopher_alpha_words      share of tokens holding an alphabetic character
    gopher_stop_words       how many distinct stop words occur, case-insensitively (English: the, be,
                            to, of, and, that, have, with); in a language split by character, a stop
                            word occurs when the text holds it (it may be several characters long)

Repetition:
    rep_dup_para_frac / rep_dup_para_char_frac   paragraphs (split on blank lines) that repeat an earlier
                            paragraph: their share of the paragraphs, and their characters per text character
    rep_dup_line_frac / rep_dup_line_char_frac   the same for lines
    rep_top_{n}_gram        characters of the most frequent word n-gram (as text, words joined by one
                            space) times its count, per text character, n = 2, 3, 4
    rep_dup_{n}_gram        characters of the words in n-grams that repeat an earlier n-gram (scanning left
                            to right, a repeat's words are counted once and skipped), per text character,
                            n = 5..10
"""

from __future__ import annotations

import re
from collections import Counter
from itertools import repeat
from typing import Iterable, Iterator

from .ngrams import DUP, SMALL, TOP, ngram_chars
from .text import PUNCTUATION, tokens

STOP_WORDS = frozenset({"the", "be", "to", "of", "and", "that", "have", "with"})
BULLETS = ("•", "-")
ELLIPSES = ("...", "…")
TOP_NGRAMS = (2, 3, 4)
DUP_NGRAMS = (5, 6, 7, 8, 9, 10)
_PARAGRAPH_BREAK = re.compile(r"\n{2,}")


def count_stop_words(text: str, words: Iterable[str], stop_words: frozenset[str], split: str) -> int:
    """How many distinct ``stop_words`` occur: among the lowercased words, or, for a text split by
    character (whose words are single characters), anywhere in the text."""
    if split == "chars":
        low = text.lower()
        return sum(1 for w in stop_words if w in low)
    return len(stop_words.intersection(map(str.lower, words)))


def quality_measures(text: str, stop_words: frozenset[str] = STOP_WORDS, split: str = "spacy_en") -> dict[str, float]:
    """The Gopher quality measures of ``text`` (see the module docstring). Each distinct token is looked
    at once (a document repeats most of its words), its count standing for its occurrences."""
    counts = Counter(tokens(text, split))
    n_tok = sum(counts.values())
    n_words = word_chars = alpha = 0
    words = []
    for t, k in counts.items():
        if not PUNCTUATION.issuperset(t):
            words.append(t)
            n_words += k
            word_chars += len(t) * k
        if t.isalpha() or any(map(str.isalpha, t)):
            alpha += k
    lines = text.splitlines() or [""]
    stripped = list(map(str.strip, lines))
    return {
        "gopher_words": float(n_words),
        "gopher_avg_word_length": word_chars / n_words if n_words else 0.0,
        "gopher_hash_ratio": text.count("#") / n_tok if n_tok else 0.0,
        "gopher_ellipsis_ratio": (text.count("...") + text.count("…")) / n_tok if n_tok else 0.0,
        "gopher_bullet_lines": sum(map(str.startswith, stripped, repeat(BULLETS))) / len(lines),
        "gopher_ellipsis_lines": sum(map(str.endswith, stripped, repeat(ELLIPSES))) / len(lines),
        "gopher_alpha_words": alpha / n_tok if n_tok else 0.0,
        "gopher_stop_words": float(count_stop_words(text, words, stop_words, split)),
    }


def _repeats(items: list[str]) -> tuple[int, int]:
    """(items equal to an earlier item, their characters): every item less the first of each value."""
    distinct = set(items)
    return len(items) - len(distinct), sum(map(len, items)) - sum(map(len, distinct))


def top_ngram_chars(toks: list[str], n: int) -> int:
    """Characters of the most frequent n-gram (words joined by one space) times its count; ties go to
    the n-gram seen first."""
    if len(toks) < n:
        return 0
    counts = Counter(zip(*(toks[i:] for i in range(n))))
    gram, count = counts.most_common(1)[0]
    return (sum(map(len, gram)) + n - 1) * count


def dup_ngram_chars(toks: list[str], n: int) -> int:
    """Characters of the words inside n-grams that repeat an earlier n-gram, scanning left to right and
    skipping past each repeat, so overlapping repeats are counted once."""
    seen: set[tuple[str, ...]] = set()
    i, chars, end = 0, 0, len(toks) - n + 1
    while i < end:
        gram = tuple(toks[i:i + n])
        if gram in seen:
            chars += sum(map(len, gram))
            i += n
        else:
            seen.add(gram)
            i += 1
    return chars


def repetition_measures(text: str, top: tuple[int, ...] = TOP_NGRAMS, dup: tuple[int, ...] = DUP_NGRAMS,
                        split: str = "spacy_en") -> dict[str, float]:
    """The Gopher repetition measures of ``text`` (see the module docstring) for the given n."""
    return {**line_repetition_measures(text), **ngram_repetition_measures(text, top, dup, split)}


def line_repetition_measures(text: str) -> dict[str, float]:
    """The paragraph and line measures (rep_dup_para_*, rep_dup_line_*): the repetition rules' first
    four, which need no words, so the chain checks them before splitting the text into words."""
    n_chars = len(text) or 1
    paras, lines = _paragraphs(text), _lines(text)
    p_count, p_chars = _repeats(paras)
    l_count, l_chars = _repeats(lines)
    return {
        "rep_dup_para_frac": p_count / len(paras),
        "rep_dup_para_char_frac": p_chars / n_chars,
        "rep_dup_line_frac": l_count / len(lines),
        "rep_dup_line_char_frac": l_chars / n_chars,
    }


def _paragraphs(text: str) -> list[str]:
    """The stripped text split at runs of two or more newlines (what ``re.split(r"\\n{2,}")`` gives): by
    plain ``str.split`` unless a run is longer than two (rare), which the regex handles."""
    text = text.strip()
    return _PARAGRAPH_BREAK.split(text) if "\n\n\n" in text else text.split("\n\n")


def _lines(text: str) -> list[str]:
    """The text split at runs of newlines (what ``re.split(r"\\n+")`` gives, five times cheaper): split at
    every newline, then the empty strings between two newlines dropped (the first and the last piece stay,
    empty or not, as the regex leaves them)."""
    parts = text.split("\n")
    return parts if len(parts) < 3 else [parts[0], *filter(None, parts[1:-1]), parts[-1]]


def ngram_repetition_measures(text: str, top: tuple[int, ...] = TOP_NGRAMS, dup: tuple[int, ...] = DUP_NGRAMS,
                              split: str = "spacy_en") -> dict[str, float]:
    """The word n-gram measures (rep_top_{n}_gram, rep_dup_{n}_gram) for the given n."""
    return dict(ngram_repetition(text, top, dup, split))


def ngram_repetition(text: str, top: tuple[int, ...] = TOP_NGRAMS, dup: tuple[int, ...] = DUP_NGRAMS,
                     split: str = "spacy_en") -> Iterator[tuple[str, float]]:
    """(measure, value) of each word n-gram measure, in increasing n (the rules' order), each computed
    only when asked for: the chain stops at the first rule that removes the document."""
    n_chars = len(text) or 1
    toks = tokens(text, split)
    for kind, n, chars in (_plain_ngram_chars(toks, top, dup) if len(toks) < SMALL else ngram_chars(toks, top, dup)):
        yield f"rep_{kind}_{n}_gram", chars / n_chars


def _plain_ngram_chars(toks: list[str], top: tuple[int, ...], dup: tuple[int, ...]) -> Iterator[tuple[str, int, int]]:
    """`ngrams.ngram_chars` by the plain definitions (faster on short token lists), in the same order."""
    for n in sorted({*top, *dup}):
        if n in top:
            yield TOP, n, top_ngram_chars(toks, n)
        if n in dup:
            yield DUP, n, dup_ngram_chars(toks, n)
