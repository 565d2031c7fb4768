"""Choosing LSH bands x rows, and what a choice means.

With b bands of r rows, two documents of Jaccard similarity s share at least one bucket with
probability 1 - (1 - s^r)^b: an S-curve whose midpoint, roughly (1/b)^(1/r), is the effective threshold.
The default 14 x 8 = 112 permutations puts it near 0.72. Given a threshold instead, we pick (b, r) the
way datasketch's MinHashLSH does: minimise the weighted false-positive and false-negative areas under
that curve, so our parameters match a datasketch index built with the same threshold and num_perms.
"""

from __future__ import annotations


def candidate_probability(similarity: float, bands: int, rows: int) -> float:
    """Probability that a pair with this Jaccard similarity becomes an LSH candidate."""
    return 1.0 - (1.0 - similarity**rows) ** bands


def candidate_threshold(bands: int, rows: int, probability: float = 0.5) -> float:
    """The similarity at which a pair becomes a candidate with this probability (the inverse S-curve).

    At 0.5 it is the S-curve's median: 0.685 for 14 x 8. Fuzzy verification uses it as its default
    threshold, so it keeps what these bands are more likely than not to find (verifying higher would
    throw away pairs the LSH was built to catch; lower, pairs it only found by luck).
    """
    if not 0.0 < probability < 1.0:
        raise ValueError(f"probability must be in (0, 1), got {probability}")
    return (1.0 - (1.0 - probability) ** (1.0 / bands)) ** (1.0 / rows)


def effective_threshold(bands: int, rows: int) -> float:
    """The similarity where the candidate curve is steepest (its usual 'threshold')."""
    return (1.0 / bands) ** (1.0 / rows)


def lsh_params(threshold: float, num_perms: int, fp_weight: float = 0.5, fn_weight: float = 0.5) -> tuple[int, int]:
    """(bands, rows) with bands * rows <= num_perms minimising weighted FP + FN probability mass.

    Delegates to datasketch's own search so that "matched parameters" in benchmarks are exactly
    matched; the result is deterministic.
    """
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must be in (0, 1), got {threshold}")
    if num_perms < 2:
        raise ValueError(f"num_perms must be >= 2, got {num_perms}")
    if abs(fp_weight + fn_weight - 1.0) > 1e-9:
        raise ValueError("fp_weight + fn_weight must be 1")
    from datasketch.lsh import _optimal_param

    bands, rows = _optimal_param(threshold, num_perms, fp_weight, fn_weight)
    return int(bands), int(rows)
