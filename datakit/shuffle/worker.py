"""A local worker's loop, and its entry point as a process of its own: `python -m datakit.shuffle.worker FD`
(where the local backend does not fork its workers from the zygote, zygote.py, which runs the same loop)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection

from .backend_base import error_info, execute_payload
from .processes import next_request

DRIVER_POLL_S = 1.0  # how often a worker checks that its parent (the driver, or the zygote) is alive
# glibc's malloc serves a block of at least this many bytes with a mapping of its own (given back, and
# faulted in again by the next task, at every free); its default, 128 KiB rising with the blocks freed,
# is set once here (see `_keep_freed_heap`), above the few-MB buffers tasks hold (a documents file's
# bytes, a token shard). And it gives back the heap's free top once it passes TRIM_THRESHOLD_BYTES.
MMAP_THRESHOLD_BYTES = 8 << 20
TRIM_THRESHOLD_BYTES = 32 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)


def _keep_freed_heap() -> None:
    """Let this worker's heap keep what a task freed for the next task.

    With glibc's defaults a fresh worker serves a task's multi-MB buffers (a file read whole, an encoded
    column, a token array) from mappings it unmaps at each free, and trims the heap's free top back to
    the OS, so the next task page-faults all of it in again: a takedown of 1% of the incremental
    benchmark's 400 MB took 74k faults in its worker tasks (1.1 CPU-s of system time) where the same
    tasks run in the driver, whose heap had grown already, took 4k. Fixing the thresholds keeps those
    pages: the whole run's faults 110k -> 48k (with thresholds of 32 and 128 MiB, the same 48k, paired
    runs on a quiet machine took 0.21 and 0.24 CPU-s less; these lower ones hold less freed memory, and a
    fresh build's peak PSS stayed within its run-to-run spread). `tasks._release_freed_memory` still
    gives all freed memory back once a worker holds `RELEASE_ABOVE_BYTES` more than its floor. Not glibc
    (musl, macOS): nothing to set."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    except (OSError, AttributeError):
        pass


def _exit_with_driver(driver: int) -> None:
    """End this worker as soon as its driver is gone. Workers run in their own session (a Ctrl-C or a
    SIGTERM to the driver's group does not reach them), and a worker busy with a task only notices a
    closed pipe when it next talks to the driver: a driver killed by SIGTERM or SIGKILL left its workers
    running their tasks to the end, orphaned. A task's outputs are temp files until the driver commits
    them, so exiting mid-task loses nothing a rerun would trust. ``driver`` is the worker's parent: the
    driver, or the zygote it was forked from, which exits when the driver is gone."""
    while True:
        time.sleep(DRIVER_POLL_S)
        if os.getppid() != driver:
            os._exit(1)


def worker_main(conn: Connection) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    _keep_freed_heap()
    threading.Thread(target=_exit_with_driver, args=(os.getppid(),), daemon=True, name="driver-watch").start()
    while (msg := next_request(conn)) is not None:
        key, payload = msg
        try:
            result = execute_payload(payload)
            conn.send((key, "ok", result))
        except BaseException as e:
            conn.send((key, "error", error_info(e)))


if __name__ == "__main__":
    worker_main(Connection(int(sys.argv[1])))
