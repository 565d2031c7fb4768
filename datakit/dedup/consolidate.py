"""Consolidate: apply the attribute sets to a normalized source and write the final shards.

Per normalized file, a streaming merge with the same-named file of every attribute set: the source is
read in record batches (checked sorted by id as it goes), attribute files hold only marked ids (small),
and a row is dropped when
  exact          it is marked at all (another source holds the surviving copy),
  fuzzy          it is a cluster member with is_canonical == False,
  decontaminate  it is marked at all.
The first matching reason, in that order, is the one counted. Output keeps the normalize contract:
`out_dir/outputs/main/<same file names>` (same schema, id order), and `outputs/removed/` lists what was
dropped and why (id, reason, detail) so the counts can be audited: docs_in == docs_out + removed.

Attribute sets are checked before any work: made for this source, for exactly its files, one set per
kind. A missing attribute file is an error; an attribute id absent from the source is an error (the
attributes belong to other data); a missing row means keep.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datakit.shuffle import ExecConfig, counters
from datakit.core.fsio import commit, discard, exists, makedirs, open_atomic
from datakit.core.layout import AttributesDir, DocumentsDir, join

from .hashing import ids_to_u64
from .layout import (
    AttributeMismatch,
    DedupInputError,
    basename,
    check_files_match,
    iter_batches,
    main_files,
    open_parquet,
    per_file_tasks,
    read_columns,
    read_meta,
    resolve_attr_dir,
    write_parquet_atomic,
)

REASONS = ("exact", "fuzzy", "decontaminate")
REMOVED_SCHEMA = pa.schema([("id", pa.string()), ("reason", pa.string()), ("detail", pa.string())])
_DETAIL = {"exact": "duplicate_of", "fuzzy": "cluster_id", "decontaminate": "benchmark"}


@dataclass
class ConsolidateResult:
    source: str
    main: str = DocumentsDir.MAIN
    removed: str = DocumentsDir.REMOVED
    num_shards: int = 0
    counters: dict[str, int] = field(default_factory=dict)
    attributes: dict[str, dict] = field(default_factory=dict)  # kind -> params of the set applied

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ConsolidateResult":
        return cls(**d)


def _marks(kind: str, path: str) -> tuple[pa.Array, pa.Array]:
    """(ids to drop, detail per id) from one attribute file, checked sorted and unique."""
    if not exists(path):
        raise DedupInputError(f"missing attribute file {path} (a missing file is an error, not 'keep')")
    if kind == "fuzzy":
        t = read_columns(path, ["id", "is_canonical", "cluster_id"])
        t = t.filter(pc.invert(t.column("is_canonical")))
        detail = t.column("cluster_id")
    elif kind == "exact":
        t = read_columns(path, ["id", "duplicate_of"])
        detail = t.column("duplicate_of")
    else:
        t = read_columns(path, ["id", "benchmark", "item"])
        detail = pc.binary_join_element_wise(t.column("benchmark"), t.column("item"), ":")
    ids = t.column("id").combine_chunks()
    hi, lo = ids_to_u64(ids, path)
    if len(hi) > 1:
        bad = (hi[1:] < hi[:-1]) | ((hi[1:] == hi[:-1]) & (lo[1:] <= lo[:-1]))
        if bad.any():
            i = int(np.flatnonzero(bad)[0]) + 1
            raise DedupInputError(f"{path}: row {i}: ids are not sorted and unique ({ids[i].as_py()})")
    return ids, pa.chunked_array([detail]).combine_chunks().cast(pa.string())


def _consolidate_file(job: tuple) -> dict:
    src, attr_files, dst_main, dst_removed = job
    marks = [(kind, *_marks(kind, path)) for kind, path in attr_files]
    found = [np.zeros(len(ids), dtype=bool) for _, ids, _ in marks]
    removed_ids, removed_reason, removed_detail = [], [], []
    stats = {"docs_in": 0, "docs_out": 0, **{f"removed_{k}": 0 for k in REASONS}}
    last = None
    f_out, tmp = open_atomic(dst_main)
    writer = None
    try:
        with open_parquet(src) as pf:
            schema = pf.schema_arrow
        if "id" not in schema.names:
            raise DedupInputError(f"{src}: missing column id")
        writer = pq.ParquetWriter(f_out, schema, compression="zstd")
        row0 = 0
        for rb in iter_batches(src, None, 8192):
            ids = rb.column(schema.get_field_index("id"))
            hi, lo = ids_to_u64(ids, src)
            _check_sorted(hi, lo, last, src, row0, ids)
            if len(hi):
                last = (hi[-1], lo[-1])
            drop = np.zeros(len(rb), dtype=bool)
            for (kind, mids, detail), seen in zip(marks, found):
                if not len(mids):
                    continue
                hit = np.asarray(pc.is_in(ids, value_set=mids), dtype=bool)
                if not hit.any():
                    continue
                where = np.asarray(pc.index_in(ids.filter(pa.array(hit)), value_set=mids))
                seen[where] = True
                new = hit & ~drop
                if new.any():
                    sel = pa.array(new)
                    removed_ids.append(ids.filter(sel))
                    removed_reason.append(pa.array([kind] * int(new.sum()), pa.string()))
                    removed_detail.append(detail.take(pc.index_in(ids.filter(sel), value_set=mids)))
                    stats[f"removed_{kind}"] += int(new.sum())
                drop |= hit
            kept = rb.filter(pa.array(~drop))
            writer.write_batch(kept)
            stats["docs_in"] += len(rb)
            stats["docs_out"] += len(kept)
            row0 += len(rb)
        writer.close()
        f_out.close()
    except BaseException:
        f_out.close()
        discard(tmp)
        raise
    for (_, mids, _), seen, (_, path) in zip(marks, found, attr_files):
        if not seen.all():
            missing = mids[int(np.flatnonzero(~seen)[0])].as_py()
            discard(tmp)
            raise AttributeMismatch(
                f"{path}: {int((~seen).sum())} marked id(s) are not in {src} (first: {missing}); these "
                "attributes were made for different data"
            )
    commit(tmp, dst_main)
    removed = pa.table({
        "id": pa.concat_arrays(removed_ids) if removed_ids else pa.array([], pa.string()),
        "reason": pa.concat_arrays(removed_reason) if removed_reason else pa.array([], pa.string()),
        "detail": pa.concat_arrays(removed_detail) if removed_detail else pa.array([], pa.string()),
    }, schema=REMOVED_SCHEMA)
    order = pc.sort_indices(removed, [("id", "ascending")])
    write_parquet_atomic(removed.take(order), dst_removed)
    for k, v in stats.items():
        counters.increment(k, v)
    if stats["docs_in"] != stats["docs_out"] + sum(stats[f"removed_{k}"] for k in REASONS):
        raise RuntimeError(f"{src}: counts do not add up {stats} (internal error)")
    return {"file": basename(src), **stats}


def _check_sorted(hi, lo, last, src: str, row0: int, ids) -> None:
    if len(hi) == 0:
        return
    if last is not None and (hi[0] < last[0] or (hi[0] == last[0] and lo[0] <= last[1])):
        raise DedupInputError(f"{src}: row {row0}: ids are not sorted and unique (normalize contract)")
    if len(hi) > 1:
        bad = (hi[1:] < hi[:-1]) | ((hi[1:] == hi[:-1]) & (lo[1:] <= lo[:-1]))
        if bad.any():
            i = int(np.flatnonzero(bad)[0]) + 1
            raise DedupInputError(
                f"{src}: row {row0 + i}: ids are not sorted and unique ({ids[i].as_py()}); normalized files "
                "must be sorted by id"
            )


def consolidate(
    name: str,
    normalized_dir: str,
    attribute_dirs: Sequence[str],
    out_dir: str,
    exec_config: ExecConfig | None = None,
) -> ConsolidateResult:
    """Drop marked documents of one source; write `out_dir/outputs/main/` with the same file names.

    attribute_dirs: attribute sets for this source (exact, fuzzy and/or decontaminate), each given as
    the attribute dir or the step dir holding attributes/<name>/.
    """
    files = main_files(normalized_dir)
    file_names = [basename(f.path) for f in files]
    sets: dict[str, tuple[str, dict]] = {}
    for given in attribute_dirs:
        d = resolve_attr_dir(given, name)
        meta = read_meta(d)
        kind = meta.get("kind")
        if kind not in REASONS:
            raise DedupInputError(f"{d}: attribute kind {kind!r} cannot be consolidated (expected {REASONS})")
        if meta.get("source") != name:
            raise AttributeMismatch(f"{d}: attributes are for source {meta.get('source')!r}, not {name!r}")
        if kind in sets:
            raise AttributeMismatch(
                f"two {kind} attribute sets for source {name}: {sets[kind][0]} and {d}; give one of each kind"
            )
        check_files_match(meta, file_names, d)
        sets[kind] = (d, meta)
    docs = DocumentsDir(out_dir)
    makedirs(docs.main)
    jobs = []
    for f, fn in zip(files, file_names):
        attrs = [(kind, AttributesDir(sets[kind][0]).file(fn)) for kind in REASONS if kind in sets]
        jobs.append((f.path, attrs, join(docs.main, fn), join(docs.removed, fn)))
    run = per_file_tasks(jobs, [f.path for f in files]).map(_consolidate_file).run(exec_config)
    keys = ["docs_in", "docs_out", *(f"removed_{k}" for k in REASONS)]
    c = {k: int(run.counters.get(k, 0)) for k in keys}
    return ConsolidateResult(source=name, num_shards=len(files), counters=c,
                             attributes={k: v[1].get("params") for k, v in sets.items()})
