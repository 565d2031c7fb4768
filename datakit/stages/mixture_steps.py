"""The mixture search's runs as steps: each proxy run is a cached Step, so a rerun reuses the finished ones.

    mix-target          (only with target.jsonl) the external eval set, tokenized with the run's tokenizer
    mix-proxies[-rR]    builds a wave of runs not yet built through the engine's backend, so they train
                        in parallel (worker processes locally, nodes on Ray); the runner then finds them built
    mix-proxy-NN        round one's proxy NN: its mixture (the prior for NN = 0, Dirichlet draws after), a
                        small model trained on it with the training stage's code, its target bits per byte
    mix-proxy-NN-sK     the same mixture under training seed K (init and data order): the seed noise
    mix-proxy-rR-NN     round R's proxy NN, drawn around round R-1's center (mix-fit-rR-1)
    mix-verify-sK       the final fit's candidate under seed K, beside mix-proxy-00[-sK] (proportional)

The fits (`FitResult`) and the decision are in stages/mixture_choice.py. Mixtures are computed inside the steps from
the token caches' exact counts (the prior needs them) and the fits they depend on, as pure functions of
the settings and those inputs, so a step's identity (settings + dependencies) pins its mixture.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
import time
from dataclasses import dataclass
from typing import ClassVar

from datakit.core.results import StepResult, TokensResult
from datakit.mix.config import SearchConfig
from datakit.mix.plan import proportional, resolve, windows_of
from datakit.mix.search import rounded, sample_around, sample_mixtures
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
    """A run's result: the mixture it trained on, the training seed offset, its measured target loss;
    ``copied_from``: a verification run of a candidate equal to proportional is that run, not retrained."""

    LABEL: ClassVar[str] = "a proxy run"
    REQUIRED: ClassVar[tuple[str, ...]] = ("weights", "target_bpb")

    weights: dict[str, float]
    target_bpb: float
    seed: int = 0
    tokens: int | None = None
    wall_s: float | None = None
    copied_from: str | None = None


@dataclass(frozen=True, kw_only=True)
class FitResult(StepResult):
    """A fit step's result (stages/mixture_choice.py): the prior, the models tried and the one used
    (``fit``, with ``accepted``), the ``chosen`` candidate within the ``trust`` region (the prior when
    no model was accepted), the ``center`` the next round samples around (the candidate, or without an
    accepted model the best measured mixture), the predictions, the predicted gain with its interval."""

    LABEL: ClassVar[str] = "a mixture fit"
    REQUIRED: ClassVar[tuple[str, ...]] = ("chosen", "prior", "fit", "predicted", "predicted_prior",
                                           "predicted_points", "constraints")

    chosen: dict[str, float]
    prior: dict[str, float]
    fit: dict
    predicted: float
    predicted_prior: float
    predicted_points: list[float]
    constraints: dict
    center: dict[str, float] | None = None
    tried: list[dict] | None = None
    predicted_gain: dict | None = None
    trust: dict | None = None
    round: int | None = None


@dataclass(frozen=True)
class Draw:
    """Which mixture a run trains on: ``round`` 1: draw ``index`` around the prior (0: the prior);
    ``round`` R > 1: draw ``index`` around the choice of the fit step ``fit``; ``round`` 0: the
    choice of the fit step ``fit`` itself (verification)."""

    round: int
    index: int = 0
    fit: str | None = None


def build_proxy(step, prefix: str) -> dict:
    """Build one run step under ``prefix`` (a worker's task). Its dependencies are built already; the
    runner's lease and markers make it safe beside other workers and other runs. ``fast``: the run
    that dispatched this task checked its dependencies' content moments ago; one re-hash of the token
    caches per proxy would cost more than the check is worth."""
    from datakit.steps import run_steps

    entry = run_steps([step], prefix, only=[step.name], fast=True).to_dict()["steps"][-1]
    return {"name": step.name, "status": entry["status"], "error": entry.get("error")}


def proxies_step(ctx: StepContext, proxies: tuple) -> dict:
    """Train the runs of a wave not yet built, in parallel on the run's backend (one task each)."""
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


def tokens_of(ctx: StepContext, token_steps: dict[str, str]) -> dict[str, int]:
    return {n: TokensResult.of(ctx.deps[s]).tokens_in("train") for n, s in token_steps.items()}


def _split(ctx: StepContext, step: str, which: str) -> str:
    rec = ctx.deps[step]
    return TokensResult.of(rec).split_dir(rec.output, which)


def prior_of(ctx: StepContext, token_steps: dict[str, str], components: list[str],
             temperature: float) -> dict[str, float]:
    """Token-proportional weights (with the temperature) over the searched components, at 6 decimals
    exactly as proxy 0 trains on them."""
    prior = proportional(tokens_of(ctx, {n: token_steps[n] for n in components}), temperature)
    return rounded(sorted(prior), [prior[n] for n in sorted(prior)])


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


def seeded(cfg: TrainConfig, seed: int) -> TrainConfig:
    """``cfg`` under training seed offset ``seed``: parameter init and data order both move."""
    return dataclasses.replace(cfg, seed=cfg.seed + seed, data_seed=cfg.data_seed + seed) if seed else cfg


def train_on(ctx: StepContext, cfg: TrainConfig, weights: dict[str, float], token_steps: dict[str, str],
             validation: list[str], target_name: str | None, out_dir: str, seed: int = 0) -> dict:
    """Train ``cfg`` on ``weights`` (as exact block counts) and measure the target; the run's record."""
    from datakit.train.stage import train_model

    tokens = tokens_of(ctx, token_steps)
    cfg = seeded(cfg, seed)
    live = {n: w for n, w in weights.items() if w > 0 and tokens[n] > cfg.seq_len}
    plan = resolve([(0, live)], windows_of({n: tokens[n] for n in live}, cfg.seq_len), steps=cfg.steps,
                   batch_size=cfg.batch_size, block_size=max(DEFAULT_BLOCK_SIZE, cfg.batch_size), seed=cfg.data_seed)
    schedule = plan.schedule()
    train = {n: _split(ctx, token_steps[n], "train") for n in schedule_names(schedule)}
    t0 = time.perf_counter()
    res = train_model(cfg, train, schedule, _targets(ctx, token_steps, validation, target_name), out_dir)
    return ProxyRun.written({"weights": weights, "target_bpb": res.bpb, "target_loss": res.eval_loss, "seed": seed,
                             "train_loss": res.final_loss, "tokens": cfg.steps * cfg.batch_size * cfg.seq_len,
                             "wall_s": round(time.perf_counter() - t0, 3), "counters": {"steps": res.steps}})


def mixture_of(ctx: StepContext, draw: Draw, search: SearchConfig, prior: dict[str, float]) -> dict[str, float]:
    """The mixture ``draw`` names (see Draw)."""
    if draw.round == 1:
        return sample_mixtures(prior, draw.index + 1, search.concentration, search.seed)[draw.index]
    fitted = FitResult.of(ctx.deps[draw.fit])
    if draw.round == 0:
        return fitted.chosen
    center = fitted.center or fitted.chosen
    return sample_around(center, draw.index + 1, search.refine_concentration, search.seed, draw.round)[draw.index]


def run_step(ctx: StepContext, draw: Draw, seed: int, search: SearchConfig, temperature: float,
             token_steps: dict[str, str], components: list[str], target_name: str | None,
             same_as: str | None = None) -> dict:
    """One run: the mixture ``draw`` names, trained under seed offset ``seed`` and measured. A
    verification run whose candidate is proportional itself is proportional's run ``same_as``."""
    prior = prior_of(ctx, token_steps, components, temperature)
    weights = mixture_of(ctx, draw, search, prior)
    if same_as and weights == prior:
        return ProxyRun.written({**ProxyRun.of(ctx.deps[same_as]).to_dict(), "wall_s": 0.0, "copied_from": same_as})
    return train_on(ctx, search.proxy, weights, token_steps, list(search.target.validation), target_name,
                    ctx.output, seed)


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
