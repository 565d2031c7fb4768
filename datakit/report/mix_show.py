"""`datakit mix show`: per component, documents and tokens (the token caches' `.stats.json`), the
token-proportional weight, the manifest weight, the weight training will use and the epochs it will see
for the training budget (steps x batch x seq_len), with warnings. Works on a built prefix; when caches
are missing it says which and what to run. With a built mixture search, it shows the search too
(mix_search_text): its proxies, the fit, the trust region, the verification and the decision. It reads
what the mixture maths (`datakit.mix`) computes over the built caches, so it lives with the report,
above the rooms; the weights it shows are the ones the report and training use (`trained_weights`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from datakit.core import fsio
from datakit.core.layout import TokenCacheDir
from datakit.core.results import MixtureResult
from datakit.mix.config import MixtureConfig
from datakit.mix.plan import MixtureError, proportional, windows_of
from datakit.mix.resolve import plan_mixture
from datakit.steps.markers import is_built

from .mix_search_text import detail_lines


@dataclass
class MixView:
    """What `mix show` prints (also its --json)."""

    rows: list[dict]
    budget: dict | None
    phases: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    mode: str = "manifest"
    search: MixtureResult | None = None

    def to_dict(self) -> dict:
        out = {"rows": self.rows, "budget": self.budget, "phases": self.phases, "warnings": self.warnings,
               "missing": self.missing, "mode": self.mode}
        return {**out, "search": self.search.to_dict()} if self.search is not None else out


def _built(plan, prefix: str, name: str | None) -> str | None:
    """The output dir of the plan's step ``name`` when it is built under ``prefix`` (a plan just built
    or one read from ``plan.json``: only the step's name and identity are needed)."""
    ref = plan.step(name) if name else None
    if ref is None:
        return None
    step_dir = fsio.join(prefix, ref.dirname)
    return step_dir if is_built(step_dir) else None


def _stats(path: str) -> dict:
    with fsio.open_read(TokenCacheDir(path).stats("train")) as f:
        return json.loads(f.read())


def _search(plan, prefix: str) -> MixtureResult | None:
    """The plan's mixture search's result when it is built under ``prefix``."""
    path = _built(plan, prefix, plan.mixture)
    if path is None:
        return None
    with fsio.open_read(f"{path}/artifact.json") as f:
        return MixtureResult.from_dict(json.loads(f.read())["result"], f"step {plan.mixture}")


def mix_view(manifest, plan, prefix: str, *, warn_epochs: float | None = None) -> MixView:
    """The table for MANIFEST's components (its ``plan``'s) over the token caches built under ``prefix``."""
    mix: MixtureConfig = manifest.sections.get("mixture") or MixtureConfig()
    warn = warn_epochs if warn_epochs is not None else mix.warn_epochs
    weights = plan.weights()
    stats, missing = {}, []
    for n in weights:
        path = _built(plan, prefix, plan.tokens.get(n))
        if path is None:
            missing.append(n)
        else:
            stats[n] = _stats(path)
    train = manifest.sections.get("train")
    budget = None if train is None else {"steps": train.steps, "batch_size": train.batch_size,
                                         "seq_len": train.seq_len,
                                         "tokens": train.steps * train.batch_size * train.seq_len}
    view = MixView([], budget, missing=missing, mode=mix.weights if isinstance(mix.weights, str) else "explicit",
                   search=_search(plan, prefix))
    if missing:
        return view
    tokens = {n: int(s["total_tokens"]) for n, s in stats.items()}
    prop = proportional({n: t for n, t in tokens.items() if weights[n] > 0} or tokens, mix.temperature)
    mixture = _plan(view, mix, tokens, weights, train, plan, prefix)
    windows = windows_of(tokens, train.seq_len) if train else {}
    for n in sorted(weights):
        row = {"component": n, "documents": int(stats[n]["total_docs"]), "tokens": tokens[n],
               "proportional": prop.get(n, 0.0), "manifest": weights[n],
               "weight": mixture.weights.get(n, 0.0) if mixture else None,
               "epochs": mixture.epochs.get(n, 0.0) if mixture else None, "windows": windows.get(n),
               "capped": bool(mixture and n in mixture.capped)}
        view.rows.append(row)
        if row["epochs"] is not None and row["epochs"] > warn:
            view.warnings.append(f"{n} is repeated {row['epochs']:.1f} epochs over the training budget "
                                 f"(more than {warn:g}); lower its weight or set mixture.max_epochs")
    if mixture is not None:
        view.phases = [{"start": s, "weights": {n: c / mixture.block_size for n, c in counts.items()}}
                       for s, counts in mixture.phases]
    return view


def _plan(view: MixView, mix: MixtureConfig, tokens, weights, train, plan, prefix):
    if train is None:
        view.warnings.append("no train: section, so no training budget: epochs are not computed")
        return None
    searched = None
    if mix.uses_search:
        searched = view.search.chosen.weights if view.search is not None else None
        if searched is None:
            view.warnings.append("weights: search, but the search has not run: run `datakit mix search MANIFEST`")
            return None
    file_weights = None
    if mix.file:
        from datakit.mix.file import read_mixture_file

        file_weights = read_mixture_file(mix.file)["weights"]
    try:
        return plan_mixture(mix, tokens, weights, steps=train.steps, batch_size=train.batch_size,
                            seq_len=train.seq_len, seed=train.data_seed, searched=searched, file_weights=file_weights)
    except MixtureError as e:
        view.warnings.append(f"the mixture cannot be built: {e}")
        return None


def trained_weights(config: dict, phases: list[dict] | None, tokens: dict[str, int]) -> dict[str, float]:
    """The first-phase weights a built train step drew by, from its artifact's ``config``, its result's
    resolved mixture ``phases`` (`ModelResult.phases`) and the components' training ``tokens``: the
    mixture it recorded (a `mixture:` section: `plan_mixture` ran in the step), else its manifest weights through the same `plan_mixture` that `mix show` runs
    (components without tokens get none, the rest share a block exactly as training draws them). So
    the report, `mix show` and training give one number; raises MixtureError where `mix show` warns."""
    if phases:
        return {n: float(w) for n, w in phases[0]["weights"].items()}
    train = config["train"]
    plan = plan_mixture(MixtureConfig(), tokens, config["weights"], steps=train["steps"],
                        batch_size=train["batch_size"], seq_len=train["seq_len"], seed=train["data_seed"])
    return plan.weights


def format_view(view: MixView, manifest_path: str) -> list[str]:
    """The text table and its warnings."""
    if view.missing:
        return [f"token caches are not built for: {', '.join(view.missing)}.",
                f"Build them first: datakit run {manifest_path}   (tokenize writes the caches; `mix show` reads "
                "their .stats.json)"]
    head = f"{'component':<16} {'documents':>10} {'tokens':>12} {'proportional':>12} {'manifest':>9} " \
           f"{'weight':>8} {'epochs':>8}"
    lines = [f"weights: {view.mode}" + (f"; budget {view.budget['steps']} steps x {view.budget['batch_size']} x "
                                        f"{view.budget['seq_len']} = {view.budget['tokens']:,} tokens"
                                        if view.budget else ""), head]
    for r in view.rows:
        w = "-" if r["weight"] is None else f"{r['weight']:.4f}"
        e = "-" if r["epochs"] is None else f"{r['epochs']:.2f}" + (" cap" if r["capped"] else "")
        lines.append(f"{r['component']:<16} {r['documents']:>10,} {r['tokens']:>12,} {r['proportional']:>12.4f} "
                     f"{r['manifest']:>9g} {w:>8} {e:>8}")
    for p in view.phases[1:]:
        ws = ", ".join(f"{n} {w:.4f}" for n, w in p["weights"].items())
        lines.append(f"from step {p['start']}: {ws}")
    lines += [f"warning: {w}" for w in view.warnings]
    if view.search is not None and view.search.baseline is not None and view.search.decision:
        lines += detail_lines(view.search)
    return lines
