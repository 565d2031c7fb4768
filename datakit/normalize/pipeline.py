"""normalize_source: one source's files -> one id-sorted, exactly deduplicated part per unit of input.

    units (units.py)                         a stable cut of the sorted file list (big parquet files by
                                             row-group ranges); k output parts per unit (id ranges,
                                             k from its size), named by it
    take                                     units whose content key the earlier build has (incremental.py)
    direct (read.py): units of at most       whole units packed into tasks; each task reads, cleans,
      target_shard_bytes, when there are     sorts in memory by (id, file, pos) and writes its units'
      at least as many as workers            parts (no shuffle: the common case)
      from_shards(whole units)
      .map_shard(read_write_stage)
    shuffled (read.py), the others:
      from_shards(read tasks)                files packed by bytes (only the reading: outputs do not
      .map_shard(read_stage)                 depend on it); lenient readers -> clean -> items
      .group_by(part, stream_unit,           every record of a part meets in its reducer (a unit's
                sort_by=(id, file, pos))     rejects and counts in its first part's), in id order,
                                             copies in (file, position) order
      .map_shard(write_unit)                 the part's main + dups files (and rejects), one summary
                                             (the same `write_part` as the direct way: same bytes)
    finish (finish.py)                       one schema for every part, exact dedup across units (the
                                             first copy by file order), only the parts that change

then, in the driver: consolidate the units' rejects, check the counts, and fail loudly when too much was
rejected or nothing survived.
"""

from __future__ import annotations

import os
from collections import Counter
from functools import partial
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from datakit.shuffle import Dataset, ExecConfig, small_job_config
from datakit.core.documents import CORE_SCHEMA
from datakit.core import fsio
from datakit.core.fsio import exists, is_local, join, list_names, open_read, remove
from datakit.core.layout import DocumentsDir
from datakit.manifest import SourceSpec
from datakit.sources.readers import FORMATS, INPUT_CHANGED, INPUT_MISSING, FileRef
from datakit.steps import reuse

from .clean import FIELD_PREFIX
from .config import (
    COUNTER_NAMES, NormalizeConfig, NormalizeError, NormalizeResult, PlannedFile, SchemaConflictError,
)
from .finish import FinishJob, cross_unit_losses, write_final
from .incremental import Part, UnitReuse, computed_part, final_key, move, taken_parts, unit_key, unit_record
from .plan import ReadPlan, direct_units, file_refs, read_plan, read_tasks, task_label
from .planned import check_parquet_hashes, check_planned, planned_digests, planned_error, planned_failures
from .schema import Conflict, ConflictFound, Examples, merge_examples, merge_schemas, schema_to_dict
from .read import FILE_PREFIX, REJECT_PREFIX, read_stage, read_write_stage
from .write import consolidate_rejects, item_sort, item_unit, stream_unit, write_unit

# An example location that names a unit taken from an earlier build (its records were not read).
_IN_UNIT = -2


# ------------------------------------------------------------------------------------------------
# driver


def _where(fmt: str, refs: list[FileRef], ex: tuple[str, int, int]) -> str:
    _, fi, pos = ex
    if fi < 0 or fi >= len(refs):
        return "(unknown location)"
    rel = refs[fi].rel
    if pos == _IN_UNIT:
        return f"the unit starting at {rel} (taken from the earlier build)"
    if fmt in ("jsonl", "parquet"):
        return f"{rel}:{pos}"
    if fmt == "warc":
        return f"{rel} (record at offset {pos})"
    return rel


def _conflict_error(name: str, fmt: str, refs: list[FileRef], c: Conflict) -> SchemaConflictError:
    if c.a == c.b:
        return SchemaConflictError(
            f"normalize {name!r}: column {c.column!r} holds a value that cannot be stored ({c.a[0]}) at "
            f"{_where(fmt, refs, c.a)}: {c.detail}")
    return SchemaConflictError(
        f"normalize {name!r}: column {c.column!r} has incompatible types: {c.a[0]} in {_where(fmt, refs, c.a)} "
        f"and {c.b[0]} in {_where(fmt, refs, c.b)}; fix the data, or keep only the text with bare: true")


def _local_abspath(path: str) -> str:
    """Local paths absolute (listings return absolute names); URLs unchanged."""
    if not is_local(path):
        return path
    return os.path.abspath(path[len("file://"):] if path.startswith("file://") else path)


def _clear_outputs(out_dir: str) -> None:
    """Remove what an earlier attempt left under outputs/ and units/ (the step owns out_dir)."""
    for d in (DocumentsDir(out_dir).outputs, join(out_dir, DocumentsDir.UNITS)):
        if exists(d):
            for name in list_names(d):
                remove(join(d, name))


def _validate(spec: SourceSpec) -> None:
    name, fmt = spec.name, spec.format
    if fmt not in FORMATS:
        raise ValueError(f"normalize {name!r}: unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if spec.dedup not in ("exact", "none"):
        raise ValueError(f"normalize {name!r}: dedup must be 'exact' or 'none', got {spec.dedup!r}")
    if fmt in ("text", "html", "warc") and spec.text_field != "text":
        raise ValueError(f"normalize {name!r}: format {fmt} extracts the text itself; text_field must be "
                         f"'text' (got {spec.text_field!r})")


def _layout(plan: ReadPlan, todo: list[tuple[int, str | None]]
            ) -> tuple[list[tuple[int, int]], list[str], list[pa.Schema | None]]:
    """The shards of the units ``todo``: each unit's (first shard, part count), every shard's part name
    and fixed schema."""
    splits, names, fixed = [], [], []
    for i, _ in todo:
        unit = plan.units[i]
        splits.append((len(names), unit.parts))
        names.extend(unit.names)
        fixed.extend([plan.fixed[i]] * unit.parts)
    return splits, names, fixed


def _run_units(spec: SourceSpec, cfg: NormalizeConfig, plan: ReadPlan, todo: list[tuple[int, str | None]],
               out_dir: str, engine: ExecConfig | None, direct: bool) -> list[dict]:
    """Read and write the parts of the units ``todo``: by the tasks that read them (``direct``,
    `read.read_write_stage`) or through the shuffle (`read.read_stage`); summaries in part order."""
    if not todo:
        return []
    splits, names, fixed = _layout(plan, todo)
    tasks = read_tasks([(u, plan.units[i]) for u, (i, _) in enumerate(todo)], cfg, engine, whole_units=direct)
    ds = Dataset.from_shards(tasks, labels=[task_label(t) for t in tasks])
    if direct:
        ds = ds.map_shard(partial(read_write_stage, spec=spec, cfg=cfg, columns=plan.columns, splits=splits,
                                  names=names, fixed=fixed, out_dir=out_dir))
    else:
        ds = (ds.map_shard(partial(read_stage, spec=spec, cfg=cfg, columns=plan.columns, splits=splits))
              .group_by(item_unit, stream_unit, sort_by=item_sort, num_shards=len(names))
              .map_shard(partial(write_unit, out_dir=out_dir, names=names, fixed=fixed, dedup=spec.dedup)))
    return sorted(ds.run(engine).items, key=lambda s: s["index"])


def _compute(spec: SourceSpec, cfg: NormalizeConfig, plan: ReadPlan, todo: list[tuple[int, str | None]],
             out_dir: str, exec_config: ExecConfig | None) -> list[dict]:
    """Read the units ``todo`` (unit number, key) on the engine; their parts' summaries, in ``todo``
    order, then part order. Units small enough to sort in memory, when there are enough of them to keep
    every worker busy (`plan.direct_units`), are written by the tasks that read them; the others go
    through the shuffle. Either way the parts are the same bytes."""
    if not todo:
        return []
    units = [plan.units[i] for i, _ in todo]
    # a small job (an edit's unit) runs in this process: the pool would cost more to start than the job
    engine = small_job_config(exec_config, sum(r.size for u in units for r in u.refs), cfg.inline_bytes)
    direct = set(direct_units(units, cfg, engine))
    groups = [[t for n, t in enumerate(todo) if (n in direct) == d] for d in (True, False)]
    got = {(True, n): s for n, s in enumerate(_run_units(spec, cfg, plan, groups[0], out_dir, engine, True))}
    got.update({(False, n): s for n, s in enumerate(_run_units(spec, cfg, plan, groups[1], out_dir, engine, False))})
    # back to ``todo`` order: each unit's parts from its group, in part order
    seen = {True: 0, False: 0}
    out = []
    for n, unit in enumerate(units):
        d = n in direct
        out.extend(got[(d, seen[d] + j)] for j in range(unit.parts))
        seen[d] += unit.parts
    return out


def _schemas(out_dir: str, parts: list[Part]) -> None:
    """Each part's main and dups schemas as written (their footers: one source of truth for parts
    computed now and parts taken), read as `fsio.map_reads` reads (concurrently only on an object store)."""
    def read(rel: str) -> pa.Schema:
        with open_read(join(out_dir, rel)) as f:
            return pq.ParquetFile(f).schema_arrow

    def both(p: Part) -> tuple[pa.Schema, pa.Schema]:
        return read(p.main), read(p.dups)

    found = fsio.map_reads(both, parts, is_local(out_dir), 8)
    for p, pair in zip(parts, found):
        p.schemas = pair


def _unified_schema(spec: SourceSpec, refs: list[FileRef], parts: list[Part], examples: Examples) -> pa.Schema:
    """One schema for every part: the union of theirs in unit order, drift unified (conflicts raised
    naming both places)."""
    for p in parts:
        if p.taken:  # its records were not read: its unit stands for them in a conflict
            ex = {f.name: [(str(f.type), p.unit.refs[0].index, _IN_UNIT)] for s in p.schemas for f in s}
            merge_examples(examples, ex)
    schema: pa.Schema | None = None
    for p in parts:
        for s in p.schemas:
            try:
                schema = merge_schemas(schema, s, examples)
            except ConflictFound as e:
                raise _conflict_error(spec.name, spec.format, refs, e.conflict) from None
    return schema or CORE_SCHEMA


def _finish(out_dir: str, parts: list[Part], lost: list[tuple[str, ...]], schema: pa.Schema,
            reuse_from: UnitReuse | None, cfg: NormalizeConfig, exec_config: ExecConfig | None
            ) -> dict[str, reuse.Unit]:
    """Every part to its final form (`finish.py`): as read when nothing changes it, else taken finished
    from the earlier build (its final key) or written; returns this build's reuse records."""
    records: dict[str, reuse.Unit] = {}
    jobs: list[FinishJob] = []
    earlier = reuse_from.earlier if reuse_from is not None else None
    by_key: dict[str, list[Part]] = {}
    for p in parts:
        final = not lost[p.index] and all(s == schema for s in p.schemas)
        move(out_dir, p, final)
        if p.key is not None:
            by_key.setdefault(p.key, []).append(p)
        if final:
            continue
        name = p.name
        done = (DocumentsDir.rel_file("main", name), DocumentsDir.rel_file("dups", name))
        fkey = final_key(p.key, name, lost[p.index], schema) if p.key is not None else None
        if fkey is not None:
            records[fkey] = reuse.Unit(done, {})
            if reuse.take(earlier, fkey, out_dir) is not None:
                continue
        jobs.append(FinishJob(join(out_dir, p.main), join(out_dir, p.dups), join(out_dir, done[0]),
                              join(out_dir, done[1]), lost[p.index], schema))
    records.update({key: unit_record(ps) for key, ps in by_key.items()})
    if jobs:
        engine = small_job_config(exec_config, sum(fsio.size(j.raw_main) + fsio.size(j.raw_dups) for j in jobs),
                                  cfg.inline_bytes)
        Dataset.from_items(jobs, num_shards=len(jobs)).map(write_final).collect(engine)
    for p in parts:
        if p.key is None and p.main != DocumentsDir.rel_file("main", p.name):
            remove(join(out_dir, p.main))  # kept only for reuse, and this unit has no key
            remove(join(out_dir, p.dups))
    return records


def _result(spec: SourceSpec, refs: list[FileRef], hidden: int, parts: list[Part], schema: pa.Schema,
            raw_counters: dict[str, int]) -> tuple[NormalizeResult, dict[str, int]]:
    """The step's result from the units' summed counts, and the fields seen in records without the text field."""
    rejects_by_reason = {k[len(REJECT_PREFIX):]: v for k, v in sorted(raw_counters.items())
                         if k.startswith(REJECT_PREFIX)}
    fields_seen = {k[len(FIELD_PREFIX):]: v for k, v in raw_counters.items() if k.startswith(FIELD_PREFIX)}
    per_file = {k[len(FILE_PREFIX):]: int(v) for k, v in sorted(raw_counters.items()) if k.startswith(FILE_PREFIX)}
    counts = {k: int(raw_counters.get(k, 0)) for k in COUNTER_NAMES}
    counts["rejects"] = sum(rejects_by_reason.values())
    counts.update({f"rejects/{reason}": n for reason, n in rejects_by_reason.items()})  # shown by reason
    counts["hidden_files_skipped"] = hidden
    taken = sum(p.taken for p in parts)
    counts.update({"files/reused": taken, "files/computed": len(parts) - taken})
    names = sorted(p.name for p in parts)
    result = NormalizeResult(
        source=spec.name, fmt=spec.format, num_shards=len(parts),
        main_files=[DocumentsDir.rel_file("main", n) for n in names],
        dups_files=[DocumentsDir.rel_file("dups", n) for n in names],
        rejects_files=[DocumentsDir.rel_part("rejects", 0, 1)],
        counters=counts, rejects_by_reason=rejects_by_reason, columns=schema_to_dict(schema),
        num_files=len(refs), input_bytes=sum(r.size for r in refs),
        input_documents=_input_documents(refs, per_file, counts["records_in"]),
    )
    return result, fields_seen


def _input_documents(refs: list[FileRef], per_file: dict[str, int], records_in: int) -> dict[str, int]:
    """Records read per input file (a file absent from the units' counts read none), or {} when some
    unit taken from an earlier build did not count per file (its records are then not all attributed)."""
    if sum(per_file.values()) != records_in:
        return {}
    return {ref.rel: per_file.get(ref.rel, 0) for ref in refs}


def _parts(spec: SourceSpec, cfg: NormalizeConfig, refs: list[FileRef], plan: ReadPlan, keys: list[str | None],
           out_dir: str, reuse_from: UnitReuse | None, planned: Sequence[PlannedFile] | None,
           exec_config: ExecConfig | None) -> tuple[list[Part], Examples]:
    """Every unit's parts as read, in unit then part order: taken from the earlier build when the
    unit's key is there, else computed (only those units' files are read, and only those parquet files
    hashed against the plan)."""
    got: dict[int, list[Part]] = {}
    first = [0]
    for unit in plan.units:
        first.append(first[-1] + unit.parts)
    for i, (unit, key) in enumerate(zip(plan.units, keys)):
        ps = taken_parts(first[i], unit, key, reuse_from, out_dir)
        if ps is not None:
            got[i] = ps
    todo = [(i, k) for i, k in enumerate(keys) if i not in got]
    if planned is not None and spec.format == "parquet":
        check_parquet_hashes(spec.name, [r for i, _ in todo for r in plan.units[i].refs], planned)
    summaries = _compute(spec, cfg, plan, todo, out_dir, exec_config)
    examples: Examples = {}
    for s in summaries:
        merge_examples(examples, s["examples"])
    for s in summaries:
        if s["conflict"] is not None:
            raise _conflict_error(spec.name, spec.format, refs, s["conflict"])
    summary = iter(summaries)
    for i, key in todo:
        unit = plan.units[i]
        got[i] = [computed_part(first[i] + j, unit, j, key, next(summary)) for j in range(unit.parts)]
    return [p for i in range(len(plan.units)) for p in got[i]], examples


def normalize_source(
    spec: SourceSpec,
    *,
    files: Sequence[Any],
    out_dir: str,
    cfg: NormalizeConfig = NormalizeConfig(),
    exec_config: ExecConfig | None = None,
    root: str | None = None,
    planned: Sequence[PlannedFile] | None = None,
    reuse_from: UnitReuse | None = None,
) -> NormalizeResult:
    """Normalize one source (the manifest's `SourceSpec`: name, format, text_field, id_field, bare,
    dedup; its `uri` is not read here). `files` come from `datakit.shuffle.list_files` (FileInfo: path,
    size); `root` (default: their common directory) is what relative names in outputs are relative to.

    Raises NormalizeError (with `.result`) when every record was dropped or rejects exceed
    `cfg.reject_fraction` (any reject with `cfg.strict`), and SchemaConflictError on a type conflict.
    `planned` (path, size, sha256 of each file, as the run planned them) makes those a contract: a
    planned file that is missing, changed, or reads to other bytes fails the step, naming the file.
    ``reuse_from`` (with ``planned``: the sha256s key the units) takes every unit whose files and
    settings are unchanged from the earlier build instead of reading it (`incremental.py`).
    """
    _validate(spec)
    name = spec.name
    out_dir = _local_abspath(out_dir)
    refs, hidden = file_refs(files, _local_abspath(root) if root else None)
    if not refs:
        raise NormalizeError(f"normalize {name!r}: no input files (of {len(files)} given, {hidden} were "
                             "hidden: a name or folder starting with '.' or '_')")
    digests: dict[int, str | None] = {}
    if planned is not None:
        refs = check_planned(name, spec.format, refs, planned)
        digests = planned_digests(refs, planned)
    plan = read_plan(spec, refs, cfg)
    _clear_outputs(out_dir)
    keys = [unit_key(reuse_from.settings, u, digests) if reuse_from is not None else None for u in plan.units]
    parts, examples = _parts(spec, cfg, refs, plan, keys, out_dir, reuse_from, planned, exec_config)
    _schemas(out_dir, parts)
    schema = _unified_schema(spec, refs, parts, examples)
    lost = (cross_unit_losses([join(out_dir, p.main) for p in parts]) if spec.dedup == "exact"
            else [()] * len(parts))
    records = _finish(out_dir, parts, lost, schema, reuse_from, cfg, exec_config)
    docs = DocumentsDir(out_dir)
    consolidate_rejects([join(out_dir, p.rejects) for p in parts if p.rejects], docs.part("rejects", 0, 1))
    if reuse_from is not None:
        reuse.write(out_dir, records)
    totals: Counter = Counter()
    for p in parts:
        totals.update(p.stats)
    moved = sum(len(x) for x in lost)
    totals.update({"records_out": -moved, "dups": moved})
    result, fields_seen = _result(spec, refs, hidden, parts, schema, dict(totals))
    if not result.check_counts():  # a bug, never bad data: say so loudly
        raise NormalizeError(f"normalize {name!r}: counts do not add up: {result.counters}", result)
    if result.rejects_by_reason.get(INPUT_CHANGED) or result.rejects_by_reason.get(INPUT_MISSING):
        raise NormalizeError(planned_error(name, planned_failures(docs.part("rejects", 0, 1))), result)
    _check(result, fields_seen, spec.text_field, docs.part("rejects", 0, 1), cfg)
    return result


def _check(result: NormalizeResult, fields_seen: dict[str, int], text_field: str, rejects_path: str,
           cfg: NormalizeConfig) -> None:
    c = result.counters
    name = result.source
    if c["records_in"] == 0:
        what = "HTML response records" if result.fmt == "warc" else "records"
        raise NormalizeError(f"normalize {name!r}: no {what} found in {result.num_files} {result.fmt} "
                             "file(s); is the format right?", result)
    if c["records_out"] == 0 and c["rejects"] < c["records_in"]:
        msg = (f"normalize {name!r}: all {c['records_in']} records were dropped ({c['empty_missing_field']} "
               f"without a {text_field!r} field, {c['empty_null']} null, {c['empty_blank']} empty or "
               f"whitespace-only; {c['rejects']} rejected).")
        if fields_seen:
            top = sorted(fields_seen.items(), key=lambda kv: (-kv[1], kv[0]))[:20]
            msg += (f" Is text_field {text_field!r} right? Fields seen in records without it: "
                    + ", ".join(f"{k} ({v})" for k, v in top) + ".")
        elif c["empty_blank"] or c["empty_null"]:
            msg += f" The {text_field!r} field exists but is empty everywhere: is it the right field?"
        raise NormalizeError(msg, result)
    n_in, n_rej = c["records_in"], c["rejects"]
    too_many = n_rej > 0 if cfg.strict else (n_in > 0 and n_rej / n_in > cfg.reject_fraction)
    if too_many:
        reasons = ", ".join(f"{k}: {v}" for k, v in result.rejects_by_reason.items())
        limit = "strict mode allows none" if cfg.strict else f"reject_fraction is {cfg.reject_fraction:g}"
        raise NormalizeError(
            f"normalize {name!r}: {n_rej} of {n_in} records rejected ({n_rej / max(n_in, 1):.2%}; {limit}) "
            f"[{reasons}]. See {rejects_path} (file, line, offset, reason, excerpt per record).", result)


__all__ = ["normalize_source"]
