"""Where the embedded default manifest lives (shipped inside the package), and where a run of it
writes when no prefix is given (relative to the working directory)."""

from __future__ import annotations

import os

DEFAULT_PREFIX = "datakit-out"


def default_manifest_path() -> str:
    return os.path.join(os.path.dirname(__file__), "ferry", "smoke.yaml")
