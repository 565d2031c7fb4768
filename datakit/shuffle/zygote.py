"""The parent the local backend's workers are forked from: one fresh interpreter that imports what every
worker needs once, then forks a worker per request (`python -m datakit.shuffle.zygote FD`).

Why: a worker started as its own interpreter paid Python's start and the imports every task needs
(datakit.shuffle, pyarrow, numpy) itself, about 0.45 CPU-s and tens of MB of private pages per
worker, and paid it again for each replacement of a dead worker: with two workers, a tenth of a small
incremental run. Forked from the zygote, a worker starts in milliseconds and shares those pages with its
siblings. The zygote is a fresh interpreter, started the way workers were, so no driver thread, JAX
state or user ``__main__`` reaches a worker; except under `datakit run`, whose driver is ours from its
first line: there the zygote is a fork of the driver itself (`fork_from_here`), made when the first pool
starts if `core.fork_safety` finds no thread that could hold a lock the child needs, so its workers also
start with the stage modules imported. Used on Linux only (backends.py): elsewhere forking a process
that loaded numpy's BLAS or system frameworks is not safe.

The protocol, over a socketpair, is strictly a request and then its reply, so a passed file descriptor
never interleaves with another message:

- ``("fork", environ, path, cwd)``: the driver's end of a new socketpair to the worker (SCM_RIGHTS), then
  ``(pid, with_pidfd)``, then when ``with_pidfd`` a pidfd of the worker (opened by the zygote before it can
  reap the worker, so it names that process and no later one with its pid): the driver learns that a
  worker is alive from it without a request (one per task submitted, before). The worker takes the
  driver's environment, module path and working directory as they are at this request, as a worker
  spawned then would have (credentials a driver sets before a pipeline reach its workers); what the
  modules the zygote imported at its start read of their environment then stays as it was;
- ``("exit_code", pid)``: its exit code, or None while it runs (the zygote reaps its children as they exit
  and keeps their codes);
- ``("kill", pid)``: SIGKILL, sent only to a child not yet reaped (so a reused pid is never hit); None;
- ``None`` or end of file: the zygote exits.

The zygote exits when its driver is gone (its parent changes); its workers watch the zygote as they
watched the driver, so they follow within about two of `DRIVER_POLL_S`.
"""

from __future__ import annotations

import gc
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection, wait as mp_wait
from multiprocessing.reduction import recv_handle, send_handle

from .processes import module_path, next_request, start_child, stop_child
from .worker import DRIVER_POLL_S, worker_main

REPLY_TIMEOUT_S = 60.0  # a zygote answers in milliseconds; one that does not is hung or gone
PRELOAD = ("datakit.shuffle", "pyarrow.parquet", "pyarrow.compute", "numpy", "datakit.core.arrow_numpy")


class ZygoteGone(RuntimeError):
    """The zygote did not answer (it died or hung): the caller starts another or spawns workers itself."""


class Zygote:
    """The driver's handle on one zygote process (thread-safe: one request at a time): a fresh interpreter,
    or with ``child`` the (process, pipe) `fork_from_here` made."""

    def __init__(self, child: tuple["ChildProcess", Connection] | None = None) -> None:
        self.proc, self.conn = child or start_child("datakit.shuffle.zygote")
        self._lock = threading.Lock()

    def _ask(self, msg: tuple, replies=lambda recv: recv(Connection.recv)):
        """Send ``msg`` and read its replies (``replies(recv)``, each ``recv(read)`` under the deadline)."""
        with self._lock:
            try:
                self.conn.send(msg)
                return replies(lambda read: self._recv(read, msg))
            except (OSError, EOFError) as e:
                raise ZygoteGone(f"the local backend's zygote (pid {self.proc.pid}) is gone: {e}") from None

    def _recv(self, read, msg: tuple):
        if not self.conn.poll(REPLY_TIMEOUT_S):
            raise ZygoteGone(f"the local backend's zygote (pid {self.proc.pid}) did not answer {msg[0]!r} "
                             f"within {REPLY_TIMEOUT_S:.0f} s")
        return read(self.conn)

    def fork(self) -> tuple["ForkedProcess", Connection]:
        """A new worker: its process and the driver's end of its pipe."""
        def replies(recv):
            handle = recv(recv_handle)
            pid, with_pidfd = recv(Connection.recv)
            return handle, int(pid), recv(recv_handle) if with_pidfd else None

        handle, pid, pidfd = self._ask(("fork", dict(os.environ), module_path(), os.getcwd()), replies)
        return ForkedProcess(self, pid, pidfd), Connection(handle)

    def exit_code(self, pid: int) -> int | None:
        return self._ask(("exit_code", pid))

    def kill(self, pid: int) -> None:
        self._ask(("kill", pid))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        stop_child(self.proc, self.conn)


class _Polled:
    """A process known by its pid, as `stop_child` and the pool see it: the part of `subprocess.Popen`'s
    interface they use (``pid``, ``returncode``, ``poll``, ``wait``, ``kill``); subclasses say how its
    exit code is polled and how it is killed."""

    what = "process"

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def _exit_code(self) -> int | None:
        raise NotImplementedError

    def _kill(self) -> None:
        raise NotImplementedError

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._exit_code()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"{self.what} {self.pid}", timeout)
            time.sleep(0.005)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            self._kill()


class ForkedProcess(_Polled):
    """A zygote's child (a worker): its exit code and its kill go through the zygote; whether it still
    runs is read from its pidfd, when the zygote sent one (no request while it runs)."""

    what = "worker"

    def __init__(self, zygote: Zygote, pid: int, pidfd: int | None = None) -> None:
        super().__init__(pid)
        self.zygote, self.pidfd = zygote, pidfd

    def _exit_code(self) -> int | None:
        if self.pidfd is not None:
            if not _exited(self.pidfd):
                return None
            os.close(self.pidfd)
            self.pidfd = None
        try:
            return self.zygote.exit_code(self.pid)
        except ZygoteGone:  # its exit code went with the zygote; orphaned, it exits on its own
            return None if _running(self.pid) else -1

    def _kill(self) -> None:
        try:
            self.zygote.kill(self.pid)
        except ZygoteGone:
            pass  # orphaned: it exits on its own within DRIVER_POLL_S


class ChildProcess(_Polled):
    """A child this process forked itself (a zygote forked from the driver)."""

    what = "zygote"

    def _exit_code(self) -> int | None:
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # reaped by someone else: its code is gone
            return -1
        return os.waitstatus_to_exitcode(status) if pid else None

    def _kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)


def fork_from_here() -> Zygote:
    """A zygote forked from this process now, holding every module it imported, so its workers start
    with the stage modules they run as well as pyarrow and numpy: a fresh zygote's start and imports
    (~0.25 CPU-s) and each worker's imports of the stage it runs (~0.1 CPU-s) are not paid. Only for a
    process the `datakit` command claimed (`core.fork_safety.claim_process`; backends._first_zygote), and
    only inside `fork_safety.quiesced()`, which said no other thread can hold a lock the child needs.

    The child inherits the driver as it is at this instant; it only serves `_serve`'s requests and
    leaves through ``os._exit`` (no ``atexit`` of the driver's runs in it), so none of the driver's
    state is used there but the modules. The garbage collector's objects are frozen across the fork,
    so the zygote's and the workers' collections do not write to the pages they share with the
    driver; the driver unfreezes its own at once (frozen, a cycle would never be collected)."""
    ours, theirs = socket.socketpair()
    gc.freeze()
    try:
        pid = os.fork()
    except OSError:
        gc.unfreeze()
        ours.close()
        theirs.close()
        raise
    if pid == 0:
        code = 0
        try:
            os.setsid()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not a handler the driver may have set
            ours.close()
            _serve(Connection(theirs.detach()), preload=())
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    gc.unfreeze()
    theirs.close()
    return Zygote((ChildProcess(pid), Connection(ours.detach())))


def _exited(pidfd: int) -> bool:
    """The process of this pidfd has exited (a pidfd reads ready once it has)."""
    p = select.poll()
    p.register(pidfd, select.POLLIN)
    return bool(p.poll(0))


def _pidfd(pid: int) -> int | None:
    """A pidfd of this child (not yet reaped), or None where the kernel has none (before Linux 5.3)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _running(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[-1][:1] != "Z"
    except OSError:
        return False


# ---------------------------------------------------------------- the zygote process
def _reap(exited: dict[int, int], children: set[int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        exited[pid] = os.waitstatus_to_exitcode(status)


def _fork_worker(conn: Connection, wakeup: tuple[int, int], environ: dict[str, str], path: list[str],
                 cwd: str) -> tuple[int, int | None]:
    """Fork one worker with the driver's environment, module path and working directory; send the
    driver its end of the worker's pipe; the worker's pid and a pidfd of it (or None)."""
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the worker: nothing of the zygote's plumbing stays open in it
        code = 0
        try:
            os.setsid()
            os.environ.clear()
            os.environ.update(environ)
            sys.path[:] = path + [p for p in sys.path if p not in path]
            os.chdir(cwd)
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in wakeup:
                os.close(fd)
            conn.close()
            ours.close()
            worker_main(Connection(theirs.detach()))
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    theirs.close()
    send_handle(conn, ours.fileno(), os.getppid())
    ours.close()
    return pid, _pidfd(pid)


def _serve(conn: Connection, preload: tuple[str, ...] = PRELOAD) -> None:
    for name in preload:
        __import__(name)
    driver = os.getppid()
    wakeup = os.pipe()
    os.set_blocking(wakeup[1], False)
    signal.set_wakeup_fd(wakeup[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a child's exit wakes the loop (through the fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    children: set[int] = set()
    exited: dict[int, int] = {}
    while os.getppid() == driver:
        ready = mp_wait([conn, wakeup[0]], DRIVER_POLL_S)
        if wakeup[0] in ready:
            os.read(wakeup[0], 4096)
        _reap(exited, children)
        if conn not in ready:
            continue
        msg = next_request(conn)
        if msg is None:
            return
        if msg[0] == "fork":
            pid, pidfd = _fork_worker(conn, wakeup, *msg[1:])
            children.add(pid)
            exited.pop(pid, None)  # a reused pid: the exit code kept is an earlier worker's
            conn.send((pid, pidfd is not None))
            if pidfd is not None:
                send_handle(conn, pidfd, driver)
                os.close(pidfd)
        elif msg[0] == "exit_code":
            conn.send(exited.get(msg[1]))
        elif msg[0] == "kill":
            if msg[1] in children:
                os.kill(msg[1], signal.SIGKILL)
            conn.send(None)


if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1])))
