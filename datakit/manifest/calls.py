"""Where a manifest's `call: package.module:function` is defined: found by reading source, never by importing.

Importing a module runs its top-level code, and `validate`, `status`, `verify`, `gc`, `report` and
`run --dry-run` must never run a manifest's code. So the module is found on disk the way `import` finds
it once the manifest's directory is appended to sys.path (`datakit.core.pysource`), parsed, and the
name looked up among its top-level bindings, following imports, aliases and `functools.partial` the way
`inspect` would find the function's own file. That is enough to report a missing module or function
at the manifest's line, and to key a user stage by the source that defines its function
(`datakit.stages.code_fingerprint.call_fingerprint`): only a step that runs the function imports it.

A name bound in a way reading cannot follow (`f = make_filter(3)`, a module `__getattr__`, `globals()`)
is kept as it is written and keyed by its module's whole source, so editing that module still rebuilds.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from datakit.core.pysource import find_spec, source_file

_MAX_HOPS = 32  # aliases and re-exports followed before giving up (a cycle `a = b; b = a` ends here)
_BLOCKS = tuple(getattr(ast, n) for n in ("If", "Try", "TryStar", "With", "AsyncWith", "For", "AsyncFor", "While")
                if hasattr(ast, n))
_DYNAMIC = frozenset({"globals", "exec", "setattr", "vars"})


@dataclass(frozen=True)
class CallSource:
    """The file that defines a call's function and the function's ``__qualname__`` there.

    ``path`` is None when the definition lies in a module without Python source (an extension module);
    ``note`` then says which, for the error a fingerprint raises."""

    path: str | None
    qualname: str
    note: str = ""


class CallNotFound(ValueError):
    """The call's module or function does not exist, or its module does not parse: import would fail."""


@dataclass(frozen=True)
class _Module:
    name: str
    path: str
    tree: ast.Module
    is_package: bool


@dataclass(frozen=True)
class _Found:
    source: CallSource
    is_class: bool = False


def locate_call(call: str, search_dir: str | None = None) -> CallSource:
    """Where ``package.module:function`` is defined, with ``search_dir`` searched after sys.path (where the
    run imports it from). Raises CallNotFound when import would fail: no such module, no such name, or
    a syntax error."""
    module, _, attr = call.partition(":")
    extra = (search_dir,) if search_dir else ()
    try:
        return _resolve(module, attr.split("."), extra, _MAX_HOPS).source
    except CallNotFound as e:
        hint = _shadowed(module.split(".")[0], search_dir)
        if not hint:
            raise
        raise CallNotFound(f"{e}; {hint}") from None


def _shadowed(top: str, search_dir: str | None) -> str:
    """Why a module beside the manifest is not the one used: one of that name on sys.path comes first."""
    if not search_dir:
        return ""
    mine = next((p for p in (Path(search_dir) / f"{top}.py", Path(search_dir) / top) if p.exists()), None)
    try:
        used = find_spec(top) if mine is not None else None
    except ModuleNotFoundError:
        used = None
    where = (used.origin or ", ".join(used.submodule_search_locations or ())) if used is not None else ""
    if not where or Path(search_dir) in Path(where).parents:
        return ""
    return f"{mine} is not used: the {top!r} found on sys.path first ({where}) is; give your module another name"


def _load(name: str, extra: tuple[str, ...]) -> _Module | CallSource:
    """The module's parsed source; a CallSource with no path when it has none (an extension module)."""
    try:
        spec = find_spec(name, extra)
    except ModuleNotFoundError as e:
        where = f"sys.path and {extra[0]}" if extra else "sys.path"
        raise CallNotFound(f"no module named {e.name!r} (searched {where})") from None
    path = source_file(spec)
    if path is None:
        return CallSource(None, "", f"module {name!r} has no Python source ({spec.origin or 'a namespace package'})")
    try:
        tree = ast.parse(Path(path).read_bytes(), filename=path)
    except SyntaxError as e:
        raise CallNotFound(f"{path}:{e.lineno}: cannot parse it: {e.msg}") from None
    except OSError as e:
        raise CallNotFound(f"cannot read {path}: {e.strerror or e}") from None
    return _Module(name, path, tree, spec.submodule_search_locations is not None)


def _resolve(module: str, parts: list[str], extra: tuple[str, ...], hops: int) -> _Found:
    """``module`` then attribute ``parts``: the definition they lead to."""
    if hops <= 0:
        raise CallNotFound(f"{module}:{'.'.join(parts)}: more than {_MAX_HOPS} aliases to follow (a cycle?)")
    mod = _load(module, extra)
    if isinstance(mod, CallSource):
        return _Found(CallSource(None, ".".join(parts), mod.note))
    node = _binding(mod.tree.body, parts[0])
    if node is not None:
        return _follow(node, mod, parts, extra, hops - 1)
    for star in reversed(_star_imports(mod)):
        try:
            return _resolve(star, parts, extra, hops - 1)
        except CallNotFound:
            continue
    if mod.is_package and len(parts) > 1:  # `pkg.sub` of `pkg:sub.fn`: a submodule import would load
        return _resolve(f"{module}.{parts[0]}", parts[1:], extra, hops - 1)
    if _is_dynamic(mod.tree):
        return _Found(CallSource(mod.path, ".".join(parts)))
    raise CallNotFound(f"module {module} ({mod.path}) defines no {parts[0]!r}")


def _follow(node: ast.stmt, mod: _Module, parts: list[str], extra: tuple[str, ...], hops: int) -> _Found:
    """What one top-level binding of ``parts[0]`` in ``mod`` leads to."""
    name, rest = parts[0], parts[1:]
    as_written = _Found(CallSource(mod.path, ".".join(parts)))
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return _Found(CallSource(mod.path, name)) if not rest else as_written
    if isinstance(node, ast.ClassDef):
        return _in_class(node, rest, mod.path) or as_written
    if isinstance(node, ast.ImportFrom):
        alias = next(a for a in node.names if (a.asname or a.name) == name)
        return _resolve(_absolute(node, mod), [alias.name, *rest], extra, hops)
    if isinstance(node, ast.Import):
        alias = next(a for a in node.names if (a.asname or a.name.split(".")[0]) == name)
        target = alias.name if alias.asname else name
        if not rest:
            raise CallNotFound(f"{mod.name}:{name} is the module {target}, not a function")
        return _resolve(target, rest, extra, hops)
    value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
    found = _follow_value(value, mod, extra, hops) if value is not None and not rest else None
    return found or as_written


def _follow_value(value: ast.expr, mod: _Module, extra: tuple[str, ...], hops: int) -> _Found | None:
    """``name = <value>``: an alias, a lambda, a partial of a function, or an instance of a class (keyed
    by its class, as `inspect` keys a callable object). None when reading cannot tell."""
    if isinstance(value, ast.Lambda):
        return _Found(CallSource(mod.path, "<lambda>"))
    dotted = _dotted(value)
    if dotted:
        return _resolve(mod.name, dotted, extra, hops)
    if not isinstance(value, ast.Call):
        return None
    func = _dotted(value.func)
    if func and func[-1] == "partial" and value.args:
        return _follow_value(value.args[0], mod, extra, hops)
    try:
        made = _resolve(mod.name, func, extra, hops) if func else None
    except CallNotFound:
        return None
    return _Found(made.source) if made is not None and made.is_class else None


def _in_class(node: ast.ClassDef, rest: list[str], path: str) -> _Found | None:
    """``Class.method`` (nested classes too); None for a name the class body does not define (inherited)."""
    qualname, body = node.name, node.body
    for i, part in enumerate(rest):
        inner = _binding(body, part)
        if not isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return None
        qualname = f"{qualname}.{part}"
        if not isinstance(inner, ast.ClassDef):
            return _Found(CallSource(path, qualname)) if i == len(rest) - 1 else None
        body = inner.body
    return _Found(CallSource(path, qualname), is_class=True)


# ------------------------------------------------------------------ reading bindings
def _statements(body: list[ast.stmt]):
    """Statements that run at this level: module (or class) body and the blocks inside it, not functions."""
    for node in body:
        yield node
        if isinstance(node, _BLOCKS):
            for key in ("body", "orelse", "finalbody"):
                yield from _statements(getattr(node, key, []))
            for handler in getattr(node, "handlers", []):
                yield from _statements(handler.body)


def _bound_names(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.ImportFrom):
        return [a.asname or a.name for a in node.names if a.name != "*"]
    if isinstance(node, ast.Import):
        return [a.asname or a.name.split(".")[0] for a in node.names]
    if isinstance(node, ast.Assign):
        return [n for t in node.targets for n in _target_names(t)]
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)) and getattr(node, "value", None) is not None:
        return _target_names(node.target)
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return _target_names(node.target)
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return [n for i in node.items if i.optional_vars for n in _target_names(i.optional_vars)]
    return []


def _target_names(target: ast.expr) -> list[str]:
    """Names an assignment target binds (`a`, `a, *b`), not the objects `x.y = ` or `x[0] = ` change."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for t in target.elts for n in _target_names(t)]
    return []


def _binding(body: list[ast.stmt], name: str) -> ast.stmt | None:
    """The last statement at this level binding ``name`` (the one in force after the module ran)."""
    found = None
    for node in _statements(body):
        if name in _bound_names(node):
            found = node
    return found


def _star_imports(mod: _Module) -> list[str]:
    return [_absolute(n, mod) for n in _statements(mod.tree.body)
            if isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)]


def _absolute(node: ast.ImportFrom, mod: _Module) -> str:
    """The module an ``from X import`` statement in ``mod`` names, relative levels resolved."""
    if not node.level:
        return node.module or ""
    base = mod.name.split(".") if mod.is_package else mod.name.split(".")[:-1]
    if node.level - 1 >= len(base):
        raise CallNotFound(f"{mod.path}:{node.lineno}: relative import beyond the top-level package")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _dotted(expr: ast.expr) -> list[str]:
    """``a.b.c`` as ["a", "b", "c"]; [] for anything but names and attributes."""
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.insert(0, expr.attr)
        expr = expr.value
    return [expr.id, *parts] if isinstance(expr, ast.Name) else []


def _is_dynamic(tree: ast.Module) -> bool:
    """A module that may bind names reading cannot see: a module `__getattr__`, or globals()/exec/setattr
    called at its top level (inside a function they change nothing at import)."""
    if _binding(tree.body, "__getattr__") is not None:
        return True
    top_level = (n for n in _statements(tree.body) if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return any(isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id in _DYNAMIC
               for n in top_level for c in ast.walk(n))
