"""A user stage that holds a run at a known point: its filter waits until a gate file appears.

Tests that must act while a run is between steps (kill or pause its store, run `gc` beside it) put
this stage after consolidate: when the ``.waiting`` file appears, every step before it is built and the
run is inside the gate's step, waiting; creating the gate file lets it go on. The wait is bounded, so a
test that fails never leaves a run waiting forever.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

GATE_ENV = "DATAKIT_TEST_GATE"
STDLIB = Path(sysconfig.get_paths()["stdlib"])

_MODULE = '''
import os, time

def wait(doc, config):
    gate = os.environ["DATAKIT_TEST_GATE"]
    open(gate + ".waiting", "a").close()
    deadline = time.monotonic() + 300
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.05)
    return True
'''


def gated_corpus(tmp: Path, prefix: str, source: str = "code") -> Path:
    """A small corpus (stdlib modules as text) and a manifest whose run stops at the gate after
    consolidate; returns the manifest's path. The gate file is ``tmp/gate`` (see `gate_env`)."""
    src = tmp / source
    src.mkdir(exist_ok=True)
    for name in ("heapq.py", "bisect.py", "textwrap.py", "shlex.py", "fnmatch.py", "colorsys.py"):
        (src / name).write_text((STDLIB / name).read_text())
    (tmp / "gate_stage.py").write_text(_MODULE)
    manifest = tmp / f"{source}.yaml"
    manifest.write_text(f"""\
prefix: {prefix}
sources:
  - {{name: {source}, uri: {source}/*.py, format: text}}
stages:
  - {{name: gate, call: "gate_stage:wait", kind: filter, place: after_consolidate}}
tokenize: {{vocab_size: 512, validation_fraction: 0.2}}
""")
    return manifest


def gate_env(tmp: Path) -> dict[str, str]:
    return {GATE_ENV: str(tmp / "gate")}


def wait_for_gate(tmp: Path, proc: subprocess.Popen, timeout_s: float = 180.0) -> None:
    """Block until the run reached the gate (bounded; fails if the run ended first)."""
    deadline = time.monotonic() + timeout_s
    while not (tmp / "gate.waiting").exists():
        assert proc.poll() is None, f"the run ended before reaching the gate:\n{proc.stderr.read()}"
        assert time.monotonic() < deadline, "the run did not reach the gate in time"
        time.sleep(0.1)


def open_gate(tmp: Path) -> None:
    (tmp / "gate").touch()


def datakit(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`datakit ARGS` in a subprocess (stdout and stderr piped, text)."""
    return subprocess.Popen([sys.executable, "-m", "datakit.cli", *args], cwd=cwd, env={**os.environ, **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
