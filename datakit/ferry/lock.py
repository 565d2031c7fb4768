"""One ferry at a time per prefix: an exclusive, non-blocking flock on ``<prefix>/ferry.lock``.

flock (not a pid file) because the kernel drops it when the holder dies, however it dies: a crashed
ferry never leaves a stale lock that blocks tomorrow's run. The holder writes who it is into the file
so the refused run can say which run is in the way. Local filesystems only (flock over NFS is not
reliable); the ferry's prefix is a local directory by design.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from contextlib import contextmanager
from typing import Iterator

LOCK_FILE = "ferry.lock"


class FerryLocked(RuntimeError):
    """Another ferry holds the lock; ``holder`` is what it wrote about itself (may be empty)."""

    def __init__(self, path: str, holder: dict):
        self.path, self.holder = path, holder
        who = ", ".join(f"{k} {holder[k]}" for k in ("run_id", "pid", "host", "since") if holder.get(k))
        super().__init__(f"another ferry is running ({who or 'holder unknown'}; lock {path}); not starting. "
                         "It releases the lock when it exits.")


def read_holder(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.loads(f.read() or "{}")
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


@contextmanager
def ferry_lock(prefix: str, **holder: object) -> Iterator[str]:
    """Hold the prefix's ferry lock for the duration of the block; FerryLocked if it is taken."""
    os.makedirs(prefix, exist_ok=True)
    path = os.path.join(prefix, LOCK_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FerryLocked(path, read_holder(path)) from None
        info = {"pid": os.getpid(), "host": socket.gethostname(), **holder}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        try:
            yield path
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
