"""The train stage: a JAX language model on the token caches, mixed by the sources' weights; resumable
from its newest checkpoint. Runs only when the manifest has a `train:` section."""

from __future__ import annotations

import posixpath
from functools import partial

from datakit.manifest import Section
from datakit.steps import Step, StepContext
from datakit.train.config import TrainConfig

from .contract import MODEL, TOKENS, Graph, Stage

VERSION = "1"


def _split(ctx: StepContext, step: str, which: str) -> str:
    rec = ctx.deps[step]
    return posixpath.join(rec.output, rec.result["splits"][which]["path"])


def _has_validation(ctx: StepContext, step: str) -> bool:
    return bool(ctx.deps[step].result["splits"].get("validation", {}).get("docs", 1))


def _train(ctx: StepContext, cfg: TrainConfig, tokens: dict[str, str], weights: dict[str, float]) -> dict:
    from datakit.train.stage import train_model

    train = {n: _split(ctx, tokens[n], "train") for n in weights}
    val = {n: _split(ctx, tokens[n], "validation") for n in weights if _has_validation(ctx, tokens[n])}
    res = train_model(cfg, train, weights, val, ctx.output)
    return res.to_dict()


def build(graph: Graph) -> None:
    cfg: TrainConfig | None = graph.config(STAGE)
    if cfg is None:
        return
    weights = {s.name: s.weight for s in graph.manifest.sources if s.weight > 0}
    tokens = {n: graph.tokens[n].name for n in weights}
    step = Step("train", partial(_train, cfg=cfg, tokens=tokens, weights=weights),
                {"train": cfg.to_dict(), "weights": weights},
                deps=tuple(graph.tokens[n] for n in sorted(graph.tokens)), version=VERSION, resumable=True,
                stage=STAGE.name)
    graph.model = graph.add(step)


STAGE = Stage(name="train", version=VERSION, build=build, section=Section("train", TrainConfig, optional=True),
              consumes=(TOKENS,), produces=(MODEL,), code=("datakit.train", "datakit.tokenize.reader",
                                                           "datakit.tokenize.feistel", "datakit.tokenize.mixture",
                                                           "datakit.stages.train"),
              checks="datakit.ferry.checks_tokens:check_train")
