"""The columnar router must agree with the record path row for row: a key routed by `route_column` has to
land on the same reducer as `keys.route(v, keys.encode_key(v), n)`, or one key would end up in two shards
when both paths feed a shuffle. Every test compares against that scalar reference (and real xxhash)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import xxhash

from datakit.shuffle.keys import KeyEncodingError, encode_key, route
from datakit.shuffle.route_arrow import key_hashes, route_column

TARGETS = (1, 3, 8, 1000)
ROWS = 1500  # above the 1024-row sample, so both the dedup and the hash-every-row string paths run


def expected_routes(col, n: int) -> list[int]:
    return [route(v, encode_key(v), n) for v in col.to_pylist()]


def expected_hashes(col) -> list[int]:
    return [xxhash.xxh3_64_intdigest(encode_key(v)) for v in col.to_pylist()]


def assert_matches_record_path(col) -> None:
    for n in TARGETS:
        got = route_column(col, n)
        assert got.dtype == np.int64
        assert got.tolist() == expected_routes(col, n), f"n={n} type={col.type}"
    hashes = key_hashes(col)
    assert hashes.dtype == np.uint64
    assert hashes.tolist() == expected_hashes(col)


def with_nulls(values: list, every: int = 7) -> list:
    return [None if i % every == 3 else v for i, v in enumerate(values)]


# --- integers ---------------------------------------------------------------------------------------------

def test_int64_hash_is_bit_exact_with_xxhash_on_random_and_edge_values():
    rng = np.random.default_rng(1234)
    edges = [0, 1, -1, 7, 8, 999, 1000, 1001, 255, 256, -(2**63), 2**63 - 1, 2**32, 2**32 - 1, -(2**32)]
    values = np.concatenate([
        rng.integers(-(2**63), 2**63 - 1, 100_000, dtype=np.int64, endpoint=True),
        rng.integers(-5000, 5000, 2_000, dtype=np.int64),
        np.array(edges, dtype=np.int64),
    ])
    got = key_hashes(pa.array(values))
    want = np.fromiter((xxhash.xxh3_64_intdigest(encode_key(int(v))) for v in values), np.uint64, len(values))
    mismatches = np.flatnonzero(got != want)
    assert mismatches.size == 0, f"first mismatch at value {values[mismatches[0]]}"


INT_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]


@pytest.mark.parametrize("typ", INT_TYPES, ids=str)
@pytest.mark.parametrize("nulls", [False, True], ids=["no_nulls", "nulls"])
def test_integer_columns_match_record_path(typ, nulls):
    info = np.iinfo(typ.to_pandas_dtype())
    hi = min(int(info.max), 2**63 - 1)
    rng = np.random.default_rng(7)
    values = [int(v) for v in rng.integers(int(info.min), hi, ROWS, endpoint=True, dtype=np.int64)]
    # Small values exercise the [0, n) pass-through; the type's edges exercise the encoding's sign handling.
    edges = [0, 1, 2, 3, 7, 8, 999, 1000, 1001, int(info.min), hi, max(int(info.min), -1)]
    values[:12] = [min(max(v, int(info.min)), hi) for v in edges]
    if nulls:
        values = with_nulls(values)
    assert_matches_record_path(pa.array(values, type=typ))


def test_small_nonnegative_ints_pass_through_and_nulls_never_do():
    col = pa.array([0, 1, 2, None, 5, -1], type=pa.int64())
    got = route_column(col, 8)
    assert got[:3].tolist() == [0, 1, 2] and got[4] == 5
    null_target = xxhash.xxh3_64_intdigest(b"\x01") % 8
    assert got[3] == null_target
    assert got[5] == xxhash.xxh3_64_intdigest(encode_key(-1)) % 8


def test_uint64_above_signed_range_is_refused_with_the_value():
    col = pa.array([1, 2, 2**63 + 5], type=pa.uint64())
    with pytest.raises(KeyEncodingError, match=r"uint64.*9223372036854775813.*row 2"):
        route_column(col, 4)
    with pytest.raises(KeyEncodingError, match="uint64"):
        key_hashes(col)


def test_uint64_top_value_hidden_under_a_null_is_ignored():
    values = np.array([5, 2**64 - 1, 2**63 - 1], dtype=np.uint64)
    col = pa.array(values, mask=np.array([False, True, False]))
    assert col.to_pylist() == [5, None, 2**63 - 1]
    assert_matches_record_path(col)


def test_sliced_arrays_with_offsets():
    ints = pa.array(with_nulls(list(range(-50, 2000))), type=pa.int32())
    bools = pa.array(with_nulls([i % 3 == 0 for i in range(300)]))
    strs = pa.array(with_nulls([f"k{i % 40}" for i in range(3000)]))
    for col in (ints.slice(13, 900), bools.slice(5, 101), strs.slice(17, 2500)):
        assert col.offset > 0
        assert_matches_record_path(col)


# --- bool, strings, binary, null ----------------------------------------------------------------------------

def test_bool_columns_use_the_bool_encoding_not_ints():
    col = pa.array([True, False, None, True])
    # True would pass through as 1 if it were treated as an int; the record path hashes b"\x03".
    assert route_column(col, 1000).tolist() == [xxhash.xxh3_64_intdigest(b"\x03") % 1000,
                                                xxhash.xxh3_64_intdigest(b"\x02") % 1000,
                                                xxhash.xxh3_64_intdigest(b"\x01") % 1000,
                                                xxhash.xxh3_64_intdigest(b"\x03") % 1000]
    for nulls in (False, True):
        values = [i % 3 == 0 for i in range(ROWS)]
        assert_matches_record_path(pa.array(with_nulls(values) if nulls else values, type=pa.bool_()))


def _string_values(kind: str) -> list[str]:
    if kind == "unique":
        return [f"doc-{i:08d}-ü€" for i in range(ROWS)]
    if kind == "repetitive":
        return [f"lang-{i % 13}" for i in range(ROWS)]
    return ["", "a", "ü", "a\x00b", "0", "1", "😀"]  # tiny: short, empty, non-ASCII, NUL, digit strings


STRING_TYPES = [pa.string(), pa.large_string(), pa.string_view()]
BINARY_TYPES = [pa.binary(), pa.large_binary(), pa.binary_view()]


@pytest.mark.parametrize("typ", STRING_TYPES + BINARY_TYPES, ids=str)
@pytest.mark.parametrize("kind", ["unique", "repetitive", "tiny"])
@pytest.mark.parametrize("nulls", [False, True], ids=["no_nulls", "nulls"])
def test_string_and_binary_columns_match_record_path(typ, kind, nulls):
    values = _string_values(kind)
    if typ in BINARY_TYPES:
        values = [v.encode("utf-8") for v in values]
    if nulls:
        values = with_nulls(values, every=3 if kind == "tiny" else 7)
    assert_matches_record_path(pa.array(values, type=typ))


def test_str_and_bytes_with_same_content_route_differently_like_the_record_path():
    s = key_hashes(pa.array(["abc"]))[0]
    b = key_hashes(pa.array([b"abc"]))[0]
    assert s == xxhash.xxh3_64_intdigest(b"\x06abc") and b == xxhash.xxh3_64_intdigest(b"\x07abc")


def test_all_null_columns():
    assert_matches_record_path(pa.nulls(10))
    assert_matches_record_path(pa.array([None] * 10, type=pa.string()))
    assert_matches_record_path(pa.array([None] * 10, type=pa.int64()))


# --- dictionaries and chunked arrays -------------------------------------------------------------------------

@pytest.mark.parametrize("values", [
    [f"v{i % 9}" for i in range(ROWS)],
    [b"x\x00" * (i % 5) for i in range(ROWS)],
    [(i % 11) - 3 for i in range(ROWS)],  # ints: pass-through must still apply through the dictionary
    [i % 2 == 0 for i in range(ROWS)],
], ids=["string", "binary", "int", "bool"])
@pytest.mark.parametrize("nulls", [False, True], ids=["no_nulls", "nulls"])
def test_dictionary_columns_match_record_path(values, nulls):
    col = pc.dictionary_encode(pa.array(with_nulls(values) if nulls else values))
    assert pa.types.is_dictionary(col.type)
    assert_matches_record_path(col)


def test_dictionary_with_null_in_its_values_and_unused_entries():
    dictionary = pa.array(["a", None, "c", "unused"])
    col = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, None, 0], type=pa.int8()), dictionary)
    assert col.to_pylist() == ["a", None, "c", None, "a"]
    assert_matches_record_path(col)


def test_dictionary_of_large_string_with_uint_indices():
    col = pa.DictionaryArray.from_arrays(pa.array([2, 0, 1, 2], type=pa.uint16()),
                                         pa.array(["x", "y", "z"], type=pa.large_string()))
    assert_matches_record_path(col)


def test_chunked_arrays_with_differing_chunks_and_dictionaries():
    ints = pa.chunked_array([pa.array([1, 2, None], type=pa.int64()), pa.array([], type=pa.int64()),
                             pa.array([-7, 2**40, 999], type=pa.int64())])
    strs = pa.chunked_array([pa.array([f"s{i % 5}" for i in range(2000)]),
                             pa.array(with_nulls([f"u{i}" for i in range(1200)]))])
    dicts = pa.chunked_array([pc.dictionary_encode(pa.array(["a", "b", "a"])),
                              pc.dictionary_encode(pa.array(["c", None, "a"]))])
    for col in (ints, strs, dicts):
        assert_matches_record_path(col)
    assert len(route_column(strs, 8)) == 3200


@pytest.mark.parametrize("typ", [pa.int64(), pa.uint8(), pa.string(), pa.binary(), pa.bool_(),
                                 pa.dictionary(pa.int32(), pa.string())], ids=str)
def test_empty_columns(typ):
    for col in (pa.array([], type=typ), pa.chunked_array([], type=typ)):
        got = route_column(col, 8)
        assert got.dtype == np.int64 and got.shape == (0,)
        assert key_hashes(col).shape == (0,)


# --- refusals ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("col", [
    pa.array([1.5, 2.0]),
    pa.array([[1, 2], [3]]),
    pa.array([{"a": 1}]),
    pa.array([1, 2], type=pa.timestamp("s")),
    pa.array([], type=pa.float32()),
    pc.dictionary_encode(pa.array([1.0, 2.0])),
    pa.chunked_array([], type=pa.list_(pa.int64())),
], ids=["float", "list", "struct", "timestamp", "empty_float", "dict_float", "empty_chunked_list"])
def test_unsupported_types_are_refused_naming_the_type(col):
    with pytest.raises(KeyEncodingError, match=str(col.type).replace("[", r"\[").split("<")[0]) as err:
        route_column(col, 4)
    assert "key function" in str(err.value)
    with pytest.raises(KeyEncodingError):
        key_hashes(col)


@pytest.mark.parametrize("bad", [0, -3, 2.0, True, "8", 2**64])
def test_num_targets_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match="num_targets"):
        route_column(pa.array([1, 2]), bad)


def test_non_arrow_input_is_a_type_error():
    with pytest.raises(TypeError, match="pyarrow Array"):
        route_column([1, 2, 3], 4)
