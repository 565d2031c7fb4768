"""The export stage: with an `export:` section, one step per format (`export-<format>`) writing every
mixture component's token cache in a trainer's own format (datakit.export) under the step's directory,
with the tokenizer, the mixture weights and the identities of the steps it came from. Its deps are the
token caches and the tokenizer, so it is rebuilt exactly when one of them changes."""

from __future__ import annotations

from functools import partial

from datakit.export.config import ExportConfig
from datakit.manifest import Section
from datakit.steps import Step, StepContext

from .contract import TOKENIZER, TOKENS, Graph, Stage, counters_only

VERSION = "1"


def _export(ctx: StepContext, fmt: str, splits: tuple[str, ...], tokens: dict[str, str],
            weights: dict[str, float]) -> dict:
    from datakit.export import Component, ExportRequest, export

    comps = tuple(Component(n, ctx.deps[s].output, f"{s}-{ctx.deps[s].identity}", weights.get(n, 0.0))
                  for n, s in sorted(tokens.items()))
    steps = {r.name: r.identity for r in ctx.deps.values()}
    return counters_only(export(ExportRequest(fmt, ctx.output, comps, splits, steps), ctx.exec_config))


def build(graph: Graph) -> None:
    cfg: ExportConfig | None = graph.config(STAGE)
    if cfg is None or not graph.tokens:
        return
    tokens = {n: s.name for n, s in graph.tokens.items()}
    weights = {n: float(graph.weights.get(n, 0.0)) for n in tokens}
    deps = tuple(graph.tokens[n] for n in sorted(graph.tokens)) + ((graph.tokenizer,) if graph.tokenizer else ())
    for fmt in dict.fromkeys(cfg.formats):
        fn = partial(_export, fmt=fmt, splits=tuple(cfg.splits), tokens=tokens, weights=weights)
        graph.add(Step(f"export-{fmt}", fn, {"format": fmt, "splits": list(cfg.splits), "weights": weights},
                       deps=deps, version=VERSION, stage=STAGE.name))


STAGE = Stage(name="export", version=VERSION, build=build, section=Section("export", ExportConfig, optional=True),
              consumes=(TOKENIZER, TOKENS), code=("datakit.export", "datakit.stages.export"),
              ferry_check="datakit.ferry.checks_export:check_export")
