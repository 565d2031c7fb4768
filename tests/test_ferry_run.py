"""The ferry end to end: a real run, its status/history/report, and the validator catching seeded faults.

Two real runs are used: a tiny one (four stdlib modules + six license texts, no training; seconds) so
the fast suite covers the run/validate loop, and the real smoke ferry (the bundled manifest, 40 training
steps; minutes, marked slow, CI runs it). Each is made once per module; every fault is seeded into a
COPY of it, and each must fail with the right stage and check named first.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from datakit.cli import main
from datakit.ferry import Envelopes, FerryOptions, read_history, read_plan, run_ferry, validate_run
from datakit.ferry.checking import RunContext
from datakit.cli.ferry import ferry

STDLIB = Path(sysconfig.get_paths()["stdlib"])
LICENSES = Path("/usr/share/common-licenses")
HEAPQ_TEXT = ("Heaps are arrays for which a[k] <= a[2*k+1] and a[k] <= a[2*k+2] for all k, counting elements "
              "from 0.")
# The tiny corpus is too small for the smoke corpus's envelopes (1 contaminated doc of 10 is 10%).
TINY_ENVELOPES = Envelopes(decontaminate_fraction=(0.0, 0.5), fuzzy_fraction=(0.0, 0.5))


def _tiny_manifest(root: Path, *, broken_source: bool = False) -> Path:
    code, lic = root / "code", root / "lic"
    code.mkdir(parents=True)
    lic.mkdir()
    for name in ("heapq.py", "bisect.py", "textwrap.py", "shlex.py"):
        shutil.copy(STDLIB / name, code / name)
    for name in ("GPL-2", "GPL-3", "LGPL-2", "LGPL-2.1", "LGPL-3", "Apache-2.0"):
        shutil.copy(LICENSES / name, lic / name)
    (root / "bench.jsonl").write_text(json.dumps({"question": HEAPQ_TEXT}) + "\n"
                                      + json.dumps({"question": "an item that occurs nowhere in this corpus at all, "
                                                                "made of thirteen or more words"}) + "\n")
    extra = ""
    if broken_source:
        (root / "empty").mkdir()
        (root / "empty" / "blank.txt").write_text("   \n")
        extra = "  - {name: blank, uri: empty/*.txt, format: text}\n"
    m = root / "tiny.yaml"
    m.write_text(f"""\
sources:
  - name: code
    uri: code/*.py
    format: text
  - name: lic
    uri: lic/*
    format: text
{extra}normalize:
  target_shard_bytes: 40000
dedup:
  threshold: 0.6  # the corpus's one near-duplicate pair, LGPL-2 and LGPL-2.1, is at Jaccard 0.72
decontaminate:
  benchmarks:
    - {{name: tiny-bench, path: bench.jsonl, text_fields: [question]}}
tokenize:
  vocab_size: 300
  validation_fraction: 0.2
""")
    return m


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tiny")
    out = run_ferry(FerryOptions(prefix=str(root / "prefix"), run_id="tiny", workers=2, envelopes=TINY_ENVELOPES,
                                 manifest=str(_tiny_manifest(root)), log=lambda msg: None))
    assert out.status == "succeeded", out.failing
    return Path(out.run_dir)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess, float]:
    """The real ferry, through the real command line, in its own process (as cron runs it)."""
    prefix = tmp_path_factory.mktemp("smoke") / "prefix"
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "datakit.cli", "ferry", "run", "--prefix", str(prefix),
                           "--run-id", "smoke", "--workers", "2"], capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, f"ferry failed (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr[-6000:]}"
    return prefix, proc, wall


@pytest.fixture(params=["tiny", pytest.param("smoke", marks=[pytest.mark.slow, pytest.mark.timeout(1800)])])
def any_run(request) -> Path:
    if request.param == "tiny":
        return request.getfixturevalue("tiny_run")
    prefix, _, _ = request.getfixturevalue("smoke_run")
    return prefix / "runs" / "smoke"


# ------------------------------------------------------------------------------ helpers over a run copy
def _copy(run_dir: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy" / run_dir.name
    shutil.copytree(run_dir, dst)
    return dst


def _step_dir(run_dir: Path, name: str) -> Path:
    ref = read_plan(str(run_dir)).step(name)
    assert ref is not None, name
    return run_dir / ref.dirname


def _artifact(run_dir: Path, name: str) -> dict:
    return json.loads((_step_dir(run_dir, name) / "artifact.json").read_text())


def _sources(run_dir: Path) -> list[str]:
    return list(read_plan(str(run_dir)).sources)


def _first_failure(run_dir: Path, env: Envelopes | None = None) -> tuple[str, str, str]:
    v = validate_run(str(run_dir), env if env is not None else _env_for(run_dir))
    f = v.first_failure
    assert f is not None, "the seeded fault was not detected"
    return f.stage, f.check, f.message


def _env_for(run_dir: Path) -> Envelopes:
    return TINY_ENVELOPES if run_dir.name == "tiny" else Envelopes()


def _insert_row(parquet: Path, row: pa.Table) -> None:
    """Add a row and keep the file sorted by id, like a buggy consolidate that let it through."""
    t = pq.read_table(parquet)
    t = pa.concat_tables([t, row.select(t.schema.names).cast(t.schema)])
    t = t.take(pc.sort_indices(t, [("id", "ascending")]))
    pq.write_table(t, parquet)


def _docs_step(run_dir: Path, src: str) -> str:
    """The step consolidate-<src> read (normalize-<src>, or the quality step after it)."""
    return RunContext(str(run_dir), read_plan(str(run_dir)), Envelopes()).docs_step(src)


def _normalized_row(run_dir: Path, src: str, doc_id: str) -> tuple[str, pa.Table]:
    """(file name, the row) of doc ``doc_id`` in the documents consolidate-<src> read."""
    step = _docs_step(run_dir, src)
    norm = _step_dir(run_dir, step)
    for rel in _artifact(run_dir, step)["result"]["main_files"]:
        t = pq.read_table(norm / rel)
        hit = t.filter(pc.equal(t["id"], doc_id))
        if hit.num_rows:
            return os.path.basename(rel), hit
    raise AssertionError(f"{doc_id} not in {step}")


def _decontaminated_doc(run_dir: Path) -> tuple[str, str]:
    """(source, id) of a doc consolidate removed for contamination (and for no other reason)."""
    for src in _sources(run_dir):
        cons = _step_dir(run_dir, f"consolidate-{src}")
        doc = duckdb.sql(f"select min(id) from read_parquet('{cons}/outputs/removed/*.parquet') "
                         "where reason = 'decontaminate'").fetchall()[0][0]
        if doc:
            return src, doc
    raise AssertionError("no contaminated doc in this run")


# ------------------------------------------------------------------------------ the real run
def test_validator_passes_the_run_as_made(any_run: Path) -> None:
    v = validate_run(str(any_run), _env_for(any_run))
    assert v.ok, [str(c) for c in v.failures]
    assert not [c for c in v.checks if c.status == "skipped"]
    plan = read_plan(str(any_run))
    assert {c.stage for c in v.checks} == {s.name for s in plan.steps}  # every step was looked at
    assert v.summary["planted"]["left"] == 0 and v.summary["planted"]["found"]
    tot = v.summary["totals"]
    removed = tot["removed_exact"] + tot["removed_fuzzy"] + tot["removed_decontaminate"]
    assert tot["docs_out"] == tot["docs_in"] - removed
    assert tot["removed_fuzzy"] > 0 and tot["removed_decontaminate"] > 0 and tot["tokens"] > 0


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_smoke_ferry_end_to_end(smoke_run) -> None:
    prefix, proc, wall = smoke_run
    print(f"smoke ferry wall time: {wall:.1f}s")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["status"] == "succeeded" and out["failing"] is None and out["run_id"] == "smoke"
    status = json.loads((prefix / "status.json").read_text())
    assert status["status"] == "succeeded" and status["exit_code"] == 0 and status["failing_stage"] is None
    assert status["run_dir"] == str(prefix / "runs" / "smoke")
    (rec,) = read_history(str(prefix)).records
    plan = read_plan(str(prefix / "runs" / "smoke"))
    assert [s["name"] for s in rec["steps"]] == [s.name for s in plan.steps]
    assert all(s["status"] == "succeeded" and s["wall_s"] > 0 for s in rec["steps"])
    assert rec["validation"]["ok"] and rec["validation"]["counts"]["failed"] == 0
    points = rec["summary"]["loss"]["points"]
    assert len(points) >= 2 and points[-1][0] == 40 and points[-1][1] < points[0][1]
    assert rec["summary"]["planted"]["left"] == 0 and len(rec["summary"]["planted"]["found"]) >= 1
    assert any(s["name"] == "train" and s["wall_s"] > 0 for s in rec["steps"])
    page = (prefix / "report.html").read_text()
    assert 'data-run-id="smoke"' in page and 'class="loss-line"' in page
    # The CLI validator agrees, through a fresh process and the recorded plan.
    r = subprocess.run([sys.executable, "-m", "datakit.cli", "ferry", "validate", str(prefix / "runs" / "smoke")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.startswith("OK: "), r.stdout + r.stderr


# ------------------------------------------------------------------------------ seeded faults
def test_deleted_consolidated_shard(any_run: Path, tmp_path: Path) -> None:
    run = _copy(any_run, tmp_path)
    src = max(_sources(run), key=lambda s: _artifact(run, f"consolidate-{s}")["result"]["num_shards"])
    main_dir = _step_dir(run, f"consolidate-{src}") / "outputs" / "main"
    shards = sorted(main_dir.iterdir())
    victim = shards[len(shards) // 2]
    victim.unlink()
    stage, check, msg = _first_failure(run)
    assert (stage, check) == (f"consolidate-{src}", "files")
    assert victim.name in msg and "missing" in msg
    env = tmp_path / "envelopes.json"  # JSON is YAML
    env.write_text(json.dumps(_env_for(run).to_dict()))
    r = CliRunner().invoke(main, ["ferry", "validate", str(run), "--envelopes", str(env)])
    assert r.exit_code == 1 and f"FAILED: consolidate-{src}: files:" in r.output


def test_tampered_stats_json(any_run: Path, tmp_path: Path) -> None:
    run = _copy(any_run, tmp_path)
    src = _sources(run)[-1]
    stats = _step_dir(run, f"tokenize-{src}") / "train" / ".stats.json"
    d = json.loads(stats.read_text())
    d["total_tokens"] += 7
    stats.write_text(json.dumps(d))
    stage, check, msg = _first_failure(run)
    assert (stage, check) == (f"tokenize-{src}", "stats")
    assert "train/.stats.json total_tokens vs NumPy recount" in msg and str(d["total_tokens"]) in msg


def test_reinserted_duplicate_row(any_run: Path, tmp_path: Path) -> None:
    run = _copy(any_run, tmp_path)
    src = max(_sources(run), key=lambda s: _artifact(run, f"consolidate-{s}")["counters"]["docs_out"])
    shard = next(p for p in sorted((_step_dir(run, f"consolidate-{src}") / "outputs" / "main").iterdir())
                 if pq.read_metadata(p).num_rows)
    first = pq.read_table(shard).slice(0, 1)
    _insert_row(shard, first)
    stage, check, msg = _first_failure(run)
    assert (stage, check) == (f"consolidate-{src}", "no_duplicates")
    assert first["id"][0].as_py() in msg and "occurs 2 times" in msg


def test_reinserted_fuzzy_duplicate(any_run: Path, tmp_path: Path) -> None:
    """A near-duplicate that fuzzy dedup removed comes back (e.g. consolidate ignored the marks)."""
    run = _copy(any_run, tmp_path)
    src = next(s for s in _sources(run) if _artifact(run, f"consolidate-{s}")["counters"]["removed_fuzzy"])
    cons = _step_dir(run, f"consolidate-{src}")
    doc = duckdb.sql(f"select min(id) from read_parquet('{cons}/outputs/removed/*.parquet') "
                     "where reason = 'fuzzy'").fetchall()[0][0]
    name, row = _normalized_row(run, src, doc)
    _insert_row(cons / "outputs" / "main" / name, row)
    stage, check, msg = _first_failure(run)
    assert (stage, check) == (f"consolidate-{src}", "no_duplicates")
    assert "marked as duplicates by fuzzy-dups" in msg and doc in msg


def _fuzzy_marks_files(run: Path) -> list[Path]:
    """Every source's fuzzy marks files, in source then name order."""
    fz = _artifact(run, "fuzzy-dups")["result"]["sources"]
    return [f for src in _sources(run)
            for f in sorted((_step_dir(run, "fuzzy-dups") / fz[src]["attributes"]).glob("*.parquet"))]


def test_a_fuzzy_parent_outside_its_cluster(any_run: Path, tmp_path: Path) -> None:
    """A removed near-duplicate's marks name a parent that is not in its cluster (e.g. the parents
    joined to the wrong members): the audit trail would point at an unrelated document."""
    run = _copy(any_run, tmp_path)
    for f in _fuzzy_marks_files(run):
        t = pq.read_table(f)
        removed = [i for i, keep in enumerate(t["is_canonical"].to_pylist()) if not keep]
        if removed:
            parents = t["parent_id"].to_pylist()
            parents[removed[0]] = "0" * 32
            t = t.set_column(t.schema.get_field_index("parent_id"), "parent_id", pa.array(parents, pa.string()))
            pq.write_table(t, f)
            v = validate_run(str(run), _env_for(any_run))
            failed = {(c.stage, c.check): c.message for c in v.failures}
            assert "its parent is not a member of its cluster" in failed[("fuzzy-dups", "parents")]
            assert t["id"][removed[0]].as_py() in failed[("fuzzy-dups", "parents")]
            return
    raise AssertionError("no near-duplicate removed in this run")


def test_marks_from_before_fuzzy_named_parents_pass_the_parents_check(any_run: Path, tmp_path: Path) -> None:
    """A run validated after an upgrade: its fuzzy marks were written before they named parents (fuzzy
    stage version < 5). The check says so instead of failing on the missing columns."""
    run = _copy(any_run, tmp_path)
    for f in _fuzzy_marks_files(run):
        pq.write_table(pq.read_table(f).drop_columns(["parent_id", "parent_source"]), f)
    v = validate_run(str(run), _env_for(any_run))
    (check,) = [c for c in v.checks if (c.stage, c.check) == ("fuzzy-dups", "parents")]
    assert check.status == "ok" and "before fuzzy dedup named parents" in check.message


def test_contaminated_doc_left_in(any_run: Path, tmp_path: Path) -> None:
    run = _copy(any_run, tmp_path)
    src, doc = _decontaminated_doc(run)
    name, row = _normalized_row(run, src, doc)
    _insert_row(_step_dir(run, f"consolidate-{src}") / "outputs" / "main" / name, row)
    stage, check, msg = _first_failure(run)
    assert (stage, check) == (f"consolidate-{src}", "no_contamination")
    assert "marked contaminated" in msg and doc in msg


def test_planted_text_found_even_without_marks(any_run: Path, tmp_path: Path) -> None:
    """Decontamination itself broken: no marks at all. The independent text search still finds the
    planted item in the output (and, earlier, in the decontaminate step's own planted check)."""
    run = _copy(any_run, tmp_path)
    src, doc = _decontaminated_doc(run)
    name, row = _normalized_row(run, src, doc)
    _insert_row(_step_dir(run, f"consolidate-{src}") / "outputs" / "main" / name, row)
    dec = _artifact(run, "decontaminate")["result"]["sources"]
    attrs = _step_dir(run, "decontaminate") / dec[src]["attributes"]
    for f in attrs.glob("*.parquet"):  # wipe the marks, keep the (now empty) co-partitioned files
        t = pq.read_table(f)
        pq.write_table(t.slice(0, 0), f)
    v = validate_run(str(run), _env_for(any_run))
    failed = {(c.stage, c.check): c.message for c in v.failures}
    assert "not marked" in failed[("decontaminate", "rows")] or "!=" in failed[("decontaminate", "rows")]
    assert "is not marked" in failed[("decontaminate", "planted")]
    assert "is still in" in failed[(f"consolidate-{src}", "no_contamination")]


def test_envelope_and_loss_checks(any_run: Path, tmp_path: Path) -> None:
    v = validate_run(str(any_run), dataclasses.replace(_env_for(any_run), fuzzy_fraction=(0.0, 0.001)))
    assert (v.first_failure.stage, v.first_failure.check) == ("fuzzy-dups", "envelope")
    assert "outside fuzzy_fraction [0, 0.001]" in v.first_failure.message
    v = validate_run(str(any_run), dataclasses.replace(_env_for(any_run), planted_min_found=5))
    assert (v.first_failure.stage, v.first_failure.check) == ("decontaminate", "planted")
    if read_plan(str(any_run)).step("train") is None:
        return
    run = _copy(any_run, tmp_path)
    metrics = _step_dir(run, "train") / "metrics.jsonl"
    lines = [json.loads(x) for x in metrics.read_text().splitlines()]
    for rec in lines:
        if rec.get("kind") == "train":
            rec["loss"] = 5.0 + rec["step"] / 100  # rising loss
    metrics.write_text("".join(json.dumps(r) + "\n" for r in lines))
    stage, check, msg = _first_failure(run)
    assert (stage, check) == ("train", "loss") and "did not decrease" in msg


# ------------------------------------------------------------------------------ the quality layer (smoke)
def _smoke(smoke_run) -> Path:
    prefix, _, _ = smoke_run
    return prefix / "runs" / "smoke"


def _set_text(parquet: Path, where, text_of) -> None:
    """Rewrite the text of the rows ``where(row)`` selects (ids and every other column unchanged)."""
    t = pq.read_table(parquet)
    rows = t.to_pylist()
    texts = [text_of(r) if where(r) else r["text"] for r in rows]
    i = t.schema.get_field_index("text")
    pq.write_table(t.set_column(i, t.schema.field(i), pa.array(texts, pa.string())), parquet)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_smoke_quality_layer_planted_items(smoke_run) -> None:
    """The bundled manifest's quality layer: code skips the prose chain, license/copyright texts get
    language ID (and line dedup and PII), and each planted item of smoke_web.jsonl is handled."""
    run = _smoke(smoke_run)
    plan = read_plan(str(run))
    names = {s.name for s in plan.steps}
    assert "quality-python-stdlib" not in names and "linededup-python-stdlib" not in names
    assert {"quality-licenses", "quality-debian-copyright", "quality-web", "pii-python-stdlib"} <= names
    assert {f"{st}-{src}" for st in ("linededup", "pii") for src in ("licenses", "debian-copyright", "web")} <= names
    for src in ("licenses", "debian-copyright"):  # language ID only: no prose rule ran, none removed
        c = _artifact(run, f"quality-{src}")["counters"]
        assert c["lang_in/en"] == c["docs_in"] and not [k for k in c if k.startswith("removed/")]
    v = validate_run(str(run), Envelopes())
    assert v.ok, [str(c) for c in v.failures]
    planted = v.summary["planted"]["quality"]
    assert set(planted) == {"non_english", "spam", "boilerplate", "pii"}
    assert planted["non_english"][0].startswith("web: removed by langid.languages")
    assert planted["spam"][0].startswith("web: removed by gopher_repetition.")
    msgs = {(c.stage, c.check): c.message for c in v.checks}
    assert "kept in the first copy only" in msgs[("linededup-web", "planted")]
    assert "redacted" in msgs[("pii-web", "planted")]
    web = _step_dir(run, "pii-web")
    final = duckdb.sql(f"select text from read_parquet('{web}/outputs/main/*.parquet') "
                       "where planted = 'pii'").fetchall()
    assert "<EMAIL_ADDRESS>" in final[0][0] and "<IP_ADDRESS>" in final[0][0] and "@example.org" not in final[0][0]
    tight = dataclasses.replace(Envelopes(), quality_rule_fraction=(0.0, 0.1))
    f = validate_run(str(run), tight).first_failure
    assert (f.stage, f.check) == ("quality-web", "rule_envelope") and "outside quality_rule_fraction" in f.message


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_smoke_quality_layer_seeded_faults(smoke_run, tmp_path: Path) -> None:
    """An address left in, a boilerplate line kept twice, a non-English page kept: each is named."""
    src_run = _smoke(smoke_run)
    # PII: the planted email comes back after redaction.
    run = _copy(src_run, tmp_path / "pii")
    main = next((_step_dir(run, "pii-web") / "outputs" / "main").glob("*.parquet"))
    _set_text(main, lambda r: r["planted"] == "pii",
              lambda r: r["text"].replace("<EMAIL_ADDRESS>", "jane.doe@example.org"))
    stage, check, msg = _first_failure(run)
    assert (stage, check) == ("pii-web", "planted") and "jane.doe@example.org" in msg
    # Line dedup: a later copy of the boilerplate keeps it (its text as line dedup read it).
    run = _copy(src_run, tmp_path / "linededup")
    before = {r[0]: r[1] for r in duckdb.sql(
        f"select source_id, text from read_parquet('{_step_dir(run, 'consolidate-web')}/outputs/main/*.parquet') "
        "where planted = 'boilerplate'").fetchall()}
    main = next((_step_dir(run, "linededup-web") / "outputs" / "main").glob("*.parquet"))
    later = next(r["source_id"] for r in pq.read_table(main).to_pylist()
                 if r["planted"] == "boilerplate" and r["text"] != before[r["source_id"]])
    _set_text(main, lambda r: r["source_id"] == later, lambda r: before[later])
    stage, check, msg = _first_failure(run)
    assert (stage, check) == ("linededup-web", "planted") and "expected only the first" in msg
    # Language ID: the German page is not in removed/ (kept instead).
    run = _copy(src_run, tmp_path / "langid")
    removed = next((_step_dir(run, "quality-web") / "outputs" / "removed").glob("*.parquet"))
    t = pq.read_table(removed)
    pq.write_table(t.filter(pc.invert(pc.starts_with(t["reason"], "langid."))), removed)
    v = validate_run(str(run), Envelopes())
    failed = {(c.stage, c.check): c.message for c in v.failures}
    assert "planted non_english document" in failed[("quality-web", "planted")]
    assert "was not removed" in failed[("quality-web", "planted")]


def test_docs_step_follows_user_and_quality_steps() -> None:
    """The documents the corpus-level stages read: the link of the source's chain in the plan that the
    attribute steps read (here after a user stage placed after_normalize, then the quality stage)."""
    from datakit.ferry.plan import RunPlan
    from datakit.stages.plan import Plan, PlanStep

    steps = (PlanStep("normalize-a", "1", "normalize", "a", "documents"),
             PlanStep("normalize-b", "2", "normalize", "b", "documents"),
             PlanStep("drop-short-a", "3", "after_normalize", "a", "documents", ("normalize-a",)),
             PlanStep("quality-a", "4", "quality", "a", "documents", ("drop-short-a",)),
             PlanStep("exact-dedup", "5", "exact", None, "attributes", ("quality-a", "normalize-b")),
             PlanStep("consolidate-a", "6", "consolidate", "a", "documents", ("quality-a", "exact-dedup")),
             PlanStep("linededup-a", "7", "linededup", "a", "documents", ("consolidate-a",)))
    chains = {"a": ("normalize-a", "drop-short-a", "quality-a", "consolidate-a", "linededup-a"),
              "b": ("normalize-b",)}
    plan = Plan(("a", "b"), steps, chains, attributes=("exact-dedup",))
    ctx = RunContext("/nonexistent", RunPlan("r", None, plan), Envelopes())
    assert ctx.docs_step("a") == "quality-a" and ctx.docs_step("b") == "normalize-b"
    ctx.artifacts = {"quality-a": {"counters": {"docs_in": 9, "docs_out": 7}},
                     "normalize-b": {"counters": {"records_out": 5, "docs_out": 5}}}
    assert ctx.docs_count("a") == 7 and ctx.docs_count("b") == 5


# ------------------------------------------------------------------------------ run outcomes (fast)
def test_tiny_run_records_status_history_and_report(tiny_run: Path) -> None:
    prefix = tiny_run.parent.parent
    status = json.loads((prefix / "status.json").read_text())
    assert status["status"] == "succeeded" and status["run_id"] == "tiny" and status["exit_code"] == 0
    (rec,) = read_history(str(prefix)).records
    assert rec["validation"]["ok"] and rec["summary"]["planted"]["found"] == ["tiny-bench:0"]
    assert (prefix / "report.html").exists() and 'data-run-id="tiny"' in (prefix / "report.html").read_text()
    assert (prefix / "ferry.lock").exists()


def test_failed_step_leaves_status_history_and_exit_1(tmp_path: Path) -> None:
    m = _tiny_manifest(tmp_path, broken_source=True)
    prefix = tmp_path / "prefix"
    r = CliRunner().invoke(main, ["ferry", "run", "--prefix", str(prefix), "--manifest", str(m), "--workers", "2",
                                  "--run-id", "red"])
    assert r.exit_code == 1, r.output
    status = json.loads((prefix / "status.json").read_text())
    assert status["status"] == "failed" and status["exit_code"] == 1
    assert (status["failing_stage"], status["failing_check"]) == ("normalize-blank", "built")
    assert "step status FAILED" in status["message"] and "blank" in status["message"]
    (rec,) = read_history(str(prefix)).records
    assert rec["status"] == "failed" and rec["failing"]["stage"] == "normalize-blank"
    states = {s["name"]: s["status"] for s in rec["steps"]}
    assert states["normalize-blank"] == "failed" and states["exact-dedup"] == "cascaded"
    assert states["normalize-code"] == "succeeded"
    checks = {(c["stage"], c["check"]): c["status"] for c in rec["validation"]["checks"]}
    assert checks[("exact-dedup", "built")] == "skipped"  # the cause is named once, not once per dependent
    page = (prefix / "report.html").read_text()
    assert 'data-status="failed"' in page and "normalize-blank: built" in page


def test_existing_run_id_and_bad_manifest_are_refused(tiny_run: Path, tmp_path: Path) -> None:
    prefix = tiny_run.parent.parent
    before = (prefix / "history.jsonl").read_text()
    r = CliRunner().invoke(ferry, ["run", "--prefix", str(prefix), "--run-id", "tiny",
                                   "--manifest", read_plan(str(tiny_run)).manifest])
    assert r.exit_code == 2 and "already exists" in r.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("sources:\n  - name: x\n    uri: /nonexistent/*.txt\n    format: txt\n")
    r = CliRunner().invoke(ferry, ["run", "--prefix", str(prefix), "--manifest", str(bad)])
    assert r.exit_code == 2 and "bad.yaml:4" in r.output and "nothing was run" in r.output
    assert (prefix / "history.jsonl").read_text() == before


@pytest.mark.parametrize("run_id", ["next\n", "next\r", " next"])
def test_a_run_id_is_matched_whole(tmp_path: Path, run_id: str) -> None:
    r = CliRunner().invoke(ferry, ["run", "--prefix", str(tmp_path / "prefix"), "--run-id", run_id])
    assert r.exit_code == 2 and f"run id {run_id!r} is not path-safe" in r.output
    assert not (tmp_path / "prefix").exists()


def test_a_ferry_that_died_is_recorded_by_the_next_one(tmp_path: Path) -> None:
    """SIGKILL/OOM leaves status.json at "running" and no history record; the next ferry (holding the
    lock, so the old one is surely gone) records it as failed, exactly once."""
    m = _tiny_manifest(tmp_path, broken_source=True)
    prefix = tmp_path / "prefix"
    prefix.mkdir()
    (prefix / "status.json").write_text(json.dumps({
        "run_id": "20260101T063000Z", "status": "running", "started": "2026-01-01T06:30:00Z", "pid": 4242,
        "host": "ferry-host", "run_dir": str(prefix / "runs" / "20260101T063000Z")}))
    r = CliRunner().invoke(ferry, ["run", "--prefix", str(prefix), "--manifest", str(m), "--run-id", "next"])
    assert r.exit_code == 1
    dead, nxt = read_history(str(prefix)).records
    assert dead["run_id"] == "20260101T063000Z" and dead["status"] == "failed"
    assert dead["failing"]["check"] == "finished" and "4242 on ferry-host died" in dead["failing"]["message"]
    assert nxt["run_id"] == "next"
    assert json.loads((prefix / "status.json").read_text())["run_id"] == "next"
    page = (prefix / "report.html").read_text()
    assert 'data-run-id="20260101T063000Z" data-status="failed"' in page


def test_validate_plain_datakit_run_with_manifest(tmp_path: Path) -> None:
    """`datakit run M` output (no ferry.json) validates through --manifest, i.e. build_steps' identities."""
    m = _tiny_manifest(tmp_path)
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["run", str(m), "--prefix", str(out), "--workers", "2", "--json"])
    assert r.exit_code == 0, r.output
    env = tmp_path / "env.yaml"
    env.write_text("decontaminate_fraction: [0, 0.5]\nfuzzy_fraction: [0, 0.5]\n")
    r = CliRunner().invoke(ferry, ["validate", str(out), "--manifest", str(m), "--envelopes", str(env), "-v"])
    assert r.exit_code == 0, r.output
    assert "ok      consolidate-code: no_contamination" in r.output and r.output.splitlines()[-1].startswith("OK: ")
    r = CliRunner().invoke(ferry, ["validate", str(out), "--manifest", str(m), "--json"])
    d = json.loads(r.output)
    assert r.exit_code == 1 and d["first_failure"]["check"] == "envelope"
    # without --manifest: the plan the run published (plan.json), the benchmarks from the manifest it names
    r = CliRunner().invoke(ferry, ["validate", str(out), "--envelopes", str(env), "-v"])
    assert r.exit_code == 0, r.output
    assert "ok      consolidate-code: no_contamination" in r.output and r.output.splitlines()[-1].startswith("OK: ")
    (tmp_path / "not-a-run").mkdir()
    r = CliRunner().invoke(ferry, ["validate", str(tmp_path / "not-a-run")])
    assert r.exit_code == 2 and "no ferry.json and no plan.json" in r.output and "--manifest" in r.output
