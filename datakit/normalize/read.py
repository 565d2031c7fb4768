"""The read side of normalize (runs in workers): files -> clean items, and, for units read whole by one
task, straight on to their parts.

Two ways to the same parts (`pipeline._compute` picks per unit; the bytes never depend on it):

- shuffled (`read_stage`): a read task yields its files' items, the engine's group_by meets every item
  of a part in its reducer, sorted by `write.item_sort` (an external sort: memory bounded whatever the
  unit's size), and `write.write_unit` writes the part;
- direct (`read_write_stage`): a task holds whole units, each small enough to sort in memory; it sorts
  every part's items with the same key and writes the part with the same `write.write_part`, skipping
  the shuffle's serialisation, compression, spill files and merge (most of normalize's CPU beyond
  reading and writing, measured in `benchmarks/normalize.py`).
"""

from __future__ import annotations

from collections import Counter
from itertools import groupby
from typing import Iterable, Iterator

import pyarrow as pa

from datakit.manifest import SourceSpec
from datakit.sources.readers import INPUT_CHANGED, INPUT_MISSING, FileRef, Reject, input_verdict, planned_reject, read_file

from .clean import clean_record
from .config import NormalizeConfig
from .units import part_of
from .write import REJECT, STATS, item_sort, write_part

REJECT_PREFIX = "reject/"
FILE_PREFIX = "records_in_file/"  # records read per input file (its rel): what a dry run says a change costs


def _read_ref(split: tuple[int, int], ref: FileRef, spec: SourceSpec, cfg: NormalizeConfig,
              columns: tuple[str, ...] | None, stats: Counter) -> Iterator[tuple]:
    """One file (or row-group range) of a unit whose parts are shards ``first .. first + k - 1``
    (``split``): its documents (to their id range's part) and rejects (to the first) as shuffle items."""
    planned = ref.sha256 is not None or ref.planned_size is not None
    u, k = split
    before = stats["records_in"]
    try:
        yield from _ref_items(u, k, planned, ref, spec, cfg, columns, stats)
    finally:
        stats[FILE_PREFIX + ref.rel] += stats["records_in"] - before


def _ref_items(u: int, k: int, planned: bool, ref: FileRef, spec: SourceSpec, cfg: NormalizeConfig,
               columns: tuple[str, ...] | None, stats: Counter) -> Iterator[tuple]:

    def reject(r: Reject, read: bool = True) -> tuple:
        stats["records_in"] += read
        stats[REJECT_PREFIX + r.reason] += 1
        return (u, REJECT, r.file_index, r.pos, r.to_row(spec.name))

    try:
        for raw in read_file(ref, spec.format, cfg, stats, columns):
            if type(raw) is Reject:
                yield reject(raw)
                continue
            stats["records_in"] += 1
            out = clean_record(raw, spec, cfg, stats)
            if out is None:
                continue
            yield reject(out, read=False) if type(out) is Reject else (u + part_of(out[0], k), *out)
    except FileNotFoundError:
        if not planned:
            raise
        yield reject(planned_reject(ref, INPUT_MISSING, f"planned ({ref.planned_size} bytes) but gone when read"))
        return
    verdict = input_verdict(ref) if planned else None
    if verdict:
        yield reject(planned_reject(ref, INPUT_CHANGED, verdict))


def _stats_item(first: int, counts: Counter) -> tuple:
    """A task's counts for one unit, as the item its first part's writer sums."""
    return (first, STATS, 0, 0, {k: v for k, v in counts.items() if v})


def read_stage(task: Iterable[tuple[int, FileRef]], *, spec: SourceSpec, cfg: NormalizeConfig,
               columns: tuple[str, ...] | None, splits: list[tuple[int, int]]) -> Iterator[tuple]:
    """map_shard: read + clean one read task's files (each of unit ``u``, whose parts are the shards
    ``splits[u]``: first, count). Documents, rejects and, last, this task's counts per unit go to the
    shuffle, routed to their part (`write.item_unit`; rejects and counts to the unit's first part)."""
    stats: dict[int, Counter] = {}
    for u, ref in task:
        yield from _read_ref(splits[u], ref, spec, cfg, columns, stats.setdefault(u, Counter()))
    for u, counts in stats.items():
        yield _stats_item(splits[u][0], counts)


def read_write_stage(task: Iterable[tuple[int, FileRef]], *, spec: SourceSpec, cfg: NormalizeConfig,
                     columns: tuple[str, ...] | None, splits: list[tuple[int, int]], names: list[str],
                     fixed: list[pa.Schema | None], out_dir: str) -> Iterator[dict]:
    """map_shard over a task of whole units (every file of unit ``u`` in this task, consecutive): read,
    clean, sort and write each unit's parts here, one summary per part, as `write.write_unit` would
    after the shuffle (the same items, the same order, the same writer)."""
    for u, members in groupby(task, key=lambda m: m[0]):
        first, k = splits[u]
        stats: Counter = Counter()
        parts: list[list[tuple]] = [[] for _ in range(k)]
        for _, ref in members:
            for item in _read_ref((0, k), ref, spec, cfg, columns, stats):
                parts[item[0]].append(item)
        parts[0].append(_stats_item(0, stats))
        for j, items in enumerate(parts):
            items.sort(key=item_sort)
            yield write_part(first + j, names[first + j], [items], out_dir=out_dir, fixed=fixed[first + j],
                             dedup=spec.dedup)


__all__ = ["REJECT_PREFIX", "read_stage", "read_write_stage"]
