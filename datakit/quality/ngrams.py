"""Gopher's word n-gram repetition measures over integer token ids, one n after the other.

The plain definitions (`gopher.top_ngram_chars`, `gopher.dup_ngram_chars`) build a tuple of strings per
position and n: nine passes of Python work per token, three quarters of the repetition rule's time.

Here every token gets an id once and each n-gram an exact id: the (n-1)-gram's id paired with the next
token's, compacted by a stable sort (no hashing, so no collisions). Only *repeating* n-grams are carried
from one n to the next: a position whose n-gram occurs once also has a unique (n+1)-gram, so it can never
be counted as a repeat nor change which n-gram is most frequent (unless none repeats: then the first
position's, with count 1, and every larger n is known without any work). In prose the repeating
positions thin out fast (most 5-grams occur once), so the work per n shrinks with n.

`ngram_chars` yields each n's value as soon as it is known, in increasing n, which is the order of the
repetition rules (top 2, 3, 4, then dup 5..10): the chain stops asking once a rule removes the document
(a removed document's later measures are never written), and the n-grams a document is most repetitive
in, whose duplicate scans cost most, are exactly the ones that fail early.

The duplicate scan is sequential by definition (a repeat skips its own n positions, which are then never
"seen"), so it stays a Python loop, over the repeating positions only: a unique n-gram, seen or skipped,
can never match a later position. Characters of the words at positions p..p+n-1 are a difference of the
token lengths' running sum. The results equal the plain definitions exactly (integers;
`tests/test_quality_rules.py` checks both on real and random token lists). `gopher.ngram_repetition`
keeps the plain definitions for token lists shorter than `SMALL`, where numpy's per-call cost is larger
than their Python loops.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

SMALL = 64  # shorter token lists: the plain definitions are faster
TOP, DUP = "top", "dup"  # the two kinds of n-gram measure


def _ids(toks: list[str]) -> tuple[np.ndarray, int, list[int]]:
    """Each token's id: the position of its first occurrence (one C-level pass, no Python loop), a bound
    on the ids (the token count), and the running sum of the token lengths (``cum[p]``: characters of
    the tokens before position p), the lengths measured once per distinct token."""
    first: dict[str, int] = {}
    total = len(toks)
    ids = np.fromiter(map(first.setdefault, toks, range(total)), np.int64, total)
    distinct = len(first)
    length = np.zeros(total, np.int64)  # at each distinct token's first position, its length
    length[np.fromiter(first.values(), np.int64, distinct)] = np.fromiter(map(len, first), np.int64, distinct)
    return ids, total, [0, *length[ids].cumsum().tolist()]


def _group(key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the index in ``key`` of each distinct value's first occurrence, each position's group id, each
    group's count), groups in ascending key order: ``np.unique``'s three answers without its generic
    wrapping, which costs more than the sort on the few hundred keys of a document (array methods, not
    their ``np.`` wrappers, for the same reason)."""
    m = len(key)
    order = key.argsort(kind="stable")  # stable: a group's first entry is its earliest position
    ordered = key[order]
    new = np.empty(m, bool)
    new[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    starts = new.nonzero()[0]
    group = np.empty(m, np.int64)
    group[order] = new.cumsum() - 1
    counts = np.empty(len(starts), np.int64)
    np.subtract(starts[1:], starts[:-1], out=counts[:-1])
    counts[-1] = m - starts[-1]
    return order[starts], group, counts


def _top(cum: list[int], pos: np.ndarray, first: np.ndarray, counts: np.ndarray, n: int) -> int:
    """Characters of the most frequent n-gram (words joined by one space) times its count; among equally
    frequent n-grams the one seen first (what ``Counter.most_common(1)`` returns). ``pos`` are the
    positions of the repeating candidates, ``first``/``counts`` per candidate n-gram."""
    top = counts.max()
    p = int(pos[first[counts == top].min()])
    return (cum[p + n] - cum[p] + n - 1) * int(top)


def _dup(cum: list[int], pos: list[int], gram: list[int], n: int) -> int:
    """Characters of the words in n-grams repeating an earlier n-gram, scanning left to right and skipping
    each repeat's n positions. ``pos``/``gram``: the positions (ascending) of repeating n-grams and their
    ids; every other position holds a unique n-gram, which cannot matter."""
    seen: set[int] = set()
    i = chars = 0
    for p, g in zip(pos, gram):
        if p < i:
            continue
        if g in seen:
            chars += cum[p + n] - cum[p]
            i = p + n
        else:
            seen.add(g)
            i = p + 1
    return chars


def ngram_chars(toks: list[str], top: tuple[int, ...], dup: tuple[int, ...]) -> Iterator[tuple[str, int, int]]:
    """(TOP, n, top_ngram_chars(toks, n)) for each n in ``top`` and (DUP, n, dup_ngram_chars(toks, n)) for
    each n in ``dup``, in increasing n (TOP before DUP for the same n), each as soon as it is known."""
    ids, total, cum = _ids(toks)
    pos = np.flatnonzero(np.bincount(ids, minlength=1)[ids] >= 2)  # positions of repeating 1-grams
    gram = ids[pos]
    for n in range(2, max((*top, *dup), default=1) + 1):
        t = d = 0  # an n longer than the text: no n-gram
        if n <= total:
            fits = int(pos.searchsorted(total - n, "right"))  # pos ascending: those with room for n words
            pos, gram = pos[:fits], gram[:fits]
            t = cum[n] + n - 1  # unless an n-gram repeats: the first n-gram, once
        if n <= total and len(pos):
            first, gram, counts = _group(gram * total + ids[pos + n - 1])  # < total ** 2: no overflow
            if n in top and counts.max() >= 2:
                t = _top(cum, pos, first, counts, n)
            repeating = counts[gram] >= 2
            pos, gram = pos[repeating], gram[repeating]
            d = _dup(cum, pos.tolist(), gram.tolist(), n) if n in dup and len(pos) else 0
        if n in top:
            yield TOP, n, t
        if n in dup:
            yield DUP, n, d
