"""Arrow arrays to and from numpy through their buffers, without pyarrow's pandas layer.

Why: with pyarrow 26, ``pa.array``, ``pa.scalar``, ``Array.to_numpy``, ``fill_null`` with a Python value
and ``Schema.empty_table`` first ask whether a value is a pandas object, which imports pandas wherever
it is installed: 0.2-0.3 CPU-s and about 50 MB in a worker process that never uses it (a tokenize or
scoring worker). These read and build arrays from their buffers instead: the same values, no copy where
the layout allows one to be skipped.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa

__all__ = ["offsets", "byte_lengths", "valid", "from_numpy", "to_numpy", "binary_array"]


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


def binary_array(kind: pa.DataType, items: Sequence[bytes]) -> pa.Array:
    """``items`` as a large_binary or large_string array, built from their lengths and bytes."""
    ends = np.zeros(len(items) + 1, np.int64)
    np.cumsum([len(b) for b in items], out=ends[1:])
    return pa.Array.from_buffers(kind, len(items), [None, pa.py_buffer(ends), pa.py_buffer(b"".join(items))])
