"""The ferry validator: prove a run directory is internally consistent, stage by stage.

Every output is located through the run plan (step name + identity, see ``plan.py``) and the step's own
artifact record (``result`` paths relative to the step dir, ``counters``), never by globbing the run
directory: a layout change must fail loudly here, not make a glob match nothing (that once let a
reference validator pass a broken run). Parquet is queried with DuckDB, the token cache recounted with
NumPy, so every number in a record is checked against the data it describes, by a different reader than
the one that wrote it.

Checks run per step in the plan's dependency order; each is ok / failed / skipped (skipped when a step
it reads already failed its ``built`` or ``files`` check, so one missing shard does not produce a page
of follow-on noise). Within a step, checks that name a *cause* (files present, ids sorted, duplicates,
contamination) come before the count equalities that would only show the symptom. The first failing
check is what the CLI, the status file and the notifier report.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import asdict, dataclass, field
from typing import Callable

from .checking import FAILED, OK, SKIPPED, Check, CheckFailed, RunContext, eq, read_json
from .envelopes import Envelopes
from datakit.defaults import DEFAULT_PREFIX
from datakit.stages.plan import PlanStep
from datakit.stages.plan import read_plan as read_published_plan

from .plan import RunPlan, bundled_manifest, plan_from_manifest, plan_from_published, read_plan

STATUS_FILE, ARTIFACT_FILE = ".status", "artifact.json"

__all__ = ["Check", "Validation", "validate_run", "load_plan", "OK", "FAILED", "SKIPPED"]


@dataclass
class Validation:
    run_dir: str
    run_id: str
    checks: list[Check] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    envelopes: dict = field(default_factory=dict)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == FAILED]

    @property
    def ok(self) -> bool:
        return bool(self.checks) and not self.failures

    @property
    def first_failure(self) -> Check | None:
        return next(iter(self.failures), None)

    def to_dict(self) -> dict:
        first = self.first_failure
        return {"run_dir": self.run_dir, "run_id": self.run_id, "ok": self.ok,
                "first_failure": asdict(first) if first else None,
                "counts": {s: sum(c.status == s for c in self.checks) for s in (OK, FAILED, SKIPPED)},
                "checks": [asdict(c) for c in self.checks], "summary": self.summary, "envelopes": self.envelopes}


def load_plan(run_dir: str, manifest: str | None = None) -> RunPlan:
    """The run's recorded plan (ferry.json); for a prefix of `datakit run`: the plan of ``manifest``
    when given, else the plan that run published (plan.json), else, for the default prefix
    (./datakit-out), the plan of the embedded default manifest."""
    plan = read_plan(run_dir)
    if plan is not None:
        return plan
    run_id = os.path.basename(os.path.abspath(run_dir))
    if manifest is not None:
        return plan_from_manifest(manifest, run_id=run_id)
    published = read_published_plan(run_dir)
    if published is not None:
        return plan_from_published(published, run_id=run_id)
    if os.path.abspath(run_dir) == os.path.abspath(DEFAULT_PREFIX):
        return plan_from_manifest(bundled_manifest(), run_id=run_id)
    raise FileNotFoundError(f"{run_dir}: no ferry.json and no plan.json (neither a ferry run dir nor the prefix "
                            "of a `datakit run`); pass --manifest to validate the output of `datakit run MANIFEST`")


def validate_run(run_dir: str, envelopes: Envelopes | None = None, *, plan: RunPlan | None = None,
                 manifest: str | None = None) -> Validation:
    """Validate ``run_dir`` (see module docstring). Never raises for a broken run: every problem is a
    failed Check. Raises only when there is nothing to validate (no plan and no manifest)."""
    run_dir = os.path.abspath(run_dir)
    plan = plan or load_plan(run_dir, manifest)
    ctx = RunContext(run_dir, plan, envelopes or Envelopes())
    for ref in plan.steps:
        if not _check_built(ctx, ref):
            continue
        handler, src = _handler(plan, ref.name)
        if handler is not None:
            handler(ctx, ref, src)
    keys = ("records_in", "normalized", "docs_in", "docs_out", "removed_exact", "removed_fuzzy",
            "removed_decontaminate", "tokens")
    ctx.summary["totals"] = {k: sum(int(s.get(k) or 0) for s in ctx.summary["sources"].values()) for k in keys}
    return Validation(run_dir, plan.run_id, ctx.checks, ctx.summary, ctx.env.to_dict())


def _handler(plan: RunPlan, name: str) -> tuple[Callable | None, str | None]:
    """The check of the stage that built the step (each stage names its own); custom steps (no stage)
    get only their `built` check."""
    from datakit.stages.registry import STAGES

    ref = plan.step(name)
    stage = next((s for s in STAGES if ref is not None and s.name == ref.stage), None)
    if stage is None or not stage.ferry_check:
        return None, None
    module, _, attr = stage.ferry_check.partition(":")
    return getattr(importlib.import_module(module), attr), ref.source


def _check_built(ctx: RunContext, ref: PlanStep) -> bool:
    """SUCCESS marker + artifact record with the plan's identity; loads the record for later checks.
    A step never built because a dependency failed is `skipped`, so the cause is reported once."""
    bad_deps = [d for d in ref.deps if d in ctx.broken]
    d = os.path.join(ctx.run_dir, ref.dirname)
    status_path = os.path.join(d, STATUS_FILE)
    if bad_deps and not os.path.exists(status_path):
        ctx.checks.append(Check(ref.name, "built", SKIPPED, f"not built: dependency {bad_deps[0]} failed"))
        ctx.broken.add(ref.name)
        return False

    def built() -> str:
        if not os.path.isdir(d):
            raise CheckFailed(f"no output directory {ref.dirname}/ (the step never ran)")
        if not os.path.exists(status_path):
            raise CheckFailed(f"{ref.dirname}/{STATUS_FILE} missing (the step did not finish)")
        st = read_json(status_path)
        art_path = os.path.join(d, ARTIFACT_FILE)
        art = read_json(art_path) if os.path.exists(art_path) else {}
        if st.get("status") != "SUCCESS":
            err = st.get("error") or art.get("error") or "no error recorded"
            raise CheckFailed(f"step status {st.get('status')}: {err}")
        if not art:
            raise CheckFailed(f"{ref.dirname}/{ARTIFACT_FILE} missing although {STATUS_FILE} says SUCCESS")
        eq(art.get("identity"), ref.identity, f"{ARTIFACT_FILE} identity vs the plan's")
        eq(art.get("status"), "SUCCESS", f"{ARTIFACT_FILE} status")
        ctx.artifacts[ref.name] = art
        ctx.stage_info(ref.name, wall_s=art.get("wall_s"))
        return f"built ({art.get('wall_s', 0):.1f}s)"

    return ctx.check(ref.name, "built", built, breaks=True)
