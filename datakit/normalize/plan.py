"""Planning one source's normalize: its files as refs, cut into units (`units.py`), and the read tasks.

The units fix the outputs (one part per unit), so they depend only on the files' names and sizes (and
parquet footers) and the identity settings. The read tasks only spread the reading over the workers:
their packing may follow the machine, since every record is routed to its unit's part and ordered
there by (id, file, position).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Sequence, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from datakit.core.documents import CORE_SCHEMA
from datakit.core.fsio import is_local, map_reads, open_read
from datakit.core.listing import common_root, is_hidden
from datakit.manifest import SourceSpec
from datakit.shuffle import ExecConfig
from datakit.sources.readers import FileRef

from .clean import output_name
from .config import NormalizeConfig, SchemaConflictError
from .schema import canonical_schema, plain_type, unify_types
from .units import EXPANSION, Piece, Unit, estimated_text, plan_units

_STRINGISH = (pa.types.is_string, pa.types.is_large_string, pa.types.is_null)
T = TypeVar("T")
# A parquet file's kept columns (after renaming) and their types, by file index.
FileTypes = dict[int, dict[str, pa.DataType]]


def file_refs(files: Sequence[Any], root: str | None = None) -> tuple[list[FileRef], int]:
    """Sorted, indexed, relative-named refs; hidden files under the root (`datakit.core.listing.is_hidden`:
    a folder or name starting with '.' or '_') are dropped.

    Returns (refs, number of hidden files skipped)."""
    items = sorted({(f.path, int(f.size)) if hasattr(f, "path") else (str(f), 0) for f in files})
    if not items:
        return [], 0
    base = (root.rstrip("/") if root else common_root([p for p, _ in items]))
    refs, hidden = [], 0
    for path, size in items:
        if base and path.startswith(base + "/"):
            rel = path[len(base) + 1 :]
        else:
            if base:
                raise ValueError(f"input file {path} is not under the source root {base}")
            rel = path.lstrip("/")
        if is_hidden(rel):
            hidden += 1
            continue
        refs.append(FileRef(len(refs), path, rel, size))
    return refs, hidden


def _footer(ref: FileRef) -> tuple[FileRef, Any, Exception | None]:
    try:
        with open_read(ref.path) as f:
            pf = pq.ParquetFile(f)
            return ref, (pf.metadata, pf.schema_arrow), None
    except Exception as e:  # the reader will turn it into a `corrupt_file` reject
        return ref, None, e


def _rg_bytes(meta, i: int) -> int:
    rg = meta.row_group(i)
    return sum(rg.column(j).total_compressed_size for j in range(rg.num_columns))


def _parquet_pieces(ref: FileRef, meta, target: int) -> list[Piece]:
    """A parquet file as one piece, or, when its estimated text (compressed bytes times parquet's
    expansion) exceeds ``target``, as row-group ranges of at most ``target`` each (a single bigger row
    group is a range of its own), each a unit of its own. A range's ref carries its compressed bytes
    as its size (what a read task costs)."""
    x = EXPANSION[".parquet"]
    sizes = [_rg_bytes(meta, i) for i in range(meta.num_row_groups)]
    if sum(sizes) * x <= target:
        return [Piece(FileRef(ref.index, ref.path, ref.rel, sum(sizes), (0, len(sizes))), sum(sizes) * x)]
    pieces, start, acc = [], 0, 0
    for i, b in enumerate(sizes):
        if acc and (acc + b) * x > target:
            pieces.append(Piece(FileRef(ref.index, ref.path, ref.rel, acc, (start, i)), acc * x, alone=True))
            start, acc = i, 0
        acc += b
    pieces.append(Piece(FileRef(ref.index, ref.path, ref.rel, acc, (start, len(sizes))), acc * x, alone=True))
    return pieces


def _kept_types(schema: pa.Schema, text_field: str, id_field: str | None) -> dict[str, pa.DataType]:
    """The columns a parquet file contributes to the output, by output name, with their plain types."""
    taken: set[str] = set()
    out = {}
    for f in schema:
        if f.name in (text_field, id_field):
            continue
        t = plain_type(f.type)
        if f.name == "url" and any(p(t) for p in _STRINGISH):
            continue
        name = output_name(f.name, taken) if f.name in ("id", "text", "source", "source_id", "url") else f.name
        taken.add(name)
        out[name] = t
    return out


def _check_types(refs_types: list[tuple[FileRef, dict[str, pa.DataType]]]) -> None:
    """The source-wide check: a column of incompatible types in two files fails before any work,
    naming both files."""
    types: dict[str, tuple[pa.DataType, FileRef]] = {}
    for ref, kept in refs_types:
        for name, t in kept.items():
            if name not in types:
                types[name] = (t, ref)
                continue
            old, where = types[name]
            try:
                types[name] = (unify_types(old, t), where if not pa.types.is_null(old) else ref)
            except (pa.ArrowTypeError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise SchemaConflictError(
                    f"parquet column {name!r} has incompatible types: {old} in {where.rel} and {t} in "
                    f"{ref.rel}; fix the files, or read only the text with bare: true"
                ) from None


def plan_parquet(refs: list[FileRef], text_field: str, id_field: str | None, bare: bool, target: int,
                 ) -> tuple[list[Piece], FileTypes]:
    """Read every footer once (`fsio.map_reads`: on threads when the files are on object storage): the
    files as pieces (big ones as row-group ranges), and each file's kept columns (conflicts between files
    raised with both file names)."""
    footers = map_reads(_footer, refs, all(is_local(r.path) for r in refs), 16)
    pieces: list[Piece] = []
    file_types: FileTypes = {}
    for ref, info, _err in footers:
        if info is None:
            pieces.append(Piece(ref, estimated_text(ref.path, ref.size)))
            continue
        meta, schema = info
        pieces.extend(_parquet_pieces(ref, meta, target))
        if not bare:
            file_types[ref.index] = _kept_types(schema, text_field, id_field)
    _check_types([(r, file_types[r.index]) for r in refs if r.index in file_types])
    return pieces, file_types


def _unit_schema(unit: Unit, file_types: FileTypes) -> pa.Schema:
    """A parquet unit's fixed schema: its own files' columns only, so its part depends on its files
    alone (the source-wide schema is applied when the parts are finished)."""
    types: dict[str, pa.DataType] = {}
    for ref in dict.fromkeys(r.index for r in unit.refs):
        for name, t in file_types.get(ref, {}).items():
            types[name] = unify_types(types[name], t) if name in types else t
    return canonical_schema(pa.field(n, t) for n, t in types.items())


@dataclass(frozen=True)
class ReadPlan:
    """The units of one source, each unit's schema when known in advance (None: inferred from the
    records, jsonl), and the parquet projection (bare sources read only what they keep)."""

    units: list[Unit]
    fixed: list[pa.Schema | None]
    columns: tuple[str, ...] | None


def read_plan(spec: SourceSpec, refs: list[FileRef], cfg: NormalizeConfig) -> ReadPlan:
    target = cfg.target_shard_bytes
    if spec.format == "parquet":
        pieces, file_types = plan_parquet(refs, spec.text_field, spec.id_field, spec.bare, target)
        units = plan_units(pieces, target, cfg.part_bytes)
        columns = tuple(c for c in (spec.text_field, spec.id_field, "url") if c) if spec.bare else None
        fixed = [canonical_schema([]) if spec.bare else _unit_schema(u, file_types) for u in units]
        return ReadPlan(units, fixed, columns)
    units = plan_units([Piece(r, estimated_text(r.path, r.size)) for r in refs], target, cfg.part_bytes)
    if spec.format in ("html", "warc"):
        schema = canonical_schema([] if spec.bare else [pa.field("title", pa.string())])
    elif spec.format == "text" or spec.bare:
        schema = CORE_SCHEMA
    else:
        schema = None
    return ReadPlan(units, [schema] * len(units), None)


def pack_shards(items: list[tuple[T, int]], target_bytes: int, max_files: int) -> list[list[T]]:
    """Consecutive items into read tasks of about `target_bytes` (input order is preserved)."""
    shards: list[list[T]] = []
    cur: list[T] = []
    acc = 0
    for item, size in items:
        if cur and (acc + size > target_bytes or len(cur) >= max_files):
            shards.append(cur)
            cur, acc = [], 0
        cur.append(item)
        acc += size
    if cur:
        shards.append(cur)
    return shards or [[]]


def _workers(exec_config: ExecConfig | None) -> int:
    if exec_config is not None and exec_config.backend == "inline":
        return 1
    return (exec_config.max_workers if exec_config and exec_config.max_workers else os.cpu_count()) or 1


def direct_units(units: list[Unit], cfg: NormalizeConfig, exec_config: ExecConfig | None) -> list[int]:
    """Which of ``units`` the tasks that read them write too (`read.read_write_stage`), skipping the
    shuffle: those of at most ``target_shard_bytes`` of estimated text (a task sorts a unit in memory;
    a bigger one, a single huge file, keeps the shuffle's bounded external sort), when there are at
    least as many as workers (fewer would leave a worker idle, where the shuffle spreads the writing of
    their parts). Outputs never depend on this choice."""
    small = [n for n, u in enumerate(units) if u.text_bytes <= cfg.target_shard_bytes]
    return small if len(small) >= _workers(exec_config) else []


def read_tasks(units: list[tuple[int, Unit]], cfg: NormalizeConfig, exec_config: ExecConfig | None,
               whole_units: bool = False) -> list[list[tuple[int, FileRef]]]:
    """The (unit number, ref) pairs of the units to compute, packed into read tasks no bigger than
    input_shard_bytes, and at least two per worker when the input allows, so a small corpus still uses
    every core (``whole_units``: every unit's refs in one task, consecutive). Outputs do not depend on
    the packing, so this may follow the machine."""
    items = [((i, ref), ref.size) for i, unit in units for ref in unit.refs]
    per_task = max(1, min(cfg.input_shard_bytes, math.ceil(sum(s for _, s in items) / (2 * _workers(exec_config)))))
    if not whole_units:
        return pack_shards(items, per_task, cfg.max_files_per_input_shard)
    packed = pack_shards([([(i, ref) for ref in unit.refs], sum(r.size for r in unit.refs)) for i, unit in units],
                         per_task, cfg.max_files_per_input_shard)
    return [[m for unit in task for m in unit] for task in packed]


def task_label(task: list[tuple[int, FileRef]]) -> str:
    if not task:
        return "(no files)"
    if len(task) == 1:
        r = task[0][1]
        return r.rel + (f" row groups {r.row_groups[0]}..{r.row_groups[1] - 1}" if r.row_groups else "")
    return f"{task[0][1].rel} .. {task[-1][1].rel} ({len(task)} files)"


__all__ = ["ReadPlan", "direct_units", "file_refs", "pack_shards", "plan_parquet", "read_plan", "read_tasks", "task_label"]
