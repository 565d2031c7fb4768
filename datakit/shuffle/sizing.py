"""Where a small job runs: in the calling process rather than on a freshly started local worker pool.

Starting the local backend's pool costs an interpreter and its imports (the zygote that workers are
forked from: pyarrow, numpy, the engine, about 0.22 CPU-s) and each worker's own first imports of its
tasks' modules, more than reading and rewriting a few MiB costs. An incremental run's steps
mostly compute a handful of units (one edited file of 58), so there the pool would be most of the
step's CPU. A job that reads at most ``limit`` bytes on the local backend therefore runs inline, in
the step's own process. Outputs never depend on the backend (tests/test_shuffle_engine.py checks
local and inline write the same bytes), so this is a cost decision only.

Why the limit is small: an inline task runs in the driver, so a worker death there (out of memory, a
crash in native code) is the run's death, not a retried attempt, and the driver cannot overlap tasks.
Other backends (ray, an explicit inline) and jobs over the limit are left as they are, and so is a
job when this process already runs a warm local pool (a job on it starts nothing, and runs beside others).
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from datakit.core import fsio

from .backends import pool_is_warm
from .executor import ExecConfig

# A job reading at most this many stored bytes runs inline on the local backend (about 0.3 CPU-s of
# reading, against about 0.35 CPU-s for a pool of two: the zygote, its forks and the first tasks, measured
# as a trivial job's local run less its inline run, before a step's own modules are imported).
SMALL_JOB_BYTES = 8 << 20


def small_job_config(exec_config: ExecConfig | None, input_bytes: int, limit: int = SMALL_JOB_BYTES
                     ) -> ExecConfig | None:
    """``exec_config`` with the inline backend when it is the local backend (None means local) and the
    job reads at most ``limit`` bytes; otherwise ``exec_config`` unchanged."""
    if _local(exec_config) and input_bytes <= limit:
        return dataclasses.replace(exec_config or ExecConfig(), backend="inline")
    return exec_config


def small_job_config_for_files(exec_config: ExecConfig | None, paths: Iterable[str], limit: int = SMALL_JOB_BYTES
                               ) -> ExecConfig | None:
    """`small_job_config` for a job reading the files ``paths``: their sizes are asked only on the local
    backend and only until they pass ``limit`` (a big job costs a few stats, not one per file)."""
    if not _local(exec_config):
        return exec_config
    total = 0
    for path in paths:
        total += fsio.size(path)
        if total > limit:
            return exec_config
    return small_job_config(exec_config, total, limit)


def _local(exec_config: ExecConfig | None) -> bool:
    """The local backend, with no warm pool yet in this process."""
    local = exec_config is None or exec_config.backend == "local"
    return local and not pool_is_warm(exec_config.max_workers if exec_config is not None else None)
