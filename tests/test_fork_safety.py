"""core/fork_safety.py decides whether `datakit run`'s driver may fork its workers' zygote while threads of
its own run. Its answer must be no whenever another thread could hold a lock the child would need: a
registered thread inside a unit of work, or any thread nobody registered. (The yes, in a process that
runs only registered threads, is tested where it is used: tests/test_shuffle_zygote.py, tests/test_cli.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from datakit.core import fork_safety

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="threads are read from /proc (Linux)")


def test_a_registered_thread_inside_its_work_holds_off_the_fork():
    inside, done = threading.Event(), threading.Event()

    def beat():
        with fork_safety.registered(), fork_safety.busy():
            inside.set()
            done.wait()

    t = threading.Thread(target=beat)
    t.start()
    try:
        assert inside.wait(60)
        with fork_safety.quiesced(timeout_s=0.01) as safe:
            assert safe is False
    finally:
        done.set()
        t.join()


def test_a_thread_nobody_registered_makes_forking_unsafe():
    done = threading.Event()
    t = threading.Thread(target=done.wait)
    t.start()
    try:
        with fork_safety.quiesced() as safe:
            assert safe is False
    finally:
        done.set()
        t.join()


def test_only_the_main_thread_may_fork():
    seen = []

    def ask():
        with fork_safety.quiesced() as safe:
            seen.append(safe)

    t = threading.Thread(target=ask)
    t.start()
    t.join()
    assert seen == [False]


_CHILD = """
import os
from datakit.core import fork_safety

fork_safety.claim_process()
r, w = os.pipe()
with fork_safety.registered(), fork_safety.busy():
    pid = os.fork()
    if pid == 0:
        ok = not fork_safety.process_is_ours() and not fork_safety._REGISTERED and fork_safety._GATE.acquire(timeout=0)
        os.write(w, b"1" if ok else b"0")
        os._exit(0)
os.waitpid(pid, 0)
print(os.read(r, 1).decode())
"""


def test_a_forked_child_starts_unclaimed_with_nothing_registered_and_the_gate_open():
    """The child of a fork (a worker) runs tasks, not the command: it is not ours to fork again, and the
    gate its parent held while forking is open in it. (In a fresh interpreter: this test process may run
    JAX's threads, which a fork here would copy.)"""
    res = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "1"
