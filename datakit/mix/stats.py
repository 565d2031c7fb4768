"""Seed noise and the intervals the mixture search states (numpy-free, exact for integer degrees of
freedom).

Why: proxies are noisy. The same mixture trained with another seed (parameter init and data order)
can score further from itself than two different mixtures score from each other, so every difference
the search reports carries the seed noise, and the verification's verdict is a stated test:

    seed SD        pooled over every mixture trained under several seeds: sqrt(sum (x - mean)^2 / df),
                   df = sum over those mixtures of (runs - 1)
    measured gain  mean bpb of proportional's runs - mean bpb of the candidate's runs (positive: the
                   candidate is better), SE = seed SD x sqrt(1/n_proportional + 1/n_candidate)
    interval       gain +- t(df) x SE at the stated confidence (two-sided): a pooled two-sample t-test.
                   Runs paired by seed are treated as independent, which is conservative when seeds
                   correlate the two mixtures' results.

Student's t for integer df is closed-form (the cosine series of Abramowitz & Stegun 26.7.3/26.7.4), so no
statistics package is needed and the numbers are the same on every machine.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


def t_central(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with ``df`` (an integer >= 1) degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    theta = math.atan(abs(t) / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2:  # odd: (2/pi) (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ...))
        term, total = 1.0, 1.0 if df > 1 else 0.0
        for k in range(1, (df - 3) // 2 + 1):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        return 2.0 / math.pi * (theta + s * math.cos(theta) * total)
    term, total = 1.0, 1.0  # even: sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...)
    for k in range(1, (df - 2) // 2 + 1):
        term *= c2 * (2 * k - 1) / (2 * k)
        total += term
    return s * total


def t_quantile(p: float, df: int) -> float:
    """The t with P(T <= t) = p (0.5 < p < 1), by bisection on `t_central` (to 1e-10)."""
    if not 0.5 < p < 1.0:
        raise ValueError(f"p must be in (0.5, 1), got {p}")
    lo, hi, want = 0.0, 1.0, 2.0 * p - 1.0
    while t_central(hi, df) < want:
        hi *= 2.0
    while hi - lo > 1e-10:
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if t_central(mid, df) < want else (lo, mid)
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class SeedNoise:
    """The pooled seed standard deviation of target bpb, its degrees of freedom, and the runs it pools
    (label -> bpb per seed)."""

    sd: float
    df: int
    groups: dict[str, list[float]]

    def to_dict(self) -> dict:
        return {"seed_sd": self.sd, "df": self.df, "groups": self.groups,
                "about": "pooled standard deviation of target bpb over mixtures trained under several seeds "
                         "(parameter init and data order)"}


def seed_noise(groups: dict[str, list[float]]) -> SeedNoise:
    """Pooled over the groups holding at least two runs; raises when none does (nothing to measure)."""
    used = {k: list(v) for k, v in groups.items() if len(v) >= 2}
    df = sum(len(v) - 1 for v in used.values())
    if df < 1:
        raise ValueError("seed noise needs a mixture trained under at least two seeds (search.seeds >= 2)")
    ss = sum(sum((x - sum(v) / len(v)) ** 2 for x in v) for v in used.values())
    return SeedNoise(math.sqrt(ss / df), df, used)


@dataclass(frozen=True)
class Interval:
    """An estimate with its standard error and two-sided interval at ``confidence`` (t with ``df``)."""

    value: float
    se: float
    df: int
    confidence: float
    lo: float
    hi: float

    def to_dict(self) -> dict:
        return asdict(self)


def interval(value: float, se: float, df: int, confidence: float) -> Interval:
    half = t_quantile((1.0 + confidence) / 2.0, df) * se
    return Interval(value, se, df, confidence, value - half, value + half)


def gain_test(baseline: list[float], candidate: list[float], noise: SeedNoise, confidence: float) -> Interval:
    """The measured gain of the candidate over the baseline (mean - mean, positive: the candidate is
    better) with its interval (see the module docstring)."""
    gain = sum(baseline) / len(baseline) - sum(candidate) / len(candidate)
    se = noise.sd * math.sqrt(1.0 / len(baseline) + 1.0 / len(candidate))
    return interval(gain, se, noise.df, confidence)
