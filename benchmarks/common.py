"""What the benchmarks share: where the repository and the peer's venv are, and how a benchmark runs a
module of this package in a child process.

A child runs as `python -m benchmarks.<name>`, like its parent, so it imports this package and datakit
the same way: from the current directory (the repository root) or PYTHONPATH, both inherited. Standard
library only: the peer's venv (datatrove, Ray Data) imports this module too, and has no datakit.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PEER_PYTHON = REPO / ".venv-bench" / "bin" / "python"  # the peers' venv (see each benchmark's docstring)


def module_command(python: str | Path, name: str, *args: str) -> list[str]:
    """The command running benchmarks.<name> with ``args`` in ``python`` (ours or the peer's)."""
    return [str(python), "-m", f"benchmarks.{name}", *args]
