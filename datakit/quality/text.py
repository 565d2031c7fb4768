"""Word and line splitting shared by the heuristic rules.

Words are spaCy's English tokens, the tokenizer datatrove (and so FineWeb) counts words with: the text is
split at whitespace, then each piece loses its prefixes and suffixes one at a time (punctuation, quotes,
brackets, "'s", a sentence's final period), keeps a URL or an e-mail address whole, and is split at
infixes (a hyphen between letters, "/" or ":" between letters, "..." ...), with spaCy's special cases
("e.g.", "Dr.", "don't" -> "do" + "n't", emoticons) taking precedence. The rules themselves are spaCy's
own expressions and special cases (`_en_tokenizer_rules`, generated from ``spacy.blank("en")``), run here
in plain Python: a plain word (alphanumeric, no special case) skips them, and every other piece is
tokenized once per process and then looked up. So a word-count measure (Gopher's word count, mean word
length and alphabetic-word share, its n-gram repetition shares, FineWeb's newlines per word) is measured
on the same words as the published FineWeb pipeline measured it.

*Content words* are the tokens holding a character other than punctuation (datatrove's set below): the
Gopher paper's "words", without symbol tokens.

Other languages are split by their script (`datakit.quality.languages` says which way each language is):

- ``spaces`` (languages written with spaces between words: Latin, Cyrillic, Greek, Arabic, Hebrew, Indic,
  Hangul...): the text is split at whitespace, and each piece loses its leading and trailing punctuation
  and symbols (Unicode categories P* and S*, but not the hyphen "-"), one token per character (a run of
  periods is one token); what is left is one word, inner apostrophes and hyphens included ("l'homme",
  "e-mail", "--help"). Combining marks stay inside their word (a Devanagari vowel sign is no word
  boundary).
- ``chars`` (scripts written without spaces: Chinese, Japanese kana and kanji, Thai, Lao, Khmer,
  Myanmar): every character of those scripts is one token (with the combining marks after it); runs of
  other characters in the same piece (Latin words, numbers) are split as ``spaces`` splits them. This is
  by character, not a dictionary segmenter: word counts are character counts, so a language split this
  way has no average-word-length rule, and its n-gram rules count characters.
- ``spacy_en``: spaCy's English rules above (English only, so English measures are exactly datatrove's).
"""

from __future__ import annotations

import re
import unicodedata
from itertools import chain
from typing import Callable

from . import _en_tokenizer_rules as _R

# datatrove's terminal punctuation (datatrove.utils.text.TERMINAL_PUNCTUATION: what FineWeb's line rule
# counts as a line end) and punctuation set (its PUNCTUATION plus the terminal marks), which decides what
# a symbol token is.
TERMINAL_PUNCTUATION = frozenset(
    '!.?\u0589\u061d\u061e\u061f\u06d4\u0700\u0701\u0702\u07f9\u0837\u0839\u083d\u083e\u0964\u0965\u104a'
    '\u104b\u1362\u1367\u1368\u166e\u1735\u1736\u17d4\u17d5\u17d6\u17d9\u17da\u1803\u1809\u1944\u1945'
    '\u1aa8\u1aa9\u1aaa\u1aab\u1b5a\u1b5b\u1b5e\u1b5f\u1b7d\u1b7e\u1c3b\u1c3c\u1c7e\u1c7f\u203c\u203d'
    '\u2047\u2048\u2049\u2e2e\u2e3c\u2e53\u2e54\u3002\ua4ff\ua60e\ua60f\ua6f3\ua6f7\ua876\ua877\ua8ce'
    '\ua8cf\ua92f\ua9c8\ua9c9\uaa5d\uaa5e\uaa5f\uaaf0\uaaf1\uabeb\ufe52\ufe56\ufe57\uff01\uff0e\uff1f'
    '\uff61\U00010a56\U00010a57\U00010f55\U00010f56\U00010f57\U00010f58\U00010f59\U00010f86\U00010f87'
    '\U00010f88\U00010f89\U00011047\U00011048\U000110be\U000110bf\U000110c0\U000110c1\U00011141\U00011142'
    '\U00011143\U000111c5\U000111c6\U000111cd\U000111de\U000111df\U00011238\U00011239\U0001123b\U0001123c'
    '\U000112a9\U0001144b\U0001144c\U000115c2\U000115c3\U000115c9\U000115ca\U000115cb\U000115cc\U000115cd'
    '\U000115ce\U000115cf\U000115d0\U000115d1\U000115d2\U000115d3\U000115d4\U000115d5\U000115d6\U000115d7'
    '\U00011641\U00011642\U0001173c\U0001173d\U0001173e\U00011944\U00011946\U00011a42\U00011a43\U00011a9b'
    '\U00011a9c\U00011c41\U00011c42\U00011ef7\U00011ef8\U00011f43\U00011f44\U00016a6e\U00016a6f\U00016af5'
    '\U00016b37\U00016b38\U00016b44\U00016e98\U0001bc9f\U0001da88'
)
PUNCTUATION = frozenset(
    "!/—”:％１〈&(、━\\【#%「」，】；+^]~“《„';’{|∶´[=-`*．（–？！：$～«〉,><》)?）。…@_.\"}►»"
    + "".join(chr(x) for a, b in ((0, 9), (11, 13), (13, 32), (127, 160)) for x in range(a, b))
) | TERMINAL_PUNCTUATION

_PREFIX = re.compile(_R.PREFIX).search
# Every prefix rule is anchored at the start: a piece starting with a character no rule starts with has
# no prefix (most pieces start with a letter): skip the regex.
_PREFIX_FIRST = frozenset(chr(c) for a, b in _R.PREFIX_FIRST for c in range(a, b + 1))
_INFIX_AT = re.compile(_R.INFIX).match
_URL = re.compile(_R.URL).match
_SPECIAL: dict[str, tuple[str, ...]] = _R.SPECIAL
# Special cases made of characters the affix/infix rules split (emoticons, "''"): spaCy matches them
# again over the split tokens and merges them back.
_MERGE = {k: v for k, v in _SPECIAL.items() if not k.isalnum() and not k.isspace()}
_MERGE_PREFIXES = frozenset(k[:i] for k in _MERGE for i in range(1, len(k) + 1))
_SUFFIX_WINDOW = 6


def _suffix_searches() -> dict[str, Callable]:
    """Last character -> the search of the suffix rules that can end with it. Every rule ends at the
    piece's end, so no other rule can match there: one or a few short rules are searched instead of the
    whole (12k-character) expression, with the same leftmost match (the rules' order is kept, and which
    rule matches does not matter: all end at the end). A character no rule ends with is no key."""
    out: dict[str, Callable] = {}
    for rules, ranges in _R.SUFFIX_BY_LAST:
        search = re.compile("|".join(_R.SUFFIX_RULES[i] for i in rules)).search
        out.update((chr(c), search) for a, b in ranges for c in range(a, b + 1))
    return out


_SUFFIX_OF = _suffix_searches()
# A piece ending with a letter or digit has a suffix only as "'s" (or "’s", "'S", "’S") or as a unit of at
# most _UNIT_MAX characters after an ASCII digit ("5km"): every other suffix rule ends with a mark.
_UNIT_MAX = 5
_APOSTROPHES = ("'", "’")
_ASCII_DIGIT = re.compile("[0-9]").search
# The characters an infix match can start with: only their positions are tried (`_split_infixes`).
_INFIX_START = re.compile("[" + "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in _R.INFIX_FIRST) + "]").search
_CACHE_MAX = 500_000  # pieces kept per way of splitting
_last: tuple[str | None, str, list[str]] = (None, "", [])

WORD_SPLITS = ("spacy_en", "spaces", "chars")
# Scripts written without spaces between words (split by character), and the combining marks that stay
# with the character before them (Thai/Lao vowel and tone marks, Myanmar and Khmer signs, kana voicing).
_DENSE = ("\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf"
          "\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f")
_MARKS = ("\u0300-\u036f\u0e31\u0e34-\u0e3a\u0e47-\u0e4e\u0eb1\u0eb4-\u0ebc\u0ec8-\u0ecd\u102b-\u103e"
          "\u17b6-\u17d3\u3099\u309a")
_DENSE_CHAR = re.compile(f"([{_DENSE}][{_MARKS}]*)")
_HAS_DENSE = re.compile(f"[{_DENSE}]").search


def _no_suffix(s: str) -> bool:
    """Whether no suffix rule can match at the end of ``s``, told from its last characters alone: no rule
    ends with its last character, or that is a letter or digit after neither an apostrophe ("'s") nor,
    within _UNIT_MAX characters, an ASCII digit ("5km")."""
    if not s or s[-1] not in _SUFFIX_OF:
        return True
    end = len(s) - 1
    return s[-1].isalnum() and s[-2:-1] not in _APOSTROPHES and not _ASCII_DIGIT(s, end - _UNIT_MAX, end)


def _suffix_len(s: str) -> int:
    """spaCy's find_suffix, searching only the last _SUFFIX_WINDOW positions: every suffix rule but a run
    of periods is at most that long, and a run of periods reaching back past the window also matches at
    its start, so a match found after the window's start (or none) is the whole piece's leftmost one; a
    match at the window's start is searched again on the whole piece."""
    if _no_suffix(s):
        return 0
    search = _SUFFIX_OF[s[-1]]
    w = len(s) - _SUFFIX_WINDOW
    if w > 0:
        m = search(s, w)
        if m is None or m.start() > w:
            return m.end() - m.start() if m else 0
    m = search(s)
    return m.end() - m.start() if m else 0


def _split_affixes(s: str, prefixes: list[str], suffixes: list[str]) -> str:
    """spaCy's Tokenizer._split_affixes: prefixes and suffixes off, one of each per round."""
    last = -1
    while s and len(s) != last:
        if s in _SPECIAL:
            break
        last = len(s)
        m = _PREFIX(s) if s[0] in _PREFIX_FIRST else None
        pre = m.end() - m.start() if m else 0
        if pre:
            minus_pre = s[pre:]
            if minus_pre and minus_pre in _SPECIAL:
                prefixes.append(s[:pre])
                s = minus_pre
                break
        suf = _suffix_len(s[pre:])
        if suf:
            minus_suf = s[:-suf]
            if minus_suf and minus_suf in _SPECIAL:
                suffixes.append(s[-suf:])
                s = minus_suf
                break
        if pre and suf and pre + suf <= len(s):
            prefixes.append(s[:pre])
            suffixes.append(s[-suf:])
            s = s[pre:-suf]
        elif pre:
            prefixes.append(s[:pre])
            s = s[pre:]
        elif suf:
            suffixes.append(s[-suf:])
            s = s[:-suf]
        if s and s in _SPECIAL:
            break
    return s


def _piece(c: str) -> tuple[str, ...]:
    """The tokens of one whitespace-free piece (spaCy's _split_affixes + _attach_tokens + special-case
    merging)."""
    special = _SPECIAL.get(c)
    if special is not None:
        return special
    prefixes: list[str] = []
    suffixes: list[str] = []
    s = _split_affixes(c, prefixes, suffixes)
    out = prefixes
    if s:
        special = _SPECIAL.get(s)
        if special is not None:
            out.extend(special)
        elif s.isalnum() or _URL(s):  # no infix rule matches letters and digits alone (tested on all of them)
            out.append(s)
        else:
            _split_infixes(s, out)
    out.extend(reversed(suffixes))
    _merge_specials(out)
    return tuple(out)


def _split_infixes(s: str, out: list[str]) -> None:
    """Append ``s`` cut at its infix matches (hyphens between letters, ...): the pieces between them and
    each match; a match at the very start does not cut. The matches are a left-to-right scan's (what
    ``finditer`` gives), trying only the positions holding a character a match can start with (every
    infix rule consumes at least one character, the first from INFIX_FIRST)."""
    scan = cut = 0
    while (start := _INFIX_START(s, scan)) is not None:
        a = start.start()
        m = _INFIX_AT(s, a)
        if m is None:
            scan = a + 1
            continue
        scan = b = m.end()
        if a == 0:
            continue
        if a != cut:
            out.append(s[cut:a])
        out.append(s[a:b])
        cut = b
    if s[cut:]:
        out.append(s[cut:])


def _merge_specials(out: list[str]) -> None:
    """Replace the longest run of tokens starting at each position whose concatenation is a special case,
    left to right (a run grows only while it is a prefix of some special case). A run can only start
    with a token that is itself such a prefix: most pieces have none, and are left as they are."""
    if _MERGE_PREFIXES.isdisjoint(out):
        return
    i = 0
    while i < len(out) - 1:
        run, best, merged = out[i], 0, None
        for j in range(i + 1, len(out)):
            run += out[j]
            if run not in _MERGE_PREFIXES:
                break
            hit = _MERGE.get(run)
            if hit is not None:
                best, merged = j + 1, hit
        if merged is not None:
            out[i:best] = merged
        i += 1


def _is_symbol(c: str) -> bool:
    return c != "-" and unicodedata.category(c)[0] in "PS"


def _edge_tokens(edge: str) -> list[str]:
    """Peeled punctuation as tokens: one per character, but a run of periods is one token ("...")."""
    out: list[str] = []
    for c in edge:
        if c == "." and out and out[-1][-1] == ".":
            out[-1] += c
        else:
            out.append(c)
    return out


def _peel(c: str) -> tuple[str, ...]:
    """``spaces`` splitting of one whitespace-free piece: leading and trailing punctuation and symbols off
    (a run of periods is one token, the others one token per character); the rest is one word. A hyphen
    stays with its word, as spaCy keeps it ("-v", "--help", "e-"), so options and compounds are words."""
    i, j = 0, len(c)
    while i < j and _is_symbol(c[i]):
        i += 1
    while j > i and _is_symbol(c[j - 1]):
        j -= 1
    if i == j:
        return tuple(_edge_tokens(c))
    return (*_edge_tokens(c[:i]), c[i:j], *_edge_tokens(c[j:]))


def _by_char(c: str) -> tuple[str, ...]:
    """``chars`` splitting of one piece: each character of a script written without spaces is a token;
    the runs between them are split as ``spaces`` splits them."""
    if not _HAS_DENSE(c):
        return _peel(c)
    out: list[str] = []
    for i, part in enumerate(_DENSE_CHAR.split(c)):
        if i % 2:
            out.append(part)
        elif part:
            out.extend(_peel(part))
    return tuple(out)


def _plain_en(c: str) -> bool:
    return c not in _SPECIAL


def _plain_spaces(c: str) -> bool:
    return True


def _plain_chars(c: str) -> bool:
    return not _HAS_DENSE(c)


# Per way of splitting: how a piece is split, and which alphanumeric pieces are one word as they are.
_SPLIT_PIECE = {"spacy_en": _piece, "spaces": _peel, "chars": _by_char}
_PLAIN = {"spacy_en": _plain_en, "spaces": _plain_spaces, "chars": _plain_chars}


class _Pieces(dict):
    """Whitespace piece -> its tokens, for one way of splitting, filled the first time a piece is seen (a
    plain word is its own one token; any other piece is split by ``split_piece``). `tokens` looks every
    piece up from C (``map`` over ``__getitem__``): only a piece not kept yet runs Python. Emptied when it
    holds _CACHE_MAX pieces, so its memory stays bounded."""

    def __init__(self, split_piece: Callable[[str], tuple[str, ...]], plain: Callable[[str], bool]):
        super().__init__()
        self.split_piece, self.plain = split_piece, plain

    def __missing__(self, c: str) -> tuple[str, ...]:
        hit = (c,) if c.isalnum() and self.plain(c) else self.split_piece(c)
        if len(self) >= _CACHE_MAX:
            self.clear()
        self[c] = hit
        return hit


_CACHES = {split: _Pieces(_SPLIT_PIECE[split], _PLAIN[split]) for split in WORD_SPLITS}


def tokens(text: str, split: str = "spacy_en") -> list[str]:
    """Every token (content words and symbols), in order, split the ``split`` way (see the module
    docstring). The last text's tokens are kept, so the rules that measure the same text tokenize it once."""
    global _last
    if text is _last[0] and split == _last[1]:
        return _last[2]
    out = list(chain.from_iterable(map(_CACHES[split].__getitem__, text.split())))
    _last = (text, split, out)
    return out


def split_tokens(text: str, split: str = "spacy_en") -> tuple[list[str], list[str]]:
    """(all tokens, content words)."""
    toks = tokens(text, split)
    return toks, [t for t in toks if not PUNCTUATION.issuperset(t)]


def nonblank_lines(text: str) -> list[str]:
    """Lines with something other than whitespace on them."""
    return [line for line in text.split("\n") if line.strip()]
