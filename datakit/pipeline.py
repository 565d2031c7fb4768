"""The one composition root: manifest -> steps -> run. The CLI, the Python API and the ferry all come here.

    load_manifest(path)          the manifest, validated against every stage's section
    build_plan(manifest)         walk the stage registry: each stage adds its steps to one graph, published
                                 as a Plan (datakit.stages.plan; `<prefix>/plan.json` on every run)
    build_steps(manifest)        the plan's runnable steps
    run(manifest, ...)           build, write the plan, then run the steps with the engine settings of this run

    download? -> normalize -> [user stages] -> exact ─┐
                                            -> minhash -> fuzzy ─┼─> consolidate -> [user stages]
                                            -> decontaminate ────┘      -> tokenizer -> tokenize -> train

Every step's identity covers its versioned config and its inputs, never where they live: local inputs
enter as a fingerprint of their content, benchmark files as the sha256 of their content. Changing any
input, parameter or stage version therefore builds new outputs beside the old ones instead of serving a
stale cache.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Iterable

from datakit.core.fsio import StoreUnavailable
from datakit.manifest import Manifest
from datakit.manifest import load as _load
from datakit.manifest.errors import ManifestError
from datakit.report.summary import data_summary, views
from datakit.shuffle import ExecConfig, backend_capabilities
from datakit.stages.contract import Graph
from datakit.stages.plan import Plan, plan_of, write_plan
from datakit.stages.registry import STAGES, sections
from datakit.steps import RunSummary, Step, run_steps


def load_manifest(path: str | os.PathLike, *, check_uris: bool = True, timeout: float = 5.0) -> Manifest:
    """Load and validate a manifest file; raises ManifestInvalid carrying every located error."""
    return _load.load_manifest(path, sections(), check_uris=check_uris, timeout=timeout)


def validate_manifest(path: str | os.PathLike, *, check_uris: bool = True, timeout: float = 5.0) -> list[ManifestError]:
    """Every problem in the manifest, located (empty list = valid)."""
    return _load.validate_manifest(path, sections(), check_uris=check_uris, timeout=timeout)


def manifest_from_dict(data: dict[str, Any], *, base_dir: str | None = None, check_uris: bool = True,
                       timeout: float = 5.0) -> Manifest:
    """A manifest built in code (same validation; relative paths resolve against ``base_dir``).

    From code, a user stage's ``call`` may be the function itself rather than its ``module:function``
    name: it is shipped to the workers with the stage, and its module's source still keys its outputs."""
    data, given = _lift_callables(data)
    m = _load.manifest_from_dict(data, sections(), base_dir=base_dir, check_uris=check_uris, timeout=timeout)
    if not given:
        return m
    stages = tuple(dataclasses.replace(s, call=given.get(i, s.call)) for i, s in enumerate(m.stages))
    return dataclasses.replace(m, stages=stages)


def _lift_callables(data: dict[str, Any]) -> tuple[dict[str, Any], dict[int, Callable]]:
    """Stage calls given as functions, swapped for placeholder names the schema accepts."""
    stages = data.get("stages") if isinstance(data, dict) else None
    if not isinstance(stages, list):
        return data, {}
    given = {i: st["call"] for i, st in enumerate(stages) if isinstance(st, dict) and callable(st.get("call"))}
    if not given:
        return data, {}
    lifted = [{**st, "call": f"api:stage{i}"} if i in given else st for i, st in enumerate(stages)]
    return {**data, "stages": lifted}, given


def check_manifest(manifest: Manifest) -> None:
    """Every stage's refusal of the manifest (ValueError), before anything is read or written."""
    for stage in STAGES:
        if stage.refuse is not None:
            stage.refuse(manifest)


def build_plan(manifest: Manifest, prefix: str | None = None, *, write_cache: bool = True) -> Plan:
    """The whole DAG for a manifest as a Plan, in a deterministic order: every registered stage adds its
    steps. ``prefix`` (default: the manifest's) is where content fingerprints of local inputs are cached;
    ``write_cache=False`` only reads that cache (dry runs and status write nothing)."""
    check_manifest(manifest)
    graph = Graph(manifest, str(prefix or manifest.prefix), write_cache)
    for stage in STAGES:
        stage.build(graph)
    return plan_of(graph, reasons={s.name: s.reasons for s in STAGES if s.reasons})


def build_steps(manifest: Manifest, prefix: str | None = None, *, write_cache: bool = True) -> list[Step]:
    """The plan's runnable steps (see build_plan)."""
    return list(build_plan(manifest, prefix, write_cache=write_cache).runnable)


def exec_config(prefix: str, backend: str, workers: int | None = None, **options: Any) -> ExecConfig:
    """The engine settings a run hands its steps.

    When workers may sit on other machines, map outputs must be readable by reducers on other nodes, so
    shuffle files go under `<prefix>/.shuffle` (an object store or shared mount; the engine refuses a
    node-local one) and, being there, double as stage checkpoints a rerun resumes from. Otherwise they
    stay in a temporary directory on this machine's disk.
    """
    caps = backend_capabilities(backend)
    if prefix.startswith("memory://") and not caps.in_process:
        raise ValueError(f"prefix {prefix}: memory:// lives inside one process, but the {backend} backend runs "
                         "steps in worker processes that could not see each other's outputs; use backend "
                         "'inline' for memory://, or a prefix on disk or an object store")
    work_dir = f"{prefix.rstrip('/')}/.shuffle" if caps.may_span_nodes else None
    return ExecConfig(backend=backend, max_workers=workers, work_dir=work_dir, **options)


def run(manifest: Manifest, *, prefix: str | None = None, backend: str | None = None, workers: int | None = None,
        plan: Plan | None = None, steps: list[Step] | None = None, extra_steps: Iterable[Step] = (),
        dry_run: bool = False, only: list[str] | None = None, force: Iterable[str] = (), mirror: str | None = None,
        on_event: Callable[[dict], None] | None = None, fast: bool = False, **engine: Any) -> RunSummary:
    """Build the plan (unless given) and run its steps (or only ``steps``, a part of it) plus ``extra_steps``
    under ``prefix`` (default: the manifest's); a real run first publishes the plan as `<prefix>/plan.json`.
    ``fast``: skip built steps whose outputs have their recorded sizes, without checking content.
    ``engine`` options go to the ExecConfig (progress, backend_options)."""
    out = str(prefix or manifest.prefix)
    plan = plan or build_plan(manifest, out, write_cache=not dry_run)
    planned = list(steps) if steps is not None else list(plan.runnable)
    cfg = exec_config(out, backend or manifest.backend, workers or manifest.workers, **engine)
    if not dry_run:
        write_plan(out, plan)
    summary = run_steps(planned + list(extra_steps), out, mirror=mirror or manifest.mirror, dry_run=dry_run,
                        only=only, force=list(force), exec_config=cfg, on_event=on_event, fast=fast)
    try:
        summary.data = data_summary(views(summary, plan), plan, out).to_dict()
    except StoreUnavailable as e:  # the summary of the steps still stands; the figures live in the store
        summary.data = {"warnings": [f"no data figures: {e}"]} if summary.ok else {}
    return summary
