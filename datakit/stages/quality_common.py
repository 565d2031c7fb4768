"""What the quality-layer stages (quality, pii) share: one step per enabled source."""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

from datakit.steps import Step

from .contract import Graph, Stage, step_identity


def add_source_steps(graph: Graph, stage: Stage, config: Any, run: Callable[..., dict]) -> dict[str, Step]:
    """One step ``<stage>-<source>`` per source whose rules are enabled, each reading that source's current
    documents and becoming them: ``run(ctx, source=, documents=, rules=)`` is bound per source. (Per-source
    overrides naming unknown sources are refused when the manifest loads.) Returns source -> its step."""
    added = {}
    for n in graph.source_names:
        rules = config.for_source(n)
        if not rules.enabled:
            continue
        docs = graph.documents[n]
        step = Step(f"{stage.name}-{n}", partial(run, source=n, documents=docs.name, rules=rules),
                    {"rules": step_identity(rules)}, deps=(docs,), version=stage.version, stage=stage.name, source=n)
        added[n] = graph.advance(n, step)
    return added

