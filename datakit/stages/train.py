"""The train stage: a JAX language model on the token caches, mixed by the sources' weights; resumable
from its newest checkpoint. Runs only when the manifest has a `train:` section. With a `mixture:`
section (datakit.mix) the weights are resolved in the step from the caches' exact token counts
(proportional, explicit, staged, capped) and recorded in its result under `mixture`."""

from __future__ import annotations

from functools import partial

from datakit.core.results import MixtureResult, ModelResult, TokensResult
from datakit.manifest import Section
from datakit.mix.config import MixtureConfig
from datakit.steps import Step, StepContext
from datakit.train.config import TrainConfig

from .contract import MIXTURE, MODEL, TOKENS, Graph, Stage, step_identity

VERSION = "1"


def _train_tokens(ctx: StepContext, step: str) -> int:
    return TokensResult.of(ctx.deps[step]).tokens_in("train")


def _split(ctx: StepContext, step: str, which: str) -> str:
    rec = ctx.deps[step]
    return TokensResult.of(rec).split_dir(rec.output, which)


def _has_validation(ctx: StepContext, step: str) -> bool:
    return TokensResult.of(ctx.deps[step]).has_documents("validation")


def _with_tokens(ctx: StepContext, tokens: dict[str, str], weights: dict[str, float]) -> tuple[dict, list[str]]:
    """The weights of the sources that have training tokens, and the names of those that have none.

    A source emptied upstream (filtered or deduplicated away) is skipped with a warning naming every
    such source, rather than failing the run at its last step; with no tokens at all, it fails, naming
    them all."""
    empty = sorted(n for n in weights if not _train_tokens(ctx, tokens[n]))
    if empty and len(empty) == len(weights):
        raise ValueError(f"no source has training tokens ({', '.join(empty)}); every one was emptied upstream: "
                         "see the run summary for the step that emptied each")
    if empty:
        ctx.log(f"warning: sources without training tokens are skipped: {', '.join(empty)} "
                "(give them weight: 0 to silence this)", skipped_sources=empty)
    return {n: w for n, w in weights.items() if n not in empty}, empty


def progress_message(record: dict, steps: int) -> str | None:
    """One line per logged training step (step, loss, tokens/s, the time left at that rate), and a line
    for each long silence: compiling the training step, and each evaluation (before and after)."""
    kind, step = record.get("kind"), record.get("step")
    if kind == "compiling":
        return f"step {step}/{steps}: compiling the training step... (the first step waits for it)"
    if kind == "compiled":
        return f"step {step}/{steps}: compiled in {record.get('compile_s') or 0:.1f}s"
    if kind == "evaluating":
        n = record.get("sequences")
        what = f"{n:,} sequences" if n is not None else "the validation sets"
        return f"step {step}/{steps}: evaluating on {what} ({record.get('sets')} set(s))..."
    if kind == "eval":
        bpb = f", {record['bpb']:.4f} bits/byte" if record.get("bpb") is not None else ""
        return f"step {step}/{steps}: eval loss {record.get('loss') or float('nan'):.4f}{bpb}"
    if kind != "train" or record.get("loss_window_mean") is None:
        return None
    tps, tokens = record.get("tokens_per_sec"), record.get("tokens") or 0
    eta = ""
    if tps and step:
        left = (steps - step) * tokens / step / tps
        eta = f", ETA {left:.0f}s"
    rate = f", {tps:,.0f} tokens/s" if tps else ""
    return f"step {step}/{steps}: loss {record['loss_window_mean']:.4f}{rate}{eta}"


def _mixture_plan(ctx: StepContext, cfg: TrainConfig, tokens: dict[str, str], weights: dict[str, float],
                  mixture: MixtureConfig, file_weights: dict | None, search: str | None):
    """The `mixture:` section resolved on this run's exact token counts (caps held, phases exact)."""
    from datakit.mix.resolve import plan_mixture

    counts = {n: _train_tokens(ctx, tokens[n]) for n in tokens}
    searched = MixtureResult.of(ctx.deps[search]).chosen.weights if search else None
    plan = plan_mixture(mixture, counts, weights, steps=cfg.steps, batch_size=cfg.batch_size,
                        seq_len=cfg.seq_len, seed=cfg.data_seed, searched=searched, file_weights=file_weights)
    for n, e in plan.epochs.items():
        if e > mixture.warn_epochs:
            ctx.log(f"warning: component {n} is repeated {e:.1f} epochs (warn_epochs {mixture.warn_epochs:g})",
                    component=n, epochs=e)
    return plan


def _train(ctx: StepContext, cfg: TrainConfig, tokens: dict[str, str], weights: dict[str, float],
           mixture: MixtureConfig | None = None, file_weights: dict | None = None, search: str | None = None) -> dict:
    from datakit.tokenize.mixture import schedule_names
    from datakit.train.stage import train_model

    plan = None
    if mixture is None:
        schedule, skipped = _with_tokens(ctx, tokens, weights)
    else:
        plan = _mixture_plan(ctx, cfg, tokens, weights, mixture, file_weights, search)
        schedule = plan.schedule()
        skipped = sorted(n for n in tokens if weights.get(n, 0) > 0 and not _train_tokens(ctx, tokens[n]))
    names = schedule_names(schedule)
    train = {n: _split(ctx, tokens[n], "train") for n in names}
    val = {n: _split(ctx, tokens[n], "validation") for n in names if _has_validation(ctx, tokens[n])}

    def on_log(record: dict) -> None:
        message = progress_message(record, cfg.steps)
        if message:
            ctx.log(message, kind="train_progress")

    res = train_model(cfg, train, schedule, val, ctx.output, on_log=on_log).to_dict()
    res["skipped_sources"] = skipped
    if plan is not None:
        res["mixture"] = plan.to_dict()
    res["counters"] = {"steps": res["steps"], "skipped_steps": res["skipped_steps"]}
    return ModelResult.written(res)


def _default_mixture(mix: MixtureConfig) -> bool:
    """A section that changes nothing (manifest weights, no caps, no phases, no file): the plain path,
    with the same step identity as a manifest without the section."""
    return mix.weights == "manifest" and not mix.max_epochs and not mix.schedule and not mix.file


def _mixture_step(graph: Graph, cfg: TrainConfig, mix: MixtureConfig) -> Step:
    """The train step under a `mixture:` section: every component's cache is a dependency (proportional
    weights need their counts), the section's weights settings are in the identity, and so are a
    mixture file's weights (its content, not its path) and the search step (as a dependency)."""
    from datakit.mix.file import read_mixture_file

    weights = dict(graph.weights)
    tokens = {n: graph.tokens[n].name for n in weights if n in graph.tokens}
    file_weights = read_mixture_file(mix.file)["weights"] if mix.file else None
    search = graph.mixture if mix.uses_search else None
    if mix.uses_search and search is None:
        raise ValueError("mixture: weights: search, but no search step was built (give mixture.search)")
    mixture = {**step_identity(mix, ("weights", "temperature", "max_epochs", "schedule")),
               "file_weights": file_weights}
    config = {"train": step_identity(cfg), "weights": weights, "mixture": mixture}
    deps = tuple(graph.tokens[n] for n in sorted(graph.tokens)) + ((search,) if search else ())
    fn = partial(_train, cfg=cfg, tokens=tokens, weights=weights, mixture=mix, file_weights=file_weights,
                 search=search.name if search else None)
    return Step("train", fn, config, deps=deps, version=VERSION, resumable=True, stage=STAGE.name)


def build(graph: Graph) -> None:
    cfg: TrainConfig | None = graph.config(STAGE)
    if cfg is None:
        return
    mix: MixtureConfig | None = graph.manifest.sections.get("mixture")
    if mix is not None and not _default_mixture(mix):
        graph.model = graph.add(_mixture_step(graph, cfg, mix))
        return
    weights = {n: w for n, w in graph.weights.items() if w > 0}
    tokens = {n: graph.tokens[n].name for n in weights}
    step = Step("train", partial(_train, cfg=cfg, tokens=tokens, weights=weights),
                {"train": step_identity(cfg), "weights": weights},
                deps=tuple(graph.tokens[n] for n in sorted(graph.tokens)), version=VERSION, resumable=True,
                stage=STAGE.name)
    graph.model = graph.add(step)


STAGE = Stage(name="train", version=VERSION, build=build, section=Section("train", TrainConfig, optional=True),
              consumes=(TOKENS, MIXTURE), produces=(MODEL,), code=("datakit.train", "datakit.tokenize.reader",
                                                           "datakit.tokenize.feistel", "datakit.tokenize.mixture",
                                                           "datakit.stages.train", "datakit.mix.plan",
                                                           "datakit.mix.resolve"),
              ferry_check="datakit.ferry.checks_tokens:check_train")
