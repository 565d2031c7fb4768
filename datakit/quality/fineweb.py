"""FineWeb's three custom rules (Penedo et al. 2024, section 3.3.4), as measures of one text.

    fineweb_line_punct_ratio   share of non-blank lines ending in terminal punctuation
    fineweb_short_line_ratio   share of non-blank lines of at most ``short_line_length`` characters
    fineweb_char_dup_ratio     characters in non-blank lines that repeat an earlier line, per character
                               of the text without newlines
    fineweb_list_ratio         newlines per word (lists and menus have many short lines; words split the
                               way of the document's language, `datakit.quality.text`)

The rules (datakit.quality.rules) drop a document when the first is below 0.12, the second above
0.67, the third above 0.01 or the fourth above 0.3. Terminal punctuation is the reference
implementation's set (datatrove's TERMINAL_PUNCTUATION, with which FineWeb was built): the sentence-ending
marks of many scripts, but not an ellipsis ('…') nor a closing quote.
"""

from __future__ import annotations

from .text import TERMINAL_PUNCTUATION, nonblank_lines, tokens

TERMINAL = tuple(sorted(TERMINAL_PUNCTUATION))


def measures(text: str, short_line_length: int = 30, split: str = "spacy_en") -> dict[str, float]:
    """The FineWeb measures of ``text`` (an empty text measures 0 everywhere; its line rules then fire)."""
    lines = nonblank_lines(text)
    if not lines:
        return {"fineweb_line_punct_ratio": 0.0, "fineweb_short_line_ratio": 1.0, "fineweb_char_dup_ratio": 0.0,
                "fineweb_list_ratio": 0.0}
    dup_chars = sum(map(len, lines)) - sum(map(len, set(lines)))  # every line less the first of each value
    n_chars = len(text.replace("\n", "")) or 1
    n_words = len(tokens(text, split)) or 1
    return {
        "fineweb_line_punct_ratio": sum(line.endswith(TERMINAL) for line in lines) / len(lines),
        "fineweb_short_line_ratio": sum(len(line) <= short_line_length for line in lines) / len(lines),
        "fineweb_char_dup_ratio": dup_chars / n_chars,
        "fineweb_list_ratio": text.count("\n") / n_words,
    }
