"""What one task does, wherever it runs: open its input shard, apply the fused row ops, write its output.

Everything here runs inside a worker (process pool, Ray task, or inline). A task returns only small
metadata (paths, counts, counters): data moves through files, never through the coordinator.
"""

from __future__ import annotations

import functools
import itertools
import os
import pickle
import tempfile
import threading
import uuid
import time
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Iterator

import psutil
from xxhash import xxh3_64_intdigest
import zstandard

from . import columnar, context
from .frames import TARGET_PREFIX, Record, RunWriter
from datakit.core import publish_log
from datakit.core.fsio import atomic_write_bytes, exists, is_local, makedirs, open_read
from .io import format_output, write_shard
from .keys import KeyEncodingError, decode_key, encode_key
from .merge import MergeStats, gather_runs, merge_runs
from .plan import JoinInput, Pipe, ShuffleInput, ShuffleOutput, SinkSpec, SourceInput

INLINE_RESULT_BYTES = 4 << 20


@dataclass
class TaskSpec:
    stage_id: int
    shard: int
    num_shards: int
    pipe: Pipe
    output: ShuffleOutput | None
    shuffle_indexes: dict[int, list[str]]
    stage_dir: str
    flush_bytes: int
    reduce_memory_bytes: int
    label: str
    # Names this execute call's attempt files apart from another call's of the same stage: a work_dir's
    # stage dir outlives a call, and an attempt a failed call left running (Ray's, see
    # RayBackend.cancel_all) must not write the name the rerun's attempt of that shard writes.
    attempt_tag: str = ""


class _Count:
    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


def _counted(it, box: _Count):
    for x in it:
        box.n += 1
        yield x


class _PeakRSS:
    """This process's peak RSS while a task runs: the task's own peak, not the worker's lifetime peak.

    On Linux the kernel keeps the peak (VmHWM) and lets a process reset its own (writing 5 to
    /proc/self/clear_refs): exact and free, two small /proc accesses a task (the reset, then one read
    of /proc/self/status giving the peak and the current RSS; psutil took eight opens a task, a tenth
    of a trivial task's cost). Elsewhere a thread samples RSS every ``every`` seconds (a profile of the
    pipeline showed that sampling at 2% of its CPU)."""

    def __init__(self, every: float = 0.02) -> None:
        self.every = every
        self._kernel = _reset_peak_rss()
        self.peak = 0 if self._kernel else _rss()
        self._stop = threading.Event()
        self._thread = None if self._kernel else threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.peak = max(self.peak, _rss())

    def __enter__(self) -> "_PeakRSS":
        if self._thread is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        status = _kernel_status() if self._kernel else None
        if status is not None and status[0]:
            self.peak = max(self.peak, *status)
        else:
            self.peak = max(self.peak, _rss())


def _write_clear_refs() -> bool:
    """Reset this process's kernel peak-RSS mark; False where /proc does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


@functools.lru_cache(maxsize=1)
def _kernel_peak_works() -> bool:
    """Whether this process's kernel keeps a peak it can reset (Linux >= 4.0): asked once per process, by
    one reset and one read of the peak back (a fork's child keeps the answer, which holds for it too)."""
    status = _kernel_status() if _write_clear_refs() else None
    return status is not None and bool(status[0])


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark of this process; False where that is not possible."""
    return _kernel_peak_works() and _write_clear_refs()


def _kernel_status() -> tuple[int, int] | None:
    """(VmHWM, VmRSS) of this process in bytes (0 for one /proc does not give), None without /proc."""
    found = {b"VmHWM:": 0, b"VmRSS:": 0}
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                key = line[:6]
                if key in found:
                    found[key] = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return found[b"VmHWM:"], found[b"VmRSS:"]


@functools.lru_cache(maxsize=1)
def _process(pid: int) -> psutil.Process:
    """The psutil handle of process ``pid`` (this one: a fork's child asks with its own pid)."""
    return psutil.Process(pid)


def _rss() -> int:
    """This process's resident set size in bytes (one read of /proc/self/statm on Linux)."""
    return _process(os.getpid()).memory_info().rss


def _reduce_groups(records: Iterator[Record], kind: str, reducer) -> Iterator[Any]:
    if kind == "reshard":
        for rec in records:
            yield rec[2]
    elif kind == "dedup":
        for _, grp in itertools.groupby(records, key=itemgetter(0)):
            yield next(grp)[2]
    else:
        for kb, grp in itertools.groupby(records, key=itemgetter(0)):
            yield reducer(decode_key(kb[TARGET_PREFIX:]), (rec[2] for rec in grp))


def _check_sorted(it: Iterator[Any], keyf, side: str, shard: int) -> Iterator[tuple[bytes, Any]]:
    prev = None
    for row, item in enumerate(it):
        k = keyf(item)
        kb = encode_key(k)
        if prev is not None and kb < prev[0]:
            raise ValueError(
                f"sorted_merge_join: the {side} input of shard {shard} is not sorted by its key: row {row} has "
                f"key {k!r:.60} after {prev[1]!r:.60}; sort each shard by the join key (group_by output is "
                "sorted) before joining"
            )
        prev = (kb, k)
        yield kb, item


def _merge_join(spec: TaskSpec, inp: JoinInput, stats: dict) -> Iterator[Any]:
    left = _check_sorted(_run_pipe(spec, inp.left, stats), inp.left_key, "left", spec.shard)
    right = _check_sorted(_run_pipe(spec, inp.right, stats), inp.right_key, "right", spec.shard)
    r = next(right, None)
    group_key, group = None, []
    for lk, litem in left:
        if group_key != lk:
            while r is not None and r[0] < lk:
                r = next(right, None)
            group_key, group = lk, []
            while r is not None and r[0] == lk:
                group.append(r[1])
                r = next(right, None)
        if group:
            for ritem in group:
                yield (litem, ritem)
        elif inp.how == "left":
            yield (litem, None)


def _open_input(spec: TaskSpec, pipe: Pipe, stats: dict) -> Iterator[Any]:
    inp = pipe.input
    if isinstance(inp, SourceInput):
        stats.setdefault("rows_in", len(inp.shards[0]))
        return iter(inp.shards[0])
    if isinstance(inp, ShuffleInput):
        runs = gather_runs(spec.shuffle_indexes[inp.stage_id], spec.shard)
        stats.setdefault("rows_in", sum(r.rows for r in runs))
        mstats = MergeStats()
        stats.setdefault("merges", []).append(mstats)
        # Spills are private to this reducer: always on local disk, even when shuffle files are remote.
        spill_root = spec.stage_dir if is_local(spec.stage_dir) else tempfile.gettempdir()
        spill_dir = os.path.join(spill_root, f"spill-{spec.shard:05d}-{uuid.uuid4().hex[:8]}")
        records = merge_runs(runs, spec.reduce_memory_bytes, spill_dir, mstats, inp.secondary, inp.columns)
        if inp.columns is not None:
            as_rows = bool(runs) and all(r.items == "rows" for r in runs)
            return columnar.reduce_arrow(records, inp.kind, inp.reducer, inp.columns[0], as_rows)
        return _reduce_groups(records, inp.kind, inp.reducer)
    if isinstance(inp, JoinInput):
        return _merge_join(spec, inp, stats)
    raise TypeError(f"unknown input {inp!r}")


def _sink(items: Iterator[Any], sink: SinkSpec, shard: int, total: int) -> Iterator[str]:
    path = format_output(sink.pattern, shard, total)
    if sink.skip_existing and exists(path):
        context.counters.increment("sink_skipped_existing")
        yield path
        return
    parent = path.rsplit("/", 1)[0] if "/" in path else "."
    makedirs(parent)
    yield write_shard(items, sink.kind, path, sink.schema)


def _run_pipe(spec: TaskSpec, pipe: Pipe, stats: dict) -> Iterator[Any]:
    inp = pipe.input
    if isinstance(inp, JoinInput):  # each side counts its own rows; count what the join yields
        box = _Count()
        stats.setdefault("input_counts", []).append(box)
        it: Any = _counted(_open_input(spec, pipe, stats), box)
    else:
        it = _open_input(spec, pipe, stats)
    for kind, fn in pipe.ops:
        if kind == "map":
            it = map(fn, it)
        elif kind == "flat_map":
            it = itertools.chain.from_iterable(map(fn, it))
        elif kind == "filter":
            it = filter(fn, it)
        elif kind == "map_shard":
            it = iter(fn(it))
        elif kind == "map_batches":
            it = _map_batches(it, fn, spec.label)
        elif kind == "sink":
            it = _sink(it, fn, spec.shard, spec.num_shards)
        else:
            raise ValueError(f"unknown op {kind}")
    return it


def _map_batches(items: Iterator[Any], fn, where: str) -> Iterator[Any]:
    """Call `fn` on Arrow tables: batches pass through as they are, dict rows are gathered first."""
    for table, _ in columnar.tables_from_items(items, where):
        out = fn(table)
        if out is None:
            continue
        if columnar.to_table(out) is None:
            raise TypeError(f"{where}: map_batches function {getattr(fn, '__name__', fn)!r} must return an "
                            f"Arrow Table or RecordBatch (or None), got {type(out).__name__}")
        yield out


def _write_columnar(spec: TaskSpec, items: Iterator[Any], out: ShuffleOutput, attempt: int) -> dict:
    base = f"{spec.stage_dir}/map-{spec.shard:05d}.a{attempt}{spec.attempt_tag}"
    where = f"stage {spec.stage_id}, {spec.label}"
    writer = columnar.ArrowRunWriter(base + ".data", base + ".index", out.num_targets, spec.flush_bytes,
                                     out.key, out.sort_by, out.combiner, where)
    try:
        for table, from_rows in columnar.tables_from_items(items, where):
            writer.add(table, from_rows)
        return writer.close()
    except BaseException:
        writer.abort()
        raise


def _combine(combiner):
    def combine(records: list[Record]) -> list[Record]:
        out: list[Record] = []
        for kb, grp in itertools.groupby(records, key=itemgetter(0)):
            grp = list(grp)
            if len(grp) == 1:
                out.append(grp[0])
            else:
                out.append((kb, grp[0][1], combiner(decode_key(kb[TARGET_PREFIX:]), [r[2] for r in grp])))
        return out

    return combine


def _write_shuffle(spec: TaskSpec, items: Iterator[Any], out: ShuffleOutput, attempt: int) -> dict:
    makedirs(spec.stage_dir)
    if isinstance(out.key, str):
        return _write_columnar(spec, items, out, attempt)
    base = f"{spec.stage_dir}/map-{spec.shard:05d}.a{attempt}{spec.attempt_tag}"
    writer = RunWriter(base + ".data", base + ".index", out.num_targets, spec.flush_bytes,
                       _combine(out.combiner) if out.combiner else None, out.sort_by is not None)
    n = out.num_targets
    prefixes = writer.prefixes
    append = writer.buffer.append
    check = writer.next_check
    count = 0
    try:
        if out.kind == "reshard":
            for row, item in enumerate(items):
                append((prefixes[(row + spec.shard) % n] + encode_key((spec.shard, row)), b"", item))
                count += 1
                if count >= check:
                    writer.count = count
                    writer.check_budget()
                    check = writer.next_check
        else:
            key, sort_by = out.key, out.sort_by
            try:
                # The hot loop: one key call, one encode, one hash and one append per record.
                for item in items:
                    k = key(item)
                    kb = encode_key(k)
                    t = k if type(k) is int and 0 <= k < n else xxh3_64_intdigest(kb) % n
                    append((prefixes[t] + kb, b"" if sort_by is None else encode_key(sort_by(item)), item))
                    count += 1
                    if count >= check:
                        writer.count = count
                        writer.check_budget()
                        check = writer.next_check
            except KeyEncodingError as e:
                raise KeyEncodingError(f"{e} [stage {spec.stage_id}, {spec.label}]") from None
        writer.count = count
        meta = writer.close()
        meta["records"] = count
        return meta
    except BaseException:
        writer.abort()
        raise


def _collect(spec: TaskSpec, items: Iterator[Any], attempt: int) -> dict:
    data = list(items)
    blob = pickle.dumps(data, protocol=5)
    if len(blob) <= INLINE_RESULT_BYTES:
        return {"items": blob, "rows": len(data), "records": len(data)}
    makedirs(spec.stage_dir)
    path = f"{spec.stage_dir}/result-{spec.shard:05d}.a{attempt}{spec.attempt_tag}.pkl.zst"
    atomic_write_bytes(path, zstandard.ZstdCompressor(level=1).compress(blob))
    return {"items_path": path, "rows": len(data), "records": len(data)}


def load_collected(result: dict) -> list:
    if "items" in result:
        return pickle.loads(result["items"])
    with open_read(result["items_path"]) as f:
        return pickle.loads(zstandard.ZstdDecompressor().decompress(f.read()))


# A worker whose memory grew by less than this since it last gave memory back keeps what its earlier
# tasks freed: handing it back before every task made each next task page-fault the same memory in
# again (a 64-task takedown of 1% of 400 MB: 70k faults, about 0.3 CPU-s of system time). Past it the
# memory goes back, so a worker holds at most this much more than its floor between tasks, and a task's
# peak RSS is its own to within it.
RELEASE_ABOVE_BYTES = 128 << 20


@dataclass
class _Floor:
    """The worker's RSS right after it last gave freed memory back (0: never yet)."""

    rss: int = 0


_FLOOR = _Floor()


def _release_freed_memory() -> None:
    """Hand memory freed by earlier tasks back to the OS once the worker holds more than
    ``RELEASE_ABOVE_BYTES`` over its floor."""
    if _FLOOR.rss and _rss() < _FLOOR.rss + RELEASE_ABOVE_BYTES:
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    try:  # Arrow's allocator keeps freed pages for reuse unless told otherwise
        import pyarrow as pa

        pa.default_memory_pool().release_unused()
    except (ImportError, AttributeError):
        pass
    _FLOOR.rss = _rss()


def run_task(spec: TaskSpec, attempt: int) -> dict:
    """Run one attempt of one task; returns metadata only."""
    _release_freed_memory()
    t0 = time.perf_counter()
    context.begin_task(context.ShardInfo(spec.shard, spec.num_shards, spec.label, attempt))
    stats: dict = {}
    uploads = publish_log.mark()
    try:
        with _PeakRSS() as rss:
            items = _run_pipe(spec, spec.pipe, stats)
            if spec.output is not None:
                output = _write_shuffle(spec, items, spec.output, attempt)
            else:
                output = _collect(spec, items, attempt)
    finally:
        user_counters = context.end_task()
        published = publish_log.take_since(uploads)  # a failed attempt's are dropped with it
    merges = stats.get("merges", [])
    return {
        "output": output,
        "counters": user_counters,
        "rows_in": stats.get("rows_in", sum(b.n for b in stats.get("input_counts", [])[:1])),
        "rows_out": output["records"],
        "bytes_out": output.get("bytes", 0),
        "spill_files": sum(m.spill_files for m in merges),
        "spill_passes": max([m.spill_passes for m in merges], default=0),
        "wall_s": time.perf_counter() - t0,
        "peak_rss": rss.peak,
        "pid": os.getpid(),
        "published": published,
    }
