"""`datakit gc` beside a running `datakit run`: the run's whole plan (finished outputs it still reads,
not only the step it is building) is kept and reported, and removed once the run has ended."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from helpers_gate import datakit, gate_env, gated_corpus, open_gate, wait_for_gate


def _step_dirs(out) -> set[str]:
    return {p.name for p in out.iterdir() if p.is_dir() and re.fullmatch(r".+-[0-9a-f]{10}", p.name)}


@pytest.mark.timeout(400)
def test_gc_keeps_what_a_running_run_reads_and_removes_it_after(tmp_path):
    run_manifest = gated_corpus(tmp_path, "out")
    other = gated_corpus(tmp_path, "out", source="other")  # its plan shares no step with the run's
    env = gate_env(tmp_path)
    proc = datakit("run", str(run_manifest), "--workers", "2", cwd=tmp_path, env=env)
    try:
        wait_for_gate(tmp_path, proc)
        out = tmp_path / "out"
        built = _step_dirs(out)
        assert any(n.startswith("consolidate-code-") for n in built)  # finished, and read by what follows

        gc = datakit("gc", str(other), "--json", cwd=tmp_path)
        report = json.loads(gc.communicate(timeout=120)[0])
        assert gc.returncode == 0 and report["removed"] == []
        ((run_id, kept),) = report["kept_in_use"].items()
        assert set(kept) == built and _step_dirs(out) == built
        assert [r["run_id"] for r in report["runs"]] == [run_id] and report["runs"][0]["started"]

        gc = datakit("gc", str(other), cwd=tmp_path)
        text = gc.communicate(timeout=120)[0]
        assert gc.returncode == 0, text
        assert f"kept {len(built)} step dir(s) a running run ({run_id}, started " in text
        assert "removed 0 outdated step output(s)" in text
    finally:
        open_gate(tmp_path)
        _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "datakit run: succeeded" in err
    finished = _step_dirs(out)
    assert not (out / ".datakit" / "runs").exists()  # the run's record went with it

    gc = datakit("gc", str(other), "--json", cwd=tmp_path)
    report = json.loads(gc.communicate(timeout=120)[0])
    assert sorted(report["removed"]) == sorted(finished) and report["kept_in_use"] == {}
    assert _step_dirs(out) == set()


def _write_rows(ctx):
    (Path(ctx.output) / "rows.txt").write_text("1\n2\n")
    return {"rows": 2}


def test_a_crashed_runs_record_protects_nothing_and_is_removed(tmp_path):
    """A record whose heartbeat is older than the lease timeout is a crashed run's: gc removes the dirs
    it names and the record; a live record's dirs are kept."""
    from datakit.steps import Step, run_steps
    from datakit.steps.gc import collect_garbage
    from datakit.steps.runs import RunRecord, read_runs

    a, b = Step("a", _write_rows, config={"n": 1}), Step("b", _write_rows, config={"n": 2})
    assert run_steps([a, b], str(tmp_path)).ok
    runs = tmp_path / ".datakit" / "runs"
    runs.mkdir(parents=True)
    stale = {"run_id": "crashed", "host": "elsewhere@1", "pid": 1, "started": "2020-01-01T00:00:00Z",
             "heartbeat": time.time() - 120, "step_dirs": [a.dirname]}
    (runs / "crashed.json").write_text(json.dumps(stale))
    with RunRecord(str(tmp_path), "alive", [b.dirname], timeout_s=60):
        assert {r["run_id"]: r["state"] for r in read_runs(str(tmp_path), 60)} == {"crashed": "stale", "alive": "live"}
        report = collect_garbage([], str(tmp_path), lease_timeout_s=60)
        assert report.removed == [a.dirname] and report.kept_in_use == {"alive": [b.dirname]}
        assert [r["run_id"] for r in report.runs] == ["alive"]
        assert not (runs / "crashed.json").exists() and (tmp_path / b.dirname).is_dir()
    assert not runs.exists()
    assert collect_garbage([], str(tmp_path)).removed == [b.dirname]
