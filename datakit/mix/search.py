"""The mixture search's numerics (numpy only): sample mixtures around a prior, fit weights -> loss,
choose the minimiser within constraints.

Three small regressions, each linear least squares (with a small ridge) after at most a change of
variable; with weights p summing to 1 an intercept is redundant:

    linear:     loss(p) = sum_i b_i p_i                              (Scheffé's mixture polynomial)
    quadratic:  loss(p) = sum_i b_i p_i + sum_{i<j} b_ij p_i p_j     (+ synergy/antagonism of pairs)
    law:        loss(p) = c + exp(sum_i t_i p_i)                     (the "data mixing law" of Ye et al.,
                2024: diminishing returns, never below c; c by a grid over [0, min loss), then
                log(loss - c) is linear in p)

Which one: the lowest leave-one-out error, computed exactly from the hat matrix of the (inner) linear
fit (for the law, with c fixed at its full-data value); the quadratic only when there are at least two
more proxies than its terms. Choosing: score a seeded set of candidate mixtures (uniform over the simplex, plus the
prior and the proxies) with the fitted model, keep those within the constraints (per-component
minimum weights and maximum weights from the epoch caps), take the lowest prediction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_RIDGE = 1e-6


def sample_mixtures(prior: dict[str, float], n: int, concentration: float, seed: int) -> list[dict[str, float]]:
    """``n`` mixtures: the prior itself first (the proportional baseline is always measured), then
    draws from Dirichlet(concentration * k * prior), seeded, rounded to 6 decimals."""
    names = sorted(prior)
    p = np.array([prior[k] for k in names], dtype=np.float64)
    p = p / p.sum()
    rng = np.random.Generator(np.random.PCG64(seed))
    alpha = np.maximum(concentration * len(names) * p, 1e-3)
    out = [_rounded(names, p)]
    for _ in range(n - 1):
        out.append(_rounded(names, rng.dirichlet(alpha)))
    return out


def _rounded(names: list[str], p: np.ndarray) -> dict[str, float]:
    r = np.round(p, 6)
    r[int(np.argmax(r))] += round(1.0 - float(r.sum()), 6)  # keep the sum exactly 1 at 6 decimals
    return {k: float(round(v, 6)) for k, v in zip(names, r)}


def _features(names: list[str], P: np.ndarray, kind: str) -> tuple[np.ndarray, list[str]]:
    cols, labels = [P[:, i] for i in range(len(names))], list(names)
    if kind == "quadratic":
        for i in range(len(names)):
            for j in range(i + 1, len(names)):
                cols.append(P[:, i] * P[:, j])
                labels.append(f"{names[i]}*{names[j]}")
    return np.stack(cols, axis=1), labels


_ABOUT = {
    "linear": "loss(p) = sum_i b_i p_i",
    "quadratic": "loss(p) = sum_i b_i p_i + sum_{i<j} b_ij p_i p_j",
    "law": "loss(p) = c + exp(sum_i t_i p_i)",
}


@dataclass(frozen=True)
class Fit:
    """A fitted model: its kind, coefficient per term (and the law's floor c), in-sample R^2 and
    leave-one-out RMSE (in loss units)."""

    kind: str
    names: tuple[str, ...]
    terms: tuple[str, ...]
    coef: tuple[float, ...]
    r2: float
    loo_rmse: float
    floor: float = 0.0  # the law's c

    def predict(self, mixtures) -> np.ndarray:
        X, _ = _features(list(self.names), np.atleast_2d(np.asarray(mixtures, dtype=np.float64)),
                         "linear" if self.kind == "law" else self.kind)
        inner = X @ np.array(self.coef)
        return self.floor + np.exp(inner) if self.kind == "law" else inner

    def to_dict(self) -> dict:
        out = {"model": self.kind, "formula": _ABOUT[self.kind], "terms": dict(zip(self.terms, self.coef))}
        if self.kind == "law":
            out["c"] = self.floor
        return {**out, "r2": self.r2, "loo_rmse": self.loo_rmse,
                "about": "least squares with ridge 1e-6; the model with the lowest leave-one-out error"}


def _least_squares(X: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(coefficients, leave-one-out residuals) of a ridge least-squares fit, exactly via the hat matrix."""
    A = X.T @ X + _RIDGE * np.eye(X.shape[1])
    coef = np.linalg.solve(A, X.T @ z)
    hat = np.einsum("ij,jk,ik->i", X, np.linalg.inv(A), X)
    return coef, (z - X @ coef) / np.maximum(1.0 - hat, 1e-9)


def _r2(y: np.ndarray, pred: np.ndarray) -> float:
    ss_tot = float(((y - y.mean()) ** 2).sum())
    return 1.0 - float(((y - pred) ** 2).sum()) / ss_tot if ss_tot > 0 else 1.0


def _fit_poly(names: list[str], P: np.ndarray, y: np.ndarray, kind: str) -> Fit:
    X, labels = _features(names, P, kind)
    coef, loo = _least_squares(X, y)
    return Fit(kind, tuple(names), tuple(labels), tuple(float(c) for c in coef), _r2(y, X @ coef),
               float(np.sqrt(np.mean(loo ** 2))))


def _fit_law(names: list[str], P: np.ndarray, y: np.ndarray, grid: int = 64) -> Fit:
    best = None
    for c in np.linspace(0.0, 0.98 * float(y.min()), grid):
        z = np.log(y - c)
        coef, loo_z = _least_squares(P, z)
        sse = float(((y - (c + np.exp(P @ coef))) ** 2).sum())
        if best is None or sse < best[0] - 1e-15:
            best = (sse, float(c), coef, loo_z, z)
    _, c, coef, loo_z, z = best
    loo = y - (c + np.exp(z - loo_z))  # the held-out point's prediction, in loss units
    return Fit("law", tuple(names), tuple(names), tuple(float(v) for v in coef), _r2(y, c + np.exp(P @ coef)),
               float(np.sqrt(np.mean(loo ** 2))), c)


def fit(mixtures: list[dict[str, float]], losses: list[float]) -> Fit:
    """The model of loss over weights with the lowest leave-one-out error (see the module docstring)."""
    names = sorted(mixtures[0])
    P = np.array([[m[k] for k in names] for m in mixtures], dtype=np.float64)
    y = np.array(losses, dtype=np.float64)
    k = len(names)
    fits = [_fit_poly(names, P, y, "linear")]
    if len(y) >= k + k * (k - 1) // 2 + 2:
        fits.append(_fit_poly(names, P, y, "quadratic"))
    if float(y.min()) > 0:
        fits.append(_fit_law(names, P, y))
    order = {"linear": 0, "law": 1, "quadratic": 2}
    return min(fits, key=lambda f: (round(f.loo_rmse, 12), order[f.kind]))


def choose(model: Fit, prior: dict[str, float], proxies: list[dict[str, float]], *, candidates: int, seed: int,
           min_weight: dict[str, float], max_weight: dict[str, float]) -> tuple[dict[str, float], float, int]:
    """(chosen mixture, its predicted loss, feasible candidates): the lowest prediction among seeded
    candidates within min_weight <= p <= max_weight. Raises when no candidate is feasible."""
    names = list(model.names)
    rng = np.random.Generator(np.random.PCG64([seed, 1]))
    pool = [rng.dirichlet(np.ones(len(names)), size=candidates),
            np.array([[m[k] for k in names] for m in (prior, *proxies)]), np.eye(len(names))]
    C = np.round(np.concatenate(pool), 4)
    C = C / C.sum(axis=1, keepdims=True)
    lo = np.array([min_weight.get(k, 0.0) for k in names])
    hi = np.array([max_weight.get(k, 1.0) for k in names])
    ok = np.all((C >= lo - 1e-12) & (C <= hi + 1e-12), axis=1)
    if not ok.any():
        raise ValueError(f"no mixture satisfies the constraints (min {min_weight}, max {max_weight}); "
                         "loosen min_weight or max_epochs")
    feasible = C[ok]
    pred = model.predict(feasible)
    best = int(np.argmin(pred))
    return _rounded(names, feasible[best]), float(pred[best]), int(ok.sum())
