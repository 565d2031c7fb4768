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


# ------------------------------------------------------------------ only the stages know their names
REPO = Path(__file__).resolve().parents[1]


def _stage_owned_modules() -> set[Path]:
    """Where a stage's name may appear: the stage modules, the plan reader, each stage's own ferry check
    module (named by its `ferry_check=`, outside stages/ only because the ferry sits above them)."""
    from datakit.stages.registry import STAGES

    owned = set((REPO / "datakit" / "stages").glob("*.py"))
    owned |= {REPO / (s.ferry_check.partition(":")[0].replace(".", "/") + ".py") for s in STAGES if s.ferry_check}
    return owned


def _stage_spellings() -> set[str]:
    """How the stage modules spell their step names: ``*_STEP`` constants and the names given to
    ``Step(...)``, or their heads (``f"qscore-{source}"``)."""
    import ast

    out = set()
    for path in _stage_owned_modules():
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id.endswith("_STEP") for t in n.targets):
                out.update(_strings(n.value))
            elif isinstance(n, ast.Call) and getattr(n.func, "id", None) == "Step" and n.args:
                first = n.args[0].values[0] if isinstance(n.args[0], ast.JoinedStr) else n.args[0]
                out.update(x.rstrip("-") for x in _strings(first))
    return out


def _registered_names() -> tuple[set[str], set[str]]:
    """(stage names and step-name stems, multi-word step names): the registry's stages, the steps of the
    embedded default, and the names the stage modules spell."""
    from datakit.defaults import default_manifest_path
    from datakit.stages.registry import STAGES

    plan = pipeline.build_plan(pipeline.load_manifest(default_manifest_path(), check_uris=False), write_cache=False)
    stems = {s.name[: -len(s.source) - 1] if s.source else s.name for s in plan.steps} | _stage_spellings()
    return {s.name for s in STAGES} | stems, {n for n in stems if "-" in n}


def _strings(node) -> list[str]:
    import ast

    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]


def _is_tag(node) -> bool:
    """``x.stage``, ``x.name``, ``stage`` or ``name``: what a step is found by."""
    import ast

    return (isinstance(node, ast.Attribute) and node.attr in ("stage", "name")) or \
        (isinstance(node, ast.Name) and node.id in ("stage", "name"))


def _finds_by_name(tree, names: set[str], multi: set[str]) -> list[tuple[int, str]]:
    import ast

    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Compare) and any(_is_tag(x) for x in (n.left, *n.comparators)):
            out += [(n.lineno, s) for x in (n.left, *n.comparators) for s in _strings(x) if s in names]
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and _is_tag(n.func.value) and \
                n.func.attr in ("startswith", "endswith", "removeprefix", "removesuffix"):
            out += [(n.lineno, s) for a in n.args for s in _strings(a) if s.rstrip("-") in names]
        elif isinstance(n, ast.JoinedStr) and n.values and _strings(n.values[0]):
            head = _strings(n.values[0])[0]
            out += [(n.lineno, head)] if head.endswith("-") and head[:-1] in names else []
        elif isinstance(n, ast.Constant) and id(n) not in docstrings and n.value in multi:
            out.append((n.lineno, n.value))
    return out


def test_no_module_outside_the_stages_finds_a_step_by_a_stage_name():
    """The report, the ferry's plumbing, `mix show`, the CLI, the API... ask the plan; only a stage (and
    the plan reader) knows which steps it builds and what they are called."""
    import ast

    names, multi = _registered_names()
    owned = _stage_owned_modules()
    found = []
    for path in sorted((REPO / "datakit").rglob("*.py")):
        if path not in owned:
            found += [f"{path.relative_to(REPO)}:{line}: {s!r}"
                      for line, s in _finds_by_name(ast.parse(path.read_text()), names, multi)]
    assert not found, "steps found by a stage's name outside the stages:\n" + "\n".join(found)


def test_the_name_finder_sees_the_forms_it_forbids():
    import ast

    names, multi = {"normalize", "fuzzy-dups", "train"}, {"fuzzy-dups"}
    code = ('a = s.stage == "normalize"\nb = step.name.startswith("normalize-")\nc = f"normalize-{src}"\n'
            'd = "fuzzy-dups"\ne = r.get("kind") == "train"\nf = s.stage in ("train", "x")\n')
    assert [line for line, _ in _finds_by_name(ast.parse(code), names, multi)] == [1, 2, 3, 4, 6]


def test_the_summary_lists_a_stages_reasons_in_the_order_it_applies_them(built):
    """Artifact counters are stored sorted; the funnel still reads in pipeline order (normalize: rejects,
    in-source dups, empty; consolidate: exact dups, fuzzy dups, contaminated), from the plan's record of
    each stage's reasons, not from a stage name the report knows."""
    _, summary, prefix = built
    plan = read_plan(prefix)
    assert plan.reasons["normalize"] == ("rejects", "in-source dups", "empty")
    assert plan.reasons["consolidate"] == ("exact dups", "fuzzy dups", "contaminated")
    labels = list(summary.data["sources"]["code"]["removed"])
    normalize = [r for r in labels if r in plan.reasons["normalize"]]
    consolidate = [r for r in labels if r in plan.reasons["consolidate"]]
    assert normalize == list(plan.reasons["normalize"]) and consolidate == list(plan.reasons["consolidate"])
    assert labels.index("empty") < labels.index("exact dups") < labels.index("keep-long")


def test_the_text_lineage_tokenize_gets_names_the_steps_that_change_texts_under_their_ids(tmp_path):
    """PII redaction keeps ids while changing texts: tokenize is told (its text lineage), per source, so it
    cuts a shard by ids alone only from a build with the same redaction; without PII the lineage is ""
    (an id is its text's content hash); other PII settings give another lineage."""
    def lineages(**sections) -> dict[str, str]:
        m = pipeline.manifest_from_dict({
            "prefix": str(tmp_path / "p"), "tokenize": {"vocab_size": 300}, **sections,
            "sources": [{"name": "code", "uri": str(STDLIB / "json" / "*.py"), "format": "text"},
                        {"name": "more", "uri": str(STDLIB / "email" / "mime" / "*.py"), "format": "text"}]})
        steps = pipeline.build_steps(m, write_cache=False)
        return {s.source: s.fn.keywords["text_lineage"] for s in steps if s.stage == "tokenize"}

    assert lineages() == {"code": "", "more": ""}
    redacted = lineages(pii={})
    assert redacted["code"] and redacted["more"] and redacted["code"] != redacted["more"]
    assert lineages(pii={"phones": True})["code"] not in ("", redacted["code"])
    assert lineages(pii={}) == redacted
