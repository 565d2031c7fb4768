"""Writing normalized shards: main + dups parquet per output shard, rejects, schema fix-ups.

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

from datakit.shuffle import counters, current_shard
from datakit.core.documents import CORE_SCHEMA
from datakit.core.fsio import atomic_output, commit, discard, makedirs, open_atomic, open_read
from datakit.core.layout import DocumentsDir

from .schema import (
    ConflictFound, Examples, build_table, canonical_schema, conform, merge_schemas, note_examples,
)

BATCH_ROWS = 50_000
BATCH_TEXT_BYTES = 32 << 20
REJECT_ROW_GROUP = 65_536
ZSTD_LEVEL = 3

REJECTS_SCHEMA = pa.schema([
    ("source", pa.string()), ("file", pa.string()), ("line", pa.int64()), ("offset", pa.int64()),
    ("reason", pa.string()), ("detail", pa.string()), ("excerpt", pa.string()),
])


def _writer(f, schema: pa.Schema) -> pq.ParquetWriter:
    # No dictionary/statistics for the big unique columns: dictionary attempts on text are wasted work
    # and min/max statistics of whole documents bloat the footer.
    small = [n for n in schema.names if n not in ("text",)]
    return pq.ParquetWriter(f, schema, compression="zstd", compression_level=ZSTD_LEVEL,
                            use_dictionary=[n for n in small if n != "id"], write_statistics=small)


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
        self._w = _writer(self._f, schema)

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
            w = _writer(out, schema)
            for i in range(pf.num_row_groups):
                t = pf.read_row_group(i)
                w.write_table(conform(t, schema), row_group_size=max(1, t.num_rows))
            w.close()
    return path


def collect_group(key: str, items: Iterable[Any]) -> list:
    """group_by reducer: all copies of one id, already in (file index, position) order."""
    return list(items)


def item_id(item) -> str:
    return item[0]


_POS_BITS = 36  # positions (line numbers, WARC offsets) below 64 Gi; file indexes below 64 Mi


def item_order(item) -> int:
    """(file index, position) packed into one int: ints take the engine's fast key-encoding path."""
    fi, pos = item[1], item[2]
    if pos >> _POS_BITS or fi >> (62 - _POS_BITS):
        raise ValueError(f"position {pos} in file #{fi} is beyond what normalize orders (2**{_POS_BITS} "
                         f"positions, 2**{62 - _POS_BITS} files per source); split the source")
    return (fi << _POS_BITS) | pos


def write_stage(groups: Iterable[list], *, out_dir: str, dedup: str, fixed: pa.Schema | None,
                batch_rows: int = BATCH_ROWS, batch_text_bytes: int = BATCH_TEXT_BYTES) -> Iterator[dict]:
    """map_shard over one output shard's groups (ascending id): write main + dups, yield one summary.

    The first copy of an id (lowest file index, then position) goes to main, the others to dups; with
    dedup="none" every copy goes to main. A type conflict is returned in the summary rather than
    raised, so the driver reports it once with file names instead of the engine retrying it.
    """
    shard = current_shard()
    i, n = shard.index, shard.total
    docs = DocumentsDir(out_dir)
    makedirs(docs.main)
    makedirs(docs.dups)
    examples: Examples = {}
    main = ShardParquet(docs.part("main", i, n), fixed, examples)
    dups = ShardParquet(docs.part("dups", i, n), fixed, examples)
    buf = {"main": ([], [], [0]), "dups": ([], [], [0])}
    sinks = {"main": main, "dups": dups}
    keep_all = dedup == "none"

    def add(which: str, item) -> None:
        rows, prov, size = buf[which]
        rows.append(item[3])
        prov.append((item[1], item[2]))
        size[0] += len(item[3]["text"])
        if len(rows) >= batch_rows or size[0] >= batch_text_bytes:
            flush(which)

    def flush(which: str) -> None:
        rows, prov, size = buf[which]
        if rows:
            sinks[which].write(rows, prov)
            rows.clear()
            prov.clear()
            size[0] = 0

    try:
        for group in groups:
            if keep_all:
                for item in group:
                    add("main", item)
            else:
                add("main", group[0])
                for item in group[1:]:
                    add("dups", item)
        flush("main")
        flush("dups")
        main_schema = main.close()
        dups_schema = dups.close()
    except ConflictFound as e:
        main.abort()
        dups.abort()
        yield {"shard": i, "conflict": e.conflict, "examples": examples}
        return
    except BaseException:
        main.abort()
        dups.abort()
        raise
    counters.increment("records_out", main.rows)
    counters.increment("dups", dups.rows)
    stats_to_counters(main.stats + dups.stats)
    yield {"shard": i, "conflict": None, "examples": examples, "main_schema": main_schema,
           "dups_schema": dups_schema, "main_rows": main.rows, "dup_rows": dups.rows}


class RejectSink:
    """Rejects of one read task, streamed to a staging parquet file (created only if needed)."""

    def __init__(self, path: str, source: str) -> None:
        self.path, self.source = path, source
        self.rows: list[dict] = []
        self.count = 0
        self._f = None
        self._tmp = None
        self._w = None

    def add(self, reject) -> None:
        self.rows.append(reject.to_row(self.source))
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
    """Concatenate the read tasks' reject files (in input order) into one file with fixed-size row
    groups, so its bytes do not depend on how the input was split into tasks."""
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


def stats_to_counters(stats: Counter) -> None:
    for k, v in stats.items():
        if v:
            counters.increment(k, v)


__all__ = [
    "ShardParquet", "RejectSink", "REJECTS_SCHEMA", "write_stage", "collect_group", "item_id",
    "item_order", "rewrite_with_schema", "consolidate_rejects", "canonical_schema",
]
