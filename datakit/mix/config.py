"""The `mixture:` manifest section: one config class per concept, and the section IS the runtime config.

    mixture:
      weights: proportional        # manifest (each component's `weight:`) | proportional | search
                                   # | explicit: {web: 0.7, code: 0.3}
      temperature: 2.0             # proportional: w ~ tokens ** (1 / temperature); 1 = by tokens
      max_epochs: {code: 4}        # caps: a component never sees more epochs than this (held exactly)
      warn_epochs: 4               # `datakit mix show` warns above this many epochs
      schedule:                    # staged weights: from `start` (a step) on, mix by `weights`
        - {start: 900, weights: {web: 0.2, books: 0.8}}
      file: mixes/chosen.yaml      # a mixture file written by `datakit mix search`: its chosen weights
      search: {proxies: 8, rounds: 3, refine: 4, seeds: 3, proxy: {steps: 60}, target: {validation: [books]}}

Weights name the training mixture's components (`graph.weights`: a source, or a part of one such as a
quality tier `web.high`), so a stage that splits a source into components needs nothing from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from datakit.train.config import TrainConfig

WeightsSpec = Literal["manifest", "proportional", "search"] | dict[str, float]


def _nonneg_weights(value: object) -> str | None:
    if isinstance(value, dict):
        bad = [k for k, v in value.items() if v < 0]
        if bad:
            return f"weights must be >= 0 (negative: {', '.join(bad)})"
        if not any(v > 0 for v in value.values()):
            return "at least one weight must be > 0"
    return None


@dataclass(frozen=True)
class StagedWeights:
    """One phase of a staged mixture: from step ``start`` on, mix by ``weights`` (a cooldown mix)."""

    start: int = field(metadata={"min": 1})
    weights: WeightsSpec = field(metadata={"check": _nonneg_weights})


@dataclass(frozen=True)
class TargetSpec:
    """The search's target evaluation set: validation splits of named components, and/or an external
    jsonl (tokenized with the run's tokenizer). Loss is bits per byte over all of it."""

    validation: tuple[str, ...] = ()
    jsonl: str | None = field(default=None, metadata={"path": True})
    text_field: str = "text"

    def _cross_check(self, given: frozenset[str]) -> list[tuple[str, str]]:
        if not self.validation and not self.jsonl:
            return [("validation", "name the target: validation components (validation: [books]) or jsonl: FILE")]
        return []


def _proxy_default() -> TrainConfig:
    return TrainConfig.from_preset("nano", steps=60, warmup_steps=6, log_every=20)


@dataclass(frozen=True)
class SearchConfig:
    """A proxy-model mixture search that holds up against noise (datakit.mix: search, trust, stats,
    verdict). Round one trains ``proxies`` small models (``proxy``, a `train:` section) on mixtures
    drawn from a Dirichlet around the prior (token-proportional with ``temperature``; proxy 0 is the
    prior itself) and measures each on ``target``; each later round (``rounds`` in all) trains
    ``refine`` more around the previous round's choice. A regression from weights to loss, accepted
    only when it predicts held-out proxies better than the differences it predicts, chooses the
    candidate within the trust region. The candidate and proportional are each trained under
    ``seeds`` seeds; the search returns the candidate only when its gain clears ``min_gain`` at
    ``confidence``, else proportional, and says why.

    concentration: round one's Dirichlet, alpha = concentration x k x prior (smaller: wider samples).
    refine_concentration: the same for later rounds around the previous choice (larger: closer to it).
    seeds: runs per repeated mixture (parameter init and data order): proportional and the first
        ``noise_proxies`` proxies in round one (the seed noise), and the candidate in verification.
    trust: how far the trust region reaches past the samples' convex hull toward every corner (0-1).
    min_weight: per-component lower bounds on the candidate (constraints with max_epochs).
    verify: train the candidate under ``seeds`` seeds beside proportional's runs, and decide on the
        measured gain (without it, on the predicted gain, and the file says so).
    confidence, min_gain: the decision's test (see datakit.mix.verdict.TEST).
    candidates: mixtures in the trust region scored by the fitted model when choosing (seeded).
    """

    target: TargetSpec
    proxies: int = field(default=8, metadata={"min": 3})
    seed: int = 0
    concentration: float = field(default=1.0, metadata={"gt": 0})
    proxy: TrainConfig = field(default_factory=_proxy_default)
    rounds: int = field(default=3, metadata={"min": 1})
    refine: int = field(default=4, metadata={"min": 1})
    refine_concentration: float = field(default=8.0, metadata={"gt": 0})
    seeds: int = field(default=3, metadata={"min": 2})
    noise_proxies: int = field(default=2, metadata={"min": 1})
    trust: float = field(default=0.3, metadata={"min": 0, "max": 1})
    min_weight: dict[str, float] = field(default_factory=dict)
    verify: bool = True
    confidence: float = field(default=0.95, metadata={"gt": 0, "lt": 1})
    min_gain: float = field(default=0.0, metadata={"min": 0})
    candidates: int = field(default=20000, metadata={"min": 1})

    def _cross_check(self, given: frozenset[str]) -> list[tuple[str, str]]:
        if self.noise_proxies > self.proxies:
            return [("noise_proxies", f"noise_proxies ({self.noise_proxies}) cannot exceed proxies ({self.proxies})")]
        return []

    def runs(self) -> dict[str, int]:
        """The search's budget in proxy trainings, by purpose (the mixture file records it)."""
        out = {"round_1": self.proxies, "later_rounds": (self.rounds - 1) * self.refine,
               "seed_repeats": self.noise_proxies * (self.seeds - 1), "verify": self.seeds if self.verify else 0}
        return {**out, "total": sum(out.values())}


@dataclass(frozen=True)
class MixtureConfig:
    """The training mixture (see the module docstring). Leaving the section out keeps the manifest's
    per-source `weight:` and no caps: exactly the training stage's behaviour before this section."""

    weights: WeightsSpec = field(default="manifest", metadata={"check": _nonneg_weights})
    temperature: float = field(default=1.0, metadata={"gt": 0})
    max_epochs: dict[str, float] = field(default_factory=dict)
    warn_epochs: float = field(default=4.0, metadata={"gt": 0, "identity": False})
    schedule: tuple[StagedWeights, ...] = ()
    file: str | None = field(default=None, metadata={"path": True})
    search: SearchConfig | None = None

    @property
    def uses_search(self) -> bool:
        """Some phase trains on the search's chosen weights (`weights: search`)."""
        return self.weights == "search" or any(p.weights == "search" for p in self.schedule)

    def _cross_check(self, given: frozenset[str]) -> list[tuple[object, str]]:
        out: list[tuple[object, str]] = []
        if self.file and "weights" in given:
            out.append(("file", "give either weights: or file: (a mixture file holds its own weights)"))
        if self.uses_search and self.search is None:
            out.append(("weights", "weights: search needs a search: section (what to search)"))
        starts = [p.start for p in self.schedule]
        if starts != sorted(set(starts)):
            out.append(("schedule", f"schedule starts must increase strictly, got {starts}"))
        bad = [k for k, v in self.max_epochs.items() if v <= 0]
        if bad:
            out.append(("max_epochs", f"max_epochs must be > 0 (got {', '.join(bad)}); weight 0 excludes"))
        return out
