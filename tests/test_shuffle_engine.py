"""Behavioural tests of the map/shuffle engine (issue 2)."""

from __future__ import annotations

import collections
import dataclasses
import gzip
import hashlib
import json
import os
import select
import signal
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import zstandard

from datakit.shuffle import (
    Dataset,
    ExecConfig,
    KeyEncodingError,
    PlanError,
    ShardFailed,
    WorkerDeaths,
    counters,
    current_shard,
    encode_key,
    list_files,
    route,
)
from datakit.shuffle.backends import local_backend
from datakit.shuffle.frames import RunWriter, iter_run, read_sidecar_runs
from datakit.shuffle.zygote import _running



def cfg(backend: str, **kw) -> ExecConfig:
    kw.setdefault("max_workers", 2)
    return ExecConfig(backend=backend, **kw)
INLINE = ExecConfig(backend="inline")


@dataclasses.dataclass(frozen=True)
class Payload:
    name: str
    tags: frozenset


def _records(n: int, keys: int) -> list[dict]:
    return [{"k": (i * 7919) % keys, "v": i} for i in range(n)]


def _tag_shard(it):
    shard = current_shard().index
    for x in it:
        yield (shard, x)


def test_group_by_union_equals_input_and_keys_owned_by_hash(backend):
    config = cfg(backend)
    items = _records(5000, 97)
    grouped = (
        Dataset.from_items(items, num_shards=4)
        .group_by(lambda r: r["k"] + 1000, lambda k, it: (k, sorted(r["v"] for r in it)), num_shards=5)
        .map_shard(_tag_shard)
        .collect(config)
    )
    # Union of reducer outputs is the input multiset.
    values = sorted(v for _, (_, vs) in grouped for v in vs)
    assert values == sorted(r["v"] for r in items)
    # Each key appears once, on the reducer its hash names.
    keys = [k for _, (k, _) in grouped]
    assert len(keys) == len(set(keys)) == 97
    for shard, (k, _) in grouped:
        assert shard == route(k, encode_key(k), 5)
    # Within every reducer output, keys are ascending.
    by_shard = collections.defaultdict(list)
    for shard, (k, _) in grouped:
        by_shard[shard].append(k)
    for ks in by_shard.values():
        assert ks == sorted(ks)


def test_every_frame_is_a_sorted_run(tmp_path):
    writer = RunWriter(str(tmp_path / "m.data"), str(tmp_path / "m.index"), num_targets=3, flush_bytes=2000)
    import random

    rng = random.Random(0)
    for i in range(3000):
        k = f"{rng.randrange(10**6):06d}"
        kb = encode_key(k)
        writer.add(route(k, kb, 3), kb, b"", {"k": k, "i": i})
    meta = writer.close()
    assert meta["flushes"] > 3  # the byte budget forced several flushes mid-write
    total = 0
    for target in range(3):
        for run in read_sidecar_runs(str(tmp_path / "m.index"), target):
            recs = list(iter_run(run))
            assert [r[0] for r in recs] == sorted(r[0] for r in recs)
            assert len(recs) == run.rows
            total += len(recs)
    assert total == 3000


def test_empty_targets_cost_no_io(tmp_path):
    writer = RunWriter(str(tmp_path / "m.data"), str(tmp_path / "m.index"), num_targets=8, flush_bytes=1 << 20)
    for i in range(10):
        writer.add(2, encode_key(i), b"", i)
    writer.close()
    sidecar = json.loads((tmp_path / "m.index").read_text())
    assert list(sidecar["targets"]) == ["2"]
    assert read_sidecar_runs(str(tmp_path / "m.index"), 5) == []


def test_mapper_with_nothing_writes_no_data_file(tmp_path):
    writer = RunWriter(str(tmp_path / "m.data"), str(tmp_path / "m.index"), num_targets=4, flush_bytes=1 << 20)
    writer.close()
    assert not (tmp_path / "m.data").exists()
    assert json.loads((tmp_path / "m.index").read_text())["targets"] == {}


def test_secondary_sort(backend):
    items = [{"k": i % 3, "t": (i * 37) % 101} for i in range(300)]
    out = (
        Dataset.from_items(items, num_shards=3)
        .group_by(lambda r: r["k"], lambda k, it: (k, [r["t"] for r in it]), sort_by=lambda r: r["t"], num_shards=2)
        .collect(cfg(backend))
    )
    assert len(out) == 3
    for _, ts in out:
        assert ts == sorted(ts)


def test_combiner_gives_same_result_with_fewer_shuffled_rows(backend):
    items = [{"k": i % 10, "n": 1} for i in range(20000)]

    def count(k, it):
        return {"k": k, "n": sum(r["n"] for r in it)}

    plain = Dataset.from_items(items, 4).group_by(lambda r: r["k"], count, num_shards=3).run(cfg(backend))
    combined = (
        Dataset.from_items(items, 4).group_by(lambda r: r["k"], count, num_shards=3, combiner=count).run(cfg(backend))
    )
    assert sorted(plain.items, key=lambda r: r["k"]) == sorted(combined.items, key=lambda r: r["k"])
    assert all(r["n"] == 2000 for r in combined.items)
    # The map side combined: far fewer rows crossed the shuffle.
    assert plain.stats[0].shuffle_rows == 20000
    assert combined.stats[0].shuffle_rows == 4 * 10


def test_none_keys_group_together(backend):
    items = [{"k": None if i % 2 else "a", "v": i} for i in range(100)]
    out = Dataset.from_items(items, 2).group_by(lambda r: r["k"], lambda k, it: (k, len(list(it)))).collect(cfg(backend))
    assert sorted(out, key=repr) == sorted([(None, 50), ("a", 50)], key=repr)


def test_empty_input(backend):
    ds = Dataset.from_items([], num_shards=3).group_by(lambda r: r, lambda k, it: k, num_shards=4)
    assert ds.num_shards == 4
    assert ds.collect(cfg(backend)) == []
    assert Dataset.from_items([]).count(cfg(backend)) == 0


def test_arbitrary_picklable_payloads(backend):
    items = [Payload(f"n{i % 5}", frozenset({i, i + 1})) for i in range(50)]
    out = Dataset.from_items(items, 2).group_by(lambda p: p.name, lambda k, it: (k, list(it))).collect(cfg(backend))
    got = [p for _, ps in out for p in ps]
    assert collections.Counter(got) == collections.Counter(items)
    assert all(isinstance(p, Payload) for _, ps in out for p in ps)


def test_non_encodable_key_gives_clear_error():
    ds = Dataset.from_items([{"a": 1}], 1).group_by(lambda r: r, lambda k, it: k)
    with pytest.raises(ShardFailed) as exc:
        ds.collect(INLINE)
    msg = str(exc.value)
    assert "cannot use a dict as a shuffle key" in msg
    assert "KeyEncodingError" in msg
    with pytest.raises(KeyEncodingError):
        encode_key([1, 2])


def test_tiny_memory_budget_multipass_external_sort(tmp_path, backend):
    items = _records(20000, 500)

    def build():
        return Dataset.from_items(items, 3).group_by(
            lambda r: r["k"], lambda k, it: (k, [r["v"] for r in it]), num_shards=2
        )

    clean = build().collect(cfg(backend))
    work = tmp_path / "work"
    tiny = cfg(backend, max_workers=2, work_dir=str(work), map_flush_bytes=4000,
                      reduce_memory_bytes=1)
    result = build().run(tiny)
    assert result.items == clean
    reduce_stage = result.stats[1]
    assert reduce_stage.spill_files > 0  # multi-pass merge really happened
    # No spill or shuffle files left behind.
    assert not any(p.is_file() for p in work.rglob("*"))


def test_skewed_input_completes_with_correct_counts(backend):
    items = [{"k": "hot" if i % 10 else f"k{i}", "v": i} for i in range(30000)]
    out = (
        Dataset.from_items(items, 4)
        .group_by(lambda r: r["k"], lambda k, it: (k, sum(1 for _ in it)), num_shards=4)
        .collect(cfg(backend, max_workers=2, map_flush_bytes=200_000, reduce_memory_bytes=2_000_000))
    )
    counts = dict(out)
    assert counts["hot"] == 27000
    assert len(counts) == 3001
    assert sum(counts.values()) == 30000


def test_int_keys_pass_through_and_fill_every_bucket(backend):
    n = 8
    out = (
        Dataset.from_items(list(range(n)) * 3, 2)
        .group_by(lambda x: x, lambda k, it: (k, len(list(it))), num_shards=n)
        .map_shard(_tag_shard)
        .collect(cfg(backend))
    )
    assert sorted(out) == [(k, (k, 3)) for k in range(n)]


def _kill_once(marker: str):
    def fn(it):
        for i, x in enumerate(it):
            if i == 500 and current_shard().index == 1 and not os.path.exists(marker):
                Path(marker).write_text(str(os.getpid()))
                os.kill(os.getpid(), signal.SIGKILL)
            yield x

    return fn


def test_kill_minus_nine_mid_shuffle_gives_identical_output(tmp_path, backend):
    items = _records(6000, 300)

    def build(fn):
        return (
            Dataset.from_items(items, 3)
            .map_shard(fn)
            .group_by(lambda r: r["k"], lambda k, it: (k, [r["v"] for r in it]), num_shards=3)
        )

    clean = build(lambda it: it).collect(cfg(backend))
    result = build(_kill_once(str(tmp_path / "killed"))).run(
        cfg(backend, max_workers=2, map_flush_bytes=5000)
    )
    assert (tmp_path / "killed").exists()
    assert result.stats[0].worker_deaths == 1
    assert result.items == clean


def _kill_and_reap_wait(pid: int) -> None:
    """SIGKILL a process and wait (bounded) until it has exited: its pidfd turns readable then."""
    fd = os.pidfd_open(pid)
    try:
        os.kill(pid, signal.SIGKILL)
        ready, _, _ = select.select([fd], [], [], 60)
        assert ready, f"worker {pid} did not exit after SIGKILL"
    finally:
        os.close(fd)


def _grouped(items, fn=lambda it: it):
    return (Dataset.from_items(items, 1).map_shard(fn)
            .group_by(lambda r: r["k"], lambda k, it: (k, sorted(r["v"] for r in it)), num_shards=4))


def test_idle_worker_killed_between_pipelines_is_replaced_on_submit():
    items = _records(3000, 97)
    clean = _grouped(items).collect(cfg("local"))
    pool = local_backend(2)
    victims = [w.proc for w in pool.workers]
    for proc in victims:  # both idle: the warm pool waits for the next pipeline
        _kill_and_reap_wait(proc.pid)
    result = _grouped(items).run(cfg("local"))
    assert result.items == clean
    assert [p.returncode for p in victims] == [-signal.SIGKILL] * 2
    assert sum(s.worker_deaths for s in result.stats) == 0  # no attempt was lost to an idle death
    assert all(w.proc.poll() is None for w in pool.workers) and {w.proc for w in pool.workers}.isdisjoint(victims)


def _kill_siblings_once(pids_file: str, marker: str):
    """A map task that kills every other worker of the pool (idle while this one-task stage runs) and
    waits until they are gone, so the next stage's submits find dead workers."""
    def fn(it):
        if not os.path.exists(marker):
            Path(marker).write_text(str(os.getpid()))
            for pid in json.loads(Path(pids_file).read_text()):
                if pid != os.getpid():
                    _kill_and_reap_wait(pid)
        yield from it

    return fn


def test_idle_worker_killed_between_stages_gives_identical_output(tmp_path):
    items = _records(3000, 97)
    clean = _grouped(items).collect(cfg("local"))
    pool = local_backend(2)
    victims = [w.proc for w in pool.workers]
    pids = tmp_path / "pids.json"
    pids.write_text(json.dumps([p.pid for p in victims]))
    result = _grouped(items, _kill_siblings_once(str(pids), str(tmp_path / "killed"))).run(cfg("local"))
    assert result.items == clean
    killer = int((tmp_path / "killed").read_text())
    assert [p.returncode for p in victims if p.pid != killer] == [-signal.SIGKILL]
    assert sum(s.worker_deaths for s in result.stats) == 0


def _kill_own_worker(attempts: Path):
    def fn(x):
        (attempts / f"a{current_shard().attempt}").write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
        return x

    return fn


def test_task_that_kills_its_worker_every_time_fails_after_the_bound(tmp_path, backend):
    attempts = tmp_path / "attempts"
    attempts.mkdir()
    with pytest.raises(WorkerDeaths) as exc:
        Dataset.from_items([1, 2, 3], 1).map(_kill_own_worker(attempts)).collect(cfg(backend, max_worker_deaths=3))
    msg = str(exc.value)
    assert "stage 0, shard 0" in msg and "died 3 times" in msg and "killed by a signal" in msg
    assert sorted(os.listdir(attempts)) == ["a0", "a1", "a2"]  # bounded: no fourth attempt
    assert Dataset.from_items([1, 2], 1).map(lambda x: x + 1).collect(cfg(backend)) == [2, 3]  # the pool lives on


def test_deterministic_crasher_aborts_after_three_attempts(tmp_path, backend):
    src = tmp_path / "data"
    src.mkdir()
    for i in range(2):
        (src / f"f{i}.jsonl").write_text("".join(json.dumps({"x": j}) + "\n" for j in range(10)))
    attempts = tmp_path / "attempts"
    attempts.mkdir()

    def explode(row):
        if row["x"] == 7 and current_shard().label.endswith("f1.jsonl"):
            (attempts / f"a{current_shard().attempt}").write_text("x")
            raise ValueError("bad row seven")
        return row

    with pytest.raises(ShardFailed) as exc:
        Dataset.from_files(str(src / "*.jsonl")).read_jsonl().map(explode).collect(cfg(backend))
    msg = str(exc.value)
    assert "failed 3 times" in msg and "bad row seven" in msg
    assert "f1.jsonl" in msg and "in explode" in msg  # the input file and the traceback
    assert sorted(os.listdir(attempts)) == ["a0", "a1", "a2"]


class Unpicklable(Exception):
    def __init__(self, lock):
        import threading

        super().__init__("holds a lock")
        self.lock = threading.Lock()


def test_non_picklable_exception_is_wrapped(backend):
    def boom(x):
        raise Unpicklable(None)

    with pytest.raises(ShardFailed) as exc:
        Dataset.from_items([1]).map(boom).collect(cfg(backend))
    assert "Unpicklable" in str(exc.value)


def _write_counted(marker: Path):
    def fn(r):
        with open(marker, "a") as f:
            f.write(".")
        return r

    return fn


def test_rerun_with_existing_sinks_skips_work(tmp_path, backend):
    marker = tmp_path / "calls"
    out = tmp_path / "out"

    def build():
        return (
            Dataset.from_items(_records(100, 10), 2)
            .map(_write_counted(marker))
            .group_by(lambda r: r["k"], lambda k, it: {"k": k, "n": len(list(it))}, num_shards=3)
            .write_parquet(str(out / "part-{shard:05d}-of-{total:05d}.parquet"), skip_existing=True)
        )

    paths = build().collect(cfg(backend))
    assert len(paths) == 3 and all(os.path.exists(p) for p in paths)
    calls = marker.read_text()
    mtimes = [os.stat(p).st_mtime_ns for p in paths]
    again = build().run(cfg(backend))
    assert again.items == paths
    assert marker.read_text() == calls  # no user code ran
    assert [os.stat(p).st_mtime_ns for p in paths] == mtimes


def _digest(paths):
    return [hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths]


def test_identical_results_across_worker_counts_and_backends(tmp_path, backend):
    items = _records(8000, 400)

    def build(tag):
        return (
            Dataset.from_items(items, 4)
            .filter(lambda r: r["v"] % 3)
            .group_by(lambda r: f"key-{r['k']:04d}", lambda k, it: {"k": k, "vs": [r["v"] for r in it]},
                      num_shards=3)
            .write_parquet(str(tmp_path / tag / "part-{shard:05d}.parquet"))
        )

    one = build("one").collect(cfg(backend, max_workers=1, map_flush_bytes=20_000))
    two = build("two").collect(cfg(backend, max_workers=2, map_flush_bytes=50_000))
    inline = build("inline").collect(INLINE)
    assert _digest(one) == _digest(two) == _digest(inline)
    rows = pq.read_table(one[0]).to_pylist()
    assert [r["k"] for r in rows] == sorted(r["k"] for r in rows)


def test_deduplicate_keeps_first_in_input_order(backend):
    items = [{"id": f"{i % 50:03d}", "pos": i} for i in range(200)]
    out = Dataset.from_items(items, 4).deduplicate(lambda r: r["id"], num_shards=2).collect(cfg(backend))
    assert len(out) == 50
    assert all(r["pos"] < 50 for r in out)


def test_sorted_merge_join_left_and_inner_and_errors(backend):
    left = Dataset.from_items([{"id": f"{i:03d}"} for i in range(40)], 2).group_by(
        lambda r: r["id"], lambda k, it: next(iter(it)), num_shards=3)
    right = Dataset.from_items([{"id": f"{i:03d}", "mark": True} for i in range(0, 40, 4)], 1).group_by(
        lambda r: r["id"], lambda k, it: next(iter(it)), num_shards=3)
    joined = left.sorted_merge_join(right, left_key=lambda r: r["id"], how="left").collect(cfg(backend))
    assert len(joined) == 40
    assert sum(1 for _, r in joined if r) == 10
    inner = left.sorted_merge_join(right, left_key=lambda r: r["id"]).collect(cfg(backend))
    assert sorted(l["id"] for l, _ in inner) == [f"{i:03d}" for i in range(0, 40, 4)]

    unsorted = Dataset.from_shards([[{"id": "b"}, {"id": "a"}]])
    with pytest.raises(ShardFailed, match="not sorted by its key"):
        unsorted.sorted_merge_join(Dataset.from_shards([[{"id": "a"}]]), left_key=lambda r: r["id"]).collect(INLINE)
    with pytest.raises(PlanError, match="co-partitioned"):
        left.sorted_merge_join(Dataset.from_items([], 2), left_key=lambda r: r["id"]).collect(INLINE)


def test_from_files_lists_sizes_skips_dotfiles_and_reads_compressed(tmp_path, backend):
    rows = [{"i": i, "t": "x" * i} for i in range(20)]
    body = "".join(json.dumps(r) + "\n" for r in rows).encode()
    (tmp_path / "a.jsonl").write_bytes(body)
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(body))
    (tmp_path / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(body))
    (tmp_path / ".hidden.jsonl").write_bytes(body)
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "d.jsonl").write_bytes(body)
    files = list_files(str(tmp_path / "**"))
    assert [Path(f.path).name for f in files] == ["a.jsonl", "b.jsonl.gz", "c.jsonl.zst"]
    assert files[0].size == len(body)
    got = Dataset.from_files(str(tmp_path / "*.jsonl*")).read_jsonl().collect(cfg(backend))
    assert sorted(r["i"] for r in got) == sorted(list(range(20)) * 3)
    with pytest.raises(FileNotFoundError, match="no files match"):
        Dataset.from_files(str(tmp_path / "*.parquet"))


def test_malformed_jsonl_names_file_and_line(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"a": 1}\n{"a": \n')
    with pytest.raises(ShardFailed, match=r"bad.jsonl:2: malformed JSON"):
        Dataset.from_files(str(tmp_path / "bad.jsonl")).read_jsonl().collect(INLINE)


def test_counters_sum_over_accepted_attempts_only(tmp_path, backend):
    flag = tmp_path / "failed-once"

    def flaky(x):
        counters.increment("seen")
        if x == 3 and not flag.exists():
            flag.write_text("1")
            raise RuntimeError("transient")
        return x

    result = Dataset.from_items(range(10), 2).map(flaky).run(cfg(backend))
    assert sorted(result.items) == list(range(10))
    assert result.counters["seen"] == 10
    assert result.stats[0].retries == 1


def test_stage_checkpoints_resume_after_failure(tmp_path, backend):
    work = tmp_path / "work"
    gate = tmp_path / "gate"
    calls = tmp_path / "calls"

    def final(r):
        if not gate.exists():
            raise RuntimeError("driver interrupted")
        return r

    def build():
        return (
            Dataset.from_items(_records(200, 20), 2)
            .map(_write_counted(calls))
            .group_by(lambda r: r["k"], lambda k, it: (k, len(list(it))), num_shards=2)
            .map(final)
        )

    conf = cfg(backend, work_dir=str(work), max_attempts=1)
    with pytest.raises(ShardFailed):
        build().collect(conf)
    first_calls = len(calls.read_text())
    gate.write_text("open")
    result = build().run(conf)
    assert result.stats[0].skipped  # the map stage came from its checkpoint
    assert len(calls.read_text()) == first_calls
    assert sorted(result.items) == [(k, 10) for k in range(20)]


def _fails_once_shard_0_wrote(work: Path, gate: Path):
    def fn(x):
        if x == 1 and not gate.exists():  # fails, once shard 0's shuffle file is written (bounded wait)
            deadline = time.monotonic() + 120
            while not any(work.rglob("map-00000*.index")) and time.monotonic() < deadline:
                time.sleep(0.02)
            raise RuntimeError("shard 1 fails")
        return x
    return fn


def test_a_rerun_on_a_work_dir_writes_its_attempts_under_names_of_its_own(tmp_path, backend):
    """Each call's attempt files carry a tag of their own (`TaskSpec.attempt_tag`), so an attempt that a
    failed call left running (on Ray it runs to its end: `RayBackend.cancel_all`) never writes the name
    the rerun's attempt of the same shard writes. Here the failed call's shuffle file of shard 0 is still
    in the stage dir when the rerun writes its own, and the rerun's clean-up removes it."""
    work, gate = tmp_path / "work", tmp_path / "gate"

    def build():
        return (Dataset.from_items([0, 1], 2).map(_fails_once_shard_0_wrote(work, gate))
                .group_by(lambda x: x % 2, lambda k, it: (k, sorted(it)), num_shards=2))

    conf = cfg(backend, work_dir=str(work), max_attempts=1, keep_work_dir=True)
    with pytest.raises(ShardFailed, match="shard 1 fails"):
        build().collect(conf)
    left = {p.name for p in work.rglob("map-00000*")}
    assert left, "the failed call left no file of shard 0"
    gate.write_text("")
    assert sorted(build().collect(conf)) == [(0, [0]), (1, [1])]
    [marker] = work.rglob("stage-000/_SUCCESS.json")
    accepted = {Path(p).name for p in json.loads(marker.read_text())["indexes"]}
    assert len(accepted) == 2 and not accepted & left, (accepted, left)
    assert not {p.name for p in work.rglob("map-00000*")} & left  # the failed call's files are cleaned up


def _slow_or_failing(marks: Path):
    def fn(x):
        if x == 0:  # the slow shard: says which process runs it, then waits for the test's gate (bounded)
            (marks / f"slow-{os.getpid()}").write_text("")
            deadline = time.monotonic() + 120
            while not (marks / "gate").exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            return x
        deadline = time.monotonic() + 120  # the other fails, once the slow one runs (bounded)
        while not any(marks.glob("slow-*")) and time.monotonic() < deadline:
            time.sleep(0.02)
        raise RuntimeError("this shard fails")
    return fn


def test_a_failed_pipeline_raises_at_once_and_the_next_loses_no_attempt(tmp_path, backend):
    """A shard that fails for good raises its error while another attempt still runs, without waiting for
    it (the local pool kills that worker; on Ray it runs to its end, its result dropped: see
    `RayBackend.cancel_all`), and the next pipeline on the same workers loses none of its attempts (a
    forced Ray cancel used to kill a worker that had moved on to the next pipeline's task)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    try:
        with pytest.raises(ShardFailed, match="this shard fails"):
            Dataset.from_items([0, 1], 2).map(_slow_or_failing(marks)).collect(cfg(backend, max_attempts=1))
        [slow] = [int(p.name.split("-")[1]) for p in marks.glob("slow-*")]
        if backend == "local":
            assert not _running(slow), f"the slow shard's worker {slow} still runs after the pipeline failed"
    finally:
        (marks / "gate").write_text("")
    again = Dataset.from_items(list(range(8)), 4).map(lambda x: x * 2).run(cfg(backend))
    assert sorted(again.items) == [x * 2 for x in range(8)]
    assert again.stats[0].worker_deaths == 0


_FAILING_PIPELINES = """
import os, sys, tempfile
import ray
from datakit.shuffle import Dataset, ExecConfig, ShardFailed

ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=100 * 2**20)


def pipeline(fail):
    def final(kv):
        if fail:
            raise RuntimeError("this shard fails")
        return kv
    rows = [{"k": i % 20, "v": i} for i in range(200)]
    return (Dataset.from_items(rows, 2).map(lambda r: r).group_by(lambda r: r["k"], lambda k, it: (k, len(list(it))),
            num_shards=2).map(final))


for _ in range(int(sys.argv[1])):  # as a resumed run does: a failed pipeline, then the same one passing
    conf = ExecConfig(backend="ray", max_workers=2, max_attempts=1, work_dir=tempfile.mkdtemp(dir="."))
    try:
        pipeline(True).collect(conf)
    except ShardFailed:
        pass
    assert sorted(pipeline(False).collect(conf)) == [(k, 10) for k in range(20)]
print("survived")
"""


@pytest.mark.slow
def test_a_ray_driver_survives_many_failed_pipelines(tmp_path):
    """Ray 2.60's `ray.cancel`, raced by the attempt's own completion, fails a check in the driver
    ("Tried to complete task that was not pending") and ends the driver process with exit code 1: seen
    here about once in a hundred failed pipelines, it ended a whole test session with no summary. A
    failed pipeline cancels nothing on Ray now; 200 of them, each followed by the same pipeline passing (as
    in test_stage_checkpoints_resume_after_failure, where it was seen), leave their own driver alive."""
    pytest.importorskip("ray", reason="the ray extra is not installed")
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-c", _FAILING_PIPELINES, "200"], capture_output=True, text=True,
                         timeout=400, cwd=tmp_path, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert res.returncode == 0 and res.stdout.strip().endswith("survived"), res.stderr[-3000:]
    assert "Check failed" not in res.stderr
    assert "worker died" not in res.stderr, res.stderr[-3000:]  # no attempt of a passing pipeline was killed


def test_explain_shows_fused_stages():
    ds = (
        Dataset.from_items(range(10), 2)
        .map(lambda x: x)
        .filter(lambda x: x)
        .group_by(lambda x: x % 2, lambda k, it: k, num_shards=2)
        .map(str)
    )
    text = ds.explain()
    assert "stage 0: 2 tasks" in text and "map(<lambda>) -> filter(<lambda>)" in text
    assert "stage 1: 2 tasks: read shuffle of stage 0" in text


def test_task_peak_rss_is_the_tasks_own_peak():
    """A task's peak RSS counts what it allocated at its height, and the next task starts from a reset mark
    (the kernel's VmHWM on Linux, sampling elsewhere), not from the worker's lifetime peak."""
    import time

    from datakit.shuffle import tasks

    with tasks._PeakRSS() as big:
        block = bytearray(160 << 20)
        block[::4096] = b"x" * len(block[::4096])  # touch every page
        if not tasks._kernel_peak_works():  # sampling: hold the block until a sample has seen it (bounded)
            deadline = time.monotonic() + 60
            while big.peak < tasks._rss() - (16 << 20) and time.monotonic() < deadline:
                time.sleep(big.every)
        del block
    with tasks._PeakRSS() as small:
        pass
    assert big.peak - small.peak > 120 << 20


_ORPHAN_DRIVER = """
import os, sys, time
from datakit.core import fork_safety
from datakit.shuffle import Dataset, ExecConfig

if sys.argv[2] == "claimed":  # as `datakit run` is: its zygote is a fork of this process
    fork_safety.claim_process()

def task(x, out=sys.argv[1]):
    with open(os.path.join(out, f"worker-{os.getpid()}"), "w") as f:
        f.write("busy")
    time.sleep(600)
    return x

Dataset.from_items([1, 2], num_shards=2).map(task).collect(ExecConfig(backend="local", max_workers=2))
"""


@pytest.mark.parametrize("driver", ["claimed", "unclaimed"])
def test_workers_do_not_outlive_a_killed_driver(tmp_path, driver):
    """A driver killed mid-task (SIGKILL: no atexit, no cleanup) takes its busy workers with it: they run
    in their own session, so only their watch on the driver ends them (whether their zygote is a fresh
    interpreter or a fork of the driver)."""
    import subprocess
    import sys
    import time

    script = tmp_path / "driver.py"
    script.write_text(_ORPHAN_DRIVER)
    driver = subprocess.Popen([sys.executable, str(script), str(tmp_path), driver], env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("worker-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    pids = [int(p.name.split("-")[1]) for p in tmp_path.glob("worker-*")]
    assert len(pids) == 2, "the workers never started their tasks"
    driver.kill()
    driver.wait()

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        with open(f"/proc/{pid}/stat") as f:  # a zombie not yet reaped by init is gone too
            return f.read().split(") ")[-1][0] != "Z"

    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [p for p in pids if alive(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    assert not left, f"workers {left} outlived their driver"
