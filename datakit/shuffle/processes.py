"""Two things the local backend's processes (workers, the zygote, and the driver's handles on them) do
alike: read the next request from a pipe, and stop a child process they started."""

from __future__ import annotations

import subprocess
from multiprocessing.connection import Connection
from typing import Any


def next_request(conn: Connection) -> Any | None:
    """The next message on ``conn``; None when the other end closed it or sent None (the request to end)."""
    try:
        return conn.recv()
    except (EOFError, OSError):
        return None


def stop_child(proc: Any, conn: Connection, kill: bool = False) -> None:
    """End a child (a Popen, or anything with its poll/kill/wait): ask it to exit (None on its pipe),
    or kill it when asked or when the pipe is gone; wait up to 5 s, then kill it; close the pipe."""
    if not kill:
        try:
            conn.send(None)
        except OSError:
            kill = True
    if kill:
        proc.kill()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    conn.close()
