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


def _with_tokens(ctx: StepContext, tokens: dict[str, str], weights: dict[str, float]) -> tuple[dict, list[str]]:
    """The weights of the sources that have training tokens, and the names of those that have none.

    A source emptied upstream (filtered or deduplicated away) is skipped with a warning naming every
    such source, rather than failing the run at its last step; with no tokens at all, it fails, naming
    them all."""
    empty = sorted(n for n in weights if not ctx.deps[tokens[n]].result["splits"]["train"].get("tokens"))
    if empty and len(empty) == len(weights):
        raise ValueError(f"no source has training tokens ({', '.join(empty)}); every one was emptied upstream: "
                         "see the run summary for the step that emptied each")
    if empty:
        ctx.log(f"warning: sources without training tokens are skipped: {', '.join(empty)} "
                "(give them weight: 0 to silence this)", skipped_sources=empty)
    return {n: w for n, w in weights.items() if n not in empty}, empty


def progress_message(record: dict, steps: int) -> str | None:
    """One line per logged training step: step, loss, tokens/s and the time left at that rate."""
    if record.get("kind") == "eval":
        return f"step {record.get('step')}/{steps}: eval loss {record.get('loss') or float('nan'):.4f}"
    if record.get("kind") != "train" or record.get("loss_window_mean") is None:
        return None
    tps, tokens = record.get("tokens_per_sec"), record.get("tokens") or 0
    eta = ""
    if tps and record.get("step"):
        left = (steps - record["step"]) * tokens / record["step"] / tps
        eta = f", ETA {left:.0f}s"
    rate = f", {tps:,.0f} tokens/s" if tps else ""
    return f"step {record['step']}/{steps}: loss {record['loss_window_mean']:.4f}{rate}{eta}"


def _train(ctx: StepContext, cfg: TrainConfig, tokens: dict[str, str], weights: dict[str, float]) -> dict:
    from datakit.train.stage import train_model

    weights, skipped = _with_tokens(ctx, tokens, weights)
    train = {n: _split(ctx, tokens[n], "train") for n in weights}
    val = {n: _split(ctx, tokens[n], "validation") for n in weights if _has_validation(ctx, tokens[n])}

    def on_log(record: dict) -> None:
        message = progress_message(record, cfg.steps)
        if message:
            ctx.log(message, kind="train_progress")

    res = train_model(cfg, train, weights, val, ctx.output, on_log=on_log).to_dict()
    res["skipped_sources"] = skipped
    res["counters"] = {"steps": res["steps"], "skipped_steps": res["skipped_steps"]}
    return res


def build(graph: Graph) -> None:
    cfg: TrainConfig | None = graph.config(STAGE)
    if cfg is None:
        return
    weights = {n: w for n, w in graph.weights.items() if w > 0}
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
