"""What every backend is: the `Backend` interface, its `Capabilities`, the events it returns, and how
an attempt's payload runs and reports its error. The local and inline backends (backends.py) and the
Ray backend (ray_backend.py) build on this module, so neither of those imports the other.

The interface is deliberately tiny so a cluster backend slots in: `submit(key, payload)` starts one
attempt, `wait(timeout)` returns finished attempts as events `(key, status, value)` where status is
`ok`, `error` (user code raised; value describes it) or `died` (the worker vanished: kill -9, OOM,
node loss). Payloads (`task_payload`) are cloudpickled `(TaskSpec, attempt)` so lambdas and closures
travel.
"""

from __future__ import annotations

import dataclasses
import pickle
import traceback
from dataclasses import dataclass
from typing import Any

Event = tuple[Any, str, Any]


def error_info(exc: BaseException) -> dict:
    """Describe an exception so it always crosses a process boundary, picklable or not."""
    try:
        blob = pickle.dumps(exc)
        pickle.loads(blob)
    except Exception:
        blob = None
    return {
        "type": type(exc).__name__,
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        "exc": blob,
    }


def pickled_ops(ops: list) -> bytes:
    """A stage's ops, pickled once for all of its tasks' payloads: every task of a stage runs the same
    ops, and the functions they carry hold the step's settings (a tokenize step's: the earlier build's
    every file hash), 79 KB a task pickled again for each of 58 tasks."""
    import cloudpickle

    return cloudpickle.dumps(ops)


def task_payload(spec: Any, attempt: int, ops: bytes) -> bytes:
    """One attempt's payload: the task without its stage's ops, and the ops pickled (`pickled_ops`)."""
    import cloudpickle

    return cloudpickle.dumps((dataclasses.replace(spec, pipe=dataclasses.replace(spec.pipe, ops=[])), attempt, ops))


def execute_payload(payload: bytes) -> dict:
    from .tasks import run_task

    spec, attempt, ops = pickle.loads(payload)
    return run_task(dataclasses.replace(spec, pipe=dataclasses.replace(spec.pipe, ops=pickle.loads(ops))), attempt)


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, so callers ask about behaviour instead of comparing backend names.

    in_process:     attempts run in the caller's process, one at a time (memory:// prefixes work; pdb works).
    may_span_nodes: workers may sit on other machines, so shuffle files must live on storage every node
                    sees (an object store or shared mount), never in a node-local temp dir.
    """

    in_process: bool = False
    may_span_nodes: bool = False


class Backend:
    name = "base"
    capacity = 1
    capabilities = Capabilities()

    def num_nodes(self) -> int:
        """Machines the workers run on right now (1 unless the backend may span nodes)."""
        return 1

    def submit(self, key: Any, payload: bytes) -> None:
        raise NotImplementedError

    def wait(self, timeout: float | None) -> list[Event]:
        raise NotImplementedError

    def cancel_all(self) -> None:
        """Give up every attempt in flight (the pipeline aborts): their results are never used. The local
        pool kills their workers; Ray lets them run to their end (`RayBackend.cancel_all` says why)."""

    def close(self) -> None:
        pass


# what the Ray backend can do, known without importing ray (see backends.backend_capabilities)
RAY_CAPABILITIES = Capabilities(may_span_nodes=True)
