"""The mixture search's numerics (numpy only): sample mixtures around a prior (round one) or around the
previous round's choice (later rounds), fit weights -> loss, and say how far the fit can be trusted.

Three small regressions, each linear least squares (with a small ridge) after at most a change of
variable; with weights p summing to 1 an intercept is redundant:

    linear:     loss(p) = sum_i b_i p_i                              (Scheffé's mixture polynomial)
    quadratic:  loss(p) = sum_i b_i p_i + sum_{i<j} b_ij p_i p_j     (+ synergy/antagonism of pairs)
    law:        loss(p) = c + exp(sum_i t_i p_i)                     (the "data mixing law" of Ye et al.,
                2024: diminishing returns, never below c; c by a grid over [0, min loss), then
                log(loss - c) is linear in p)

Each model's leave-one-out error comes exactly from the hat matrix of the (inner) linear fit (for the
law, with c fixed at its full-data value); the quadratic is tried only with at least two more points
than its terms. A model is **accepted** only when its leave-one-out RMSE is below the spread (standard
deviation) of its own predictions over the points: otherwise the differences it predicts between
mixtures are smaller than its error on a mixture it has not seen, and choosing by it is choosing by
noise. Of the accepted models the one with the lowest leave-one-out error is used; when none is, the
search keeps proportional. A predicted difference between two mixtures carries a standard error from
the fit's covariance, with the leave-one-out mean square error as the noise variance (so model error
counts, not only the residuals).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

_RIDGE = 1e-6


def sample_mixtures(prior: dict[str, float], n: int, concentration: float, seed: int) -> list[dict[str, float]]:
    """``n`` mixtures: the prior itself first (the proportional baseline is always measured), then
    draws from Dirichlet(concentration * k * prior), seeded, rounded to 6 decimals. Draw i does not
    depend on ``n``, so more proxies keep the first ones."""
    names = sorted(prior)
    p = _vector(prior, names)
    rng = np.random.Generator(np.random.PCG64(seed))
    alpha = np.maximum(concentration * len(names) * p, 1e-3)
    return [rounded(names, p)] + [rounded(names, rng.dirichlet(alpha)) for _ in range(n - 1)]


def sample_around(center: dict[str, float], n: int, concentration: float, seed: int,
                  round_no: int) -> list[dict[str, float]]:
    """Round ``round_no``'s ``n`` draws from Dirichlet(concentration * k * center) around the previous
    round's choice (CLIMB's refinement), seeded by (seed, round), rounded like `sample_mixtures`."""
    names = sorted(center)
    rng = np.random.Generator(np.random.PCG64([seed, round_no]))
    alpha = np.maximum(concentration * len(names) * _vector(center, names), 1e-3)
    return [rounded(names, rng.dirichlet(alpha)) for _ in range(n)]


def _vector(weights: dict[str, float], names: list[str]) -> np.ndarray:
    p = np.array([float(weights.get(k, 0.0)) for k in names], dtype=np.float64)
    return p / p.sum()


def rounded(names: list[str], p: np.ndarray) -> dict[str, float]:
    """``p`` at 6 decimals, summing to exactly 1 at 6 decimals (the largest weight takes the rest)."""
    r = np.round(p, 6)
    r[int(np.argmax(r))] += round(1.0 - float(r.sum()), 6)
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
_ORDER = {"linear": 0, "law": 1, "quadratic": 2}


@dataclass(frozen=True)
class Fit:
    """A fitted model: its kind, coefficient per term (and the law's floor c), in-sample R^2, leave-one-out
    RMSE and the spread of its predictions over the points (in loss units), and the covariance of its
    (inner) coefficients for the standard error of a predicted difference."""

    kind: str
    names: tuple[str, ...]
    terms: tuple[str, ...]
    coef: tuple[float, ...]
    r2: float
    loo_rmse: float
    spread: float
    floor: float = 0.0  # the law's c
    cov: tuple[tuple[float, ...], ...] = field(default=(), repr=False, compare=False)

    @property
    def accepted(self) -> bool:
        """Does it predict a held-out proxy better than the differences it predicts between proxies?"""
        return self.loo_rmse < self.spread

    def _inner(self, mixtures) -> np.ndarray:
        X, _ = _features(list(self.names), np.atleast_2d(np.asarray(mixtures, dtype=np.float64)),
                         "linear" if self.kind == "law" else self.kind)
        return X

    def predict(self, mixtures) -> np.ndarray:
        inner = self._inner(mixtures) @ np.array(self.coef)
        return self.floor + np.exp(inner) if self.kind == "law" else inner

    def difference(self, a: dict[str, float], b: dict[str, float]) -> tuple[float, float]:
        """(predicted loss(a) - loss(b), its standard error) by the delta method on the coefficients."""
        P = np.array([_vector(a, list(self.names)), _vector(b, list(self.names))])
        X, coef = self._inner(P), np.array(self.coef)
        grad = X if self.kind != "law" else X * np.exp(X @ coef)[:, None]
        g = grad[0] - grad[1]
        pred = self.predict(P)
        return float(pred[0] - pred[1]), float(np.sqrt(max(float(g @ np.array(self.cov) @ g), 0.0)))

    def to_dict(self) -> dict:
        out = {"model": self.kind, "formula": _ABOUT[self.kind], "terms": dict(zip(self.terms, self.coef))}
        if self.kind == "law":
            out["c"] = self.floor
        return {**out, "r2": self.r2, "loo_rmse": self.loo_rmse, "spread": self.spread, "accepted": self.accepted}


def _least_squares(X: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(coefficients, leave-one-out residuals, inverse normal matrix) of a ridge least-squares fit; the
    leave-one-out residuals exactly via the hat matrix."""
    A_inv = np.linalg.inv(X.T @ X + _RIDGE * np.eye(X.shape[1]))
    coef = A_inv @ X.T @ z
    hat = np.einsum("ij,jk,ik->i", X, A_inv, X)
    return coef, (z - X @ coef) / np.maximum(1.0 - hat, 1e-9), A_inv


def _r2(y: np.ndarray, pred: np.ndarray) -> float:
    ss_tot = float(((y - y.mean()) ** 2).sum())
    return 1.0 - float(((y - pred) ** 2).sum()) / ss_tot if ss_tot > 0 else 1.0


def _cov(A_inv: np.ndarray, loo: np.ndarray) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(float(v) for v in row) for row in A_inv * float(np.mean(loo ** 2)))


def _fit_poly(names: list[str], P: np.ndarray, y: np.ndarray, kind: str) -> Fit:
    X, labels = _features(names, P, kind)
    coef, loo, A_inv = _least_squares(X, y)
    pred = X @ coef
    return Fit(kind, tuple(names), tuple(labels), tuple(float(c) for c in coef), _r2(y, pred),
               float(np.sqrt(np.mean(loo ** 2))), float(pred.std()), cov=_cov(A_inv, loo))


def _fit_law(names: list[str], P: np.ndarray, y: np.ndarray, grid: int = 64) -> Fit:
    best = None
    for c in np.linspace(0.0, 0.98 * float(y.min()), grid):
        z = np.log(y - c)
        coef, loo_z, A_inv = _least_squares(P, z)
        sse = float(((y - (c + np.exp(P @ coef))) ** 2).sum())
        if best is None or sse < best[0] - 1e-15:
            best = (sse, float(c), coef, loo_z, z, A_inv)
    _, c, coef, loo_z, z, A_inv = best
    loo = y - (c + np.exp(z - loo_z))  # the held-out point's prediction, in loss units
    pred = c + np.exp(P @ coef)
    return Fit("law", tuple(names), tuple(names), tuple(float(v) for v in coef), _r2(y, pred),
               float(np.sqrt(np.mean(loo ** 2))), float(pred.std()), c, cov=_cov(A_inv, loo_z))


def fit_models(mixtures: list[dict[str, float]], losses: list[float]) -> list[Fit]:
    """Every model tried (see the module docstring), the preferred first: accepted before rejected,
    then by leave-one-out error (ties: the simpler)."""
    names = sorted(mixtures[0])
    P = np.array([[m[k] for k in names] for m in mixtures], dtype=np.float64)
    y = np.array(losses, dtype=np.float64)
    k = len(names)
    fits = [_fit_poly(names, P, y, "linear")]
    if len(y) >= k + k * (k - 1) // 2 + 2:
        fits.append(_fit_poly(names, P, y, "quadratic"))
    if float(y.min()) > 0:
        fits.append(_fit_law(names, P, y))
    return sorted(fits, key=lambda f: (not f.accepted, round(f.loo_rmse, 12), _ORDER[f.kind]))
