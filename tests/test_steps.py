"""Tests for datakit.steps: identity, markers, skip/mirror/dry-run/only/force, failures, leases.

Concurrency and crash tests use real processes (multiprocessing "spawn") racing on one prefix.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import time
import uuid
from pathlib import Path

import fsspec
import pytest

from datakit.steps import (
    ConfigError,
    Lease,
    LeaseLost,
    RunSummary,
    Step,
    StepContext,
    identity_of,
    read_events,
    run_steps,
    step_status,
)

pytestmark = pytest.mark.timeout(120)


# ---------------------------------------------------------------- helpers


def snapshot(root: Path) -> dict[str, tuple]:
    """Every file and dir under root with (mtime_ns, size, content-for-files)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.stat()
            out[str(p.relative_to(root))] = (st.st_mtime_ns, st.st_size,
                                             p.read_bytes() if p.is_file() else None)
    return out


def write_rows(ctx: StepContext) -> dict:
    n = ctx.config["n"]
    Path(ctx.path("rows.txt")).write_text("".join(f"{i}\n" for i in range(n)))
    ctx.increment("rows", n)
    return {"files": ["rows.txt"], "counters": {"written": 1}, "provenance": {"generator": "range"}}


def sum_rows(ctx: StepContext) -> dict:
    dep = ctx.deps["rows"]
    total = sum(int(x) for x in Path(dep.path(*dep.result["files"])).read_text().split())
    Path(ctx.path("sum.txt")).write_text(str(total))
    return {"total": total}


def dag(n: int = 5):
    rows = Step("rows", write_rows, {"n": n})
    total = Step("sum", sum_rows, {}, deps=(rows,))
    return rows, total


def counting(fn, calls: list):
    def wrapped(ctx):
        calls.append(ctx.name)
        return fn(ctx)
    return wrapped


# ---------------------------------------------------------------- identity


def test_identity_is_stable_across_prefixes_and_dict_order(tmp_path):
    rows, total = dag()
    same = Step("rows", write_rows, {"n": 5})
    assert identity_of(rows) == identity_of(same) == rows.identity
    assert len(rows.identity) == 10 and int(rows.identity, 16) >= 0
    assert Step("x", write_rows, {"a": 1, "b": [1, 2]}).identity == \
        Step("x", write_rows, {"b": (1, 2), "a": 1}).identity

    s1 = run_steps([total], str(tmp_path / "p1"))
    s2 = run_steps([total], str(tmp_path / "p2"))
    assert s1.ok and s2.ok
    # step dirs only: .datakit/ holds the prefix's caches (output stamps), not steps
    names1 = sorted(p.name for p in (tmp_path / "p1").iterdir() if p.is_dir() and not p.name.startswith("."))
    names2 = sorted(p.name for p in (tmp_path / "p2").iterdir() if p.is_dir() and not p.name.startswith("."))
    assert names1 == names2 == sorted([f"rows-{rows.identity}", f"sum-{total.identity}"])


def test_identity_changes_with_config_version_and_dep_identity():
    rows, total = dag(5)
    assert Step("rows", write_rows, {"n": 6}).identity != rows.identity
    assert Step("rows", write_rows, {"n": 5}, version="2").identity != rows.identity
    assert Step("rows2", write_rows, {"n": 5}).identity != rows.identity
    # sum's own config and version are unchanged, but its dep changed: new identity, new dir.
    total_b = Step("sum", sum_rows, {}, deps=(Step("rows", write_rows, {"n": 6}),))
    assert total_b.identity != total.identity
    # the function object is not part of identity (version is the promise).
    assert Step("rows", sum_rows, {"n": 5}).identity == rows.identity


def test_config_is_copied_so_later_mutation_cannot_change_identity():
    cfg = {"n": 5, "langs": ["en"]}
    step = Step("rows", write_rows, cfg)
    before = step.identity
    cfg["langs"].append("de")
    cfg["n"] = 7
    assert step.config == {"n": 5, "langs": ["en"]}
    assert Step("rows", write_rows, {"n": 5, "langs": ["en"]}).identity == before


@pytest.mark.parametrize("config, where", [
    ({"paths": ["rel/a", "/home/alice/data"]}, "config.paths[1]"),
    ({"src": {"dir": "~/corpus"}}, "config.src.dir"),
    ({"src": "file:///srv/x.jsonl"}, "config.src"),
    ({"s": {1, 2}}, "config.s"),
    ({"x": float("nan")}, "config.x"),
    ({"m": {3: "a"}}, "config.m"),
    ({"obj": object()}, "config.obj"),
])
def test_bad_configs_are_rejected_naming_the_key(config, where):
    with pytest.raises(ConfigError) as e:
        Step("bad", write_rows, config)
    assert "'bad'" in str(e.value) and where in str(e.value)


def test_remote_uris_and_relative_paths_are_allowed_in_config():
    step = Step("dl", write_rows, {"uri": "https://example.org/a.jsonl", "glob": "data/*.jsonl",
                                   "sep": "/", "comment": "//", "eos": "</s>"})
    assert len(step.identity) == 10


@pytest.mark.parametrize("name", ["", "a/b", ".hidden", "-x", "sp ace", "x" * 101, "web\n", "web\r", " web"])
def test_step_names_must_be_path_safe(name):
    with pytest.raises(ValueError, match="path-safe"):
        Step(name, write_rows, {})


def test_two_different_steps_with_one_name_are_rejected(tmp_path):
    a = Step("rows", write_rows, {"n": 1})
    b = Step("rows", write_rows, {"n": 2})
    with pytest.raises(ValueError, match="two different steps are named 'rows'"):
        run_steps([a, b], str(tmp_path))
    assert not tmp_path.joinpath("events.jsonl").exists()


def test_config_pointing_into_the_prefix_is_rejected():
    prefix = f"memory://dk-steps-{uuid.uuid4().hex}"
    step = Step("peek", write_rows, {"n": 1, "other": f"{prefix}/rows-123/rows.txt"})
    with pytest.raises(ValueError, match=r"config\.other points into the output prefix"):
        run_steps([step], prefix)


# ---------------------------------------------------------------- markers, results, skip


def test_markers_artifact_and_typed_results(tmp_path):
    rows, total = dag(5)
    summary = run_steps([total], str(tmp_path))
    assert isinstance(summary, RunSummary) and summary.status == "succeeded"
    assert [(s["name"], s["status"]) for s in summary.steps] == [("rows", "succeeded"), ("sum", "succeeded")]
    assert summary.result("sum") == {"total": 10}
    assert summary.steps[0]["counters"] == {"rows": 5, "written": 1}
    assert set(summary.steps[0]) >= {"name", "identity", "status", "output", "wall_s", "counters", "error"}

    d = tmp_path / f"rows-{rows.identity}"
    assert summary.steps[0]["output"] == str(d)
    status = json.loads((d / ".status").read_text())
    assert status["status"] == "SUCCESS" and status["pid"] == os.getpid()
    assert {"time", "host", "identity"} <= set(status)
    art = json.loads((d / "artifact.json").read_text())
    assert art["identity"] == rows.identity and art["config"] == {"n": 5} and art["version"] == "1"
    assert art["result"] == {"files": ["rows.txt"], "provenance": {"generator": "range"}}
    assert art["counters"] == {"rows": 5, "written": 1}
    assert art["code_version"] == __import__("datakit").__version__
    assert art["wall_s"] >= 0 and art["status"] == "SUCCESS"
    sum_art = json.loads((tmp_path / f"sum-{total.identity}" / "artifact.json").read_text())
    assert sum_art["deps"] == {"rows": {"identity": rows.identity, "output": str(d)}}
    # status is written last: not older than the artifact or the step's own outputs.
    st_ns = (d / ".status").stat().st_mtime_ns
    assert st_ns >= (d / "artifact.json").stat().st_mtime_ns >= (d / "rows.txt").stat().st_mtime_ns
    # no temp files left behind
    assert not [p for p in d.iterdir() if p.name.startswith(".tmp")]


def test_second_run_rewrites_nothing(tmp_path):
    calls: list = []
    rows = Step("rows", counting(write_rows, calls), {"n": 3})
    total = Step("sum", counting(sum_rows, calls), {}, deps=(rows,))
    assert run_steps([total], str(tmp_path)).ok
    assert calls == ["rows", "sum"]
    # .datakit/ holds the prefix's caches and run records, which any run may write (output stamps, its
    # own record while it runs); the steps' files and dirs are what must stay untouched
    before = {k: v for k, v in snapshot(tmp_path).items() if k != "events.jsonl" and not k.startswith(".datakit")}
    time.sleep(0.01)
    again = run_steps([total], str(tmp_path))
    assert [s["status"] for s in again.steps] == ["skipped", "skipped"]
    assert again.result("sum") == {"total": 3}           # typed results come back from the artifact
    assert again.steps[0]["counters"] == {"rows": 3, "written": 1}
    assert calls == ["rows", "sum"]
    after = {k: v for k, v in snapshot(tmp_path).items() if k != "events.jsonl" and not k.startswith(".datakit")}
    assert after == before


def test_result_must_be_a_json_dict(tmp_path):
    bad_type = Step("list", lambda ctx: [1, 2], {})
    bad_json = Step("set", lambda ctx: {"s": {1}}, {})
    bad_counters = Step("counters", lambda ctx: {"counters": {"n": "3"}}, {})
    s = run_steps([bad_type, bad_json, bad_counters], str(tmp_path))
    errs = {e["name"]: e["error"] for e in s.steps}
    assert s.status == "failed"
    assert "returned list" in errs["list"]
    assert "not JSON-serializable" in errs["set"]
    assert "dict of str -> int" in errs["counters"]
    none = run_steps([Step("none", lambda ctx: None, {})], str(tmp_path))  # None means "no result"
    assert none.ok and none.result("none") == {}


# ---------------------------------------------------------------- failures


def test_failure_cascades_but_independent_branches_run(tmp_path):
    def boom(ctx):
        Path(ctx.path("partial.txt")).write_text("half")
        raise RuntimeError("disk on fire")

    bad = Step("bad", boom, {"v": 1})
    child = Step("child", lambda ctx: {}, {}, deps=(bad,))
    grandchild = Step("grandchild", lambda ctx: {}, {}, deps=(child,))
    other = Step("other", lambda ctx: {"ok": True}, {})
    seen: list[dict] = []
    s = run_steps([grandchild, other], str(tmp_path), on_event=seen.append)
    by = {e["name"]: e for e in s.steps}
    assert s.status == "failed"
    assert by["bad"]["status"] == "failed" and by["bad"]["error"] == "RuntimeError: disk on fire"
    assert by["child"]["status"] == "cascaded" and "bad" in by["child"]["error"]
    assert by["grandchild"]["status"] == "cascaded"
    assert by["other"]["status"] == "succeeded" and s.result("other") == {"ok": True}
    assert not (tmp_path / child.dirname).exists()

    d = tmp_path / bad.dirname
    assert json.loads((d / ".status").read_text())["status"] == "FAILED"
    assert "disk on fire" in (d / "error.txt").read_text() and "Traceback" in (d / "error.txt").read_text()
    art = json.loads((d / "artifact.json").read_text())
    assert art["status"] == "FAILED" and "disk on fire" in art["traceback"]
    failed = [e for e in seen if e["event"] == "step_failed"]
    assert len(failed) == 1 and failed[0]["step"] == "bad" and "disk on fire" in failed[0]["error"]
    assert [e for e in seen if e["event"] == "run_finished"][0]["status"] == "failed"

    # Fixed implementation, same identity: the failed dir is cleared, then rebuilt.
    fixed = Step("bad", lambda ctx: {"fixed": True}, {"v": 1})
    s2 = run_steps([Step("grandchild", lambda ctx: {}, {}, deps=(Step("child", lambda ctx: {}, {}, deps=(fixed,)),))],
                   str(tmp_path))
    assert s2.ok and [e["status"] for e in s2.steps] == ["succeeded"] * 3
    assert not (d / "partial.txt").exists() and not (d / "error.txt").exists()


def test_stale_partial_output_is_cleared_before_rebuild(tmp_path):
    rows, _ = dag(2)
    d = tmp_path / rows.dirname
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "junk.parquet").write_bytes(b"partial")
    (d / "rows.txt").write_text("garbage\n")
    (d / ".status").write_text(json.dumps({"status": "RUNNING", "time": "x"}))
    s = run_steps([rows], str(tmp_path))
    assert s.steps[0]["status"] == "succeeded"
    assert sorted(p.name for p in d.iterdir() if not p.name.startswith(".lease")) == \
        [".status", "artifact.json", "outputs.manifest.json", "rows.txt"]
    assert (d / "rows.txt").read_text() == "0\n1\n"


def test_success_marker_with_mismatched_artifact_is_not_trusted(tmp_path):
    rows, _ = dag(2)
    assert run_steps([rows], str(tmp_path)).ok
    art = tmp_path / rows.dirname / "artifact.json"
    art.write_text(json.dumps({"identity": "0000000000", "result": {}}))
    assert run_steps([rows], str(tmp_path)).steps[0]["status"] == "succeeded"


def test_keyboard_interrupt_marks_failed_releases_lease_and_reraises(tmp_path):
    def interrupted(ctx):
        raise KeyboardInterrupt

    step = Step("slow", interrupted, {"x": 1})
    events: list[dict] = []
    with pytest.raises(KeyboardInterrupt):
        run_steps([step], str(tmp_path), on_event=events.append, lease_timeout_s=3600)
    st = json.loads((tmp_path / step.dirname / ".status").read_text())
    assert st["status"] == "FAILED" and "interrupted" in st["error"]
    assert [e["event"] for e in events][-1] == "step_failed"
    [state] = step_status([step], str(tmp_path))
    assert state["state"] == "FAILED" and state["lease"] == "released"
    # the lease was released: a rerun (huge lease timeout) does not wait, it rebuilds.
    s = run_steps([Step("slow", lambda ctx: {"ok": 1}, {"x": 1})], str(tmp_path), lease_timeout_s=3600)
    assert s.ok and s.steps[0]["status"] == "succeeded"


# ---------------------------------------------------------------- dry run, only, force, mirror


def test_dry_run_writes_nothing(tmp_path):
    rows, total = dag(4)
    prefix = tmp_path / "out"
    seen: list[dict] = []
    s = run_steps([total], str(prefix), dry_run=True, on_event=seen.append)
    assert not prefix.exists()
    assert s.dry_run and s.status == "succeeded"
    assert [(e["name"], e["status"]) for e in s.steps] == [("rows", "would_run"), ("sum", "would_run")]
    assert [e["event"] for e in seen] == ["step_would_run", "step_would_run"]

    assert run_steps([rows], str(prefix)).ok
    before = snapshot(prefix)
    extra = Step("extra", lambda ctx: {}, {}, deps=(total,))
    s = run_steps([extra], str(prefix), dry_run=True)
    assert [e["status"] for e in s.steps] == ["would_skip", "would_run", "would_run"]
    assert s.steps[0]["output"] == str(prefix / rows.dirname)
    s = run_steps([extra], str(prefix), dry_run=True, force=["rows"])
    assert [e["status"] for e in s.steps] == ["would_run", "would_run", "would_run"]
    assert snapshot(prefix) == before


def test_only_requires_built_deps_and_runs_just_those(tmp_path):
    calls: list = []
    rows = Step("rows", counting(write_rows, calls), {"n": 4})
    total = Step("sum", counting(sum_rows, calls), {}, deps=(rows,))
    with pytest.raises(ValueError, match=r"sum needs rows \(rows-"):
        run_steps([total], str(tmp_path), only=["sum"])
    with pytest.raises(ValueError, match="sum needs rows"):
        run_steps([total], str(tmp_path), only=["sum"], dry_run=True)
    with pytest.raises(ValueError, match=r"unknown step name\(s\) \['nope'\]"):
        run_steps([total], str(tmp_path), only=["nope"])
    assert calls == []

    s = run_steps([total], str(tmp_path), only=["rows"])
    assert [(e["name"], e["status"]) for e in s.steps] == [("rows", "succeeded")]
    s = run_steps([total], str(tmp_path), only=["sum"])
    assert [(e["name"], e["status"]) for e in s.steps] == [("sum", "succeeded")]
    assert s.result("sum") == {"total": 6} and calls == ["rows", "sum"]


def test_force_rebuilds_only_the_named_step(tmp_path):
    calls: list = []
    rows = Step("rows", counting(write_rows, calls), {"n": 4})
    total = Step("sum", counting(sum_rows, calls), {}, deps=(rows,))
    assert run_steps([total], str(tmp_path)).ok
    marker = tmp_path / rows.dirname / "stray.txt"
    marker.write_text("left by a human")
    s = run_steps([total], str(tmp_path), force=["rows"])
    assert [e["status"] for e in s.steps] == ["succeeded", "skipped"]
    assert calls == ["rows", "sum", "rows"]
    assert not marker.exists()  # a forced rebuild starts from an empty dir
    with pytest.raises(ValueError, match="excludes"):
        run_steps([total], str(tmp_path), only=["sum"], force=["rows"])


def test_mirror_hit_is_used_in_place_and_never_written(tmp_path):
    calls: list = []
    rows = Step("rows", counting(write_rows, calls), {"n": 5})
    total = Step("sum", counting(sum_rows, calls), {}, deps=(rows,))
    mirror, prefix = tmp_path / "mirror", tmp_path / "local"
    assert run_steps([rows], str(mirror)).ok
    before = snapshot(mirror)
    calls.clear()

    s = run_steps([total], str(prefix), mirror=str(mirror))
    by = {e["name"]: e for e in s.steps}
    assert by["rows"]["status"] == "skipped" and by["rows"]["location"] == "mirror"
    assert by["rows"]["output"] == str(mirror / rows.dirname)
    assert by["sum"]["status"] == "succeeded" and by["sum"]["output"] == str(prefix / total.dirname)
    assert s.result("sum") == {"total": 10} and calls == ["sum"]
    assert snapshot(mirror) == before
    assert not (prefix / rows.dirname).exists()
    states = {st["name"]: st for st in step_status([total], str(prefix), mirror=str(mirror))}
    assert states["rows"]["location"] == "mirror" and states["rows"]["state"] == "SUCCESS"
    assert states["rows"]["path"] == str(mirror / rows.dirname)
    assert states["sum"]["location"] == "prefix"

    # --only with a dep that exists only in the mirror is fine too.
    s = run_steps([total], str(tmp_path / "third"), mirror=str(mirror), only=["sum"])
    assert s.ok and calls == ["sum", "sum"]


# ---------------------------------------------------------------- why a step would run / ran


def reasons(summary: RunSummary) -> dict[str, str | None]:
    return {e["name"]: e["reason"] for e in summary.steps}


def dry_reasons(steps, prefix: Path, **kw) -> dict[str, str | None]:
    """Dry-run reasons, checking on the way that the dry run wrote nothing."""
    before = snapshot(prefix) if prefix.exists() else None
    seen: list[dict] = []
    s = run_steps(steps, str(prefix), dry_run=True, on_event=seen.append, **kw)
    assert (snapshot(prefix) if prefix.exists() else None) == before
    would_run = {e["step"]: e["reason"] for e in seen if e["event"] == "step_would_run"}
    assert would_run == {n: r for n, r in reasons(s).items() if r is not None}
    return reasons(s)


def test_reason_never_built_and_would_skip(tmp_path):
    rows, total = dag(3)
    assert dry_reasons([total], tmp_path / "out") == {
        "rows": "never built (no earlier output of rows under the prefix)",
        "sum": "never built (no earlier output of sum under the prefix)",
    }
    assert run_steps([rows], str(tmp_path / "out")).ok
    # a built step whose name is a prefix of another's is not an earlier build of it (nor the reverse)
    assert run_steps([Step("sum-extra", sum_rows, {}, deps=(rows,))], str(tmp_path / "out")).ok
    assert dry_reasons([total], tmp_path / "out") == {
        "rows": None, "sum": "never built (no earlier output of sum under the prefix)"}


def test_reason_forced(tmp_path):
    rows, total = dag(3)
    assert run_steps([total], str(tmp_path)).ok
    assert dry_reasons([total], tmp_path, force=["rows"]) == {"rows": "forced (--force)", "sum": None}


def test_reason_stage_version_bump(tmp_path):
    assert run_steps([Step("rows", write_rows, {"n": 3})], str(tmp_path)).ok
    assert dry_reasons([Step("rows", write_rows, {"n": 3}, version="2")], tmp_path) == {
        "rows": "stage version 1 -> 2"}
    # version wins over a config change made at the same time (the first kind that applies)
    assert dry_reasons([Step("rows", write_rows, {"n": 4}, version="2")], tmp_path) == {
        "rows": "stage version 1 -> 2"}


def test_reason_config_changed_names_dotted_keys(tmp_path):
    old = {"normalize": {"max_whitespace_run": 128, "lang": "en"}, "source": {"format": "jsonl"}, "n": 1}
    assert run_steps([Step("norm", write_rows, old)], str(tmp_path)).ok
    new = {"normalize": {"max_whitespace_run": 64, "lang": "en", "nfkc": True}, "source": {"format": "text"},
           "n": 1}
    assert dry_reasons([Step("norm", write_rows, new)], tmp_path) == {"norm": (
        'config changed: normalize.max_whitespace_run 128 -> 64, normalize.nfkc (unset) -> true, '
        'source.format "jsonl" -> "text"')}
    many = {f"k{i}": i for i in range(8)}
    assert dry_reasons([Step("norm", write_rows, many)], tmp_path)["norm"] == (
        "config changed: k0 (unset) -> 0, k1 (unset) -> 1, k2 (unset) -> 2, k3 (unset) -> 3, "
        "k4 (unset) -> 4 and 6 more")  # k5-k7 added; n, normalize, source removed


def test_reason_compares_with_the_newest_earlier_build(tmp_path):
    for n in (1, 3, 2):
        assert run_steps([Step("rows", write_rows, {"n": n})], str(tmp_path)).ok
    assert dry_reasons([Step("rows", write_rows, {"n": 5})], tmp_path) == {"rows": "config changed: n 2 -> 5"}


def test_reason_input_files_changed(tmp_path):
    from datakit.steps import fingerprint_files

    src = tmp_path / "src"
    src.mkdir()
    for name, text in {"a.py": "a = 1\n", "b.txt": "bee\n", "keep.txt": "same\n"}.items():
        (src / name).write_text(text)

    def step(extra: dict | None = None) -> Step:
        fp = fingerprint_files(sorted(str(p) for p in src.iterdir()), None)
        return Step("norm", write_rows, {"n": 1, "input": fp.digest, **(extra or {})}, inputs=fp.files)

    prefix = tmp_path / "out"
    assert run_steps([step()], str(prefix)).ok
    assert dry_reasons([step()], prefix) == {"norm": None}
    (src / "a.py").write_text("a = 2\n")
    (src / "b.txt").unlink()
    (src / "c.txt").write_text("sea\n")
    # the digest in config changed too, but that change IS the input files: they are named instead
    assert dry_reasons([step()], prefix) == {
        "norm": "input files changed (incremental: 1 new, 1 changed, 1 removed of 3): a.py (changed), b.txt (removed), "
                "c.txt (added)"}
    # a real config change is reported (first kind that applies) without the digest noise
    assert dry_reasons([step({"lang": "de"})], prefix) == {"norm": 'config changed: lang (unset) -> "de"'}
    for i in range(7):
        (src / f"new{i}.txt").write_text(str(i))
    assert dry_reasons([step()], prefix)["norm"] == (
        "input files changed (incremental: 8 new, 1 changed, 1 removed of 10): a.py (changed), b.txt (removed), "
        "c.txt (added), new0.txt (added), "
        "new1.txt (added) and 5 more")


def test_reason_dependency_rebuilt(tmp_path):
    rows, total = dag(3)
    assert run_steps([total], str(tmp_path)).ok
    rows4 = Step("rows", write_rows, {"n": 4})
    assert dry_reasons([Step("sum", sum_rows, {}, deps=(rows4,))], tmp_path) == {
        "rows": "config changed: n 3 -> 4", "sum": "dependency rebuilt: rows"}
    other = Step("other", lambda ctx: {}, {})
    assert dry_reasons([Step("sum", sum_rows, {}, deps=(rows, other))], tmp_path) == {
        "rows": None, "other": "never built (no earlier output of other under the prefix)",
        "sum": "dependency rebuilt: other (added)"}


def test_reason_damaged_or_unfinished_output(tmp_path):
    rows, _ = dag(3)
    d = tmp_path / rows.dirname
    assert run_steps([rows], str(tmp_path)).ok
    (d / "artifact.json").write_text("{not json")
    assert dry_reasons([rows], tmp_path) == {"rows": (
        f"output damaged or unfinished: SUCCESS but artifact.json is unreadable or records another "
        f"identity at {d}")}
    (d / ".status").write_text(json.dumps({"status": "RUNNING", "time": "x"}))
    assert dry_reasons([rows], tmp_path) == {"rows": f"output damaged or unfinished: RUNNING at {d}"}
    (d / ".status").unlink()
    assert dry_reasons([rows], tmp_path) == {"rows": f"output damaged or unfinished: no .status marker at {d}"}

    def boom(ctx):
        raise RuntimeError("boom")

    bad = Step("bad", boom, {})
    assert run_steps([bad], str(tmp_path)).status == "failed"
    assert dry_reasons([bad], tmp_path) == {
        "bad": f"output damaged or unfinished: FAILED at {tmp_path / bad.dirname}"}


def test_real_runs_record_reasons_inputs_stage_and_source(tmp_path):
    seen: list[dict] = []
    rows = Step("rows", write_rows, {"n": 2}, inputs={"x/a.txt": "ab" * 32}, stage="generate", source="web")
    total = Step("sum", sum_rows, {}, deps=(rows,))
    assert rows.identity == Step("rows", write_rows, {"n": 2}).identity  # descriptive fields: not identity
    s = run_steps([total], str(tmp_path), on_event=seen.append)
    assert reasons(s) == {"rows": "never built (no earlier output of rows under the prefix)",
                          "sum": "never built (no earlier output of sum under the prefix)"}
    started = {e["step"]: e["reason"] for e in seen if e["event"] == "step_started"}
    assert started == reasons(s)
    art = json.loads((tmp_path / rows.dirname / "artifact.json").read_text())
    assert (art["inputs"], art["stage"], art["source"]) == ({"x/a.txt": "ab" * 32}, "generate", "web")
    sum_art = json.loads((tmp_path / total.dirname / "artifact.json").read_text())
    assert (sum_art["inputs"], sum_art["stage"], sum_art["source"]) == ({}, "", None)
    assert reasons(run_steps([total], str(tmp_path))) == {"rows": None, "sum": None}
    s = run_steps([Step("sum", sum_rows, {}, version="2", deps=(rows,))], str(tmp_path))
    assert reasons(s) == {"rows": None, "sum": "stage version 1 -> 2"}
    with pytest.raises(TypeError, match="inputs must be"):
        Step("rows", write_rows, {}, inputs={"a": 1})


def _fsspec_rows(ctx: StepContext) -> dict:
    with fsspec.open(ctx.path("rows.txt"), "w") as f:
        f.write("x\n" * ctx.config["n"])
    return {}


def test_reasons_on_a_memory_fsspec_prefix():
    prefix = f"memory://dk-reasons-{uuid.uuid4().hex}"
    rows = Step("rows", _fsspec_rows, {"n": 3})
    assert run_steps([Step("sum", lambda ctx: {}, {}, deps=(rows,))], prefix).ok
    rows4 = Step("rows", _fsspec_rows, {"n": 4})
    s = run_steps([Step("sum", lambda ctx: {}, {}, deps=(rows4,))], prefix, dry_run=True)
    assert reasons(s) == {"rows": "config changed: n 3 -> 4", "sum": "dependency rebuilt: rows"}
    fs = fsspec.filesystem("memory")
    assert not fs.exists(f"{prefix[len('memory://'):]}/{rows4.dirname}")


# ---------------------------------------------------------------- events, status, fsspec


def test_events_jsonl_records_every_step(tmp_path):
    def chatty(ctx):
        ctx.log("halfway", done=1)
        return {}

    rows, total = dag(2)
    seen: list[dict] = []
    run_steps([total, Step("chatty", chatty, {})], str(tmp_path), on_event=seen.append)
    run_steps([total], str(tmp_path))
    events = read_events(str(tmp_path))
    kinds = [(e["event"], e.get("step")) for e in events]
    assert kinds == [
        ("run_started", None),
        ("step_started", "rows"), ("step_succeeded", "rows"),
        ("step_started", "sum"), ("step_succeeded", "sum"),
        ("step_started", "chatty"), ("step_log", "chatty"), ("step_succeeded", "chatty"),
        ("run_finished", None),
        ("run_started", None), ("step_skipped", "rows"), ("step_skipped", "sum"), ("run_finished", None),
    ]
    assert seen == events[:9]
    done = [e for e in events if e["event"] == "step_succeeded"]
    assert all(e["wall_s"] >= 0 and e["identity"] and e["run_id"] for e in done)
    assert len({e["run_id"] for e in events}) == 2
    assert [e for e in events if e["event"] == "step_log"][0]["done"] == 1


def test_step_status_reports_states(tmp_path):
    rows, total = dag(3)
    states = step_status([total], str(tmp_path))
    assert [(s["name"], s["state"], s["lease"]) for s in states] == [("rows", "MISSING", None), ("sum", "MISSING", None)]
    assert not tmp_path.joinpath(rows.dirname).exists()
    run_steps([rows], str(tmp_path))
    states = step_status([total], str(tmp_path))
    assert states[0]["state"] == "SUCCESS" and states[0]["path"] == str(tmp_path / rows.dirname)
    assert states[0]["time"] and states[1]["state"] == "MISSING"


def test_memory_filesystem_prefix():
    prefix = f"memory://dk-steps-{uuid.uuid4().hex}"

    def produce(ctx):
        with fsspec.open(ctx.path("data.txt"), "w") as f:
            f.write("a b c")
        return {"file": "data.txt"}

    def consume(ctx):
        dep = ctx.deps["produce"]
        with fsspec.open(dep.path(dep.result["file"]), "r") as f:
            return {"words": len(f.read().split())}

    p = Step("produce", produce, {})
    c = Step("consume", consume, {}, deps=(p,))
    s = run_steps([c], prefix)
    assert s.ok and s.result("consume") == {"words": 3}
    assert s.steps[0]["output"].startswith("memory://") and s.steps[0]["output"].endswith(p.dirname)
    fs = fsspec.filesystem("memory")
    root = prefix[len("memory://"):]
    assert json.loads(fs.cat_file(f"{root}/{c.dirname}/.status"))["status"] == "SUCCESS"
    s2 = run_steps([c], prefix)
    assert [e["status"] for e in s2.steps] == ["skipped", "skipped"]
    assert [st["state"] for st in step_status([c], prefix)] == ["SUCCESS", "SUCCESS"]
    assert len(read_events(prefix)) == 10  # 6 for the build, 4 for the skip run


# ---------------------------------------------------------------- leases (in process)


def test_lease_excludes_a_second_holder_until_release(tmp_path):
    import threading

    a = Lease(str(tmp_path), timeout_s=30)
    a.acquire()
    got = threading.Event()
    waited: list = []
    b = Lease(str(tmp_path), timeout_s=30, poll_s=0.02)
    t = threading.Thread(target=lambda: (b.acquire(on_wait=waited.append), got.set()))
    t.start()
    assert not got.wait(0.3)  # b is blocked while a holds a live lease
    assert waited and waited[0]["owner"] == a.owner
    a.release()
    t.join(10)
    assert got.is_set() and b.gen == 2
    b.check()
    b.release()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lease.000002"]


def test_stale_lease_is_taken_over_and_old_holder_learns_it_lost(tmp_path):
    # heartbeat far slower than the timeout: a's record goes stale although its process lives.
    a = Lease(str(tmp_path), timeout_s=0.2, heartbeat_s=60)
    a.acquire()
    b = Lease(str(tmp_path), timeout_s=0.2, poll_s=0.02)
    b.acquire()
    assert b.gen == a.gen + 1
    with pytest.raises(LeaseLost, match="taken over"):
        a.check()
    a.release()  # must not clobber b's record
    b.check()
    b.release()


# ---------------------------------------------------------------- real processes

CTX = mp.get_context("spawn")


def _racer_step(count_file: str) -> Step:
    def build(ctx):
        with open(count_file, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(0.5)
        Path(ctx.path("out.txt")).write_text("done")
        return {"pid": os.getpid()}
    return Step("racy", build, {"k": "v"})


def _racer(prefix: str, count_file: str, barrier, queue) -> None:
    step = _racer_step(count_file)
    barrier.wait()
    s = run_steps([step], prefix, lease_timeout_s=5)
    queue.put(s.to_dict())


def test_two_concurrent_runners_never_double_build(tmp_path):
    count_file = str(tmp_path / "calls.txt")
    prefix = str(tmp_path / "out")
    barrier, queue = CTX.Barrier(2), CTX.Queue()
    procs = [CTX.Process(target=_racer, args=(prefix, count_file, barrier, queue)) for _ in range(2)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert len(Path(count_file).read_text().split()) == 1  # the step fn ran exactly once
    statuses = sorted(r["steps"][0]["status"] for r in results)
    assert statuses == ["skipped", "succeeded"]
    assert all(r["status"] == "succeeded" for r in results)
    step = _racer_step(count_file)
    assert (Path(prefix) / step.dirname / "out.txt").read_text() == "done"
    kinds = [e["event"] for e in read_events(prefix) if e.get("step") == "racy"]
    assert kinds.count("step_started") == 1 and kinds.count("step_skipped") == 1


def _hanging_step(flag_dir: str) -> Step:
    def build(ctx):
        Path(ctx.path("partial.bin")).write_bytes(b"half written")
        Path(flag_dir, "started").write_text(str(os.getpid()))
        while not Path(flag_dir, "go").exists():
            time.sleep(0.02)
        return {"who": "child"}
    return Step("victim", build, {"n": 1})


def _hanging_runner(prefix: str, flag_dir: str, lease_timeout_s: float, queue) -> None:
    s = run_steps([_hanging_step(flag_dir)], prefix, lease_timeout_s=lease_timeout_s)
    queue.put(s.to_dict())


def _wait_for(path: Path, proc, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if not proc.is_alive():
            raise AssertionError(f"child exited with {proc.exitcode} before creating {path}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never appeared")
        time.sleep(0.02)


def test_sigkilled_run_leaves_running_and_rerun_rebuilds(tmp_path):
    prefix, flags = tmp_path / "out", tmp_path / "flags"
    flags.mkdir()
    queue = CTX.Queue()  # kept referenced: the child unpickles it after start()
    proc = CTX.Process(target=_hanging_runner, args=(str(prefix), str(flags), 3600.0, queue))
    proc.start()
    _wait_for(flags / "started", proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(30)
    step = _hanging_step(str(flags))
    d = prefix / step.dirname
    assert json.loads((d / ".status").read_text())["status"] == "RUNNING"
    [state] = step_status([step], str(prefix), lease_timeout_s=3600)
    assert state["state"] == "RUNNING" and state["lease"] == "dead"

    # Even with a huge heartbeat timeout, a lease whose process is gone (same machine) is taken over.
    fixed = Step("victim", lambda ctx: {"who": "rerun"}, {"n": 1})
    s = run_steps([fixed], str(prefix), lease_timeout_s=3600)
    assert s.ok and s.steps[0]["status"] == "succeeded" and s.result("victim") == {"who": "rerun"}
    assert not (d / "partial.bin").exists()


def test_paused_holder_goes_stale_is_taken_over_and_cannot_commit(tmp_path):
    prefix, flags = tmp_path / "out", tmp_path / "flags"
    flags.mkdir()
    queue = CTX.Queue()
    proc = CTX.Process(target=_hanging_runner, args=(str(prefix), str(flags), 1.0, queue))
    proc.start()
    try:
        _wait_for(flags / "started", proc)
        os.kill(proc.pid, signal.SIGSTOP)  # alive but silent: its heartbeat goes stale
        waits: list = []
        s = run_steps([Step("victim", lambda ctx: {"who": "parent"}, {"n": 1})], str(prefix),
                      lease_timeout_s=1.0, on_event=lambda e: waits.append(e["event"]))
        assert s.ok and s.steps[0]["status"] == "succeeded"
        assert "step_waiting" in waits
    finally:
        (flags / "go").write_text("")
        os.kill(proc.pid, signal.SIGCONT)
    child = queue.get(timeout=60)
    proc.join(30)
    assert child["status"] == "failed" and "taken over" in child["steps"][0]["error"]
    d = prefix / _hanging_step(str(flags)).dirname
    assert json.loads((d / "artifact.json").read_text())["result"] == {"who": "parent"}
    assert json.loads((d / ".status").read_text())["status"] == "SUCCESS"


def _partial_then_succeed(ctx):
    marker = os.path.join(ctx.output, "partial.txt")
    seen = os.path.exists(marker)
    if not seen:
        with open(marker, "w") as f:
            f.write("half done")
        raise RuntimeError("crashed mid-step")
    return {"resumed": seen}


@pytest.mark.parametrize("resumable", [True, False])
def test_resumable_steps_keep_partial_output_others_start_clean(tmp_path, resumable):
    step = Step("resumable-or-not", _partial_then_succeed, {}, resumable=resumable)
    first = run_steps([step], str(tmp_path))
    assert first.status == "failed"
    second = run_steps([step], str(tmp_path))
    if resumable:
        assert second.status == "succeeded" and second.result("resumable-or-not")["resumed"] is True
    else:  # the stale partial file was cleared, so the step crashed again from scratch
        assert second.status == "failed"
    assert step.identity == Step("resumable-or-not", _partial_then_succeed, {}).identity


# ---------------------------------------------------------------- dry-run plan: reused, incremental, full


def write_rows_keyed(ctx: StepContext) -> dict:
    """write_rows, recording its file under a content key as a per-file reuse step does."""
    from datakit.steps import reuse

    out = write_rows(ctx)
    reuse.write(ctx.output, {reuse.content_key(ctx.config["n"]): reuse.Unit(("rows.txt",), {"docs_out": 1})})
    return {**out, "counters": {**out["counters"], "docs_out": ctx.config["n"]}}


def test_dry_run_plan_says_reused_incremental_or_full(tmp_path):
    from datakit.steps import fingerprint_files

    src = tmp_path / "src"
    src.mkdir()
    for name in ("a.txt", "b.txt"):
        (src / name).write_text(name)

    def steps(n: int) -> list[Step]:
        fp = fingerprint_files(sorted(str(p) for p in src.iterdir()), None)
        keyed = Step("keyed", write_rows_keyed, {"n": n, "input": fp.digest}, inputs=fp.files)
        return [keyed, Step("plain", write_rows, {"n": n}), Step("sum", sum_rows, {}, deps=(Step("rows", write_rows, {"n": 1}),))]

    prefix = tmp_path / "out"
    assert run_steps(steps(3), str(prefix)).ok
    plans = {e["name"]: e["plan"] for e in run_steps(steps(3), str(prefix), dry_run=True).steps}
    assert set(m["mode"] for m in plans.values()) == {"reused"}
    (src / "a.txt").write_text("changed")
    (src / "c.txt").write_text("new")
    plans = {e["name"]: e["plan"] for e in run_steps(steps(4), str(prefix), dry_run=True).steps}
    earlier = next(p.name for p in prefix.iterdir() if p.name.startswith("keyed-"))
    assert plans["keyed"] == {"mode": "incremental", "earlier": earlier, "earlier_documents": 3,
                              "files": {"new": 1, "changed": 1, "removed": 0, "total": 3}}
    assert plans["plain"] == {"mode": "full"}  # its earlier build recorded no per-file reuse: nothing to take
    assert plans["rows"] == plans["sum"] == {"mode": "reused"}
    forced = {e["name"]: e["plan"] for e in run_steps(steps(4), str(prefix), dry_run=True, force=["keyed"]).steps}
    assert forced["keyed"] == {"mode": "full"}


# ---------------------------------------------------------------- verified stamps: re-read only what changed


def _settle(path: Path) -> None:
    """Date a file's mtime 10 s back, as if written before the last run (a stamp needs a settled stat)."""
    t = path.stat().st_mtime_ns - 10 * 10**9
    os.utime(path, ns=(t, t))


def test_a_verified_output_is_trusted_by_its_stat_and_any_write_rebuilds_it(tmp_path):
    from datakit.core.fsio import xxh3_file
    from datakit.steps.stamps import Stamps

    prefix = tmp_path / "out"
    rows, total = dag()
    assert run_steps([total], str(prefix)).ok
    out = prefix / rows.dirname / "rows.txt"
    _settle(out)
    assert [e["status"] for e in run_steps([total], str(prefix)).steps] == ["skipped", "skipped"]
    stamps = Stamps.of_prefix(str(prefix))
    assert stamps.vouches(str(out), xxh3_file(str(out))) is not None  # read once, stamped by the run

    st = out.stat()
    out.write_text(out.read_text().replace("3", "7"))  # same size, other bytes: a new mtime
    s = run_steps([total], str(prefix))
    assert [e["status"] for e in s.steps] == ["succeeded", "succeeded"]
    assert "rows.txt content changed" in s.steps[0]["reason"]

    # The stat is what is trusted (git's rule): bytes changed behind a restored mtime and inode are not
    # read again. Any ordinary write changes the mtime, so this takes a deliberate os.utime.
    _settle(out)
    assert run_steps([total], str(prefix)).ok  # stamps the rebuilt file
    st = out.stat()
    out.write_text(out.read_text().replace("3", "7"))
    os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert [e["status"] for e in run_steps([total], str(prefix)).steps] == ["skipped", "skipped"]
    assert [e["status"] for e in run_steps([total], str(prefix), fast=True).steps] == ["skipped", "skipped"]


def test_an_output_is_stamped_only_when_its_mtime_is_behind_the_file_systems_clock(tmp_path):
    """A stat vouches for content only when any later write must change it: the file's mtime already
    behind the clock that stamps writes where it lives (`fsio.clock_ns`, read before hashing), or older
    than the racy window. Mtimes are set by hand (os.utime), so no clock tick is waited for."""
    from datakit.core.fsio import clock_ns, xxh3_file
    from datakit.steps.fingerprint import RACY_WINDOW_S
    from datakit.steps.stamps import Stamps

    d = tmp_path / "step"
    d.mkdir()
    clock = clock_ns(str(d))
    assert clock is not None and abs(clock - time.time_ns()) < 60 * 10**9
    assert os.listdir(d) == []  # the probe file is gone
    behind, same_tick, ahead = (d / n for n in ("behind", "same", "ahead"))
    young = int(RACY_WINDOW_S * 10**9) // 2  # inside the racy window: the wall clock alone would refuse it
    for path, mtime in ((behind, clock - young), (same_tick, clock), (ahead, clock + young)):
        path.write_bytes(b"rows " + path.name.encode())
        os.utime(path, ns=(mtime, mtime))
    stamps = Stamps.of_prefix(str(tmp_path))
    for path in (behind, same_tick, ahead):
        assert stamps.xxh3(str(path), clock) == xxh3_file(str(path))
    assert stamps.vouches(str(behind), xxh3_file(str(behind))) is not None
    assert stamps.vouches(str(same_tick), xxh3_file(str(same_tick))) is None  # a rewrite in that tick keeps it
    assert stamps.vouches(str(ahead), xxh3_file(str(ahead))) is None
    # without the file system's clock, the wall clock's window decides: it is too young
    other = Stamps.of_prefix(str(tmp_path / "other"))
    other.xxh3(str(behind))
    assert other.vouches(str(behind), xxh3_file(str(behind))) is None
    assert clock_ns(str(tmp_path / "missing")) is None and clock_ns("memory://bucket/x") is None


def test_a_build_stamps_its_outputs_so_the_next_run_reads_none_of_them(tmp_path, monkeypatch):
    """The manifest hashes a step's outputs after reading the file system's clock in its dir: an output
    written before that clock's tick is stamped, and the next run's content check reads nothing. The
    clock is moved a second on (as if the manifest came a tick later) so no tick is waited for; one
    written in the same tick is not stamped, and the next run reads it again."""
    from datakit.core import fsio
    from datakit.steps.stamps import Stamps

    real_clock, real_xxh3 = fsio.clock_ns, fsio.xxh3_file
    reads: list[str] = []
    monkeypatch.setattr(fsio, "xxh3_file", lambda p: reads.append(p) or real_xxh3(p))
    for offset, stamped in ((10**9, True), (-(10**9), False)):
        prefix = tmp_path / f"out{offset}"
        rows, total = dag()
        monkeypatch.setattr(fsio, "clock_ns", lambda d, o=offset: real_clock(d) + o)
        assert run_steps([total], str(prefix)).ok
        monkeypatch.setattr(fsio, "clock_ns", real_clock)
        out = prefix / rows.dirname / "rows.txt"
        assert (Stamps.of_prefix(str(prefix)).vouches(str(out), real_xxh3(str(out))) is not None) is stamped
        reads.clear()
        assert [e["status"] for e in run_steps([total], str(prefix)).steps] == ["skipped", "skipped"]
        assert (str(out) in reads) is not stamped


def test_a_manifest_takes_the_digests_a_writer_recorded_while_the_files_are_the_ones_it_published(tmp_path,
                                                                                                  monkeypatch):
    """A file published with `fsio.write_noted` is not read back for the step's manifest while its stat
    is the one the writer saw (and is stamped like a file read, its mtime behind the clock); one changed
    since, even to the same size, is read; on a store with no stat, the size decides."""
    from datakit.core import fsio
    from datakit.steps import verify
    from datakit.steps.stamps import Stamps

    step_dir = tmp_path / "step"
    (step_dir / "outputs").mkdir(parents=True)
    a = fsio.write_noted(str(step_dir / "outputs" / "a.bin"), b"alpha" * 100)
    b = fsio.write_noted(str(step_dir / "outputs" / "b.bin"), b"bravo" * 100)
    (step_dir / "outputs" / "b.bin").write_bytes(b"BRAVO" * 100)  # same size, new bytes, a new stat
    os.utime(step_dir / "outputs" / "b.bin", ns=(b.mtime_ns + 10**9, b.mtime_ns + 10**9))
    real_xxh3, real_clock = fsio.xxh3_file, fsio.clock_ns
    reads: list[str] = []
    monkeypatch.setattr(fsio, "xxh3_file", lambda p: reads.append(p) or real_xxh3(p))
    monkeypatch.setattr(fsio, "clock_ns", lambda d: real_clock(d) + 10**9)  # as if hashed a tick later
    stamps = Stamps.of_prefix(str(tmp_path))
    files = {f.path: f for f in verify.build_manifest(str(step_dir), stamps, written=[a, b])}
    assert files["outputs/a.bin"].xxh3_128 == a.xxh3_128 == real_xxh3(a.path)
    assert files["outputs/b.bin"].xxh3_128 == real_xxh3(b.path) != b.xxh3_128
    assert reads == [b.path]
    assert stamps.vouches(a.path, a.xxh3_128) is not None  # the next run's check reads it no more
    # no stat on an object store: the size is what says it is the file published
    remote = fsio.Written("memory://bucket/step/outputs/a.bin", a.size, "0" * 32)
    assert verify._written_digest(remote.path, (a.size, None), remote, None, None) == "0" * 32
    assert verify._written_digest(remote.path, (a.size + 1, None), remote, None, None) is None
