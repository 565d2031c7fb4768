"""Verifying only the candidate pairs that can change a cluster (fuzzy dedup as a change, fuzzy_incremental.py).

Clusters are the connected components of the pairs whose Jaccard reaches the threshold. A candidate pair
whose two documents are already connected through pairs known to reach it cannot change any component,
whatever its own Jaccard: verifying it is wasted work. So the pairs whose Jaccard is not known yet (NaN:
neither taken from the earlier build nor verified) are verified in two rounds: first a spanning forest of
those that would join two components (a pair per join, chosen in pair order), then every unknown pair
that still joins two (its forest pair was not a near copy). No unknown pair then joins two components
(they only grew), so the components are exactly those of verifying every pair: each unknown pair left
lies inside one. Why not forests until none joins: on benchmarks/incremental.py's 405 MB corpus plus a
tenth that took 34 rounds, each reading the texts of the files its pairs touch again (4.4 CPU-s of fuzzy
dedup against 2.7 verifying every pair); two rounds read them twice. There the new tenth brought 10,562
new candidate pairs, on 9,199 documents' texts; about 6,000 of the pairs needed verifying, on about
6,800 documents.

A pair left unverified keeps NaN in the build's state. A later build that removes documents can split a
component; its unknown pairs (the earlier ones among them) then take part in its rounds like any other,
so a pair that now joins two components is verified then. The verified-pair cache holds known pairs
only. A document's shingle set is read once per build however many rounds it is in (`ShingleSets`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import batches
from .batches import Ragged
from .fuzzy_core import jaccard_of

# (sorted nodes) -> their shingle sets, in that order
ReadSets = Callable[[np.ndarray], Ragged]


def component_labels(u: np.ndarray, v: np.ndarray, n: int) -> np.ndarray:
    """A label per node 0..n-1, equal exactly within each connected component of the edges (u, v):
    min-label propagation over the edges with pointer jumping, vectorized (a round costs one pass
    over the edges; rounds grow with the log of a component's diameter)."""
    label = np.arange(n, dtype=np.int64)
    while True:
        low = np.minimum(label[u], label[v])
        new = label.copy()
        np.minimum.at(new, u, low)
        np.minimum.at(new, v, low)
        while True:  # pointer jumping: every label points at a root
            jumped = new[new]
            if np.array_equal(jumped, new):
                break
            new = jumped
        if np.array_equal(new, label):
            return label
        label = new


@dataclass
class ShingleSets:
    """The shingle sets read so far in a build, by node (``nodes`` sorted, row i of ``sets`` is node i's)."""

    nodes: np.ndarray
    sets: Ragged

    @classmethod
    def empty(cls) -> "ShingleSets":
        return cls(np.empty(0, np.int64), Ragged(np.empty(0, np.uint32), np.zeros(1, np.int64)))

    def with_nodes(self, need: np.ndarray, read: ReadSets) -> "ShingleSets":
        """These sets and those of ``need`` (sorted) not read yet, read."""
        missing = need[~np.isin(need, self.nodes)]
        if not len(missing):
            return self
        both = batches.concat([{"sh": self.sets}, {"sh": read(missing)}])["sh"]
        nodes = np.concatenate([self.nodes, missing])
        order = np.argsort(nodes, kind="stable")
        return ShingleSets(nodes[order], batches.take_ragged(both, order))


def _forest(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Indices of a spanning forest of the edges (a[i], b[i]), the first edge that joins two trees kept."""
    parent: dict[int, int] = {}
    keep = []
    for i, (x, y) in enumerate(zip(a.tolist(), b.tolist())):
        rx, ry = _root(parent, x), _root(parent, y)
        if rx != ry:
            parent[rx] = ry
            keep.append(i)
    return np.asarray(keep, dtype=np.int64)


def _root(parent: dict[int, int], x: int) -> int:
    while parent.get(x, x) != x:
        parent[x] = parent.get(parent[x], parent[x])  # path halving
        x = parent[x]
    return x


def verify_joining(u: np.ndarray, v: np.ndarray, jaccard: np.ndarray, threshold: float, read: ReadSets,
                   expect: Callable[[np.ndarray], None] | None = None) -> int:
    """Fill ``jaccard`` in place (NaN: unknown) for the unknown pairs (u[i], v[i]) that join two
    components of the pairs known to reach ``threshold``: a spanning forest of them, then all that still
    join two (module docstring); the others stay NaN. Returns how many pairs were verified.
    ``expect`` (optional) is told, before the first read, the documents the second round may need: the
    other joining pairs' (a reader can keep their texts from the files the first round reads)."""
    members, inv = np.unique(np.concatenate([u, v]), return_inverse=True)
    pu, pv = inv[:len(u)], inv[len(u):]
    sets, verified, first = ShingleSets.empty(), 0, True
    while True:
        true = jaccard >= threshold
        label = component_labels(pu[true], pv[true], len(members))
        joining = np.flatnonzero(np.isnan(jaccard) & (label[pu] != label[pv]))
        if not len(joining):
            return verified
        pick = joining[_forest(label[pu[joining]], label[pv[joining]])] if first else joining
        if first and expect is not None:
            expect(np.setdiff1d(np.concatenate([u[joining], v[joining]]), np.concatenate([u[pick], v[pick]])))
        first = False
        sets = sets.with_nodes(np.unique(np.concatenate([u[pick], v[pick]])), read)
        jaccard[pick] = jaccard_of(sets.sets, np.searchsorted(sets.nodes, u[pick]),
                                   np.searchsorted(sets.nodes, v[pick]))
        verified += len(pick)
