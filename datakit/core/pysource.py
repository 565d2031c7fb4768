"""Finding a Python module's file without importing it.

Importing a module runs its top-level code. Fingerprinting a stage's code, checking that a manifest's
`call:` names a real function and planning a run only need the module's source file, so they find it
here: the spec `import` would use, found level by level (`importlib.util.find_spec("a.b")` imports `a`,
and with it whatever `a/__init__.py` runs).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence

PathFinder = importlib.machinery.PathFinder


def _loaded_spec(name: str) -> importlib.machinery.ModuleSpec | None:
    """The spec of a module this process already imported: `import` returns that one, wherever it is."""
    module = sys.modules.get(name)
    return getattr(module, "__spec__", None) if module is not None else None


def _top_level(name: str, extra_paths: Sequence[str]) -> importlib.machinery.ModuleSpec | None:
    """A top-level name as `import` finds it with ``extra_paths`` appended to sys.path: builtins, frozen
    and installed-package finders and sys.path first, the extra directories last."""
    try:
        spec = importlib.util.find_spec(name)  # a top-level name: finds, imports nothing
    except ValueError:  # in sys.modules without a spec (a `__main__` run from stdin)
        spec = None
    if spec is None and extra_paths:
        spec = PathFinder.find_spec(name, list(extra_paths))
    return spec


def find_spec(name: str, extra_paths: Sequence[str] = ()) -> importlib.machinery.ModuleSpec:
    """The spec `import name` would use once ``extra_paths`` are appended to sys.path; imports nothing.

    ModuleNotFoundError names the first level that is missing (`a.b` when package `a` has no `b`).
    """
    parts = name.split(".")
    spec: importlib.machinery.ModuleSpec | None = None
    for depth in range(1, len(parts) + 1):
        dotted = ".".join(parts[:depth])
        parent = spec
        spec = _loaded_spec(dotted)
        if spec is None and depth == 1:
            spec = _top_level(dotted, extra_paths)
        elif spec is None and parent is not None and parent.submodule_search_locations is not None:
            spec = PathFinder.find_spec(dotted, list(parent.submodule_search_locations))
        if spec is None:
            raise ModuleNotFoundError(f"no module named {dotted!r}", name=dotted)
    assert spec is not None
    return spec


def source_file(spec: importlib.machinery.ModuleSpec) -> str | None:
    """The .py file a spec loads (a package: its __init__.py); None for builtins, extensions, bytecode only
    and namespace packages."""
    origin = spec.origin
    return origin if spec.has_location and origin and origin.endswith(".py") else None
