"""The mixture search as steps: each proxy is a cached Step, so a rerun reuses the finished ones.

    mix-target      (only with target.jsonl) the external eval set, tokenized with the run's tokenizer
    mix-proxies     builds the proxies not yet built through the engine's backend, so they train in
                    parallel (worker processes locally, nodes on Ray); the runner then finds them built
    mix-proxy-NN    proxy NN: its mixture (the prior for NN = 0, Dirichlet draws after), a small model
                    trained on it with the training stage's code, its target bits per byte
    mix-fit         the regression over the proxies and the chosen mixture within the constraints
    mix-verify      (verify: true) the chosen mixture trained for the same budget as the proxies
    mix-search      the mixture file (<step>/mixture.yaml), and `chosen` for `weights: search`

Mixtures are computed inside the steps from the token caches' exact counts (the prior needs them),
as pure functions of the settings and those counts, so a step's identity (settings + dependencies)
pins its mixture.
"""

from __future__ import annotations

import json
import posixpath
import time
from dataclasses import dataclass
from typing import ClassVar

from datakit.core.results import MixtureResult, StepResult, TokensResult
from datakit.mix.config import MixtureConfig, SearchConfig
from datakit.mix.plan import proportional, resolve, windows_of
from datakit.mix.search import choose, fit, sample_mixtures
from datakit.steps import StepContext
from datakit.tokenize.mixture import schedule_names
from datakit.tokenize.reader import DEFAULT_BLOCK_SIZE
from datakit.train.config import TrainConfig

PROXIES_STEP = "mix-proxies"
SEARCH_STEP = "mix-search"
TARGET_STEP = "mix-target"
MIXTURE_FILE = "mixture.yaml"


@dataclass(frozen=True, kw_only=True)
class ProxyRun(StepResult):
    """A proxy's (or the verify step's) result: the mixture it trained on and its measured target loss."""

    LABEL: ClassVar[str] = "a proxy run"
    REQUIRED: ClassVar[tuple[str, ...]] = ("weights", "target_bpb")

    weights: dict[str, float]
    target_bpb: float
    tokens: int | None = None
    wall_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class FitResult(StepResult):
    """The fit step's result: the prior, the fitted model, the chosen mixture and its predictions."""

    LABEL: ClassVar[str] = "a mixture fit"
    REQUIRED: ClassVar[tuple[str, ...]] = ("chosen", "prior", "fit", "predicted", "predicted_prior",
                                           "predicted_proxies", "constraints")

    chosen: dict[str, float]
    prior: dict[str, float]
    fit: dict
    predicted: float
    predicted_prior: float
    predicted_proxies: list[float]
    constraints: dict


def build_proxy(step, prefix: str) -> dict:
    """Build one proxy step under ``prefix`` (a worker's task). Its dependencies are built already; the
    runner's lease and markers make it safe beside other workers and other runs. ``fast``: the run
    that dispatched this task checked its dependencies' content moments ago; one re-hash of the token
    caches per proxy would cost more than the check is worth."""
    from datakit.steps import run_steps

    entry = run_steps([step], prefix, only=[step.name], fast=True).to_dict()["steps"][-1]
    return {"name": step.name, "status": entry["status"], "error": entry.get("error")}


def proxies_step(ctx: StepContext, proxies: tuple) -> dict:
    """Train the proxies not yet built, in parallel on the run's backend (one task each)."""
    from functools import partial

    from datakit.shuffle import Dataset
    from datakit.steps import step_status

    prefix = posixpath.dirname(ctx.output.rstrip("/"))
    states = {r["name"]: r["state"] for r in step_status(list(proxies), prefix)}
    todo = [p for p in proxies if states.get(p.name) != "SUCCESS"]
    results = []
    if todo:
        results = (Dataset.from_items(todo, num_shards=len(todo)).map(partial(build_proxy, prefix=prefix))
                   .collect(ctx.exec_config))
    failed = [f"{r['name']}: {r['error']}" for r in results if r["status"] not in ("succeeded", "skipped")]
    if failed:
        raise RuntimeError("proxy runs failed: " + "; ".join(failed))
    return {"built": sorted(r["name"] for r in results), "counters": {"proxies_built": len(results)}}


def _tokens(ctx: StepContext, token_steps: dict[str, str]) -> dict[str, int]:
    return {n: TokensResult.of(ctx.deps[s]).tokens_in("train") for n, s in token_steps.items()}


def _split(ctx: StepContext, step: str, which: str) -> str:
    rec = ctx.deps[step]
    return TokensResult.of(rec).split_dir(rec.output, which)


def _prior(ctx: StepContext, token_steps: dict[str, str], components: list[str],
           temperature: float) -> dict[str, float]:
    """Token-proportional weights (with the temperature) over the searched components."""
    return proportional(_tokens(ctx, {n: token_steps[n] for n in components}), temperature)


def _targets(ctx: StepContext, token_steps: dict[str, str], validation: list[str], target_name: str | None):
    val = {}
    for n in validation:
        if not TokensResult.of(ctx.deps[token_steps[n]]).tokens_in("validation"):
            raise ValueError(f"target: component {n} has no validation tokens; raise tokenize.validation_fraction "
                             "or name another target")
        val[f"target.{n}"] = _split(ctx, token_steps[n], "validation")
    if target_name:
        val["target.jsonl"] = _split(ctx, target_name, "train")
    return val


def train_on(ctx: StepContext, cfg: TrainConfig, weights: dict[str, float], token_steps: dict[str, str],
             validation: list[str], target_name: str | None, out_dir: str) -> dict:
    """Train ``cfg`` on ``weights`` (as exact block counts) and measure the target; the proxy's record."""
    from datakit.train.stage import train_model

    tokens = _tokens(ctx, token_steps)
    live = {n: w for n, w in weights.items() if w > 0 and tokens[n] > cfg.seq_len}
    plan = resolve([(0, live)], windows_of({n: tokens[n] for n in live}, cfg.seq_len), steps=cfg.steps,
                   batch_size=cfg.batch_size, block_size=max(DEFAULT_BLOCK_SIZE, cfg.batch_size), seed=cfg.data_seed)
    schedule = plan.schedule()
    train = {n: _split(ctx, token_steps[n], "train") for n in schedule_names(schedule)}
    t0 = time.perf_counter()
    res = train_model(cfg, train, schedule, _targets(ctx, token_steps, validation, target_name), out_dir)
    return ProxyRun.written({"weights": weights, "target_bpb": res.bpb, "target_loss": res.eval_loss,
                             "train_loss": res.final_loss, "tokens": cfg.steps * cfg.batch_size * cfg.seq_len,
                             "wall_s": round(time.perf_counter() - t0, 3), "counters": {"steps": res.steps}})


def proxy_step(ctx: StepContext, index: int, search: SearchConfig, temperature: float, token_steps: dict[str, str],
               components: list[str], target_name: str | None) -> dict:
    """Proxy ``index``: its mixture (0: the prior; then Dirichlet draws) trained and measured."""
    prior = _prior(ctx, token_steps, components, temperature)
    weights = sample_mixtures(prior, search.proxies, search.concentration, search.seed)[index]
    return train_on(ctx, search.proxy, weights, token_steps, list(search.target.validation), target_name,
                    ctx.output)


def fit_step(ctx: StepContext, search: SearchConfig, mix: MixtureConfig, proxies: list[str],
             token_steps: dict[str, str], components: list[str], budget: dict) -> dict:
    """Fit the proxies' target loss over their weights; choose within min_weight and the epoch caps of
    the final budget (``budget``: the train section's steps, batch_size, seq_len)."""
    runs = [ProxyRun.of(ctx.deps[p]) for p in proxies]
    model = fit([r.weights for r in runs], [r.target_bpb for r in runs])
    prior = _prior(ctx, token_steps, components, mix.temperature)
    windows = windows_of(_tokens(ctx, {n: token_steps[n] for n in components}), budget["seq_len"])
    sequences = budget["steps"] * budget["batch_size"]
    max_weight = {n: min(1.0, e * windows[n] / sequences) for n, e in mix.max_epochs.items() if n in windows}
    chosen, predicted, feasible = choose(model, prior, [r.weights for r in runs], candidates=search.candidates,
                                         seed=search.seed, min_weight=dict(search.min_weight), max_weight=max_weight)
    return FitResult(prior=prior, fit=model.to_dict(), chosen=chosen, predicted=predicted,
                     predicted_prior=float(model.predict([_vector(prior, model.names)])[0]),
                     predicted_proxies=[float(v) for v in model.predict([_vector(r.weights, model.names)
                                                                         for r in runs])],
                     constraints={"min_weight": dict(search.min_weight), "max_weight": max_weight,
                                  "budget": budget, "feasible_candidates": feasible}).to_dict()


def _vector(weights: dict[str, float], names) -> list[float]:
    return [weights.get(n, 0.0) for n in names]


def verify_step(ctx: StepContext, search: SearchConfig, token_steps: dict[str, str], target_name: str | None,
            fit_name: str) -> dict:
    """The chosen mixture trained for the proxies' budget: its measured target loss."""
    chosen = FitResult.of(ctx.deps[fit_name]).chosen
    return train_on(ctx, search.proxy, chosen, token_steps, list(search.target.validation), target_name, ctx.output)


def search_record(fitted: FitResult, runs: list[ProxyRun], verified: ProxyRun | None, search: SearchConfig) -> dict:
    """What the mixture file holds (see datakit.mix.file); no times, so it is the same on any machine."""
    baseline = runs[0]
    record = {
        "weights": fitted.chosen,
        "baseline": {"name": "proportional", "weights": fitted.prior, "measured_bpb": baseline.target_bpb,
                     "predicted_bpb": fitted.predicted_prior},
        "chosen": {"predicted_bpb": fitted.predicted,
                   "measured_bpb": verified.target_bpb if verified else None},
        "fit": fitted.fit,
        "constraints": fitted.constraints,
        "search": {"proxies": search.proxies, "seed": search.seed, "concentration": search.concentration,
                   "target": {"validation": list(search.target.validation),
                              "jsonl": posixpath.basename(search.target.jsonl) if search.target.jsonl else None},
                   "proxy": {"preset": search.proxy.preset, "steps": search.proxy.steps,
                             "batch_size": search.proxy.batch_size, "seq_len": search.proxy.seq_len,
                             "tokens": runs[0].tokens}},
        "proxies": [{"index": i, "weights": r.weights, "measured_bpb": r.target_bpb,
                     "predicted_bpb": p} for i, (r, p) in enumerate(zip(runs, fitted.predicted_proxies))],
    }
    if verified:
        record["chosen"]["gain_bpb"] = baseline.target_bpb - verified.target_bpb
    return record


def search_step(ctx: StepContext, search: SearchConfig, proxies: list[str], fit_name: str,
                verify_name: str | None) -> dict:
    """Write the mixture file; the result's `chosen` is what `weights: search` trains on."""
    from datakit.mix.file import write_mixture_file

    runs = [ProxyRun.of(ctx.deps[p]) for p in proxies]
    verified = ProxyRun.of(ctx.deps[verify_name]) if verify_name else None
    record = search_record(FitResult.of(ctx.deps[fit_name]), runs, verified, search)
    write_mixture_file(ctx.path(MIXTURE_FILE), record)
    return MixtureResult.written({
        "file": MIXTURE_FILE, "chosen": {"weights": record["weights"], **record["chosen"]},
        "baseline": record["baseline"], "proxies": record["proxies"], "fit": record["fit"],
        "proxy_wall_s": [r.wall_s for r in runs], "counters": {"proxies": len(runs)}})


def target_step(ctx: StepContext, jsonl: str, text_field: str, tokenizer: str) -> dict:
    """The external target set (a jsonl), tokenized with the run's tokenizer into a one-split cache."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from datakit.core import fsio
    from datakit.core.layout import TOKENIZER_FILE
    from datakit.tokenize.tokenize_step import tokenize_source

    texts = []
    with fsio.open_read(jsonl) as f:
        for i, line in enumerate(f.read().decode("utf-8").splitlines(), 1):
            if line.strip():
                text = json.loads(line).get(text_field)
                if not isinstance(text, str):
                    raise ValueError(f"{jsonl}:{i}: no string field {text_field!r} (target.text_field)")
                texts.append(text)
    if not texts:
        raise ValueError(f"{jsonl}: the target set holds no records")
    docs = ctx.path("docs")
    fsio.makedirs(docs)
    table = pa.table({"id": [f"{i:08d}" for i in range(len(texts))], "text": texts})
    with fsio.atomic_output(posixpath.join(docs, "target.parquet")) as f:
        pq.write_table(table, f)
    res = tokenize_source("target", docs, ctx.path("cache"), ctx.deps[tokenizer].path(TOKENIZER_FILE),
                          validation_fraction=0.0, exec_config=ctx.exec_config)
    out = res.to_dict()
    out["splits"] = {k: {**v, "path": posixpath.join("cache", v["path"])} for k, v in out["splits"].items()}
    out["counters"] = {"docs": len(texts)}
    return TokensResult.written(out)
