"""Finishing a source's parts: exact dedup across units, and each part under the source-wide schema.

Each unit's part is first written as its files read (`write.write_unit`: sorted by id, duplicates
within the unit to dups). Two rules then hold for the whole source, as they did when the parts were
id partitions:

- an id is kept once: in the earliest unit that has it (units are consecutive runs of the sorted file
  list, so this is the first copy by file order and position, as before). `cross_unit_losses` finds,
  from the parts' id columns only, which ids each later part loses; such a part is rewritten with
  those rows moved to its dups (each before the unit's own copies of that id, since it came first);
- every part has the source-wide schema (the union of the parts' columns, drift unified): a part whose
  columns differ is rewritten under it.

A part neither rule touches is final as read. Both rules are pure functions of all the units' parts,
so a build that took most parts from an earlier build finishes them exactly as a fresh build does.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datakit.core import arrow_numpy as an
from datakit.core.fsio import atomic_output, open_read, read_table

from .schema import conform
from .write import BATCH_ROWS, part_writer


def _id_words(path: str) -> np.ndarray:
    """A part's ids (32 hex digits each) as (n, 2) big-endian 64-bit words."""
    ids = read_table(path, columns=["id"]).column("id").to_pylist()
    return np.frombuffer(bytes.fromhex("".join(ids)), dtype=">u8").reshape(-1, 2).astype(np.uint64)


def cross_unit_losses(paths: list[str], threads: int = 8) -> list[tuple[str, ...]]:
    """For each part (in unit order), the ids an earlier part already holds, sorted: what it loses.

    Reads only the id columns. Within one part every id is unique (exact dedup within the unit), so
    after sorting all (id, unit) pairs, every pair equal in id to the one before it is a loss."""
    if len(paths) < 2:
        return [()] * len(paths)
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(paths)))) as pool:
        words = list(pool.map(_id_words, paths))
    unit = np.concatenate([np.full(len(w), i, dtype=np.int64) for i, w in enumerate(words)])
    both = np.concatenate(words) if words else np.zeros((0, 2), np.uint64)
    order = np.lexsort((unit, both[:, 1], both[:, 0]))
    hi, lo, unit = both[order, 0], both[order, 1], unit[order]
    again = np.zeros(len(unit), dtype=bool)
    again[1:] = (hi[1:] == hi[:-1]) & (lo[1:] == lo[:-1])
    lost: list[list[str]] = [[] for _ in paths]
    for u, h, l in zip(unit[again].tolist(), hi[again].tolist(), lo[again].tolist()):
        lost[u].append(f"{h:016x}{l:016x}")
    return [tuple(sorted(ids)) for ids in lost]


@dataclass(frozen=True)
class FinishJob:
    """One part to finish: its files as read (``raw_*``), where the final files go, the ids it loses
    to earlier units, and the source-wide schema."""

    raw_main: str
    raw_dups: str
    main: str
    dups: str
    lost: tuple[str, ...]
    schema: pa.Schema


def _main_part(job: FinishJob) -> list[pa.Table]:
    """Write the final main part row group by row group (memory: one row group); return the lost rows."""
    lost = an.strings(job.lost)  # not pa.array: it imports pandas into the process
    moved = []
    with open_read(job.raw_main) as f, atomic_output(job.main) as out:
        pf = pq.ParquetFile(f)
        w = part_writer(out, job.schema)
        for i in range(pf.num_row_groups):
            t = pf.read_row_group(i)
            if job.lost:
                hit = pc.is_in(t.column("id"), value_set=lost)
                moved.append(conform(t.filter(hit), job.schema))
                t = t.filter(pc.invert(hit))
            if t.num_rows:
                w.write_table(conform(t, job.schema), row_group_size=t.num_rows)
        w.close()
    return moved


def _dups_part(job: FinishJob, moved: list[pa.Table]) -> None:
    """Write the final dups part: the unit's own dups under the schema, and the rows it lost merged in
    by id, each before the unit's later copies of the same id (a stable sort of lost rows first)."""
    with open_read(job.raw_dups) as f:
        pf = pq.ParquetFile(f)
        groups = [conform(pf.read_row_group(i), job.schema) for i in range(pf.num_row_groups)]
    with atomic_output(job.dups) as out:
        w = part_writer(out, job.schema)
        if moved:
            t = pa.concat_tables([*moved, *groups]) if groups else pa.concat_tables(moved)
            t = t.take(pc.sort_indices(t, sort_keys=[("id", "ascending")]))
            groups = [t.slice(s, BATCH_ROWS) for s in range(0, t.num_rows, BATCH_ROWS)]
        for t in groups:
            if t.num_rows:
                w.write_table(t, row_group_size=t.num_rows)
        w.close()


def write_final(job: FinishJob) -> str:
    """A part's final main and dups files from its files as read (engine task)."""
    _dups_part(job, _main_part(job))
    return job.main


__all__ = ["FinishJob", "cross_unit_losses", "write_final"]
