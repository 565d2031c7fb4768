"""What the local backend's processes (workers, the zygote, and the driver's handles on them) do alike:
start a child interpreter over a socketpair, read the next request from a pipe, stop a child."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from multiprocessing.connection import Connection
from typing import Any


def module_path() -> list[str]:
    """This process's module path, absolute: what a child needs to import what the driver pickled by
    reference (test modules, user packages)."""
    return [os.path.abspath(p) for p in sys.path if p]


def start_child(module: str) -> tuple[subprocess.Popen, Connection]:
    """``python -m <module> FD`` in its own session, with this process's environment and module path, the
    other end of a socketpair as FD: (the process, this end of the pipe)."""
    parent, child = socket.socketpair()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(module_path())}
    proc = subprocess.Popen([sys.executable, "-m", module, str(child.fileno())], pass_fds=(child.fileno(),),
                            env=env, start_new_session=True)
    child.close()
    conn = Connection(os.dup(parent.fileno()))
    parent.close()
    return proc, conn


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
