"""C4's cleaning (Raffel et al. 2020, section 2.2): line-level cleaning, then document rules.

Lines are kept only when they end in terminal punctuation (and not in an ellipsis), hold at least
``min_words_per_line`` words, have no word longer than ``max_word_length``, and mention neither
"javascript" nor a cookie/privacy-policy phrase; citation marks ("[1]", "[edit]", "[citation needed]")
are cut out first. The document is then dropped when a line says "lorem ipsum" or holds a '{' (a sign
of code), when fewer than ``min_sentences`` sentences survive (counted as spaCy's sentencizer counts
them, like datatrove), or when it holds a word of the user's bad-words list (nothing is downloaded: no
list, no rule). The order of the checks is that of C4's reference code (see `clean`).

`clean` takes the manifest's `quality.c4` section (`C4Config`) as it is, and the bad-words set that
`bad_words` reads from it once per task (the list may be a file), and returns the cleaned text, the
measures and the first document rule that fired.
"""

from __future__ import annotations

import re
import unicodedata

from ._en_tokenizer_rules import SENTENCE_PUNCT
from .config import C4Config
from .text import tokens
from .urls import read_list

TERMINAL = (".", "?", "!", '"', "'")
ELLIPSIS = "..."
POLICY_PHRASES = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies",
                  "use cookies")
_CITATION = re.compile(r"\[\d*\]|\[edit\]|\[citation needed\]")
_SENTENCE_PUNCT = frozenset(SENTENCE_PUNCT)
_WORD = re.compile(r"[\w']+")


def bad_words(cfg: C4Config) -> frozenset[str]:
    """The lowercased bad words of ``cfg``: its inline list and its file's (read here, so a caller reads
    the file once per task, not once per document)."""
    return frozenset(w.lower() for w in (*cfg.bad_words, *read_list(cfg.bad_words_file)))


def count_sentences(line: str) -> int:
    """Sentences in a line, as spaCy's sentencizer splits them (what datatrove counts): over the line's
    tokens (`datakit.quality.text`), a sentence ends at a token that is a sentence-ending mark ('.', '!',
    '?' and their counterparts in other scripts), and the next one starts at the first token after it that
    is not punctuation. So "e.g." or "Dr." (one token each) or "3.5" end nothing."""
    n, seen = 0, False
    for tok in tokens(line):
        if n == 0:
            n = 1
        if tok in _SENTENCE_PUNCT:
            seen = True
        elif seen and not _is_punct(tok):
            n += 1
            seen = False
    return n


def _is_punct(token: str) -> bool:
    """spaCy's is_punct: every character is Unicode punctuation (category P*)."""
    return all(unicodedata.category(c)[0] == "P" for c in token)


def clean(text: str, o: C4Config, bad: frozenset[str] = frozenset()
          ) -> tuple[str, dict[str, float], str | None, dict[str, int]]:
    """(cleaned text, measures, the document rule that fired or None, dropped lines by reason).

    Each line goes through the checks in the order of C4's reference code (TFDS c4_utils, which datatrove
    follows): a word over ``max_word_length`` (words counted before citations are cut), citations cut
    (the line is not stripped again, so "Done. [1]" no longer ends in punctuation), terminal punctuation,
    ``min_words_per_line``, "lorem ipsum" (document rule), "javascript" (line dropped), '{' (document
    rule: a javascript line holding one is already gone), policy phrases (line dropped).

    Measures: c4_lines_removed, c4_sentences (in the kept lines), c4_lorem_ipsum and c4_curly_bracket
    (1.0 when a line reaching that check has it), c4_bad_words (occurrences of the words in ``bad``, as
    `bad_words` gives them, in the kept text)."""
    kept: list[str] = []
    dropped: dict[str, int] = {}
    sentences = 0
    lorem = curly = 0.0
    for raw in text.splitlines():
        line = raw.strip()
        words = line.split()
        why = None
        if o.max_word_length is not None and any(len(w) > o.max_word_length for w in words):
            why = "long_word"
        else:
            if o.remove_citations:
                line = _CITATION.sub("", line)
            low = line.lower()
            if o.terminal_punct and (not line.endswith(TERMINAL) or line.endswith(ELLIPSIS)):
                why = "no_terminal_punct"
            elif o.min_words_per_line is not None and len(words) < o.min_words_per_line:
                why = "few_words"
            else:
                lorem = lorem or float("lorem ipsum" in low)
                if o.javascript and "javascript" in low:
                    why = "javascript"
                else:
                    curly = curly or float("{" in line)
                    if o.policy and any(p in low for p in POLICY_PHRASES):
                        why = "policy"
        if why is not None:
            dropped[why] = dropped.get(why, 0) + 1
            continue
        sentences += count_sentences(line)
        kept.append(line)
    out = "\n".join(kept).strip()
    hits = sum(1 for w in _WORD.findall(out.lower()) if w in bad) if bad else 0
    measures = {"c4_lines_removed": float(sum(dropped.values())), "c4_sentences": float(sentences),
                "c4_lorem_ipsum": lorem, "c4_curly_bracket": curly, "c4_bad_words": float(hits)}
    return out, measures, _doc_rule(measures, o), dropped


def _doc_rule(m: dict[str, float], o: C4Config) -> str | None:
    if o.lorem_ipsum and m["c4_lorem_ipsum"]:
        return "c4_lorem_ipsum"
    if o.curly_bracket and m["c4_curly_bracket"]:
        return "c4_curly_bracket"
    if o.min_sentences is not None and m["c4_sentences"] < o.min_sentences:
        return "c4_min_sentences"
    if m["c4_bad_words"] > 0:
        return "c4_bad_words"
    return None
