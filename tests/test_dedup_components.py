"""Connected components: star kernels against union-find, and the engine driver with checkpoints."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from datakit.dedup import components_in_memory, connected_components, large_star, small_star
from datakit.dedup.components import write_edges
from datakit.shuffle import ExecConfig

LOCAL2 = ExecConfig(backend="local", max_workers=2)


def union_find(a, b) -> dict[int, int]:
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for x, y in zip(a, b):
        rx, ry = find(int(x)), int(find(int(y)))
        if rx != ry:
            parent[max(rx, ry)] = min(rx, ry)
    return {x: find(x) for x in list(parent)}


def test_kernels_on_a_chain():
    a, b = np.array([0, 1, 2]), np.array([1, 2, 3])
    x, y, changes = large_star(np.concatenate([a, b]), np.concatenate([b, a]))
    assert sorted(zip(x.tolist(), y.tolist())) == [(1, 0), (2, 0), (3, 1)] and changes == 2
    x, y, changes = small_star(np.array([3, 3, 2]), np.array([1, 0, 0]))
    assert sorted(zip(x.tolist(), y.tolist())) == [(1, 0), (2, 0), (3, 0)] and changes == 1


def test_duplicate_and_reversed_edges():
    """Peer case: edge lists that repeat edges, in both orientations, and self-loops."""
    a = [1, 2, 2, 3, 4, 5, 4, 6, 7, 8, 9, 9, 10]
    b = [2, 1, 3, 2, 5, 4, 5, 7, 8, 9, 6, 9, 10]
    labels = components_in_memory(np.array(a), np.array(b))
    groups: dict[int, set] = {}
    for node, root in labels.items():
        groups.setdefault(root, set()).add(node)
    assert sorted(map(sorted, groups.values())) == [[1, 2, 3], [4, 5], [6, 7, 8, 9]]  # 10: only a self-loop


@pytest.mark.parametrize("seed", range(40))
def test_random_graphs_match_union_find(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 300))
    if seed % 4 == 0:  # long paths are the hard case for label propagation
        perm = rng.permutation(n)
        a, b = perm[:-1], perm[1:]
    else:
        m = int(rng.integers(1, 2 * n))
        a, b = rng.integers(0, n, m), rng.integers(0, n, m)
    got = components_in_memory(a, b)
    ref = union_find(a, b)
    nodes = set(a[a != b].tolist()) | set(b[a != b].tolist())
    assert set(got) == nodes
    assert all(got[x] == ref[x] for x in nodes)


def _chains(tmp_path, k: int = 3):
    """Several long paths over large, scattered node numbers, split over k edge files."""
    rng = np.random.default_rng(7)
    nodes = rng.choice(2**40, size=600, replace=False).astype(np.int64)
    a, b = [], []
    for chunk in np.array_split(nodes, 6):
        a.extend(chunk[:-1])
        b.extend(chunk[1:])
    a, b = np.array(a), np.array(b)
    order = rng.permutation(len(a))
    a, b = a[order], b[order]
    files = [write_edges(str(tmp_path / f"in-{i}.parquet"), x, y)
             for i, (x, y) in enumerate(zip(np.array_split(a, k), np.array_split(b, k)))]
    return a, b, files


def _labels(files) -> dict[int, int]:
    out = {}
    for f in files:
        t = pq.read_table(f)
        for u, v in zip(t.column("u").to_pylist(), t.column("v").to_pylist()):
            out[max(u, v)] = min(u, v)
            out[min(u, v)] = min(u, v)
    return out


def test_engine_components_converge_to_component_minimum(tmp_path):
    a, b, files = _chains(tmp_path)
    res = connected_components(files, str(tmp_path / "cc"), 4, LOCAL2)
    ref = union_find(a, b)
    got = _labels(res.files)
    assert got == ref
    last = res.history[-1]
    assert last["large_changes"] == 0 and last["small_changes"] == 0
    assert all(h["large_changes"] + h["small_changes"] > 0 for h in res.history[:-1])
    assert res.rounds == len(res.history) >= 2
    # final edges are stars: every node appears once as a leaf
    leaves = [max(u, v) for f in res.files for u, v in zip(*[pq.read_table(f).column(c).to_pylist() for c in "uv"])]
    assert len(leaves) == len(set(leaves)) == len(ref) - len(set(ref.values()))


def test_engine_components_resume_from_checkpoints(tmp_path):
    a, b, files = _chains(tmp_path)
    work = tmp_path / "cc"
    first = connected_components(files, str(work), 3, LOCAL2)
    rounds = sorted(os.listdir(work))
    assert len(rounds) == len(first.history) == first.rounds
    # a rerun reuses every round: same answer, nothing rewritten
    mtimes = {f: os.path.getmtime(f) for f in first.files}
    again = connected_components(files, str(work), 3, LOCAL2)
    assert again.files == first.files and again.history == first.history
    assert all(os.path.getmtime(f) == m for f, m in mtimes.items())
    # drop the last round's marker: it resumes there, recomputes it, same result
    os.unlink(work / rounds[-1] / "done.json")
    resumed = connected_components(files, str(work), 3, LOCAL2)
    assert _labels(resumed.files) == _labels(first.files) and resumed.history == first.history
    # different input edges: checkpoints are not trusted
    other = [write_edges(str(tmp_path / "other.parquet"), np.array([5, 6]), np.array([6, 7]))]
    res = connected_components(other, str(work), 3, LOCAL2)
    assert _labels(res.files) == {5: 5, 6: 5, 7: 5}
    done = json.loads((work / "round-001" / "done.json").read_text())
    assert done["entry"]["round"] == 1


def test_no_edges():
    res = connected_components([], "/nonexistent/never-written", 2, LOCAL2)
    assert res.files == [] and res.rounds == 0


# ---------------------------------------------------------------- columnar batch helpers
def test_batch_split_take_and_concat_round_trip():
    from datakit.dedup.batches import Ragged, concat, split, split_sorted, take, take_ragged

    rag = Ragged(np.arange(10, dtype=np.uint64), np.array([0, 3, 3, 7, 10]))
    batch = {"k": np.array([2, 0, 2, 1]), "r": rag}
    parts = split(batch, batch["k"])
    assert [p for p, _ in parts] == [0, 1, 2]
    assert parts[2][1]["k"].tolist() == [2, 2]
    assert parts[2][1]["r"].values.tolist() == [0, 1, 2, 3, 4, 5, 6] and parts[2][1]["r"].offsets.tolist() == [0, 3, 7]
    back = concat(b for _, b in parts)
    assert sorted(back["k"].tolist()) == [0, 1, 2, 2]
    assert len(back["r"]) == 4 and back["r"].values.size == 10
    order = np.argsort(batch["k"], kind="stable")
    views = split_sorted(take(batch, order), batch["k"][order])
    for (p1, b1), (p2, b2) in zip(views, parts):
        assert p1 == p2 and b1["k"].tolist() == b2["k"].tolist()
        assert b1["r"].values.tolist() == b2["r"].values.tolist()
        assert b1["r"].offsets.tolist() == b2["r"].offsets.tolist()
    assert take_ragged(rag, np.array([3, 1, 0])).values.tolist() == [7, 8, 9, 0, 1, 2]
    assert split({"k": np.array([], dtype=np.int64)}, np.array([], dtype=np.int64)) == []
