"""What the quality-layer stages (quality, linededup, pii) share: one step per enabled source, and
identities that key list files by content."""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any, Callable

from datakit.steps import Step

from .contract import Graph, Stage, identity_fields


def add_source_steps(graph: Graph, stage: Stage, config: Any, run: Callable[..., dict]) -> None:
    """One step ``<stage>-<source>`` per source whose rules are enabled, each reading that source's current
    documents and becoming them: ``run(ctx, source=, documents=, rules=)`` is bound per source. (Per-source
    overrides naming unknown sources are refused when the manifest loads.)"""
    for n in graph.source_names:
        rules = config.for_source(n)
        if not rules.enabled:
            continue
        docs = graph.documents[n]
        step = Step(f"{stage.name}-{n}", partial(run, source=n, documents=docs.name, rules=rules),
                    {"rules": identity(rules)}, deps=(docs,), version=stage.version, stage=stage.name, source=n)
        graph.advance(n, step)


def _file_digest(path: str) -> str:
    from datakit.core.fsio import sha256_file

    try:
        return sha256_file(path)
    except OSError as e:
        raise ValueError(f"{path}: cannot read this list file ({e}); fix the path in the manifest") from None


def identity(config: Any) -> dict[str, Any]:
    """The config as a step identity: ``given`` bookkeeping left out and every list file (a field marked
    ``path``) replaced by the sha256 of its content, so editing the file rebuilds and moving it does not."""
    out = identity_fields(config)
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if f.name == "given" or f.name not in out:
            out.pop(f.name, None)
        elif dataclasses.is_dataclass(value):
            out[f.name] = identity(value)
        elif f.metadata.get("path"):
            out[f.name] = None if value is None else {"sha256": _file_digest(value)}
    return out
