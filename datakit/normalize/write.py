"""Writing normalized parts: main + dups parquet per unit of input, its rejects, schema fix-ups.

A shard is streamed in row groups (memory bounded by one batch), so its schema must be fixed when the
writer opens. With inferred schemas (jsonl) a later batch may widen a column (null -> string, int ->
double, a struct gains a field); the file written so far is then rewritten once under the wider schema.
Batches are cut by content (rows and text bytes in id order), never by timing, so the files are
byte-identical whatever the worker count.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from datakit.shuffle import current_shard
from datakit.core.documents import CORE_SCHEMA, parquet_options
from datakit.core.fsio import atomic_output, commit, discard, makedirs, open_atomic, open_read
from datakit.core.layout import DocumentsDir

from .schema import (
    ConflictFound, Examples, build_table, canonical_schema, conform, merge_schemas, note_examples,
)

BATCH_ROWS = 50_000
BATCH_TEXT_BYTES = 32 << 20
REJECT_ROW_GROUP = 65_536
REJECTS_SCHEMA = pa.schema([
    ("source", pa.string()), ("file", pa.string()), ("line", pa.int64()), ("offset", pa.int64()),
    ("reason", pa.string()), ("detail", pa.string()), ("excerpt", pa.string()),
])


def part_writer(f, schema: pa.Schema) -> pq.ParquetWriter:
    return pq.ParquetWriter(f, schema, **parquet_options(schema))


class ShardParquet:
    """One output parquet file, written in row groups, published atomically on `close()`."""

    def __init__(self, path: str, fixed: pa.Schema | None, examples: Examples) -> None:
        self.path, self.fixed, self.examples = path, fixed, examples
        self.schema: pa.Schema | None = fixed
        self.rows = 0
        self._f = None
        self._tmp: str | None = None
        self._w: pq.ParquetWriter | None = None
        self.stats: Counter = Counter()

    def _open(self, schema: pa.Schema) -> None:
        self._f, self._tmp = open_atomic(self.path)
        self._w = part_writer(self._f, schema)

    def write(self, rows: list[dict], prov: list[tuple[int, int]]) -> None:
        table = build_table(rows, prov, self.fixed, self.stats)
        if self.fixed is None:
            note_examples(table, prov, self.examples)
            target = merge_schemas(self.schema, table.schema, self.examples)
            if self._w is not None and target != self.schema:
                self._widen(target)
            self.schema = target
            table = conform(table, target)
        if self._w is None:
            self._open(self.schema)
        self._w.write_table(table, row_group_size=max(1, table.num_rows))
        self.rows += table.num_rows

    def _widen(self, schema: pa.Schema) -> None:
        """Re-write what is written so far under a wider schema (rare: only when types drift)."""
        old_tmp = self._tmp
        self._w.close()
        self._f.close()
        self._open(schema)
        with open_read(old_tmp) as f:
            pf = pq.ParquetFile(f)
            for i in range(pf.num_row_groups):
                t = pf.read_row_group(i)
                self._w.write_table(conform(t, schema), row_group_size=max(1, t.num_rows))
        discard(old_tmp)

    def close(self) -> pa.Schema:
        if self._w is None:
            self.schema = self.schema or CORE_SCHEMA
            self._open(self.schema)
        self._w.close()
        self._f.close()
        commit(self._tmp, self.path)
        self._w = None
        return self.schema

    def abort(self) -> None:
        if self._w is not None:
            try:
                self._w.close()
            except Exception:
                pass
            self._f.close()
            discard(self._tmp)
            self._w = None


def rewrite_with_schema(path: str, schema: pa.Schema) -> str:
    """Conform an already written shard to the source-wide schema (temp + rename)."""
    with open_read(path) as f:
        pf = pq.ParquetFile(f)
        if pf.schema_arrow == schema:
            return path
        with atomic_output(path) as out:
            w = part_writer(out, schema)
            for i in range(pf.num_row_groups):
                t = pf.read_row_group(i)
                w.write_table(conform(t, schema), row_group_size=max(1, t.num_rows))
            w.close()
    return path


# What flows through the shuffle: (unit, kind, file index, position, payload), routed by unit (an int
# below the shard count goes to that shard unchanged) and sorted by `item_sort` within the unit. kind is
# a document's id (payload: the row), REJECT (payload: the reject's row) or STATS (payload: a read
# task's counts for this unit).
STATS = ""
REJECT = "!"
_POS_BITS = 36  # positions (line numbers, WARC offsets) below 64 Gi; file indexes below 64 Mi


def item_unit(item) -> int:
    return item[0]


def _order(fi: int, pos: int) -> int:
    """(file index, position + 1) packed into one int (a planned file's reject has position -1)."""
    pos += 1
    if pos >> _POS_BITS or pos < 0 or fi >> (62 - _POS_BITS):
        raise ValueError(f"position {pos - 1} in file #{fi} is beyond what normalize orders (2**{_POS_BITS} "
                         f"positions, 2**{62 - _POS_BITS} files per source); split the source")
    return (fi << _POS_BITS) | pos


def item_sort(item) -> str:
    """A unit's items in order: its counts first, then its rejects by (file, position), then its
    documents by (id, file, position), so the first copy of an id is the first by file order. Ids are
    32 hex digits, which sort after REJECT; the packed order is fixed-width hex, so strings sort right."""
    kind = item[1]
    if kind == STATS:
        return STATS
    return f"{kind}{_order(item[2], item[3]):016x}"


def stream_unit(key: int, items: Iterable[Any]) -> Iterable[Any]:
    """group_by reducer: a unit's items as one stream (never held in memory: the merge feeds it)."""
    return items


class _Batched:
    """One part file fed in batches cut by content (rows and text bytes in id order), never by timing,
    so the file is byte-identical whatever the worker count."""

    def __init__(self, sink: ShardParquet, batch_rows: int, batch_text_bytes: int) -> None:
        self.sink, self.batch_rows, self.batch_text_bytes = sink, batch_rows, batch_text_bytes
        self.rows: list[dict] = []
        self.prov: list[tuple[int, int]] = []
        self.size = 0

    def add(self, item) -> None:
        self.rows.append(item[4])
        self.prov.append((item[2], item[3]))
        self.size += len(item[4]["text"])
        if len(self.rows) >= self.batch_rows or self.size >= self.batch_text_bytes:
            self.flush()

    def flush(self) -> None:
        if self.rows:
            self.sink.write(self.rows, self.prov)
            self.rows, self.prov, self.size = [], [], 0


def _route(items: Iterable[Any], main: _Batched, dups: _Batched, rejects: "RejectSink", keep_all: bool
           ) -> Counter:
    """A unit's sorted items to their files: the first copy of an id to main, the others to dups (all to
    main with dedup "none"), rejects to the unit's rejects; returns the read tasks' summed counts."""
    stats: Counter = Counter()
    prev = None
    for item in items:
        kind = item[1]
        if kind == STATS:
            stats.update(item[4])
        elif kind == REJECT:
            rejects.add(item[4])
        elif keep_all or kind != prev:
            main.add(item)
            prev = kind
        else:
            dups.add(item)
    return stats


def write_unit(groups: Iterable[Iterable[Any]], *, out_dir: str, names: list[str], fixed: list[pa.Schema | None],
               dedup: str, batch_rows: int = BATCH_ROWS, batch_text_bytes: int = BATCH_TEXT_BYTES) -> Iterator[dict]:
    """map_shard over one unit's stream (shard i is unit ``names[i]``): `write_part` of shard i."""
    i = current_shard().index
    yield write_part(i, names[i], groups, out_dir=out_dir, fixed=fixed[i], dedup=dedup, batch_rows=batch_rows,
                     batch_text_bytes=batch_text_bytes)


def write_part(i: int, name: str, groups: Iterable[Iterable[Any]], *, out_dir: str, fixed: pa.Schema | None,
               dedup: str, batch_rows: int = BATCH_ROWS, batch_text_bytes: int = BATCH_TEXT_BYTES) -> dict:
    """Write part ``i`` (named ``name``) from its sorted items: its main and dups parts and its rejects;
    return one summary. A part with no records still gets its (empty) files.

    A type conflict is returned in the summary rather than raised, so the driver reports it once with
    file names instead of the engine retrying it."""
    docs = DocumentsDir(out_dir)
    for d in (docs.main, docs.dups):
        makedirs(d)
    examples: Examples = {}
    main = ShardParquet(docs.file("main", name), fixed, examples)
    dups = ShardParquet(docs.file("dups", name), fixed, examples)
    rejects = RejectSink(docs.unit("rejects", name))
    try:
        bm, bd = _Batched(main, batch_rows, batch_text_bytes), _Batched(dups, batch_rows, batch_text_bytes)
        stats = Counter()
        for group in groups:
            stats += _route(group, bm, bd, rejects, dedup == "none")
        bm.flush()
        bd.flush()
        main_schema, dups_schema = main.close(), dups.close()
        rejects.close()
    except ConflictFound as e:
        for sink in (main, dups, rejects):
            sink.abort()
        return {"index": i, "name": name, "conflict": e.conflict, "examples": examples}
    except BaseException:
        for sink in (main, dups, rejects):
            sink.abort()
        raise
    stats.update(main.stats + dups.stats)
    stats.update({"records_out": main.rows, "dups": dups.rows})
    return {"index": i, "name": name, "conflict": None, "examples": examples, "main_schema": main_schema,
            "dups_schema": dups_schema, "stats": {k: int(v) for k, v in stats.items() if v},
            "rejects": rejects.count}


class RejectSink:
    """Rejects of one unit (rows of REJECTS_SCHEMA), streamed to a parquet file created only if needed."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.rows: list[dict] = []
        self.count = 0
        self._f = None
        self._tmp = None
        self._w = None

    def add(self, row: dict) -> None:
        self.rows.append(row)
        self.count += 1
        if len(self.rows) >= REJECT_ROW_GROUP:
            self._flush()

    def _flush(self) -> None:
        if not self.rows:
            return
        if self._w is None:
            self._f, self._tmp = open_atomic(self.path)
            self._w = pq.ParquetWriter(self._f, REJECTS_SCHEMA, compression="zstd")
        self._w.write_table(pa.Table.from_pylist(self.rows, schema=REJECTS_SCHEMA))
        self.rows = []

    def close(self) -> None:
        self._flush()
        if self._w is not None:
            self._w.close()
            self._f.close()
            commit(self._tmp, self.path)
            self._w = None

    def abort(self) -> None:
        if self._w is not None:
            self._f.close()
            discard(self._tmp)
            self._w = None


def consolidate_rejects(staging_paths: list[str], final_path: str) -> int:
    """Concatenate the units' reject files (in unit order) into one file with fixed-size row groups, so
    its bytes do not depend on how the input was split into units."""
    total = 0
    with atomic_output(final_path) as out:
        w = pq.ParquetWriter(out, REJECTS_SCHEMA, compression="zstd")
        pending: list[pa.Table] = []
        held = 0
        for p in staging_paths:
            with open_read(p) as f:
                t = pq.read_table(f, schema=REJECTS_SCHEMA)
            pending.append(t)
            held += t.num_rows
            while held >= REJECT_ROW_GROUP:
                whole = pa.concat_tables(pending)
                w.write_table(whole.slice(0, REJECT_ROW_GROUP), row_group_size=REJECT_ROW_GROUP)
                rest = whole.slice(REJECT_ROW_GROUP)
                pending, held = [rest], rest.num_rows
                total += REJECT_ROW_GROUP
        if held:
            w.write_table(pa.concat_tables(pending), row_group_size=REJECT_ROW_GROUP)
            total += held
        w.close()
    return total


__all__ = [
    "ShardParquet", "RejectSink", "REJECTS_SCHEMA", "REJECT", "STATS", "write_part", "write_unit", "stream_unit", "item_unit",
    "item_sort", "rewrite_with_schema", "consolidate_rejects", "canonical_schema",
]
