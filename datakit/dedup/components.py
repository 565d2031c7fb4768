"""Connected components on the engine: alternating large-star / small-star (Kiveris et al., 2014).

Union-find needs the whole graph in one process; this runs as rounds of shuffles, each partition
handled by array operations, and converges in O(log^2 n) rounds (a few, in practice) whatever the
graph's diameter, where plain min-label propagation would need as many rounds as the longest chain.

Nodes are int64 and the graph is a set of undirected edges (a, b).
  large-star: at every node u, with m = min(u, neighbours): link every LARGER neighbour to m.
  small-star: at every node u, with m = min of its SMALLER neighbours: link those and u itself to m.
Stop when a large-star and the small-star after it both change nothing: then every node has at most
one smaller neighbour, and every node with a larger neighbour is the minimum of its neighbourhood, so
the graph is a set of stars, each centred on its component's minimum node. That centre is the label.

A round (large-star, then small-star on its output) is one engine run with two shuffles; it reads the
previous round's edge files and writes new ones plus a `done.json`: the checkpoints a rerun resumes
from (only if they were made from the same input edges, by content).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from functools import partial
from typing import Sequence

import numpy as np
import pyarrow as pa

from datakit.shuffle import Dataset, ExecConfig, counters
from datakit.core import arrow_numpy as an
from datakit.core.fsio import atomic_write_bytes, exists, open_read
from datakit.core.layout import work_part_name

from . import batches
from .hashing import route_keys
from .layout import read_columns, write_parquet_atomic

log = logging.getLogger("datakit.dedup")

EDGE_SCHEMA = pa.schema([("u", pa.int64()), ("v", pa.int64())])


def _dedupe_pairs(u: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((w, u))
    u, w = u[order], w[order]
    keep = np.ones(len(u), dtype=bool)
    keep[1:] = (u[1:] != u[:-1]) | (w[1:] != w[:-1])
    return u[keep], w[keep]


def _segments(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    starts = np.flatnonzero(np.diff(u, prepend=u[:1] - 1) != 0) if len(u) else np.empty(0, np.int64)
    lengths = np.diff(np.append(starts, len(u)))
    return starts, lengths


def large_star(u: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Adjacency entries (u -> w, every neighbour of every u in this partition) -> new edges, changes."""
    mask = u != w
    u, w = _dedupe_pairs(u[mask], w[mask])
    if len(u) == 0:
        return u, w, 0
    starts, lengths = _segments(u)
    m = np.minimum(np.minimum.reduceat(w, starts), u[starts])
    m = np.repeat(m, lengths)
    sel = w > u
    changes = int(np.count_nonzero(sel & (m != u)))
    return w[sel], m[sel], changes


def small_star(u: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Entries (u -> w) with w < u (each edge at its larger end) -> new edges, changes."""
    mask = w < u
    u, w = _dedupe_pairs(u[mask], w[mask])
    if len(u) == 0:
        return u, w, 0
    starts, lengths = _segments(u)
    m_seg = w[starts]  # sorted, so the first smaller neighbour is the minimum
    m = np.repeat(m_seg, lengths)
    others = w != m
    a = np.concatenate([w[others], u[starts]])
    b = np.concatenate([m[others], m_seg])
    return a, b, int((lengths - 1).sum())


def components_in_memory(a: np.ndarray, b: np.ndarray, max_rounds: int = 200) -> dict[int, int]:
    """Same algorithm on one partition, for tests and tiny graphs: node -> component minimum."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    for _ in range(max_rounds):
        a, b, c1 = large_star(np.concatenate([a, b]), np.concatenate([b, a]))
        a, b, c2 = small_star(np.maximum(a, b), np.minimum(a, b))
        if c1 == 0 and c2 == 0:
            break
    else:
        raise RuntimeError(f"connected components did not converge in {max_rounds} rounds")
    labels = {int(x): int(y) for x, y in zip(np.maximum(a, b), np.minimum(a, b))}
    labels.update({int(y): int(y) for y in np.minimum(a, b)})
    return labels


# ---------------------------------------------------------------- engine driver
def _read_edges(path: str) -> tuple[np.ndarray, np.ndarray]:
    t = read_columns(path, ["u", "v"])
    cols = an.columns(t, ["u", "v"])
    return cols["u"], cols["v"]


def _emit_large(path: str, parts: int):
    a, b = _read_edges(path)
    u, w = np.concatenate([a, b]), np.concatenate([b, a])
    return batches.split({"u": u, "w": w}, route_keys(u, parts))


def _large(part: int, b: batches.Batch):
    x, y, changes = large_star(b["u"], b["w"])
    counters.increment("cc_large_changes", changes)
    return {"a": x, "b": y}


def _emit_small(item, parts: int):
    _, e = item
    u, w = np.maximum(e["a"], e["b"]), np.minimum(e["a"], e["b"])
    return batches.split({"u": u, "w": w}, route_keys(u, parts))


def _small(part: int, b: batches.Batch, out_dir: str):
    x, y, changes = small_star(b["u"], b["w"])
    path = None
    if len(x):
        path = f"{out_dir}/{work_part_name(part)}"
        write_parquet_atomic(an.numbers_table({"u": x, "v": y}, EDGE_SCHEMA), path)
    return {"path": path, "changes": changes, "edges": int(len(x))}


def write_edges(path: str, u: np.ndarray, v: np.ndarray) -> str:
    write_parquet_atomic(an.numbers_table({"u": u, "v": v}, EDGE_SCHEMA), path)
    return path


@dataclass
class CCResult:
    files: list[str]  # final star edges (leaf, centre) in some orientation: centre = min of the pair
    rounds: int
    history: list[dict] = field(default_factory=list)


def _fingerprint(files: Sequence[str]) -> str:
    """Names and contents of the input edge files: a checkpoint made from other edges is never reused."""
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(path.encode() + b"\0")
        with open_read(path) as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    return h.hexdigest()[:16]


def connected_components(
    edge_files: Sequence[str],
    work_dir: str,
    num_partitions: int,
    exec_config: ExecConfig | None = None,
    max_rounds: int = 100,
) -> CCResult:
    """Run rounds (large-star then small-star: one engine run, two shuffles) until converged.

    Each round's output edges and a done.json are its checkpoint; a rerun resumes after the last
    round made from the same input edges.
    """
    files = sorted(edge_files)
    history: list[dict] = []
    if not files:
        return CCResult([], 0, history)
    fp = _fingerprint(files)
    rnd = 1
    while True:  # resume: every round whose done.json carries our fingerprint is reused as is
        marker = f"{work_dir}/round-{rnd:03d}/done.json"
        if not exists(marker):
            break
        with open_read(marker) as f:
            done = json.loads(f.read())
        if done.get("fingerprint") != fp:
            break
        files, entry = done["files"], done["entry"]
        history.append(entry)
        log.info("connected components: reusing checkpoint %s (%s)", marker, entry)
        if entry["large_changes"] == 0 and entry["small_changes"] == 0:
            return CCResult(files, rnd, history)
        rnd += 1
    while True:
        if rnd > max_rounds:
            raise RuntimeError(f"connected components did not converge in {max_rounds} rounds ({history[-3:]})")
        out = f"{work_dir}/round-{rnd:03d}"
        ds = Dataset.from_items(files, num_shards=len(files)).flat_map(partial(_emit_large, parts=num_partitions))
        ds = batches.shuffle(ds, _large, num_partitions).flat_map(partial(_emit_small, parts=num_partitions))
        ds = batches.shuffle(ds, partial(_small, out_dir=out), num_partitions)
        run = ds.run(exec_config)
        results = [r for _, r in run.items]
        files = sorted(r["path"] for r in results if r["path"])
        entry = {
            "round": rnd, "large_changes": int(run.counters.get("cc_large_changes", 0)),
            "small_changes": sum(r["changes"] for r in results), "edges": sum(r["edges"] for r in results),
        }
        history.append(entry)
        atomic_write_bytes(f"{out}/done.json", json.dumps({"fingerprint": fp, "files": files, "entry": entry}).encode())
        log.info("connected components: round %d: large-star %d changes, small-star %d changes, %d edges", rnd,
                 entry["large_changes"], entry["small_changes"], entry["edges"])
        if entry["large_changes"] == 0 and entry["small_changes"] == 0:
            return CCResult(files, rnd, history)
        rnd += 1
