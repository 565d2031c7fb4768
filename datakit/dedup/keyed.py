"""Per-file reuse inside the dedup rooms (steps/reuse.py): take a unit of per-file work from the earlier
build of the step when its content key is there, else compute it; then record every unit's key.

Why one helper: minhash (a file's bucket signatures), decontaminate (a file's n-gram hits against the
benchmark table), line dedup (a file's segment keys) and consolidate (a file's kept documents) all do
per-file work whose output depends on that file's content and the step's settings only, while the
step as a whole depends on the corpus. Each gives a unit its key (the settings that matter and the
recorded xxh3 of exactly what the unit reads); the helper takes or computes it and counts which.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from datakit.core.fsio import join
from datakit.steps import reuse

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
    and returns its stats)."""
    unit = reuse.take(job.earlier, job.key, step_dir) if job.key is not None else None
    if unit is not None:
        return Done(job.key, job.files, dict(unit.stats), True)
    return Done(job.key, job.files, compute(job.job), False)


def record(step_dir: str, done: Sequence[Done]) -> dict[str, int]:
    """Write reuse.json for the next build (one entry per key); the units taken and computed."""
    reuse.write(step_dir, {d.key: reuse.Unit(d.files, d.stats) for d in done if d.key is not None})
    taken = sum(d.taken for d in done)
    return {REUSED: taken, COMPUTED: len(done) - taken}
