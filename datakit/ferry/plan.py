"""The run plan: which steps a ferry run holds, recorded in the run directory before any work.

The validator finds every output through this record (step name + identity -> ``<run>/<name>-<identity>``
and the step's own artifact.json), never through globs over the directory: a layout change then shows
up as a failing check naming the step, instead of a glob that quietly matches nothing.

The plan is written by ``datakit ferry run`` as ``<run>/ferry.json``: the pipeline's published plan
(``datakit.pipeline.build_plan``, a ``datakit.stages.plan.Plan``: every step with its stage, source and
kind, the sources' document chains, the products) plus what the ferry adds (run id, benchmarks, host).
Recording it (rather than rebuilding it at validation time) matters because local inputs enter step
identities as content fingerprints: an ``apt upgrade`` between the run and a later ``validate``
would otherwise change the identities and make a perfectly good run look missing. For a directory made
by plain ``datakit run`` there is no ferry.json: its published ``plan.json`` is used (``plan_from_published``,
the benchmarks read from the manifest the plan names), or ``plan_from_manifest`` rebuilds the plan.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass, field

from datakit.core.fsio import atomic_write_bytes
from datakit.stages.plan import Plan, PlanStep

PLAN_FILE = "ferry.json"
PLAN_FORMAT = 3  # 3: the pipeline's Plan inside; 2: steps with stage and source; 1: spelled from step names


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
    plan: Plan
    benchmarks: tuple[BenchmarkRef, ...] = ()
    started: str = ""
    host: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def sources(self) -> tuple[str, ...]:
        return self.plan.sources

    @property
    def steps(self) -> tuple[PlanStep, ...]:
        """Every planned step, each after the steps it reads (the order the validator checks them)."""
        return self.plan.steps

    def step(self, name: str) -> PlanStep | None:
        return self.plan.step(name)

    def to_dict(self) -> dict:
        return {"format": PLAN_FORMAT, "run_id": self.run_id, "manifest": self.manifest, "plan": self.plan.to_dict(),
                "benchmarks": [asdict(b) for b in self.benchmarks], "started": self.started, "host": self.host,
                "extra": dict(self.extra)}

    @classmethod
    def from_dict(cls, d: dict, where: str = PLAN_FILE) -> "RunPlan":
        if d.get("format") != PLAN_FORMAT:
            raise ValueError(f"{where}: unsupported plan format {d.get('format')!r} (expected {PLAN_FORMAT})")
        try:
            return cls(
                run_id=str(d["run_id"]), manifest=d.get("manifest"), plan=Plan.from_dict(d["plan"], where),
                benchmarks=tuple(BenchmarkRef(b["name"], b["path"], tuple(b["text_fields"]), b.get("format"))
                                 for b in d.get("benchmarks", ())),
                started=d.get("started", ""), host=d.get("host", ""), extra=dict(d.get("extra") or {}),
            )
        except (KeyError, TypeError) as e:
            raise ValueError(f"{where}: malformed plan record ({type(e).__name__}: {e})") from None


def run_plan(run_id: str, manifest, plan: Plan) -> RunPlan:
    """The ferry's record of ``plan`` (from build_plan(manifest))."""
    return RunPlan(
        run_id=run_id,
        manifest=manifest.path,
        plan=plan,
        benchmarks=tuple(BenchmarkRef(b.name, b.path, tuple(b.text_fields), b.format)
                         for b in manifest.decontaminate.benchmarks),
        started=utc_iso(),
        host=socket.gethostname(),
    )


def plan_from_published(plan: Plan, run_id: str = "") -> RunPlan:
    """The record of a `datakit run` prefix's published plan (its identities as that run built them);
    the benchmarks come from the manifest the plan names, when it is still there to read."""
    from datakit.pipeline import load_manifest

    readable = plan.manifest is not None and os.path.isfile(plan.manifest)
    manifest = load_manifest(plan.manifest, check_uris=False) if readable else None
    benchmarks = manifest.decontaminate.benchmarks if manifest is not None else ()
    return RunPlan(run_id=run_id, manifest=plan.manifest, plan=plan,
                   benchmarks=tuple(BenchmarkRef(b.name, b.path, tuple(b.text_fields), b.format) for b in benchmarks))


def plan_from_manifest(manifest_path: str, run_id: str = "") -> RunPlan:
    """Rebuild the plan of a manifest (for run dirs made by `datakit run`, which record no plan)."""
    from datakit.pipeline import build_plan, load_manifest

    m = load_manifest(manifest_path, check_uris=False)
    return run_plan(run_id, m, build_plan(m, write_cache=False))


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
