"""Verifying only the pairs that join clusters (datakit/dedup/fuzzy_joining.py) on real text: the
clusters equal those of verifying every candidate pair, fewer pairs are verified, every value filled in
is the pair's true Jaccard, and after documents are removed (a component may split) the pairs left
unknown are verified as far as they now matter, again giving the clusters of verifying everything."""

from __future__ import annotations

import glob
import itertools
import sysconfig

import numpy as np

from datakit.dedup import DedupConfig
from datakit.dedup.batches import take_ragged
from datakit.dedup.fuzzy_core import jaccard_of, shingle_sets
from datakit.dedup.fuzzy_joining import component_labels, verify_joining
from datakit.dedup.minhash import minhash_params

STDLIB = sysconfig.get_paths()["stdlib"]
THRESHOLD = 0.6


def _family(text: str, n: int) -> list[str]:
    """``text`` and n-1 near copies of it, each with a different few lines dropped."""
    lines = text.splitlines()
    return [text] + ["\n".join(l for j, l in enumerate(lines) if j % 23 != k) for k in range(1, n)]


def _corpus() -> tuple[list[str], np.ndarray, np.ndarray]:
    """Real texts: two families of near copies, unrelated files, and a text holding two files whole;
    every pair of documents is a candidate (some buckets' cliques would give fewer)."""
    files = [open(p, encoding="utf-8", errors="replace").read()
             for p in sorted(glob.glob(f"{STDLIB}/json/*.py")) + sorted(glob.glob(f"{STDLIB}/email/_*.py"))]
    files = [t for t in files if len(t) > 3000][:6]
    texts = _family(files[0], 5) + _family(files[1], 4) + files[2:]
    texts.append(files[0] + "\n" + files[1])  # close to neither family alone: a candidate that is rejected
    n = len(texts)
    u, v = (np.array(x, np.int64) for x in zip(*itertools.combinations(range(n), 2)))
    return texts, u, v


def _clusters(u: np.ndarray, v: np.ndarray, jac: np.ndarray, n: int) -> list[frozenset]:
    ok = jac >= THRESHOLD
    label = component_labels(u[ok], v[ok], n)
    return sorted(frozenset(np.flatnonzero(label == x).tolist()) for x in np.unique(label))


def test_joining_pairs_alone_give_the_clusters_of_verifying_every_pair_and_survive_removals():
    texts, u, v = _corpus()
    n = len(texts)
    sets = shingle_sets(texts, minhash_params(DedupConfig()))
    truth = jaccard_of(sets, u, v)
    want = _clusters(u, v, truth, n)
    assert any(len(c) >= 4 for c in want) and any(len(c) == 1 for c in want)  # families and loners

    jac = np.full(len(u), np.nan)
    read_calls: list[np.ndarray] = []

    def read(need: np.ndarray):
        read_calls.append(need)
        return take_ragged(sets, need)

    verified = verify_joining(u, v, jac, THRESHOLD, read)
    known = ~np.isnan(jac)
    # every pair across clusters is verified (each could join two); inside a cluster of k documents
    # k-1 of its k(k-1)/2 pairs at least, and not all of them: the second round verifies only the pairs
    # that still join two components after the first round's forest
    inside = sum(len(c) * (len(c) - 1) // 2 for c in want)
    least = len(u) - inside + sum(len(c) - 1 for c in want)
    assert verified == int(known.sum()) and least <= verified < len(u)
    assert np.array_equal(jac[known], truth[known])
    assert _clusters(u, v, np.where(known, jac, -1.0), n) == want
    every = np.concatenate(read_calls)
    assert len(every) == len(np.unique(every))  # each document's set read once, whatever the rounds

    # documents removed: the first family loses its first two members (a component may split); the
    # pairs between the rest keep what was known, NaN included, and are verified as far as needed
    gone = {0, 1}
    keep = ~(np.isin(u, list(gone)) | np.isin(v, list(gone)))
    u2, v2, jac2 = u[keep], v[keep], jac[keep].copy()
    verify_joining(u2, v2, jac2, THRESHOLD, lambda need: take_ragged(sets, need))
    known2 = ~np.isnan(jac2)
    assert np.array_equal(jac2[known2], truth[keep][known2])
    got = [c for c in _clusters(u2, v2, np.where(known2, jac2, -1.0), n) if not c & gone]
    assert got == [c for c in _clusters(u2, v2, truth[keep], n) if not c & gone]


def test_the_incremental_reader_keeps_a_later_rounds_texts_from_the_files_it_reads(tmp_path):
    """fuzzy_incremental.NodeSets: the sets it gives equal shingling the texts directly, in the order
    asked; told what a later round may need, it keeps those texts from the files the first read opens
    (so the later read takes them without opening a file), within its budget."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from datakit.dedup import fuzzy_incremental as fi
    from datakit.dedup.layout import FileEntry

    texts, _, _ = _corpus()
    params = minhash_params(DedupConfig())
    halves = [texts[: len(texts) // 2], texts[len(texts) // 2:]]
    entries = []
    for i, half in enumerate(halves):
        path = tmp_path / f"part-{i}.parquet"
        pq.write_table(pa.table({"id": [f"{i}-{k}" for k in range(len(half))], "text": half}), path, row_group_size=3)
        entries.append(FileEntry(gidx=i, rank=0, file_idx=i, source="s", path=str(path), name=path.name))
    nodes = fi.Nodes(entries, np.array([11, 22], dtype=np.uint64))
    node_of = [(i, r) for i, half in enumerate(halves) for r in range(len(half))]
    all_nodes = nodes.node(np.array([[11, 22][i] for i, _ in node_of], np.uint64), np.array([r for _, r in node_of]))
    truth = shingle_sets(texts, params)

    def check(got, asked):
        for j, n in enumerate(asked.tolist()):
            k = all_nodes.tolist().index(n)
            assert np.array_equal(got.values[got.offsets[j]:got.offsets[j + 1]],
                                  truth.values[truth.offsets[k]:truth.offsets[k + 1]])

    reader = fi.NodeSets(nodes, params)
    first, later = np.sort(all_nodes[[0, 2, len(texts) - 1]]), np.sort(all_nodes[[1, 3, len(texts) - 2]])
    reader.expect(np.concatenate([later, first]))
    check(reader(first), first)
    assert sorted(reader.kept) == later.tolist()  # both files were opened: every later text kept
    check(reader(later), later)
    assert not reader.kept
    check(reader(first), first)  # the hint was used up by the read it was for: nothing kept now
    assert not reader.kept
    tight = fi.NodeSets(nodes, params)
    tight.expect(later)
    fi_budget, fi.KEEP_TEXT_CHARS = fi.KEEP_TEXT_CHARS, min(len(texts[i]) for i in (1, 3)) + 1
    try:
        check(tight(first), first)
    finally:
        fi.KEEP_TEXT_CHARS = fi_budget
    assert len(tight.kept) < len(later)  # past the budget a text is read again when needed
    check(tight(later), later)
