"""Consolidate: apply the attribute sets to a normalized source and write the final shards.

Per normalized file, a streaming merge with the same-named file of every attribute set: the source is
read in record batches (checked sorted by id as it goes), attribute files hold only marked ids (small),
and a row is dropped when
  exact          it is marked at all (another source holds the surviving copy),
  fuzzy          it is a cluster member with is_canonical == False,
  decontaminate  its action is `remove` (older attribute sets without an action column: marked at all).
The first matching reason, in that order, is the one counted. Output keeps the normalize contract:
`out_dir/outputs/main/<same file names>` (same schema, id order), and `outputs/removed/` lists what was
dropped and why (id, reason, detail; for an exact duplicate the source of the kept copy, for a near
duplicate source:id of its parent, the earlier near-duplicate it goes for (forest.py), for
contamination the benchmark:item, matched fraction and hits the decontaminate step wrote) so the
counts can be audited: docs_in == docs_out + removed.

Span cutting happens here, where marks are applied: a document marked `cut` (and not dropped by an
earlier reason) loses the character spans the decontaminate step recorded and gets the id of its new
text (ids are content hashes), checked against the new id that step computed. Its new id no longer
fits its place in the file, so the file's cut documents are read first (only they), and merged back
into the id-sorted stream batch by batch: every output file stays sorted by id. Documents marked
`annotate` are kept untouched and counted.

Attribute sets are checked before any work: made for this source, for exactly its files, one set per
kind. A missing attribute file is an error; an attribute id absent from the source is an error (the
attributes belong to other data); a missing row means keep.
"""

from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import xxhash

from datakit.shuffle import ExecConfig, counters, small_job_config_for_files
from datakit.core import arrow_numpy as an
from datakit.core.documents import content_id, parquet_options
from datakit.core.fsio import commit, discard, exists, makedirs, open_atomic
from datakit.core.layout import AttributesDir, DocumentsDir, join
from datakit.steps import reuse

from .hashing import ids_to_u64
from . import keyed
from .keyed import Reuse
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


def cut_text(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """`text` without the given character spans (sorted, non-overlapping)."""
    out, at = [], 0
    for start, end in spans:
        out.append(text[at:start])
        at = max(at, end)
    out.append(text[at:])
    return "".join(out)


@dataclass
class _Marks:
    """One attribute file's marks: every marked id (all must exist in the source), its detail, whether
    it drops the row, and for decontamination the cuts (id -> (spans, new id)) and annotations."""

    kind: str
    ids: pa.Array
    detail: pa.Array
    drop: np.ndarray
    cuts: dict[str, tuple[list[tuple[int, int]], str]] = field(default_factory=dict)
    annotated: int = 0


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


def _marks(kind: str, path: str) -> _Marks:
    """The marks of one attribute file, checked sorted and unique."""
    if not exists(path):
        raise DedupInputError(f"missing attribute file {path} (a missing file is an error, not 'keep')")
    cuts, annotated = {}, 0
    if kind == "fuzzy":
        t = read_columns(path, ["id", "is_canonical", "parent_source", "parent_id"])
        t = t.filter(pc.invert(t.column("is_canonical")))
        # joined in Python (a file's marks are few): a compute call with a string scalar imports pandas
        detail = an.strings([f"{s}:{p}" for s, p in zip(t.column("parent_source").to_pylist(),
                                                         t.column("parent_id").to_pylist())])
        drop = np.ones(t.num_rows, dtype=bool)
    elif kind == "exact":
        t = read_columns(path, ["id", "duplicate_of"])
        detail = t.column("duplicate_of")
        drop = np.ones(t.num_rows, dtype=bool)
    else:
        t, detail, drop, cuts, annotated = _decontaminate_marks(path)
    ids = an.combined(t.column("id"))
    hi, lo = ids_to_u64(ids, path)
    if len(hi) > 1:
        bad = (hi[1:] < hi[:-1]) | ((hi[1:] == hi[:-1]) & (lo[1:] <= lo[:-1]))
        if bad.any():
            i = int(np.flatnonzero(bad)[0]) + 1
            raise DedupInputError(f"{path}: row {i}: ids are not sorted and unique ({ids[i].as_py()})")
    return _Marks(kind, ids, an.combined(detail).cast(pa.string()), drop, cuts, annotated)


def _decontaminate_marks(path: str) -> tuple[pa.Table, Any, np.ndarray, dict, int]:
    """(table, detail, drop mask, cuts, annotated) of a decontaminate attribute file, either format."""
    with open_parquet(path) as pf:
        names = pf.schema_arrow.names
    if "action" not in names:  # format 1: every mark removes the document
        t = read_columns(path, ["id", "benchmark", "item"])
        detail = pc.binary_join_element_wise(t.column("benchmark"), t.column("item"), ":")
        return t, detail, np.ones(t.num_rows, dtype=bool), {}, 0
    t = read_columns(path, ["id", "action", "detail", "spans", "new_id"])
    action = np.asarray(t.column("action").to_pylist(), dtype=object)
    cuts = {}
    for i in np.flatnonzero(action == "cut").tolist():
        spans = [(s["start"], s["end"]) for s in t.column("spans")[i].as_py()]
        cuts[t.column("id")[i].as_py()] = (spans, t.column("new_id")[i].as_py())
    return t, t.column("detail"), action == "remove", cuts, int((action == "annotate").sum())


def _consolidate_file(job: tuple, marks: list[_Marks] | None = None) -> dict:
    """One file consolidated (``marks``: its attribute files already read, else read here)."""
    src, attr_files, dst_main, dst_removed = job
    marks = [_marks(kind, path) for kind, path in attr_files] if marks is None else marks
    found = [np.zeros(len(m.ids), dtype=bool) for m in marks]
    removed: list[tuple[pa.Array, pa.Array, pa.Array]] = []
    stats = {"docs_in": 0, "docs_out": 0, **{f"removed_{k}": 0 for k in REASONS},
             "cut_decontaminate": 0, "annotated_decontaminate": sum(m.annotated for m in marks)}
    with open_parquet(src) as pf:
        schema = pf.schema_arrow
    if "id" not in schema.names:
        raise DedupInputError(f"{src}: missing column id")
    cut_ids = _effective_cuts(marks)
    pending = _cut_rows(src, schema, marks, cut_ids)
    stats["cut_decontaminate"] = pending.num_rows
    f_out, tmp = open_atomic(dst_main)
    writer = None
    try:
        writer = pq.ParquetWriter(f_out, schema, **parquet_options(schema))
        last, row0, at = None, 0, 0
        pending_ids = pending.column("id").to_pylist()
        for rb in iter_batches(src, None, 8192):
            ids = rb.column(schema.get_field_index("id"))
            hi, lo = ids_to_u64(ids, src)
            _check_sorted(hi, lo, last, src, row0, ids)
            if len(hi):
                last = (hi[-1], lo[-1])
            drop = _apply_marks(ids, marks, found, removed, stats)
            if cut_ids is not None:
                drop |= an.bools(pc.is_in(ids, value_set=cut_ids)) & ~drop
            kept = rb.filter(an.from_bools(~drop))
            if len(pending_ids):
                upto = bisect.bisect_right(pending_ids, ids[-1].as_py()) if len(ids) else at
                _write_merged(writer, kept, pending.slice(at, upto - at), src)
                at = upto
            else:
                writer.write_batch(kept)
            stats["docs_in"] += len(rb)
            stats["docs_out"] += len(kept)
            row0 += len(rb)
        if at < pending.num_rows:
            writer.write_table(pending.slice(at))
        stats["docs_out"] += pending.num_rows
        writer.close()
        f_out.close()
    except BaseException:
        _abandon(writer)
        f_out.close()
        discard(tmp)
        raise
    _check_all_found(marks, found, attr_files, src, tmp)
    commit(tmp, dst_main)
    _write_removed(removed, dst_removed)
    for k, v in stats.items():
        counters.increment(k, v)
    if stats["docs_in"] != stats["docs_out"] + sum(stats[f"removed_{k}"] for k in REASONS):
        raise RuntimeError(f"{src}: counts do not add up {stats} (internal error)")
    return {"file": basename(src), **stats}


def _abandon(writer: pq.ParquetWriter | None) -> None:
    """Close a writer whose file is being thrown away, so that it does not close itself later on a
    closed file (noise in the driver, where a small job runs inline)."""
    if writer is not None:
        try:
            writer.close()
        except Exception:  # the file is discarded: nothing written to it matters
            pass


def _apply_marks(ids: pa.Array, marks: list[_Marks], found: list[np.ndarray], removed: list, stats: dict
                 ) -> np.ndarray:
    """Rows of one batch dropped by the marks (first reason wins); records them in `removed`."""
    drop = np.zeros(len(ids), dtype=bool)
    for m, seen in zip(marks, found):
        if not len(m.ids):
            continue
        hit = an.bools(pc.is_in(ids, value_set=m.ids))
        if not hit.any():
            continue
        where = an.to_numpy(pc.index_in(ids.filter(an.from_bools(hit)), value_set=m.ids), np.int32)
        seen[where] = True
        hit[np.flatnonzero(hit)[~m.drop[where]]] = False  # marked but kept (cut, annotate)
        new = hit & ~drop
        if new.any():
            sel = an.from_bools(new)
            removed.append((ids.filter(sel), an.strings([m.kind] * int(new.sum())),
                            m.detail.take(pc.index_in(ids.filter(sel), value_set=m.ids))))
            stats[f"removed_{m.kind}"] += int(new.sum())
        drop |= hit
    return drop


def _effective_cuts(marks: list[_Marks]) -> pa.Array | None:
    """Ids to cut: marked `cut` and not dropped by another reason (None when there are none)."""
    cuts = [i for m in marks for i in m.cuts]
    if not cuts:
        return None
    dropped = set()
    for m in marks:
        dropped.update(m.ids.filter(an.from_bools(m.drop)).to_pylist())
    left = sorted(set(cuts) - dropped)
    return an.strings(left) if left else None


def _cut_rows(src: str, schema: pa.Schema, marks: list[_Marks], cut_ids: pa.Array | None) -> pa.Table:
    """The file's documents to cut, cut, with the ids of their new texts, sorted by new id."""
    if cut_ids is None:
        return an.empty(schema)
    plan = {i: c for m in marks for i, c in m.cuts.items()}
    parts = []
    for rb in iter_batches(src, None, 8192):
        hit = pc.is_in(rb.column(schema.get_field_index("id")), value_set=cut_ids)
        if pc.any(hit).as_py():
            parts.append(pa.Table.from_batches([rb.filter(hit)]))
    rows = pa.concat_tables(parts) if parts else an.empty(schema)
    texts, new_ids = [], []
    for doc_id, text in zip(rows.column("id").to_pylist(), rows.column("text").to_pylist()):
        spans, want = plan[doc_id]
        new = cut_text(text, spans)
        if content_id(new) != want:
            raise AttributeMismatch(f"{src}: document {doc_id}: cutting its recorded spans gives id {content_id(new)}, "
                                    f"not the {want} the decontaminate step recorded; these attributes were made "
                                    "for different data")
        texts.append(new)
        new_ids.append(want)
    t_idx, i_idx = schema.get_field_index("text"), schema.get_field_index("id")
    rows = rows.set_column(t_idx, schema.field(t_idx), an.column(texts, schema.field(t_idx).type))
    rows = rows.set_column(i_idx, schema.field(i_idx), an.column(new_ids, schema.field(i_idx).type))
    return rows.sort_by("id")


def _write_merged(writer: pq.ParquetWriter, kept: pa.RecordBatch, cut: pa.Table, src: str) -> None:
    """One batch's kept rows with the cut documents whose new ids fall in its range, in id order."""
    if not cut.num_rows:
        writer.write_batch(kept)
        return
    merged = pa.concat_tables([pa.Table.from_batches([kept], schema=cut.schema), cut]).sort_by("id")
    ids = merged.column("id").to_pylist()
    if any(a >= b for a, b in zip(ids, ids[1:])):
        raise RuntimeError(f"{src}: a cut document's new id repeats an id of the file (internal error)")
    writer.write_table(merged)


def _check_all_found(marks: list[_Marks], found: list[np.ndarray], attr_files: list, src: str, tmp: Any) -> None:
    for m, seen, (_, path) in zip(marks, found, attr_files):
        if not seen.all():
            missing = m.ids[int(np.flatnonzero(~seen)[0])].as_py()
            if tmp is not None:
                discard(tmp)
            raise AttributeMismatch(
                f"{path}: {int((~seen).sum())} marked id(s) are not in {src} (first: {missing}); these "
                "attributes were made for different data"
            )


def _write_removed(removed: list, dst: str) -> None:
    table = pa.table({
        "id": pa.concat_arrays([r[0] for r in removed]) if removed else an.strings([]),
        "reason": pa.concat_arrays([r[1] for r in removed]) if removed else an.strings([]),
        "detail": pa.concat_arrays([r[2] for r in removed]) if removed else an.strings([]),
    }, schema=REMOVED_SCHEMA)
    write_parquet_atomic(table.take(pc.sort_indices(table, [("id", "ascending")])), dst)


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


def marks_digest(marks: list[_Marks]) -> str:
    """What a file's marks decide, as a digest: per kind the ids it drops, cuts or annotates and their
    detail. Not the marks files' bytes: a new source joining a fuzzy cluster changes the cluster's size
    in every member's marks row, but not which of this file's documents go, nor why."""
    h = xxhash.xxh3_128()
    for m in marks:
        h.update(m.kind.encode() + b"\0")
        for col in (m.ids, m.detail):
            h.update("\0".join("" if v is None else str(v) for v in col.to_pylist()).encode() + b"\1")
        h.update(m.drop.tobytes())
        h.update(repr(sorted(m.cuts.items())).encode() + str(m.annotated).encode())
    return h.hexdigest()


def documents_digest(marks: list[_Marks]) -> str:
    """What a file's marks decide of its kept documents alone: the ids each kind drops and the cuts,
    not why (the detail) nor what is only annotated. A source inserted before the others that holds a
    near copy of a removed document gives it a new, earlier parent in outputs/removed/, while the same
    documents go: their documents files are then taken whole and only the small removed files rewritten."""
    h = xxhash.xxh3_128()
    for m in marks:
        dropped = m.ids.filter(an.from_bools(m.drop)) if len(m.ids) else m.ids
        h.update(m.kind.encode() + b"\0" + "\0".join(dropped.to_pylist()).encode() + b"\1")
        h.update(repr(sorted(m.cuts.items())).encode())
    return h.hexdigest()


def _stats_only(job: tuple, marks: list[_Marks]) -> dict[str, int]:
    out = _consolidate_file(job, marks)
    return {k: v for k, v in out.items() if k != "file"}


def _removed_only(job: tuple, marks: list[_Marks]) -> dict[str, int]:
    """A file whose kept documents are already in place (taken): its removed file and its stats, from
    its id column and the marks alone (the documents are not read)."""
    src, attr_files, _dst_main, dst_removed = job
    ids = an.combined(read_columns(src, ["id"]).column("id"))
    found = [np.zeros(len(m.ids), dtype=bool) for m in marks]
    removed: list[tuple[pa.Array, pa.Array, pa.Array]] = []
    stats = {"docs_in": len(ids), "docs_out": 0, **{f"removed_{k}": 0 for k in REASONS},
             "cut_decontaminate": 0, "annotated_decontaminate": sum(m.annotated for m in marks)}
    _apply_marks(ids, marks, found, removed, stats)
    _check_all_found(marks, found, attr_files, src, None)
    cut_ids = _effective_cuts(marks)
    if cut_ids is not None:
        stats["cut_decontaminate"] = int(an.bools(pc.is_in(ids, value_set=cut_ids)).sum())
    stats["docs_out"] = stats["docs_in"] - sum(stats[f"removed_{k}"] for k in REASONS)
    _write_removed(removed, dst_removed)
    return stats


def _read_marks(job: tuple) -> list[_Marks]:
    return [_marks(kind, path) for kind, path in job[1]]


def _unit(base: str | None, job: tuple, marks: list[_Marks], earlier: reuse.Earlier | None) -> keyed.Job:
    """A file's keyed unit: its key is the base (settings, name, recorded documents) and what its marks
    decide."""
    name = basename(job[0])
    return keyed.Job(None if base is None else reuse.content_key(base, marks_digest(marks)),
                     (f"{DocumentsDir.MAIN}/{name}", f"{DocumentsDir.REMOVED}/{name}"), job, earlier)


def _documents_unit(base: str | None, job: tuple, marks: list[_Marks], earlier: reuse.Earlier | None) -> keyed.Job:
    """A file's documents-only unit: the kept documents file alone, keyed by the base and
    `documents_digest` (recorded beside the whole unit, so a later build whose marks differ only in
    their detail takes the documents file)."""
    return keyed.Job(None if base is None else reuse.content_key(base, "documents", documents_digest(marks)),
                     (f"{DocumentsDir.MAIN}/{basename(job[0])}",), job, earlier)


# A file's units after a run: the one counted (and recorded), and further keys of the same files
# (recorded, not counted): see `_Keys`.
Units = tuple[keyed.Done, list[keyed.Done]]


@dataclass(frozen=True)
class _Keys:
    """How a file can be found in a later build, cheapest first: ``attrs`` (the settings, the file's
    documents and the recorded hashes of its attribute files: known from manifests, nothing read), then,
    once its marks are read, the whole unit's key and its documents-only key (`_unit`,
    `_documents_unit`). ``base``: the settings, the file's name and its documents' recorded hash."""

    base: str | None
    attrs: str | None


def _attrs_unit(keys: _Keys, job: tuple, earlier: reuse.Earlier | None) -> keyed.Job:
    name = basename(job[0])
    return keyed.Job(keys.attrs, (f"{DocumentsDir.MAIN}/{name}", f"{DocumentsDir.REMOVED}/{name}"), job, earlier)


def _units(keys: _Keys, job: tuple, marks: list[_Marks], stats: dict[str, int], taken: bool) -> Units:
    """(the whole unit, [its documents-only unit, its attrs unit]) of a file computed or taken with its
    marks read."""
    whole, docs, attrs = _unit(keys.base, job, marks, None), _documents_unit(keys.base, job, marks, None), \
        _attrs_unit(keys, job, None)
    return keyed.Done(whole.key, whole.files, stats, taken), [keyed.Done(docs.key, docs.files, stats, taken),
                                                             keyed.Done(attrs.key, attrs.files, stats, taken)]


def _keyed_file(todo: tuple) -> Units:
    """One file consolidated in its task; its marks are read once, for both the work and the keys (here,
    unless the driver read them already to look the file up in the earlier build)."""
    keys, job, marks = todo
    marks = _read_marks(job) if marks is None else marks
    return _units(keys, job, marks, _stats_only(job, marks), False)


def _keys_by_document(earlier: reuse.Earlier) -> dict[str, list[tuple[str, reuse.Unit]]]:
    """The earlier build's keys by the documents file they name (the first file of each unit)."""
    out: dict[str, list[tuple[str, reuse.Unit]]] = {}
    for k, u in earlier.keys.items():
        if u.files:
            out.setdefault(u.files[0], []).append((k, u))
    return out


def _carried(by_document: dict[str, list[tuple[str, reuse.Unit]]], taken: keyed.Done) -> list[keyed.Done]:
    """The earlier build's other keys of a file taken by its attrs key: every key naming its files
    described the same job there, and with the same documents and attribute files they hold now too."""
    files = set(taken.files)
    return [keyed.Done(k, u.files, dict(u.stats), True) for k, u in by_document.get(taken.files[0], ())
            if k != taken.key and set(u.files) <= files]


def _take_one(keys: _Keys, job: tuple, earlier: reuse.Earlier, by_document: dict, out_dir: str
              ) -> Units | list[_Marks]:
    """The file taken in the driver: whole by its attrs key (no marks read), or whole or by its
    documents file (its removed file rewritten from the marks) once its marks are read; else its marks,
    read, for its task."""
    taken = keyed.take(_attrs_unit(keys, job, earlier), out_dir) if keys.attrs is not None else None
    if taken is not None:
        return taken, _carried(by_document, taken)
    marks = _read_marks(job)
    taken = keyed.take(_unit(keys.base, job, marks, earlier), out_dir)
    if taken is not None:
        return _units(keys, job, marks, taken.stats, True)
    if keyed.take(_documents_unit(keys.base, job, marks, earlier), out_dir) is None:
        return marks
    return _units(keys, job, marks, _removed_only(job, marks), True)


def _take_known(keys: list[_Keys], jobs: list[tuple], earlier: reuse.Earlier | None, out_dir: str
                ) -> tuple[list[Units | None], list[tuple]]:
    """(each file taken here, in the driver, or None; what is left to compute: (keys, job, marks)).
    With an earlier build each file is looked up here (a link and a hash check, cheaper than a task: a
    change to a few files then starts no worker pool for the others), its marks read only when its
    attribute files changed; without one, nothing is read here."""
    done: list[Units | None] = []
    todo = []
    by_document = _keys_by_document(earlier) if earlier is not None else {}
    for k, job in zip(keys, jobs):
        got = _take_one(k, job, earlier, by_document, out_dir) if earlier is not None and k.base is not None else None
        if isinstance(got, tuple):
            done.append(got)
            continue
        done.append(None)
        todo.append((k, job, got))
    return done, todo


def _run_keyed(jobs: list[tuple], normalized_dir: str, attribute_dirs: Sequence[str], reuse_from: Reuse,
               out_dir: str, exec_config: ExecConfig | None) -> list[Units]:
    """Every file, in order: taken from the earlier build, or consolidated on the engine (inline when
    the files to compute are few bytes, `small_job_config_for_files`)."""
    keys = _file_keys(jobs, normalized_dir, attribute_dirs, reuse_from.settings)
    done, todo = _take_known(keys, jobs, reuse_from.earlier, out_dir)
    if todo:
        paths = [job[0] for _, job, _ in todo]
        engine = small_job_config_for_files(exec_config, paths)
        computed = iter(per_file_tasks(todo, paths).map(_keyed_file).run(engine).items)
        done = [d if d is not None else next(computed) for d in done]
    return [d for d in done if d is not None]


def _file_keys(jobs: list[tuple], normalized_dir: str, attribute_dirs: Sequence[str], settings: tuple
               ) -> list[_Keys]:
    """Each job's `_Keys`, from the input steps' recorded hashes (None where a step recorded none)."""
    recorded = keyed.recorded_hashes([normalized_dir])
    attr_hashes = keyed.recorded_hashes(attribute_dirs)
    out = []
    for src, attrs, _main, _removed in jobs:
        base = None if recorded.get(src) is None else reuse.content_key(settings, basename(src), recorded[src])
        marks = [attr_hashes.get(path) for _kind, path in attrs]
        out.append(_Keys(base, None if base is None or None in marks else reuse.content_key(base, "attrs", marks)))
    return out


def consolidate(
    name: str,
    normalized_dir: str,
    attribute_dirs: Sequence[str],
    out_dir: str,
    exec_config: ExecConfig | None = None,
    reuse_from: Reuse | None = None,
) -> ConsolidateResult:
    """Drop marked documents of one source; write `out_dir/outputs/main/` with the same file names.

    attribute_dirs: attribute sets for this source (exact, fuzzy and/or decontaminate), each given as
    the attribute dir or the step dir holding attributes/<name>/. ``reuse_from``: take each file whose
    documents and marks are unchanged from the earlier build (a new source that duplicates nothing
    here leaves every file of this source as it was).
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
    keys = ["docs_in", "docs_out", *(f"removed_{k}" for k in REASONS), "cut_decontaminate", "annotated_decontaminate"]
    if reuse_from is None:
        paths = [f.path for f in files]
        run = per_file_tasks(jobs, paths).map(_consolidate_file).run(small_job_config_for_files(exec_config, paths))
        c = {k: int(run.counters.get(k, 0)) for k in keys}
    else:
        done = _run_keyed(jobs, normalized_dir, attribute_dirs, reuse_from, out_dir, exec_config)
        c = {k: sum(int(unit.stats.get(k, 0)) for unit, _ in done) for k in keys}
        c.update(keyed.record(out_dir, [unit for unit, _ in done], also=[a for _, more in done for a in more]))
    return ConsolidateResult(source=name, num_shards=len(files), counters=c,
                             attributes={k: v[1].get("params") for k, v in sets.items()})
