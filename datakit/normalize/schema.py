"""Output schema of normalized records: fixed core columns, then the source's own columns, unified.

Input columns drift: a field is null in one file and a string in another, an int here and a float
there, a struct gains a key. Arrow's permissive promotion resolves those (null -> anything, int ->
float, struct fields merged). What it cannot resolve (int vs string, bool vs int) is a *real* conflict,
reported with the column and one example location of each type, so the user can open both files.

Schemas are canonical: core columns first, the rest sorted by name, so every shard has the same
column order whatever order its records arrived in.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable, Iterable

import pyarrow as pa
import pyarrow.compute as pc

from datakit.core import arrow_numpy as an
from datakit.core.documents import CORE_COLUMNS, CORE_FIELDS
from datakit.sources.readers import fix_surrogates

_CORE = frozenset(CORE_COLUMNS)

# column -> [(type string, file_index, pos)], one example location per distinct type seen
Examples = dict[str, list[tuple[str, int, int]]]


@dataclass(frozen=True)
class Conflict:
    column: str
    a: tuple[str, int, int]
    b: tuple[str, int, int]
    detail: str = ""


class ConflictFound(Exception):
    def __init__(self, conflict: Conflict) -> None:
        super().__init__(f"column {conflict.column!r}: {conflict.a[0]} vs {conflict.b[0]}")
        self.conflict = conflict


def canonical_schema(extras: Iterable[pa.Field]) -> pa.Schema:
    extra = sorted((f for f in extras if f.name not in _CORE), key=lambda f: f.name)
    return pa.schema(CORE_FIELDS + [pa.field(f.name, f.type) for f in extra])


def plain_type(t: pa.DataType) -> pa.DataType:
    """Dictionary-encoded input columns become their value type (encoding is the writer's business)."""
    return t.value_type if pa.types.is_dictionary(t) else t


def unify_types(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    """Permissive promotion of two types; raises pa.ArrowTypeError/ArrowInvalid on a real conflict."""
    if a == b:
        return a
    merged = pa.unify_schemas([pa.schema([pa.field("x", a)]), pa.schema([pa.field("x", b)])],
                              promote_options="permissive")
    return merged.field("x").type


def _compatible(a: pa.DataType, b: pa.DataType) -> bool:
    try:
        unify_types(a, b)
        return True
    except (pa.ArrowTypeError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False


def _type_from_str(examples: list[tuple[str, int, int]], t: pa.DataType) -> tuple[str, int, int] | None:
    s = str(t)
    return next((e for e in examples if e[0] == s), None)


def explain_conflict(column: str, old: pa.DataType, new: pa.DataType, examples: Examples) -> Conflict:
    """Pick an example location of `new` and one of an earlier type that `new` does not fit."""
    exs = examples.get(column, [])
    b = _type_from_str(exs, new) or (str(new), -1, -1)
    a = None
    for e in exs:
        if e[0] == b[0]:
            continue
        other = _parse_type(e[0])
        if other is None or not _compatible(other, new):
            a = e
            break
    return Conflict(column, a or (str(old), -1, -1), b)


_TYPE_CACHE: dict[str, pa.DataType | None] = {}


def _parse_type(s: str) -> pa.DataType | None:
    """Examples keep types as strings (small, picklable); map the simple ones back for comparisons."""
    if s not in _TYPE_CACHE:
        simple = {"null": pa.null(), "bool": pa.bool_(), "int64": pa.int64(), "double": pa.float64(),
                  "string": pa.string(), "large_string": pa.large_string(), "binary": pa.binary()}
        _TYPE_CACHE[s] = simple.get(s)
    return _TYPE_CACHE[s]


def merge_schemas(current: pa.Schema | None, new: pa.Schema, examples: Examples) -> pa.Schema:
    """Canonical union of two schemas with permissive promotion; raises ConflictFound."""
    if current is None:
        return canonical_schema(new)
    types = {f.name: f.type for f in current}
    for f in new:
        old = types.get(f.name)
        if old is None:
            types[f.name] = f.type
        elif old != f.type:
            try:
                types[f.name] = unify_types(old, f.type)
            except (pa.ArrowTypeError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise ConflictFound(explain_conflict(f.name, old, f.type, examples)) from None
    return canonical_schema(pa.field(n, t) for n, t in types.items())


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Reorder, add missing columns as nulls and cast to `schema` (which must be a promotion)."""
    if table.schema == schema:
        return table
    cols = []
    for f in schema:
        if f.name in table.column_names:
            col = table.column(f.name)
            cols.append(col if col.type == f.type else col.cast(f.type))
        else:
            cols.append(pa.nulls(table.num_rows, f.type))
    return pa.Table.from_arrays(cols, schema=schema)


def _scan_column(column: str, values: list, prov: list[tuple[int, int]], error: Exception) -> Conflict:
    """pyarrow could not build a column: find the first two values of incompatible types (error path)."""
    cur_t, cur_i = None, -1
    for i, v in enumerate(values):
        if v is None:
            continue
        try:
            t = pa.array([v]).type
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
            where = (f"unstorable {type(v).__name__}", *prov[i])
            return Conflict(column, where, where, str(e))
        if cur_t is None:
            cur_t, cur_i = t, i
            continue
        try:
            cur_t = unify_types(cur_t, t)
        except (pa.ArrowTypeError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return Conflict(column, (str(cur_t), *prov[cur_i]), (str(t), *prov[i]))
    first = next((i for i, v in enumerate(values) if v is not None), 0)
    where = (str(cur_t), *prov[first]) if prov else ("?", -1, -1)
    return Conflict(column, where, where, str(error))


def build_table(rows: list[dict], prov: list[tuple[int, int]], fixed: pa.Schema | None,
                stats=None) -> pa.Table:
    """Rows -> an Arrow table in canonical column order.

    With a `fixed` schema (parquet/html/warc/text inputs, known up front) values are converted to it.
    Otherwise every column's type is inferred from *all* rows (pa.Table.from_pylist would look at the
    first row's keys only and silently drop fields that appear later). Raises ConflictFound.
    """
    if fixed is not None:  # column by column, as pa.Table.from_pylist would (which imports pandas)
        return pa.Table.from_arrays([_array([r.get(f.name) for r in rows], f.type, stats) for f in fixed],
                                    schema=fixed)
    names = list(rows[0]) if rows else []
    first_keys = rows[0].keys() if rows else None
    seen = set(names)
    for r in rows:
        if r.keys() != first_keys:
            for k in r:
                if k not in seen:
                    seen.add(k)
                    names.append(k)
    fields, arrays = [], []
    for name in CORE_COLUMNS:
        arrays.append(_array([r.get(name) for r in rows], pa.string(), stats))
        fields.append(pa.field(name, pa.string()))
    for name in sorted(n for n in names if n not in _CORE):
        values = [r.get(name) for r in rows]
        try:
            arr = _array(values, None, stats)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError) as e:
            raise ConflictFound(_scan_column(name, values, prov, e)) from None
        arrays.append(arr)
        fields.append(pa.field(name, arr.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _array(values: list, type_: pa.DataType | None, stats) -> pa.Array:
    build = _builder(values, type_)
    try:
        return build(values)
    except UnicodeEncodeError:  # lone surrogates from JSON escapes: replace, count, retry
        values, n = fix_surrogates(values)
        if stats is not None:
            stats["decode_replacements"] += n
        return build(values)


def _builder(values: list, type_: pa.DataType | None) -> Callable[[list], pa.Array]:
    """How one column's values become an array: a typed column (the core columns, a fixed schema's) by
    `arrow_numpy.column`, an untyped one holding only strings as strings (what ``pa.array`` would infer),
    any other by ``pa.array``'s inference. Why: ``pa.array`` imports pandas wherever it is installed,
    0.2-0.3 CPU-s and ~50 MB in each normalize worker (and in the driver when an edit normalizes one unit
    there)."""
    if type_ is not None:
        return partial(an.column, kind=type_)
    if any(v is not None for v in values) and all(v is None or type(v) is str for v in values):
        return an.strings
    return pa.array


def note_examples(table: pa.Table, prov: list[tuple[int, int]], examples: Examples) -> None:
    """Remember one location per (column, type), to name files if the column later conflicts."""
    for f in table.schema:
        if f.name in _CORE or pa.types.is_null(f.type):
            continue
        s = str(f.type)
        seen = examples.setdefault(f.name, [])
        if any(e[0] == s for e in seen):
            continue
        col = table.column(f.name)
        idx = pc.index(col.is_valid(), True).as_py()
        if idx is not None and idx >= 0:
            seen.append((s, *prov[idx]))


def merge_examples(into: Examples, more: Examples) -> None:
    for col, exs in more.items():
        have = into.setdefault(col, [])
        for e in exs:
            if not any(h[0] == e[0] for h in have):
                have.append(tuple(e))


def schema_to_dict(schema: pa.Schema) -> dict[str, str]:
    return {f.name: str(f.type) for f in schema}
