"""Selection by classifier score: a threshold, an exact top fraction, or quality tiers.

A top fraction keeps exactly ``round(fraction * n)`` documents of a source: documents rank by score
(highest first), ties by id, so the cut is exact and the same whatever the file layout or worker count.
Each file contributes its own best ``k`` (score, id) keys; the k-th of their merge is the cut.
"""

from __future__ import annotations

import heapq

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from datakit.classify.config import ClassifierConfig, TierSpec

SCORE = "quality_score"
REASON = "quality_classifier"
Key = tuple[float, str]  # (-score, id): smaller ranks higher


def top_keys(path: str, k: int) -> list[Key]:
    """This file's ``k`` highest-ranked (-score, id) keys, sorted."""
    t = pq.read_table(path, columns=["id", SCORE])
    keys = zip((-s for s in t.column(SCORE).to_pylist()), t.column("id").to_pylist())
    return heapq.nsmallest(k, keys)


def cut_key(per_file: list[list[Key]], k: int) -> Key | None:
    """The key of the k-th ranked document of the source (None when k is 0: keep nothing)."""
    if k <= 0:
        return None
    merged = heapq.nsmallest(k, (key for keys in per_file for key in keys))
    return merged[-1] if merged else None


def tier_of(score: float, tiers: tuple[TierSpec, ...]) -> str | None:
    """The first (highest) tier whose min_score the score reaches; None below every tier."""
    for tier in tiers:
        if score >= tier.min_score:
            return tier.name
    return None


def keep_mask(table: pa.Table, cfg: ClassifierConfig, cut: Key | None, tier: str | None) -> np.ndarray:
    """Which rows the step keeps (threshold, top fraction, or one tier)."""
    scores = table.column(SCORE).to_pylist()
    if cfg.select == "threshold":
        return np.array([s >= cfg.threshold for s in scores], dtype=bool)
    if cfg.select == "top_fraction":
        ids = table.column("id").to_pylist()
        return np.array([cut is not None and (-s, i) <= cut for s, i in zip(scores, ids)], dtype=bool)
    return np.array([tier_of(s, cfg.tiers) == tier for s in scores], dtype=bool)


def removal_detail(cfg: ClassifierConfig, cut: Key | None) -> str:
    if cfg.select == "threshold":
        return f"score < {cfg.threshold}"
    if cfg.select == "top_fraction":
        return f"below the top {cfg.top_fraction} (cut at score {-cut[0] if cut else 'none'})"
    return f"below the lowest tier ({cfg.tiers[-1].min_score})"
