"""Arrow arrays to and from numpy arrays and Python values through their buffers, without pyarrow's pandas
layer.

Why: with pyarrow 26, ``pa.array``, ``pa.table`` and ``Table.from_pylist`` of Python or numpy values,
``pa.scalar``, ``Array.to_numpy``, ``fill_null`` with a Python value, ``Schema.empty_table`` and
``combine_chunks`` of a column with no chunks first ask whether a value is a pandas object, which imports
pandas wherever it is installed: 0.2-0.3 CPU-s and about 50 MB in a process that never uses it (every
worker of a built-in step, and the driver of an edit). These read and build arrays from their buffers
instead: the same values, no copy where the layout allows one to be skipped.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa

__all__ = ["offsets", "byte_lengths", "valid", "from_numpy", "to_numpy", "binary_array", "strings", "bools",
           "from_bools", "column", "rows_table", "numbers_table", "columns", "empty", "combined"]


def offsets(arr: pa.Array) -> np.ndarray:
    """The value offsets (rows + 1) of a string or binary array, large or not, for a slice its own window
    of them: a view, int32 or int64 as the type stores them."""
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    width = np.dtype(np.int64 if large else np.int32)
    return np.frombuffer(arr.buffers()[1], dtype=width, count=len(arr) + 1, offset=arr.offset * width.itemsize)


def byte_lengths(arr: pa.Array) -> np.ndarray:
    """Bytes per value of a string or binary array (0 for a null, whose offsets may span bytes), int64."""
    if len(arr) == 0:
        return np.zeros(0, dtype=np.int64)
    lengths = np.diff(offsets(arr)).astype(np.int64)
    if arr.null_count:
        lengths[~valid(arr)] = 0
    return lengths


def valid(arr: pa.Array) -> np.ndarray:
    """Which rows are not null, from the validity bitmap."""
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=bool)
    bits = np.unpackbits(np.frombuffer(arr.buffers()[0], dtype=np.uint8), bitorder="little")
    return bits[arr.offset:arr.offset + len(arr)].astype(bool)


def from_numpy(values: np.ndarray) -> pa.Array:
    """A 1-d numpy array of numbers (not bools: Arrow packs those in bits) as an Arrow array over the same
    memory."""
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


def to_numpy(arr: pa.Array, dtype: type) -> np.ndarray:
    """A null-free Arrow array of numbers as a numpy view."""
    return np.frombuffer(arr.buffers()[1], dtype, len(arr), arr.offset * np.dtype(dtype).itemsize)


def _validity(present: np.ndarray) -> pa.Buffer | None:
    """An Arrow validity bitmap (LSB first) for a bool mask of present values; None when all are."""
    return None if present.all() else pa.py_buffer(np.packbits(present, bitorder="little"))


def _variable_width(kind: pa.DataType, items: Sequence[bytes], present: np.ndarray | None = None) -> pa.Array:
    """A string or binary array, large or not, of ``items`` (a null's item is b"": ``present`` says
    which are values), built from their lengths and bytes."""
    large = pa.types.is_large_string(kind) or pa.types.is_large_binary(kind)
    ends = np.zeros(len(items) + 1, np.int64 if large else np.int32)
    np.cumsum([len(b) for b in items], out=ends[1:])
    validity = None if present is None else _validity(present)
    return pa.Array.from_buffers(kind, len(items), [validity, pa.py_buffer(ends), pa.py_buffer(b"".join(items))])


def binary_array(kind: pa.DataType, items: Sequence[bytes]) -> pa.Array:
    """``items`` (bytes, none null) as an array of ``kind``, a string or binary type, large or not."""
    return _variable_width(kind, items)


def strings(values: Sequence[str | None], kind: pa.DataType = pa.string()) -> pa.Array:
    """Python strings (None: null) as a string or large_string array, what ``pa.array(values, kind)``
    gives, encoded one by one. A lone surrogate raises UnicodeEncodeError as ``pa.array`` does."""
    present = np.fromiter((v is not None for v in values), bool, len(values))
    return _variable_width(kind, [b"" if v is None else v.encode("utf-8") for v in values], present)


def bools(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A boolean Arrow array as numpy bools, a null read as False (what ``fill_null(False)`` gives)."""
    if isinstance(arr, pa.ChunkedArray):
        return np.concatenate([bools(c) for c in arr.chunks]) if arr.num_chunks else np.zeros(0, bool)
    bits = np.unpackbits(np.frombuffer(arr.buffers()[1], dtype=np.uint8), bitorder="little")
    out = bits[arr.offset:arr.offset + len(arr)].astype(bool)
    return out & valid(arr) if arr.null_count else out


def from_bools(values: np.ndarray) -> pa.Array:
    """A 1-d numpy bool array as an Arrow boolean array (bits packed, no nulls)."""
    values = np.asarray(values, dtype=bool)
    return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(np.packbits(values, bitorder="little"))])


_NUMBERS = {pa.float64(): np.float64, pa.int64(): np.int64}
# The Python type whose values convert exactly (pyarrow refuses an int a double cannot hold; numpy rounds).
_EXACT = {pa.float64(): float, pa.int64(): int}


def column(values: Sequence, kind: pa.DataType) -> pa.Array:
    """Python values of one column (None: null) as an array of type ``kind``, what ``pa.array(values,
    kind)`` gives: strings and 64-bit numbers built here, anything else (or a value of another Python
    type, which pyarrow converts or rejects in its own way) by ``pa.array``, which imports pandas."""
    if (pa.types.is_string(kind) or pa.types.is_large_string(kind)) and all(type(v) is str or v is None
                                                                             for v in values):
        return strings(values, kind)
    if kind in _NUMBERS and all(type(v) is _EXACT[kind] or v is None for v in values):
        present = np.fromiter((v is not None for v in values), bool, len(values))
        data = np.array([0 if v is None else v for v in values], _NUMBERS[kind])
        return pa.Array.from_buffers(kind, len(values), [_validity(present), pa.py_buffer(data)])
    return pa.array(values, kind)


def rows_table(rows: Sequence[dict], schema: pa.Schema) -> pa.Table:
    """Rows (dicts; a missing key is null, a key outside ``schema`` ignored) as a table of ``schema``,
    column by column: what ``pa.Table.from_pylist(rows, schema=schema)`` gives."""
    return pa.Table.from_arrays([column([r.get(f.name) for r in rows], f.type) for f in schema], schema=schema)


def combined(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One array of a column's chunks (``combine_chunks``, except that a column of no chunks, read from
    an empty file, becomes an empty array without the pandas import ``combine_chunks`` makes then)."""
    if not isinstance(arr, pa.ChunkedArray):
        return arr
    return arr.combine_chunks() if arr.num_chunks else pa.nulls(0, arr.type)


def empty(schema: pa.Schema) -> pa.Table:
    """A table of ``schema`` with no rows (what ``schema.empty_table()`` gives, without its pandas import)."""
    return pa.Table.from_batches([], schema=schema)


def numbers_table(columns: dict[str, np.ndarray], schema: pa.Schema) -> pa.Table:
    """A table of numeric columns (bools too) from numpy arrays, each as its ``schema`` field's type:
    what ``pa.table(columns, schema=schema)`` gives, without its pandas import."""
    arrays = []
    for f in schema:
        values = columns[f.name]
        if pa.types.is_boolean(f.type):
            arrays.append(from_bools(values))
        else:
            arrays.append(from_numpy(np.asarray(values, dtype=f.type.to_pandas_dtype())))
    return pa.Table.from_arrays(arrays, schema=schema)


def columns(table: pa.Table, names: Sequence[str]) -> dict[str, np.ndarray]:
    """Null-free numeric columns of ``table`` as numpy arrays (a copy only where a column has several
    chunks): what ``table.column(name).to_numpy()`` gives, without its pandas import."""
    out = {}
    for name in names:
        col = table.column(name)
        dtype = col.type.to_pandas_dtype()
        chunks = [to_numpy(c, dtype) for c in col.chunks]
        out[name] = chunks[0] if len(chunks) == 1 else (np.concatenate(chunks) if chunks else np.empty(0, dtype))
    return out
