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
