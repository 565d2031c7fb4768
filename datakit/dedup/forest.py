"""Which near-duplicates go: fuzzy dedup's keep rule, as a forest of earliest near-duplicates.

A document is removed when a document earlier than it in priority order (its source's rank, then its
id) is its near-duplicate: a candidate pair whose Jaccard reaches the threshold (without verification,
any candidate pair). Linking each such document to the earliest of those neighbours (`parents`) makes a
forest: following links strictly lowers the priority, so each tree has one root, the only member with no
earlier near-duplicate: it is kept, and the tree is the cluster fuzzy.py marks (cluster_id: the root's
id). The rule is a pure function of the pairs and the priorities, whatever order data arrived in.

Why not the connected components of all near-duplicate pairs (what datatrove, NeMo Curator and most
pipelines keep one document of): in a component two documents with no pair between them are tied by a
chain, and a later document similar to two earlier ones that are not similar to each other removes one of
them. Adding a source of lower priority then removes documents of the sources before it that are
near-duplicates of nothing kept, and every file holding one is written again downstream: on
benchmarks/incremental.py's 405 MB corpus, its added tenth took 113 documents from 52 of the other 58
files. With the forest a document's fate depends only on the documents before it, so a source added after
the others changes none of their decisions. On that corpus's full build the forest removes 17,780
documents where components remove 18,800 (the 1,020 are near-duplicates only of later documents), and
catches 7,534 of its 7,763 planted near copies where components catch 7,535.

`verify_parents` is the incremental build's verification (fuzzy_incremental.py): of the pairs whose
Jaccard is not known (NaN: neither taken from the earlier build nor verified), only those that could give
a document an earlier parent than the known pairs give it are verified. Every pair left unknown then
joins a document to a neighbour later than its parent, so the forest is exactly that of verifying every
pair; they keep NaN in the build's state, and a later build that removes a document's parent verifies
them as far as they then matter. A document's shingle set is read once per build (`ShingleSets`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import batches
from .batches import Ragged
from .fuzzy_core import jaccard_of
from .hashing import node_rank

# (sorted nodes) -> their shingle sets, in that order
ReadSets = Callable[[np.ndarray], Ragged]
# (nodes) -> their ids as (hi, lo) uint64 halves
IdsOf = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


def orient(u: np.ndarray, v: np.ndarray, u_key: tuple[np.ndarray, ...], v_key: tuple[np.ndarray, ...]
           ) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
    """Each pair as (later, earlier, the earlier's key) by priority keys (rank, id hi, id lo): two
    documents never share a key (a source holds an id once)."""
    ur, uh, ul = u_key
    vr, vh, vl = v_key
    u_first = (ur < vr) | ((ur == vr) & ((uh < vh) | ((uh == vh) & (ul < vl))))
    later, earlier = np.where(u_first, v, u), np.where(u_first, u, v)
    key = tuple(np.where(u_first, a, b) for a, b in zip(u_key, v_key))
    return later, earlier, key


def earliest(later: np.ndarray, key: tuple[np.ndarray, ...]) -> np.ndarray:
    """The index of each later document's earliest pair (ordered by that document), from near-duplicate
    pairs as `orient` gives them: the pair that names its parent, with the parent's key."""
    if not len(later):
        return np.empty(0, np.int64)
    rank, hi, lo = key
    order = np.lexsort((lo, hi, rank, later))
    child = later[order]
    first = np.ones(len(child), dtype=bool)
    first[1:] = child[1:] != child[:-1]
    return order[first]


def parents(later: np.ndarray, earlier: np.ndarray, key: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Each document with an earlier near-duplicate (sorted) and the earliest of them (its parent), from
    near-duplicate pairs as `orient` gives them."""
    pick = earliest(later, key)
    return later[pick], earlier[pick]


def priority_keys(nodes: np.ndarray, ids_of: IdsOf) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rank, id hi, id lo) of documents given as nodes."""
    hi, lo = ids_of(nodes)
    return node_rank(nodes), hi, lo


def forest_edges(u: np.ndarray, v: np.ndarray, ids_of: IdsOf) -> tuple[np.ndarray, np.ndarray]:
    """The forest of near-duplicate pairs (u, v): (parent, child) edges, by child."""
    later, earlier, key = orient(u, v, priority_keys(u, ids_of), priority_keys(v, ids_of))
    child, parent = parents(later, earlier, key)
    return parent, child


def component_labels(u: np.ndarray, v: np.ndarray, n: int) -> np.ndarray:
    """A label per node 0..n-1, equal exactly within each connected component of the edges (u, v) (for
    the forest: its trees): min-label propagation over the edges with pointer jumping, vectorized (a
    round costs one pass over the edges; rounds grow with the log of a component's diameter)."""
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


def verify_parents(u: np.ndarray, v: np.ndarray, jaccard: np.ndarray, threshold: float, ids_of: IdsOf,
                   read: ReadSets, expect: Callable[[np.ndarray], None] | None = None) -> int:
    """Fill ``jaccard`` in place (NaN: unknown) for the unknown pairs (u[i], v[i]) that could give their
    later document an earlier parent than the pairs known to reach ``threshold`` give it (module
    docstring); the others stay NaN. Returns how many pairs were verified.

    Two rounds: first each such document's earliest candidate alone (a near copy usually passes, and
    then no other pair of it can matter), then every candidate still earlier than its parent. Verifying
    them all at once read and shingled every earlier member of a family a new copy falls into.
    ``expect`` (optional) is told, before the first read, the documents the second round may need (a
    reader can keep their texts from the files the first round reads)."""
    if not np.isnan(jaccard).any():
        return 0
    members, inv = np.unique(np.concatenate([u, v]), return_inverse=True)
    rank, hi, lo = priority_keys(members, ids_of)
    pos = np.empty(len(members), np.int64)
    pos[np.lexsort((lo, hi, rank))] = np.arange(len(members))
    pu, pv = pos[inv[:len(u)]], pos[inv[len(u):]]
    later, earlier = np.maximum(pu, pv), np.minimum(pu, pv)
    sets, verified = ShingleSets.empty(), 0
    for first_only in (True, False):
        best = np.full(len(members), len(members), np.int64)  # each document's parent so far (a position)
        known = jaccard >= threshold
        np.minimum.at(best, later[known], earlier[known])
        pick = np.flatnonzero(np.isnan(jaccard) & (earlier < best[later]))
        if first_only and len(pick):
            order = pick[np.lexsort((earlier[pick], later[pick]))]
            head = np.ones(len(order), dtype=bool)
            head[1:] = later[order][1:] != later[order][:-1]
            if expect is not None:
                rest = order[~head]
                expect(np.setdiff1d(np.concatenate([u[rest], v[rest]]), np.concatenate([u[order[head]], v[order[head]]])))
            pick = order[head]
        if not len(pick):
            continue
        sets = sets.with_nodes(np.unique(np.concatenate([u[pick], v[pick]])), read)
        jaccard[pick] = jaccard_of(sets.sets, np.searchsorted(sets.nodes, u[pick]),
                                   np.searchsorted(sets.nodes, v[pick]))
        verified += len(pick)
    return verified
