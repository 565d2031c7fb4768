"""The Python pipeline API: the same runs as `datakit run`, from code, with typed results.

    import datakit
    manifest = datakit.load_manifest("sources.yaml")          # or datakit.manifest_from_dict({...})
    plan = datakit.build_plan(manifest)                       # the DAG `datakit run` would execute, as data
    steps = datakit.build_steps(manifest)                     # its runnable steps
    summary = datakit.run(manifest, prefix="out", extra_steps=[my_step])
    summary.result("consolidate-web")                         # the step's typed result (a dict)

A custom step is a `datakit.Step` whose function receives a `StepContext` (its output dir, its deps'
outputs and results, the engine's ExecConfig) and usually runs a `datakit.shuffle.Dataset` pipeline.
It gets the same identity hashing, markers, skip-completed and events as the built-in stages. A user
stage that tokenize and train should read goes in the manifest's `stages:` list instead.
"""

from __future__ import annotations

import logging
import os
from typing import Callable, Iterable

from datakit import pipeline
from datakit.manifest import Manifest
from datakit.pipeline import build_plan, build_steps, load_manifest, manifest_from_dict
from datakit.report.events import event_lines
from datakit.shuffle import ExecConfig
from datakit.steps import RunSummary, Step, StepContext


def steps_by_name(manifest: Manifest) -> dict[str, Step]:
    return {s.name: s for s in build_steps(manifest)}


def run(manifest: Manifest | str, *, prefix: str | None = None, backend: str | None = None,
        workers: int | None = None, extra_steps: Iterable[Step] = (), dry_run: bool = False,
        only: list[str] | None = None, force: list[str] = (), mirror: str | None = None,
        progress: bool | None = None, log: Callable[[str], None] | logging.Logger | None = None,
        fast: bool = False) -> RunSummary:
    """Run a manifest's pipeline (plus `extra_steps`, which may depend on its steps); returns the summary,
    whose ``data`` holds what happened to the data (per-source funnel, tokens, training figures).

    ``progress``: progress bars on stderr (default: when stderr is a terminal). ``log``: where the run's
    lines go (steps started and finished, why they ran, training progress, warnings): a callable taking
    a string, or a `logging.Logger`; default: the ``datakit`` logger at INFO. ``fast``: trust built steps
    whose outputs have their recorded sizes (default: their content is checked, as `datakit run` does)."""
    m = load_manifest(manifest) if isinstance(manifest, (str, os.PathLike)) else manifest
    plan = build_plan(m, prefix, write_cache=not dry_run)
    by_name = {s.name: s for s in plan.runnable}
    write = _writer(log)

    def on_event(ev: dict) -> None:
        for line in event_lines(ev, by_name):
            write(line)

    return pipeline.run(m, prefix=prefix, backend=backend, workers=workers, plan=plan, extra_steps=extra_steps,
                        dry_run=dry_run, only=only, force=force, mirror=mirror, on_event=on_event,
                        progress=progress, fast=fast)


def _writer(log: Callable[[str], None] | logging.Logger | None) -> Callable[[str], None]:
    if log is None:
        return logging.getLogger("datakit").info
    if isinstance(log, logging.Logger):
        return log.info
    return log


__all__ = ["load_manifest", "manifest_from_dict", "build_plan", "build_steps", "steps_by_name", "run", "Step",
           "StepContext", "RunSummary", "ExecConfig"]
