"""Structured run events: one JSON object per line in ``<prefix>/events.jsonl``, also handed to a callback.

Why a file: per-step wall times and failures of every run on a prefix stay queryable afterwards
(``duckdb -c "select * from 'events.jsonl'"``), across runners, without a metrics service.

On an object store, which cannot append, each run writes its own ``<prefix>/events/<run_id>.jsonl``,
rewritten from what the run holds at each event: appending to one shared file there meant a GET of the
prefix's whole history and a PUT of it back for every event (1.08 MB of the GETs of a 4-source edit on
moto, and growing with every run). Rewriting one file per run whole would still cost O(events^2) bytes
(about 0.45 GB of PUTs for a 700-step run's 1,400 events), so a run's file rolls over once it holds
``CHUNK_BYTES``: its later events go to ``<run_id>.00001.jsonl`` and so on, and no event's PUT is over
that size (45 MB for those 1,400 events, in 10 files). `read_events` reads every layout, in time order.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from typing import Callable

from datakit.core import fsio

from .markers import now_iso

EVENTS_FILE = "events.jsonl"
RUN_EVENTS_DIR = "events"  # on object stores: <run_id>.jsonl per run, then <run_id>.NNNNN.jsonl
CHUNK_BYTES = 64 << 10  # on object stores: a run's event file rolls over past this
log = logging.getLogger("datakit.steps.events")


class EventLog:
    """Appends events to the prefix's events.jsonl (unless ``write`` is False: dry runs) and calls
    ``on_event``. A failing callback is logged, never allowed to break a step's markers."""

    def __init__(self, root: str, run_id: str, *, write: bool, on_event: Callable[[dict], None] | None):
        self.local = fsio.is_local(root)
        self.path = fsio.join(root, EVENTS_FILE) if self.local else fsio.join(root, RUN_EVENTS_DIR, f"{run_id}.jsonl")
        self.run_id = run_id
        self.write, self.on_event = write, on_event
        self._lock = threading.Lock()
        self._root = root
        self._dir_ready = False
        self._written = b""  # object stores: the events of this run's current file, rewritten at each event
        self._chunk = 0

    def emit(self, event: dict) -> dict:
        t = time.time()
        record = {"event": event["event"], "time": now_iso(t), "ts": round(t, 6), "run_id": self.run_id,
                  "host": socket.gethostname(), "pid": os.getpid(),
                  **{k: v for k, v in event.items() if k != "event"}}
        if self.write:
            line = json.dumps(record, sort_keys=True, default=str)
            with self._lock:
                if not self._dir_ready:
                    fsio.makedirs(self._root)
                    self._dir_ready = True
                if self.local:
                    fsio.append_line(self.path, line)
                else:
                    self._put((line + "\n").encode("utf-8"))
        if self.on_event is not None:
            try:
                self.on_event(record)
            except Exception:  # noqa: BLE001 - a display bug must not corrupt a run
                log.warning("on_event callback failed for %s", record["event"], exc_info=True)
        return record

    def _put(self, data: bytes) -> None:
        """Rewrite the run's current event file with ``data`` added, after rolling over to the next file
        when the current one would pass `CHUNK_BYTES`."""
        if self._written and len(self._written) + len(data) > CHUNK_BYTES:
            self._chunk += 1
            self._written = b""
            self.path = fsio.join(self._root, RUN_EVENTS_DIR, f"{self.run_id}.{self._chunk:05d}.jsonl")
        self._written += data
        fsio.atomic_write_bytes(self.path, self._written)


def read_events(prefix: str) -> list[dict]:
    """All events recorded under a prefix (empty if none): events.jsonl's, then on an object store each
    run's own files', in time order."""
    root = fsio.store_url(prefix)
    blobs = [fsio.read_if_exists(fsio.join(root, EVENTS_FILE))]
    if not fsio.is_local(root):
        runs = fsio.join(root, RUN_EVENTS_DIR)
        names = sorted((n for n in fsio.list_names(runs) if n.endswith(".jsonl")), key=_in_run_order)
        blobs += [fsio.read_if_exists(fsio.join(runs, n)) for n in names]
    events = [json.loads(line) for raw in blobs if raw for line in raw.decode("utf-8").splitlines() if line.strip()]
    return sorted(events, key=lambda e: e.get("ts", 0)) if len(blobs) > 1 else events


def _in_run_order(name: str) -> tuple[str, int]:
    """A run's event files in the order it wrote them: <run_id>.jsonl, then <run_id>.NNNNN.jsonl (equal
    timestamps then keep the order they were emitted in)."""
    stem = name[:-len(".jsonl")]
    run_id, _, chunk = stem.rpartition(".")
    return (run_id, int(chunk)) if run_id and chunk.isdigit() else (stem, 0)
