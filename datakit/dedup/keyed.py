"""Per-file reuse inside the dedup rooms (steps/reuse.py): take a unit of per-file work from the earlier
build of the step when its content key is there, else compute it; then record every unit's key.

Why one helper: minhash (a file's bucket signatures), decontaminate (a file's n-gram hits against the
benchmark table), line dedup (a file's segment keys) and consolidate (a file's kept documents) all do
per-file work whose output depends on that file's content and the step's settings only, while the
step as a whole depends on the corpus. Each gives a unit its key (the settings that matter and the
recorded xxh3 of exactly what the unit reads); the helper takes or computes it and counts which.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Callable, Iterable, Sequence

from datakit.core.fsio import join
from datakit.shuffle import ExecConfig, small_job_config_for_files
from datakit.steps import reuse

from .layout import per_file_tasks

# The step's counters saying how much per-file work was taken from the earlier build or computed.
REUSED, COMPUTED = "files/reused", "files/computed"


@dataclass(frozen=True)
class Reuse:
    """Per-file reuse for one run of a dedup room: ``settings`` is what besides its inputs a unit's
    output depends on (the step's name, version and config, or the narrower settings that matter to
    the unit); ``earlier`` the earlier build (None: compute everything)."""

    settings: tuple
    earlier: reuse.Earlier | None


@dataclass(frozen=True)
class Job:
    """One unit of per-file work: its key (None: never taken, never recorded), the files computing it
    writes (relative to the step dir), and what the compute function receives."""

    key: str | None
    files: tuple[str, ...]
    job: Any
    earlier: reuse.Earlier | None = None


@dataclass(frozen=True)
class Done:
    """A unit after `run`: its key and files, its stats (computed, or recorded by the earlier build),
    and whether it was taken."""

    key: str | None
    files: tuple[str, ...]
    stats: dict[str, int]
    taken: bool


def recorded_hashes(step_dirs: Iterable[str]) -> dict[str, str]:
    """Absolute path -> recorded xxh3-128 of every output of these input steps (their manifests)."""
    out: dict[str, str] = {}
    for d in step_dirs:
        out.update({join(d, rel): h for rel, h in reuse.output_hashes(d).items()})
    return out


def key_of(settings: tuple, *parts: Any) -> str | None:
    """A unit's key from the settings and its parts; None when a part is None (an input with no
    recorded hash: such a unit is computed)."""
    if any(p is None for p in parts):
        return None
    return reuse.content_key(settings, *parts)


def run(job: Job, step_dir: str, compute: Callable[[Any], dict[str, int]]) -> Done:
    """Take the unit from the earlier build, or compute it (``compute(job.job)`` writes ``job.files``
    and returns its stats): one task's unit."""
    taken = take(job, step_dir)
    if taken is not None:
        return taken
    return Done(job.key, job.files, compute(job.job), False)


def take(job: Job, step_dir: str) -> Done | None:
    """The unit taken from the earlier build (a link and a hash check), or None."""
    unit = reuse.take(job.earlier, job.key, step_dir) if job.key is not None else None
    return None if unit is None else Done(job.key, job.files, dict(unit.stats), True)


def run_all(jobs: Sequence[Job], inputs: Sequence[str], step_dir: str, compute: Callable[[Any], dict[str, int]],
            exec_config: ExecConfig | None) -> list[Done]:
    """Every unit, in ``jobs`` order: taken here, in the driver, when the earlier build has it (cheaper
    than a task: an edit of one file of many then starts no worker pool for the others), the rest
    computed on the engine, one task per unit labelled with the file it reads (``inputs``, one per job);
    a few computed files (an edit's) run inline (`small_job_config_for_files`)."""
    done = [take(job, step_dir) for job in jobs]
    todo = [(replace(job, earlier=None), path) for job, path, d in zip(jobs, inputs, done) if d is None]
    if not todo:
        return [d for d in done if d is not None]
    paths = [path for _, path in todo]
    engine = small_job_config_for_files(exec_config, paths)
    computed = iter(per_file_tasks([job for job, _ in todo], paths)
                    .map(partial(run, step_dir=step_dir, compute=compute)).run(engine).items)
    return [d if d is not None else next(computed) for d in done]


def record(step_dir: str, done: Sequence[Done], also: Sequence[Done] = ()) -> dict[str, int]:
    """Write reuse.json for the next build (one entry per key); the units taken and computed. ``also``:
    further keys of the same files (a unit that can be taken in part), recorded but not counted."""
    reuse.write(step_dir, {d.key: reuse.Unit(d.files, d.stats) for d in (*done, *also) if d.key is not None})
    taken = sum(d.taken for d in done)
    return {REUSED: taken, COMPUTED: len(done) - taken}
