"""Logical plan nodes and the planner that cuts them into stages.

Row operations (map, flat_map, filter, map_shard, sinks) fuse into the stage that produces their input;
a shuffle ends a stage. A sorted merge join fuses both of its inputs into the joining stage (each side's
reduce or read runs inside the join task), so joining co-partitioned outputs costs no extra shuffle.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable


# ---------------------------------------------------------------- logical nodes
@dataclass(eq=False)
class SourceNode:
    shards: list[list]
    labels: list[str]


@dataclass(eq=False)
class RowOpNode:
    parent: Any
    kind: str  # map | flat_map | filter | map_shard | sink
    fn: Any


@dataclass(eq=False)
class ShuffleNode:
    parent: Any
    kind: str  # group | dedup | sorted | reshard
    key: Callable | None
    reducer: Callable | None
    sort_by: Callable | None
    combiner: Callable | None
    num_shards: int | None


@dataclass(eq=False)
class JoinNode:
    left: Any
    right: Any
    left_key: Callable
    right_key: Callable
    how: str


@dataclass(frozen=True)
class SinkSpec:
    kind: str  # parquet | jsonl
    pattern: str
    schema: Any = None
    skip_existing: bool = False


# ---------------------------------------------------------------- physical plan
@dataclass
class SourceInput:
    shards: list[list]
    labels: list[str]


@dataclass
class ShuffleInput:
    stage_id: int
    kind: str
    reducer: Callable | None
    secondary: bool = False
    columns: tuple[str, str | None] | None = None  # columnar shuffle: (key column, sort column)


@dataclass
class JoinInput:
    left: "Pipe"
    right: "Pipe"
    left_key: Callable
    right_key: Callable
    how: str


@dataclass
class Pipe:
    input: Any
    ops: list[tuple[str, Any]] = field(default_factory=list)
    num_shards: int = 1

    def for_shard(self, shard: int) -> "Pipe":
        """A copy that carries only the source items this shard needs (keeps task payloads small)."""
        inp = self.input
        if isinstance(inp, SourceInput):
            inp = SourceInput([inp.shards[shard]], [inp.labels[shard]])
        elif isinstance(inp, JoinInput):
            inp = dataclasses.replace(inp, left=inp.left.for_shard(shard), right=inp.right.for_shard(shard))
        return Pipe(inp, list(self.ops), self.num_shards)

    def label(self, shard: int) -> str:
        inp = self.input
        if isinstance(inp, SourceInput):
            return inp.labels[shard] if len(inp.labels) > shard else inp.labels[0]
        if isinstance(inp, JoinInput):
            return inp.left.label(shard)
        return f"shuffle {inp.stage_id} shard {shard}"

    def upstream_stages(self) -> list[int]:
        inp = self.input
        if isinstance(inp, ShuffleInput):
            return [inp.stage_id]
        if isinstance(inp, JoinInput):
            return inp.left.upstream_stages() + inp.right.upstream_stages()
        return []


@dataclass
class ShuffleOutput:
    kind: str
    key: Callable | None
    sort_by: Callable | None
    combiner: Callable | None
    num_targets: int


@dataclass
class Stage:
    id: int
    pipe: Pipe
    output: ShuffleOutput | None  # None: the final stage, whose items go back to the caller
    name: str = ""

    @property
    def num_tasks(self) -> int:
        return self.pipe.num_shards


class PlanError(ValueError):
    """The pipeline cannot be planned (e.g. a join of inputs with different shard counts)."""


def _describe_ops(ops: list[tuple[str, Any]]) -> str:
    names = []
    for kind, fn in ops:
        if kind == "sink":
            names.append(f"write_{fn.kind}({fn.pattern})")
        else:
            names.append(f"{kind}({getattr(fn, '__name__', type(fn).__name__)})")
    return " -> ".join(names)


def _columns(n: ShuffleNode) -> tuple[str, str | None] | None:
    """A column-name key selects the columnar data plane; then sort_by must name a column too."""
    if isinstance(n.key, str):
        if n.sort_by is not None and not isinstance(n.sort_by, str):
            raise PlanError(f"group_by key {n.key!r} is a column name, so sort_by must be a column name too "
                            f"(got {n.sort_by!r}); or give both as functions")
        return (n.key, n.sort_by)
    if isinstance(n.sort_by, str):
        raise PlanError(f"sort_by {n.sort_by!r} is a column name but the key is a function; give both as "
                        "column names (columnar shuffle) or both as functions")
    if n.key is not None and not callable(n.key):
        raise PlanError(f"a shuffle key must be a function or a column name, got {n.key!r}")
    return None


def plan(node: Any) -> list[Stage]:
    """Cut the logical DAG ending at `node` into stages, in execution order."""
    stages: list[Stage] = []

    def to_pipe(n: Any) -> Pipe:
        if isinstance(n, SourceNode):
            return Pipe(SourceInput(n.shards, n.labels), [], len(n.shards))
        if isinstance(n, RowOpNode):
            p = to_pipe(n.parent)
            p.ops.append((n.kind, n.fn))
            return p
        if isinstance(n, ShuffleNode):
            up = to_pipe(n.parent)
            targets = n.num_shards or up.num_shards
            if targets < 1:
                raise PlanError(f"num_shards must be >= 1, got {targets}")
            columns = _columns(n)
            stage = Stage(len(stages), up, ShuffleOutput(n.kind, n.key, n.sort_by, n.combiner, targets))
            stage.name = f"{n.kind}"
            stages.append(stage)
            return Pipe(ShuffleInput(stage.id, n.kind, n.reducer, n.sort_by is not None, columns), [], targets)
        if isinstance(n, JoinNode):
            left, right = to_pipe(n.left), to_pipe(n.right)
            if left.num_shards != right.num_shards:
                raise PlanError(
                    f"sorted_merge_join needs co-partitioned inputs, but the left side has {left.num_shards} "
                    f"shards and the right side {right.num_shards}; reshard or group_by both sides to the "
                    "same num_shards first"
                )
            return Pipe(JoinInput(left, right, n.left_key, n.right_key, n.how), [], left.num_shards)
        raise TypeError(f"unknown plan node {n!r}")

    final = to_pipe(node)
    stages.append(Stage(len(stages), final, None, "final"))
    return stages


def explain(stages: list[Stage]) -> str:
    lines = []
    for st in stages:
        inp = st.pipe.input
        if isinstance(inp, SourceInput):
            src = f"source({len(inp.shards)} shards)"
        elif isinstance(inp, ShuffleInput):
            src = f"read shuffle of stage {inp.stage_id} ({inp.kind})"
        else:
            src = f"sorted_merge_join[{inp.how}](left: {_describe_pipe(inp.left)}; right: {_describe_pipe(inp.right)})"
        ops = _describe_ops(st.pipe.ops)
        out = (
            f"shuffle[{st.output.kind}{', columnar on ' + repr(st.output.key) if isinstance(st.output.key, str) else ''}]"
            f" -> {st.output.num_targets} shards"
            if st.output
            else "collect"
        )
        lines.append(f"stage {st.id}: {st.num_tasks} tasks: {src}" + (f" -> {ops}" if ops else "") + f" => {out}")
    return "\n".join(lines)


def _describe_pipe(p: Pipe) -> str:
    inp = p.input
    src = f"source({len(inp.shards)})" if isinstance(inp, SourceInput) else (
        f"shuffle of stage {inp.stage_id}" if isinstance(inp, ShuffleInput) else "join")
    ops = _describe_ops(p.ops)
    return src + (f" -> {ops}" if ops else "")
