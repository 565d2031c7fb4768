"""Live run records: which step dirs a running run reads, so `gc` never removes them under it.

A run (`run_steps`, not a dry run) writes ``<prefix>/.datakit/runs/<run-id>.json`` before its first
step: the ``<name>-<identity>`` dir of every step of its plan (what it builds and what it reads, built
or not yet), its host, pid and start time, and a heartbeat it rewrites every quarter of the lease
timeout. The record is removed when the run ends. A record whose heartbeat is older than the lease
timeout, or whose process is gone (same machine), is stale: the run crashed, and its dirs are no
longer protected. Why a record of its own rather than the step leases: a lease covers only the step
being built, while a run reads finished outputs of earlier steps for its whole length.

Limits (as for leases): a run paused longer than the timeout looks stale; a gc that listed the records
just before a run wrote its own may remove dirs that run then finds missing (the run rebuilds what is
missing or unreadable, since it checks every output before trusting it).
"""
from __future__ import annotations

import json
import logging
import os
import posixpath
import threading
import time
from typing import Iterable

import psutil

from datakit.core import fork_safety, fsio
from datakit.core.layout import RUNS_DIR

from .lease import host_id, holder_state

log = logging.getLogger("datakit.steps.runs")
_SUFFIX = ".json"


def runs_dir(prefix: str) -> str:
    return fsio.join(prefix, RUNS_DIR)


class RunRecord:
    """This process's record of one run, heartbeating while held. Use as a context manager."""

    def __init__(self, prefix: str, run_id: str, step_dirs: Iterable[str], *, timeout_s: float) -> None:
        self.prefix, self.path = prefix, fsio.join(runs_dir(prefix), run_id + _SUFFIX)
        self.run_id, self.step_dirs = run_id, sorted(set(step_dirs))
        self.heartbeat_s = max(0.05, timeout_s / 4)
        self.started = time.time()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _record(self) -> bytes:
        now = time.time()
        rec = {"run_id": self.run_id, "host": host_id(), "pid": os.getpid(),
               "pid_start": psutil.Process().create_time(), "started": _iso(self.started), "heartbeat": now,
               "heartbeat_iso": _iso(now), "step_dirs": self.step_dirs}
        return json.dumps(rec, sort_keys=True).encode("utf-8")

    def __enter__(self) -> "RunRecord":
        fsio.atomic_write_bytes(self.path, self._record())
        self._thread = threading.Thread(target=self._beat, name=f"run-{self.run_id}", daemon=True)
        self._thread.start()
        return self

    def _beat(self) -> None:
        """Refresh the record every `heartbeat_s`; each beat inside `fork_safety.busy()`, so the local
        backend may fork its zygote from this process while this thread runs."""
        failing = False  # said once until a beat succeeds
        with fork_safety.registered():
            while not self._stop.wait(self.heartbeat_s):
                with fork_safety.busy():
                    failing = self._refresh(failing)

    def _refresh(self, failing: bool) -> bool:
        """One beat; whether it failed."""
        try:
            fsio.atomic_write_bytes(self.path, self._record())
            return False
        except OSError as e:
            if not failing:  # (a store that is down is named by the step it fails, not here)
                why = "the object store is unavailable" if fsio.store_failure(e) else str(e)
                log.warning("run record %s not refreshed (%s); retrying", self.path, why)
            return True

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            fsio.remove(self.path)
        except OSError:  # a full disk or a store that is down: the record goes stale on its own
            return
        fsio.remove_if_empty(runs_dir(self.prefix))
        fsio.remove_if_empty(posixpath.dirname(runs_dir(self.prefix)))  # .datakit/, unless a cache is there


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def read_runs(prefix: str, timeout_s: float) -> list[dict]:
    """Every run record under the prefix, each with ``state`` (live | stale | dead, as for leases) and
    ``path``; unreadable records (being written, corrupt) are skipped."""
    out = []
    directory = runs_dir(prefix)
    for name in fsio.list_names(directory):
        if not name.endswith(_SUFFIX) or fsio.is_temp_name(name):
            continue
        path = fsio.join(directory, name)
        try:
            rec = json.loads(fsio.read_if_exists(path) or b"null")
        except ValueError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("step_dirs"), list):
            out.append({**rec, "state": holder_state(rec, timeout_s), "path": path})
    return out
