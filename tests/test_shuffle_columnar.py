"""The columnar data plane (column-name keys): same answers as the record plane, Arrow all the way."""

from __future__ import annotations

import collections

import hashlib
import os
import signal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from datakit.shuffle import (
    Dataset,
    ExecConfig,
    PlanError,
    ShardFailed,
    current_shard,
    encode_key,
    route,
)
from datakit.shuffle.columnar import iter_arrow_run
from datakit.shuffle.frames import read_sidecar_runs

INLINE = ExecConfig(backend="inline")


def cfg(backend: str, **kw) -> ExecConfig:
    kw.setdefault("max_workers", 2)
    return ExecConfig(backend=backend, **kw)


def _rows(n: int, keys: list) -> list[dict]:
    return [{"k": keys[(i * 7919) % len(keys)], "s": (i * 31) % 7, "v": i} for i in range(n)]


def _tables(rows: list[dict], per: int) -> list[pa.Table]:
    return [pa.Table.from_pylist(rows[i : i + per]) for i in range(0, len(rows), per)]


def _by_rows(k, it):
    return {"k": k, "vs": [r["v"] for r in it]}


def _by_table(k, t):
    assert isinstance(t, pa.Table)
    return {"k": k, "vs": t["v"].to_pylist()}


def _tag_shard(it):
    shard = current_shard().index
    for x in it:
        yield (shard, x)


KEY_SETS = {
    "int_with_nulls": [None, *range(-5, 60)],
    "str_non_ascii": ["", "a", "aa", "b", "é", "z", "Ω", "日本", "\x00x", "zz", None],
    "bytes": [b"", b"\x00", b"\x00\x01", b"\xff", b"a", b"ab"],
}


@pytest.mark.parametrize("keys", list(KEY_SETS), ids=list(KEY_SETS))
def test_column_key_matches_record_plane(backend, keys):
    """Same routing, same key order, same order within groups (sort column, then input order)."""
    rows = _rows(3000, KEY_SETS[keys])
    config = cfg(backend, map_flush_bytes=20_000)
    want = (Dataset.from_items(rows, 4)
            .group_by(lambda r: r["k"], _by_rows, sort_by=lambda r: r["s"], num_shards=3)
            .map_shard(_tag_shard).collect(config))
    got = (Dataset.from_items(rows, 4)
           .group_by("k", _by_table, sort_by="s", num_shards=3)
           .map_shard(_tag_shard).collect(config))
    assert got == want
    for shard, out in got:
        assert shard == route(out["k"], encode_key(out["k"]), 3)


def test_arrow_batches_in_any_shape_give_the_same_groups():
    rows = _rows(5000, list(range(97)))
    want = Dataset.from_items(rows, 4).group_by(lambda r: r["k"], _by_rows, num_shards=5).collect(INLINE)
    tables = _tables(rows, 700)
    batches = [b for t in tables for b in t.to_batches(max_chunksize=300)]
    for items in (tables, batches):
        got = Dataset.from_items(items, 4).group_by("k", _by_table, num_shards=5).collect(INLINE)
        assert got == want
    via_map_batches = (Dataset.from_items(rows, 4).map_batches(lambda t: t.filter(pc.greater_equal(t["v"], 0)))
                       .group_by("k", _by_table, num_shards=5).collect(INLINE))
    assert via_map_batches == want


def test_every_columnar_frame_is_a_sorted_run(tmp_path):
    rows = _rows(4000, [f"id{i:04d}" for i in range(300)])
    work = tmp_path / "work"
    ds = Dataset.from_items(_tables(rows, 500), 2).group_by("k", _by_table, sort_by="s", num_shards=4)
    ds.run(ExecConfig(backend="inline", work_dir=str(work), keep_work_dir=True, map_flush_bytes=30_000))
    indexes = sorted(work.rglob("map-*.index"))
    assert indexes
    runs = [r for p in indexes for t in range(4) for r in read_sidecar_runs(str(p), t)]
    assert len(runs) > 8  # several flushes per mapper
    for run in runs:
        assert run.fmt == "arrow"
        t = pa.concat_tables(list(iter_arrow_run(run.path, run.offset, run.length)))
        assert t.num_rows == run.rows
        pairs = list(zip(t["k"].to_pylist(), t["s"].to_pylist()))
        assert pairs == sorted(pairs)


def test_tiny_memory_budget_multipass_merge_same_result_no_leftovers(tmp_path, backend):
    rows = _rows(20000, list(range(500)))

    def build():
        return Dataset.from_items(_tables(rows, 1000), 3).group_by("k", _by_table, num_shards=2)

    clean = build().collect(cfg(backend))
    work = tmp_path / "work"
    result = build().run(cfg(backend, work_dir=str(work), map_flush_bytes=4000, reduce_memory_bytes=1))
    assert result.items == clean
    assert result.stats[1].spill_files > 0
    assert not any(p.is_file() for p in work.rglob("*"))


def test_skewed_key_and_combiner(backend):
    rows = [{"k": "hot" if i % 10 else f"k{i}", "n": 1} for i in range(30000)]

    def count(k, t):
        return {"k": k, "n": pc.sum(t["n"]).as_py()}

    config = cfg(backend, map_flush_bytes=100_000, reduce_memory_bytes=2_000_000)
    plain = Dataset.from_items(_tables(rows, 2000), 4).group_by("k", count, num_shards=4).run(config)
    combined = Dataset.from_items(_tables(rows, 2000), 4).group_by("k", count, num_shards=4,
                                                                   combiner=count).run(config)
    counts = {r["k"]: r["n"] for r in plain.items}
    assert counts["hot"] == 27000 and len(counts) == 3001 and sum(counts.values()) == 30000
    assert sorted(combined.items, key=lambda r: r["k"]) == sorted(plain.items, key=lambda r: r["k"])
    assert combined.stats[0].rows_out == plain.stats[0].rows_out == 30000
    assert combined.stats[1].rows_in < plain.stats[1].rows_in  # the combiner shrank what was shuffled


def test_int_keys_pass_through_and_fill_every_bucket():
    t = pa.table({"k": pa.array(list(range(8)) * 3, pa.int32())})
    out = (Dataset.from_items([t], 1).group_by("k", lambda k, g: (k, g.num_rows), num_shards=8)
           .map_shard(_tag_shard).collect(INLINE))
    assert sorted(out) == [(k, (k, 3)) for k in range(8)]


def test_deduplicate_by_column_keeps_first_and_item_kind():
    rows = [{"id": f"d{i % 40}", "v": i} for i in range(400)]
    want = Dataset.from_items(rows, 3).deduplicate(lambda r: r["id"], num_shards=2).collect(INLINE)
    assert Dataset.from_items(rows, 3).deduplicate("id", num_shards=2).collect(INLINE) == want  # rows stay rows
    tables = Dataset.from_items(_tables(rows, 50), 3).deduplicate("id", num_shards=2).collect(INLINE)
    assert all(isinstance(t, pa.Table) for t in tables)  # batches stay batches
    assert [r for t in tables for r in t.to_pylist()] == want


def test_empty_input_and_empty_batches():
    empty = pa.table({"k": pa.array([], pa.int64())})
    assert Dataset.from_items([empty], 2).group_by("k", _by_table, num_shards=3).collect(INLINE) == []
    assert Dataset.from_shards([[], []]).group_by("k", _by_table).collect(INLINE) == []


def test_clear_errors_for_bad_column_keys():
    t = pa.table({"k": [1.5, 2.5], "v": [1, 2]})
    with pytest.raises(ShardFailed, match="(?s)KeyEncodingError.*double.*key function"):
        Dataset.from_items([t], 1).group_by("k", _by_table).collect(INLINE)
    with pytest.raises(ShardFailed, match="(?s)'nope' is not in the batch.*'k', 'v'"):
        Dataset.from_items([t], 1).group_by("nope", _by_table).collect(INLINE)
    with pytest.raises(ShardFailed, match="needs dict rows or Arrow tables, got tuple"):
        Dataset.from_items([(1, 2)], 1).group_by("k", _by_table).collect(INLINE)
    with pytest.raises(PlanError, match="sort_by must be a column name too"):
        Dataset.from_items([t], 1).group_by("k", _by_table, sort_by=lambda r: r["v"]).collect(INLINE)
    with pytest.raises(PlanError, match="both as column names"):
        Dataset.from_items([t], 1).group_by(lambda r: r, _by_table, sort_by="v").collect(INLINE)
    with pytest.raises(ShardFailed, match="must return an Arrow Table"):
        Dataset.from_items([t], 1).map_batches(lambda b: b.to_pylist()).collect(INLINE)


def test_parquet_sink_writes_tables_and_rows_in_order(tmp_path):
    rows = _rows(3000, list(range(50)))
    out = str(tmp_path / "out" / "part-{shard:05d}.parquet")

    def firsts(k, t):
        return t.slice(0, 2)  # a reducer may return a table: it goes to the sink as a batch

    res = Dataset.from_items(_tables(rows, 400), 3).group_by("k", firsts, num_shards=2).write_parquet(out).run(INLINE)
    written = pa.concat_tables([pq.read_table(p) for p in sorted(res.items)])
    assert written.num_rows == 100
    assert written.column_names == ["k", "s", "v"]
    assert written["k"].to_pylist() == sorted(written["k"].to_pylist(), key=lambda k: (route(k, encode_key(k), 2), k))


def _digest(paths: list[str]) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(Path(p).read_bytes())
    return h.hexdigest()


def test_byte_identical_outputs_across_worker_counts_and_backends(tmp_path, backend):
    rows = _rows(6000, [f"doc-{i}" for i in range(700)])

    def run(name: str, config: ExecConfig) -> str:
        pattern = str(tmp_path / name / "part-{shard:05d}-of-{total:05d}.parquet")
        res = (Dataset.from_items(_tables(rows, 500), 4)
               .group_by("k", lambda k, t: {"k": k, "n": t.num_rows, "v": t["v"].to_pylist()}, num_shards=3)
               .write_parquet(pattern).run(config))
        return _digest(res.items)

    assert run("one", cfg(backend, max_workers=1)) == run("two", cfg(backend, max_workers=2)) == run("inline", INLINE)


def _kill_once(marker: str):
    def fn(it):
        for i, t in enumerate(it):
            if i == 3 and current_shard().index == 1 and not os.path.exists(marker):
                Path(marker).write_text(str(os.getpid()))
                os.kill(os.getpid(), signal.SIGKILL)
            yield t

    return fn


def test_kill_minus_nine_mid_columnar_shuffle_gives_identical_output(tmp_path):
    rows = _rows(6000, list(range(300)))

    def build(fn):
        return Dataset.from_items(_tables(rows, 250), 3).map_shard(fn).group_by("k", _by_table, num_shards=3)

    clean = build(lambda it: it).collect(cfg("local"))
    result = build(_kill_once(str(tmp_path / "killed"))).run(cfg("local", map_flush_bytes=5000))
    assert (tmp_path / "killed").exists()
    assert result.stats[0].worker_deaths == 1
    assert result.items == clean


def test_explain_names_the_columnar_shuffle():
    ds = Dataset.from_items([], 2).group_by("k", _by_table, num_shards=4)
    assert "columnar on 'k'" in ds.explain()


def test_key_column_types_may_differ_between_batches():
    """int32 here, int64 there, dictionary-encoded strings: one physical key type per shuffle."""
    rows = _rows(2000, list(range(40)))
    ints = [t.set_column(0, "k", t["k"].cast(pa.int32() if i % 2 else pa.int64())) for i, t in enumerate(_tables(rows, 300))]
    want = Dataset.from_items(rows, 3).group_by(lambda r: r["k"], _by_rows, num_shards=4).collect(INLINE)
    assert Dataset.from_items(ints, 3).group_by("k", _by_table, num_shards=4).collect(INLINE) == want
    srows = [{**r, "k": f"key{r['k']}"} for r in rows]
    dicts = [t.set_column(0, "k", t["k"].dictionary_encode()) if i % 2 else t for i, t in enumerate(_tables(srows, 300))]
    want = Dataset.from_items(srows, 3).group_by(lambda r: r["k"], _by_rows, num_shards=4).collect(INLINE)
    assert Dataset.from_items(dicts, 3).group_by("k", _by_table, num_shards=4).collect(INLINE) == want


def test_parquet_batches_feed_a_column_keyed_group_by(tmp_path):
    rows = _rows(3000, ["a", "b", "c", None])
    for i, t in enumerate(_tables(rows, 1000)):
        pq.write_table(t, tmp_path / f"in-{i}.parquet")
    got = (Dataset.from_files(str(tmp_path / "*.parquet")).read_parquet(["k", "v"], as_batches=True)
           .group_by("k", lambda k, t: {"k": k, "n": t.num_rows, "cols": t.column_names}, num_shards=2)
           .collect(INLINE))
    assert sorted((r["k"] or "", r["n"]) for r in got) == [("", 750), ("a", 750), ("b", 750), ("c", 750)]
    assert all(r["cols"] == ["k", "v"] for r in got)


def test_count_counts_rows_of_arrow_batches():
    rows = _rows(1234, list(range(10)))
    assert Dataset.from_items(_tables(rows, 100), 3).count(INLINE) == 1234
    assert Dataset.from_items(rows, 3).map_batches(lambda t: t).count(INLINE) == 1234
    assert Dataset.from_items(rows, 3).count(INLINE) == 1234


def test_partition_sorted_orders_each_shard_without_splitting_keys(backend):
    rows = _rows(5000, [f"doc-{i:03d}" for i in range(400)] + [None])
    config = cfg(backend, map_flush_bytes=30_000, reduce_memory_bytes=1)  # many runs, multi-pass merge
    out = (Dataset.from_items(_tables(rows, 300), 4).partition_sorted("k", sort_by="s", num_shards=3)
           .map_shard(_tag_shard).collect(config))
    assert all(isinstance(t, pa.Table) for _, t in out)
    got = collections.defaultdict(list)
    seen_keys: dict[int, list] = collections.defaultdict(list)
    for shard, t in out:
        ks = t["k"].to_pylist()
        if seen_keys[shard]:
            assert ks[0] != seen_keys[shard][-1]  # a key never straddles two batches
        seen_keys[shard].extend(ks)
        got[shard].extend(zip(ks, t["s"].to_pylist(), t["v"].to_pylist()))
    for k in {r["k"] for r in rows}:
        assert route(k, encode_key(k), 3) in got
    want = collections.defaultdict(list)
    for r in rows:  # the record plane's order: key (None first), sort column, then input order
        want[route(r["k"], encode_key(r["k"]), 3)].append(r)
    for shard, rs in want.items():
        rs.sort(key=lambda r: ((r["k"] is not None, r["k"] or ""), r["s"]))
        assert got[shard] == [(r["k"], r["s"], r["v"]) for r in rs]
    as_rows = Dataset.from_items(rows, 4).partition_sorted("k", num_shards=3).collect(INLINE)
    assert all(isinstance(r, dict) for r in as_rows) and len(as_rows) == 5000


def test_batches_whose_columns_differ_in_type_merge_and_spill():
    """A field that is None in every row of one batch comes out of Arrow as a null column; another batch
    has strings there. Shuffles, multi-pass spills included, reconcile them instead of failing."""
    rows = [{"k": i % 50, "note": None if i < 3000 else f"n{i}", "v": i} for i in range(6000)]
    tiny = ExecConfig(backend="inline", map_flush_bytes=20_000, reduce_memory_bytes=1)
    res = Dataset.from_items(_tables(rows, 500), 6).group_by(
        "k", lambda k, t: (k, t["note"].null_count, t.num_rows), num_shards=2).run(tiny)
    assert res.stats[1].spill_files > 0
    assert sorted(res.items) == [(k, 60, 120) for k in range(50)]
