"""Where the embedded default manifest lives (shipped inside the package)."""

from __future__ import annotations

import os


def default_manifest_path() -> str:
    return os.path.join(os.path.dirname(__file__), "ferry", "smoke.yaml")
