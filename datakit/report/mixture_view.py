"""The report's "Tokens and mixture" and "Mixture search" sections (the search: its decision and reason,
the gains with intervals and the seed noise, the fit and the trust region, every proxy).

The weights shown are the ones training drew by, computed by `datakit.report.mix_show.trained_weights`: the
train step's recorded mixture, or its manifest weights through the same `plan_mixture` that `datakit mix
show` runs. The page once normalised the manifest weights over every component, those without tokens
included, and so showed 0.367 for a component that `mix show` (and training) gave 0.0.
"""

from __future__ import annotations

from datakit.core.results import MixtureResult, TokensResult
from datakit.mix.plan import MixtureError
from .mix_show import trained_weights

from . import charts
from .html import esc, num, scroll, section, table


def mixture_section(caches: dict[str, TokensResult], manifest: dict[str, float],
                    train: tuple[dict, list[dict] | None] | None) -> str:
    """``caches``: each component's token cache result; ``manifest``: the plan's component weights;
    ``train``: the built train step's (config, resolved mixture phases), None without one."""
    if not caches:
        return section("mixture", "Tokens and mixture", "<p class=muted>No token caches.</p>")
    tokens = {n: r.total_tokens for n, r in caches.items()}
    weights, note = None, ""
    if train is not None:
        try:
            weights = trained_weights(train[0], train[1], {n: r.tokens_in("train") for n, r in caches.items()})
        except MixtureError as e:
            note = f"<p class=warn>the mixture cannot be resolved: {esc(e)}</p>"
    total = sum(tokens.values()) or 1
    rows = [[n, t, t / total, manifest.get(n), (weights or {}).get(n, 0.0) if weights is not None else None]
            for n, t in tokens.items()]
    body = (charts.bars(list(tokens), list(tokens.values()), "tokens", "tokens-chart")
            + scroll(table(["component", "tokens", "token share", "manifest weight", "training weight"], rows,
                           cls="mixture"))
            + "<p class=muted>training weight: the share of every batch block training draws from the component, "
              "as <code>datakit mix show</code> computes it (components without training tokens get none)</p>"
            + note)
    return section("mixture", "Tokens and mixture", body)


def _weights_text(weights: dict) -> str:
    return ", ".join(f"{n} {float(w):.3f}" for n, w in weights.items())


def _runs_text(runs) -> str:
    return ", ".join(f"{r:.4f}" for r in runs or [])


def _decision(res: MixtureResult) -> str:
    dec, noise, gain = res.decision or {}, res.noise or {}, res.gain or {}
    rows = [[k, g.get("value"), g.get("se"), f"[{g['lo']:+.4f}, {g['hi']:+.4f}]", g.get("df")]
            for k, g in (("measured", gain.get("measured")), ("predicted", gain.get("predicted"))) if g]
    return (f"<p><b>returned {esc(dec.get('returned', ''))}</b>: {esc(dec.get('reason', ''))}</p>"
            f"<p class=muted>seed SD {num(noise.get('seed_sd'), 4)} bpb ({esc(noise.get('df'))} degrees of freedom); "
            f"test: {esc(dec.get('test', ''))}</p>"
            + scroll(table(["gain over proportional", "bpb", "SE", "interval", "df"], rows)))


def _fit(res: MixtureResult) -> str:
    fit, trust = res.fit or {}, res.trust or {}
    tried = table(["model", "leave-one-out RMSE", "spread of predictions", "accepted"],
                  [[t["model"], t["loo_rmse"], t["spread"], "yes" if t["accepted"] else "no"]
                   for t in fit.get("tried") or []])
    box = table(["component", "lowest weight", "highest weight"],
                [[n, lo, hi] for n, (lo, hi) in (trust.get("box") or {}).items()])
    return (f"<p class=muted>fit: {esc(fit.get('formula', ''))}; R² {num(fit.get('r2'), 3)}, leave-one-out RMSE "
            f"{num(fit.get('loo_rmse'), 4)} bpb against a spread of {num(fit.get('spread'), 4)} bpb "
            f"({'accepted' if fit.get('accepted') else 'rejected'}) over {len(res.proxies or [])} proxies</p>"
            + scroll(tried)
            + f"<p class=muted>trust region: {esc(trust.get('about', ''))}; expand {esc(trust.get('expand'))}, "
              f"the candidate {num(trust.get('nearest_proxy_l1'), 3)} (L1) from the nearest proxy</p>" + scroll(box))


def search_section(name: str, res: MixtureResult) -> str:
    """The mixture search (its step ``name`` and result): the decision and its reason with the gains'
    intervals and the seed noise; proportional, the candidate and the returned mixture with their
    predicted and measured target bits per byte (each seed's run); the fit, every model tried, the
    trust region; every proxy's weights against its target loss. Empty without proxies."""
    if not res.proxies or res.baseline is None:
        return ""
    base, cand, chosen = res.baseline, res.candidate or res.chosen, res.chosen
    facts = table(["mixture", "weights", "predicted bpb", "measured bpb", "runs (one per seed)"],
                  [[label, _weights_text(m.weights), m.predicted_bpb, m.measured_bpb, _runs_text(m.runs)]
                   for label, m in (("proportional", base), ("candidate", cand), ("returned", chosen))], left=2)
    proxies = table(["proxy", "round", "weights", "measured bpb", "runs", "predicted bpb"],
                    [[p["name"], str(p["round"]), _weights_text(p["weights"]), p["measured_bpb"],
                      _runs_text(p.get("runs")), p.get("predicted_bpb")] for p in res.proxies], left=3)
    body = (_decision(res)
            + charts.proxy_scatter(res.proxies, "mix-proxies-chart")
            + charts.mixture_pair(base.weights, cand.weights, ("proportional", "candidate"), "mix-choice-chart")
            + scroll(facts) + _fit(res) + scroll(proxies)
            + f"<p class=muted>mixture file: {esc(name)}/{esc(res.file or '')}</p>")
    return section("mixture-search", "Mixture search", body)
