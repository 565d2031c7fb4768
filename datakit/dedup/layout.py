"""How dedup reads and writes the layout of `datakit.core.layout`: normalized sources, attribute sets.

A normalized source is its `DocumentsDir` main files, each sorted by id. An `AttributesDir` holds, for
ONE source, files with exactly the source's file names (rows in the same id order, only for the ids it
says something about) plus its meta file: the kind of attribute, the parameters that produced it, the
file list and counters. Co-partitioning is what lets consolidation be a streaming merge per file
instead of a shuffle; the recorded parameters are what lets every consumer refuse to mix attribute
sets made differently. This module adds the checks (complete shard sets, matching parameters) and the
parquet I/O on top of those names.
"""

from __future__ import annotations

import io
import json
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from datakit.shuffle import Dataset, FileInfo, list_files
from datakit.core.fsio import atomic_write_bytes, exists, makedirs, open_read, remove
from datakit.core.layout import AttributesDir, DocumentsDir, parse_part_name, parse_unit_part_name
from datakit.steps.verify import read_manifest

ATTRS_META = AttributesDir.META
ATTRS_SCHEMA_VERSION = 1


class DedupInputError(ValueError):
    """Inputs of a dedup step are missing, malformed or inconsistent (message says which and where)."""


class AttributeMismatch(DedupInputError):
    """Attribute sets made with different parameters, or for different data, were about to be mixed."""


@dataclass(frozen=True)
class SourceRef:
    """One normalized source. Lower priority value wins (the manifest's order: 0 is the first source)."""

    name: str
    dir: str
    priority: int = 0


def as_sources(items: Iterable[Any]) -> list[SourceRef]:
    """Accept SourceRef or (name, dir[, priority]) tuples; return them in rank order (priority, then name)."""
    out = []
    for i, it in enumerate(items):
        if isinstance(it, SourceRef):
            out.append(it)
        elif isinstance(it, (tuple, list)) and len(it) in (2, 3):
            out.append(SourceRef(str(it[0]), str(it[1]), int(it[2]) if len(it) == 3 else i))
        else:
            raise DedupInputError(f"source #{i}: expected SourceRef or (name, dir, priority), got {it!r:.100}")
    names = [s.name for s in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise DedupInputError(f"duplicate source names: {', '.join(dup)}")
    for s in out:
        if not s.name or "/" in s.name or s.name.startswith((".", "_")):
            raise DedupInputError(f"source name {s.name!r} is not usable as a directory name")
    return sorted(out, key=lambda s: (s.priority, s.name))


def main_files(normalized_dir: str) -> list[FileInfo]:
    """The source's main files, checked complete. Two naming conventions, never mixed: normalize's one
    part per input unit (`unit_part_name`), complete when they are exactly the main files the step's
    outputs manifest recorded (a step without a manifest: as listed); or a numbered set (`part_name`,
    older builds and fixtures), complete when it holds shards 0..M-1 of M and nothing else."""
    try:
        files = list_files(DocumentsDir(normalized_dir).main + "/*.parquet")
    except FileNotFoundError:
        files = []
    if not files:
        raise DedupInputError(f"normalized source {normalized_dir}: no parquet files under {DocumentsDir.MAIN}/")
    keyed = [f for f in files if parse_unit_part_name(f.path) is not None]
    if keyed:
        _check_keyed(normalized_dir, files, keyed)
        return files
    totals, indexes = set(), []
    for f in files:
        parsed = parse_part_name(f.path)
        if parsed is None:
            raise DedupInputError(f"{f.path}: unexpected file name (want part-NNNNN-of-MMMMM.parquet "
                                  "or unit-<16 hex>.parquet)")
        indexes.append(parsed[0])
        totals.add(parsed[1])
    if len(totals) != 1:
        raise DedupInputError(f"normalized source {normalized_dir}: files disagree on the shard count {sorted(totals)}")
    total = totals.pop()
    missing = sorted(set(range(total)) - set(indexes))
    if missing or len(files) != total:
        raise DedupInputError(
            f"normalized source {normalized_dir}: {len(files)} of {total} shards present; missing "
            f"{', '.join(map(str, missing[:10]))}{' ...' if len(missing) > 10 else ''}"
        )
    return files


def _check_keyed(normalized_dir: str, files: list[FileInfo], keyed: list[FileInfo]) -> None:
    """Unit-named main files: no other name among them, and exactly the set the step recorded."""
    other = [f.path for f in files if parse_unit_part_name(f.path) is None]
    if other:
        raise DedupInputError(f"{other[0]}: unexpected file name among unit parts (want unit-<16 hex>.parquet)")
    recorded = read_manifest(normalized_dir)
    if recorded is None:
        return
    prefix = DocumentsDir.MAIN + "/"
    want = sorted(f.path[len(prefix):] for f in recorded if f.path.startswith(prefix) and "/" not in f.path[len(prefix):])
    have = sorted(basename(f.path) for f in keyed)
    if have != want:
        missing, extra = sorted(set(want) - set(have)), sorted(set(have) - set(want))
        raise DedupInputError(
            f"normalized source {normalized_dir}: its main files are not those its outputs manifest recorded"
            + (f"; missing {', '.join(missing[:5])}" if missing else "")
            + (f"; not recorded {', '.join(extra[:5])}" if extra else ""))


def basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def attr_dir(out_dir: str, source: str) -> str:
    """The attribute set of `source` inside a dedup step's output dir."""
    return AttributesDir.of(out_dir, source).root


def resolve_attr_dir(path: str, source: str) -> str:
    """Accept either an attribute directory or a step output dir holding attributes/<source>/."""
    p = path.rstrip("/")
    if exists(AttributesDir(p).meta):
        return p
    nested = AttributesDir.of(p, source)
    if exists(nested.meta):
        return nested.root
    raise DedupInputError(
        f"{path}: no attribute set for source {source!r} (looked for {ATTRS_META} there and under "
        f"{AttributesDir.rel(source)}/)"
    )


def write_meta(dir_: str, meta: dict) -> None:
    makedirs(dir_)
    body = {"schema_version": ATTRS_SCHEMA_VERSION, **meta}
    atomic_write_bytes(AttributesDir(dir_).meta, json.dumps(body, indent=1, sort_keys=True).encode())


def invalidate(dir_: str) -> None:
    """Remove a previous run's meta file before rewriting a set: a half-rewritten set is never valid."""
    remove(AttributesDir(dir_).meta)


def read_meta(dir_: str) -> dict:
    path = AttributesDir(dir_).meta
    if not exists(path):
        raise DedupInputError(f"{dir_}: not an attribute directory ({ATTRS_META} missing)")
    with open_read(path) as f:
        meta = json.loads(f.read())
    if meta.get("schema_version") != ATTRS_SCHEMA_VERSION:
        raise DedupInputError(f"{path}: unsupported attribute schema_version {meta.get('schema_version')!r}")
    return meta


def check_same_params(metas: Sequence[tuple[str, dict]], what: str) -> dict:
    """All (label, params) equal, or AttributeMismatch naming the first differing key and both values."""
    label0, p0 = metas[0]
    for label, p in metas[1:]:
        if p != p0:
            keys = sorted(set(p0) | set(p))
            diff = [k for k in keys if p0.get(k) != p.get(k)]
            k = diff[0]
            raise AttributeMismatch(
                f"refusing to mix {what} made with different parameters: {label0} has {k}={p0.get(k)!r} but "
                f"{label} has {k}={p.get(k)!r} (differing: {', '.join(diff)}); rebuild them with one configuration"
            )
    return p0


def check_files_match(meta: dict, want: Sequence[str], label: str) -> None:
    """The attribute set was made for exactly these source files (base names, in order)."""
    want = list(want)
    have = meta.get("files", [])
    if have != want:
        raise AttributeMismatch(
            f"{label}: attribute files {have[:3]}{'...' if len(have) > 3 else ''} ({len(have)}) do not match the "
            f"source's main files {want[:3]}{'...' if len(want) > 3 else ''} ({len(want)}); was the source "
            "re-normalized after these attributes were made?"
        )


def parquet_bytes(table: pa.Table, metadata: dict | None = None) -> bytes:
    """One parquet file's bytes (zstd), as `write_parquet_atomic` writes them."""
    if metadata:
        md = dict(table.schema.metadata or {})
        md[b"datakit.dedup"] = json.dumps(metadata, sort_keys=True).encode()
        table = table.replace_schema_metadata(md)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def write_parquet_atomic(table: pa.Table, path: str, metadata: dict | None = None) -> None:
    """Write one parquet file (zstd) to a temp name and rename it into place."""
    data = parquet_bytes(table, metadata)
    parent = path.rsplit("/", 1)[0]
    makedirs(parent)
    atomic_write_bytes(path, data)


def _unreadable(path: str, e: Exception) -> DedupInputError:
    return DedupInputError(f"{path}: cannot read parquet: {e}")


@contextmanager
def open_parquet(path: str) -> Iterator[pq.ParquetFile]:
    """A ParquetFile; a file that is not parquet fails naming the file (pyarrow's messages do not)."""
    with open_read(path) as f:
        try:
            pf = pq.ParquetFile(f)
        except (pa.ArrowException, OSError) as e:
            raise _unreadable(path, e) from None
        yield pf


def iter_batches(path: str, columns: Sequence[str] | None, batch_size: int) -> Iterator[pa.RecordBatch]:
    """Stream columns (all if None) of one parquet file in record batches; read errors name the file."""
    with open_parquet(path) as pf:
        if columns is not None:
            require_columns(path, pf.schema_arrow, columns)
        batches = pf.iter_batches(batch_size=batch_size, columns=list(columns) if columns is not None else None)
        while True:
            try:
                rb = next(batches)
            except StopIteration:
                return
            except (pa.ArrowException, OSError) as e:
                raise _unreadable(path, e) from None
            yield rb


def read_columns(path: str, columns: Sequence[str]) -> pa.Table:
    """Read these columns of one parquet file, or fail naming the file and the missing columns."""
    with open_parquet(path) as pf:
        require_columns(path, pf.schema_arrow, columns)
        try:
            return pf.read(columns=list(columns))
        except (pa.ArrowException, OSError) as e:
            raise _unreadable(path, e) from None


def per_file_tasks(jobs: Sequence[Any], labels: Sequence[str]) -> Dataset:
    """One engine task per job, labelled with its file, so a failure names the file it was reading."""
    return Dataset.from_shards([[j] for j in jobs], labels=list(labels))


def parquet_num_rows(path: str) -> int:
    with open_parquet(path) as pf:
        return pf.metadata.num_rows


def require_columns(path: str, schema: pa.Schema, columns: Sequence[str]) -> None:
    missing = [c for c in columns if c not in schema.names]
    if missing:
        raise DedupInputError(f"{path}: missing column(s) {', '.join(missing)} (has {', '.join(schema.names)})")


@dataclass(frozen=True)
class FileEntry:
    """One main file of one source, with its place in the global numbering used by the shuffles."""

    gidx: int  # index over all sources' files, in rank order
    rank: int  # the source's rank (priority order)
    file_idx: int  # index within the source
    source: str
    path: str  # the normalized main file
    name: str  # its base name (attribute files reuse it)


def file_table(sources: Sequence[SourceRef]) -> list[FileEntry]:
    """All main files of all (ranked) sources, validated, numbered globally."""
    from .hashing import MAX_FILES, MAX_SOURCES

    if len(sources) > MAX_SOURCES:
        raise DedupInputError(f"at most {MAX_SOURCES} sources per dedup step, got {len(sources)}")
    out: list[FileEntry] = []
    for rank, src in enumerate(sources):
        files = main_files(src.dir)
        if len(files) > MAX_FILES:
            raise DedupInputError(f"source {src.name}: at most {MAX_FILES} files, got {len(files)}")
        for i, f in enumerate(files):
            out.append(FileEntry(len(out), rank, i, src.name, f.path, basename(f.path)))
    return out


def rank_bases(entries: Sequence[FileEntry]) -> np.ndarray:
    """base[rank] = gidx of that source's first file, so gidx = base[rank] + file_idx."""
    ranks = max(e.rank for e in entries) + 1 if entries else 0
    base = np.zeros(ranks, dtype=np.int64)
    for e in entries:
        if e.file_idx == 0:
            base[e.rank] = e.gidx
    return base
