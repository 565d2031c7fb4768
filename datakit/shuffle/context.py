"""Per-task context visible to user code: counters and the shard being processed.

Tasks run in worker processes, so these are process globals reset at the start of every task and
shipped back with its result; the driver sums counters only over accepted attempts, so a retried
task never counts twice.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True)
class ShardInfo:
    index: int
    total: int
    label: str = ""
    attempt: int = 0


_counters: Counter = Counter()
_shard: ShardInfo | None = None


class _Counters:
    """`counters.increment(name, n)` from inside any user function."""

    def increment(self, name: str, n: int = 1) -> None:
        _counters[name] += n

    def snapshot(self) -> dict[str, int]:
        return dict(_counters)


counters = _Counters()


def current_shard() -> ShardInfo:
    if _shard is None:
        raise RuntimeError("current_shard() is only available inside a running task")
    return _shard


def begin_task(shard: ShardInfo) -> None:
    global _shard
    _counters.clear()
    _shard = shard


def end_task() -> dict[str, int]:
    global _shard
    _shard = None
    out = dict(_counters)
    _counters.clear()
    return out
