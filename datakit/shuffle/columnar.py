"""The columnar data plane: Arrow record batches through the same frame/sidecar format.

When a shuffle's key is a column name, map tasks never touch rows one by one: they route a whole key
column at once (`route_arrow`), sort (target, key[, sort column]) with one stable sort, and write each
target's slice as one zstd frame of length-prefixed sub-batches, each a self-contained Arrow IPC stream
(the record plane's layout, with IPC where it has pickle). Reducers stream those runs sub-batch by
sub-batch and merge them with vectorized bounds instead of a heap of records.
The per-record Python costs of the record path (key call, key encoding, tuple, pickle, heap compare)
disappear, which is what lets a shuffle run near the serialization limit.

Same contract as the record path, so results do not depend on which path ran: a key goes to the reducer
`keys.route` names; within a reducer rows come in (key, sort column, map task, row) order; nulls sort
first (like `None` in the record encoding). The sidecar says `"format": "arrow"`.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import zstandard

from .frames import _LEN, frame_compressor, iter_frame_bodies, publish_map_output
from datakit.core.fsio import discard, open_atomic
from .keys import KeyEncodingError
from .route_arrow import route_column

SUB_BATCH_ROWS = 4096
SUB_BATCH_BYTES = 256 << 10
ROW_BATCH = 4096  # dict rows are gathered into Arrow tables this many at a time


def _sub_batch_rows(table: pa.Table) -> int:
    if table.num_rows == 0:
        return SUB_BATCH_ROWS
    per_row = max(1, table.nbytes // table.num_rows)
    return max(1, min(SUB_BATCH_ROWS, SUB_BATCH_BYTES // per_row))


def _ipc_bytes(batch: pa.RecordBatch) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return sink.getvalue()


def write_arrow_frame(out: Any, tables: Iterable[pa.Table], cctx: zstandard.ZstdCompressor,
                      max_rows: int | None = None) -> tuple[int, int]:
    """Write one frame for `tables` (one sorted run); returns (rows, raw bytes).

    Inside one zstd stream, each sub-batch is a length-prefixed, self-contained Arrow IPC stream, so a
    reader decodes it straight from the decompressed bytes (zero copy) and holds one sub-batch at a time.
    """
    comp = cctx.compressobj()
    rows = raw = 0
    for t in tables:
        for batch in t.to_batches(max_chunksize=max_rows or _sub_batch_rows(t)):
            if not batch.num_rows:
                continue
            body = _ipc_bytes(batch)
            raw += _LEN.size + body.size
            out.write(comp.compress(_LEN.pack(body.size)))
            out.write(comp.compress(body))
            rows += batch.num_rows
    out.write(comp.flush())
    return rows, raw


def iter_arrow_run(path: str, offset: int, length: int) -> Iterator[pa.Table]:
    """Stream one columnar run, one sub-batch in memory at a time."""
    for body in iter_frame_bodies(path, offset, length):
        try:
            yield pa.ipc.open_stream(pa.py_buffer(body)).read_all()
        except pa.ArrowInvalid as e:
            raise IOError(f"corrupt columnar shuffle frame in {path} at offset {offset}: {e}") from None


# ---------------------------------------------------------------- map side
def to_table(item: Any) -> pa.Table | None:
    """The Arrow form of a batch item (Table or RecordBatch), or None if the item is not a batch."""
    if isinstance(item, pa.Table):
        return item
    if isinstance(item, pa.RecordBatch):
        return pa.Table.from_batches([item])
    return None


def tables_from_items(items: Iterable[Any], where: str) -> Iterator[tuple[pa.Table, bool]]:
    """Turn a stream of Arrow batches and/or dict rows into tables; flags tables built from rows."""
    rows: list[dict] = []

    def from_rows() -> pa.Table:
        try:
            return pa.Table.from_pylist(rows)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise ValueError(f"{where}: rows cannot be put in one Arrow table for a column-keyed shuffle: {e}; "
                             "give every row the same field types, or use a key function instead of a "
                             "column name") from None

    for item in items:
        t = to_table(item)
        if t is not None:
            if rows:
                yield from_rows(), True
                rows = []
            if t.num_rows:
                yield t, False
        elif isinstance(item, dict):
            rows.append(item)
            if len(rows) >= ROW_BATCH:
                yield from_rows(), True
                rows = []
        else:
            raise TypeError(f"{where}: a column-keyed shuffle needs dict rows or Arrow tables, got "
                            f"{type(item).__name__}; use a key function (group_by(lambda r: ...)) for other items")
    if rows:
        yield from_rows(), True


def _concat(tables: list[pa.Table], where: str) -> pa.Table:
    if len(tables) == 1:
        return tables[0]
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        schemas = "; ".join(sorted({str(t.schema).replace("\n", ", ") for t in tables})[:3])
        raise ValueError(f"{where}: batches have incompatible schemas ({e}): {schemas}") from None


def _as_numpy_int(col: Any) -> np.ndarray | None:
    if isinstance(col, np.ndarray):
        return col
    if not pa.types.is_integer(col.type) or col.null_count:
        return None
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col.to_numpy()


def sort_order(cols: list[Any]) -> Any:
    """Stable ascending order over several columns (first = most significant), nulls first.

    Integer columns without nulls (the common shuffle key) sort with numpy's stable sorts, which find
    the already-sorted runs a merge concatenates; anything else uses Arrow's sort.
    """
    arrays = [_as_numpy_int(c) for c in cols]
    if all(a is not None for a in arrays):
        if len(arrays) == 1:
            return np.argsort(arrays[0], kind="stable")
        return np.lexsort(arrays[::-1])
    table = pa.table({f"c{i}": c for i, c in enumerate(cols)})
    return pc.sort_indices(table, sort_keys=[(f"c{i}", "ascending", "at_start") for i in range(len(cols))])


def _check_columns(table: pa.Table, cols: list[str], where: str) -> None:
    missing = [c for c in cols if c not in table.column_names]
    if missing:
        raise KeyError(f"{where}: shuffle column {missing[0]!r} is not in the batch; its columns are "
                       f"{table.column_names}")


def _normalize_column(table: pa.Table, name: str) -> pa.Table:
    """One physical type per key/sort column, so runs from different batches and mappers merge and compare:
    integers become int64, dictionaries their values, string/binary views the plain layouts."""
    col = table[name]
    t = col.type
    if pa.types.is_dictionary(t):
        col, t = col.cast(t.value_type), t.value_type
    if pa.types.is_integer(t) and t != pa.int64():
        if t == pa.uint64() and col.null_count < len(col) and (pc.max(col).as_py() or 0) >= 1 << 63:
            raise KeyEncodingError(f"{name!r} holds uint64 values outside the signed 64-bit key range")
        col = col.cast(pa.int64())
    elif pa.types.is_string_view(t):
        col = col.cast(pa.string())
    elif pa.types.is_binary_view(t):
        col = col.cast(pa.binary())
    if col is table[name]:
        return table
    return table.set_column(table.schema.get_field_index(name), name, col)


GroupFn = Callable[[Any, pa.Table], Any]


def group_spans(table: pa.Table, key: str) -> tuple[list[Any], np.ndarray]:
    """Distinct keys of a key-sorted table and the row offsets where each group starts (plus the end)."""
    if table.num_rows == 0:
        return [], np.zeros(1, dtype=np.int64)
    col = table[key]
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    ree = pc.run_end_encode(col)
    ends = ree.run_ends.to_numpy(zero_copy_only=False).astype(np.int64)
    return ree.values.to_pylist(), np.concatenate([[0], ends])


def results_table(results: list[Any], where: str) -> pa.Table:
    """Combiner/reducer results (dicts or tables) as one table."""
    tables: list[pa.Table] = []
    rows: list[dict] = []
    for r in results:
        t = to_table(r)
        if t is None:
            if not isinstance(r, dict):
                raise TypeError(f"{where}: a column-keyed combiner must return a dict or an Arrow table, "
                                f"got {type(r).__name__}")
            rows.append(r)
        else:
            if rows:
                tables.append(pa.Table.from_pylist(rows))
                rows = []
            tables.append(t)
    if rows:
        tables.append(pa.Table.from_pylist(rows))
    return _concat(tables, where) if tables else pa.table({})


class ArrowRunWriter:
    """Map-side buffer of Arrow tables; flushes (target, key)-sorted runs past a byte budget."""

    def __init__(self, data_path: str, index_path: str, num_targets: int, flush_bytes: int, key: str,
                 sort_col: str | None, combiner: GroupFn | None, where: str) -> None:
        self.data_path, self.index_path = data_path, index_path
        self.num_targets, self.flush_bytes = num_targets, flush_bytes
        self.key, self.sort_col, self.combiner, self.where = key, sort_col, combiner, where
        self.tables: list[pa.Table] = []
        self.targets: list[np.ndarray] = []
        self.pending = 0
        self.rows_in = 0
        self.from_rows = False
        self.flushes = 0
        self.bytes_written = 0
        self.rows_written = 0
        self.index: dict[int, list[list[int]]] = {}
        self._cctx = frame_compressor()
        self._file = None
        self._tmp = None

    def add(self, table: pa.Table, from_rows: bool = False) -> None:
        cols = [self.key] + ([self.sort_col] if self.sort_col else [])
        _check_columns(table, cols, self.where)
        for name in cols:
            table = _normalize_column(table, name)
        try:
            targets = route_column(table[self.key], self.num_targets)
        except KeyEncodingError as e:
            raise KeyEncodingError(f"{e} [column {self.key!r}, {self.where}]") from None
        self.tables.append(table)
        self.targets.append(targets)
        self.from_rows = self.from_rows or from_rows
        self.rows_in += table.num_rows
        self.pending += table.nbytes
        if self.pending >= self.flush_bytes:
            self.flush()

    def flush(self) -> None:
        if not self.tables:
            return
        table = _concat(self.tables, self.where)
        targets = np.concatenate(self.targets) if len(self.targets) > 1 else self.targets[0]
        self.tables, self.targets, self.pending = [], [], 0
        order = np.asarray(sort_order([targets, table[self.key]] +
                                      ([table[self.sort_col]] if self.sort_col else [])))
        bounds = np.searchsorted(targets[order], np.arange(self.num_targets + 1), side="left")
        if table.num_columns and table.column(0).num_chunks > 1:
            table = table.combine_chunks()  # one sequential copy; a take from many chunks re-joins them each time
        if self._file is None:
            self._file, self._tmp = open_atomic(self.data_path)
        step = _sub_batch_rows(table)
        for t in np.flatnonzero(np.diff(bounds)):
            idx = order[bounds[t] : bounds[t + 1]]
            if self.combiner is not None:
                pieces: Iterable[pa.Table] = [self._combine(table.take(idx))]
            else:  # gather one sub-batch at a time: small, cache-warm allocations instead of a sorted copy
                pieces = (table.take(idx[i : i + step]) for i in range(0, len(idx), step))
            offset = self._file.tell()
            rows, raw = write_arrow_frame(self._file, pieces, self._cctx, None if self.combiner else step)
            length = self._file.tell() - offset
            self.index.setdefault(int(t), []).append([offset, length, rows, raw])
            self.bytes_written += length
            self.rows_written += rows
        self.flushes += 1

    def _combine(self, run: pa.Table) -> pa.Table:
        keys, starts = group_spans(run, self.key)
        out = []
        for i, k in enumerate(keys):
            s, e = int(starts[i]), int(starts[i + 1])
            out.append(self.combiner(k, run.slice(s, e - s)) if e - s > 1 else run.slice(s, 1))
        combined = results_table(out, f"{self.where} (combiner)")
        _check_columns(combined, [self.key] + ([self.sort_col] if self.sort_col else []),
                       f"{self.where} (combiner output)")
        return combined

    def close(self) -> dict:
        self.flush()
        publish_map_output(self._file, self._tmp, self.data_path, self.index_path, self.index, format="arrow",
                           items="rows" if self.from_rows else "tables")
        return {"index": self.index_path, "bytes": self.bytes_written, "rows": self.rows_written,
                "flushes": self.flushes, "records": self.rows_in}

    def abort(self) -> None:
        if self._file is not None:
            self._file.close()
            discard(self._tmp)


# ---------------------------------------------------------------- reduce side
def _order(v: Any) -> tuple:
    return (0,) if v is None else (1, v)


def _prefix_lt(col: pa.ChunkedArray | pa.Array, bound: Any) -> int:
    """How many rows of a key-sorted column (nulls first) are < bound."""
    if bound is None:
        return 0
    arr = _as_numpy_int(col)
    if arr is not None:
        return int(np.searchsorted(arr, bound, side="left"))
    less = pc.sum(pc.less(col, pa.scalar(bound, type=col.type))).as_py() or 0
    return col.null_count + less


def _last_key(table: pa.Table, key: str) -> Any:
    return table[key][table.num_rows - 1].as_py()


class _Cursor:
    __slots__ = ("it", "buf", "done")

    def __init__(self, it: Iterator[pa.Table]) -> None:
        self.it, self.buf, self.done = it, None, False
        self.refill()

    def refill(self) -> None:
        for t in self.it:
            if t.num_rows:
                self.buf = t
                return
        self.buf, self.done = None, True

    def extend_past(self, key: str, bound: Any) -> None:
        """Read sub-batches until one ends beyond `bound` (or the run ends), joining them once: a key
        spanning many sub-batches costs one pass, not one re-scan of the growing buffer per sub-batch."""
        parts = [self.buf]
        for t in self.it:
            if t.num_rows:
                parts.append(t)
                if _order(_last_key(t, key)) != _order(bound):
                    break
        else:
            self.done = True
        if len(parts) > 1:
            self.buf = _concat(parts, "merge")

    def last(self, key: str) -> Any:
        return _last_key(self.buf, key)


def merge_arrow(streams: list[Iterator[pa.Table]], key: str, sort_col: str | None) -> Iterator[pa.Table]:
    """Merge key-sorted table streams into key-sorted chunks; a key never straddles two chunks.

    Each round takes, from every stream, the rows below the smallest "last key" among streams that may
    still produce more: nothing later can sort before them. A stable sort of those rows (concatenated in
    stream order) gives (key, sort column, stream, row) order, the record path's order.
    """
    cursors = [c for c in (_Cursor(s) for s in streams) if c.buf is not None]
    while cursors:
        open_ = [c for c in cursors if not c.done]
        if open_:
            bound = min((c.last(key) for c in open_), key=_order)
            cut = [_prefix_lt(c.buf[key], bound) for c in cursors]
        else:
            cut = [c.buf.num_rows for c in cursors]
        if not any(cut):
            # Every buffer starts with the bound key: read further into the streams that end on it.
            for c in open_:
                if _order(c.last(key)) == _order(bound):
                    c.extend_past(key, bound)
            continue
        parts = [c.buf.slice(0, n) for c, n in zip(cursors, cut) if n]
        for c, n in zip(cursors, cut):
            if n:
                c.buf = c.buf.slice(n)
                if c.buf.num_rows == 0:
                    c.refill()
        cursors = [c for c in cursors if c.buf is not None]
        chunk = _concat(parts, "merge")
        if len(parts) > 1:
            chunk = chunk.take(sort_order([chunk[key]] + ([chunk[sort_col]] if sort_col else [])))
        yield chunk


def write_arrow_spill(path: str, chunks: Iterable[pa.Table]) -> tuple[int, int, int]:
    """One merged run as a single frame (the external sort's spill); returns (rows, raw, length).

    Every sub-batch carries its own schema, so chunks whose schemas differ (a column all-null in one
    map task, typed in another) spill as they are and are reconciled when merged, as map runs are."""
    with open(path, "wb") as f:
        rows, raw = write_arrow_frame(f, chunks, zstandard.ZstdCompressor(level=1))
        length = f.tell()
    return rows, raw, length


def reduce_arrow(chunks: Iterator[pa.Table], kind: str, reducer: GroupFn | None, key: str,
                 as_rows: bool) -> Iterator[Any]:
    """Apply a group reducer per key (it gets the key and its rows as one table), keep firsts (dedup), or
    pass the key-sorted rows on as they are (sorted)."""
    for chunk in chunks:
        if kind == "sorted":
            if as_rows:
                yield from chunk.to_pylist()
            else:
                yield chunk
            continue
        keys, starts = group_spans(chunk, key)
        if kind == "dedup":
            firsts = chunk.take(pa.array(starts[:-1]))
            if as_rows:
                yield from firsts.to_pylist()
            else:
                yield firsts
        else:
            bounds = starts.tolist()
            slice_ = chunk.slice
            for k, s, e in zip(keys, bounds, bounds[1:]):
                yield reducer(k, slice_(s, e - s))
