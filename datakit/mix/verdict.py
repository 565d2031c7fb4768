"""The search's decision: return the candidate mixture only when it beats proportional by more than
the noise, else proportional, and say why (one sentence a reader can check against the file).

The test is stated in TEST and recorded in every mixture file: with verification, the interval of the
measured gain (`stats.gain_test`); without it (``verify: false``), the interval of the fit's predicted
gain, which is weaker evidence and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from .stats import Interval

TEST = ("the candidate is returned only when the lower end of the two-sided {confidence:.0%} interval of its "
        "gain over proportional exceeds min_gain ({min_gain:g} bpb). Verified: gain = mean target bpb of "
        "proportional's seed runs - mean of the candidate's, SE = seed SD x sqrt(1/n_p + 1/n_c), t with the "
        "seed noise's degrees of freedom (pooled two-sample t-test). Not verified: the fit's predicted gain "
        "and its standard error.")


@dataclass(frozen=True)
class Decision:
    """``returned``: "candidate" or "proportional"; ``reason``: why, with the numbers."""

    returned: str
    reason: str

    def to_dict(self, confidence: float, min_gain: float) -> dict:
        return {"returned": self.returned, "reason": self.reason,
                "test": TEST.format(confidence=confidence, min_gain=min_gain)}


def _span(i: Interval) -> str:
    return f"{i.value:+.4f} bpb [{i.lo:+.4f}, {i.hi:+.4f}]"


def decide(*, accepted: bool, loo_rmse: float, spread: float, same_as_prior: bool, measured: Interval | None,
           predicted: Interval | None, seed_sd: float, min_gain: float) -> Decision:
    """The decision (see the module docstring); ``measured`` is None without verification."""
    if not accepted:
        return Decision("proportional", f"no model was accepted: the best leave-one-out error ({loo_rmse:.4f} bpb) "
                        f"is not below the spread of the differences it predicts ({spread:.4f} bpb), so the "
                        f"proxies cannot tell these mixtures apart (seed SD {seed_sd:.4f} bpb)")
    if same_as_prior:
        return Decision("proportional", "the fit's best mixture within the trust region is proportional itself")
    if measured is not None:
        if measured.lo > min_gain:
            return Decision("candidate", f"measured gain {_span(measured)} over proportional: the interval clears "
                            f"{min_gain:g} bpb (seed SD {seed_sd:.4f} bpb)")
        if measured.value < 0:
            return Decision("proportional", f"the candidate measured worse than proportional: gain {_span(measured)}, "
                            f"seed SD {seed_sd:.4f} bpb")
        return Decision("proportional", f"the candidate's measured gain {_span(measured)} does not clear "
                        f"{min_gain:g} bpb at {measured.confidence:.0%}: within the seed noise (SD {seed_sd:.4f} bpb)")
    assert predicted is not None
    if predicted.lo > min_gain:
        return Decision("candidate", f"not verified (verify: false): predicted gain {_span(predicted)} clears "
                        f"{min_gain:g} bpb; train it beside proportional before trusting it")
    return Decision("proportional", f"not verified (verify: false) and the predicted gain {_span(predicted)} does "
                    f"not clear {min_gain:g} bpb (seed SD {seed_sd:.4f} bpb)")
