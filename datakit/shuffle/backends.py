"""The backends that run attempts on this machine (local, inline) and the choice of a backend by name;
the scheduler (executor.py) decides what to run and what to retry, and the interface every backend
implements is backend_base.py.

`local` runs its own small pool of spawned worker processes, one pipe each, rather than
`ProcessPoolExecutor`: when a worker dies we know exactly which attempt it held, retry only that one,
and replace the worker, instead of losing the whole pool to BrokenProcessPool.
"""

from __future__ import annotations

import atexit
import logging
import os
import subprocess
import sys
import threading
from collections import deque
from multiprocessing.connection import Connection, wait as mp_wait
from typing import TYPE_CHECKING, Any

from datakit.core import fork_safety

from .backend_base import RAY_CAPABILITIES, Backend, Capabilities, Event, error_info, execute_payload
from .processes import start_child, stop_child

if TYPE_CHECKING:  # imported when the first worker starts: `python -m datakit.shuffle.zygote` must find it unimported
    from .zygote import ForkedProcess, Zygote

log = logging.getLogger("datakit.shuffle.backends")


class InlineBackend(Backend):
    """Runs each attempt in this process, one at a time: for debugging with pdb and prints."""

    name = "inline"
    capacity = 1
    capabilities = Capabilities(in_process=True)

    def __init__(self) -> None:
        self.queue: deque = deque()

    def submit(self, key: Any, payload: bytes) -> None:
        self.queue.append((key, payload))

    def wait(self, timeout: float | None) -> list[Event]:
        if not self.queue:
            return []
        key, payload = self.queue.popleft()
        try:
            return [(key, "ok", execute_payload(payload))]
        except Exception as e:  # user code failure: reported like a worker's
            return [(key, "error", error_info(e))]


class _Worker:
    """One worker process over a socketpair: on Linux forked from the zygote (zygote.py), elsewhere
    started as `python -m datakit.shuffle.worker`.

    Either way the user's __main__ module is never re-imported in workers (their scripts need no
    `if __name__ == "__main__"` guard) and no driver threads or JAX state leak into the child: the
    zygote is a fresh interpreter, or under the `datakit` command a fork of the driver made only while
    no thread but registered ones ran (`core.fork_safety`).
    Functions travel by value with cloudpickle; the child gets the driver's sys.path so functions
    pickled by reference (test modules, user packages) import the same way.
    """

    def __init__(self) -> None:
        forked = _forked_worker() if USE_ZYGOTE else None
        self.proc, self.conn = forked if forked is not None else start_child("datakit.shuffle.worker")
        self.key: Any = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, kill: bool = False) -> None:
        stop_child(self.proc, self.conn, kill)


USE_ZYGOTE = sys.platform.startswith("linux")
_ZYGOTE: list[Zygote] = []  # the one zygote of this process, started with the first worker
_ZYGOTE_LOCK = threading.Lock()


def _forget_parents_processes() -> None:
    """In a forked child: the pools and zygote here are the parent's handles, and the lock may have been
    held by the forking thread (the zygote is forked under it)."""
    global _ZYGOTE_LOCK
    _ZYGOTE_LOCK = threading.Lock()
    _ZYGOTE.clear()
    _POOLS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parents_processes)


def _first_zygote() -> Zygote:
    """This process's first zygote: forked from here when allowed and safe now, else a fresh interpreter."""
    from .zygote import Zygote, fork_from_here

    if fork_safety.process_is_ours():
        with fork_safety.quiesced() as safe:
            if safe:
                return fork_from_here()
    return Zygote()


def _forked_worker() -> tuple[ForkedProcess, Connection] | None:
    """A worker forked from this process's zygote (a dead zygote is replaced once); None when no zygote
    answers, so the caller spawns the worker itself."""
    from .zygote import Zygote, ZygoteGone

    for _ in range(2):
        with _ZYGOTE_LOCK:
            if not _ZYGOTE or not _ZYGOTE[0].alive():
                if _ZYGOTE:
                    log.warning("the local backend's zygote (pid %d) exited (code %s); started a new one",
                                _ZYGOTE[0].proc.pid, _ZYGOTE[0].proc.returncode)
                _ZYGOTE[:] = [Zygote() if _ZYGOTE else _first_zygote()]  # a replacement starts fresh
            zygote = _ZYGOTE[0]
        try:
            return zygote.fork()
        except ZygoteGone as e:
            log.warning("%s", e)
            zygote.proc.kill()
    return None


class LocalBackend(Backend):
    """A process pool on this machine, sized to its cores unless `max_workers` says otherwise.

    A dead worker is replaced whenever it is found, busy or idle. Found busy (its pipe closes in `wait`),
    its attempt is reported `died`, so the scheduler retries it within its per-task budget of deaths
    (`ExecConfig.max_worker_deaths`, then one `WorkerDeaths` error naming the task, as Ray's
    `max_retries` does). Found idle (an OOM kill or a stray `kill -9` between stages), it is replaced
    on the next `submit` before anything is sent, so no attempt is lost or charged for it; if it dies
    in the instant between that check and the send, the send fails and the attempt is reported `died`
    by the next `wait`, never raised from `submit`.
    """

    name = "local"

    def __init__(self, max_workers: int | None = None) -> None:
        self.capacity = max(1, max_workers or os.cpu_count() or 1)
        self.workers = [_Worker() for _ in range(self.capacity)]
        self._lost: list[Event] = []  # attempts whose worker was dead when they were sent

    def submit(self, key: Any, payload: bytes) -> None:
        w = next((w for w in self.workers if w.key is None), None)
        if w is None:
            raise RuntimeError("no idle worker (scheduler over-submitted)")
        if w.proc.poll() is not None:  # died while idle: replace it, nothing of any task was lost
            log.warning("local worker %d died while idle (exit code %s); started a new one", w.pid, w.proc.returncode)
            w = self._replace(w)
        w.key = key
        try:
            w.conn.send((key, payload))
        except OSError:  # it died just now: the attempt goes back to the scheduler as a death
            self._lost.append((key, "died", self._bury(w)))

    def _replace(self, w: _Worker) -> _Worker:
        w.stop(kill=True)
        fresh = _Worker()
        self.workers[self.workers.index(w)] = fresh
        return fresh

    def _bury(self, w: _Worker) -> dict:
        """Replace a worker found dead holding an attempt; what the `died` event says about it."""
        try:
            code = w.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        info = {"exitcode": code, "pid": w.pid}
        w.key = None
        self._replace(w)
        return info

    def wait(self, timeout: float | None) -> list[Event]:
        events, self._lost = self._lost, []
        busy = [w for w in self.workers if w.key is not None]
        if not busy:
            return events
        handles = {w.conn: w for w in busy}
        for h in mp_wait(list(handles), 0 if events else timeout):
            w = handles[h]
            try:
                key, status, value = w.conn.recv()
                w.key = None
                events.append((key, status, value))
            except (EOFError, OSError):
                key = w.key
                events.append((key, "died", self._bury(w)))
        return events

    def cancel_all(self) -> None:
        self._lost = []
        for w in list(self.workers):
            if w.key is not None:
                w.key = None
                self._replace(w)

    def close(self) -> None:
        for w in self.workers:
            w.stop()
        self.workers = []


_POOLS: dict[int, LocalBackend] = {}


def local_backend(max_workers: int | None) -> LocalBackend:
    """Reuse a warm pool across pipelines in one process (spawning workers costs ~0.3 s each)."""
    n = max(1, max_workers or os.cpu_count() or 1)
    pool = _POOLS.get(n)
    if pool is None or not pool.workers:
        pool = _POOLS[n] = LocalBackend(n)
    return pool


def pool_is_warm(max_workers: int | None) -> bool:
    """A local pool of this size is already running in this process (a job on it starts nothing)."""
    pool = _POOLS.get(max(1, max_workers or os.cpu_count() or 1))
    return pool is not None and bool(pool.workers)


@atexit.register
def _close_pools() -> None:
    for pool in _POOLS.values():
        pool.close()
    _POOLS.clear()
    for zygote in _ZYGOTE:
        zygote.close()
    _ZYGOTE.clear()


def backend_capabilities(name: str) -> Capabilities:
    """A backend's capabilities by name, without starting it (no Ray import, no cluster connection)."""
    caps = {"local": LocalBackend.capabilities, "inline": InlineBackend.capabilities,
            "ray": RAY_CAPABILITIES}
    if name not in caps:
        raise ValueError(f"unknown backend {name!r}: expected local, inline or ray")
    return caps[name]


def get_backend(name: str, max_workers: int | None = None, **options: Any) -> Backend:
    if name == "local":
        return local_backend(max_workers)
    if name == "inline":
        return InlineBackend()
    if name == "ray":
        try:
            from .ray_backend import RayBackend
        except ImportError as e:
            raise RuntimeError(
                "backend 'ray' needs the ray extra: pip install 'datakit[ray]'" + f" ({e})"
            ) from None
        return RayBackend(max_workers=max_workers, **options)
    raise ValueError(f"unknown backend {name!r}: expected local, inline or ray")
