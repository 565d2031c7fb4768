"""YAML loading that remembers where every value came from.

Manifest errors must name the exact line and column of the offending field, and PyYAML's ordinary
loaders throw that information away (and silently keep the last of two duplicate keys). So we
compose the node graph ourselves, build plain Python values from it, and keep a side table
``path -> (key position, value position)``, where a path is a tuple of mapping keys and list indexes,
e.g. ``("sources", 2, "format")``. Duplicate keys are reported instead of being merged away.

Aliases are bounded: the composed graph is small (an alias points at its anchor's node), but building
plain values copies an anchor at every alias, so nine levels of nine aliases in a few hundred bytes
would become 9**9 values and gigabytes. The builder counts the values it copies through aliases and
refuses, with the alias's position, past ``MAX_ALIAS_VALUES``: memory stays bounded by that count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

Path = tuple[str | int, ...]

_MERGE_TAG = "tag:yaml.org,2002:merge"

# Values a manifest may gain through aliases (every value an alias copies, nested aliases multiplied
# out). Shared anchors in real manifests copy hundreds; a value costs the builder a few hundred bytes.
MAX_ALIAS_VALUES = 100_000


@dataclass(frozen=True)
class Pos:
    """A 1-based line/column position in the source text."""

    line: int
    column: int


@dataclass(frozen=True)
class YamlProblem:
    """A structural problem found while loading (syntax error, duplicate key, bad tag)."""

    pos: Pos | None
    path: Path
    message: str


@dataclass
class Located:
    """The loaded document: plain values plus where each one sits in the file."""

    value: Any
    # path -> (position of the key (or list item), position of the value)
    marks: dict[Path, tuple[Pos, Pos]]
    problems: list[YamlProblem]


def _pos(mark: Any) -> Pos:
    return Pos(mark.line + 1, mark.column + 1)


def load_located(text: str) -> Located:
    """Parse one YAML document into plain values and a position table.

    A syntax error stops loading (PyYAML cannot recover) and comes back as the only problem, with its
    position; everything else (duplicate keys, unsupported tags) is collected and loading goes on.
    """
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = exc.problem or str(exc)
        if exc.context and exc.problem:
            message = f"{exc.problem} ({exc.context})"
        return Located(None, {}, [YamlProblem(_pos(mark) if mark else None, (), f"YAML syntax error: {message}")])
    except yaml.YAMLError as exc:  # pragma: no cover - non-marked errors are rare (e.g. bad encoding)
        return Located(None, {}, [YamlProblem(None, (), f"YAML error: {exc}")])
    marks: dict[Path, tuple[Pos, Pos]] = {}
    problems: list[YamlProblem] = []
    if root is None:
        return Located(None, marks, problems)
    start = _pos(root.start_mark)
    marks[()] = (start, start)
    builder = _Builder(marks, problems)
    try:
        return Located(builder.build(root, ()), marks, problems)
    except _AliasBomb as exc:
        return Located(None, {}, [exc.problem])  # like a syntax error: nothing further can be checked


class _AliasBomb(Exception):
    """Internal: aliases copied more than MAX_ALIAS_VALUES values; building stops at once."""

    def __init__(self, problem: YamlProblem):
        super().__init__(problem.message)
        self.problem = problem


class _Builder:
    """Walks a composed node graph; state = the position table, problems, and the alias stack."""

    def __init__(self, marks: dict[Path, tuple[Pos, Pos]], problems: list[YamlProblem]):
        self.marks = marks
        self.problems = problems
        self.constructor = yaml.constructor.SafeConstructor()
        self.active: set[int] = set()  # node ids on the current descent, to stop recursive aliases
        self.built: set[int] = set()   # node ids built once: meeting one again is an alias's copy
        self.copying = False           # inside an alias's copy: every value built counts
        self.alias: Path = ()          # where the outermost copy being built was asked for
        self.copied = 0

    def build(self, node: Node, path: Path) -> Any:
        if id(node) in self.active:
            self.problems.append(YamlProblem(_pos(node.start_mark), path, "recursive YAML alias"))
            return None
        outer = self.copying
        self.copying = outer or id(node) in self.built
        if self.copying and not outer:
            self.alias = path
        if self.copying:
            self._count_copy()
        self.built.add(id(node))
        self.active.add(id(node))
        try:
            if isinstance(node, MappingNode):
                return self._mapping(node, path)
            if isinstance(node, SequenceNode):
                out = []
                for i, item in enumerate(node.value):
                    self.marks[path + (i,)] = (_pos(item.start_mark), _pos(item.start_mark))
                    out.append(self.build(item, path + (i,)))
                return out
            return self._scalar(node, path)
        finally:
            self.active.discard(id(node))
            self.copying = outer

    def _count_copy(self) -> None:
        """One more value copied through an alias; past the bound, stop, located at the alias: its key,
        or for a list item its list's key (an aliased node's own position is its anchor's)."""
        self.copied += 1
        if self.copied > MAX_ALIAS_VALUES:
            path = self.alias if self.alias and isinstance(self.alias[-1], str) else self.alias[:-1]
            at = next((self.marks[path[:i]][0] for i in range(len(path), -1, -1) if path[:i] in self.marks), None)
            message = (f"YAML aliases would copy more than {MAX_ALIAS_VALUES:,} values (an alias bomb?); "
                       "refused: write the values out or share fewer anchors")
            raise _AliasBomb(YamlProblem(at, self.alias, message))

    def _scalar(self, node: ScalarNode, path: Path) -> Any:
        try:
            return self.constructor.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            message = getattr(exc, "problem", None) or str(exc)
            self.problems.append(YamlProblem(_pos(node.start_mark), path, f"cannot read value: {message}"))
            return None

    def _mapping(self, node: MappingNode, path: Path) -> dict[str, Any]:
        out: dict[str, Any] = {}
        first_line: dict[str, int] = {}
        merged: list[tuple[Node, Node]] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                merged.extend(self._merge_sources(value_node, path))
                continue
            if not isinstance(key_node, ScalarNode):
                self.problems.append(
                    YamlProblem(_pos(key_node.start_mark), path, "mapping keys must be plain scalars")
                )
                continue
            # Keys are taken verbatim, so `on:` or `1:` stay the strings the user typed.
            key = str(key_node.value)
            kpos = _pos(key_node.start_mark)
            if key in out:
                self.problems.append(
                    YamlProblem(kpos, path + (key,), f"duplicate key '{key}' (first at line {first_line[key]})")
                )
                continue
            first_line[key] = kpos.line
            self.marks[path + (key,)] = (kpos, _pos(value_node.start_mark))
            out[key] = self.build(value_node, path + (key,))
        # `<<: *anchor` merges: explicit keys win, as in YAML 1.1.
        for key_node, value_node in merged:
            if key_node.tag == _MERGE_TAG or not isinstance(key_node, ScalarNode):
                continue
            key = str(key_node.value)
            if key in out:
                continue
            self.marks[path + (key,)] = (_pos(key_node.start_mark), _pos(value_node.start_mark))
            out[key] = self.build(value_node, path + (key,))
        return out

    def _merge_sources(self, value_node: Node, path: Path) -> list[tuple[Node, Node]]:
        nodes = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
        pairs: list[tuple[Node, Node]] = []
        for n in nodes:
            if not isinstance(n, MappingNode):
                self.problems.append(YamlProblem(_pos(n.start_mark), path, "'<<' merge needs a mapping"))
                continue
            pairs.extend(n.value)
        return pairs
