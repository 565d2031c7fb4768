"""The `quality_classifier:` manifest section: a fastText quality classifier trained inside the pipeline
(DCLM / FineWeb-Edu style) and the selection it drives.

    quality_classifier:
      positives: [reference]          # sources whose documents are the positive class (a curated set)
      positive_files: [refs.jsonl]    # and/or JSONL files with a "text" field
      negatives: 20000                # a uniform sample of this many documents of the other sources
      min_auc: 0.6                    # training fails below this held-out AUC (null: never)
      # labels: labels.jsonl          # or: {"id": ..., "label": 0.87 | "positive" | "negative"} per line
      select: tiers                   # none (score only) | threshold | top_fraction | tiers
      tiers:
        - {name: high, min_score: 0.8, weight: 2.0}
        - {name: low, min_score: 0.2, weight: 0.5}   # below the lowest tier: removed

Scored sources: ``apply_to`` (default: every source that is not a positive source). Tiers become training
mixture components named ``<source>.<tier>``; tier names hold no '.', so a component can only collide
with a source of that exact name, which the stage refuses when the manifest loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from datakit.manifest.checks import check_name

_FRACTION = {"min": 0, "max": 1}
_SOURCES = {"sources": True}  # names sources of the manifest: checked when it loads (manifest.model)


def _check_tier_name(value: str) -> str | None:
    if "." in value:
        return f"invalid tier name {value!r}: no '.' (a tier's component is '<source>.<tier>')"
    return check_name(value)


@dataclass(frozen=True)
class TierSpec:
    """One quality tier: documents scoring >= ``min_score`` (and below the tier above) form the
    training-mixture component ``<source>.<name>`` with weight ``weight`` times the source's weight."""

    name: str = field(metadata={"check": _check_tier_name})
    min_score: float = field(metadata=_FRACTION)
    weight: float = field(default=1.0, metadata={"min": 0})


@dataclass(frozen=True)
class ClassifierConfig:
    """The section (see the module docstring). Training settings are fastText's supervised ones; training
    runs on one thread with ``seed`` so the same inputs give the same model file, byte for byte."""

    enabled: bool = True
    positives: tuple[str, ...] = field(default=(), metadata=_SOURCES)
    positive_files: tuple[str, ...] = field(default=(), metadata={"path": True})
    negatives: int = field(default=20_000, metadata={"min": 1})
    negative_sources: tuple[str, ...] = field(default=(), metadata=_SOURCES)
    labels: str | None = field(default=None, metadata={"path": True})
    label_threshold: float = 0.5
    holdout: float = field(default=0.1, metadata={"gt": 0, "lt": 1})
    # fail training below this held-out AUC (null: never); a passing run's outputs never depend on it
    min_auc: float | None = field(default=0.6, metadata={**_FRACTION, "identity": False})
    apply_to: tuple[str, ...] = field(default=(), metadata=_SOURCES)
    select: Literal["none", "threshold", "top_fraction", "tiers"] = "threshold"
    threshold: float = field(default=0.5, metadata=_FRACTION)
    top_fraction: float = field(default=0.5, metadata={"gt": 0, "max": 1})
    tiers: tuple[TierSpec, ...] = ()
    epoch: int = field(default=40, metadata={"min": 1})
    lr: float = field(default=0.2, metadata={"gt": 0})
    dim: int = field(default=32, metadata={"min": 1})
    word_ngrams: int = field(default=2, metadata={"min": 1})
    min_count: int = field(default=1, metadata={"min": 1})
    bucket: int = field(default=200_000, metadata={"min": 1})
    max_chars: int = field(default=20_000, metadata={"min": 1})
    seed: int = 0

    def _cross_check(self, given: frozenset[str]) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        if not self.enabled:
            return out
        if self.labels is None and not (self.positives or self.positive_files):
            out.append(("positives", "give positives (sources), positive_files, or a labels file"))
        if self.labels is not None and (self.positives or self.positive_files):
            out.append(("labels", "a labels file replaces positives/negatives: give one or the other"))
        if self.select == "tiers" and not self.tiers:
            out.append(("tiers", "select: tiers needs at least one tier"))
        names = [t.name for t in self.tiers]
        if len(set(names)) != len(names):
            out.append(("tiers", f"tier names repeat: {names}"))
        mins = [t.min_score for t in self.tiers]
        if mins != sorted(mins, reverse=True) or len(set(mins)) != len(mins):
            out.append(("tiers", "list tiers from the highest min_score down, each min_score different"))
        return out

    def scored_sources(self, sources: list[str]) -> list[str]:
        """The sources scored and selected: ``apply_to``, or every source that is not a positive one."""
        if self.apply_to:
            return [s for s in sources if s in self.apply_to]
        return [s for s in sources if s not in self.positives]

    def negative_pool(self, sources: list[str]) -> list[str]:
        """The sources the negatives are sampled from: ``negative_sources``, or the non-positive ones."""
        if self.negative_sources:
            return [s for s in sources if s in self.negative_sources]
        return [s for s in sources if s not in self.positives]
