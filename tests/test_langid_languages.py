"""Language ID on a mixed-language corpus, on real text (Debian's German man pages, the Debian Reference):
the whole text decides a page's language (its first 2,000 characters, often an English roff header,
called German pages English), `min_score` per language, language codes checked at `validate` with a
hint, per-language figures in the run summary, its --json and the HTML report, and the guardrail that
warns when a step strips most of a source without emptying it."""

from __future__ import annotations

import dataclasses
import glob
import gzip
import json

import duckdb
import pytest
from click.testing import CliRunner

from datakit.cli import main
from datakit.quality import langid
from datakit.quality.chain import Chain
from datakit.quality.config import MIN_SCORE, LangIdConfig, QualityRules
from system_packages import needs

GERMAN_MAN5 = "/usr/share/man/de/man5/*.gz"  # dpkg's, shadow's... file formats: 264 German, 2 English pages
GERMAN_MAN8 = "/usr/share/man/de/man8/*.gz"
REFERENCE_TXT = "/usr/share/debian-reference/debian-reference.en.txt.gz"  # the whole manual, one English text


def _pages(pattern: str) -> dict[str, str]:
    return {p: gzip.decompress(open(p, "rb").read()).decode("utf-8") for p in sorted(glob.glob(pattern))}


@needs("manpages-de")
def test_language_id_reads_the_whole_text_as_datatrove_does():
    """A German man page often opens with an English roff header and licence: on its first 2,000
    characters lid.176 says English, on the whole text (datatrove's LanguageFilter: newlines as spaces)
    German. detect() gives the whole text's label and score (fastText's, the score to its fifth decimal)."""
    pages = _pages(GERMAN_MAN5)
    whole = {p: langid.detect(t) for p, t in pages.items()}
    assert sum(lang == "de" for lang, _ in whole.values()) / len(pages) >= 0.97
    fooled = [p for p, t in pages.items() if langid.detect(t, max_chars=2000)[0] == "en" and whole[p][0] == "de"]
    assert len(fooled) >= 40, len(fooled)
    for p in fooled[:20]:
        labels, probs = langid.model().predict(pages[p].replace("\n", " "), k=1)
        assert labels[0].removeprefix("__label__") == whole[p][0]  # fastText's label and score
        assert abs(min(1.0, float(probs[0])) - whole[p][1]) < 1e-4  # (datakit.quality.lid176's sums)


def _langid_only(cfg: LangIdConfig) -> Chain:
    off = {"enabled": False}
    return Chain(QualityRules(langid=cfg, **{k: type(getattr(QualityRules(), k))(**off)
                                             for k in ("url", "gopher_repetition", "gopher_quality", "c4", "fineweb")}))


@needs("manpages-de")
def test_min_score_per_language_on_german_pages_scoring_between():
    """German pages lid.176 labels right with a score in [0.3, 0.65): the old single 0.65 removed them;
    a per-language score keeps them, and a mapping that does not name German applies its default."""
    labelled = {t: langid.detect(t) for t in _pages(GERMAN_MAN8).values()}
    between = [t for t, (lang, score) in labelled.items() if lang == "de" and 0.3 <= score < 0.65]
    assert len(between) >= 20, len(between)
    cases = {0.65: "langid.min_score", None: None, MIN_SCORE: None,
             (("de", 0.3), ("default", 0.65)): None, (("en", 0.3), ("default", 0.65)): "langid.min_score",
             (("en", 0.9),): None}  # no default: the built-in MIN_SCORE
    for score, want in cases.items():
        cfg = LangIdConfig(languages=("de",), min_score=dict(score) if isinstance(score, tuple) else score)
        chain = _langid_only(cfg)
        got = {(o.failure.rule if o.failure else None) for o in (chain.run({"id": "x", "text": t}) for t in between)}
        assert got == {want}, (score, got)
    assert LangIdConfig(min_score={"de": 0.5}).threshold("fr") == MIN_SCORE
    assert hash(LangIdConfig(min_score={"de": 0.5})) == hash(LangIdConfig(min_score={"de": 0.5}))


# ------------------------------------------------------------------ codes checked at validate
def _write(path, quality: str) -> str:
    path.write_text(f"prefix: {path.parent / 'out'}\nsources:\n  - {{name: de, uri: '{GERMAN_MAN5}', format: text}}\n"
                    f"quality:\n{quality}")
    return str(path)


def test_language_codes_are_checked_at_validate_and_dry_run_with_a_hint(tmp_path):
    m = _write(tmp_path / "m.yaml", "  langid: {min_score: {polish: 0.5, default: 0.3}}\n"
                                    "  sources:\n    de: {langid: {languages: [german]}}\n")
    for args in (["validate", m], ["run", "--dry-run", m]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 2, res.output
        assert (f"{m}:5:12: quality.langid.min_score: unknown language code 'polish': did you mean 'pl'?"
                in res.output), res.output
        assert f"{m}:7:19: quality.sources.de.langid.languages: unknown language code 'german': did you mean 'de'?" \
            in res.output, res.output
        assert not (tmp_path / "out").exists()
    m = _write(tmp_path / "n.yaml", "  langid: {min_score: {de: 1.5}}\n  warn_removed_share: 2\n")
    res = CliRunner().invoke(main, ["validate", m])
    assert res.exit_code == 2
    assert "quality.langid.min_score: scores must be between 0 and 1, got de: 1.5" in res.output
    assert "quality.warn_removed_share: must be" in res.output
    m = _write(tmp_path / "ok.yaml", "  langid: {languages: [de, en], min_score: {de: 0.3, default: 0.5}}\n")
    res = CliRunner().invoke(main, ["validate", m])
    assert res.exit_code == 0, res.output


# ------------------------------------------------------------------ per-language figures and the guardrail
_STEPS = "normalize-man-de,quality-man-de,normalize-reference,quality-reference"


def _manifest(tmp_path, extra: str = "") -> str:
    """A German-heavy source (German man pages and one English manual) and an English one, language ID
    the only rule, English only."""
    path = tmp_path / "m.yaml"
    off = "{enabled: false}"
    path.write_text(
        f"prefix: {tmp_path / 'out'}\nsources:\n"
        f"  - {{name: man-de, uri: ['{GERMAN_MAN5}', '{REFERENCE_TXT}'], format: text}}\n"
        "  - {name: reference, uri: '/usr/share/debian-reference/ch0*.en.html', format: html}\n"
        f"quality:\n  langid: {{languages: [en]}}\n  gopher_repetition: {off}\n  gopher_quality: {off}\n"
        f"  c4: {off}\n  fineweb: {off}\n{extra}")
    return str(path)


@needs("manpages-de", "debian-reference-en")
def test_per_language_figures_and_the_guardrail_through_the_cli(tmp_path):
    m = _manifest(tmp_path)
    res = CliRunner().invoke(main, ["run", m, "--only", _STEPS])
    assert res.exit_code == 0, res.output
    text = res.output
    lines = text.splitlines()
    assert "documents per language (in: documents that reached language ID):" in lines
    de_row = next(line.split() for line in lines if line.startswith("man-de "))
    assert de_row[:2] == ["man-de", "de"] and de_row[3] == "0" and de_row[5] == "langid.languages"
    warning = " ".join(text[text.index("warning: source man-de: quality-man-de removed"):].split())
    assert "source reference:" not in text  # English kept: no warning

    res = CliRunner().invoke(main, ["run", m, "--only", _STEPS, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output.strip().splitlines()[-1])["data"]
    de = data["sources"]["man-de"]
    langs = de["languages"]
    assert langs["de"]["out"] == 0 and langs["de"]["removed"] == {"langid.languages": langs["de"]["in"]}
    steps = {s["name"]: s for s in json.loads(res.output.strip().splitlines()[-1])["steps"]}
    step = steps["quality-man-de"]
    assert de["languages_by"] == ["quality-man-de"] and langs["en"]["out"] >= 1
    assert sum(v["in"] for v in langs.values()) == step["counters"]["docs_in"]  # what reached language ID
    assert all(v["in"] == v["out"] + sum(v["removed"].values()) for v in langs.values())
    assert set(data["sources"]["reference"]["languages"]) == {"en"}
    assert sum("quality-man-de removed" in w for w in data["warnings"]) == 1
    n = langs["de"]["in"]  # the warning names the rule that removed most, and whom it removed: German
    assert f"more than 80%), most by langid.languages ({n}): {n} de; check that its rules fit" in warning

    rows = duckdb.execute(f"select lang, count(*) from read_parquet('{step['output']}/outputs/removed/*.parquet') "
                          "where reason = 'langid.languages' group by lang").fetchall()
    assert dict(rows)["de"] == langs["de"]["in"] == step["counters"]["removed_lang/de/langid.languages"]

    res = CliRunner().invoke(main, ["report", m])
    assert res.exit_code == 0, res.output
    page = (tmp_path / "out" / "report.html").read_text()
    assert "Documents per language" in page and 'data-source="man-de" data-lang="de"' in page
    assert "quality-man-de removed" in page

    # the limit is a guardrail, not a rule: raising it rebuilds nothing and silences the warning
    m = _manifest(tmp_path, "  sources:\n    man-de: {warn_removed_share: 1}\n")
    res = CliRunner().invoke(main, ["run", m, "--only", _STEPS])
    assert res.exit_code == 0 and "0 steps to build" in res.output, res.output
    assert "quality-man-de removed" not in res.output


def test_the_guardrail_covers_any_document_step_and_travels_in_the_plan():
    """Any per-source document step is held to the plan's limit (default 80%), whatever its stage;
    documents a step moved to another component are not removed; the limit survives plan.json."""
    from datakit.report.summary import StepView, data_summary
    from datakit.stages.contract import DOCUMENTS
    from datakit.stages.plan import WARN_REMOVED_SHARE, Plan, PlanStep

    steps = [StepView("dedup-a", "exact", "a", {"docs_in": 100, "docs_out": 15, "removed/exact": 70,
                                                "removed/fuzzy": 15}, {}, None, DOCUMENTS),
             StepView("tiers-b", "tiers", "b", {"docs_in": 100, "docs_out": 5, "moved/b.low": 94}, {}, None, DOCUMENTS),
             StepView("dedup-c", "exact", "c", {"docs_in": 100, "docs_out": 20, "removed/exact": 80}, {}, None,
                      DOCUMENTS)]
    plan = Plan(sources=("a", "b", "c"),
                steps=tuple(PlanStep(s.name, "0", s.stage, s.source, DOCUMENTS) for s in steps))
    warnings = data_summary(steps, plan, "/p").warnings
    assert len(warnings) == 1 and WARN_REMOVED_SHARE == 0.8
    assert " ".join(warnings[0].split()) == ("source a: dedup-a removed 85 of 100 documents (85.0%, more than 80%), "
                                             "most by exact (70); check that its rules fit this source (its "
                                             "language, its kind of text)")
    plan = Plan.from_dict(dataclasses.replace(plan, warn_removed_share={"dedup-a": 0.9, "dedup-c": 0.5}).to_dict())
    assert [w.split(":")[0] for w in data_summary(steps, plan, "/p").warnings] == ["source c"]
