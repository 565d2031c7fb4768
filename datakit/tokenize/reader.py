"""Training data from token caches: shuffled fixed-length windows mixed across sources.

Why stateless: ``TrainBatches.batch(step)`` is a pure function of (seed, step) and the caches, so a
resumed run needs only the step number (no sampler state in checkpoints), any worker can build any
batch, and two runs with the same seed see the same data. The pieces:

- windows: each source's documents form one stream (each document ends with EOS); window j of a
  source is stream[j*seq_len : j*seq_len + seq_len + 1] (inputs and shifted targets overlap by one
  token, so every token is a target exactly once per epoch);
- mixture: global sequence g -> (source, draw number) by :class:`~datakit.tokenize.mixture.BlockMixture`;
- shuffle: draw number n of a source -> window ``perm(n mod W; key(seed, source, epoch))`` with a
  Feistel permutation (or the LCG baseline), epoch = n // W. A source that runs out wraps into its
  next epoch with a fresh permutation, so every window is drawn once per epoch.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from datakit.tokenize.cache import CacheNotReady, TokenCache, open_cache
from datakit.tokenize.feistel import derive_key, permute
from datakit.tokenize.mixture import mixture_for, schedule_names

__all__ = ["CacheNotReady", "TokenCache", "open_cache", "TrainBatches", "DEFAULT_BLOCK_SIZE"]

DEFAULT_BLOCK_SIZE = 1024


class TrainBatches:
    """Batches of ``batch_size`` windows of ``seq_len + 1`` tokens (int32), mixed by ``weights``.

    caches: source name -> split directory; weights: source name -> weight (normalised; sources with
    weight 0 are never drawn), or a schedule: a list of (start step, weights) from step 0, each phase
    mixing from its step on (``datakit.tokenize.mixture.StagedMixture``). block_size: sequences per
    mixture block (default max(1024, batch_size)); larger blocks follow the weights more finely.
    permutation: "feistel" (default) or "lcg" (baseline)."""

    def __init__(
        self,
        caches: dict[str, str],
        weights: dict[str, float] | list[tuple[int, dict[str, float]]],
        seq_len: int,
        batch_size: int,
        seed: int,
        block_size: int | None = None,
        permutation: str = "feistel",
    ) -> None:
        if seq_len < 1 or batch_size < 1:
            raise ValueError(f"seq_len and batch_size must be >= 1, got {seq_len} and {batch_size}")
        if permutation not in ("feistel", "lcg"):
            raise ValueError(f"permutation must be 'feistel' or 'lcg', got {permutation!r}")
        named = schedule_names(weights)
        missing = sorted(set(named) - set(caches))
        if missing:
            raise ValueError(f"mixture weights name source(s) {missing} that have no cache (caches: {sorted(caches)})")
        unweighted = sorted(set(caches) - set(named))
        if unweighted:
            raise ValueError(f"cache(s) {unweighted} have no mixture weight; give them a weight (0 to exclude)")
        self.seq_len, self.batch_size, self.seed = int(seq_len), int(batch_size), int(seed)
        self.permutation = permutation
        self.block_size = int(block_size) if block_size is not None else max(DEFAULT_BLOCK_SIZE, self.batch_size)
        self.mixture = mixture_for(weights, self.block_size, self.seed, self.batch_size)
        self.sources: list[str] = self.mixture.names
        self.caches: dict[str, TokenCache] = {name: open_cache(caches[name]) for name in self.sources}
        vocab = {name: c.vocab_size for name, c in self.caches.items()}
        ident = {c.tokenizer_identity["sha256"] for c in self.caches.values()}
        if len(ident) > 1:
            raise ValueError(
                f"caches were built with different tokenizers (sha256s {sorted(ident)}); mixing them would "
                "mix incompatible token ids"
            )
        self.vocab_size = max(vocab.values())
        self.num_windows: dict[str, int] = {}
        for name, c in self.caches.items():
            w = (c.total_tokens - 1) // self.seq_len if c.total_tokens > 0 else 0
            if w < 1:
                raise ValueError(
                    f"source {name!r} ({caches[name]}) has {c.total_tokens} tokens, fewer than one window of "
                    f"seq_len+1 = {self.seq_len + 1}; lower seq_len or drop the source"
                )
            self.num_windows[name] = w
        self._windows = np.array([self.num_windows[n] for n in self.sources], dtype=np.int64)
        self._keys = {name: derive_key(self.seed, "windows", name) for name in self.sources}

    @property
    def tokens_per_batch(self) -> int:
        """Target tokens per batch (batch_size * seq_len); each row carries seq_len + 1 tokens."""
        return self.batch_size * self.seq_len

    @property
    def counts_per_block(self) -> dict[str, int]:
        return dict(self.mixture.counts)

    def locate(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """(source index into ``self.sources``, window index) for each row of batch ``step``."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        g = np.arange(step * self.batch_size, (step + 1) * self.batch_size, dtype=np.int64)
        source, draw = self.mixture.assign(g)
        windows = np.empty_like(draw)
        per_source = self._windows[source]
        epoch = draw // per_source
        within = draw % per_source
        for s in np.unique(source):
            name = self.sources[int(s)]
            sel_s = source == s
            for e in np.unique(epoch[sel_s]):
                sel = sel_s & (epoch == e)
                key = derive_key(self._keys[name], int(e))
                windows[sel] = permute(within[sel], int(self._windows[s]), key, self.permutation)
        return source, windows

    def batch(self, step: int) -> np.ndarray:
        """int32 array (batch_size, seq_len + 1) for training step ``step``; pure in (seed, step)."""
        source, windows = self.locate(step)
        out = np.empty((self.batch_size, self.seq_len + 1), dtype=np.int32)
        for row in range(self.batch_size):
            cache = self.caches[self.sources[int(source[row])]]
            cache.read_into(out[row], int(windows[row]) * self.seq_len)
        return out

    def __iter__(self) -> Iterator[np.ndarray]:
        step = 0
        while True:
            yield self.batch(step)
            step += 1
