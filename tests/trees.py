"""What several tests compare: two output trees, file for file and byte for byte."""

from __future__ import annotations

import filecmp
import os


def tree_files(root: str) -> dict[str, str]:
    """Relative path -> path of every file under ``root``."""
    return {os.path.relpath(os.path.join(d, f), root): os.path.join(d, f)
            for d, _, files in os.walk(root) for f in files}


def assert_same_tree(a: str, b: str) -> None:
    """The same relative paths under ``a`` and ``b``, each file byte-identical."""
    fa, fb = tree_files(a), tree_files(b)
    assert sorted(fa) == sorted(fb)
    for rel in fa:
        assert filecmp.cmp(fa[rel], fb[rel], shallow=False), f"{rel} differs"
