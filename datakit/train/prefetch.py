"""Batches loaded ahead of the training step on one background thread.

A batch is a pure function of its step (the batch source's contract), so loading ahead changes no
result; it only hides the source's latency behind the device's work. One thread keeps the loads in
step order, and the time spent loading is summed for the run's data-load fraction.
"""

from __future__ import annotations

import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import jax
import numpy as np


class BatchSource(Protocol):
    def batch(self, step: int) -> np.ndarray: ...


class Prefetcher:
    """Keeps up to ``depth`` batches of steps [start, end) in flight (state: the queue of futures, the
    next step to submit, the seconds spent loading). A context manager: leaving it cancels what is
    queued and joins the thread."""

    def __init__(self, source: BatchSource, shape: tuple[int, int], depth: int, sharding: Any,
                 start: int, end: int) -> None:
        self.source, self.shape, self.depth, self.sharding = source, shape, depth, sharding
        self.next_to_submit, self.end = start, end
        self.load_s = 0.0
        self.queue: deque = deque()
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="datakit-batches")

    def __enter__(self) -> "Prefetcher":
        try:
            self._refill()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def next(self) -> Any:
        """The next step's batch on the device (waits for it if it is not loaded yet)."""
        batch = self.queue.popleft().result()
        self._refill()
        return batch

    def close(self) -> None:
        for fut in self.queue:
            fut.cancel()
        self.pool.shutdown(wait=True)

    def _refill(self) -> None:
        while len(self.queue) < self.depth and self.next_to_submit < self.end:
            self.queue.append(self.pool.submit(self._load, self.next_to_submit))
            self.next_to_submit += 1

    def _load(self, step_index: int) -> Any:
        t0 = time.perf_counter()
        b = np.asarray(self.source.batch(step_index))
        if b.shape != self.shape:
            raise ValueError(
                f"batch source returned shape {b.shape} for step {step_index}, expected {self.shape}"
            )
        out = jax.device_put(b.astype(np.int32, copy=False), self.sharding)
        self.load_s += time.perf_counter() - t0
        return out
