"""The mixture search's fits and decision as steps (the runs are in stages/mixture_steps.py).

    mix-fit-rR      round R's fit over every run so far (repeated mixtures by their mean), the center
                    round R+1 samples around: its choice, or without an accepted model the best measured
    mix-fit         the final fit: the models tried, the one used (or none: each rejected), the candidate
                    within the trust region and the constraints, its predicted gain with an interval
    mix-search      the seed noise, the verification's test, the decision and the mixture file
                    (<step>/mixture.yaml); its result's `chosen` is what `weights: search` trains on
"""

from __future__ import annotations

from datakit.core.results import MixtureResult
from datakit.mix.config import MixtureConfig, SearchConfig
from datakit.mix.plan import windows_of
from datakit.mix.search import fit_models
from datakit.mix.stats import Interval, gain_test, interval, seed_noise
from datakit.mix.trust import choose, trust_region
from datakit.mix.verdict import decide
from datakit.steps import StepContext

from .mixture_steps import MIXTURE_FILE, FitResult, ProxyRun, prior_of, tokens_of


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _max_weight(ctx: StepContext, mix: MixtureConfig, token_steps: dict[str, str], components: list[str],
                budget: dict) -> dict[str, float]:
    """The highest weight each capped component may get over the final budget (its max_epochs)."""
    windows = windows_of(tokens_of(ctx, {n: token_steps[n] for n in components}), budget["seq_len"])
    sequences = budget["steps"] * budget["batch_size"]
    return {n: min(1.0, e * windows[n] / sequences) for n, e in mix.max_epochs.items() if n in windows}


def fit_step(ctx: StepContext, search: SearchConfig, mix: MixtureConfig, groups: list[list[str]],
             token_steps: dict[str, str], components: list[str], budget: dict, round_no: int) -> dict:
    """Fit the runs' target loss over their weights (``groups``: the run steps of each mixture, its
    seeds); choose within the trust region, min_weight and the epoch caps of the final ``budget``
    (the train section's steps, batch_size, seq_len). No accepted model: the choice is the prior."""
    runs = [[ProxyRun.of(ctx.deps[n]) for n in g] for g in groups]
    mixtures = [g[0].weights for g in runs]
    measured = [_mean([r.target_bpb for r in g]) for g in runs]
    fits = fit_models(mixtures, measured)
    model, prior = fits[0], prior_of(ctx, token_steps, components, mix.temperature)
    region = trust_region(mixtures, search.trust)
    max_weight = _max_weight(ctx, mix, token_steps, components, budget)
    chosen, feasible = prior, None
    if model.accepted:
        chosen, _, feasible = choose(model, region, candidates=search.candidates, seed=search.seed,
                                     min_weight=dict(search.min_weight), max_weight=max_weight)
    gain, se = model.difference(prior, chosen)
    df = max(1, len(mixtures) - len(model.terms) - (model.kind == "law"))
    points = model.predict([[m[n] for n in model.names] for m in mixtures])
    center = chosen if model.accepted else mixtures[measured.index(min(measured))]
    return FitResult(prior=prior, chosen=chosen, center=center, round=round_no, fit=model.to_dict(),
                     tried=[{k: f.to_dict()[k] for k in ("model", "loo_rmse", "spread", "accepted")} for f in fits],
                     predicted=float(model.predict([[chosen[n] for n in model.names]])[0]),
                     predicted_prior=float(model.predict([[prior[n] for n in model.names]])[0]),
                     predicted_points=[float(v) for v in points],
                     predicted_gain=interval(gain, se, df, search.confidence).to_dict(),
                     trust={**region.to_dict(), "nearest_proxy_l1": round(region.nearest_sample(chosen), 6)},
                     constraints={"min_weight": dict(search.min_weight), "max_weight": max_weight, "budget": budget,
                                  "feasible_candidates": feasible}).to_dict()


def _rounds(search: SearchConfig, fits: list[FitResult]) -> list[dict]:
    out = [{"round": 1, "proxies": search.proxies, "around": "proportional",
            "concentration": search.concentration}]
    for f in fits:
        out.append({"round": f.round + 1, "proxies": search.refine, "around": f.center or f.chosen,
                    "concentration": search.refine_concentration,
                    "after_fit": {k: f.fit[k] for k in ("model", "loo_rmse", "spread", "accepted")}})
    return out


def _proxies(names: list[list[str]], runs: list[list[ProxyRun]], rounds: list[int], predicted: list[float]):
    return [{"name": n[0], "round": r, "weights": g[0].weights, "measured_bpb": _mean([x.target_bpb for x in g]),
             **({"runs": [x.target_bpb for x in g]} if len(g) > 1 else {}), "predicted_bpb": p}
            for n, g, r, p in zip(names, runs, rounds, predicted)]


def _verdict(fitted: FitResult, names: list[list[str]], runs: list[list[ProxyRun]], checks: list[ProxyRun],
             search: SearchConfig):
    """(seed noise, measured gain or None, predicted gain, decision)."""
    same = fitted.chosen == fitted.prior
    groups = {n[0]: [x.target_bpb for x in g] for n, g in zip(names, runs) if len(g) > 1}
    if checks and not same:
        groups["candidate"] = [c.target_bpb for c in checks]
    noise = seed_noise(groups)
    measured = None
    if checks and not same:
        measured = gain_test([x.target_bpb for x in runs[0]], [c.target_bpb for c in checks], noise,
                             search.confidence)
    predicted = Interval(**fitted.predicted_gain)
    decision = decide(accepted=fitted.fit["accepted"], loo_rmse=fitted.fit["loo_rmse"], spread=fitted.fit["spread"],
                      same_as_prior=same, measured=measured, predicted=predicted, seed_sd=noise.sd,
                      min_gain=search.min_gain)
    return noise, measured, predicted, decision


def search_record(fitted: FitResult, names: list[list[str]], runs: list[list[ProxyRun]], rounds: list[int],
                  checks: list[ProxyRun], round_fits: list[FitResult], search: SearchConfig) -> dict:
    """What the mixture file holds (see datakit.mix.file); no times, so it is the same on any machine."""
    import posixpath

    noise, measured, predicted, decision = _verdict(fitted, names, runs, checks, search)
    base = [x.target_bpb for x in runs[0]]
    cand = [c.target_bpb for c in checks]
    returned = fitted.chosen if decision.returned == "candidate" else fitted.prior
    target = {"validation": list(search.target.validation),
              "jsonl": posixpath.basename(search.target.jsonl) if search.target.jsonl else None}
    return {
        "weights": returned,
        "decision": decision.to_dict(search.confidence, search.min_gain),
        "baseline": {"name": "proportional", "weights": fitted.prior, "predicted_bpb": fitted.predicted_prior,
                     "measured_bpb": _mean(base), "runs": base},
        "candidate": {"weights": fitted.chosen, "predicted_bpb": fitted.predicted,
                      "measured_bpb": _mean(cand) if cand else None, "runs": cand or None},
        "gain": {"predicted": predicted.to_dict(), "measured": measured.to_dict() if measured else None,
                 "about": "proportional's bpb - the candidate's (positive: the candidate is better), with its "
                          "two-sided interval"},
        "noise": noise.to_dict(),
        "fit": {**fitted.fit, "tried": fitted.tried,
                "about": "least squares with ridge 1e-6 over every mixture's mean bpb; accepted only when the "
                         "leave-one-out RMSE is below the spread of its predictions; of those, the lowest "
                         "leave-one-out error"},
        "trust": fitted.trust,
        "rounds": _rounds(search, round_fits),
        "constraints": fitted.constraints,
        "search": {"proxies": search.proxies, "rounds": search.rounds, "refine": search.refine, "seeds": search.seeds,
                   "noise_proxies": search.noise_proxies, "seed": search.seed, "concentration": search.concentration,
                   "refine_concentration": search.refine_concentration, "trust": search.trust,
                   "verify": search.verify, "runs": search.runs(), "target": target,
                   "proxy": {"preset": search.proxy.preset, "steps": search.proxy.steps,
                             "batch_size": search.proxy.batch_size, "seq_len": search.proxy.seq_len,
                             "tokens": runs[0][0].tokens}},
        "proxies": _proxies(names, runs, rounds, fitted.predicted_points),
    }


def search_step(ctx: StepContext, search: SearchConfig, groups: list[list[str]], rounds: list[int],
                fit_name: str, round_fits: list[str], verify: list[str]) -> dict:
    """Decide and write the mixture file; the result's `chosen` is what `weights: search` trains on."""
    from datakit.mix.file import write_mixture_file

    runs = [[ProxyRun.of(ctx.deps[n]) for n in g] for g in groups]
    checks = [ProxyRun.of(ctx.deps[n]) for n in verify]
    record = search_record(FitResult.of(ctx.deps[fit_name]), groups, runs, rounds, checks,
                           [FitResult.of(ctx.deps[f]) for f in round_fits], search)
    write_mixture_file(ctx.path(MIXTURE_FILE), record)
    side = record["candidate"] if record["decision"]["returned"] == "candidate" else record["baseline"]
    chosen = {"weights": record["weights"], **{k: side[k] for k in ("predicted_bpb", "measured_bpb", "runs")}}
    walls = [r.wall_s for g in runs for r in g] + [c.wall_s for c in checks if not c.copied_from]
    return MixtureResult.written({
        "file": MIXTURE_FILE, "chosen": chosen,
        **{k: record[k] for k in ("baseline", "candidate", "decision", "noise", "gain", "trust", "rounds", "proxies",
                                  "fit")},
        "proxy_wall_s": walls, "counters": {"proxies": len(runs), "runs": len(walls)}})
