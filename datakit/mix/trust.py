"""The trust region of a mixture search, and the choice within it (numpy only).

Why: a regression of loss over weights is only evidence where proxies were trained. A linear fit of
noisy proxies always has its minimum on a corner of the simplex, and a search that trusts it picks a
mixture no proxy came near (100% of one source, when the samples held at most 47% of it) and loses to
proportional. So the choice is confined to the region the samples cover: the convex hull of the
sampled mixtures, expanded by a fraction ``expand`` toward every corner,

    region = { (1 - expand) h + expand u : h in hull(samples), u in simplex }
           = hull{ (1 - expand) p_i + expand e_k : every sample p_i, every corner e_k }

(``expand`` = 0: the hull itself). Each round of proxies sampled around the previous choice widens the
hull toward where the fit points, so the region grows in rounds as CLIMB's search narrows in on its
best region, and never jumps past the data.

Choosing: score the region's vertices, the samples and seeded random convex combinations of up to
three vertices with the fitted model, keep those within the constraints (per-component minimum
weights; maximum weights from the epoch caps), take the lowest prediction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .search import Fit, rounded

ABOUT = ("the convex hull of the sampled mixtures expanded by `expand` toward every corner: "
         "hull{(1 - expand) p_i + expand e_k}; the choice never leaves it")


@dataclass(frozen=True)
class TrustRegion:
    """The region's component names, its vertices (one row each), the expansion and the samples."""

    names: tuple[str, ...]
    vertices: np.ndarray
    samples: np.ndarray
    expand: float

    def box(self) -> dict[str, list[float]]:
        """Per component, the lowest and highest weight in the region (its vertices' extremes)."""
        return {n: [round(float(self.vertices[:, i].min()), 6), round(float(self.vertices[:, i].max()), 6)]
                for i, n in enumerate(self.names)}

    def nearest_sample(self, mixture: dict[str, float]) -> float:
        """The L1 distance from ``mixture`` to the closest sampled mixture (0: a proxy trained on it)."""
        p = np.array([mixture.get(n, 0.0) for n in self.names])
        return float(np.abs(self.samples - p).sum(axis=1).min())

    def candidates(self, n: int, seed: int) -> np.ndarray:
        """The vertices, the samples and ``n`` seeded convex combinations of three vertices each."""
        rng = np.random.Generator(np.random.PCG64([seed, 1]))
        idx = rng.integers(0, len(self.vertices), size=(n, 3))
        lam = rng.dirichlet(np.ones(3), size=n)
        mixed = np.einsum("nj,njk->nk", lam, self.vertices[idx])
        C = np.round(np.concatenate([self.vertices, self.samples, mixed]), 4)
        return C / C.sum(axis=1, keepdims=True)

    def to_dict(self) -> dict:
        return {"expand": self.expand, "samples": int(len(self.samples)), "vertices": int(len(self.vertices)),
                "box": self.box(), "about": ABOUT}


def trust_region(samples: list[dict[str, float]], expand: float) -> TrustRegion:
    """The trust region of ``samples`` (see the module docstring)."""
    names = sorted(samples[0])
    P = np.array([[m.get(n, 0.0) for n in names] for m in samples], dtype=np.float64)
    corners = np.eye(len(names))
    V = ((1.0 - expand) * P[:, None, :] + expand * corners[None, :, :]).reshape(-1, len(names))
    return TrustRegion(tuple(names), np.unique(np.round(V, 9), axis=0), P, expand)


def choose(model: Fit, region: TrustRegion, *, candidates: int, seed: int, min_weight: dict[str, float],
           max_weight: dict[str, float]) -> tuple[dict[str, float], float, int]:
    """(chosen mixture, its predicted loss, feasible candidates): the lowest prediction among the
    region's candidates within min_weight <= p <= max_weight. Raises when no candidate is feasible."""
    names = list(region.names)
    C = region.candidates(candidates, seed)
    lo = np.array([min_weight.get(k, 0.0) for k in names])
    hi = np.array([max_weight.get(k, 1.0) for k in names])
    ok = np.all((C >= lo - 1e-12) & (C <= hi + 1e-12), axis=1)
    if not ok.any():
        raise ValueError(f"no mixture in the search's trust region satisfies the constraints (min {min_weight}, "
                         f"max {max_weight}; the region spans {region.box()}): loosen min_weight or max_epochs, "
                         "or raise search.trust so the region reaches them")
    feasible = C[ok]
    pred = model.predict(feasible)
    best = int(np.argmin(pred))
    return rounded(names, feasible[best]), float(pred[best]), int(ok.sum())
