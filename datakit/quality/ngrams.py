"""Gopher's word n-gram repetition measures over integer token ids, for every n at once.

The plain definitions (`gopher.top_ngram_chars`, `gopher.dup_ngram_chars`) build a tuple of strings per
position and n: nine passes of Python work per token, three quarters of the repetition rule's time.

Here every token gets an id once and each n-gram an exact id: the (n-1)-gram's id paired with the next
token's, compacted by ``np.unique`` (no hashing, so no collisions). Only *repeating* n-grams are carried
from one n to the next: a position whose n-gram occurs once also has a unique (n+1)-gram, so it can never
be counted as a repeat nor change which n-gram is most frequent (unless none repeats: then the first
position's, with count 1). In prose the repeating positions thin out fast (most 5-grams occur once), so
the work per n shrinks with n.

The duplicate scan is sequential by definition (a repeat skips its own n positions, which are then never
"seen"), so it stays a Python loop, over the repeating positions only: a unique n-gram, seen or skipped,
can never match a later position. The results equal the plain definitions exactly (integers;
`tests/test_quality_rules.py` checks both on real and random token lists). `gopher.repetition_measures`
keeps the plain definitions for token lists shorter than `SMALL`, where numpy's per-call cost is larger
than their Python loops.
"""

from __future__ import annotations

import numpy as np

SMALL = 64  # shorter token lists: the plain definitions are faster


def _ids(toks: list[str]) -> tuple[np.ndarray, int]:
    """Each token's id: the position of its first occurrence (one C-level pass, no Python loop), and a
    bound on the ids (the token count)."""
    first: dict[str, int] = {}
    ids = np.fromiter(map(first.setdefault, toks, range(len(toks))), np.int64, len(toks))
    return ids, len(toks)


def _chars(toks: list[str], p: int, n: int) -> int:
    """Characters of the n words starting at position p (no separators)."""
    return sum(map(len, toks[p:p + n]))


def _top(toks: list[str], pos: np.ndarray, first: np.ndarray, counts: np.ndarray, n: int) -> int:
    """Characters of the most frequent n-gram (words joined by one space) times its count; among equally
    frequent n-grams the one seen first (what ``Counter.most_common(1)`` returns). ``pos`` are the
    positions of the repeating candidates, ``first``/``counts`` per candidate n-gram."""
    if len(counts) == 0 or counts.max() < 2:  # nothing repeats: the first n-gram, once
        return _chars(toks, 0, n) + n - 1
    top = counts.max()
    pick = int(pos[first[counts == top].min()])
    return (_chars(toks, pick, n) + n - 1) * int(top)


def _dup(toks: list[str], pos: list[int], gram: list[int], n: int) -> int:
    """Characters of the words in n-grams repeating an earlier n-gram, scanning left to right and skipping
    each repeat's n positions. ``pos``/``gram``: the positions (ascending) of repeating n-grams and their
    ids; every other position holds a unique n-gram, which cannot matter."""
    seen: set[int] = set()
    i = chars = 0
    for p, g in zip(pos, gram):
        if p < i:
            continue
        if g in seen:
            chars += _chars(toks, p, n)
            i = p + n
        else:
            seen.add(g)
            i = p + 1
    return chars


def ngram_chars(toks: list[str], top: tuple[int, ...], dup: tuple[int, ...]) -> tuple[dict[int, int], dict[int, int]]:
    """({n: top_ngram_chars(toks, n)}, {n: dup_ngram_chars(toks, n)}) for the given n."""
    ids, bound = _ids(toks)
    total = len(ids)
    tops = {n: 0 for n in top if n > total}
    dups = {n: 0 for n in dup if n > total}
    pos = np.flatnonzero(np.bincount(ids)[ids] >= 2)  # positions of repeating 1-grams
    gram = ids[pos]
    for n in range(2, min(max((*top, *dup), default=1), total) + 1):
        fits = pos <= total - n
        pos, gram = pos[fits], gram[fits]
        key = gram * bound + ids[pos + n - 1]  # < total ** 2: no overflow
        _, first, gram, counts = np.unique(key, return_index=True, return_inverse=True, return_counts=True)
        if n in top:
            tops[n] = _top(toks, pos, first, counts, n)
        repeating = counts[gram] >= 2
        pos, gram = pos[repeating], gram[repeating]
        if n in dup:
            dups[n] = _dup(toks, pos.tolist(), gram.tolist(), n) if len(pos) else 0
    return tops, dups
