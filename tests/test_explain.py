"""`datakit explain` on a real run of the embedded default manifest (smaller: fewer copyright files, two
training steps) plus a source with a malformed line and an exact copy of a stdlib module: every planted
case (a German page removed by language ID, a spam page removed by a Gopher rule, a page with PII, the
two benchmark items planted in the corpus, near-duplicate license texts, an exact copy across sources,
an unreadable record) explained by excerpt, by provenance and by id, from the run's outputs alone."""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from datakit import pipeline
from datakit.cli import main
from datakit.core.fsio import read_table
from datakit.core.layout import DocumentsDir
from datakit.defaults import default_manifest_path
from datakit.report.explain import Explanation, Trace, explain, render_text
from datakit.stages.plan import read_plan

STDLIB = Path(sysconfig.get_paths()["stdlib"])
NOTES = ['{"text": "A short note about the harbour, the boats and the weather at the pier this morning."}',
         '{"text": "this line is not json',
         '{"text": "Another note: the ferry to the island leaves at nine and returns before dark."}',
         json.dumps({"text": (STDLIB / "bisect.py").read_text()})]  # an exact copy of a python-stdlib document


@pytest.fixture(scope="module")
def prefix(tmp_path_factory) -> str:
    tmp = tmp_path_factory.mktemp("explain")
    (tmp / "notes.jsonl").write_text("\n".join(NOTES) + "\n")
    data = yaml.safe_load(Path(default_manifest_path()).read_text())
    for s in data["sources"]:
        s["uri"] = s["uri"] if "/" in s["uri"] else str(Path(default_manifest_path()).parent / s["uri"])
        if s["name"] == "debian-copyright":
            s["max_files"] = 120
    data["sources"].append({"name": "notes", "uri": str(tmp / "notes.jsonl"), "format": "jsonl"})
    data["normalize"]["reject_fraction"] = 0.5
    data["quality"]["sources"]["notes"] = {"enabled": False}
    data["decontaminate"]["benchmarks"][0]["path"] = str(Path(default_manifest_path()).parent / "smoke_benchmark.jsonl")
    data["tokenize"] = {"vocab_size": 1024, "train_tokenizer_bytes": 1_000_000, "validation_fraction": 0.05}
    data["train"] = {"steps": 2, "seq_len": 32, "batch_size": 2, "warmup": 0, "eval_every": 0, "checkpoint_every": 0,
                     "d_model": 32, "n_heads": 2, "n_kv_heads": 1, "d_ff": 64, "log_every": 1}
    data.update(prefix=str(tmp / "out"), backend="inline")
    summary = pipeline.run(pipeline.manifest_from_dict(data, base_dir=str(tmp)))
    assert summary.ok, summary.to_dict()
    return str(tmp / "out")


def _one(e: Explanation) -> Trace:
    assert len(e.traces) == 1, render_text(e)
    return e.traces[0]


def _hop(t: Trace, step: str):
    return next(h for h in t.hops if h.step == step)


def _removed_at(t: Trace) -> tuple[str, dict]:
    last = t.hops[-1]
    assert last.verdict == "removed", t
    return last.step, last.facts


def _same_by_id(prefix: str, t: Trace) -> None:
    """Asked by the id it entered with, the answer is the same trace."""
    again = [x for x in explain(prefix, t.id).traces if x.source_id == t.source_id]
    assert again == [t]


def test_a_german_page_is_removed_by_language_id_with_its_score_and_the_setting(prefix):
    t = _one(explain(prefix, "Die Bibliothek der kleinen Stadt"))
    assert (t.source, t.source_id) == ("web", "smoke_web.jsonl:6")
    step, facts = _removed_at(t)
    assert step == "quality-web" and facts["reason"] == "langid.languages"
    assert facts["value"] > 0.9 and facts["threshold"] == ["en"] and "lang = de" in facts["detail"]
    assert t.outcome == "removed at quality-web: langid.languages"
    _same_by_id(prefix, t)
    assert _one(explain(prefix, "web:smoke_web.jsonl:6")) == t


def test_a_spam_page_is_removed_by_a_gopher_rule_with_value_and_threshold(prefix):
    t = _one(explain(prefix, "Buy cheap designer watches online"))
    step, facts = _removed_at(t)
    assert step == "quality-web" and facts["reason"] == "gopher_repetition.dup_line_frac"
    assert facts["value"] > facts["threshold"] == 0.3
    assert facts["setting"].endswith("gopher_repetition.dup_line_frac")
    _same_by_id(prefix, t)


def test_a_kept_page_ends_in_its_token_cache_and_its_changes_are_followed(prefix):
    """The PII page: C4 line cleaning changes its text (a new id, found again by its source_id), PII
    redaction changes it under the same id, and its token count is the cache's, equal to encoding its
    final text with the run's tokenizer plus EOS."""
    from tokenizers import Tokenizer

    t = _one(explain(prefix, "The repair cafe meets on the first Saturday"))
    quality, pii, last = _hop(t, "quality-web"), _hop(t, "pii-web"), t.hops[-1]
    assert quality.verdict == "changed" and quality.facts["new_id"] != t.id
    assert pii.verdict == "kept" and pii.facts["text_changed"]
    assert [h.verdict for h in t.hops if h.step in ("exact-dedup", "fuzzy-dups", "decontaminate")] == ["unmarked"] * 3
    assert last.step == "tokenize-web" and last.verdict == "tokens" and last.facts["component"] == "web"
    plan = read_plan(prefix)
    [part] = (Path(prefix) / plan.step("pii-web").dirname / DocumentsDir.MAIN).glob("*.parquet")
    final = read_table(str(part)).to_pylist()
    text = next(r["text"] for r in final if r["id"] == quality.facts["new_id"])
    assert "jane.doe@example.org" not in text and "<EMAIL_ADDRESS>" in text
    tok = Tokenizer.from_file(str(Path(prefix) / plan.step("tokenize-web").dirname / "tokenizer.json"))
    assert last.facts["tokens"] == len(tok.encode(text, add_special_tokens=False).ids) + 1
    assert t.outcome == f"kept in web ({last.facts['tokens']} tokens, {last.facts['split']} split)"
    _same_by_id(prefix, t)
    assert _one(explain(prefix, quality.facts["new_id"])) == t  # the changed id leads back to the same trace


def test_the_planted_gpl3_preamble_is_removed_as_contaminated_and_its_copy_points_at_it(prefix):
    e = explain(prefix, "The GNU General Public License is a free, copyleft license for software")
    by_sid = {t.source_id: t for t in e.traces if t.source == "licenses"}
    gpl, copy = by_sid["GPL"], by_sid["GPL-3"]
    step, facts = _removed_at(gpl)
    assert step == "consolidate-licenses" and facts["reason"] == "decontaminate"
    flag = _hop(gpl, "decontaminate")
    assert flag.verdict == "flagged" and (flag.facts["benchmark"], flag.facts["item"]) == ("smoke-planted", "1")
    assert "GPL-3" in gpl.hops[0].facts["identical_copies"]
    step, facts = _removed_at(copy)
    assert step == "normalize-licenses" and copy.kept_copy == {"id": gpl.id, "source": "licenses", "source_id": "GPL"}
    _same_by_id(prefix, gpl)


def test_the_planted_heapq_docstring_is_removed_as_contaminated(prefix):
    t = _one(explain(prefix, "python-stdlib:heapq.py"))
    step, facts = _removed_at(t)
    assert step == "consolidate-python-stdlib" and facts["reason"] == "decontaminate"
    assert _hop(t, "decontaminate").facts["item"] == "2"
    assert t in explain(prefix, "Heaps are arrays for which a[k] <= a[2*k+1]").traces
    _same_by_id(prefix, t)


def test_a_near_duplicate_license_names_its_cluster_and_the_kept_copy(prefix):
    t = _one(explain(prefix, "licenses:GFDL"))
    step, facts = _removed_at(t)
    assert step == "consolidate-licenses" and facts["reason"] == "fuzzy"
    dup = _hop(t, "fuzzy-dups")
    kept = t.kept_copy
    assert dup.verdict == "duplicate" and kept["id"] == dup.facts["cluster_id"]
    assert kept["source"] == "licenses" and kept["source_id"].startswith("GFDL-")
    assert {m["id"] for m in dup.facts["members"]} == {t.id, kept["id"]}
    # In a cluster of two the parent (the earlier near-duplicate it goes for) is the kept copy; the
    # removed row names it as source:id.
    assert (dup.facts["parent_id"], dup.facts["parent_source"]) == (kept["id"], "licenses")
    assert facts["detail"] == f"licenses:{kept['id']}"
    assert dup.note == (f"near-duplicate of {kept['id']} in licenses, in a cluster of 2: kept copy {kept['id']} "
                        f"in licenses ({kept['source_id']})")
    assert f"kept copy {kept['id']} in licenses ({kept['source_id']})" in t.outcome
    canonical = _one(explain(prefix, kept["id"]))
    assert canonical.source_id == kept["source_id"] and _hop(canonical, "fuzzy-dups").verdict == "canonical"
    assert canonical.hops[-1].step == "tokenize-licenses" and canonical.hops[-1].verdict == "tokens"


def test_an_exact_copy_across_sources_names_the_source_that_keeps_it(prefix):
    e = explain(prefix, "notes:notes.jsonl:4")
    t = _one(e)
    (other,) = [x for x in explain(prefix, t.id).traces if x.source != "notes"]
    assert (other.source, other.source_id) == ("python-stdlib", "bisect.py")
    dropped, kept = (t, other) if t.hops[-1].verdict == "removed" else (other, t)
    step, facts = _removed_at(dropped)
    assert step.startswith("consolidate-") and facts["reason"] == "exact"
    assert _hop(dropped, "exact-dedup").verdict == "duplicate"
    assert dropped.kept_copy == {"id": t.id, "source": kept.source, "source_id": kept.source_id}
    assert kept.hops[-1].verdict == "tokens" and _hop(kept, "exact-dedup").verdict == "unmarked"


def test_an_unreadable_record_is_explained_by_file_and_line(prefix):
    t = _one(explain(prefix, "notes:notes.jsonl:2"))
    assert [h.verdict for h in t.hops] == ["rejected"] and t.hops[0].step == "normalize-notes"
    assert t.source_id == "notes.jsonl:2" and t.outcome.startswith("rejected at normalize-notes: ")
    assert _one(explain(prefix, "this line is not json")) == t


def test_an_excerpt_reports_at_most_the_limit(prefix):
    e = explain(prefix, "the", limit=2)
    assert len(e.traces) == 2 and e.more and "--limit" in render_text(e)


def test_the_command_prints_a_trace_json_and_one_line_for_an_unknown_id(prefix):
    res = CliRunner().invoke(main, ["explain", "Die Bibliothek", "--prefix", prefix])
    assert res.exit_code == 0, res.output
    assert "quality-web" in res.output and "removed" in res.output and "langid.languages" in res.output
    res = CliRunner().invoke(main, ["explain", "licenses:GFDL", "--prefix", prefix, "--json"])
    assert res.exit_code == 0 and json.loads(res.output)["traces"][0]["kept_copy"]["source"] == "licenses"
    res = CliRunner().invoke(main, ["explain", "0123456789abcdef0123456789abcdef", "--prefix", prefix])
    assert res.exit_code == 1
    assert res.output == f"document 0123456789abcdef0123456789abcdef: not found in {prefix}\n"
    res = CliRunner().invoke(main, ["explain", "anything", "--prefix", str(Path(prefix).parent / "nowhere")])
    assert res.exit_code == 2 and "no plan.json" in res.output
