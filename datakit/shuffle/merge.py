"""Reducer side: gather this shard's runs from every sidecar and k-way merge them under a memory budget.

Each open run costs roughly one decoded sub-batch plus a zstd window. When the runs of a reducer would
cost more than its budget, groups of runs are first merged into spill files (same frame format), pass
after pass, until the final merge fits: an external merge sort whose memory stays flat however large
the input grows. Groups are consecutive, so ties keep their input order and the result is identical to
a one-pass merge.
"""

from __future__ import annotations

import heapq
import os
from operator import itemgetter
from dataclasses import dataclass, field
from typing import Any, Iterator

from .frames import RECORD_KEY, Record, RunRef, iter_run, new_spill_path, read_sidecar_runs, write_spill_run
from . import columnar
from datakit.core.fsio import is_local, map_reads

_ZSTD_WINDOW = 1 << 20
_PY_OVERHEAD = 4  # decoded Python objects weigh several times their pickled bytes
_ARROW_OVERHEAD = 3  # a decoded Arrow sub-batch is about its IPC size; merge rounds copy it (slice, sort)
_SUB_BATCH_ROWS = 1024


@dataclass
class MergeStats:
    runs: int = 0
    spill_passes: int = 0
    spill_files: int = 0
    spilled_rows: int = 0
    fan_in: int = 0
    files_read: list[str] = field(default_factory=list)


def gather_runs(index_paths: list[str], target: int, threads: int = 8) -> list[RunRef]:
    """Read every map task's sidecar (in map order) and keep only this target's byte ranges. Local
    sidecars are read in this thread (a read is microseconds: a thread pool per reducer cost more than
    the reads, thousands of thread starts per step); remote ones concurrently (each is a GET)."""
    if not index_paths:
        return []
    per_map = map_reads(lambda p: read_sidecar_runs(p, target), index_paths,
                        all(is_local(p) for p in index_paths), threads)
    return [run for runs in per_map for run in runs]


def run_cost(run: RunRef) -> int:
    """Memory one open run costs during a merge."""
    if run.rows == 0:
        return 1
    if run.fmt == "arrow":
        sub_batch = min(run.raw_bytes, columnar.SUB_BATCH_BYTES + run.raw_bytes / max(1, run.rows))
        return int(sub_batch * _ARROW_OVERHEAD + min(_ZSTD_WINDOW, run.raw_bytes) + (1 << 16))
    sub_batch = run.raw_bytes / max(1, -(-run.rows // _SUB_BATCH_ROWS))
    return int(sub_batch * _PY_OVERHEAD + min(_ZSTD_WINDOW, run.raw_bytes) + (1 << 16))


def _merge_iter(runs: list[RunRef], key=RECORD_KEY) -> Iterator[Record]:
    if len(runs) == 1:
        return iter_run(runs[0])
    return heapq.merge(*(iter_run(r) for r in runs), key=key)


def _arrow_merge_iter(runs: list[RunRef], columns: tuple[str, str | None]) -> Iterator:
    streams = [columnar.iter_arrow_run(r.path, r.offset, r.length) for r in runs]
    if len(streams) == 1:
        return streams[0]
    return columnar.merge_arrow(streams, *columns)


def _spill(path: str, runs: list[RunRef], key, columns: tuple[str, str | None] | None) -> RunRef:
    if columns is None:
        return write_spill_run(path, _merge_iter(runs, key))
    rows, raw, length = columnar.write_arrow_spill(path, _arrow_merge_iter(runs, columns))
    return RunRef(path, 0, length, rows, raw, "arrow", runs[0].items)


def merge_runs(
    runs: list[RunRef], memory_bytes: int, spill_dir: str, stats: MergeStats | None = None,
    secondary: bool = True, columns: tuple[str, str | None] | None = None,
) -> Iterator[Any]:
    """Yield all records of `runs` in (key, sort key, input order), spilling when over budget.

    Without a secondary sort every sort key is empty, so comparing the key alone gives the same order
    and saves building a tuple per record. Columnar runs (`columns` = (key column, sort column)) yield
    key-sorted Arrow tables instead, no key split across two of them.
    """
    key = RECORD_KEY if secondary else itemgetter(0)
    stats = stats if stats is not None else MergeStats()
    stats.runs = len(runs)
    if not runs:
        return
    worst = max(run_cost(r) for r in runs)
    fan_in = max(2, memory_bytes // max(1, worst))
    stats.fan_in = fan_in
    spills: list[str] = []
    try:
        while len(runs) > fan_in:
            os.makedirs(spill_dir, exist_ok=True)
            stats.spill_passes += 1
            merged: list[RunRef] = []
            for start in range(0, len(runs), fan_in):
                group = runs[start : start + fan_in]
                if len(group) == 1:
                    merged.append(group[0])
                    continue
                path = new_spill_path(spill_dir)
                spills.append(path)
                ref = _spill(path, group, key, columns)
                stats.spill_files += 1
                stats.spilled_rows += ref.rows
                merged.append(ref)
                for old in group:
                    if old.path in spills:
                        os.unlink(old.path)
                        spills.remove(old.path)
            runs = merged
        yield from (_merge_iter(runs, key) if columns is None else _arrow_merge_iter(runs, columns))
    finally:
        for path in spills:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
