"""Data mixtures: the `mixture:` manifest section, resolving it into exact per-step weights (token
proportional with a temperature, explicit, staged, capped by epochs), `datakit mix show`, and the
proxy-model mixture search (`datakit mix search`, also a manifest step)."""

from .config import MixtureConfig, SearchConfig, StagedWeights, TargetSpec

__all__ = ["MixtureConfig", "SearchConfig", "StagedWeights", "TargetSpec"]
