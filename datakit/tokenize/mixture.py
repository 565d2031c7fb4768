"""Block-deterministic mixing of several sources by weight.

Why blocks: sampling a source per sequence with a random generator makes sequence k depend on every
draw before it, so resuming needs generator state. Instead the global sequence stream is cut into
blocks of B sequences; every block holds the same fixed count per source (weights * B, rounded by
largest remainder so the counts sum to B exactly) and only the ORDER inside a block varies, by a
Feistel permutation keyed by (seed, block id). Sequence g is then a pure function of (seed, g): its
block, its slot in the block, hence its source and the per-source draw number
``block * count[source] + rank in block``. Proportions are exact over every block, not just on average.

Staged weights (a cooldown mix) are phases (``StagedMixture``): each phase is a block mixture of its own,
restarting its blocks at its first sequence, and a source's draw numbers continue from where the earlier
phases left them, still a pure function of (seed, g).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from datakit.tokenize.feistel import derive_key, feistel_permute

__all__ = ["largest_remainder_counts", "BlockMixture", "StagedMixture", "mixture_for", "schedule_names"]


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

    def draws_in_prefix(self, n: int) -> dict[str, int]:
        """Exact draws per source among global sequences [0, n)."""
        return _prefix_draws(self, n)[0]

    def extent_in_prefix(self, n: int) -> dict[str, int]:
        """Per source, the highest draw number + 1 among global sequences [0, n) (0 when none)."""
        return _prefix_draws(self, n)[1]


def _prefix_draws(mixture: BlockMixture, n: int) -> tuple[dict[str, int], dict[str, int]]:
    """(draws, extent) per source among the first ``n`` sequences of ``mixture``: whole blocks hold the
    fixed counts, the partial last block is assigned slot by slot. ``extent`` is the highest draw
    number + 1 (a partial block uses a subset of its ranks, so it can exceed the draws)."""
    full, rem = divmod(int(n), mixture.block_size)
    draws = {name: full * c for name, c in mixture.counts.items()}
    extent = dict(draws)
    if rem:
        source, draw = mixture.assign(np.arange(full * mixture.block_size, n, dtype=np.int64))
        for i in np.unique(source):
            name = mixture.names[int(i)]
            draws[name] += int((source == i).sum())
            extent[name] = int(draw[source == i].max()) + 1
    return draws, extent


@dataclass(frozen=True)
class StagedMixture:
    """Mixture phases: phase k mixes by its own block mixture from global sequence ``starts[k]`` on.

    Why a phase restarts its blocks at its start: a cooldown begins exactly at its step, whatever the
    block size. Per-source draw numbers continue across phases (a source's draws in phase k start after
    every draw of it in the earlier phases), so no window repeats early, and sequence g is still a
    pure function of (seed, g): the offsets are counted exactly from the phases' fixed counts."""

    starts: tuple[int, ...]  # first global sequence of each phase; starts[0] == 0, increasing
    phases: tuple[BlockMixture, ...]

    def __post_init__(self) -> None:
        if not self.starts or self.starts[0] != 0 or list(self.starts) != sorted(set(self.starts)):
            raise ValueError(f"mixture phases must start at 0 and increase strictly, got starts {list(self.starts)}")
        if len(self.starts) != len(self.phases):
            raise ValueError("one start per mixture phase")

    @property
    def names(self) -> list[str]:
        return sorted({n for p in self.phases for n in p.names})

    @property
    def counts(self) -> dict[str, int]:
        """The first phase's counts per block (what a single mixture reports)."""
        return dict(self.phases[0].counts)

    @cached_property
    def _offsets(self) -> list[dict[str, int]]:
        """Per phase, each source's draws in the phases before it (where its draw numbers start)."""
        offsets, running = [], {n: 0 for n in self.names}
        for k, phase in enumerate(self.phases):
            offsets.append(dict(running))
            if k + 1 < len(self.phases):
                for n, d in _prefix_draws(phase, self.starts[k + 1] - self.starts[k])[0].items():
                    running[n] += d
        return offsets

    @cached_property
    def _partials(self) -> dict[int, dict[int, np.ndarray]]:
        """For each phase that ends inside a block: per local source, the sorted draw numbers that
        partial block uses (what `_dense` ranks by)."""
        out: dict[int, dict[int, np.ndarray]] = {}
        for k, phase in enumerate(self.phases[:-1]):
            length = self.starts[k + 1] - self.starts[k]
            full, rem = divmod(length, phase.block_size)
            if rem:
                src, draw = phase.assign(np.arange(full * phase.block_size, length, dtype=np.int64))
                out[k] = {int(s): np.sort(draw[src == s]) for s in np.unique(src)}
        return out

    def _dense(self, k: int, src: np.ndarray, draw: np.ndarray) -> np.ndarray:
        """Phase k ends inside a block: renumber that partial block's draws densely per source (rank by
        draw number), so every source's draws run 0, 1, 2, ... across phases with no gap or repeat."""
        used = self._partials.get(k)
        if used is None:
            return draw
        phase = self.phases[k]
        full = (self.starts[k + 1] - self.starts[k]) // phase.block_size
        first = full * phase._layout()[0][src]  # the partial block's draws start at full * count
        out = draw.copy()
        for s, numbers in used.items():
            sel = (draw >= first) & (src == s)
            out[sel] = full * phase.counts[phase.names[s]] + np.searchsorted(numbers, draw[sel])
        return out

    def assign(self, sequence_indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """As BlockMixture.assign; source indices refer to ``self.names`` (every phase's sources)."""
        g = np.asarray(sequence_indices, dtype=np.int64)
        if g.size and int(g.min()) < 0:
            raise IndexError(f"sequence index must be >= 0, got {int(g.min())}")
        names = self.names
        source, draw = np.empty_like(g), np.empty_like(g)
        ends = (*self.starts[1:], None)
        for k, (phase, offset) in enumerate(zip(self.phases, self._offsets)):
            sel = g >= self.starts[k] if ends[k] is None else (g >= self.starts[k]) & (g < ends[k])
            if not sel.any():
                continue
            local_src, local_draw = phase.assign(g[sel] - self.starts[k])
            if ends[k] is not None:
                local_draw = self._dense(k, local_src, local_draw)
            to_global = np.array([names.index(n) for n in phase.names], dtype=np.int64)
            add = np.array([offset[n] for n in phase.names], dtype=np.int64)
            source[sel] = to_global[local_src]
            draw[sel] = local_draw + add[local_src]
        return source, draw

    def draws_in_prefix(self, n: int) -> dict[str, int]:
        """Exact draws per source among global sequences [0, n)."""
        out = {name: 0 for name in self.names}
        for k, phase in enumerate(self.phases):
            end = n if k + 1 == len(self.phases) else min(n, self.starts[k + 1])
            if end > self.starts[k]:
                for name, d in _prefix_draws(phase, end - self.starts[k])[0].items():
                    out[name] += d
        return out

    def extent_in_prefix(self, n: int) -> dict[str, int]:
        """Per source, the highest draw number + 1 among global sequences [0, n) (0 when none). Draws
        before the block holding sequence n - 1 are dense, so there the extent is the count."""
        if n <= 0:
            return {name: 0 for name in self.names}
        start = self._last_start(n)
        out = self.draws_in_prefix(start)
        source, draw = self.assign(np.arange(start, n, dtype=np.int64))
        for i in np.unique(source):
            name = self.names[int(i)]
            out[name] = max(out[name], int(draw[source == i].max()) + 1)
        return out

    def _last_start(self, n: int) -> int:
        """The first sequence of the block that holds sequence n - 1 (draws below it are all dense)."""
        k = max(i for i, s in enumerate(self.starts) if s < n)
        block = self.phases[k].block_size
        return self.starts[k] + (n - 1 - self.starts[k]) // block * block


def mixture_for(weights, block_size: int, seed: int, batch_size: int) -> "BlockMixture | StagedMixture":
    """The mixture for ``weights``: one dict (a BlockMixture, as always), or a schedule, a list of
    (start step, weights) whose first start is 0 (a StagedMixture; steps become sequence indices by
    ``batch_size``, so a phase switches exactly at its step)."""
    if isinstance(weights, dict):
        return BlockMixture.from_weights(dict(weights), block_size, seed)
    schedule = [(int(s), dict(w)) for s, w in weights]
    if len(schedule) == 1 and schedule[0][0] == 0:
        return BlockMixture.from_weights(schedule[0][1], block_size, seed)
    phases = tuple(BlockMixture.from_weights(w, block_size, seed) for _, w in schedule)
    return StagedMixture(tuple(s * int(batch_size) for s, _ in schedule), phases)


def schedule_names(weights) -> list[str]:
    """Every source a weights dict or schedule names (with any weight, zero included)."""
    if isinstance(weights, dict):
        return sorted(weights)
    return sorted({n for _, w in weights for n in w})
