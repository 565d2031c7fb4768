"""The benchmarks' measuring and scoring helpers: tree memory as PSS, and the FineWeb benchmark's decision
comparison (what its README figures rest on)."""

from __future__ import annotations

import os
import subprocess
import sys

from benchmarks import _pipeline_measure as measure
from benchmarks.fineweb import compare_decisions


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def test_pss_counts_a_forked_childs_shared_pages_once():
    """A child forked after its parent touched 64 MB shares those pages: the RSS sum counts them twice,
    the PSS sum once (each process gets half)."""
    code = ("import os, sys, time\n"
            "buf = bytearray(64 << 20)\n"
            "for i in range(0, len(buf), 4096): buf[i] = 1\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    time.sleep(30); os._exit(0)\n"
            "print(pid, flush=True); sys.stdin.readline(); os.kill(pid, 9)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        child = int(proc.stdout.readline())
        total, largest = measure.tree_sample(proc.pid, {})
        rss_sum = _rss_bytes(proc.pid) + _rss_bytes(child)
        assert 0 < largest < total
        assert total < rss_sum - (48 << 20)  # the 64 MB buffer counted once, not twice
        assert total > (64 << 20)
    finally:
        proc.communicate("\n")


def test_pss_of_a_gone_process_is_zero():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert measure.pss_bytes(proc.pid) == 0
    assert measure.pss_bytes(os.getpid()) > 0


def test_decisions_agree_by_kept_or_removed_and_differences_name_both_rules():
    ids = {"a", "b", "c", "d", "e"}
    ours = {"a": "langid.languages", "b": "gopher_quality.min_stop_words", "c": "c4.min_sentences"}
    peer = {"a": "langid", "b": "gopher_repetition", "d": "fineweb"}
    out = compare_decisions(ids, ours, peer, {"a": ("de", 0.9)}, {"a": ("de", 0.91)})
    assert (out["agree"], out["agreement"]) == (3, 0.6)  # a, b removed by both; e kept by both
    assert out["same_group_share"] == 0.4  # a (langid) and e (kept)
    assert [(d["datakit"], d["datatrove"], d["count"]) for d in out["differences"]] == [
        ("c4.min_sentences", "kept", 1), ("kept", "fineweb", 1)]
    assert out["removed_by"] == {"datakit": {"langid": 1, "gopher_quality": 1, "c4": 1},
                                 "datatrove": {"langid": 1, "gopher_repetition": 1, "fineweb": 1}}


def test_pss_is_read_on_a_budget_and_carried_between_readings():
    """smaps_rollup walks every page of a process (about 12 ms for a driver and two workers), and the
    sampler runs on the machine it measures: PSS is read at most PSS_SHARE of a core, CPU every sample."""
    assert measure.next_pss_at(100.0, 0.0001) == 100.0 + measure.INTERVAL_S
    assert measure.next_pss_at(100.0, 0.012) == 100.0 + 0.012 / measure.PSS_SHARE > 100.0 + measure.INTERVAL_S
    code = "import sys\nx = bytearray(32 << 20)\nprint(1, flush=True)\nsys.stdin.readline()\n"
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        proc.stdout.readline()  # the buffer is there
        cpu_seen: dict = {}
        first = measure._sample(proc.pid, cpu_seen)
        carried = measure._sample(proc.pid, cpu_seen, last=first)
        assert first.pss > (32 << 20) and (carried.pss, carried.largest, carried.driver) == (first.pss, first.largest, first.driver)
        assert carried.cpu_s >= first.cpu_s and carried.t >= first.t and carried.workers == first.workers == 0
    finally:
        proc.communicate("\n")


def test_a_sampled_run_reports_the_samplers_own_cpu():
    tl = measure.run_sampled([sys.executable, "-c", "import time; time.sleep(0.3)"], dict(os.environ), ".", 60)
    assert tl.returncode == 0 and tl.samples and tl.sampler_cpu_s > 0
    assert measure.per_stage(tl, [])["total"]["sampler_cpu_s"] == round(tl.sampler_cpu_s, 2)


def test_a_window_says_what_the_rest_of_the_machine_ran():
    """On a shared machine a stage's cores used reads against what the others took: the machine's busy
    CPU between the window's samples minus the tree's."""
    tl = measure.Timeline(samples=[measure.Sample(t, cpu, 0, 0, machine_cpu_s=machine)
                                   for t, cpu, machine in ((0.0, 0.0, 100.0), (1.0, 1.5, 102.0), (3.0, 5.0, 106.0))])
    w = measure.window(tl, 1.0, 3.0)
    assert (w["cpu_s"], w["cores_used"], w["machine_other_cores"]) == (3.5, 1.75, 0.25)
    assert measure.window(tl, 0.0, 1.0)["machine_other_cores"] == 0.5
    assert measure.machine_cpu_s() > 0 and measure._sample(os.getpid(), {}).machine_cpu_s > 0


def test_a_peer_venv_missing_a_module_fails_before_either_side_runs_in_one_line(tmp_path):
    """The side-by-side benchmarks check the peer's imports first: a venv that lacks a module datatrove
    imports without requiring it (regex, orjson) is named in one line with where the setup is, instead
    of a traceback after our side's minutes; a venv that is not there is left to the benchmark (its peer
    figures are then null, with the reason)."""
    from benchmarks.common import peer_import_error

    assert peer_import_error(sys.executable, "import json, os", "the docstring") is None
    line = peer_import_error(sys.executable, "import json, no_such_module_here", "the docstring")
    assert line is not None and "\n" not in line
    assert "No module named 'no_such_module_here'" in line and sys.executable in line and "the docstring" in line
    assert peer_import_error(tmp_path / "bin" / "python", "import json", "the docstring") is None
