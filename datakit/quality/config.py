"""The `quality:` manifest section: the per-document filter chain run after normalize.

Every group and every rule can be switched off on its own: ``enabled: false`` for a group, a threshold
of ``null`` for one rule. Defaults are the published ones (Gopher: Rae et al. 2021; C4: Raffel et al.
2020; FineWeb: Penedo et al. 2024). ``sources:`` holds per-source overrides keyed by source name: an
override names only what differs, and everything it leaves out comes from the global settings.

The Gopher, C4 and FineWeb rules apply per language (`datakit.quality.language_rules`): a document gets
the rules of the language language ID gave it (``language`` when language ID is off or finds no
letters), with that language's word splitting, stop words and built-in thresholds
(`datakit.quality.languages`: FineWeb-2's where it gives them) in place of the defaults. What the
manifest sets wins over the built-in values: a key written in a group applies to every language, and
``languages: {<code>: {...}}`` sets keys for one language. A group without settings for a language is
skipped for its documents (counted ``skipped/<group>/<code>``), unless ``apply_to_unlisted: true`` (the
default thresholds, split at whitespace, the group's ``stop_words`` or else English's) or a
``languages:`` entry for that language names the group.

    quality:
      annotate_only: false          # true: keep every document, only write the measures
      langid: {languages: [en, de], min_score: {de: 0.5, default: 0.3}}
      warn_removed_share: 0.9       # warn when a source loses more than 90% here
      gopher_quality: {min_stop_words: 2}
      c4: {enabled: false}
      languages:
        pl: {gopher_quality: {min_stop_words: 1}}
        la: {gopher_quality: {stop_words: [et, in, est, non, ad, cum, ut, de]}}   # a language without a list
      sources:
        python-stdlib: {enabled: false}          # code: no prose rules at all
        licenses: {gopher_repetition: {enabled: false}, fineweb: {enabled: false}}
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from datakit.quality import languages as builtin
from datakit.quality.langcodes import DEFAULT, LID176_CODES, check_languages, check_per_language

_GIVEN = {"internal": "given", "identity": False}
_FRACTION = {"min": 0, "max": 1}
MIN_SCORE = 0.3  # langid's default minimum score (LangIdConfig says why)
# The keys a rule group's manifest entry wrote decide which built-in per-language values they replace, so
# they are part of the step's identity (writing a default value explicitly changes what other languages get).
_GIVEN_KEPT = {"internal": "given"}


def _given() -> Any:
    return field(default=frozenset(), compare=False, repr=False, metadata=_GIVEN)


def _given_kept() -> Any:
    return field(default=frozenset(), compare=False, repr=False, metadata=_GIVEN_KEPT)


def check_language(value: str) -> str | None:
    """The manifest check of one language code (``quality.language``)."""
    return check_languages((value,))


@dataclass(frozen=True)
class UrlConfig:
    """Block and allow lists of registered domains or URLs (inline, or files with one per line; '#'
    starts a comment). A URL whose registered domain (public suffix list bundled with tldextract) or
    exact URL is blocked is removed, unless the allow lists name it; with ``allow_only`` every URL not
    allowed is removed. Documents without a URL in their ``column`` are kept."""

    enabled: bool = True
    column: str = "url"
    block_domains: tuple[str, ...] = ()
    block_urls: tuple[str, ...] = ()
    allow_domains: tuple[str, ...] = ()
    allow_urls: tuple[str, ...] = ()
    block_file: str | None = field(default=None, metadata={"path": True})
    allow_file: str | None = field(default=None, metadata={"path": True})
    allow_only: bool = False
    given: frozenset = _given()


@dataclass(frozen=True)
class LangIdConfig:
    """fastText lid.176 (bundled) on the whole text: keep documents in ``languages`` (empty: any) whose
    label scores at least ``min_score``.

    ``min_score`` is one number for every language, or a mapping per language code with ``default``
    for the languages it does not name (without ``default``: MIN_SCORE). Each key is checked against
    lid.176's labels when the manifest loads. Why MIN_SCORE = 0.3 rather than FineWeb's 0.65 (English
    web pages): lid.176 scores a *correctly* labelled page lower the more markup, code and short lines
    it holds, and unevenly across languages. On this machine's man pages (roff, as `format: text` reads
    them; benchmarks/langid.py, whole text) 0.65 dropped 24% of the English pages it labelled right,
    32-39% of the Portuguese, Indonesian, Danish and Swedish ones, 5-9% of German, French, Spanish,
    Dutch and Russian; 0.3 drops 1.7% of English and 0-8% of every language with 50+ pages. What 0.3
    still removes is mostly a page mixing two languages (a half-translated page) or with next to no
    prose. One number for all: the per-language differences measured here come from a few hundred
    pages of one kind of text, too little to ship as a table (FineWeb-2 derived its per-language
    thresholds for GlotLID, not lid.176); give a mapping where a corpus needs one.

    ``max_chars``: predict on the first N characters only (None: the whole text, as datatrove's
    LanguageFilter does). On the same pages 2,000 characters gave the whole text's label on 88% of
    documents, 5,000 on 99.6%, 10,000 on 99.97%, at 4.5x, 2.3x and 1.7x the whole text's speed.
    """

    enabled: bool = True
    languages: tuple[str, ...] = field(default=("en",), metadata={"check": check_languages})
    min_score: float | dict[str, float] | None = field(default=MIN_SCORE, metadata={**_FRACTION,
                                                                                    "check": check_per_language})
    max_chars: int | None = field(default=None, metadata={"min": 1})
    given: frozenset = _given()

    def __hash__(self) -> int:  # min_score may be a dict: hash it as its items (a chain is cached per rules)
        scores = tuple(sorted(self.min_score.items())) if isinstance(self.min_score, dict) else self.min_score
        return hash((self.enabled, self.languages, scores, self.max_chars))

    def threshold(self, lang: str) -> float | None:
        """The minimum score for a document labelled ``lang`` (None: no minimum)."""
        if isinstance(self.min_score, dict):
            return self.min_score.get(lang, self.min_score.get(DEFAULT, MIN_SCORE))
        return self.min_score


@dataclass(frozen=True)
class GopherQualityConfig:
    enabled: bool = True
    min_doc_words: int | None = field(default=50, metadata={"min": 0})
    max_doc_words: int | None = field(default=100_000, metadata={"min": 0})
    min_avg_word_length: float | None = field(default=3.0, metadata={"min": 0})
    max_avg_word_length: float | None = field(default=10.0, metadata={"min": 0})
    max_symbol_word_ratio: float | None = field(default=0.1, metadata={"min": 0})
    max_bullet_lines_ratio: float | None = field(default=0.9, metadata=_FRACTION)
    max_ellipsis_lines_ratio: float | None = field(default=0.3, metadata=_FRACTION)
    min_alpha_words_ratio: float | None = field(default=0.8, metadata=_FRACTION)
    min_stop_words: int | None = field(default=2, metadata={"min": 0})
    stop_words: tuple[str, ...] | None = None  # None: the language's built-in list
    apply_to_unlisted: bool = False  # true: languages without settings get the defaults (not skipped)
    given: frozenset = _given_kept()


@dataclass(frozen=True)
class GopherRepetitionConfig:
    enabled: bool = True
    dup_line_frac: float | None = field(default=0.3, metadata=_FRACTION)
    dup_para_frac: float | None = field(default=0.3, metadata=_FRACTION)
    dup_line_char_frac: float | None = field(default=0.2, metadata=_FRACTION)
    dup_para_char_frac: float | None = field(default=0.2, metadata=_FRACTION)
    top_2_gram_frac: float | None = field(default=0.20, metadata=_FRACTION)
    top_3_gram_frac: float | None = field(default=0.18, metadata=_FRACTION)
    top_4_gram_frac: float | None = field(default=0.16, metadata=_FRACTION)
    dup_5_gram_frac: float | None = field(default=0.15, metadata=_FRACTION)
    dup_6_gram_frac: float | None = field(default=0.14, metadata=_FRACTION)
    dup_7_gram_frac: float | None = field(default=0.13, metadata=_FRACTION)
    dup_8_gram_frac: float | None = field(default=0.12, metadata=_FRACTION)
    dup_9_gram_frac: float | None = field(default=0.11, metadata=_FRACTION)
    dup_10_gram_frac: float | None = field(default=0.10, metadata=_FRACTION)
    apply_to_unlisted: bool = False  # true: languages without settings get the defaults (not skipped)
    given: frozenset = _given_kept()


@dataclass(frozen=True)
class C4Config:
    """C4's line cleaning and document rules (datakit.quality.c4). Bad words: only the user's list."""

    enabled: bool = True
    remove_citations: bool = True
    terminal_punct: bool = True
    min_words_per_line: int | None = field(default=3, metadata={"min": 0})
    max_word_length: int | None = field(default=1000, metadata={"min": 1})
    javascript: bool = True
    policy: bool = True
    lorem_ipsum: bool = True
    curly_bracket: bool = True
    min_sentences: int | None = field(default=5, metadata={"min": 0})
    bad_words: tuple[str, ...] = ()
    bad_words_file: str | None = field(default=None, metadata={"path": True})
    apply_to_unlisted: bool = False  # true: languages without settings get the defaults (not skipped)
    given: frozenset = _given_kept()


@dataclass(frozen=True)
class FineWebConfig:
    enabled: bool = True
    min_line_punct_ratio: float | None = field(default=0.12, metadata=_FRACTION)
    line_punct_exclude_zero: bool = False
    max_short_line_ratio: float | None = field(default=0.67, metadata=_FRACTION)
    short_line_length: int = field(default=30, metadata={"min": 0})
    max_char_dup_ratio: float | None = field(default=0.01, metadata=_FRACTION)
    max_list_ratio: float | None = field(default=0.3, metadata={"min": 0})
    apply_to_unlisted: bool = False  # true: languages without settings get the defaults (not skipped)
    given: frozenset = _given_kept()


@dataclass(frozen=True)
class LanguageRules:
    """``quality.languages.<code>``: the rule groups' keys for documents in one language, laid over that
    language's built-in settings and the manifest's keys for every language. Naming a group here also
    makes it apply to a language it has no built-in settings for."""

    gopher_repetition: GopherRepetitionConfig = GopherRepetitionConfig()
    gopher_quality: GopherQualityConfig = GopherQualityConfig()
    c4: C4Config = C4Config()
    fineweb: FineWebConfig = FineWebConfig()
    given: frozenset = _given_kept()


@dataclass(frozen=True)
class QualityRules:
    """The chain for one source: URL filter -> language ID -> Gopher repetition -> Gopher quality -> C4
    -> FineWeb (the FineWeb recipe's order). Also the shape of a per-source override.

    ``warn_removed_share``: the run summary warns when the source's quality step removes more than this
    share of its documents, naming the rule that removed most (null: the default of every document
    step, 0.8; 1: never). A guardrail, not a rule: it changes no output, so no step identity holds it."""

    enabled: bool = True
    annotate_only: bool = False
    warn_removed_share: float | None = field(default=None, metadata={**_FRACTION, "identity": False})
    url: UrlConfig = UrlConfig()
    langid: LangIdConfig = LangIdConfig()
    language: str = field(default="en", metadata={"check": check_language})  # when langid is off / finds none
    gopher_repetition: GopherRepetitionConfig = GopherRepetitionConfig()
    gopher_quality: GopherQualityConfig = GopherQualityConfig()
    c4: C4Config = C4Config()
    fineweb: FineWebConfig = FineWebConfig()
    languages: dict[str, LanguageRules] = field(default_factory=dict, hash=False)
    given: frozenset = _given()

    def _cross_check(self, given: frozenset[str]) -> list[tuple[Any, str]]:
        """Every ``languages`` key is a code language ID predicts ("polish": did you mean 'pl'?), and a
        Gopher quality entry for a language without a built-in stop-word list gives one (or switches the
        stop-word rule off): otherwise English's words would be counted in another language."""
        out: list[tuple[Any, str]] = []
        for code, over in self.languages.items():
            if code not in LID176_CODES:
                out.append((("languages", code), check_languages((code,)) or ""))
                continue
            gq = over.gopher_quality
            if ("gopher_quality" in over.given and not builtin.stop_words(code) and gq.stop_words is None
                    and gq.min_stop_words is not None and gq.enabled):
                out.append((("languages", code, "gopher_quality"),
                            f"no built-in stop words for {code!r}: give stop_words (its most frequent "
                            "function words, about 8) or set min_stop_words: null"))
        return out


@dataclass(frozen=True)
class QualityConfig(QualityRules):
    """The `quality:` section: the global chain plus per-source overrides (see the module docstring).
    ``enabled: false`` at the top switches the stage off for every source without an override."""

    sources: dict[str, QualityRules] = field(default_factory=dict)

    def for_source(self, name: str) -> QualityRules:
        """The global rules with ``name``'s override laid over them (only the keys it gives)."""
        base = QualityRules(**{f.name: getattr(self, f.name) for f in dataclasses.fields(QualityRules)})
        override = self.sources.get(name)
        return base if override is None else overlay(base, override)


def overlay(base: Any, over: Any) -> Any:
    """``base`` with the fields ``over`` was given in the manifest (nested sections merged the same way, a
    mapping of sections key by key); the result's ``given`` holds the keys either one was given, so a
    later overlay still knows what the manifest wrote."""
    changes: dict[str, Any] = {"given": base.given | over.given}
    for name in over.given:
        value = getattr(over, name)
        mine = getattr(base, name)
        if dataclasses.is_dataclass(value) and hasattr(value, "given"):
            value = overlay(mine, value)
        elif isinstance(value, dict) and isinstance(mine, dict):
            value = {**mine, **{k: overlay(mine[k], v) if k in mine else v for k, v in value.items()}}
        changes[name] = value
    return dataclasses.replace(base, **changes)


@dataclass(frozen=True)
class LineDedupRules:
    """Exact dedup of lines (or paragraphs: blocks between blank lines) across the corpus. Segments
    shorter than ``min_chars`` (after stripping) never count, so '}' or 'return x' survive."""

    enabled: bool = True
    unit: Literal["line", "paragraph"] = "line"
    min_chars: int = field(default=40, metadata={"min": 1})
    given: frozenset = _given()


@dataclass(frozen=True)
class LineDedupConfig(LineDedupRules):
    """The `line_dedup:` section (runs after consolidate); ``sources:`` overrides per source."""

    sources: dict[str, LineDedupRules] = field(default_factory=dict)

    def for_source(self, name: str) -> LineDedupRules:
        base = LineDedupRules(**{f.name: getattr(self, f.name) for f in dataclasses.fields(LineDedupRules)})
        over = self.sources.get(name)
        return base if over is None else overlay(base, over)


@dataclass(frozen=True)
class PiiRules:
    """What the PII stage redacts (datakit.quality.pii) and the placeholders it writes."""

    enabled: bool = True
    emails: bool = True
    ips: bool = True
    phones: bool = False
    email_placeholder: str = "<EMAIL_ADDRESS>"
    ip_placeholder: str = "<IP_ADDRESS>"
    phone_placeholder: str = "<PHONE_NUMBER>"
    given: frozenset = _given()


@dataclass(frozen=True)
class PiiConfig(PiiRules):
    """The `pii:` section (runs last on the text, after line dedup); ``sources:`` overrides per source."""

    sources: dict[str, PiiRules] = field(default_factory=dict)

    def for_source(self, name: str) -> PiiRules:
        base = PiiRules(**{f.name: getattr(self, f.name) for f in dataclasses.fields(PiiRules)})
        over = self.sources.get(name)
        return base if over is None else overlay(base, over)
