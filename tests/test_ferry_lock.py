"""The ferry lock (no two ferries overlap on a prefix), retention pruning, envelope files."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from datakit.ferry import Envelopes, FerryLocked, ferry_lock, load_envelopes, prune_runs
from datakit.cli.ferry import ferry
from datakit.ferry.plan import RunPlan, utc_iso, write_plan
from datakit.stages.plan import Plan

HOLDER = """\
import sys, time
from datakit.ferry.lock import ferry_lock
with ferry_lock(sys.argv[1], run_id="holder-run", since="now"):
    print("locked", flush=True)
    time.sleep(120)
"""


@pytest.fixture
def held_lock(tmp_path: Path):
    """Another process holding the prefix's ferry lock (as a running ferry would)."""
    prefix = tmp_path / "prefix"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(prefix)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        yield prefix, proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def test_second_ferry_is_refused_with_the_holder_named(held_lock) -> None:
    prefix, proc = held_lock
    r = CliRunner().invoke(ferry, ["run", "--prefix", str(prefix)])
    assert r.exit_code == 3, r.output
    assert "another ferry is running" in r.output
    assert "holder-run" in r.output and f"pid {proc.pid}" in r.output
    # Refused before any work: no run directory, no status file, no history.
    assert not (prefix / "runs").exists()
    assert not (prefix / "status.json").exists() and not (prefix / "history.jsonl").exists()


def test_lock_is_released_when_the_holder_dies(held_lock) -> None:
    prefix, proc = held_lock
    with pytest.raises(FerryLocked):
        with ferry_lock(str(prefix)):
            pass
    proc.send_signal(signal.SIGKILL)  # a crashed ferry: no cleanup code runs at all
    proc.wait(timeout=30)
    with ferry_lock(str(prefix), run_id="next") as path:
        assert json.loads(Path(path).read_text())["run_id"] == "next"


def test_lock_is_reentrant_sequentially_and_exclusive_concurrently(tmp_path: Path) -> None:
    with ferry_lock(str(tmp_path)):
        with pytest.raises(FerryLocked, match="another ferry is running"):
            with ferry_lock(str(tmp_path)):
                pass
    with ferry_lock(str(tmp_path)):  # released on exit
        pass


def _fake_run(prefix: Path, name: str, started: float) -> Path:
    d = prefix / "runs" / name
    write_plan(str(d), RunPlan(run_id=name, manifest=None, plan=Plan((), ()), started=utc_iso(started)))
    (d / "payload.bin").write_bytes(b"x" * 10)
    return d


def test_prune_removes_only_old_ferry_runs(tmp_path: Path) -> None:
    now = time.time()
    old = _fake_run(tmp_path, "old", now - 20 * 86400)
    recent = _fake_run(tmp_path, "recent", now - 2 * 86400)
    current = _fake_run(tmp_path, "current", now - 30 * 86400)  # kept: it is the run that just finished
    stranger = tmp_path / "runs" / "not-a-run"
    stranger.mkdir()
    (stranger / "notes.txt").write_text("someone else's")
    messages = []
    pruned = prune_runs(str(tmp_path), 14, keep=("current",), now=now, log=messages.append)
    assert pruned == ["old"]
    assert not old.exists() and recent.exists() and current.exists() and stranger.exists()
    assert any("not-a-run" in m and "left alone" in m for m in messages)
    assert prune_runs(str(tmp_path), 1, keep=("current",), now=now) == ["recent"]


def test_prune_without_runs_dir_is_a_noop(tmp_path: Path) -> None:
    assert prune_runs(str(tmp_path), 14) == []


def test_envelope_file_overrides_and_errors(tmp_path: Path) -> None:
    f = tmp_path / "env.yaml"
    f.write_text("fuzzy_fraction: [0.0, 0.5]\nplanted_min_found: 0\nmin_loss_drop: 0.1\n")
    env = load_envelopes(str(f))
    assert env.fuzzy_fraction == (0.0, 0.5) and env.planted_min_found == 0 and env.min_loss_drop == 0.1
    assert env.exact_fraction == Envelopes().exact_fraction
    for text, msg in [("fuzzy_fraction: [0.5, 0.1]\n", "fuzzy_fraction: expected [low, high]"),
                      ("fuzy_fraction: [0, 1]\n", "unknown envelope 'fuzy_fraction'"),
                      ("planted_min_found: -1\n", "planted_min_found: expected a non-negative integer"),
                      ("- 1\n", "expected a mapping")]:
        f.write_text(text)
        with pytest.raises(ValueError, match=msg.replace("[", r"\[")):
            load_envelopes(str(f))
    r = CliRunner().invoke(ferry, ["validate", str(tmp_path), "--envelopes", str(f)])
    assert r.exit_code == 2 and str(f) in r.output


def test_validate_refuses_a_dir_that_is_not_a_run(tmp_path: Path) -> None:
    r = CliRunner().invoke(ferry, ["validate", str(tmp_path)])
    assert r.exit_code == 2 and "no ferry.json" in r.output and "--manifest" in r.output
    r = CliRunner().invoke(ferry, ["validate", str(tmp_path / "missing")])
    assert r.exit_code == 2


def test_bad_run_id_and_keep_days_fail_before_work(tmp_path: Path) -> None:
    r = CliRunner().invoke(ferry, ["run", "--prefix", str(tmp_path / "p"), "--run-id", "../escape"])
    assert r.exit_code == 2 and "not path-safe" in r.output
    r = CliRunner().invoke(ferry, ["run", "--prefix", str(tmp_path / "p"), "--keep-days", "-1"])
    assert r.exit_code == 2 and "--keep-days" in r.output
    assert not (tmp_path / "p").exists()
