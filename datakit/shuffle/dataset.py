"""The lazy `Dataset`: build a pipeline by chaining operations, then `collect()`/`run()` it.

Nothing runs until a terminal call. Shard counts are static (known at plan time): a source has one
shard per file or per given shard, row ops keep the count, a shuffle sets it. That is what lets sinks
name their files `part-{shard}-of-{total}` up front and lets a rerun skip sinks that already exist.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

from datakit.core.listing import FileInfo, list_files

from .executor import ExecConfig, RunResult, execute
from .io import read_jsonl, read_parquet, read_parquet_batches, read_text
from .plan import JoinNode, PlanError, RowOpNode, ShuffleNode, SinkSpec, SourceNode, explain, plan


def check_picklable(what: str, fn: Any) -> None:
    """Functions travel to worker processes pickled; one that cannot be fails here, at plan time, naming
    the function and what it captured, instead of on every worker at run time."""
    import cloudpickle

    try:
        cloudpickle.dumps(fn)
    except Exception as e:  # noqa: BLE001 - pickling errors come in every type
        name = getattr(fn, "__qualname__", repr(fn))
        culprit = _unpicklable_capture(fn)
        captured = f" it captures {culprit}, which" if culprit else " it"
        raise PlanError(f"{what}({name}): cannot be sent to worker processes:{captured} cannot be pickled "
                        f"({type(e).__name__}: {e}); create that object inside the function (or in a "
                        "map_shard, once per shard) instead of capturing it") from None


def _unpicklable_capture(fn: Any) -> str | None:
    """The first closure variable or global the function uses that does not pickle, as 'name (type)'."""
    import cloudpickle

    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    cells = zip(code.co_freevars, getattr(fn, "__closure__", None) or ())
    captured = [(n, c.cell_contents) for n, c in cells]
    globs = getattr(fn, "__globals__", {})
    captured += [(n, globs[n]) for n in code.co_names if n in globs]
    for name, value in captured:
        try:
            cloudpickle.dumps(value)
        except Exception:  # noqa: BLE001
            return f"{name!r} ({type(value).__name__})"
    return None


def _check_pattern(pattern: str) -> None:
    if "{shard" not in pattern:
        raise PlanError(f"sink pattern {pattern!r} has no {{shard}}: every shard writes its own file, so they "
                        "would overwrite each other; use e.g. 'out/part-{shard:05d}-of-{total:05d}.parquet'")


def _count_records(items: Iterable[Any]) -> list[int]:
    import pyarrow as pa

    return [sum(x.num_rows if isinstance(x, (pa.Table, pa.RecordBatch)) else 1 for x in items)]


class Dataset:
    """A lazy, sharded collection of Python objects."""

    def __init__(self, node: Any) -> None:
        self._node = node

    # ------------------------------------------------------------ sources
    @staticmethod
    def from_items(items: Iterable[Any], num_shards: int | None = None) -> "Dataset":
        """In-memory items split into ``num_shards`` contiguous shards (default 1), in order."""
        data = list(items)
        n = max(1, num_shards or 1)
        size = -(-len(data) // n) if data else 0
        shards = [data[i * size : (i + 1) * size] for i in range(n)]
        return Dataset(SourceNode(shards, [f"items shard {i}" for i in range(n)]))

    @staticmethod
    def from_shards(shards: Sequence[Sequence[Any]], labels: Sequence[str] | None = None) -> "Dataset":
        """Items already split into shards, one task each; ``labels`` name them in errors and progress."""
        if not shards:
            raise ValueError("from_shards needs at least one shard (an empty one is fine: [[]])")
        labels = list(labels) if labels else [f"shard {i}" for i in range(len(shards))]
        return Dataset(SourceNode([list(s) for s in shards], labels))

    @staticmethod
    def from_files(patterns: str | Sequence[str], exclude: Sequence[str] = (), *,
                   allow_empty: bool = False) -> "Dataset":
        """One shard per file matching the glob(s) (local or any fsspec URL), sizes from one listing
        call; items are `FileInfo`s for a reader (`read_jsonl`, `read_parquet`, `read_text`) to open."""
        files = list_files(patterns, exclude)
        if not files and not allow_empty:
            raise FileNotFoundError(f"no files match {patterns!r} (hidden files and folders, starting with '.' or '_', are skipped)")
        shards = [[f] for f in files] or [[]]
        return Dataset(SourceNode(shards, [f.path for f in files] or ["(no files)"]))

    # ------------------------------------------------------------ row ops (fused)
    def _op(self, kind: str, fn: Any) -> "Dataset":
        if kind != "sink":
            check_picklable(kind, fn)
        return Dataset(RowOpNode(self._node, kind, fn))

    def map(self, fn: Callable[[Any], Any]) -> "Dataset":
        """One item out per item in; fused with the neighbouring row ops into one stage."""
        return self._op("map", fn)

    def flat_map(self, fn: Callable[[Any], Iterable[Any]]) -> "Dataset":
        """Zero or more items out per item in (an iterable); fused like `map`."""
        return self._op("flat_map", fn)

    def filter(self, pred: Callable[[Any], bool]) -> "Dataset":
        """Keep the items for which ``pred`` is true; fused like `map`."""
        return self._op("filter", pred)

    def map_shard(self, fn: Callable[[Iterable[Any]], Iterable[Any]]) -> "Dataset":
        """``fn(items of one shard) -> items``: for per-shard state (a model loaded once, a running total)."""
        return self._op("map_shard", fn)

    def map_batches(self, fn: Callable[[Any], Any]) -> "Dataset":
        """Apply `fn` to pyarrow Tables: Arrow items pass through as batches, dict rows are gathered
        into tables of up to 4096 rows. `fn` returns a Table/RecordBatch (or None to drop the batch);
        the items after this op are those tables, ready for a column-keyed group_by or write_parquet."""
        return self._op("map_batches", fn)

    def read_jsonl(self) -> "Dataset":
        """Each FileInfo item -> its JSON records (.jsonl, .gz, .zst by extension); malformed lines raise
        with file and line."""
        return self.flat_map(read_jsonl)

    def read_parquet(self, columns: Sequence[str] | None = None, *, as_batches: bool = False) -> "Dataset":
        """Dict rows, or with `as_batches=True` pyarrow Tables of up to 64k rows (the columnar plane)."""
        cols = list(columns) if columns else None
        reader = read_parquet_batches if as_batches else read_parquet

        def read(f):
            return reader(f, cols)

        read.__name__ = reader.__name__  # what explain() shows
        return self.flat_map(read)

    def read_text(self) -> "Dataset":
        """Each FileInfo item -> one record ``{"path", "text"}`` with the file's whole UTF-8 text."""
        return self.flat_map(read_text)

    # ------------------------------------------------------------ shuffles
    def group_by(self, key: Callable[[Any], Any] | str, reducer: Callable[[Any, Any], Any], *,
                 sort_by: Callable[[Any], Any] | str | None = None, num_shards: int | None = None,
                 combiner: Callable[[Any, Any], Any] | None = None) -> "Dataset":
        """Group items by key; `reducer(key, rows)` runs once per key, in key order within a shard.

        `key` a function: any items, `rows` is an iterator of them (the record data plane).
        `key` a column name: items are Arrow tables/record batches or dict rows, and the shuffle stays
        columnar end to end; `reducer(key, table)` gets the group's rows as one pyarrow Table (ordered
        by the `sort_by` column, then input order) and `combiner(key, table)` returns a dict or table
        with the same columns. Both planes route a key to the same shard and order keys the same way.
        """
        for what, fn in (("group_by key", key), ("group_by reducer", reducer), ("group_by sort_by", sort_by),
                         ("group_by combiner", combiner)):
            if callable(fn):
                check_picklable(what, fn)
        return Dataset(ShuffleNode(self._node, "group", key, reducer, sort_by, combiner, num_shards))

    def deduplicate(self, key: Callable[[Any], Any] | str, num_shards: int | None = None) -> "Dataset":
        """Keep the first item (in input order) per key; a column-name key dedups Arrow batches in bulk."""
        return Dataset(ShuffleNode(self._node, "dedup", key, None, None, None, num_shards))

    def partition_sorted(self, key: str, *, sort_by: str | None = None,
                         num_shards: int | None = None) -> "Dataset":
        """Hash-partition by the `key` column and sort every shard by (key, sort_by, input order), all
        columnar: out come Arrow tables (dict rows if dict rows went in), no key split across two of
        them, with no Python call per row or per key. For id-sorted outputs and streaming joins."""
        if not isinstance(key, str) or (sort_by is not None and not isinstance(sort_by, str)):
            raise PlanError("partition_sorted takes column names for key and sort_by")
        return Dataset(ShuffleNode(self._node, "sorted", key, None, sort_by, None, num_shards))

    def reshard(self, num_shards: int) -> "Dataset":
        """Redistribute items over ``num_shards`` shards (a shuffle; item order within a shard is kept
        by source shard)."""
        return Dataset(ShuffleNode(self._node, "reshard", None, None, None, None, num_shards))

    def sorted_merge_join(self, right: "Dataset", *, left_key: Callable[[Any], Any],
                          right_key: Callable[[Any], Any] | None = None, how: str = "inner") -> "Dataset":
        """Join two datasets with the same shard count whose shards are each sorted by key, shard by shard
        with no shuffle (``how``: inner or left); unsorted input is refused with the offending key."""
        if how not in ("inner", "left"):
            raise ValueError(f"how must be 'inner' or 'left', got {how!r}")
        return Dataset(JoinNode(self._node, right._node, left_key, right_key or left_key, how))

    # ------------------------------------------------------------ sinks
    def write_parquet(self, pattern: str, *, schema: Any = None, skip_existing: bool = False) -> "Dataset":
        """Write each shard to ``pattern`` formatted with ``{shard}`` and ``{total}`` (atomically); the
        items after it are the written paths. ``skip_existing``: a rerun skips shards already written."""
        _check_pattern(pattern)
        return self._op("sink", SinkSpec("parquet", pattern, schema, skip_existing))

    def write_jsonl(self, pattern: str, *, skip_existing: bool = False) -> "Dataset":
        """Like `write_parquet`, one JSON object per line (.gz/.zst compressed by extension)."""
        _check_pattern(pattern)
        return self._op("sink", SinkSpec("jsonl", pattern, None, skip_existing))

    # ------------------------------------------------------------ execution
    @property
    def num_shards(self) -> int:
        """Shards of the final stage (known at plan time)."""
        return plan(self._node)[-1].num_tasks

    def explain(self) -> str:
        """The plan as text: stages, their fused ops, shuffles and shard counts."""
        return explain(plan(self._node))

    def run(self, config: ExecConfig | None = None) -> RunResult:
        """Execute; the RunResult holds the items, the counters and per-stage stats."""
        return execute(plan(self._node), config)

    def collect(self, config: ExecConfig | None = None) -> list:
        """Execute and return the final items, in shard order."""
        return self.run(config).items

    def count(self, config: ExecConfig | None = None) -> int:
        """Number of records: an Arrow Table/RecordBatch item counts as its rows (the columnar plane)."""
        return sum(self.map_shard(_count_records).collect(config))

    def reduce(self, fn: Callable[[Any, Any], Any], initial: Any,
               combine: Callable[[Any, Any], Any] | None = None, config: ExecConfig | None = None) -> Any:
        """Fold every shard with `fn`, then fold the per-shard results (in shard order) with `combine`."""

        def fold(it):
            acc = initial
            for x in it:
                acc = fn(acc, x)
            return [acc]

        partials = self.map_shard(fold).collect(config)
        combine = combine or fn
        acc = partials[0]
        for p in partials[1:]:
            acc = combine(acc, p)
        return acc


__all__ = ["Dataset", "ExecConfig", "FileInfo"]
