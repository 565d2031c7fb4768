"""Fingerprints of code: what the stage version lock records and what keys a user stage's outputs.

A fingerprint hashes a normalized form of the source (the AST without docstrings or positions), so
comment, docstring and formatting edits never change it, while any code edit does. Source files are
found without importing them, so fingerprinting a stage never pulls in its heavy dependencies.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Callable

from datakit.core.pysource import find_spec
from datakit.manifest.calls import locate_call

FINGERPRINT_CHARS = 16


# ---------------------------------------------------------------------------------------------------
# Normalized source


class _DropStringStatements(ast.NodeTransformer):
    """Removes bare string statements: docstrings (module, class, function) and attribute docstrings.

    They never change what the code computes, so editing them must not change a fingerprint.
    """

    def visit_Expr(self, node: ast.Expr) -> ast.AST | None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return None
        return node


def _canonical(node: Any) -> str:
    """A deterministic dump of an AST that omits None and empty-list fields.

    Like `ast.dump(annotate_fields=True, include_attributes=False)`, but stable across Python
    versions: fields that newer versions add with empty defaults (`type_params` in 3.12) and the
    empty fields 3.13's `ast.dump` stops printing leave no trace, so one lock serves 3.11 to 3.13.
    """
    if isinstance(node, ast.AST):
        fields = []
        for name in node._fields:
            value = getattr(node, name, None)
            if value is None or value == []:
                continue
            fields.append(f"{name}={_canonical(value)}")
        return f"{type(node).__name__}({', '.join(fields)})"
    if isinstance(node, list):
        return f"[{', '.join(_canonical(item) for item in node)}]"
    return repr(node)


def normalized_source(source: str | bytes, filename: str = "<source>") -> str:
    """The part of a module's source that can change behaviour: its AST minus docstrings and positions."""
    tree = _DropStringStatements().visit(ast.parse(source, filename=filename))
    return _canonical(tree)


def _digest(entries: Iterable[tuple[str, str]]) -> str:
    """sha256 over sorted (name, normalized source) pairs, truncated to FINGERPRINT_CHARS hex digits."""
    hasher = hashlib.sha256(b"datakit-code-fingerprint-v1\0")
    for name, normalized in sorted(entries):
        hasher.update(name.encode() + b"\0" + normalized.encode() + b"\0")
    return hasher.hexdigest()[:FINGERPRINT_CHARS]


# ---------------------------------------------------------------------------------------------------
# Locating source files without importing


def _package_files(name: str, locations: Iterable[str]) -> dict[str, Path]:
    """Every .py file under a package's directories, keyed by its dotted module name."""
    files: dict[str, Path] = {}
    for location in locations:
        root = Path(location)
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
            for filename in sorted(f for f in filenames if f.endswith(".py")):
                relative = (Path(dirpath) / filename).relative_to(root).with_suffix("").parts
                if relative[-1] == "__init__":
                    relative = relative[:-1]
                files.setdefault(".".join((name, *relative)), Path(dirpath) / filename)
    return files


def module_files(name: str) -> dict[str, Path]:
    """The source files of a module (one file) or package (its __init__ and all submodules, recursively)."""
    spec = find_spec(name)  # found, never imported: see datakit.core.pysource
    if spec.submodule_search_locations is not None:
        return _package_files(name, spec.submodule_search_locations)
    if not spec.origin or not spec.origin.endswith(".py"):
        raise ValueError(f"module {name!r} has no Python source to fingerprint (origin: {spec.origin})")
    return {name: Path(spec.origin)}


# ---------------------------------------------------------------------------------------------------
# Fingerprints


def module_fingerprint(names: Sequence[str]) -> str:
    """The fingerprint of the code of these modules and packages: what a stage's output depends on."""
    files: dict[str, Path] = {}
    for name in names:
        files.update(module_files(name))
    return _digest((module, normalized_source(path.read_bytes(), str(path))) for module, path in files.items())


def callable_fingerprint(fn: Callable[..., Any]) -> str:
    """The fingerprint of a user's callable: its qualified name plus the normalized source of its module.

    The whole module counts, so editing the function or any helper beside it changes the fingerprint;
    the module's name does not, so the same script run as `__main__` or imported keys the same way.
    """
    while isinstance(fn, functools.partial):
        fn = fn.func
    fn = inspect.unwrap(fn)
    target = fn if inspect.isfunction(fn) or inspect.isclass(fn) or inspect.ismethod(fn) else type(fn)
    try:
        path = inspect.getsourcefile(target)
    except TypeError:  # a builtin, or a class defined in C
        path = None
    if path is None or not Path(path).is_file():
        raise ValueError(f"cannot fingerprint {fn!r}: its module has no source file (defined interactively?)")
    qualname = getattr(target, "__qualname__", type(target).__qualname__)
    return _digest([(qualname, normalized_source(Path(path).read_bytes(), path))])


def call_fingerprint(call: str, search_dir: str | None = None) -> str:
    """`callable_fingerprint` of the function ``package.module:function`` names, read from source without
    importing it (`datakit.manifest.calls`): the same value, so planning a run never runs user code and a
    stage's identity does not depend on whether its function was imported. CallNotFound (a ValueError)
    when the module or function does not exist; ValueError when its module has no Python source."""
    found = locate_call(call, search_dir)
    if found.path is None:
        raise ValueError(f"cannot fingerprint {call}: {found.note}")
    return _digest([(found.qualname, normalized_source(Path(found.path).read_bytes(), found.path))])
