"""Data mixtures: the `mixture:` manifest section, resolving it into exact per-step weights (token
proportional with a temperature, explicit, staged, capped by epochs), `datakit mix show`, and the
proxy-model mixture search's maths (`datakit mix search`, also a manifest step): search (sampling
and the fit), trust (the trust region and the choice in it), stats (seed noise, intervals), verdict
(the decision against proportional), file (the mixture file)."""

from .config import MixtureConfig, SearchConfig, StagedWeights, TargetSpec

__all__ = ["MixtureConfig", "SearchConfig", "StagedWeights", "TargetSpec"]
