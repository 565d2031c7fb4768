"""Lease lock for one step dir: at most one runner builds a step at a time, across processes/hosts.

Protocol (needs only "create if absent", which local disks and object stores both offer):
- A lease is a file ``.lease.<gen>`` (gen = 000001, 000002, ...) holding the owner's id, host, pid and
  a heartbeat timestamp. The holder is the owner of the HIGHEST gen, unless that record is released,
  its heartbeat is older than ``timeout_s``, or (same machine) its process is dead.
- To acquire, create gen = top + 1 exclusively. Two contenders cannot both create the same gen, so
  exactly one wins; the loser re-reads and waits. Why generations instead of one ``.lease`` file:
  taking over a stale single file needs compare-and-swap, which "delete + create" cannot give
  (a slow taker could delete the lease a faster taker just created).
- The holder rewrites only its own file (heartbeat thread) and, before it commits, checks that no
  higher gen exists; if one does, a peer took over (we looked dead: paused, partitioned) and this
  runner must not write markers ("lease lost").
- Release marks the record released rather than deleting it, so gens only grow and a stale view can
  never recreate a gen someone already holds. Older gens are deleted by the next holder.

Limits (documented, inherent to leases): a holder paused longer than ``timeout_s`` may still write data
files after it resumes (it cannot write markers). Staleness compares heartbeat timestamps with the
reader's clock, so hosts need roughly synchronized clocks (well under ``timeout_s``).
"""
from __future__ import annotations

import json
import logging
import os
import re
import socket
import threading
import time
import uuid
from typing import Callable

import psutil

from datakit.core import fork_safety, fsio

LEASE_PREFIX = ".lease"
_LEASE_FILE = re.compile(r"^\.lease\.(\d+)$")
log = logging.getLogger("datakit.steps.lease")


class LeaseLost(RuntimeError):
    """Another runner took over this step's lease (ours looked stale)."""


def is_lease_name(name: str) -> bool:
    """Files the runner must never clear from a step dir (lease records and their temp files)."""
    return name.startswith(LEASE_PREFIX)


def host_id() -> str:
    # hostname + boot time: two machines sharing a hostname still get distinct ids.
    return f"{socket.gethostname()}@{int(psutil.boot_time())}"


def _gens(step_dir: str) -> list[int]:
    out = []
    for name in fsio.list_names(step_dir):
        m = _LEASE_FILE.match(name)
        if m:
            out.append(int(m.group(1)))
    return sorted(out)


def _lease_path(step_dir: str, gen: int) -> str:
    return fsio.join(step_dir, f"{LEASE_PREFIX}.{gen:06d}")


def _read(step_dir: str, gen: int) -> dict | None:
    raw = fsio.read_if_exists(_lease_path(step_dir, gen))
    if raw is None:
        return None
    try:
        rec = json.loads(raw)
        return rec if isinstance(rec, dict) else None
    except ValueError:
        return None


def _process_gone(rec: dict) -> bool:
    """True when the record's owner ran on THIS machine and that process no longer exists."""
    if rec.get("host") != host_id():
        return False
    pid = rec.get("pid")
    if not isinstance(pid, int):
        return False
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return True
        return abs(proc.create_time() - float(rec.get("pid_start", 0.0))) > 1.0  # pid reused
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


def holder_state(rec: dict | None, timeout_s: float) -> str:
    """'released' | 'dead' | 'stale' | 'live' for a lease record (None reads as 'released')."""
    if rec is None or rec.get("released"):
        return "released"
    if _process_gone(rec):
        return "dead"
    if time.time() - float(rec.get("heartbeat", 0.0)) > timeout_s:
        return "stale"
    return "live"


def read_holder(step_dir: str, timeout_s: float = 60.0) -> dict | None:
    """The current top lease record plus ``state`` (see holder_state); None if there never was one."""
    gens = _gens(step_dir)
    if not gens:
        return None
    rec = _read(step_dir, gens[-1]) or {}
    return {**rec, "gen": gens[-1], "state": holder_state(rec or None, timeout_s) if rec else "unreadable"}


class Lease:
    """Exclusive, heartbeating lease on one step dir (which must exist). Use as a context manager."""

    def __init__(self, step_dir: str, *, timeout_s: float = 60.0, heartbeat_s: float | None = None,
                 poll_s: float | None = None):
        if timeout_s <= 0:
            raise ValueError(f"lease timeout_s must be > 0, got {timeout_s}")
        self.step_dir, self.timeout_s = step_dir, float(timeout_s)
        self.heartbeat_s = heartbeat_s if heartbeat_s is not None else max(0.05, self.timeout_s / 4)
        self.poll_s = poll_s if poll_s is not None else min(1.0, max(0.05, self.timeout_s / 10))
        self.owner = uuid.uuid4().hex
        self.gen: int | None = None
        self._lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- acquisition ------------------------------------------------------------------------------
    def _record(self, released: bool = False) -> bytes:
        now = time.time()
        rec = {"owner": self.owner, "host": host_id(), "pid": os.getpid(),
               "pid_start": psutil.Process().create_time(), "heartbeat": now,
               "heartbeat_iso": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)), "released": released}
        return json.dumps(rec, sort_keys=True).encode("utf-8")

    def acquire(self, on_wait: Callable[[dict], None] | None = None) -> None:
        """Block until this runner holds the lease. ``on_wait(holder_record)`` is called once if it
        has to wait for a live holder."""
        if self.gen is not None:
            raise RuntimeError("lease already held")
        waited = False
        unreadable_since: dict[int, float] = {}
        while True:
            gens = _gens(self.step_dir)
            target = 1
            if gens:
                top = gens[-1]
                rec = _read(self.step_dir, top)
                if rec is None and fsio.read_if_exists(_lease_path(self.step_dir, top)) is not None:
                    # Being written (stores without atomic create) or corrupt: wait, but not forever.
                    first = unreadable_since.setdefault(top, time.monotonic())
                    state = "stale" if time.monotonic() - first > self.timeout_s else "live"
                else:
                    state = holder_state(rec, self.timeout_s)
                if state == "live":
                    if not waited and on_wait is not None:
                        on_wait({**(rec or {}), "gen": top})
                    waited = True
                    time.sleep(self.poll_s)
                    continue
                if state in ("stale", "dead"):
                    log.warning("taking over %s lease of %s (gen %d, owner %s)", state, self.step_dir, top,
                                (rec or {}).get("owner"))
                target = top + 1
            path = _lease_path(self.step_dir, target)
            if not fsio.create_exclusive(path, self._record(), tmp_prefix=f"{LEASE_PREFIX}.tmp-") and \
                    (_read(self.step_dir, target) or {}).get("owner") != self.owner:
                # A peer created this gen first: re-read who holds it. (Ours already, when a retried
                # conditional PUT finds the one its timed-out first try landed.)
                continue
            if _gens(self.step_dir)[-1] != target:
                # We recreated an old, already-cleaned gen from a stale view: a higher gen exists.
                fsio.remove(path)
                continue
            self.gen = target
            for old in _gens(self.step_dir):
                if old < target:
                    fsio.remove(_lease_path(self.step_dir, old))
            self._thread = threading.Thread(target=self._heartbeat, name=f"lease-{self.step_dir}", daemon=True)
            self._thread.start()
            return

    # -- holding ----------------------------------------------------------------------------------
    def _heartbeat(self) -> None:
        """Renew the lease every `heartbeat_s` until released or lost; each beat inside
        `fork_safety.busy()`, so the local backend may fork its zygote from this process meanwhile."""
        failing = False  # said once until a beat succeeds: a store that is down is one line, not one a beat
        with fork_safety.registered():
            while not self._lost.is_set() and not self._stop.wait(self.heartbeat_s):
                with fork_safety.busy():
                    failing = self._beat(failing)

    def _beat(self, failing: bool) -> bool:
        """One renewal: whether it failed. A lease found lost is marked so (`lost`), which ends the
        heartbeat."""
        try:
            if not self._still_top():
                self._lost.set()
                log.error("lease on %s lost to another runner", self.step_dir)
                return failing
            self._write(released=False)
            return False
        except fsio.StoreUnavailable:  # the failing step names the store and what to do
            if not failing:
                log.warning("lease heartbeat on %s failed (the object store is unavailable); retrying",
                            self.step_dir)
            return True
        except Exception:  # noqa: BLE001 - a flaky store must not kill the step; retry next beat
            log.warning("lease heartbeat on %s failed; retrying", self.step_dir, exc_info=True)
            return failing

    def _still_top(self) -> bool:
        gens = _gens(self.step_dir)
        return bool(gens) and gens[-1] == self.gen

    def _write(self, released: bool) -> None:
        fsio.atomic_write_bytes(_lease_path(self.step_dir, self.gen), self._record(released),
                              tmp_prefix=f"{LEASE_PREFIX}.tmp-")

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def check(self) -> None:
        """Raise LeaseLost unless this runner still holds the lease (a fresh look, not the last beat)."""
        if self.gen is None:
            raise LeaseLost(f"{self.step_dir}: lease not held")
        if self._lost.is_set() or not self._still_top():
            self._lost.set()
            raise LeaseLost(f"{self.step_dir}: lease taken over by another runner "
                            f"(this one looked stale for more than {self.timeout_s:g} s)")

    def release(self) -> None:
        """Stop heartbeating and mark the record released (if it is still ours)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.gen is not None:
            try:
                if not self._lost.is_set() and self._still_top():
                    self._write(released=True)
            finally:
                self.gen = None

    def __enter__(self) -> "Lease":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
