"""From the `mixture:` section and the components' exact token counts to a MixturePlan.

Token counts are known only after tokenize, so the train step (and the search, and `mix show`) call
this with the counts of their token caches; every caller gets the same plan for the same counts.
"""

from __future__ import annotations

from datakit.mix.config import MixtureConfig
from datakit.mix.plan import MixtureError, MixturePlan, proportional, resolve, windows_of
from datakit.tokenize.reader import DEFAULT_BLOCK_SIZE


def phase_weights(spec, *, tokens: dict[str, int], manifest: dict[str, float], temperature: float,
                  searched: dict[str, float] | None = None) -> dict[str, float]:
    """One phase's weights over the components. ``manifest``: the components' manifest weights (0
    excludes a component from `manifest` and `proportional`); ``searched``: a search's chosen weights."""
    live = [n for n in sorted(manifest) if manifest[n] > 0 and tokens.get(n, 0) > 0]
    if spec == "manifest":
        return {n: float(manifest[n]) for n in live}
    if spec == "proportional":
        return proportional({n: tokens[n] for n in live}, temperature)
    if spec == "search":
        if searched is None:
            raise MixtureError("weights: search, but no search result was given")
        return {n: float(w) for n, w in sorted(searched.items())}
    unknown = sorted(set(spec) - set(manifest))
    if unknown:
        raise MixtureError(f"mixture weights name {', '.join(unknown)}, not a training component "
                           f"(components: {', '.join(sorted(manifest))})")
    empty = sorted(n for n, w in spec.items() if w > 0 and not tokens.get(n))
    if empty:
        raise MixtureError(f"mixture weights give weight to {', '.join(empty)}, which has no training tokens; "
                           "give it weight 0 or see the run summary for the step that emptied it")
    return {n: float(w) for n, w in sorted(spec.items())}


def plan_mixture(mix: MixtureConfig, tokens: dict[str, int], manifest: dict[str, float], *, steps: int,
                 batch_size: int, seq_len: int, seed: int, searched: dict[str, float] | None = None,
                 file_weights: dict[str, float] | None = None) -> MixturePlan:
    """The exact mixture (phases, caps held) for a budget of steps x batch_size sequences of seq_len."""
    first = file_weights if mix.file else mix.weights
    args = dict(tokens=tokens, manifest=manifest, temperature=mix.temperature, searched=searched)
    phases = [(0, phase_weights(first, **args))]
    phases += [(p.start, phase_weights(p.weights, **args)) for p in mix.schedule]
    named = sorted({n for _, w in phases for n in w})
    windows = windows_of({n: tokens.get(n, 0) for n in named}, seq_len)
    short = sorted(n for n in named if windows[n] < 1 and any(w.get(n, 0) > 0 for _, w in phases))
    if short:
        raise MixtureError(f"component(s) {', '.join(short)} hold fewer tokens than one window of "
                           f"seq_len+1 = {seq_len + 1}; give them weight 0 or lower seq_len")
    unknown = sorted(set(mix.max_epochs) - set(manifest))
    if unknown:
        raise MixtureError(f"max_epochs names {', '.join(unknown)}, not a training component "
                           f"(components: {', '.join(sorted(manifest))})")
    block = max(DEFAULT_BLOCK_SIZE, batch_size)
    return resolve(phases, windows, steps=steps, batch_size=batch_size, block_size=block, seed=seed,
                   max_epochs={n: e for n, e in mix.max_epochs.items() if n in windows})
