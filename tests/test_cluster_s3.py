"""Scale-out, proven on one machine: a 3-node Ray cluster and an S3-protocol store on loopback.

The store is moto's S3 server (tests/helpers_s3.py) with a request log; the cluster is a head plus two
worker nodes, each its own raylet, driven by tests/cluster_s3_driver.py in a subprocess (it owns its
cluster, so the session's single-node Ray fixture is never disturbed, and it can be killed like a lost
driver). A whole `datakit run` reads its sources from the store and writes everything there; its data
files must be byte-identical to the local backend's on local disk, also when a worker node's raylet is
SIGKILLed mid-shuffle and when the driver is killed and rerun. The request log shows how the engine
uses the store: one listing call with sizes, reducers GET only byte ranges their sidecars name.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("s3fs", reason="the s3 extra is not installed")
pytest.importorskip("moto", reason="moto[server] (dev extra) is not installed")
pytest.importorskip("ray", reason="the ray extra is not installed")

import fsspec  # noqa: E402

import datakit  # noqa: E402
from datakit.core import fsio  # noqa: E402

from helpers_s3 import S3Server, restore_env, set_env  # noqa: E402

HERE = Path(__file__).parent
BUCKET = "datakit-test"
DATA_SUFFIXES = (".parquet", ".npy")


# ------------------------------------------------------------------ fixtures and helpers
RAY_TEMPS: list[str] = []  # Ray session dirs the drivers used (short /tmp paths: Ray's sockets live there)


@pytest.fixture(scope="module", autouse=True)
def _remove_ray_temps():
    yield
    for d in RAY_TEMPS:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def store():
    """moto's S3 on a free loopback port, with this process's environment pointing at it."""
    srv = S3Server()
    srv.start()
    old = set_env(srv.env())
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    fs.mkdir(BUCKET)
    yield srv
    restore_env(old)
    srv.stop()


def _s3fs():
    return fsspec.filesystem("s3", use_listings_cache=False, skip_instance_cache=True)


def _corpus(tmp: Path) -> Path:
    """A small real corpus: a few dozen text files with repeats, so dedup and shuffles have work."""
    import sysconfig

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    src = tmp / "corpus"
    for sub in ("json", "email"):
        (src / sub).mkdir(parents=True)
        for p in sorted((stdlib / sub).glob("*.py")):
            (src / sub / p.name).write_bytes(p.read_bytes())
    (src / "email" / "copy_of_json_decoder.py").write_bytes((stdlib / "json" / "decoder.py").read_bytes())
    return src


def _manifest(src_root: str, prefix: str) -> dict:
    return {
        "prefix": prefix,
        "sources": [{"name": "json", "uri": f"{src_root}/json/*.py", "format": "text"},
                    {"name": "email", "uri": f"{src_root}/email/*.py", "format": "text"}],
        "tokenize": {"vocab_size": 512},
        "train": {"steps": 4, "warmup_steps": 1, "seq_len": 32, "batch_size": 2, "d_model": 16,
                  "n_layers": 1, "n_heads": 2, "d_ff": 32, "checkpoint_every": 2},
    }


def _upload(local: Path, url: str) -> None:
    fs = _s3fs()
    for p in sorted(local.rglob("*")):
        if p.is_file():
            fs.put_file(str(p), f"{url}/{p.relative_to(local).as_posix()}")


def _data_files(fs, root: str) -> dict[str, bytes]:
    base = fs._strip_protocol(root).rstrip("/")
    out = {}
    for path in fs.find(base):
        if path.endswith(DATA_SUFFIXES):
            with fs.open(path, "rb") as f:
                out[path[len(base):].lstrip("/")] = f.read()
    return out


def _assert_same_outputs(remote: dict, local: dict) -> int:
    """Every data file of every step both runs share is byte-identical; returns how many were compared."""
    s3, disk = _s3fs(), fsspec.filesystem("file")
    by_name = {s["name"]: s for s in local["steps"]}
    compared = 0
    for step in remote["steps"]:
        if step["name"] not in by_name:
            assert step["name"].startswith("download"), step["name"]  # remote sources are fetched first
            continue
        assert step["output"].startswith("s3://"), step
        ours, theirs = _data_files(s3, step["output"]), _data_files(disk, by_name[step["name"]]["output"])
        assert sorted(ours) == sorted(theirs), step["name"]
        for rel in ours:
            assert ours[rel] == theirs[rel], f"{step['name']}: {rel} differs between the cluster+S3 run and local"
        compared += len(ours)
    return compared


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory):
    """The same manifest on the local backend, local disk: the bytes every cluster run must reproduce."""
    tmp = tmp_path_factory.mktemp("local")
    src = _corpus(tmp)
    summary = datakit.run(datakit.manifest_from_dict(_manifest(str(src), str(tmp / "out"))), backend="local",
                          workers=2)
    assert summary.ok, summary.to_dict()
    return src, summary.to_dict()


def _driver(tmp: Path, store: S3Server, prefix: str, src_url: str, kill_node_after: str | None = None,
            background: bool = False):
    """Run tests/cluster_s3_driver.py with a fresh cwd, HOME and TMPDIR (to see what it leaves locally)."""
    run_dir = tmp / f"driver-{uuid.uuid4().hex[:6]}"
    for d in ("cwd", "home", "tmp"):
        (run_dir / d).mkdir(parents=True)
    ray_temp = f"/tmp/rc-{uuid.uuid4().hex[:8]}"  # Ray's own session dir (sockets, logs): Ray's, not ours
    RAY_TEMPS.append(ray_temp)
    os.makedirs(f"{ray_temp}/ray")  # RAY_TMPDIR: where Ray notes the current cluster
    cfg = {"manifest": _manifest(src_url, prefix), "prefix": prefix, "result": str(run_dir / "result.json"),
           "ray_temp": ray_temp, "kill_node_after": kill_node_after}
    (run_dir / "config.json").write_text(json.dumps(cfg))
    # not the session's own Ray (tests/conftest.py): ray.init exports RAY_ADDRESS, which children inherit
    inherited = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_NAMESPACE")}
    env = {**inherited, **store.env(), "HOME": str(run_dir / "home"), "TMPDIR": str(run_dir / "tmp"),
           "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE)]), "DATAKIT_STORE_RETRY_S": "60",
           "RAY_USAGE_STATS_ENABLED": "0", "RAY_TMPDIR": ray_temp, "MPLCONFIGDIR": str(run_dir / "tmp" / "mpl")}
    cmd = [sys.executable, str(HERE / "cluster_s3_driver.py"), str(run_dir / "config.json")]
    with open(run_dir / "driver.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=run_dir / "cwd", env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    if background:
        return proc, run_dir
    proc.wait(timeout=480)
    assert proc.returncode == 0, (run_dir / "driver.log").read_text()[-6000:]
    return json.loads((run_dir / "result.json").read_text()), run_dir


def _leftovers(run_dir: Path) -> list[str]:
    """Files the run left in its cwd, HOME and TMPDIR (matplotlib's font cache aside)."""
    left = []
    for d in ("cwd", "home", "tmp"):
        for p in (run_dir / d).rglob("*"):
            if p.is_file() and "mpl" not in p.relative_to(run_dir).parts:
                left.append(str(p.relative_to(run_dir)))
    return left


# ------------------------------------------------------------------ the tests
@pytest.mark.slow
def test_three_node_cluster_on_s3_matches_local_backend_on_disk(store, local_reference, tmp_path):
    src, local = local_reference
    run_id = uuid.uuid4().hex[:8]
    src_url, prefix = f"s3://{BUCKET}/{run_id}/src", f"s3://{BUCKET}/{run_id}/out"
    _upload(src, src_url)
    store.clear_log()
    result, run_dir = _driver(tmp_path, store, prefix, src_url)

    assert sorted(result["tasks_per_node"]) == ["node_a", "node_b", "node_head"], result["tasks_per_node"]
    assert _assert_same_outputs(result["summary"], local) > 20
    assert _leftovers(run_dir) == []  # nothing written locally but temporary spill, and that is cleaned up
    train = result["summary"]["steps"][-1]
    assert train["name"] == "train" and _s3fs().exists(f"{train['output']}/checkpoints/step-00000004.npz")
    _assert_ranged_shuffle_reads(store.requests(), prefix)
    log = store.requests()
    print("cluster+s3 run:", json.dumps({  # figures for the runbook (pytest -s)
        "attempts_per_node": result["tasks_per_node"], "requests": len(log),
        "by_method": {m: sum(1 for r in log if r.method == m) for m in ("GET", "PUT", "HEAD", "DELETE", "POST")},
        "lists": sum(1 for r in log if "list-type=2" in r.query),
        "shuffle_range_gets": sum(1 for r in log if r.method == "GET" and r.path.endswith(".data")),
        "shuffle_range_bytes": sum(r.sent for r in log if r.method == "GET" and r.path.endswith(".data")),
        "sidecar_gets": sum(1 for r in log if r.method == "GET" and r.path.endswith(".index"))}))


def _assert_ranged_shuffle_reads(log, prefix: str) -> None:
    """Every GET of a shuffle data file is a Range inside one run its sidecar names (sidecars as the store
    served them: the run deletes its shuffle files when it succeeds); each byte is fetched at most once."""
    bucket_path = prefix[len("s3://"):]
    shuffle = [r for r in log if r.path.startswith(f"/{bucket_path}/.shuffle/")]
    sidecars = {r.path[: -len(".index")]: json.loads(r.body) for r in shuffle if r.body is not None and r.status == 200}
    gets = [r for r in shuffle if r.method == "GET" and r.path.endswith(".data")]
    assert gets, "the run did no shuffle reads"
    fetched: dict[str, int] = {}
    for r in gets:
        sidecar = sidecars[r.path[: -len(".data")]]
        runs = [(o, o + n) for ranges in sidecar["targets"].values() for o, n, *_ in ranges]
        assert r.range and r.range.startswith("bytes="), f"GET {r.path} without a Range"
        lo, hi = (int(x) for x in r.range[len("bytes="):].split("-"))
        assert any(o <= lo and hi < e for o, e in runs), f"GET {r.path} {r.range} is not inside one run"
        assert r.sent == hi - lo + 1
        fetched[r.path] = fetched.get(r.path, 0) + r.sent
    for path, n in fetched.items():
        total = sum(e - o for rs in sidecars[path[: -len(".data")]]["targets"].values() for o, e in
                    ((o, o + ln) for o, ln, *_ in rs))
        assert n <= total, f"{path}: {n} bytes fetched, more than its {total} bytes of runs"
    assert _s3fs().find(f"{prefix}/.shuffle/") == []  # a successful run leaves no shuffle file in the store


def _killtree(proc: subprocess.Popen) -> None:
    """SIGKILL a driver and every process it started (its Ray head and worker nodes), by pid."""
    import psutil

    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    proc.kill()
    for p in family:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    proc.wait(timeout=30)
    psutil.wait_procs(family, timeout=30)


@pytest.mark.slow
def test_worker_node_killed_mid_shuffle_completes_with_identical_outputs(store, local_reference, tmp_path):
    src, local = local_reference
    run_id = uuid.uuid4().hex[:8]
    src_url, prefix = f"s3://{BUCKET}/{run_id}/src", f"s3://{BUCKET}/{run_id}/out"
    _upload(src, src_url)
    first_map_output = f"{BUCKET}/{run_id}/out/.shuffle/plan-*/stage-*/map-*.index"
    result, _ = _driver(tmp_path, store, prefix, src_url, kill_node_after=first_map_output)

    assert result["killed"].get("raylet_gone"), result["killed"]  # node A's raylet was SIGKILLed mid-shuffle
    assert result["killed"]["running"], result["killed"]  # ... while it held an attempt (seen with the node frozen)
    died = [e for e in result["retries"] if e.get("cause") == "worker died"]
    assert died, f"no attempt was lost with the node: {result['retries']}"  # it held a running attempt
    assert result["summary"]["status"] == "succeeded"
    assert _assert_same_outputs(result["summary"], local) > 20


@pytest.mark.slow
def test_killed_driver_rerun_resumes_from_checkpoints_in_the_store(store, local_reference, tmp_path):
    src, local = local_reference
    run_id = uuid.uuid4().hex[:8]
    src_url, prefix = f"s3://{BUCKET}/{run_id}/src", f"s3://{BUCKET}/{run_id}/out"
    _upload(src, src_url)
    proc, first_run = _driver(tmp_path, store, prefix, src_url, background=True)
    s3 = _s3fs()
    done: set[str] = set()
    try:
        deadline = time.monotonic() + 300
        while len(done) < 4 and proc.poll() is None and time.monotonic() < deadline:
            done |= _built_steps(s3, f"{BUCKET}/{run_id}/out")
            time.sleep(0.2)
    finally:
        _killtree(proc)  # the driver dies mid-run: no clean shutdown, no final markers
    assert len(done) >= 4, (f"the driver finished or stalled before 4 steps were built: {done}\n"
                            + (first_run / "driver.log").read_text()[-4000:])

    result, _ = _driver(tmp_path, store, prefix, src_url)
    steps = {s["output"]: s for s in result["summary"]["steps"]}
    assert all(steps[d]["status"] == "skipped" for d in done), {d: (steps[d]["status"], steps[d]["reason"])
                                                                 for d in done}
    assert any(s["status"] == "succeeded" for s in steps.values())  # the rest was built by the rerun
    assert _assert_same_outputs(result["summary"], local) > 20


def _built_steps(s3, out: str) -> set[str]:
    """The step folders under ``out`` whose status marker says SUCCESS, polled while a driver runs: the
    prefix may not exist yet, and a marker may be listed and then replaced, so a missing path is "not yet"."""
    built = set()
    try:
        statuses = s3.glob(f"{out}/*/.status")
    except FileNotFoundError:
        return built
    for status in statuses:
        try:
            if json.loads(s3.cat_file(status)).get("status") == "SUCCESS":
                built.add(f"s3://{status.rsplit('/', 1)[0]}")
        except FileNotFoundError:
            pass
    return built


def test_listing_is_one_request_with_sizes_and_no_stat(store):
    """Both listers (the engine's and the sources') get names and sizes from one LIST call."""
    from datakit.core.uris import list_source_files
    from datakit.shuffle import list_files

    root = f"{BUCKET}/listing-{uuid.uuid4().hex[:8]}"
    s3 = _s3fs()
    for i in range(40):
        s3.pipe_file(f"{root}/part-{i:03d}.jsonl", b"x" * (i + 1))
    for lister in (lambda: list_files(f"s3://{root}/*.jsonl"), lambda: list_source_files(f"s3://{root}/*.jsonl")):
        fsio.fs_for(f"s3://{root}").invalidate_cache()  # the instance the listers use
        store.clear_log()
        files = lister()
        assert [f.size for f in files] == list(range(1, 41))
        logged = store.requests_once(lambda log: any(r.method in ("GET", "HEAD") for r in log))
        reads = [r for r in logged if r.method in ("GET", "HEAD")]  # a late-logged PUT may trail in
        assert [(r.method, "list-type=2" in r.query) for r in reads] == [("GET", True)]


def test_store_down_for_seconds_is_retried_with_backoff(store, tmp_path, monkeypatch):
    """The store refuses connections (its server is stopped) while a shuffle runs, then comes back on the
    same port: every read, write and listing is retried and the result is the one an undisturbed run gives."""
    from datakit.shuffle import Dataset, ExecConfig

    monkeypatch.setenv("DATAKIT_STORE_RETRY_S", "60")
    work = f"s3://{BUCKET}/down-{uuid.uuid4().hex[:8]}"
    rows = [{"k": i % 7, "v": i} for i in range(500)]

    def job(work_dir: str) -> list:
        return (Dataset.from_items(rows, num_shards=4)
                .group_by(lambda r: r["k"], lambda k, rs: {"k": k, "n": sum(1 for _ in rs)}, num_shards=3)
                .collect(ExecConfig(backend="inline", work_dir=work_dir)))

    expected = job(f"{work}/calm")
    store.stop()
    restart = __import__("threading").Timer(3.0, store.start)
    restart.start()
    t0 = time.monotonic()
    try:
        got = job(f"{work}/stormy")
    finally:
        restart.join()
    assert time.monotonic() - t0 >= 3.0  # it waited for the store instead of failing
    assert sorted(got, key=lambda r: r["k"]) == sorted(expected, key=lambda r: r["k"])


def test_store_that_stays_down_fails_naming_the_store_and_what_to_do(store, monkeypatch):
    monkeypatch.setenv("DATAKIT_STORE_RETRY_S", "2")
    url = f"s3://{BUCKET}/gone/part-00000.parquet"
    store.stop()
    try:
        with pytest.raises(fsio.StoreUnavailable) as err:
            fsio.atomic_write_bytes(url, b"data")
    finally:
        store.start()
    msg = str(err.value)
    assert url in msg and store.endpoint in msg
    assert "is up and reachable" in msg and "rerun the same command" in msg
    assert not _s3fs().exists(url)  # nothing half-written


def test_store_lost_while_tasks_run_fails_the_stage_once_without_retrying_tasks(store, monkeypatch, caplog):
    """Workers whose store goes away mid-stage spend the retry budget once: the stage fails with the one
    line that names the store, instead of every task being retried (and waiting out the budget) again."""
    import logging
    import threading

    from datakit.shuffle import Dataset, ExecConfig

    monkeypatch.setenv("DATAKIT_STORE_RETRY_S", "2")
    rows = [{"k": i % 7, "v": i} for i in range(2000)]
    job = (Dataset.from_items(rows, num_shards=4).map(lambda r: (time.sleep(0.005), r)[1])
           .group_by(lambda r: r["k"], lambda k, rs: {"k": k, "n": sum(1 for _ in rs)}, num_shards=3))
    stop = threading.Timer(2.0, store.stop)  # while the map tasks run (about 5 s each)
    stop.start()
    try:
        with caplog.at_level(logging.INFO, logger="datakit.shuffle"), pytest.raises(fsio.StoreUnavailable) as err:
            job.collect(ExecConfig(backend="local", max_workers=2,
                                   work_dir=f"s3://{BUCKET}/lost-{uuid.uuid4().hex[:8]}"))
    finally:
        stop.join()
        store.start()
    msg = str(err.value)
    assert store.endpoint in msg and "\n" not in msg and "rerun the same command" in msg
    assert not [r for r in caplog.records if "retrying (attempt" in r.getMessage()]


def test_cost_model_finds_the_coordinator_limit_at_100_tb_and_sizes_that_clear_it(tmp_path):
    """scripts/cost_model.py: nothing binds at 1 TB; at 100 TB the sidecar reads (M x R x R) do, and the
    shard and reducer sizes it proposes bring them under 10% of the shuffle's data. Per-core cost comes
    from a `python -m benchmarks.pipeline` report when one is given."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("cost_model", HERE.parent / "scripts" / "cost_model.py")
    cm = importlib.util.module_from_spec(spec)
    sys.modules["cost_model"] = cm  # dataclasses look their module up while the class is built
    spec.loader.exec_module(cm)
    fig, cl = cm.Figures(), cm.Cluster()
    assert cm.plan(1 * cm.TB, fig, cl)["limits"] == ["none reached"]
    big = cm.plan(100 * cm.TB, fig, cl)
    assert big["per_shuffle"]["sidecar_bytes_read"] > big["per_shuffle"]["shuffle_bytes"]
    shard, reducer = cm.suggested_sizes(100 * cm.TB, fig, cl)
    fixed = cm.plan(100 * cm.TB, fig, cm.Cluster(shard_bytes=round(shard), reducer_bytes=round(reducer)))
    assert fixed["limits"] == ["none reached"]
    assert fixed["per_shuffle"]["sidecar_gets"] < big["per_shuffle"]["sidecar_gets"] / 100
    report = tmp_path / "pipeline.json"
    report.write_text(json.dumps({"corpus": {"mb_text": 100.0, "docs": 25_000},
                                  "datakit": {"projection": {"cpu_s_per_mb": 0.92}}}))
    measured = cm.figures_from_benchmark(str(report), fig)
    assert (measured.cpu_s_per_mb, measured.doc_bytes) == (0.92, 4000)
    assert cm.plan(cm.TB, measured, cl)["core_hours_pipeline"] == 2 * cm.plan(cm.TB, fig, cl)["core_hours_pipeline"]
