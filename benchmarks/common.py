"""What the benchmarks share: where the repository and the peer's venv are, and how a benchmark runs a
module of this package in a child process.

A child runs as `python -m benchmarks.<name>`, like its parent, so it imports this package and datakit
the same way: from the current directory (the repository root) or PYTHONPATH, both inherited. Standard
library only: the peer's venv (datatrove, Ray Data) imports this module too, and has no datakit.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PEER_PYTHON = REPO / ".venv-bench" / "bin" / "python"  # the peers' venv (see each benchmark's docstring)
# How to make it: one requirements file for every datatrove peer (benchmarks/peer-requirements.txt).
PEER_SETUP = "`python3 -m venv .venv-bench && .venv-bench/bin/pip install -r benchmarks/peer-requirements.txt`"


def tokenizer_dir(work: str | Path, vocab: int) -> Path:
    """Where a benchmark keeps the tokenizer datakit's trainer made for it: named by the vocabulary and the
    trainer's version (the tokenizer stage's), so a kept tokenizer is always one today's trainer writes and
    a peer is handed what a default datakit run trains now; a new trainer version trains again."""
    from datakit.stages.tokenizer import VERSION

    return Path(work) / f"tokenizer-{vocab}-v{VERSION}"


def module_command(python: str | Path, name: str, *args: str) -> list[str]:
    """The command running benchmarks.<name> with ``args`` in ``python`` (ours or the peer's)."""
    return [str(python), "-m", f"benchmarks.{name}", *args]


def user_env(**extra: str) -> dict[str, str]:
    """This process's environment as a user's run would see it, plus ``extra``: without
    PYTHONDONTWRITEBYTECODE (set in some sandboxes and CI images), which makes every measured process
    compile every module from source on each start (~0.3 CPU-s per process here) where an installed
    package runs from its cached bytecode. Applied to both sides of a comparison."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, **extra}


def peer_import_error(python: str | Path, imports: str, setup: str) -> str | None:
    """None when the peer's ``python`` exists and runs ``imports``; else one line saying what it lacks and
    where the setup line is. Checked before any side runs, so a venv missing a module (datatrove imports
    regex, and its JsonlReader needs orjson, neither of which it requires) fails the benchmark at once,
    not after our side's minutes, with a traceback. A missing venv is not an error here: the benchmark
    then reports the peer's figures as null, with the reason."""
    if not Path(python).exists():
        return None
    out = subprocess.run([str(python), "-c", imports], capture_output=True, text=True, cwd=str(REPO), timeout=600)
    if out.returncode == 0:
        return None
    last = (out.stderr.strip().splitlines() or ["exited " + str(out.returncode)])[-1]
    return f"the peer's venv ({python}) cannot run `{imports}`: {last}; install it with {setup}"
