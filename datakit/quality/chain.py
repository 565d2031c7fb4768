"""One document through the quality chain, in the FineWeb recipe's order: URL filter -> language ID ->
Gopher repetition -> Gopher quality -> C4 (line cleaning + document rules) -> FineWeb.

The rules after language ID run with the settings of the document's language (language ID's label, or
the rules' ``language`` when language ID is off or finds no letters): its word splitting, stop words and
thresholds (`datakit.quality.language_rules`); a group without settings for that language is skipped and
named in the outcome's ``skipped`` (the stage counts ``skipped/<group>/<language>``).

`Chain(rules).run(doc)` returns an `Outcome`: the (C4-cleaned) text, every measure computed, and the
first rule that failed with its measured value. Unless ``annotate_only``, the chain stops at the first
failure (the later measures of a removed document are never needed: removed/ records the rule and the
value that removed it, and a kept document has passed, and so has measures for, every rule). With
``annotate_only`` every measure is computed and the text is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import c4, fineweb, gopher, langid
from .config import QualityRules
from .language_rules import LanguageSettings, settings_for
from .rules import (FINEWEB, GOPHER_QUALITY, GOPHER_REPETITION_LINES, GOPHER_REPETITION_NGRAMS, Pulled, Rule,
                    first_failure)
from .urls import UrlLists

# Attribute columns the quality stage adds to every document (None where a measure was not computed).
LANG_COLUMNS = ("lang", "lang_score")
MEASURE_COLUMNS = (
    "gopher_words", "gopher_avg_word_length", "gopher_hash_ratio", "gopher_ellipsis_ratio",
    "gopher_bullet_lines", "gopher_ellipsis_lines", "gopher_alpha_words", "gopher_stop_words",
    "rep_dup_para_frac", "rep_dup_para_char_frac", "rep_dup_line_frac", "rep_dup_line_char_frac",
    *[f"rep_top_{n}_gram" for n in gopher.TOP_NGRAMS], *[f"rep_dup_{n}_gram" for n in gopher.DUP_NGRAMS],
    "c4_lines_removed", "c4_sentences", "c4_lorem_ipsum", "c4_curly_bracket", "c4_bad_words",
    "fineweb_line_punct_ratio", "fineweb_short_line_ratio", "fineweb_char_dup_ratio", "fineweb_list_ratio",
)


@dataclass
class Failure:
    rule: str            # e.g. "gopher_quality.min_stop_words"
    value: float | None  # the measured value (None for list rules: url)
    detail: str


@dataclass
class Outcome:
    text: str
    measures: dict[str, Any] = field(default_factory=dict)
    failure: Failure | None = None
    line_drops: dict[str, int] = field(default_factory=dict)
    settings: LanguageSettings | None = None  # the document language's rules (None: removed before them)
    detected: tuple[str, float] | None = None  # its language ID when found with other documents' (run())

    @property
    def skipped(self) -> tuple[str, ...]:
        """The rule groups skipped for this document's language."""
        return self.settings.skipped if self.settings is not None else ()


def _failure(rule: Rule, value: float, config: Any) -> Failure:
    return Failure(rule.name, value, f"{rule.measure} = {value:.6g}, threshold {getattr(config, rule.threshold)}")


class Chain:
    """The rules of one source, with its lists loaded once (per task)."""

    def __init__(self, rules: QualityRules):
        self.rules = rules
        self.urls = UrlLists.of(rules.url) if rules.url.enabled else None
        self._bad_words = {(rules.c4.bad_words, rules.c4.bad_words_file): c4.bad_words(rules.c4)}
        self._languages: dict[str, LanguageSettings] = {}

    def run(self, doc: dict, detected: tuple[str, float] | None = None) -> Outcome:
        """The document through the rules. ``detected``: its language ID (`langid.detect` of its text),
        when the caller found it with others (`langid.detect_many`); else found here."""
        return self.run_checked(doc, self.url_failure(doc), detected)

    def run_checked(self, doc: dict, url: Failure | None, detected: tuple[str, float] | None = None) -> Outcome:
        """`run` given the URL rule's verdict (`url_failure`), which a caller that detects languages together
        found first, to ask language ID only for the documents that reach it (`reaches_langid`)."""
        r, out = self.rules, Outcome(doc["text"], detected=detected, failure=url)
        if url is None or r.annotate_only:
            for step in (self._langid, self._language, self._repetition, self._quality, self._c4, self._fineweb):
                failure = step(doc, out)
                if failure is not None and out.failure is None:
                    out.failure = failure
                    if not r.annotate_only:
                        break
        if r.annotate_only:
            out.text = doc["text"]
        return out

    def reaches_langid(self, url: Failure | None) -> bool:
        """Whether `run_checked` asks for the language of a document the URL rule judged so: language ID is
        on and the URL rule, which runs first, does not remove it (an annotate-only run goes through every
        rule). The stage detects a file's languages together and skips the others: their result would go
        unused."""
        return self.rules.langid.enabled and (url is None or self.rules.annotate_only)

    def url_failure(self, doc: dict) -> Failure | None:
        """The URL rule's verdict on the document (its lists' domain and URL lookups): the chain's first rule."""
        url = doc.get(self.rules.url.column) if self.urls is not None else None
        if not isinstance(url, str) or not url:
            return None
        verdict = self.urls.verdict(url)
        return Failure(f"url.{verdict}", None, url) if verdict else None

    def _langid(self, doc: dict, out: Outcome) -> Failure | None:
        cfg = self.rules.langid
        if not cfg.enabled:
            return None
        lang, score = out.detected if out.detected is not None else langid.detect(out.text, cfg.max_chars)
        out.measures.update(lang=lang, lang_score=score)
        if cfg.languages and lang not in cfg.languages:
            return Failure("langid.languages", score, f"lang = {lang} (score {score:.4f}), allowed {list(cfg.languages)}")
        least = cfg.threshold(lang)
        if least is not None and score < least:
            return Failure("langid.min_score", score, f"lang = {lang}, score {score:.4f} < {least}")
        return None

    def _language(self, doc: dict, out: Outcome) -> None:
        """The settings of the document's language, resolved once per language and chain."""
        code = out.measures.get("lang") or self.rules.language
        settings = self._languages.get(code)
        if settings is None:
            settings = self._languages[code] = settings_for(self.rules, code)
        out.settings = settings
        return None

    def _repetition(self, doc: dict, out: Outcome) -> Failure | None:
        cfg = out.settings.configs.get("gopher_repetition")
        if cfg is None:
            return None
        m = gopher.line_repetition_measures(out.text)
        out.measures.update(m)
        hit = first_failure(GOPHER_REPETITION_LINES, m, cfg)
        if hit is None or self.rules.annotate_only:  # a removed document's later measures are never needed
            grams = Pulled(gopher.ngram_repetition(out.text, split=out.settings.split))  # n by n, as the rules read
            hit = hit or first_failure(GOPHER_REPETITION_NGRAMS, grams, cfg)
            out.measures.update(grams if hit and not self.rules.annotate_only else grams.rest())
        return _failure(*hit, cfg) if hit else None

    def _quality(self, doc: dict, out: Outcome) -> Failure | None:
        cfg = out.settings.configs.get("gopher_quality")
        if cfg is None:
            return None
        m = gopher.quality_measures(out.text, out.settings.stop_words, out.settings.split)
        out.measures.update(m)
        hit = first_failure(GOPHER_QUALITY, m, cfg)
        return _failure(*hit, cfg) if hit else None

    def _c4(self, doc: dict, out: Outcome) -> Failure | None:
        cfg = out.settings.configs.get("c4")
        if cfg is None:
            return None
        key = (cfg.bad_words, cfg.bad_words_file)  # a language's own list is read once, like the source's
        if key not in self._bad_words:
            self._bad_words[key] = c4.bad_words(cfg)
        text, m, rule, drops = c4.clean(out.text, cfg, self._bad_words[key])
        out.measures.update(m)
        out.line_drops = drops
        out.text = text
        if rule is not None:
            return Failure(f"c4.{rule[3:]}", m[_C4_MEASURE[rule]], f"{_C4_MEASURE[rule]} = {m[_C4_MEASURE[rule]]:g}")
        if not text:
            return Failure("c4.empty", 0.0, "every line was removed by the line rules")
        return None

    def _fineweb(self, doc: dict, out: Outcome) -> Failure | None:
        cfg = out.settings.configs.get("fineweb")
        if cfg is None:
            return None
        m = fineweb.measures(out.text, cfg.short_line_length, out.settings.split)
        out.measures.update(m)
        hit = first_failure(FINEWEB, m, cfg)
        return _failure(*hit, cfg) if hit else None


_C4_MEASURE = {"c4_lorem_ipsum": "c4_lorem_ipsum", "c4_curly_bracket": "c4_curly_bracket",
               "c4_min_sentences": "c4_sentences", "c4_bad_words": "c4_bad_words"}
