"""Block-deterministic mixing of several sources by weight.

Why blocks: sampling a source per sequence with a random generator makes sequence k depend on every
draw before it, so resuming needs generator state. Instead the global sequence stream is cut into
blocks of B sequences; every block holds the same fixed count per source (weights * B, rounded by
largest remainder so the counts sum to B exactly) and only the ORDER inside a block varies, by a
Feistel permutation keyed by (seed, block id). Sequence g is then a pure function of (seed, g): its
block, its slot in the block, hence its source and the per-source draw number
``block * count[source] + rank in block``. Proportions are exact over every block, not just on average.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from datakit.tokenize.feistel import derive_key, feistel_permute

__all__ = ["largest_remainder_counts", "BlockMixture"]


def largest_remainder_counts(weights: dict[str, float], block_size: int) -> dict[str, int]:
    """Integer counts per source summing to ``block_size``, proportional to ``weights``.

    Hamilton's method: floor every quota, then hand the leftover units to the largest fractional parts
    (ties broken by source name, so the result never depends on dict order)."""
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    if not weights:
        raise ValueError("mixture weights are empty: give at least one source with a positive weight")
    for name, w in weights.items():
        if not isinstance(w, (int, float)) or isinstance(w, bool) or not math.isfinite(w) or w < 0:
            raise ValueError(f"mixture weight for source {name!r} must be a finite number >= 0, got {w!r}")
    total = float(sum(weights.values()))
    if total <= 0:
        raise ValueError(f"mixture weights must not all be zero: {weights}")
    names = sorted(weights)
    quotas = {n: weights[n] / total * block_size for n in names}
    counts = {n: int(math.floor(q)) for n, q in quotas.items()}
    leftover = block_size - sum(counts.values())
    by_remainder = sorted(names, key=lambda n: (-(quotas[n] - counts[n]), n))
    for n in by_remainder[:leftover]:
        counts[n] += 1
    return counts


@dataclass(frozen=True)
class BlockMixture:
    """Maps global sequence indices to (source index, per-source draw number).

    ``names`` is the sorted list of sources with a non-zero count; source index i refers to names[i]."""

    counts: dict[str, int]
    block_size: int
    seed: int

    @classmethod
    def from_weights(cls, weights: dict[str, float], block_size: int, seed: int) -> "BlockMixture":
        counts = largest_remainder_counts(weights, block_size)
        zero = [n for n, c in counts.items() if c == 0 and weights[n] > 0]
        if zero:
            raise ValueError(
                f"block_size {block_size} is too small for the weights: source(s) {zero} would get 0 "
                f"sequences per block; raise block_size (counts were {counts})"
            )
        return cls({n: c for n, c in counts.items() if c > 0}, block_size, seed)

    @property
    def names(self) -> list[str]:
        return sorted(self.counts)

    def _layout(self) -> tuple[np.ndarray, np.ndarray]:
        counts = np.array([self.counts[n] for n in self.names], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        return counts, starts

    def assign(self, sequence_indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For global sequence indices g, return (source index, draw number within that source).

        The canonical block lists counts[0] slots of source 0, then source 1, ...; the slot at position
        p of block b is canonical[feistel(p; key(seed, b))]."""
        g = np.asarray(sequence_indices, dtype=np.int64)
        if g.size and int(g.min()) < 0:
            raise IndexError(f"sequence index must be >= 0, got {int(g.min())}")
        counts, starts = self._layout()
        blocks = g // self.block_size
        positions = g % self.block_size
        slots = np.empty_like(g)
        for b in np.unique(blocks):
            sel = blocks == b
            key = derive_key(self.seed, "mixture-block", int(b))
            slots[sel] = feistel_permute(positions[sel], self.block_size, key)
        source = np.searchsorted(starts, slots, side="right") - 1
        rank = slots - starts[source]
        draw = blocks * counts[source] + rank
        return source, draw
