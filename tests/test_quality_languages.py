"""The quality rules per language: word splitting by script, stop words, built-in thresholds, skipping a
language a rule has no settings for, and the manifest's per-language overrides (validated codes).

Real text: Debian's translated messages are what the stop words were ranked on, so the pages here are
man pages (a different text), and the acceptance over many pages is tests/test_multilingual_acceptance.py.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import re
from pathlib import Path

import pyarrow as pa
import pytest

from datakit.manifest.errors import ManifestInvalid
from datakit.pipeline import load_manifest
from datakit.quality import gopher, languages
from datakit.quality.chain import Chain
from datakit.quality.config import (C4Config, GopherQualityConfig, GopherRepetitionConfig, LangIdConfig,
                                    LanguageRules, QualityConfig, QualityRules, UrlConfig)
from datakit.quality.language_rules import settings_for
from datakit.quality.urls import UrlLists
from datakit.quality.text import tokens
from datakit.stages.quality import filter_file

from system_packages import needs

ANY = LangIdConfig(languages=(), min_score=None)


def _man(lang: str, name: str) -> str:
    from benchmarks.filters import roff_to_text

    path = f"/usr/share/man/{lang}/man1/{name}.1.gz" if lang else f"/usr/share/man/man1/{name}.1.gz"
    return roff_to_text(gzip.open(path, "rt", errors="replace").read())


def test_words_split_by_script():
    """Spaces: punctuation off the edges, hyphens and apostrophes kept; chars: one token per character of
    a script written without spaces (marks kept with it), other runs as spaces splits them."""
    assert tokens("Hallo, Welt! l'homme «citation» --help ...", "spaces") == \
        ["Hallo", ",", "Welt", "!", "l'homme", "«", "citation", "»", "--help", "..."]
    assert tokens("これはペンです。Linux 3.5 版", "chars") == \
        ["こ", "れ", "は", "ペ", "ン", "で", "す", "。", "Linux", "3.5", "版"]
    assert tokens("ที่ใช้", "chars") == ["ที่", "ใ", "ช้"]          # tone and vowel marks stay with their letter
    assert tokens("हिन्दी भाषा।", "spaces") == ["हिन्दी", "भाषा", "।"]   # a vowel sign is no word boundary
    assert tokens("Don't stop.") == ["Do", "n't", "stop", "."]        # English: spaCy's rules, as before


def test_every_rule_group_knows_its_languages():
    """At least the 30 most common web languages have stop words; C4 only Latin and Cyrillic ones; Chinese,
    Japanese and Thai are split by character and have no word-length rule."""
    web30 = {"en", "ru", "de", "ja", "es", "fr", "zh", "it", "pt", "nl", "pl", "tr", "fa", "vi", "id", "cs",
             "ko", "uk", "ar", "sv", "hu", "el", "ro", "da", "fi", "he", "sk", "th", "bg", "no"}
    assert web30 <= languages.languages_for("gopher_quality")
    assert {"de", "ru", "pl", "vi"} <= languages.languages_for("c4")
    assert not {"ja", "zh", "th", "ar", "el", "hi"} & languages.languages_for("c4")
    for code in ("ja", "zh", "th"):
        lang = languages.language(code)
        assert lang.split == "chars" and lang.thresholds["gopher_quality"]["min_avg_word_length"] is None
    assert languages.language("en").stop_words == gopher.STOP_WORDS and languages.language("en").split == "spacy_en"
    assert all(len(languages.stop_words(c)) == 8 for c in web30)   # as many as Gopher's English list
    assert languages.language("de").thresholds["gopher_repetition"]["dup_line_frac"] == 0.263   # FineWeb-2's


def test_english_settings_are_the_manifests():
    """English has no built-in thresholds: its configs are exactly the rules', so English is decided as before."""
    rules = QualityRules(gopher_quality=GopherQualityConfig(min_doc_words=20))
    s = settings_for(rules, "en")
    assert s.configs["gopher_quality"] == rules.gopher_quality and s.configs["c4"] == rules.c4
    assert s.configs["gopher_repetition"] == rules.gopher_repetition and s.skipped == ()


def test_per_language_values_layer_in_order():
    """Built-in values replace the defaults; a key the manifest writes for every language wins over them;
    a `languages:` entry wins over both, for its language only."""
    rules = QualityRules(gopher_repetition=GopherRepetitionConfig(top_2_gram_frac=0.5),
                         languages={"de": LanguageRules(gopher_quality=GopherQualityConfig(min_stop_words=1))})
    de, fr = settings_for(rules, "de"), settings_for(rules, "fr")
    assert de.configs["gopher_repetition"].dup_line_frac == 0.263 and fr.configs["gopher_repetition"].dup_line_frac == 0.264
    assert de.configs["gopher_repetition"].top_2_gram_frac == 0.5 == fr.configs["gopher_repetition"].top_2_gram_frac
    assert de.configs["gopher_quality"].min_stop_words == 1 and fr.configs["gopher_quality"].min_stop_words == 2
    assert de.configs["gopher_quality"].min_alpha_words_ratio == 0.774


def test_a_language_without_settings_is_skipped_and_counted():
    """Latin (in lid.176, not in the table) gets no rule at all and each group counts it; German gets all.
    A group that says apply_to_unlisted judges it with the defaults."""
    with open("/usr/share/common-licenses/GPL-3", encoding="utf-8") as f:  # base-files: on every Debian system
        latin = f.read().replace("the ", "et ").replace("The ", "Et ")  # not Latin, but no matter: the code is
    table = pa.table({"id": ["a", "b"], "text": [latin, _man("de", "ls")] if os.path.exists(
        "/usr/share/man/de/man1/ls.1.gz") else [latin, latin]})
    rules = QualityRules(langid=LangIdConfig(enabled=False), language="la", annotate_only=True)
    kept, removed, stats = filter_file("f", table, rules)
    assert kept.num_rows == 2 and not removed
    assert {k: v for k, v in stats.items() if k.startswith("skipped/")} == {
        "skipped/gopher_repetition/la": 2, "skipped/gopher_quality/la": 2, "skipped/c4/la": 2, "skipped/fineweb/la": 2}
    assert kept.column("gopher_words").to_pylist() == [None, None]        # nothing measured, nothing judged
    unlisted = QualityRules(langid=LangIdConfig(enabled=False), language="la",
                            gopher_quality=GopherQualityConfig(apply_to_unlisted=True))
    out = Chain(unlisted).run({"id": "a", "text": latin})
    assert out.skipped == ("gopher_repetition", "c4", "fineweb") and out.measures["gopher_words"] > 100
    assert out.measures["gopher_stop_words"] == gopher.quality_measures(latin)["gopher_stop_words"]  # English's


@needs("manpages-de")
def test_german_page_passes_with_german_stop_words():
    """The bug this fixes: a German page measured 0 English stop words and was removed. With German's own
    words it holds several, and its Gopher quality verdict is its own."""
    text = _man("de", "ls")
    rules = QualityRules(langid=ANY)
    out = Chain(rules).run({"id": "x", "text": text})
    assert out.measures["lang"] == "de" and out.settings.code == "de"
    assert gopher.quality_measures(text)["gopher_stop_words"] <= 1                # English's words: none or one
    assert out.measures["gopher_stop_words"] >= 4
    assert out.failure is None or not out.failure.rule.startswith("gopher_quality.min_stop_words")


def test_language_codes_are_checked_when_the_manifest_loads(tmp_path: Path):
    """`languages:` keys and `language:` must be lid.176 codes ("polish": did you mean 'pl'?), and an entry
    for a language without built-in stop words must give them (or switch the rule off)."""
    (tmp_path / "a.txt").write_text("text\n")

    def errors(quality: str) -> str:
        m = tmp_path / "m.yaml"
        m.write_text(f"sources:\n  - {{name: web, uri: {tmp_path}/a.txt, format: text}}\nquality:\n{quality}")
        with pytest.raises(ManifestInvalid) as e:
            load_manifest(str(m))
        return str(e.value)

    assert re.search(r"quality\.language: unknown language code 'german': did you mean 'de'\?",
                     errors("  language: german\n"))
    msg = errors("  languages:\n    polish: {gopher_quality: {min_stop_words: 1}}\n"
                 "    la: {gopher_quality: {min_doc_words: 20}}\n    pl: {c4: {min_sentences: 2}}\n")
    assert re.search(r"quality\.languages\.polish: unknown language code 'polish': did you mean 'pl'\?", msg)
    assert "quality.languages.la.gopher_quality: no built-in stop words for 'la'" in msg
    assert "languages.pl" not in msg


def test_per_language_override_reaches_the_step_identity(tmp_path: Path):
    """A per-language key and a key written explicitly (even with the default value: other languages then
    get it instead of their built-in value) both change the quality step's identity."""
    from datakit.pipeline import build_plan

    (tmp_path / "a.txt").write_text("text\n")

    def identity(quality: str) -> str:
        m = tmp_path / "m.yaml"
        m.write_text(f"sources:\n  - {{name: web, uri: {tmp_path}/a.txt, format: text}}\nquality:\n{quality}")
        plan = build_plan(load_manifest(str(m)))
        return next(s.identity for s in plan.steps if s.name == "quality-web")

    plain = identity("  enabled: true\n")
    assert identity("  languages: {pl: {gopher_quality: {min_stop_words: 1}}}\n") != plain
    assert identity("  gopher_repetition: {dup_line_frac: 0.3}\n") != plain      # 0.3 is the default


def test_config_round_trips_through_the_manifest(tmp_path: Path):
    (tmp_path / "a.txt").write_text("text\n")
    m = tmp_path / "m.yaml"
    m.write_text(f"sources:\n  - {{name: web, uri: {tmp_path}/a.txt, format: text}}\nquality:\n"
                 "  languages: {la: {gopher_quality: {stop_words: [et, in, est, non]}}}\n"
                 "  c4: {apply_to_unlisted: true}\n")
    cfg: QualityConfig = load_manifest(str(m)).quality
    rules = cfg.for_source("web")
    s = settings_for(rules, "la")
    assert s.stop_words == frozenset({"et", "in", "est", "non"}) and s.skipped == ("gopher_repetition", "fineweb")
    assert isinstance(s.configs["c4"], C4Config)


def test_a_document_the_url_rule_removes_goes_to_no_language_id(monkeypatch):
    """The URL rule runs before language ID, so a document it removes has no language: the stage does not
    detect it (its result would go unused), and an annotate-only run, which goes through every rule, does."""
    from datakit.quality import langid

    with open("/usr/share/common-licenses/GPL-3", encoding="utf-8") as f:
        text = f.read()
    table = pa.table({"id": ["a", "b"], "text": [text[:4000], text[4000:8000]],
                      "url": ["https://www.gnu.org/licenses/", "https://a.spam.co.uk/x"]})
    asked: list[list[str]] = []
    real = langid.detect_many

    def spy(texts, max_chars):
        asked.append(list(texts))
        return real(texts, max_chars)

    monkeypatch.setattr(langid, "detect_many", spy)
    judged: list[str] = []
    verdict = UrlLists.verdict
    monkeypatch.setattr(UrlLists, "verdict", lambda self, url: judged.append(url) or verdict(self, url))
    rules = QualityRules(url=UrlConfig(block_domains=("spam.co.uk",)), c4=C4Config(enabled=False))
    kept, removed, stats = filter_file("f", table, rules)
    assert asked == [[text[:4000]]] and kept.column("lang").to_pylist() == ["en"]
    assert judged == table.column("url").to_pylist()  # each URL looked up once
    assert [r[:2] for r in removed] == [("b", "url.blocked_domain")] and removed[0][4:] == (None, None)
    asked.clear()
    kept, removed, _ = filter_file("f", table, dataclasses.replace(rules, annotate_only=True))
    assert asked == [[text[:4000], text[4000:8000]]] and kept.column("lang").to_pylist() == ["en", "en"]
