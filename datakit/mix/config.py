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
      search: {proxies: 8, proxy: {steps: 60}, target: {validation: [books]}}

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
    """A proxy-model mixture search: ``proxies`` mixtures drawn from a Dirichlet around the prior
    (token-proportional with ``temperature``), each trained as a small model (``proxy``, a `train:`
    section) and measured on ``target``; a Scheffé regression from weights to loss chooses the mixture.

    concentration: the Dirichlet's total concentration (larger: samples closer to the prior).
    min_weight: per-component lower bounds on the chosen mixture (constraints with max_epochs).
    verify: train the chosen mixture too, for the same budget, to measure it beside proportional.
    candidates: mixtures scored by the fitted model when choosing (seeded, deterministic).
    """

    target: TargetSpec
    proxies: int = field(default=8, metadata={"min": 3})
    seed: int = 0
    concentration: float = field(default=4.0, metadata={"gt": 0})
    proxy: TrainConfig = field(default_factory=_proxy_default)
    min_weight: dict[str, float] = field(default_factory=dict)
    verify: bool = True
    candidates: int = field(default=20000, metadata={"min": 1})


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
