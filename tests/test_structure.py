"""The shape of the code, checked from its source: no import cycle between datakit modules and no
function over 80 lines.

A cycle is found through every import, at module level or inside a function: a function-level import
hides a cycle from Python at import time, not from the reader who has to hold both modules in mind.
Imports that land on a package's `__init__` are not followed: it only re-exports its modules.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_FUNCTION_LINES = 80
GENERATED = {"datakit/quality/_en_tokenizer_rules.py"}  # a generated table, not code anyone reads as such


@dataclass(frozen=True)
class Module:
    name: str  # dotted: datakit.steps.runner; a package is named by its __init__'s package
    path: Path
    is_package: bool


def modules(root: Path, package: str = "datakit") -> dict[str, Module]:
    """Every module of ``package`` under ``root``, by dotted name."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        found[name] = Module(name, path, is_package)
    return found


def _imported_names(node: ast.Import | ast.ImportFrom, module: Module) -> list[str]:
    """The dotted names an import statement may refer to, relative imports resolved."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
        anchor = package[:len(package) - (node.level - 1)]
        base = ".".join(anchor + ([base] if base else []))
    # `from a import b` names module a.b when b is a submodule, else something defined in a
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def _owner(name: str, mods: dict[str, Module]) -> str | None:
    """The module a dotted name lives in: its longest prefix that is a module."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(mods: dict[str, Module]) -> dict[str, set[str]]:
    """module -> the datakit modules it imports anywhere in its source, package __init__s left out."""
    graph = {}
    for name, module in mods.items():
        targets = set()
        for node in ast.walk(ast.parse(module.path.read_text(), str(module.path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                targets.update(_owner(n, mods) for n in _imported_names(node, module))
        graph[name] = {t for t in targets if t and t != name and not mods[t].is_package}
    return graph


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def _path(graph: dict[str, set[str]], start: str, goal: str) -> list[str]:
    """A shortest import chain from start to goal (breadth first)."""
    came_from, frontier = {start: None}, [start]
    while frontier:
        nxt_frontier = []
        for node in frontier:
            for nxt in sorted(graph[node]):
                if nxt not in came_from:
                    came_from[nxt] = node
                    nxt_frontier.append(nxt)
        frontier = nxt_frontier
    chain, node = [], goal
    while node is not None:
        chain.append(node)
        node = came_from[node]
    return chain[::-1]


def import_cycles(graph: dict[str, set[str]]) -> list[str]:
    """One line per group of modules that import each other, with one cycle through it spelled out."""
    reach = {name: _reachable(graph, name) for name in graph}
    cycles, done = [], set()
    for name in sorted(graph):
        if name in done or name not in reach[name]:
            continue
        group = sorted(other for other in reach[name] if name in reach[other])
        done.update(group)
        back = next(m for m in sorted(graph) if name in graph[m] and m in group)
        chain = _path(graph, name, back) + [name]
        cycles.append(f"{', '.join(group)}: {' -> '.join(chain)}")
    return cycles


def long_functions(root: Path, mods: dict[str, Module], limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """`path:line name (N lines)` for every function or method longer than ``limit`` lines."""
    found = []
    for module in mods.values():
        rel = module.path.relative_to(root).as_posix()
        if rel in GENERATED:
            continue
        for node in ast.walk(ast.parse(module.path.read_text(), str(module.path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append(f"{rel}:{node.lineno} {node.name} ({lines} lines)")
    return sorted(found)


def test_no_import_cycle_between_datakit_modules():
    cycles = import_cycles(import_graph(modules(REPO)))
    assert cycles == [], "import cycles (put the shared piece where both can import it):\n" + "\n".join(cycles)


def test_no_function_over_80_lines():
    found = long_functions(REPO, modules(REPO))
    assert found == [], f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(found)


def _package(root: Path, files: dict[str, str]) -> dict[str, Module]:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return modules(root)


def test_the_checks_find_a_cycle_through_a_function_level_import_and_a_long_function(tmp_path):
    mods = _package(tmp_path, {
        "datakit/__init__.py": "from .a import f\n",
        "datakit/a.py": "from datakit.b import g\n\ndef f():\n    return g\n",
        "datakit/b.py": "def g():\n    from . import c\n    return c\n",
        "datakit/c.py": "def h():\n    from .a import f\n    return f\n" + "    x = 1\n" * 80,
        "datakit/quality/_en_tokenizer_rules.py": "def table():\n" + "    x = 1\n" * 90,
    })
    assert import_cycles(import_graph(mods)) == ["datakit.a, datakit.b, datakit.c: "
                                                 "datakit.a -> datakit.b -> datakit.c -> datakit.a"]
    assert long_functions(tmp_path, mods) == ["datakit/c.py:1 h (83 lines)"]


def test_imports_through_a_package_init_are_not_followed(tmp_path):
    mods = _package(tmp_path, {
        "datakit/__init__.py": "",
        "datakit/pkg/__init__.py": "from .inner import x\n",
        "datakit/pkg/inner.py": "import datakit.outer\nx = 1\n",
        "datakit/outer.py": "from datakit.pkg import x\n",
    })
    assert import_graph(mods)["datakit.outer"] == set()
    assert import_cycles(import_graph(mods)) == []
