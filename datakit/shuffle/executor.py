"""The coordinator: runs stages in order, schedules task attempts, retries with finite patience.

It holds task state and paths only. Each attempt writes under its own attempt number, the first
successful attempt of a task is accepted, later or duplicate results are ignored, and files of
unaccepted attempts are removed. User-code failures get `max_attempts` tries (a deterministic crasher
aborts on the third, with its traceback and input named); worker deaths have their own, larger budget.
An attempt that failed with `StoreUnavailable` is not retried: it already spent the store's retry budget,
so the stage fails at once with that one line.
With an explicit `work_dir`, finished shuffle stages are checkpointed under the plan's fingerprint so
an interrupted pipeline resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from .backend_base import Backend, pickled_ops, task_payload
from .backends import get_backend
from datakit.core.fsio import StoreUnavailable, atomic_write_bytes, exists, is_local, open_read, remove
from datakit.core import publish_log
from .io import format_output
from .plan import SinkSpec, Stage
from .tasks import TaskSpec, load_collected


log = logging.getLogger("datakit.shuffle.executor")


def _retry_event(kind: str, spec: TaskSpec, shard: int, attempt: int, detail: str) -> None:
    """Log a task attempt that is being retried, with a structured ``datakit_event`` the step runner
    turns into a ``step_worker_retried`` event: a killed worker or a flaky task is worth a line on
    screen even when the retry saves the run (outputs are the same either way)."""
    message = f"stage {spec.stage_id}, shard {shard} ({spec.label}): {kind}; retrying (attempt {attempt + 1})"
    log.warning("%s: %s", message, detail, extra={"datakit_event": {
        "event": "worker_retried", "cause": kind, "stage": spec.stage_id, "shard": shard, "label": spec.label,
        "attempt": attempt + 1, "detail": detail}})


@dataclass
class ExecConfig:
    backend: str = "local"
    max_workers: int | None = None
    work_dir: str | None = None
    map_flush_bytes: int = 128 << 20
    reduce_memory_bytes: int = 512 << 20
    max_attempts: int = 3
    max_worker_deaths: int = 10
    progress: bool | None = None
    label: str = ""  # names the progress bar (the pipeline's step name)
    print_stats: bool = False
    keep_work_dir: bool = False
    backend_options: dict = field(default_factory=dict)


@dataclass
class StageStats:
    stage: int
    name: str
    tasks: int
    rows_in: int = 0
    rows_out: int = 0
    shuffle_rows: int = 0
    shuffle_bytes: int = 0
    spill_files: int = 0
    wall_s: float = 0.0
    peak_rss: int = 0
    retries: int = 0
    worker_deaths: int = 0
    skipped: bool = False


@dataclass
class RunResult:
    items: list
    counters: dict[str, int]
    stats: list[StageStats]


class ShardFailed(RuntimeError):
    """A task failed `max_attempts` times; carries the last traceback."""

    def __init__(self, stage: int, shard: int, label: str, attempts: int, info: dict):
        self.stage, self.shard, self.label, self.info = stage, shard, label, info
        super().__init__(
            f"stage {stage}, shard {shard} ({label}) failed {attempts} times; giving up.\n"
            f"Last error: {info['type']}: {info['message']}\n--- traceback from the worker ---\n"
            f"{info['traceback'].rstrip()}"
        )


class WorkerDeaths(RuntimeError):
    """Workers kept dying on one task (out of memory? segfault in native code?)."""


def _fingerprint(stages: list[Stage]) -> str:
    h = hashlib.sha256()
    for st in stages:
        try:
            h.update(cloudpickle.dumps((st.pipe, st.output)))
        except Exception:
            h.update(os.urandom(16))  # unpicklable plan: never reuse a checkpoint
    return h.hexdigest()[:16]


def _progress(config: ExecConfig):
    show = config.progress if config.progress is not None else sys.stderr.isatty()
    if not show:
        return None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    # One bar at a time (a stage's bar goes when the stage ends), rows/s from finished tasks, an ETA;
    # transient, so a finished step leaves no bar lines behind.
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[rate]}"), TimeRemainingColumn(), console=Console(stderr=True),
                    transient=True)


class _Bar:
    """A stage's progress bar: tasks done, rows read per second so far; removed when the stage ends.
    Without a progress display every call is a no-op."""

    def __init__(self, progress, config: ExecConfig, stage, total: int) -> None:
        self.progress, self.rows, self.t0 = progress, 0, time.perf_counter()
        what = f"{config.label}: " if config.label else ""
        self.bar = progress.add_task(f"{what}stage {stage.id + 1} {stage.name}", total=total, rate="") \
            if progress else None

    def __call__(self, result: dict) -> None:
        if self.progress:
            self.rows += int(result.get("rows_in", 0))
            rate = self.rows / max(time.perf_counter() - self.t0, 1e-9)
            self.progress.update(self.bar, advance=1, rate=f"{rate:,.0f} rows/s")

    def close(self) -> None:
        if self.progress:
            self.progress.remove_task(self.bar)


def _stage_ops(specs: list[TaskSpec]) -> list[bytes]:
    """Each task's ops, pickled once per distinct list (a stage's tasks all carry the same one)."""
    blobs: dict[tuple[int, ...], bytes] = {}
    out = []
    for spec in specs:
        key = tuple(id(op) for op in spec.pipe.ops)
        if key not in blobs:
            blobs[key] = pickled_ops(spec.pipe.ops)
        out.append(blobs[key])
    return out


def _schedule(backend: Backend, specs: list[TaskSpec], config: ExecConfig, st: StageStats, tick) -> list[dict]:
    n = len(specs)
    pending = deque(range(n))
    attempts, failures, deaths = [0] * n, [0] * n, [0] * n
    results: list[dict | None] = [None] * n
    inflight: dict[Any, int] = {}
    ops = _stage_ops(specs)
    try:
        while pending or inflight:
            while pending and len(inflight) < backend.capacity:
                i = pending.popleft()
                key = (specs[i].stage_id, i, attempts[i])
                backend.submit(key, task_payload(specs[i], attempts[i], ops[i]))
                inflight[key] = i
                attempts[i] += 1
            for key, status, value in backend.wait(timeout=1.0):
                i = inflight.pop(key, None)
                if i is None or results[i] is not None:
                    continue  # stale or duplicate attempt: its output is never used
                if status == "ok":
                    value["attempt"] = key[2]
                    results[i] = value
                    tick(value)
                elif status == "error":
                    if value.get("type") == StoreUnavailable.__name__:
                        # The attempt already waited out the store's whole retry budget: another attempt
                        # would wait it out again. One line, no worker traceback.
                        raise StoreUnavailable(value.get("message", ""))
                    failures[i] += 1
                    if failures[i] >= config.max_attempts:
                        raise ShardFailed(specs[i].stage_id, i, specs[i].label, failures[i], value)
                    st.retries += 1
                    _retry_event("task failed", specs[i], i, attempts[i],
                                 f"{value.get('type', 'error')}: {value.get('message', '')}")
                    pending.append(i)
                else:
                    deaths[i] += 1
                    st.worker_deaths += 1
                    if deaths[i] >= config.max_worker_deaths:
                        code = value.get("exitcode")
                        hint = ("killed by a signal: look for out-of-memory kills (dmesg) or crashes in native "
                                "code" if code is None or code < 0 else
                                "the worker process exited on its own: its stderr (above) says why, e.g. an "
                                "import error in the worker's environment")
                        raise WorkerDeaths(
                            f"stage {specs[i].stage_id}, shard {i} ({specs[i].label}): the worker died "
                            f"{deaths[i]} times running it (last exit code {code}); {hint}"
                        )
                    _retry_event("worker died", specs[i], i, attempts[i], f"exit code {value.get('exitcode')}")
                    pending.append(i)
    except BaseException:
        backend.cancel_all()
        raise
    return results  # type: ignore[return-value]


def _cleanup_attempts(stage_dir: str, keep: set[str]) -> None:
    """Remove files of attempts that were not accepted (stale, duplicate or killed mid-write)."""
    if not is_local(stage_dir) or not os.path.isdir(stage_dir):
        return
    for name in os.listdir(stage_dir):
        path = os.path.join(stage_dir, name)
        if path in keep or name == "_SUCCESS.json":
            continue
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)


def _final_sink(stage: Stage) -> SinkSpec | None:
    if stage.pipe.ops and stage.pipe.ops[-1][0] == "sink":
        return stage.pipe.ops[-1][1]
    return None


@dataclass
class _Run:
    """One execute call's state: its backend and progress display, where its stage files live, and
    what accumulates stage by stage: the shuffle indexes later stages read, the counters, the items
    collected by a stage without output, and each stage's stats."""

    stages: list[Stage]
    config: ExecConfig
    backend: Backend
    progress: Any
    root: str
    temporary: bool  # a private temp dir: no checkpoints, removed at the end
    tag: str = field(default_factory=lambda: "-" + uuid.uuid4().hex[:8])  # this call's attempt files (TaskSpec)
    indexes: dict[int, list[str]] = field(default_factory=dict)
    counters: Counter = field(default_factory=Counter)
    items: list = field(default_factory=list)
    stats: list[StageStats] = field(default_factory=list)


def execute(stages: list[Stage], config: ExecConfig | None = None) -> RunResult:
    config = config or ExecConfig()
    existing = _existing_outputs(stages)
    if existing is not None:
        return existing
    if config.work_dir:
        root, temporary = f"{config.work_dir.rstrip('/')}/plan-{_fingerprint(stages)}", False
    else:
        root, temporary = tempfile.mkdtemp(prefix="datakit-shuffle-"), True
    backend = get_backend(config.backend, config.max_workers, **config.backend_options)
    if backend.capabilities.may_span_nodes and is_local(root) and backend.num_nodes() > 1:
        raise ValueError(
            f"the {backend.name} cluster has {backend.num_nodes()} nodes but the shuffle directory {root} is on this "
            "node's disk; set ExecConfig(work_dir=...) (or the manifest's prefix) to storage every node sees, "
            "e.g. gs://bucket/tmp or a shared NFS path"
        )
    run = _Run(stages, config, backend, _progress(config), root, temporary)
    ok = False
    try:
        if run.progress:
            run.progress.start()
        for stage in stages:
            st = StageStats(stage.id, stage.name, stage.num_tasks)
            run.stats.append(st)
            _run_stage(run, stage, st)
        ok = True
    finally:
        _release(run, ok)
        publish_log.take_under(root)  # the shuffle's own files: no manifest lists them
    if config.print_stats:
        print(format_stats(run.stats), file=sys.stderr)
    return RunResult(run.items, dict(run.counters), run.stats)


def _existing_outputs(stages: list[Stage]) -> RunResult | None:
    """With a skip_existing final sink whose every output exists, the run's result without running."""
    final = stages[-1]
    sink = _final_sink(final)
    if sink is not None and sink.skip_existing:
        paths = [format_output(sink.pattern, i, final.num_tasks) for i in range(final.num_tasks)]
        if all(exists(p) for p in paths):
            return RunResult(paths, {"sink_skipped_existing": len(paths)},
                             [StageStats(s.id, s.name, s.num_tasks, skipped=True) for s in stages])
    return None


def _run_stage(run: _Run, stage: Stage, st: StageStats) -> None:
    """Run one stage's tasks (or take its checkpoint), tally them, keep its output, then drop the
    shuffle files no later stage reads."""
    stage_dir = f"{run.root}/stage-{stage.id:03d}"
    marker = f"{stage_dir}/_SUCCESS.json"
    if stage.output is not None and not run.temporary and exists(marker):
        with open_read(marker) as f:
            saved = json.loads(f.read())
        run.indexes[stage.id] = saved["indexes"]
        run.counters.update(saved["counters"])
        st.skipped = True
        return
    upstream = {s: run.indexes[s] for s in stage.pipe.upstream_stages()}
    config = run.config
    specs = [
        TaskSpec(stage.id, i, stage.num_tasks, stage.pipe.for_shard(i), stage.output, upstream,
                 stage_dir, config.map_flush_bytes, config.reduce_memory_bytes, stage.pipe.label(i), run.tag)
        for i in range(stage.num_tasks)
    ]
    tick = _Bar(run.progress, config, stage, len(specs))
    t0 = time.perf_counter()
    results = _schedule(run.backend, specs, config, st, tick)
    tick.close()
    st.wall_s = time.perf_counter() - t0
    _tally(results, stage, st, run.counters)
    if stage.output is not None:
        _keep_output(run, stage, results, stage_dir, marker)
    else:
        for r in results:
            run.items.extend(load_collected(r["output"]))
    # A shuffle's files are dead once every stage reading them has run.
    for done_id in stage.pipe.upstream_stages():
        if run.temporary and all(done_id not in s.pipe.upstream_stages() for s in run.stages[stage.id + 1:]):
            shutil.rmtree(f"{run.root}/stage-{done_id:03d}", ignore_errors=True)


def _tally(results: list[dict], stage: Stage, st: StageStats, counters: Counter) -> None:
    for r in results:
        counters.update(r["counters"])
        publish_log.note_all(r.get("published", ()))  # accepted attempts' uploads: a manifest takes them
        st.rows_in += r["rows_in"]
        st.rows_out += r["rows_out"]
        st.shuffle_bytes += r["bytes_out"]
        st.shuffle_rows += r["output"].get("rows", 0) if stage.output is not None else 0
        st.spill_files += r["spill_files"]
        st.peak_rss = max(st.peak_rss, r["peak_rss"])


def _keep_output(run: _Run, stage: Stage, results: list[dict], stage_dir: str, marker: str) -> None:
    """Record a shuffle stage's accepted indexes, remove other attempts' files and, with a work_dir,
    checkpoint the stage (indexes + its counters) so a rerun resumes after it."""
    run.indexes[stage.id] = [r["output"]["index"] for r in results]
    keep = set(run.indexes[stage.id])
    keep |= {p.rsplit(".", 1)[0] + ".data" for p in keep}
    _cleanup_attempts(stage_dir, keep)
    if not run.temporary:
        stage_counters: Counter = Counter()
        for r in results:
            stage_counters.update(r["counters"])
        saved = {"indexes": run.indexes[stage.id], "counters": dict(stage_counters)}
        atomic_write_bytes(marker, json.dumps(saved).encode())


def _release(run: _Run, ok: bool) -> None:
    """Stop the progress display, close an in-process backend, and remove the stage files unless they
    are a work_dir's checkpoints of an unfinished (or kept) run."""
    if run.progress:
        run.progress.stop()
    if run.backend.capabilities.in_process:
        run.backend.close()
    if run.temporary or (ok and not run.config.keep_work_dir):
        if is_local(run.root):
            shutil.rmtree(run.root, ignore_errors=True)
        elif ok:  # on an object store too: shuffle files are dead weight once every stage has run
            remove(run.root)


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024:
            return f"{n:.1f}{unit}" if unit != "B" else f"{int(n)}B"
        n /= 1024
    return f"{n:.1f}PB"


def format_stats(stats: list[StageStats]) -> str:
    rows = ["stage  name      tasks    rows_in   rows_out   shuffled   wall_s   peak_rss  retries deaths"]
    for s in stats:
        rows.append(
            f"{s.stage:<6} {s.name[:9]:<9} {s.tasks:>5} {s.rows_in:>10} {s.rows_out:>10} {_human(s.shuffle_bytes):>10} "
            f"{s.wall_s:>8.2f} {_human(s.peak_rss):>10} {s.retries:>7} {s.worker_deaths:>6}"
            + ("  (checkpoint)" if s.skipped else "")
        )
    return "\n".join(rows)
