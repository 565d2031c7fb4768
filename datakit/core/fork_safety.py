"""Whether this process may fork a child that goes on running Python although it runs threads of its own
(the local backend forks its zygote from `datakit run`'s driver: shuffle/zygote.py), and whether it is
ours to fork at all.

Only a process that is datakit's from its first line (the `datakit` command: `claim_process`) is
forked: a program embedding datakit (a notebook, a test run) may hold state of its own that must not
reach a worker, and may be large.

A fork copies only the forking thread, and a lock another thread holds at that instant stays held in the
child for good: the child hangs the first time it needs that lock. So a fork is safe only while every
other thread is known to hold nothing the child could need:

- threads that `register` themselves and do each unit of their work inside `busy()` (the run record's
  and the step lease's heartbeats). `quiesced` holds the same gate, so the fork never lands inside a
  beat; between beats such a thread only waits on its own event, which the child never touches;
- the allocator's background thread (jemalloc's, which pyarrow's pool starts; jemalloc prepares itself
  for a fork).

Any other thread (a user's, fsspec's event loop, Ray's, a thread pool still alive, the step running off
the main thread) makes `quiesced` answer no, and the caller does what it did before: starts a fresh
interpreter. Linux only (the threads are read from /proc); elsewhere the answer is always no.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Iterator

_OURS: list[bool] = [False]
_GATE = threading.Lock()
_REGISTERED: set[int] = set()  # native ids of the threads that do their work only inside busy()
KNOWN_NATIVE_THREADS = ("jemalloc_bg_thd",)
GATE_TIMEOUT_S = 5.0  # a beat writes one small file; one that takes longer is stuck on a store


def claim_process() -> None:
    """Say this process is datakit's own from its first line (the `datakit` command's entry)."""
    _OURS[0] = True


def process_is_ours() -> bool:
    return _OURS[0]


@contextmanager
def registered() -> Iterator[None]:
    """Count the calling thread as fork-safe while inside: it promises to take locks only inside `busy()`."""
    me = threading.get_native_id()
    _REGISTERED.add(me)
    try:
        yield
    finally:
        _REGISTERED.discard(me)


@contextmanager
def busy() -> Iterator[None]:
    """One unit of a registered thread's work: a fork waits until it is done."""
    with _GATE:
        yield


def _thread_name(tid: str) -> str | None:
    try:
        with open(f"/proc/self/task/{tid}/comm") as f:
            return f.read().strip()
    except OSError:  # it exited meanwhile
        return None


def _others_known() -> bool:
    if threading.current_thread() is not threading.main_thread():
        return False
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return False
    me = threading.get_native_id()
    for tid in tids:
        if int(tid) == me or int(tid) in _REGISTERED:
            continue
        name = _thread_name(tid)
        if name is not None and name not in KNOWN_NATIVE_THREADS:
            return False
    return True


@contextmanager
def quiesced(timeout_s: float = GATE_TIMEOUT_S) -> Iterator[bool]:
    """Inside, with True, a fork is safe: called on the main thread, every other thread is registered
    (and none is inside `busy()`) or a known native one. False: fork nothing here."""
    if not _GATE.acquire(timeout=timeout_s):
        yield False
        return
    try:
        yield _others_known()
    finally:
        _GATE.release()


def _reset_in_child() -> None:
    """A forked child starts with none of its parent's threads: nothing registered, the gate open."""
    global _GATE
    _GATE = threading.Lock()
    _REGISTERED.clear()
    _OURS[0] = False  # a worker runs tasks, not the command


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_in_child)


__all__ = ["KNOWN_NATIVE_THREADS", "busy", "claim_process", "process_is_ours", "quiesced", "registered"]
