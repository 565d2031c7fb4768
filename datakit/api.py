"""The Python pipeline API: the same runs as `datakit run`, from code, with typed results.

    import datakit
    manifest = datakit.load_manifest("sources.yaml")          # or datakit.manifest_from_dict({...})
    steps = datakit.build_steps(manifest)                     # the DAG `datakit run` would execute
    summary = datakit.run(manifest, prefix="out", extra_steps=[my_step])
    summary.result("consolidate-web")                         # the step's typed result (a dict)

A custom step is a `datakit.Step` whose function receives a `StepContext` (its output dir, its deps'
outputs and results, the engine's ExecConfig) and usually runs a `datakit.shuffle.Dataset` pipeline.
It gets the same identity hashing, markers, skip-completed and events as the built-in stages.
"""

from __future__ import annotations

import os
from typing import Iterable

from datakit.pipeline import build_steps, exec_config
from datakit.shuffle import ExecConfig
from datakit.sources.manifest import Manifest, load_manifest, manifest_from_dict
from datakit.steps import RunSummary, Step, StepContext, run_steps


def steps_by_name(manifest: Manifest) -> dict[str, Step]:
    return {s.name: s for s in build_steps(manifest)}


def run(manifest: Manifest | str, *, prefix: str | None = None, backend: str | None = None,
        workers: int | None = None, extra_steps: Iterable[Step] = (), dry_run: bool = False,
        only: list[str] | None = None, force: list[str] = (), mirror: str | None = None) -> RunSummary:
    """Run a manifest's pipeline (plus `extra_steps`, which may depend on its steps); returns the summary."""
    m = load_manifest(manifest) if isinstance(manifest, (str, os.PathLike)) else manifest
    steps = build_steps(m) + list(extra_steps)
    out = prefix or m.prefix
    cfg = exec_config(out, backend or m.backend, workers or m.workers)
    return run_steps(steps, out, mirror=mirror or m.mirror, dry_run=dry_run, only=only,
                     force=list(force), exec_config=cfg)


__all__ = ["load_manifest", "manifest_from_dict", "build_steps", "steps_by_name", "run", "Step", "StepContext",
           "RunSummary", "ExecConfig"]
