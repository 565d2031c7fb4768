"""The classifier's held-out split and its metrics: stratified, refused when a class is too small to
measure, and never NaN.

A split drawn by hashing ids alone can leave a small class out of the held-out set entirely (12 positive
documents at ``holdout: 0.1`` hold out one or none), and then recall and AUC are 0/0: NaN, which JSON
cannot carry, so the training step crashed after training. So:

- Stratified: each class holds out its own share, ``round(holdout x its size)`` examples, the ones with
  the smallest hash of (seed, id): deterministic, and the same whatever the order examples came in.
- Refused before training (`too_few`, with the counts and what would do) when a class has fewer than
  `MIN_PER_CLASS` examples, or its share would put fewer than `MIN_HELDOUT` in the held-out split or
  leave fewer than that to train on.
- A metric still undefined (no document scored positive: precision) is recorded as null with the
  reason under ``undefined``, never as NaN.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from datakit.classify.model import Example, id_hash

MIN_PER_CLASS = 10  # examples of each class, at least
MIN_HELDOUT = 2  # of each class in the held-out split, and left to train on


def share(n: int, holdout: float) -> int:
    """How many of a class's ``n`` examples are held out (rounded half up)."""
    return math.floor(holdout * n + 0.5)


def _enough(n: int, holdout: float) -> bool:
    k = share(n, holdout)
    return n >= MIN_PER_CLASS and k >= MIN_HELDOUT and n - k >= MIN_HELDOUT


def needed(holdout: float) -> int:
    """The fewest examples a class needs at this ``holdout``."""
    n = max(MIN_PER_CLASS, math.floor((MIN_HELDOUT - 0.5) / holdout) - 1)  # below the answer: float division
    while not _enough(n, holdout):
        n += 1
    return n


def shortfall(n: int, holdout: float, name: str) -> str | None:
    """Why ``n`` examples of one class (``name``: positive, negative) are too few at this ``holdout``,
    and what would do; None when they are enough."""
    if _enough(n, holdout):
        return None
    k = share(n, holdout)
    fix = f"give at least {needed(holdout)} {name} examples"
    if n >= MIN_PER_CLASS and k < MIN_HELDOUT:
        fix += f" or raise holdout to {math.ceil((MIN_HELDOUT - 0.5) / n * 100) / 100:g}"
    return (f"with holdout {holdout:g} the {n} {name} examples put {k} in the held-out split and {n - k} in "
            f"training, and a classifier needs at least {MIN_PER_CLASS} of each class with at least "
            f"{MIN_HELDOUT} of each on both sides: {fix}")


def too_few(positives: int, negatives: int, holdout: float, what: str) -> str | None:
    """Why these class sizes cannot train and measure a classifier (None when they can): the counts, the
    rule, and what would do."""
    for n, name in ((positives, "positive"), (negatives, "negative")):
        why = shortfall(n, holdout, name)
        if why:
            return f"{what}: {positives} positive and {negatives} negative examples; {why}"
    return None


def split(examples: list[Example], holdout: float, seed: int) -> tuple[list[Example], list[Example]]:
    """(train, held out), stratified (module docstring), each ordered by a hash of the id: fastText sees a
    shuffled, reproducible order. An id given twice counts once (its last example)."""
    unique = list({e.id: e for e in examples}.values())
    held: set[str] = set()
    for positive in (True, False):
        ranked = sorted((id_hash(e.id, f"holdout-{seed}"), e.id) for e in unique if e.positive is positive)
        held.update(i for _, i in ranked[:share(len(ranked), holdout)])
    ordered = sorted(unique, key=lambda e: (id_hash(e.id, f"order-{seed}"), e.id))
    return [e for e in ordered if e.id not in held], [e for e in ordered if e.id in held]


def metrics(truth: Sequence[bool], scores: np.ndarray, threshold: float = 0.5) -> dict[str, Any]:
    """Precision, recall, F1 at ``threshold`` and ROC AUC (rank statistic, ties counted half), rounded to
    6 places; a metric the split cannot define is None, its reason under ``undefined``."""
    y = np.asarray(truth, dtype=bool)
    pred = scores >= threshold
    tp, fp, fn = int((pred & y).sum()), int((pred & ~y).sum()), int((~pred & y).sum())
    undefined: dict[str, str] = {}
    if not y.any():
        undefined["recall"] = undefined["auc"] = "no positive document in the held-out split"
    elif y.all():
        undefined["auc"] = "no negative document in the held-out split"
    if tp + fp == 0:
        undefined["precision"] = "no held-out document scored positive"
    if "precision" in undefined or "recall" in undefined:
        undefined["f1"] = "precision or recall undefined"
    precision = tp / (tp + fp) if tp + fp else None
    recall = tp / (tp + fn) if tp + fn else None
    f1 = None
    if precision is not None and recall is not None:
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    values = {"precision": precision, "recall": recall, "f1": f1,
              "auc": None if "auc" in undefined else auc(y, scores)}
    out: dict[str, Any] = {k: None if v is None else round(v, 6) for k, v in values.items()}
    out.update({"heldout": int(len(y)), "heldout_positive": int(y.sum())})
    if undefined:
        out["undefined"] = undefined
    return out


def auc(y: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC of scores for labels ``y`` (both classes present: the caller checks)."""
    npos, nneg = int(y.sum()), int((~y).sum())
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores), dtype=np.float64)
    sorted_scores = scores[order]
    i = 0
    while i < len(scores):  # average ranks over ties
        j = i
        while j + 1 < len(scores) and sorted_scores[j + 1] == sorted_scores[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return float((ranks[y].sum() - npos * (npos + 1) / 2) / (npos * nneg))


def _figure(v: Any) -> str:
    return "null" if v is None else f"{v:.4g}"


def too_weak(m: dict[str, Any], min_auc: float | None) -> str | None:
    """Why a trained classifier is refused: held-out AUC below ``min_auc`` (None: never). Its scores
    would then select documents no better than chance, and a run that "succeeded" would hide it. An
    undefined AUC refuses nothing here (`too_few` already refused splits that cannot measure it)."""
    value = m.get("auc")
    if min_auc is None or value is None or value >= min_auc:
        return None
    return (f"held-out AUC {_figure(value)} < min_auc {min_auc:g} (precision {_figure(m.get('precision'))}, "
            f"recall {_figure(m.get('recall'))} on {m.get('heldout')} held-out): the classifier does not separate "
            "positives from negatives; check positives/negatives or set quality_classifier.min_auc")
