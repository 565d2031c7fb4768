"""Structured run events: one JSON object per line in ``<prefix>/events.jsonl``, also handed to a callback.

Why a file: per-step wall times and failures of every run on a prefix stay queryable afterwards
(``duckdb -c "select * from 'events.jsonl'"``), across runners, without a metrics service.
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
log = logging.getLogger("datakit.steps.events")


class EventLog:
    """Appends events to the prefix's events.jsonl (unless ``write`` is False: dry runs) and calls
    ``on_event``. A failing callback is logged, never allowed to break a step's markers."""

    def __init__(self, root: str, run_id: str, *, write: bool, on_event: Callable[[dict], None] | None):
        self.path, self.run_id = fsio.join(root, EVENTS_FILE), run_id
        self.write, self.on_event = write, on_event
        self._lock = threading.Lock()
        self._root = root
        self._dir_ready = False

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
                fsio.append_line(self.path, line)
        if self.on_event is not None:
            try:
                self.on_event(record)
            except Exception:  # noqa: BLE001 - a display bug must not corrupt a run
                log.warning("on_event callback failed for %s", record["event"], exc_info=True)
        return record


def read_events(prefix: str) -> list[dict]:
    """All events recorded under a prefix (empty if none)."""
    raw = fsio.read_if_exists(fsio.join(fsio.store_url(prefix), EVENTS_FILE))
    if not raw:
        return []
    return [json.loads(line) for line in raw.decode("utf-8").splitlines() if line.strip()]
