"""The run plan: which steps a ferry run holds, recorded in the run directory before any work.

The validator finds every output through this record (step name + identity -> ``<run>/<name>-<identity>``
and the step's own artifact.json), never through globs over the directory: a layout change then shows
up as a failing check naming the step, instead of a glob that quietly matches nothing.

The plan is written by ``datakit ferry run`` as ``<run>/ferry.json`` from ``datakit.pipeline.build_steps``.
Recording it (rather than rebuilding it at validation time) matters because local inputs enter step
identities as content fingerprints: an ``apt upgrade`` between the run and a later ``validate``
would otherwise change the identities and make a perfectly good run look missing. For a directory made
by plain ``datakit run`` there is no ferry.json; ``plan_from_manifest`` rebuilds the plan instead.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass, field

from datakit.core.fsio import atomic_write_bytes

PLAN_FILE = "ferry.json"
PLAN_FORMAT = 2  # 2: each step records its stage and source (1 re-spelled them from the step name)


def bundled_manifest() -> str:
    """The smoke corpus manifest shipped inside the package (what `datakit run` runs by default)."""
    from datakit.defaults import default_manifest_path

    return default_manifest_path()


def utc_iso(t: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if t is None else t))


def parse_utc_iso(s: str) -> float:
    """Inverse of utc_iso (seconds since the epoch); ValueError on anything else."""
    import calendar

    return float(calendar.timegm(time.strptime(s, "%Y-%m-%dT%H:%M:%SZ")))


@dataclass(frozen=True)
class StepRef:
    """One planned step: where it lives in the run dir, what it depends on, and the stage (and source)
    that built it, which picks its checks."""

    name: str
    identity: str
    deps: tuple[str, ...] = ()
    stage: str = ""
    source: str | None = None

    @property
    def dirname(self) -> str:
        return f"{self.name}-{self.identity}"


@dataclass(frozen=True)
class BenchmarkRef:
    name: str
    path: str
    text_fields: tuple[str, ...]
    format: str | None = None


@dataclass(frozen=True)
class RunPlan:
    """What a run directory is supposed to contain (see module docstring)."""

    run_id: str
    manifest: str | None
    sources: tuple[str, ...]
    steps: tuple[StepRef, ...]
    benchmarks: tuple[BenchmarkRef, ...] = ()
    started: str = ""
    host: str = ""
    extra: dict = field(default_factory=dict)

    def step(self, name: str) -> StepRef | None:
        return next((s for s in self.steps if s.name == name), None)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["format"] = PLAN_FORMAT
        return d

    @classmethod
    def from_dict(cls, d: dict, where: str = PLAN_FILE) -> "RunPlan":
        if d.get("format") != PLAN_FORMAT:
            raise ValueError(f"{where}: unsupported plan format {d.get('format')!r} (expected {PLAN_FORMAT})")
        try:
            return cls(
                run_id=str(d["run_id"]), manifest=d.get("manifest"), sources=tuple(d["sources"]),
                steps=tuple(StepRef(s["name"], s["identity"], tuple(s.get("deps", ())), s.get("stage", ""),
                                    s.get("source")) for s in d["steps"]),
                benchmarks=tuple(BenchmarkRef(b["name"], b["path"], tuple(b["text_fields"]), b.get("format"))
                                 for b in d.get("benchmarks", ())),
                started=d.get("started", ""), host=d.get("host", ""), extra=dict(d.get("extra") or {}),
            )
        except (KeyError, TypeError) as e:
            raise ValueError(f"{where}: malformed plan record ({type(e).__name__}: {e})") from None


def plan_from_steps(run_id: str, manifest, steps) -> RunPlan:
    """The plan of ``steps`` (from build_steps(manifest)), in the runner's dependency order."""
    from datakit.steps import collect_steps

    order = collect_steps(steps)
    return RunPlan(
        run_id=run_id,
        manifest=manifest.path,
        sources=tuple(s.name for s in manifest.sources),
        steps=tuple(StepRef(s.name, s.identity, tuple(d.name for d in s.deps), s.stage, s.source) for s in order),
        benchmarks=tuple(BenchmarkRef(b.name, b.path, tuple(b.text_fields), b.format)
                         for b in manifest.decontaminate.benchmarks),
        started=utc_iso(),
        host=socket.gethostname(),
    )


def plan_from_manifest(manifest_path: str, run_id: str = "") -> RunPlan:
    """Rebuild the plan of a manifest (for run dirs made by `datakit run`, which record no plan)."""
    from datakit.pipeline import build_steps, load_manifest

    m = load_manifest(manifest_path, check_uris=False)
    return plan_from_steps(run_id, m, build_steps(m, write_cache=False))


def write_plan(run_dir: str, plan: RunPlan) -> None:
    os.makedirs(run_dir, exist_ok=True)
    atomic_write_bytes(os.path.join(run_dir, PLAN_FILE), json.dumps(plan.to_dict(), indent=1).encode())


def read_plan(run_dir: str) -> RunPlan | None:
    """The recorded plan, None when the directory has none; ValueError when it is unreadable."""
    path = os.path.join(run_dir, PLAN_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: unreadable plan ({e})") from None
    return RunPlan.from_dict(d, path)
