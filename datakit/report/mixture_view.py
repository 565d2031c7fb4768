"""The report's "Tokens and mixture" and "Mixture search" sections.

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


def search_section(name: str, res: MixtureResult) -> str:
    """The mixture search (its step ``name`` and result): every proxy's weights against its target loss;
    the chosen mixture beside proportional, with their measured (and predicted) target bits per byte.
    Empty without proxies."""
    if not res.proxies or res.baseline is None:
        return ""
    base, chosen = res.baseline, res.chosen
    facts = table(["mixture", "weights", "predicted bpb", "measured bpb"],
                  [["proportional", _weights_text(base.weights), base.predicted_bpb, base.measured_bpb],
                   ["chosen", _weights_text(chosen.weights), chosen.predicted_bpb, chosen.measured_bpb]], left=2)
    fit = res.fit or {}
    note = (f"<p class=muted>fit: {esc(fit.get('formula', ''))}; R² {num(fit.get('r2'), 3)}, leave-one-out RMSE "
            f"{num(fit.get('loo_rmse'), 4)} bpb over {len(res.proxies)} proxies; mixture file: "
            f"{esc(name)}/{esc(res.file or '')}</p>")
    body = (charts.proxy_scatter(res.proxies, "mix-proxies-chart")
            + charts.mixture_pair(base.weights, chosen.weights, ("proportional", "chosen"), "mix-choice-chart")
            + scroll(facts) + note)
    return section("mixture-search", "Mixture search", body)
