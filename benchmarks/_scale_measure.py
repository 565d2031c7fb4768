"""Process-tree sampling by PSS for benchmarks/scale.py: one timeline per run, cut into stages afterwards.

Why PSS: worker processes share pages (the interpreter, imported libraries, the page cache of mapped
files), so a sum of RSS counts the same page once per process; PSS charges each shared page to its
sharers in equal parts, so the tree's PSS sum is what the run really holds and a worker's PSS is its
own share. Read from /proc/<pid>/smaps_rollup (Linux 4.14+) every INTERVAL_S: costlier than RSS (the
kernel walks the page tables), hence a longer interval than ``_pipeline_measure``'s RSS sampler.

A stage's CPU is the growth of the tree's cumulative CPU between its start and end samples, counting
every process ever seen at its last sample (workers that exit still count; each one's last interval
may be missed). The root process is the driver (``datakit run``: the planner and each step's
coordination); every other process of the tree is a worker (the local backend's pool).
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

INTERVAL_S = 0.2
MB = 2**20


@dataclass
class Sample:
    t: float               # time.time()
    cpu_s: float           # cumulative CPU of every process of the tree seen so far
    pss_tree: int          # bytes: sum of PSS over the tree now
    pss_driver: int        # the root process's PSS
    pss_worker: int        # the largest PSS of any other process now
    workers: int           # processes of the tree besides the root


@dataclass
class Timeline:
    samples: list[Sample] = field(default_factory=list)
    start: float = 0.0
    end: float = 0.0
    returncode: int = 0
    stdout: str = ""
    stderr: str = ""


def pss_bytes(pid: int) -> int | None:
    """The process's proportional set size, or None when it is gone (or not readable)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def tree_sample(pid: int, cpu_seen: dict) -> Sample:
    """One sample of the process and its descendants; records each one's CPU seconds in ``cpu_seen``
    (keyed by pid and start time, so a reused pid is another process)."""
    try:
        root = psutil.Process(pid)
        procs = [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        procs = []
    tree = driver = worker = n = 0
    for q in procs:
        try:
            t = q.cpu_times()
            cpu_seen[(q.pid, q.create_time())] = t.user + t.system
        except psutil.NoSuchProcess:
            continue
        pss = pss_bytes(q.pid)
        if pss is None:
            continue
        tree += pss
        if q.pid == pid:
            driver = pss
        else:
            worker, n = max(worker, pss), n + 1
    return Sample(time.time(), sum(cpu_seen.values()), tree, driver, worker, n)


def _sampler(proc: subprocess.Popen, tl: Timeline, stop: threading.Event,
             on_sample: Callable[[Timeline], None]) -> None:
    cpu_seen: dict = {}
    while True:
        tl.samples.append(tree_sample(proc.pid, cpu_seen))
        on_sample(tl)
        if stop.wait(INTERVAL_S):
            return


def run_sampled(cmd: list[str], env: dict, cwd: str, timeout: float,
                on_sample: Callable[[Timeline], None] = lambda tl: None) -> Timeline:
    """Run ``cmd`` to completion while sampling its process tree (``on_sample(timeline)`` after each sample,
    from the sampling thread: progress lines); the timeline plus its output."""
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
    finally:  # an interrupted benchmark leaves no run behind (its workers exit when their driver's pipe closes)
        if proc.poll() is None:
            proc.kill()
        stop.set()
        th.join()
    tl.end, tl.returncode = time.time(), proc.returncode
    tl.stdout, tl.stderr = out.decode(errors="replace"), err.decode(errors="replace")
    return tl


def window(tl: Timeline, start: float, end: float) -> dict:
    """Wall, CPU-seconds, cores used and peak PSS (tree, driver, largest worker) between two times."""
    before = [s for s in tl.samples if s.t <= start]
    after = [s for s in tl.samples if s.t >= end]
    # a stage shorter than the interval may hold no sample: take the nearest samples on each side
    inside = [s for s in tl.samples if start <= s.t <= end] or before[-1:] + after[:1]
    c0 = before[-1].cpu_s if before else 0.0
    c1 = after[0].cpu_s if after else (tl.samples[-1].cpu_s if tl.samples else 0.0)
    wall = max(end - start, 1e-9)
    return {"wall_s": round(end - start, 2), "cpu_s": round(c1 - c0, 2), "cores_used": round((c1 - c0) / wall, 2),
            "peak_pss_tree_mb": round(max((s.pss_tree for s in inside), default=0) / MB, 1),
            "peak_pss_driver_mb": round(max((s.pss_driver for s in inside), default=0) / MB, 1),
            "peak_pss_worker_mb": round(max((s.pss_worker for s in inside), default=0) / MB, 1),
            "workers_seen": max((s.workers for s in inside), default=0)}
