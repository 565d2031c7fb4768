"""The local backend forks its workers from a zygote (datakit/shuffle/zygote.py): one fresh interpreter
that imports what workers need once, or under `datakit run` a fork of the driver itself. These tests hold
it to what spawned workers gave: workers that are not the driver's forks and run in their own session,
exit codes of dead workers, a dead zygote replaced without losing an attempt, and the same results; and
the driver forks its zygote only when it is ours and no thread could hold a lock the child needs."""

from __future__ import annotations

import json
import os
import signal
import select
import subprocess
import sys
from pathlib import Path

import pytest

from datakit.shuffle import Dataset, ExecConfig
from datakit.shuffle import backends

pytestmark = pytest.mark.skipif(not backends.USE_ZYGOTE, reason="the zygote is used on Linux only")

TEXT = Path("/usr/share/common-licenses/GPL-3").read_text().split()


def _cfg() -> ExecConfig:
    return ExecConfig(backend="local", max_workers=2)


def _where(x):
    """A task that says which process ran it, its parent and its session, and what it imported."""
    import sys as _sys

    return (x, os.getpid(), os.getppid(), os.getsid(0), "pandas" in _sys.modules)


def _word_counts(words: list[str]) -> dict[str, int]:
    ds = Dataset.from_items(words, num_shards=4).group_by(lambda w: w.lower(), lambda k, it: (k, sum(1 for _ in it)),
                                                          num_shards=3)
    return dict(ds.collect(_cfg()))


def _kill_and_wait(pid: int) -> None:
    fd = os.pidfd_open(pid)
    try:
        os.kill(pid, signal.SIGKILL)
        assert select.select([fd], [], [], 60)[0], f"process {pid} did not exit after SIGKILL"
    finally:
        os.close(fd)


def test_workers_are_forked_from_one_zygote_not_from_the_driver():
    rows = Dataset.from_items(list(range(8)), num_shards=8).map(_where).collect(_cfg())
    zygote = backends._ZYGOTE[0].proc.pid
    pids = {pid for _, pid, _, _, _ in rows}
    assert len(pids) <= 2 and os.getpid() not in pids
    assert {ppid for _, _, ppid, _, _ in rows} == {zygote}  # forked from the zygote, which the driver started
    assert all(sid == pid for _, pid, _, sid, _ in rows)  # each in its own session: a Ctrl-C is the driver's
    assert zygote not in pids
    with open(f"/proc/{zygote}/cmdline", "rb") as f:  # this test run is not datakit's to fork
        assert f.read().split(b"\0")[1:3] == [b"-m", b"datakit.shuffle.zygote"]


def test_a_dead_workers_exit_code_comes_through_the_zygote_and_it_is_replaced():
    pool = backends.local_backend(2)
    before = _word_counts(TEXT)
    victim = pool.workers[0].proc
    _kill_and_wait(victim.pid)
    assert victim.poll() == -signal.SIGKILL
    assert _word_counts(TEXT) == before
    assert all(w.proc.poll() is None for w in pool.workers) and victim not in [w.proc for w in pool.workers]


def test_a_killed_zygote_is_replaced_and_results_are_the_same(caplog):
    """A zygote killed between pipelines (an OOM kill): its idle workers, watching it, exit; the next
    pipeline finds them dead, replaces them from a new zygote, and loses no attempt."""
    before = _word_counts(TEXT)
    pool = backends.local_backend(2)
    old = backends._ZYGOTE[0]
    workers = [w.proc.pid for w in pool.workers]
    fds = [os.pidfd_open(p) for p in workers]
    try:
        _kill_and_wait(old.proc.pid)
        for fd, pid in zip(fds, workers):
            assert select.select([fd], [], [], 30)[0], f"worker {pid} outlived its zygote"
    finally:
        for fd in fds:
            os.close(fd)
    result = Dataset.from_items(TEXT, num_shards=4).group_by(
        lambda w: w.lower(), lambda k, it: (k, sum(1 for _ in it)), num_shards=3).run(_cfg())
    assert dict(result.items) == before
    assert sum(s.worker_deaths for s in result.stats) == 0
    assert backends._ZYGOTE[0] is not old and backends._ZYGOTE[0].alive()
    assert "zygote" in caplog.text


def test_a_running_workers_liveness_is_read_from_its_pidfd_not_asked_of_the_zygote(monkeypatch):
    """The pool checks a worker is alive before each task it sends; with the pidfd the zygote passed at
    fork that check is a poll of a file descriptor, not a request to the zygote (one per task before).
    A dead worker's exit code still comes from the zygote (the test above)."""
    Dataset.from_items([1], num_shards=1).map(lambda x: x).collect(_cfg())  # the pool and its zygote are up
    zygote = backends._ZYGOTE[0]
    asked: list[int] = []
    monkeypatch.setattr(zygote, "exit_code", lambda pid: asked.append(pid))
    rows = Dataset.from_items(list(range(64)), num_shards=32).map(lambda x: x * 2).collect(_cfg())
    assert sorted(rows) == [2 * x for x in range(64)]
    assert asked == []


def test_workers_forked_from_the_zygote_start_without_pandas():
    """The zygote imports what every task needs (pyarrow, numpy, the engine), not pandas."""
    rows = Dataset.from_items([1, 2], num_shards=2).map(_where).collect(_cfg())
    assert not any(has_pandas for *_, has_pandas in rows)


def test_without_the_zygote_workers_are_spawned_interpreters(monkeypatch):
    """Where forking is not safe (macOS, Windows) each worker is its own interpreter: same results."""
    before = _word_counts(TEXT)
    backends._close_pools()
    monkeypatch.setattr(backends, "USE_ZYGOTE", False)
    try:
        assert _word_counts(TEXT) == before
        pool = backends.local_backend(2)
        assert not backends._ZYGOTE and all(w.proc.args[:3] == [sys.executable, "-m", "datakit.shuffle.worker"]
                                            for w in pool.workers)
    finally:
        backends._close_pools()


def _env_and_import(x):
    import importlib

    return (os.environ.get("DATAKIT_TEST_ZYGOTE_ENV"), importlib.import_module("zygote_user_mod").VALUE,
            Path("relative.txt").read_text())


def test_a_new_worker_takes_the_drivers_environment_and_path_as_they_are_now(tmp_path, monkeypatch):
    """Credentials, a module folder or a working directory the driver sets up after the zygote started
    reach the workers a new pool forks (as they reached workers spawned then); the zygote keeps its own."""
    Dataset.from_items([1], num_shards=1).map(lambda x: x).collect(_cfg())  # the zygote is up
    zygote = backends._ZYGOTE[0]
    for pool in backends._POOLS.values():  # the pools close; the zygote stays and forks the next pool's workers
        pool.close()
    backends._POOLS.clear()
    (tmp_path / "zygote_user_mod.py").write_text("VALUE = 'from the driver'\n")
    monkeypatch.setenv("DATAKIT_TEST_ZYGOTE_ENV", "set after the zygote started")
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "relative.txt").write_text("found from the driver's working directory")
    monkeypatch.chdir(tmp_path)
    rows = Dataset.from_items([1, 2], num_shards=2).map(_env_and_import).collect(_cfg())
    want = ("set after the zygote started", "from the driver", "found from the driver's working directory")
    assert rows == [want] * 2
    assert backends._ZYGOTE[0] is zygote


def _mapped_blocks_for_a_big_buffer(_x):
    """How many more blocks glibc serves by a mapping of their own while a task holds a 4 MiB buffer."""
    import ctypes

    class _Info(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                   "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _Info
    before = libc.mallinfo2().hblks
    buf = bytearray(4 << 20)
    during = libc.mallinfo2().hblks
    del buf
    return during - before


def test_a_worker_keeps_a_tasks_freed_buffers_in_its_heap_for_the_next_task():
    """A worker's big buffers come from its heap, not from mappings unmapped at each free, which the next
    task would page-fault in again (worker._keep_freed_heap). The driver, a fresh interpreter with glibc's
    defaults, maps such a buffer on its own: the check can tell the two apart."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        pytest.skip("needs glibc 2.33+ (mallinfo2) to see how malloc served a buffer")
    import subprocess

    fresh = subprocess.run([sys.executable, "-c", "import tests.test_shuffle_zygote as t; "
                            "print(t._mapped_blocks_for_a_big_buffer(0))"], capture_output=True, text=True,
                           cwd=Path(__file__).resolve().parents[1], timeout=120, check=True)
    assert fresh.stdout.strip() == "1", fresh  # glibc's default: a 4 MiB block is a mapping of its own
    rows = Dataset.from_items([0, 1, 2, 3], num_shards=4).map(_mapped_blocks_for_a_big_buffer).collect(_cfg())
    assert rows == [0, 0, 0, 0]


_DRIVER = """
import json, os, sys, threading
from datakit.core import fork_safety
from datakit.shuffle import Dataset, ExecConfig, backends
from datakit.steps.runs import RunRecord


def where(x):
    return (x, os.getpid(), os.getppid())


def cmdline(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read()


if sys.argv[1] != "unclaimed":
    fork_safety.claim_process()
stop = threading.Event()
if sys.argv[1] == "stray-thread":
    threading.Thread(target=stop.wait, daemon=True).start()
with RunRecord(sys.argv[2], "test-run", [], timeout_s=0.2):  # its registered heartbeat beats every 0.05 s
    rows = Dataset.from_items(list(range(8)), num_shards=8).map(where).collect(
        ExecConfig(backend="local", max_workers=2))
zygote = backends._ZYGOTE[0].proc.pid
with open(f"/proc/{zygote}/stat") as f:
    parent = int(f.read().rsplit(") ", 1)[1].split()[1])
print(json.dumps({"rows": rows, "me": os.getpid(), "zygote": zygote, "zygote_parent": parent,
                  "forked": cmdline(zygote) == cmdline(os.getpid())}))
stop.set()
"""


@pytest.mark.parametrize("driver, forked", [("claimed", True), ("stray-thread", False), ("unclaimed", False)])
def test_a_claimed_driver_forks_its_zygote_from_itself_unless_a_thread_could_hold_a_lock(tmp_path, driver, forked):
    """`datakit run`'s driver (a claimed process) forks its first zygote from itself, while its run
    record's heartbeat runs (a registered thread); a thread nobody registered (it could hold a lock the
    child would need forever) or a process datakit does not own (a user's program, this test run) gets a
    fresh interpreter. Either way the workers are the zygote's children and the results the same."""
    script = tmp_path / "driver.py"
    script.write_text(_DRIVER)
    res = subprocess.run([sys.executable, str(script), driver, str(tmp_path / "prefix")], capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.splitlines()[-1])
    assert sorted(x for x, _, _ in out["rows"]) == list(range(8))
    assert {ppid for _, _, ppid in out["rows"]} == {out["zygote"]}
    assert out["me"] not in {pid for _, pid, _ in out["rows"]}
    assert out["zygote_parent"] == out["me"]
    assert out["forked"] is forked


_FORKS_AFTER_A_POOL = """
import os
from datakit.core import fork_safety
from datakit.shuffle import Dataset, ExecConfig, backends

fork_safety.claim_process()
Dataset.from_items([1, 2], num_shards=2).map(lambda x: x).collect(ExecConfig(backend="local", max_workers=2))
assert backends._POOLS and backends._ZYGOTE
r, w = os.pipe()
with backends._ZYGOTE_LOCK:  # held by the forking thread, as when the zygote itself is forked
    pid = os.fork()
    if pid == 0:
        clean = not backends._POOLS and not backends._ZYGOTE and backends._ZYGOTE_LOCK.acquire(timeout=0)
        os.write(w, b"1" if clean else b"0")
        os._exit(0)
os.waitpid(pid, 0)
print(os.read(r, 1).decode())
"""


def test_a_forked_child_holds_none_of_its_parents_pools():
    """A child forked from a process with pools (the zygote forked from the driver, a worker, a user's
    multiprocessing child) starts with none of the parent's pool or zygote handles, which would reach the
    parent's processes, and with the zygote lock open although the forking thread held it."""
    res = subprocess.run([sys.executable, "-c", _FORKS_AFTER_A_POOL], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "1"
