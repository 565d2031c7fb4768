"""Process-tree sampling for benchmarks/pipeline.py: one timeline per run, cut into stages afterwards.

Why a timeline: both pipelines run as one command (``datakit run``; one peer process running its blocks
one after another), and each reports when its stages started and ended (datakit's events.jsonl, the
peer's own timestamps). Sampling the whole process tree every 50 ms and cutting the timeline at those
times gives every stage its wall time, CPU-seconds and peak PSS by the same method on both sides, with
no extra process starts (running datakit's steps one by one with ``--only`` would add an interpreter
start, imports and fingerprinting to each). A stage's CPU is the growth of the tree's cumulative CPU
between its start and end samples; cumulative CPU counts every process ever seen, at its last sample,
so workers that exit still count (each one's final < 50 ms may be missed). Time outside every stage
(interpreter start, planning, summaries) is reported as ``outside_stages``.

Memory is PSS (proportional set size, /proc/<pid>/smaps_rollup): each page shared by N processes counts
1/N in each, so the tree's sum is what the tree really holds. An RSS sum counts a forked worker's pages
shared with its parent (interpreter, imported modules, a model loaded before the fork) once per process
and overstates a tree of workers several times over. Reported: the tree's PSS sum, its largest
process's PSS, the root's (the driver) and the largest other process's (a worker), each at its peak
sample. Linux only (smaps_rollup: kernel 4.14+). benchmarks/scale.py samples through this module too.

The sampler runs on the machine it measures, so its own CPU is taken from the run: reading smaps_rollup
makes the kernel walk every page of the process (about 12 ms for a driver and two workers of a few hundred
MB; every 50 ms that was 0.19 of a 2-core machine's cores, taken from the run it measured). So CPU is
sampled every 50 ms (cheap: /proc/<pid>/stat) and PSS on a budget of `PSS_SHARE` of one core
(`next_pss_at`): with that tree, about every 0.25 s, each stage still seeing at least its nearest
samples. The sampler's own CPU-seconds are reported (`sampler_cpu_s`), and so is what the rest of the
machine ran beside the tree in each window (`machine_other_cores`: other processes and the sampler, from
/proc/stat), so a stage's cores used on a shared machine can be read against what it was left.
"""

from __future__ import annotations

import os
import resource
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import psutil

INTERVAL_S = 0.05
PSS_SHARE = 0.05  # the most of one core the PSS readings may take


@dataclass
class Sample:
    t: float          # time.time()
    cpu_s: float      # cumulative CPU of every process of the tree seen so far
    pss: int          # sum of PSS over the tree now (bytes)
    largest: int      # largest single process's PSS now (bytes)
    driver: int = 0   # the root process's PSS (bytes)
    worker: int = 0   # the largest PSS of any other process (bytes)
    workers: int = 0  # processes of the tree besides the root
    machine_cpu_s: float = 0.0  # busy CPU-seconds of the whole machine so far (/proc/stat)


@dataclass
class Timeline:
    samples: list[Sample] = field(default_factory=list)
    start: float = 0.0
    end: float = 0.0
    returncode: int = 0
    stdout: str = ""
    stderr: str = ""
    reaped_cpu_s: float = 0.0  # rusage of reaped descendants: misses processes nobody waits for
    sampler_cpu_s: float = 0.0  # the sampling thread's own CPU, taken from the machine it measures


def pss_bytes(pid: int) -> int:
    """The process's PSS from /proc/<pid>/smaps_rollup (0 when it is gone or unreadable). Read directly:
    psutil's memory_full_info parses the whole smaps, far slower for a process with many mappings."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return 0


def tree_sample(pid: int, cpu_seen: dict) -> tuple[int, int]:
    """(sum, max) of PSS in bytes over the process and all its descendants; records each one's CPU
    seconds in ``cpu_seen`` (keyed by pid and start time, so a reused pid is another process)."""
    s = _sample(pid, cpu_seen)
    return s.pss, s.largest


_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def machine_cpu_s() -> float:
    """Busy CPU-seconds of the whole machine since boot (/proc/stat: every state but idle, iowait and
    steal, which are not work done here)."""
    with open("/proc/stat", "rb") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = ticks[:7]
    return (user + nice + system + irq + softirq) * _TICK_S


def _sample(pid: int, cpu_seen: dict, last: Sample | None = None) -> Sample:
    """One sample of the process tree: CPU so far and PSS sums and peaks (tree, largest, root, other),
    the PSS figures read now, or, given ``last``, carried from it (only the CPU is read)."""
    try:
        root = psutil.Process(pid)
        procs = [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        procs = []
    carried = (last.pss, last.largest, last.driver, last.worker) if last is not None else (0, 0, 0, 0)
    total, largest, driver, worker = carried
    n = 0
    for q in procs:
        try:
            with q.oneshot():
                t = q.cpu_times()
                cpu_seen[(q.pid, q.create_time())] = t.user + t.system
        except psutil.NoSuchProcess:
            continue
        n += q.pid != pid
        if last is not None:
            continue
        pss = pss_bytes(q.pid)
        total += pss
        largest = max(largest, pss)
        if q.pid == pid:
            driver = pss
        else:
            worker = max(worker, pss)
    return Sample(time.time(), sum(cpu_seen.values()), total, largest, driver, worker, n, machine_cpu_s())


def next_pss_at(now: float, cost_s: float) -> float:
    """When PSS may be read again after a reading that cost ``cost_s`` CPU-seconds: the readings take at
    most `PSS_SHARE` of one core, and are never more frequent than the CPU samples."""
    return now + max(INTERVAL_S, cost_s / PSS_SHARE)


def _sampler(proc: subprocess.Popen, tl: Timeline, stop: threading.Event,
             on_sample: Callable[[Timeline], None]) -> None:
    cpu_seen: dict = {}
    pss_at = 0.0
    began = time.thread_time()
    try:
        while True:
            now, cpu0 = time.time(), time.thread_time()
            with_pss = now >= pss_at or not tl.samples
            tl.samples.append(_sample(proc.pid, cpu_seen, None if with_pss else tl.samples[-1]))
            if with_pss:
                pss_at = next_pss_at(now, time.thread_time() - cpu0)
            on_sample(tl)
            if stop.wait(INTERVAL_S):
                return
    finally:
        tl.sampler_cpu_s = time.thread_time() - began


def run_sampled(cmd: list[str], env: dict, cwd: str, timeout: float,
                on_sample: Callable[[Timeline], None] = lambda tl: None) -> Timeline:
    """Run ``cmd`` to completion while sampling its process tree (``on_sample(timeline)`` after each
    sample, from the sampling thread: progress lines); the timeline plus its output. An interrupted
    benchmark leaves no run behind (its workers end with their driver)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    tl = Timeline(start=time.time())
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd)
    stop = threading.Event()
    th = threading.Thread(target=_sampler, args=(proc, tl, stop, on_sample), daemon=True)
    th.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        err += f"\ntimed out after {timeout}s".encode()
    finally:
        if proc.poll() is None:
            proc.kill()
        stop.set()
        th.join()
    tl.end, tl.returncode = time.time(), proc.returncode
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    tl.reaped_cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    tl.stdout, tl.stderr = out.decode(errors="replace"), err.decode(errors="replace")
    return tl


def window(tl: Timeline, start: float, end: float) -> dict:
    """Wall, CPU-seconds, cores used and peak PSS (tree sum, largest process) between two times."""
    before = [s for s in tl.samples if s.t <= start]
    after = [s for s in tl.samples if s.t >= end]
    # a stage shorter than the interval may hold no sample: its PSS is the nearest samples' on each side
    inside = [s for s in tl.samples if start <= s.t <= end] or before[-1:] + after[:1]
    # the samples around the window (a window before the first sample starts from nothing run yet)
    first = before[-1] if before else (tl.samples[0] if tl.samples else Sample(start, 0.0, 0, 0))
    last = after[0] if after else (tl.samples[-1] if tl.samples else first)
    c0, c1 = (first.cpu_s if before else 0.0), last.cpu_s
    wall = max(end - start, 1e-9)
    # what the rest of the machine ran between those samples: other processes, and this sampler
    others = (last.machine_cpu_s - first.machine_cpu_s) - (last.cpu_s - first.cpu_s)
    return {"wall_s": round(end - start, 2), "cpu_s": round(c1 - c0, 2), "cores_used": round((c1 - c0) / wall, 2),
            "machine_other_cores": round(max(0.0, others) / max(last.t - first.t, 1e-9), 2),
            "peak_pss_tree_mb": round(max((s.pss for s in inside), default=0) / 2**20, 1),
            "peak_pss_largest_process_mb": round(max((s.largest for s in inside), default=0) / 2**20, 1),
            "peak_pss_driver_mb": round(max((s.driver for s in inside), default=0) / 2**20, 1),
            "peak_pss_worker_mb": round(max((s.worker for s in inside), default=0) / 2**20, 1),
            "workers_seen": max((s.workers for s in inside), default=0)}


def per_stage(tl: Timeline, stages: list[tuple[str, float, float]]) -> dict:
    """Each stage's window, the whole run's, and what fell outside every stage."""
    out = {name: window(tl, s, e) for name, s, e in stages}
    total = window(tl, tl.start, tl.end)
    total["cpu_s_reaped_rusage"] = round(tl.reaped_cpu_s, 2)
    total["sampler_cpu_s"] = round(tl.sampler_cpu_s, 2)
    inside_wall = sum(e - s for _, s, e in stages)
    inside_cpu = sum(v["cpu_s"] for v in out.values())
    out["outside_stages"] = {"wall_s": round(total["wall_s"] - inside_wall, 2),
                             "cpu_s": round(total["cpu_s"] - inside_cpu, 2)}
    return {"stages": out, "total": total}
