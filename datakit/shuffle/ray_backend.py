"""Run task attempts as Ray tasks, for pipelines that outgrow one machine.

The coordinator stays in the driver and keeps only task state and paths; each Ray task receives the
cloudpickled `(TaskSpec, attempt)` and returns the same small metadata the local pool returns. Shuffle
files and outputs live on storage every node sees (a shared filesystem or any fsspec URL), never in the
object store. Ray's own retries are off (`max_retries=0`): the scheduler in executor.py applies the
same finite patience as on the local backend, so a deterministic user error aborts after 3 attempts
instead of Ray retrying it, and a worker or node death is told apart and retried on its own budget.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayError, RayTaskError

from .backend_base import RAY_CAPABILITIES, Backend, Event, error_info, execute_payload

# Finished attempts per Ray node id in this driver process: operators (and the cluster tests) read it to
# see that work really spread over the nodes.
TASKS_PER_NODE: Counter = Counter()


def _run_attempt(payload: bytes) -> tuple[str, Any, str]:
    """Executed on a Ray worker: user errors come back as data, so only a dead worker raises. The node
    id rides along so the driver can count where attempts ran."""
    node = ray.get_runtime_context().get_node_id()
    try:
        return "ok", execute_payload(payload), node
    except Exception as e:
        return "error", error_info(e), node


class RayBackend(Backend):
    name = "ray"
    capabilities = RAY_CAPABILITIES

    def __init__(self, max_workers: int | None = None, address: str | None = None, num_cpus_per_task: float = 1,
                 memory_per_task: int | None = None, **_: Any) -> None:
        if not ray.is_initialized():
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                ray.init(num_cpus=max_workers or os.cpu_count(), include_dashboard=False, log_to_driver=False)
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.capacity = max(1, min(max_workers or cpus, cpus) if max_workers else cpus)
        options: dict[str, Any] = {"num_cpus": num_cpus_per_task, "max_retries": 0}
        if memory_per_task:
            options["memory"] = memory_per_task
        self._remote = ray.remote(_run_attempt).options(**options)
        self._inflight: dict[Any, Any] = {}  # ObjectRef -> key

    def num_nodes(self) -> int:
        return sum(1 for n in ray.nodes() if n.get("Alive"))

    def submit(self, key: Any, payload: bytes) -> None:
        self._inflight[self._remote.remote(payload)] = key

    def wait(self, timeout: float | None) -> list[Event]:
        if not self._inflight:
            return []
        ready, _ = ray.wait(list(self._inflight), num_returns=1, timeout=timeout)
        events: list[Event] = []
        for ref in ready:
            key = self._inflight.pop(ref)
            try:
                status, value, node = ray.get(ref)
                TASKS_PER_NODE[node] += 1
                events.append((key, status, value))
            except RayTaskError as e:  # raised outside user code (e.g. unpickling the payload)
                events.append((key, "error", error_info(e)))
            except (RayError, GetTimeoutError) as e:  # worker died, node lost, object lost
                events.append((key, "died", {"exitcode": None, "error": f"{type(e).__name__}: {e}"}))
        return events

    def cancel_all(self) -> None:
        """Forget the attempts in flight: they run to their end and their results are dropped (no one
        accepts their files: a stage's clean-up removes them); Ray ends them with the driver's job. Not
        `ray.cancel`: in Ray 2.60 a cancel that races the attempt's own completion fails a check in the
        driver's task manager ("Tried to complete task that was not pending"), which ends the driver
        process with exit code 1 (seen here about once in a hundred failed pipelines; it ended a whole test
        session), and a forced cancel killed workers that had finished the attempt and taken a task of the
        driver's next pipeline (its shard 'died' and was retried). An attempt left running never writes
        over a rerun's files: each execute call names its attempt files apart (`TaskSpec.attempt_tag`)."""
        self._inflight.clear()
