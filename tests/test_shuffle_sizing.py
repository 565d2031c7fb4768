"""The small-job rule (datakit/shuffle/sizing.py): a job reading few bytes on the local backend runs
inline; every other job keeps its config. Outputs never depend on the backend (test_shuffle_engine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from datakit.shuffle import SMALL_JOB_BYTES, Dataset, ExecConfig, backends, small_job_config, small_job_config_for_files


@pytest.fixture(autouse=True)
def no_warm_pool():
    """Each test starts with no local pool in this process (an earlier test may have left one warm)."""
    backends._close_pools()
    yield
    backends._close_pools()


def test_a_small_local_job_runs_inline_with_the_rest_of_its_config():
    cfg = ExecConfig(max_workers=3, label="step")
    small = small_job_config(cfg, SMALL_JOB_BYTES)
    assert (small.backend, small.max_workers, small.label) == ("inline", 3, "step")
    assert small_job_config(None, 0).backend == "inline"
    assert cfg.backend == "local"  # the caller's config is not changed


def test_a_big_job_or_another_backend_keeps_its_config():
    cfg = ExecConfig()
    assert small_job_config(cfg, SMALL_JOB_BYTES + 1) is cfg
    assert small_job_config(cfg, 100, limit=99) is cfg
    ray = ExecConfig(backend="ray")
    assert small_job_config(ray, 0) is ray
    assert small_job_config(None, SMALL_JOB_BYTES + 1) is None


def test_files_are_sized_until_they_pass_the_limit(tmp_path: Path):
    paths = []
    for i in range(3):
        p = tmp_path / f"f{i}"
        p.write_bytes(b"x" * 100)
        paths.append(str(p))
    assert small_job_config_for_files(None, paths, limit=300).backend == "inline"
    cfg = ExecConfig()
    # over the limit after two files: the third (missing) file is never asked for its size
    assert small_job_config_for_files(cfg, [*paths[:2], str(tmp_path / "missing")], limit=150) is cfg
    ray = ExecConfig(backend="ray")
    assert small_job_config_for_files(ray, [str(tmp_path / "missing")]) is ray  # not sized at all


def test_an_inline_small_job_gives_what_the_pool_gives():
    ds = Dataset.from_items(list(range(40)), num_shards=4).map(lambda x: x * x)
    assert ds.collect(small_job_config(ExecConfig(max_workers=2), 1)) == ds.collect(ExecConfig(max_workers=2))


def test_a_warm_pool_takes_small_jobs_too():
    """Once this process runs a local pool, a small job costs nothing to start there: it keeps its config."""
    cfg = ExecConfig(max_workers=2)
    assert small_job_config(cfg, 1).backend == "inline"
    Dataset.from_items([1, 2], num_shards=2).map(lambda x: x).collect(cfg)  # starts the pool
    assert small_job_config(cfg, 1) is cfg
    assert small_job_config(ExecConfig(max_workers=3), 1).backend == "inline"  # another size: none warm
