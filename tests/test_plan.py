"""The published plan: a run writes `<prefix>/plan.json` (every step's stage, source and kind, each source's
chain of document steps, the mixture components, the named products), it loads back equal, and the
report and the ferry follow a stage they were never told about through it."""

from __future__ import annotations

import json
import sysconfig
import textwrap
from pathlib import Path

import pytest

from datakit import pipeline
from datakit.core.layout import PLAN_FILE
from datakit.ferry import Envelopes
from datakit.ferry.plan import run_plan
from datakit.ferry.validate import validate_run
from datakit.report.run_report import _final_documents, load_steps, render_run_report
from datakit.report.summary import views
from datakit.stages.contract import DOCUMENTS, MODEL, TOKENIZER, TOKENS
from datakit.stages.plan import Plan, read_plan

STDLIB = Path(sysconfig.get_paths()["stdlib"])
FILTER = '''
def drop_short(doc, config):
    """Keep documents of at least min_chars characters."""
    return len(doc["text"]) >= config["min_chars"] or "too_short"
'''


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple:
    """A small run with a user filter placed after consolidate: a stage no consumer was written for."""
    tmp = tmp_path_factory.mktemp("plan")
    (tmp / "docs").mkdir()
    for f in sorted((STDLIB / "json").glob("*.py")):
        (tmp / "docs" / f.name).write_text(f.read_text())
    (tmp / "planfilters.py").write_text(FILTER)
    (tmp / "sources.yaml").write_text(textwrap.dedent("""
        prefix: out
        backend: inline
        sources:
          - {name: code, uri: docs/*.py, format: text}
        stages:
          - {name: keep-long, call: planfilters:drop_short, kind: filter, place: after_consolidate,
             config: {min_chars: 3000}}
        tokenize: {vocab_size: 300}
        train: {steps: 2, seq_len: 32, batch_size: 2, warmup: 0, eval_every: 0, checkpoint_every: 0,
                d_model: 32, n_heads: 2, n_kv_heads: 1, d_ff: 64, log_every: 1}
        """))
    m = pipeline.load_manifest(tmp / "sources.yaml")
    summary = pipeline.run(m)
    assert summary.ok, summary.to_dict()
    return m, summary, str(tmp / "out")


def test_the_run_writes_its_plan_and_it_round_trips(built):
    m, _, prefix = built
    written = read_plan(prefix)
    assert written is not None and (Path(prefix) / PLAN_FILE).exists()
    assert written == pipeline.build_plan(m, prefix, write_cache=False)
    assert Plan.from_dict(json.loads(json.dumps(written.to_dict()))) == written
    chain = written.chain("code")
    assert chain[0] == "normalize-code" and chain[-1] == "keep-long-code"
    assert [written.step(n).kind for n in chain] == [DOCUMENTS] * len(chain)
    assert written.step("keep-long-code").stage == "after_consolidate"
    assert written.input_of("keep-long-code") == chain[-2]
    assert written.tokens == {"code": "tokenize-code"} and written.step("tokenize-code").kind == TOKENS
    assert [(c.name, c.weight, c.tokens) for c in written.components] == [("code", 1.0, "tokenize-code")]
    assert written.step(written.tokenizer).kind == TOKENIZER and written.step(written.model).kind == MODEL
    assert written.mixture is None and written.attributes
    assert [s.name for s in written.steps] == [s.name for s in pipeline.build_steps(m, prefix, write_cache=False)]


def test_a_dry_run_writes_no_plan(tmp_path):
    (tmp_path / "a.txt").write_text("some text\n")
    m = pipeline.manifest_from_dict({"prefix": str(tmp_path / "out"), "backend": "inline",
                                     "sources": [{"name": "a", "uri": str(tmp_path / "a.txt"), "format": "text"}],
                                     "tokenize": {"vocab_size": 300}})
    pipeline.run(m, dry_run=True)
    assert read_plan(str(tmp_path / "out")) is None


def test_the_summary_report_and_ferry_follow_a_stage_they_never_heard_of(built):
    m, summary, prefix = built
    plan = read_plan(prefix)
    counters = {s["name"]: s["counters"] for s in summary.steps}["keep-long-code"]
    assert counters["removed"] > 0
    funnel = summary.data["sources"]["code"]
    assert funnel["docs_out"] == counters["docs_out"]  # the last documents step is the user stage's
    assert funnel["removed"]["keep-long"] == counters["removed"]
    steps = load_steps(prefix, plan)
    assert _final_documents(steps, plan)["code"][0].startswith(str(Path(prefix) / plan.step("keep-long-code").dirname))
    assert "keep-long-code" in render_run_report(prefix)
    assert [v.kind for v in views(summary, plan) if v.name == "keep-long-code"] == [DOCUMENTS]
    ferry_plan = run_plan("plan-test", m, plan)
    checks = validate_run(prefix, Envelopes(), plan=ferry_plan).checks
    mine = [c for c in checks if c.stage == "keep-long-code"]
    assert {c.check for c in mine} >= {"built", "files", "counts"} and all(c.ok for c in mine), mine
