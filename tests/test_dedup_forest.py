"""Fuzzy dedup's keep rule (datakit/dedup/forest.py) on real text: a document goes when an earlier
document (source priority, then id) is its near-duplicate, and each such document links to the earliest of
them. Checked against a plain reading of the rule, on real near copies; the bridge case that tells it from
the connected components of all pairs; the incremental verification (`verify_parents`) giving the forest of
verifying every pair while verifying fewer, before and after documents are removed; and the incremental
reader's sets against shingling the texts directly, with the texts it keeps for the second round."""

from __future__ import annotations

import glob
import itertools
import sysconfig

import numpy as np

from datakit.dedup import DedupConfig
from datakit.dedup.batches import take_ragged
from datakit.dedup.forest import component_labels, forest_edges, orient, parents, verify_parents
from datakit.dedup.fuzzy_core import jaccard_of, shingle_sets
from datakit.dedup.hashing import pack_nodes
from datakit.dedup.minhash import minhash_params

STDLIB = sysconfig.get_paths()["stdlib"]
THRESHOLD = 0.6


def _family(text: str, n: int) -> list[str]:
    """``text`` and n-1 near copies of it, each with a different few lines dropped."""
    lines = text.splitlines()
    return [text] + ["\n".join(l for j, l in enumerate(lines) if j % 23 != k) for k in range(1, n)]


def _corpus() -> tuple[list[str], np.ndarray, np.ndarray]:
    """Real texts: two families of near copies, unrelated files, and a text holding two files whole;
    every pair of documents is a candidate."""
    files = [open(p, encoding="utf-8", errors="replace").read()
             for p in sorted(glob.glob(f"{STDLIB}/json/*.py")) + sorted(glob.glob(f"{STDLIB}/email/_*.py"))]
    files = [t for t in files if len(t) > 3000][:6]
    texts = _family(files[0], 5) + _family(files[1], 4) + files[2:]
    texts.append(files[0] + "\n" + files[1])  # close to neither family alone: a candidate that is rejected
    n = len(texts)
    u, v = (np.array(x, np.int64) for x in zip(*itertools.combinations(range(n), 2)))
    return texts, u, v


def _ids(n: int, seed: int = 3):
    """Random ids (as uint64 halves) and source ranks for nodes 0..n-1, and the lookup the forest takes."""
    rng = np.random.default_rng(seed)
    hi = rng.integers(0, 2**63, n).astype(np.uint64)
    lo = rng.integers(0, 2**63, n).astype(np.uint64)
    return hi, lo, lambda nodes: (hi[nodes], lo[nodes])


def _by_the_rule(u, v, near, prio) -> dict[int, int]:
    """Each document with an earlier near-duplicate and the earliest of them, read off the rule."""
    out: dict[int, int] = {}
    for a, b, ok in zip(u.tolist(), v.tolist(), near.tolist()):
        if not ok:
            continue
        later, earlier = (a, b) if prio[a] > prio[b] else (b, a)
        if later not in out or prio[earlier] < prio[out[later]]:
            out[later] = earlier
    return out


def test_each_document_links_to_its_earliest_near_duplicate_and_only_roots_are_kept():
    texts, u, v = _corpus()
    n = len(texts)
    truth = jaccard_of(shingle_sets(texts, minhash_params(DedupConfig())), u, v)
    near = truth >= THRESHOLD
    hi, lo, ids_of = _ids(n)
    prio = {i: (0, int(hi[i]), int(lo[i])) for i in range(n)}  # one source: the id decides
    parent, child = forest_edges(u[near], v[near], ids_of)
    want = _by_the_rule(u, v, near, prio)
    assert dict(zip(child.tolist(), parent.tolist())) == want and len(want) >= 5  # both families lose copies
    assert np.array_equal(child, np.sort(child))
    # one root per tree, the earliest member: what fuzzy.py keeps of each cluster
    label = component_labels(parent, child, n)
    for lab in np.unique(label[np.unique(np.concatenate([parent, child]))]):
        members = np.flatnonzero(label == lab).tolist()
        roots = [m for m in members if m not in want]
        assert roots == [min(members, key=prio.__getitem__)]


def test_a_later_document_bridging_two_earlier_ones_removes_neither():
    """a ~ b and b ~ c, a and c not near: with b in a later source, both a and c are kept (the connected
    components of the pairs would keep one of the three); with b in an earlier source, b alone is kept.
    The source's rank comes before the id."""
    text = open(f"{STDLIB}/json/decoder.py", encoding="utf-8").read()
    half = len(text) // 2
    a, b, c = text[: int(half * 1.2)], text, text[int(half * 0.8):]
    u, v = np.array([0, 0, 1]), np.array([1, 2, 2])
    jac = jaccard_of(shingle_sets([a, b, c], minhash_params(DedupConfig())), u, v)
    near = jac >= 0.3
    assert near.tolist() == [True, False, True], jac  # a~b, b~c; a and c share too little
    hi, lo, _ = _ids(3)
    for ranks, kept in (([0, 1, 0], {0, 2}), ([1, 0, 1], {1})):
        nodes = np.array([pack_nodes(r, 0, np.array([i]))[0] for i, r in enumerate(ranks)])
        index = {int(x): i for i, x in enumerate(nodes)}
        ids_of = lambda q: (hi[[index[int(x)] for x in q]], lo[[index[int(x)] for x in q]])  # noqa: E731
        parent, child = forest_edges(nodes[u[near]], nodes[v[near]], ids_of)
        assert {0, 1, 2} - {index[int(x)] for x in child} == kept, ranks


def test_orient_and_parents_on_ties_of_rank_and_shared_parents():
    u, v = np.array([5, 5, 7]), np.array([7, 9, 9])
    key = {5: (1, 4, 0), 7: (0, 9, 9), 9: (1, 4, 1)}  # 7 has the lowest rank; 5 and 9 tie on hi
    k = lambda nodes: tuple(np.array([key[x][i] for x in nodes.tolist()], np.uint64) for i in range(3))  # noqa: E731
    later, earlier, ekey = orient(u, v, k(u), k(v))
    assert later.tolist() == [5, 9, 9] and earlier.tolist() == [7, 5, 7]
    child, parent = parents(later, earlier, ekey)
    assert child.tolist() == [5, 9] and parent.tolist() == [7, 7]
    assert parents(later[:0], earlier[:0], tuple(x[:0] for x in ekey))[0].tolist() == []


def _forest_of(u, v, jac, ids_of):
    near = jac >= THRESHOLD
    parent, child = forest_edges(u[near], v[near], ids_of)
    return dict(zip(child.tolist(), parent.tolist()))


def test_verifying_only_pairs_that_could_give_an_earlier_parent_gives_the_forest_of_verifying_all():
    texts, u, v = _corpus()
    n = len(texts)
    sets = shingle_sets(texts, minhash_params(DedupConfig()))
    truth = jaccard_of(sets, u, v)
    _hi, _lo, ids_of = _ids(n)
    want = _forest_of(u, v, truth, ids_of)

    jac = np.full(len(u), np.nan)
    read_calls: list[np.ndarray] = []

    def read(need: np.ndarray):
        read_calls.append(need)
        return take_ragged(sets, need)

    verified = verify_parents(u, v, jac, THRESHOLD, ids_of, read)
    known = ~np.isnan(jac)
    # nothing known: each document's earliest candidate first, then only the candidates still earlier
    # than its parent (a family's copies then skip their later relatives)
    assert verified == int(known.sum()) and len(want) <= verified < len(u)
    assert np.array_equal(jac[known], truth[known])
    assert _forest_of(u, v, np.where(known, jac, -1.0), ids_of) == want
    every = np.concatenate(read_calls)
    assert len(every) == len(np.unique(every))  # each document's set read once, whatever the rounds

    # Knowing the pairs of each document with its parent, the rest need verifying only where their
    # earlier side comes before the parent: fewer pairs, the same forest.
    jac = np.full(len(u), np.nan)
    parent_pair = np.array([want.get(int(b)) == int(a) or want.get(int(a)) == int(b) for a, b in zip(u, v)])
    jac[parent_pair] = truth[parent_pair]
    verified = verify_parents(u, v, jac, THRESHOLD, ids_of, lambda need: take_ragged(sets, need))
    known = ~np.isnan(jac)
    assert 0 < verified < len(u) - int(parent_pair.sum())
    assert np.array_equal(jac[known], truth[known])
    assert _forest_of(u, v, np.where(known, jac, -1.0), ids_of) == want

    # Documents removed (a family's earliest members: their children lose their parent): the pairs
    # between the rest keep what was known, NaN included, and are verified as far as they now matter.
    pr = {i: (int(_hi[i]), int(_lo[i])) for i in range(n)}
    first = sorted(range(5), key=pr.__getitem__)[:2]
    keep = ~(np.isin(u, first) | np.isin(v, first))
    u2, v2, jac2 = u[keep], v[keep], jac[keep].copy()
    verify_parents(u2, v2, jac2, THRESHOLD, ids_of, lambda need: take_ragged(sets, need))
    known2 = ~np.isnan(jac2)
    assert np.array_equal(jac2[known2], truth[keep][known2])
    assert _forest_of(u2, v2, np.where(known2, jac2, -1.0), ids_of) == _forest_of(u2, v2, truth[keep], ids_of)


def test_the_incremental_reader_keeps_the_second_round_s_texts_from_the_files_it_reads(tmp_path):
    """fuzzy_incremental.NodeSets: the sets it gives equal shingling the texts directly, in the order
    asked, across files and row groups; told what the second round may need, it keeps those texts from
    the files the first read opens (so that read takes them without opening a file), within its budget."""
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
        assert len(got.offsets) == len(asked) + 1
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
    budget, fi.KEEP_TEXT_CHARS = fi.KEEP_TEXT_CHARS, min(len(texts[i]) for i in (1, 3)) + 1
    try:
        check(tight(first), first)
    finally:
        fi.KEEP_TEXT_CHARS = budget
    assert len(tight.kept) < len(later)  # past the budget a text is read again when needed
    check(tight(later), later)
