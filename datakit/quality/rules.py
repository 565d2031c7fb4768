"""Thresholds over measures: which rule a document fails first, in the chain's order.

A rule is (name, measure, comparison, the config field holding its threshold). A threshold of None
switches that rule off. Keeping rules apart from measures is what lets a stored measure be
re-thresholded later without recomputing anything: ``first_failure(measures, config)``.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable, Iterator


@dataclass(frozen=True)
class Rule:
    name: str          # what removed/ and the counters say: "gopher_quality.min_stop_words"
    measure: str       # the attribute column it reads
    fails: Callable[[float, float], bool]
    threshold: str     # the config field holding the threshold (None there: the rule is off)


_LT, _GT = operator.lt, operator.gt


def _rules(group: str, spec: list[tuple]) -> tuple[Rule, ...]:
    """Rules named ``group.field`` (or ``group.<4th item>`` when two rules share one threshold field)."""
    return tuple(Rule(f"{group}.{s[3] if len(s) > 3 else s[0]}", s[1], s[2], s[0]) for s in spec)


GOPHER_REPETITION = _rules("gopher_repetition", [
    ("dup_para_frac", "rep_dup_para_frac", _GT),
    ("dup_para_char_frac", "rep_dup_para_char_frac", _GT),
    ("dup_line_frac", "rep_dup_line_frac", _GT),
    ("dup_line_char_frac", "rep_dup_line_char_frac", _GT),
    *[(f"top_{n}_gram_frac", f"rep_top_{n}_gram", _GT) for n in (2, 3, 4)],
    *[(f"dup_{n}_gram_frac", f"rep_dup_{n}_gram", _GT) for n in range(5, 11)],
])
# The repetition rules that need no words (paragraphs, lines), and the word n-gram ones after them.
GOPHER_REPETITION_LINES, GOPHER_REPETITION_NGRAMS = GOPHER_REPETITION[:4], GOPHER_REPETITION[4:]
GOPHER_QUALITY = _rules("gopher_quality", [
    ("min_doc_words", "gopher_words", _LT),
    ("max_doc_words", "gopher_words", _GT),
    ("min_avg_word_length", "gopher_avg_word_length", _LT),
    ("max_avg_word_length", "gopher_avg_word_length", _GT),
    ("max_symbol_word_ratio", "gopher_hash_ratio", _GT),
    ("max_symbol_word_ratio", "gopher_ellipsis_ratio", _GT, "max_ellipsis_word_ratio"),
    ("max_bullet_lines_ratio", "gopher_bullet_lines", _GT),
    ("max_ellipsis_lines_ratio", "gopher_ellipsis_lines", _GT),
    ("min_alpha_words_ratio", "gopher_alpha_words", _LT),
    ("min_stop_words", "gopher_stop_words", _LT),
])
FINEWEB = _rules("fineweb", [
    ("min_line_punct_ratio", "fineweb_line_punct_ratio", _LT),
    ("max_short_line_ratio", "fineweb_short_line_ratio", _GT),
    ("max_char_dup_ratio", "fineweb_char_dup_ratio", _GT),
    ("max_list_ratio", "fineweb_list_ratio", _GT),
])


def first_failure(rules: tuple[Rule, ...], measures: dict[str, float], config: Any) -> tuple[Rule, float] | None:
    """The first rule (in order) whose measure crosses its threshold, with the measured value."""
    for rule in rules:
        threshold = getattr(config, rule.threshold)
        if threshold is None:
            continue
        value = measures[rule.measure]
        if rule.fails(value, threshold):
            if rule.threshold == "min_line_punct_ratio" and value == 0 and getattr(config, "line_punct_exclude_zero"):
                continue
            return rule, value
    return None


class Pulled(dict):
    """Measures computed when first read: reading one draws (measure, value) pairs from ``pairs`` (an
    iterator computing each when drawn) until it comes, keeping every pair drawn. `first_failure` over it
    computes the measures up to the first rule that fails and no further; `rest` computes the others
    (a kept document carries them all)."""

    def __init__(self, pairs: Iterator[tuple[str, float]]):
        super().__init__()
        self._pairs = pairs

    def __missing__(self, measure: str) -> float:
        for name, value in self._pairs:
            self[name] = value
            if name == measure:
                return value
        raise KeyError(measure)

    def rest(self) -> "Pulled":
        self.update(self._pairs)
        return self
