"""normalize_source: one source's files -> id-sorted, exactly deduplicated parquet shards.

Engine pipeline:

    from_shards(read units)                 files packed by bytes; big parquet files split by row groups
      .map_shard(read_stage)                lenient readers -> clean -> Items; rejects to a staging file
      .group_by(id, collect_group,          all copies of an id meet in one reducer, in (file, position)
                sort_by=(file, pos), NN)    order; output shards come out in ascending id order
      .map_shard(write_stage)               main + dups parquet per shard, one summary item each

then, in the driver: unify the shards' schemas (rewriting the few shards whose columns drifted),
consolidate rejects, check the counts, and fail loudly when too much was rejected or nothing survived.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from datakit.shuffle import Dataset, ExecConfig, current_shard
from datakit.core.documents import CORE_SCHEMA
from datakit.core.fsio import exists, is_dir, is_local, join, list_names, makedirs, open_read, remove
from datakit.core.listing import common_root, is_hidden
from datakit.core.layout import DocumentsDir, parse_work_part_name, work_part_name
from datakit.manifest import SourceSpec
from datakit.sources.readers import (
    FORMATS, INPUT_CHANGED, INPUT_MISSING, FileRef, Reject, input_verdict,
    planned_reject, read_file,
)

from .clean import FIELD_PREFIX, Item, clean_record, output_name
from .config import (
    COUNTER_NAMES, NormalizeConfig, NormalizeError, NormalizeResult, PlannedFile, SchemaConflictError,
)
from .planned import check_planned, planned_error, planned_failures
from .schema import (
    Conflict, ConflictFound, Examples, canonical_schema, merge_examples, merge_schemas,
    plain_type, schema_to_dict, unify_types,
)
from .write import (
    RejectSink, collect_group, consolidate_rejects, item_id, item_order, rewrite_with_schema, stats_to_counters,
    write_stage,
)

REJECT_PREFIX = "reject/"
_STRINGISH = (pa.types.is_string, pa.types.is_large_string, pa.types.is_null)


# ------------------------------------------------------------------------------------------------
# planning


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


def plan_parquet(refs: list[FileRef], text_field: str, id_field: str | None, bare: bool, target_bytes: int,
                 ) -> tuple[list[tuple[FileRef, int]], pa.Schema | None]:
    """Read every footer once (threads: many files on object storage): row-group ranges of about
    `target_bytes` each, and the source-wide schema of the kept columns (drift unified, conflicts
    raised with both file names)."""
    with ThreadPoolExecutor(max_workers=16) as pool:
        footers = list(pool.map(_footer, refs))
    units: list[tuple[FileRef, int]] = []
    types: dict[str, tuple[pa.DataType, FileRef]] = {}
    for ref, info, err in footers:
        if info is None:
            units.append((ref, ref.size))
            continue
        meta, schema = info
        # ranges of row groups of about target_bytes
        start, acc = 0, 0
        for i in range(meta.num_row_groups):
            b = _rg_bytes(meta, i)
            if acc and acc + b > target_bytes:
                units.append((FileRef(ref.index, ref.path, ref.rel, acc, (start, i)), acc))
                start, acc = i, 0
            acc += b
        units.append((FileRef(ref.index, ref.path, ref.rel, acc, (start, meta.num_row_groups)), acc))
        if bare:
            continue
        taken: set[str] = set()
        for f in schema:
            if f.name in (text_field, id_field):
                continue
            t = plain_type(f.type)
            if f.name == "url" and any(p(t) for p in _STRINGISH):
                continue
            name = output_name(f.name, taken) if f.name in ("id", "text", "source", "source_id", "url") else f.name
            taken.add(name)
            if name not in types:
                types[name] = (t, ref)
                continue
            old, where = types[name]
            try:
                types[name] = (unify_types(old, t), where if not pa.types.is_null(old) else ref)
            except (pa.ArrowTypeError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise SchemaConflictError(
                    f"parquet column {f.name!r} has incompatible types: {old} in {where.rel} and {t} in "
                    f"{ref.rel}; fix the files, or read only the text with bare: true"
                ) from None
    if bare:
        return units, canonical_schema([])
    return units, canonical_schema(pa.field(n, t) for n, (t, _) in types.items())


# Text bytes per stored byte, by suffix: compressed inputs hold several times their size in text. An
# estimate by name only (no read), so the shard count is known before any task runs and is the same
# on every machine and for every worker count.
EXPANSION = {".gz": 4, ".zst": 4, ".zstd": 4, ".bz2": 4, ".xz": 4, ".lz4": 3, ".parquet": 3}


def output_shards(refs: Sequence[FileRef], target_bytes: int) -> int:
    """How many output shards a source gets: one per `target_bytes` of estimated text.

    Every later stage (minhash, fuzzy, consolidate, tokenize) runs a task per shard, so a source of
    several hundred MB must not land in one shard that leaves all but one worker idle. The count
    depends only on the inputs' names and sizes, never on the worker count: outputs stay identical
    whatever the machine."""
    text = sum(r.size * EXPANSION.get(os.path.splitext(r.path)[1].lower(), 1) for r in refs)
    return max(1, math.ceil(text / target_bytes))


def pack_shards(units: list[tuple[FileRef, int]], target_bytes: int, max_files: int) -> list[list[FileRef]]:
    """Consecutive units into read tasks of about `target_bytes` (input order is preserved, so the
    rejects come out in file order whatever the packing)."""
    shards: list[list[FileRef]] = []
    cur: list[FileRef] = []
    acc = 0
    for ref, size in units:
        if cur and (acc + size > target_bytes or len(cur) >= max_files):
            shards.append(cur)
            cur, acc = [], 0
        cur.append(ref)
        acc += size
    if cur:
        shards.append(cur)
    return shards or [[]]


def _label(shard: list[FileRef]) -> str:
    if not shard:
        return "(no files)"
    if len(shard) == 1:
        r = shard[0]
        return r.rel + (f" row groups {r.row_groups[0]}..{r.row_groups[1] - 1}" if r.row_groups else "")
    return f"{shard[0].rel} .. {shard[-1].rel} ({len(shard)} files)"


# ------------------------------------------------------------------------------------------------
# read stage (runs in workers)


def read_stage(refs: Iterable[FileRef], *, spec: SourceSpec, cfg: NormalizeConfig,
               columns: tuple[str, ...] | None, staging_dir: str) -> Iterator[Item]:
    """map_shard: read + clean one read task's files; rejects go to this task's staging file."""
    shard = current_shard()
    stats: Counter = Counter()
    sink = RejectSink(f"{staging_dir}/{work_part_name(shard.index)}", spec.name)

    def reject(r: Reject) -> None:
        stats["records_in"] += 1
        stats[REJECT_PREFIX + r.reason] += 1
        sink.add(r)

    try:
        for ref in refs:
            planned = ref.sha256 is not None or ref.planned_size is not None
            try:
                for raw in read_file(ref, spec.format, cfg, stats, columns):
                    if type(raw) is Reject:
                        reject(raw)
                        continue
                    stats["records_in"] += 1
                    out = clean_record(raw, spec, cfg, stats)
                    if out is None:
                        continue
                    if type(out) is Reject:
                        stats[REJECT_PREFIX + out.reason] += 1
                        sink.add(out)
                        continue
                    yield out
            except FileNotFoundError:
                if not planned:
                    raise
                reject(planned_reject(ref, INPUT_MISSING, f"planned ({ref.planned_size} bytes) but gone when read"))
                continue
            verdict = input_verdict(ref) if planned else None
            if verdict:
                reject(planned_reject(ref, INPUT_CHANGED, verdict))
        sink.close()
    except BaseException:
        sink.abort()
        raise
    stats_to_counters(stats)


# ------------------------------------------------------------------------------------------------
# driver


def _where(fmt: str, refs: list[FileRef], ex: tuple[str, int, int]) -> str:
    _, fi, pos = ex
    if fi < 0 or fi >= len(refs):
        return "(unknown location)"
    rel = refs[fi].rel
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


def _clear_outputs(out_dir: str, keep: str) -> None:
    """Remove what an earlier attempt left under outputs/ (the step owns out_dir), except `keep`."""
    outputs = DocumentsDir(out_dir).outputs
    if not exists(outputs):
        return
    _clear_except(outputs, keep.rstrip("/"))


def _clear_except(path: str, keep: str) -> None:
    """Remove everything under ``path`` but ``keep`` (and the folders leading to it)."""
    for name in list_names(path):
        child = join(path, name)
        if child == keep:
            continue
        if keep.startswith(child + "/") and is_dir(child):
            _clear_except(child, keep)  # an ancestor of `keep`: descend
        else:
            remove(child)


def _list_staged(dir_path: str) -> list[str]:
    """The read tasks' staged reject files (``work_part_name``), in task order."""
    return [join(dir_path, n) for n in list_names(dir_path) if parse_work_part_name(n) is not None]


def _rewrite_job(job: tuple[str, pa.Schema]) -> str:
    return rewrite_with_schema(*job)


def _validate(spec: SourceSpec) -> None:
    name, fmt = spec.name, spec.format
    if fmt not in FORMATS:
        raise ValueError(f"normalize {name!r}: unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if spec.dedup not in ("exact", "none"):
        raise ValueError(f"normalize {name!r}: dedup must be 'exact' or 'none', got {spec.dedup!r}")
    if fmt in ("text", "html", "warc") and spec.text_field != "text":
        raise ValueError(f"normalize {name!r}: format {fmt} extracts the text itself; text_field must be "
                         f"'text' (got {spec.text_field!r})")


def _read_plan(spec: SourceSpec, refs: list[FileRef], cfg: NormalizeConfig
               ) -> tuple[list[tuple[FileRef, int]], pa.Schema | None, tuple[str, ...] | None]:
    """(read units with their sizes, the schema fixed in advance or None, the parquet projection)."""
    if spec.format == "parquet":
        units, fixed = plan_parquet(refs, spec.text_field, spec.id_field, spec.bare, cfg.input_shard_bytes)
        columns = tuple(c for c in (spec.text_field, spec.id_field, "url") if c) if spec.bare else None
        return units, fixed, columns
    units = [(r, r.size) for r in refs]
    if spec.format in ("html", "warc"):
        fixed = canonical_schema([] if spec.bare else [pa.field("title", pa.string())])
    elif spec.format == "text":
        fixed = CORE_SCHEMA
    else:
        fixed = None if not spec.bare else CORE_SCHEMA
    return units, fixed, None


def _read_tasks(units: list[tuple[FileRef, int]], cfg: NormalizeConfig,
                exec_config: ExecConfig | None) -> list[list[FileRef]]:
    """Read tasks no bigger than input_shard_bytes, and at least two per worker when the input allows, so
    a small corpus still uses every core. Outputs do not depend on the packing (rows are ordered by
    (file, position) in the shuffle), so this may follow the machine without breaking determinism."""
    workers = (exec_config.max_workers if exec_config and exec_config.max_workers else os.cpu_count()) or 1
    per_task = max(1, min(cfg.input_shard_bytes, math.ceil(sum(u[1] for u in units) / (2 * workers))))
    return pack_shards(units, per_task, cfg.max_files_per_input_shard)


def _unified_schema(spec: SourceSpec, refs: list[FileRef], summaries: list[dict], fixed: pa.Schema | None,
                    docs: DocumentsDir, nn: int, exec_config: ExecConfig | None) -> pa.Schema:
    """Type conflicts, then one schema for every main and dups shard (rewriting the shards that differ)."""
    examples: Examples = {}
    for s in summaries:
        merge_examples(examples, s["examples"])
    for s in summaries:
        if s["conflict"] is not None:
            raise _conflict_error(spec.name, spec.format, refs, s["conflict"])
    schema: pa.Schema | None = fixed
    for s in summaries:
        for key in ("main_schema", "dups_schema"):
            try:
                schema = merge_schemas(schema, s[key], examples)
            except ConflictFound as e:
                raise _conflict_error(spec.name, spec.format, refs, e.conflict) from None
    schema = schema or CORE_SCHEMA
    jobs = [(docs.part(kind, s["shard"], nn), schema) for s in summaries for kind in ("main", "dups")
            if s[f"{kind}_schema"] != schema]
    if jobs:
        Dataset.from_items(jobs, num_shards=len(jobs)).map(_rewrite_job).collect(exec_config)
    return schema


def _result(spec: SourceSpec, refs: list[FileRef], hidden: int, nn: int, schema: pa.Schema,
            raw_counters: dict[str, int]) -> tuple[NormalizeResult, dict[str, int]]:
    """The step's result from the run's counters, and the fields seen in records without the text field."""
    rejects_by_reason = {k[len(REJECT_PREFIX):]: v for k, v in sorted(raw_counters.items())
                         if k.startswith(REJECT_PREFIX)}
    fields_seen = {k[len(FIELD_PREFIX):]: v for k, v in raw_counters.items() if k.startswith(FIELD_PREFIX)}
    counts = {k: int(raw_counters.get(k, 0)) for k in COUNTER_NAMES}
    counts["rejects"] = sum(rejects_by_reason.values())
    counts.update({f"rejects/{reason}": n for reason, n in rejects_by_reason.items()})  # shown by reason
    counts["hidden_files_skipped"] = hidden
    result = NormalizeResult(
        source=spec.name, fmt=spec.format, num_shards=nn, main_files=DocumentsDir.rel_parts("main", nn),
        dups_files=DocumentsDir.rel_parts("dups", nn), rejects_files=[DocumentsDir.rel_part("rejects", 0, 1)],
        counters=counts, rejects_by_reason=rejects_by_reason, columns=schema_to_dict(schema),
        num_files=len(refs), input_bytes=sum(r.size for r in refs),
    )
    return result, fields_seen


def normalize_source(
    spec: SourceSpec,
    *,
    files: Sequence[Any],
    out_dir: str,
    cfg: NormalizeConfig = NormalizeConfig(),
    exec_config: ExecConfig | None = None,
    root: str | None = None,
    planned: Sequence[PlannedFile] | None = None,
) -> NormalizeResult:
    """Normalize one source (the manifest's `SourceSpec`: name, format, text_field, id_field, bare,
    dedup; its `uri` is not read here). `files` come from `datakit.shuffle.list_files` (FileInfo: path,
    size); `root` (default: their common directory) is what relative names in outputs are relative to.

    Raises NormalizeError (with `.result`) when every record was dropped or rejects exceed
    `cfg.reject_fraction` (any reject with `cfg.strict`), and SchemaConflictError on a type conflict.
    `planned` (path, size, sha256 of each file, as the run planned them) makes those a contract: a
    planned file that is missing, changed, or reads to other bytes fails the step, naming the file.
    """
    _validate(spec)
    name, fmt = spec.name, spec.format
    out_dir = _local_abspath(out_dir)
    refs, hidden = file_refs(files, _local_abspath(root) if root else None)
    if not refs:
        raise NormalizeError(f"normalize {name!r}: no input files (of {len(files)} given, {hidden} were "
                             "hidden: a name or folder starting with '.' or '_')")
    if planned is not None:
        refs = check_planned(name, fmt, refs, planned)
    nn = output_shards(refs, cfg.target_shard_bytes)
    units, fixed, columns = _read_plan(spec, refs, cfg)
    shards = _read_tasks(units, cfg, exec_config)
    # Read tasks write their rejects beside the outputs, under a name tied to exactly this read plan: an
    # engine resuming from a checkpoint (ExecConfig.work_dir) skips those tasks and must find their
    # files, while files of any other plan are stale and removed with the rest of the old outputs.
    token = hashlib.sha256(repr((shards, spec, cfg, columns)).encode()).hexdigest()[:16]
    docs = DocumentsDir(out_dir)
    staging = docs.rejects_staging(token)
    _clear_outputs(out_dir, keep=staging)
    makedirs(staging)
    ds = (
        Dataset.from_shards(shards, labels=[_label(s) for s in shards])
        .map_shard(partial(read_stage, spec=spec, cfg=cfg, columns=columns, staging_dir=staging))
        .group_by(item_id, collect_group, sort_by=item_order, num_shards=nn)
        .map_shard(partial(write_stage, out_dir=out_dir, dedup=spec.dedup, fixed=fixed))
    )
    run = ds.run(exec_config)
    summaries = sorted(run.items, key=lambda s: s["shard"])
    schema = _unified_schema(spec, refs, summaries, fixed, docs, nn, exec_config)
    consolidate_rejects(_list_staged(staging), docs.part("rejects", 0, 1))
    remove(docs.rejects_staging())
    result, fields_seen = _result(spec, refs, hidden, nn, schema, run.counters)
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


__all__ = ["normalize_source", "file_refs", "pack_shards", "plan_parquet", "read_stage"]
