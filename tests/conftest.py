"""Shared fixtures: the engine conformance suite runs on every backend."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray instance with 2 CPUs for the whole session (starting one costs seconds)."""
    ray = pytest.importorskip("ray", reason="the ray extra is not installed")
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=200 * 2**20,
                 runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in __import__("sys").path if p)}})
    yield ray
    ray.shutdown()


@pytest.fixture(params=["local", pytest.param("ray", marks=pytest.mark.slow)])
def backend(request) -> str:
    if request.param == "ray":
        request.getfixturevalue("ray_cluster")
    return request.param


def pytest_collection_modifyitems(config, items):
    """The 3-node cluster tests (tests/test_cluster_s3.py) start their own Ray cluster in a subprocess;
    with this session's local Ray already up (ray.init above) their driver was seen to fail to reach its
    own GCS, so they run first, before any test starts the session's Ray. Otherwise the order is kept."""
    items.sort(key=lambda item: 0 if item.nodeid.startswith("tests/test_cluster_s3.py") else 1)
