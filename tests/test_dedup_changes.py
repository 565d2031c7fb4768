"""Fuzzy and exact dedup as a change to the earlier build (datakit/dedup/fuzzy_incremental.py,
exact_incremental.py) write byte for byte the marks of a full build of the final inputs, through a sequence of changes on real text: files added,
removed and edited, a source added ahead of the others and one removed, the index compacted, and
without verification. Near copies of the stdlib's email modules and a family of lightly mutated copies
of a license (10 copies: buckets larger than clique_max, so a change shifts the members each one is paired with)
give clusters that the changes split, join and re-root."""

from __future__ import annotations

import glob
import hashlib
import os
import random
import shutil
import sysconfig

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datakit.core.layout import DocumentsDir, unit_part_name
from datakit.dedup import DedupConfig, FuzzySource, exact_dups, fuzzy_dups, key_index, minhash_source
from datakit.dedup.keyed import Reuse
from datakit.core.documents import content_id
from datakit.shuffle import ExecConfig
from datakit.steps import reuse, verify

STDLIB = sysconfig.get_paths()["stdlib"]
LICENSES = "/usr/share/common-licenses"
EX = ExecConfig(backend="inline")


def _mutate(text: str, seed: int, n: int = 3) -> str:
    words = text.split(" ")
    rng = random.Random(seed)
    for _ in range(n):
        words[rng.randrange(len(words))] = f"w{rng.randrange(1000)}"
    return " ".join(words)


def _pool() -> dict[str, list[str]]:
    """Named groups of real texts: a group becomes one input file."""
    email = [open(p).read() for p in sorted(glob.glob(f"{STDLIB}/email/*.py"))[:12]]
    gpl = open(f"{LICENSES}/GPL-2").read()
    return {
        "email-a": email[:6], "email-b": email[6:12],
        "near-a": [_mutate(t, 1) for t in email[:3]] + [_mutate(t, 2) for t in email[6:8]],
        "near-b": [_mutate(t, 3) for t in email[3:6]] + [_mutate(t, 4) for t in email[8:10]],
        "family-a": [_mutate(gpl, i) for i in range(6)], "family-b": [_mutate(gpl, 100 + i) for i in range(4)],
        "json": [open(p).read() for p in sorted(glob.glob(f"{STDLIB}/json/*.py"))],
        "apache": [open(f"{LICENSES}/Apache-2.0").read(), _mutate(open(f"{LICENSES}/Apache-2.0").read(), 7)],
    }


def _write_source(root, name: str, files: dict[str, list[str]]) -> str:
    """A normalized source: one unit-named part per group (rows sorted by id), with its outputs manifest."""
    d = root / name
    shutil.rmtree(d, ignore_errors=True)
    main = DocumentsDir(str(d)).main
    os.makedirs(main)
    for group, texts in files.items():
        rows = sorted({content_id(t): t for t in texts}.items())
        table = pa.table({"id": [r[0] for r in rows], "text": [r[1] for r in rows], "source": [name] * len(rows),
                          "source_id": [str(i) for i in range(len(rows))]})
        digest = hashlib.sha256(group.encode()).hexdigest()[:16]
        pq.write_table(table, os.path.join(main, unit_part_name(digest)), compression="zstd")
    verify.write_manifest(str(d))
    return str(d)


def _build(root, tag: str, layout: dict[str, tuple[int, list[str]]], pool, earlier: str | None, cfg: DedupConfig):
    """Fuzzy dedup of sources {name: (priority, groups)}: with ``earlier``, as a change to that build."""
    srcs = []
    for name, (prio, groups) in layout.items():
        d = _write_source(root / tag / "docs", name, {g: pool[g] for g in groups})
        mh = str(root / tag / "mh" / name)
        shutil.rmtree(mh, ignore_errors=True)
        minhash_source(name, d, mh, cfg, EX)
        srcs.append(FuzzySource(name, d, mh, prio))
    out = root / tag / "fuzzy"
    shutil.rmtree(out, ignore_errors=True)
    res = fuzzy_dups(srcs, str(out), cfg, EX, reuse_from=Reuse(("test",), reuse.load(earlier)))
    verify.write_manifest(str(out))
    return str(out), res.counters


def _marks(out: str) -> dict[str, bytes]:
    return {os.path.relpath(p, out): open(p, "rb").read()
            for p in sorted(glob.glob(f"{out}/attributes/*/*"))}


CHANGES = [
    ("first", {"a": (0, ["email-a", "family-a", "apache"]), "b": (1, ["email-b", "near-a"])}),
    ("add a file", {"a": (0, ["email-a", "family-a", "apache"]), "b": (1, ["email-b", "near-a", "family-b"])}),
    ("remove a file", {"a": (0, ["email-a", "apache"]), "b": (1, ["email-b", "near-a", "family-b"])}),
    ("edit a file", {"a": (0, ["email-a", "apache"]), "b": (1, ["email-b", "near-b", "family-b"])}),
    ("a source ahead", {"z": (-1, ["family-a", "near-a"]), "a": (0, ["email-a", "apache"]),
                        "b": (1, ["email-b", "near-b", "family-b"])}),
    ("remove a source", {"z": (-1, ["family-a", "near-a"]), "b": (1, ["email-b", "near-b", "family-b", "json"])}),
]


@pytest.mark.parametrize("verify_pairs", [True, False], ids=["verified", "unverified"])
def test_every_change_writes_the_marks_of_a_full_build(tmp_path, verify_pairs):
    pool = _pool()
    cfg = DedupConfig(verify=verify_pairs)
    earlier = None
    seen = []
    for i, (what, layout) in enumerate(CHANGES):
        inc, c_inc = _build(tmp_path, f"inc{i}", layout, pool, earlier, cfg)
        full, c_full = _build(tmp_path, f"full{i}", layout, pool, None, cfg)
        assert _marks(inc) == _marks(full), what
        for k in ("docs", "clusters", "cluster_members", "max_cluster_size"):
            assert c_inc.get(k) == c_full.get(k), (what, k)
        assert {k: v for k, v in c_inc.items() if k.startswith(("duplicates/", "docs/"))} == \
               {k: v for k, v in c_full.items() if k.startswith(("duplicates/", "docs/"))}, what
        if earlier is not None:  # each change reached only part of the corpus
            assert 0 < c_inc["incremental_documents"] < c_inc["docs"], (what, c_inc)
        earlier = inc
        seen.append((c_full.get("clusters", 0), c_full["max_cluster_size"]))
    assert max(c for c, _ in seen) >= 4 and max(m for _, m in seen) > 8, seen  # a bucket beyond clique_max


def test_compaction_and_a_priority_swap(tmp_path, monkeypatch):
    """With at most one segment allowed, every change compacts the index (and stays equal); swapping two
    sources' priorities changes which copy is kept everywhere, so that build is a full one."""
    monkeypatch.setattr(key_index, "MAX_SEGMENTS", 1)
    pool = _pool()
    cfg = DedupConfig()
    earlier = None
    for i, (_what, layout) in enumerate(CHANGES[:4]):
        earlier, c = _build(tmp_path, f"inc{i}", layout, pool, earlier, cfg)
    assert "incremental_documents" in c
    state = glob.glob(f"{earlier}/reuse/fuzzy/*/seg-*")
    assert len(state) == 1, state  # compacted into one segment
    swapped = {"a": (1, ["email-a", "apache"]), "b": (0, ["email-b", "near-b", "family-b"])}
    inc, c_inc = _build(tmp_path, "swap", swapped, pool, earlier, cfg)
    full, _ = _build(tmp_path, "swap-full", swapped, pool, None, cfg)
    assert "incremental_documents" not in c_inc and _marks(inc) == _marks(full)


def test_a_damaged_state_file_makes_a_full_build(tmp_path):
    pool = _pool()
    cfg = DedupConfig()
    first, _ = _build(tmp_path, "first", CHANGES[0][1], pool, None, cfg)
    pairs = glob.glob(f"{first}/reuse/fuzzy/*/pairs.npz")[0]
    data = bytearray(open(pairs, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(pairs, "wb").write(bytes(data))
    inc, c = _build(tmp_path, "second", CHANGES[1][1], pool, first, cfg)
    full, _ = _build(tmp_path, "full", CHANGES[1][1], pool, None, cfg)
    assert "incremental_documents" not in c and _marks(inc) == _marks(full)


EXACT_CHANGES = [
    # "apache" is in both sources and twice in "a" (two of its files): copies across and within sources
    ("first", {"a": (0, ["email-a", "apache", "apache-again"]), "b": (1, ["email-b", "apache", "json"])}),
    ("add a file", {"a": (0, ["email-a", "apache", "apache-again"]), "b": (1, ["email-b", "apache", "json", "email-a"])}),
    ("remove a file", {"a": (0, ["email-a", "apache-again"]), "b": (1, ["email-b", "apache", "json", "email-a"])}),
    ("edit a file", {"a": (0, ["near-a", "apache-again"]), "b": (1, ["email-b", "apache", "json", "email-a"])}),
    ("a source ahead", {"z": (-1, ["email-b"]), "a": (0, ["near-a", "apache-again"]),
                        "b": (1, ["email-b", "apache", "json", "email-a"])}),
    ("remove a source", {"z": (-1, ["email-b"]), "b": (1, ["email-b", "apache", "json", "email-a"])}),
]


def _exact(root, tag: str, layout: dict[str, tuple[int, list[str]]], pool, earlier: str | None):
    srcs = [(name, _write_source(root / tag / "docs", name, {g: pool[g] for g in groups}), prio)
            for name, (prio, groups) in layout.items()]
    out = root / tag / "exact"
    shutil.rmtree(out, ignore_errors=True)
    res = exact_dups(srcs, str(out), EX, reuse_from=Reuse(("test",), reuse.load(earlier)))
    verify.write_manifest(str(out))
    return str(out), res.counters


def test_exact_dedup_as_a_change_writes_the_marks_of_a_full_build(tmp_path, monkeypatch):
    """Each change's marks equal a full build's; only the files holding a changed id are rewritten; with
    one segment allowed the index compacts on every change and stays right."""
    pool = _pool()
    pool["apache-again"] = pool["apache"][:1] + pool["json"][:1]
    for limit in (key_index.MAX_SEGMENTS, 1):
        monkeypatch.setattr(key_index, "MAX_SEGMENTS", limit)
        earlier = None
        for i, (what, layout) in enumerate(EXACT_CHANGES):
            inc, c_inc = _exact(tmp_path, f"inc{limit}-{i}", layout, pool, earlier)
            full, c_full = _exact(tmp_path, f"full{limit}-{i}", layout, pool, None)
            assert _marks(inc) == _marks(full), (limit, what)
            assert {k: v for k, v in c_inc.items() if "/" in k} == {k: v for k, v in c_full.items() if "/" in k}
            if earlier is not None:
                assert 0 < c_inc["incremental_ids"] < sum(v for k, v in c_inc.items() if k.startswith("docs/"))
            earlier = inc
        assert sum(v for k, v in c_full.items() if k.startswith("exact_duplicates/")) >= 6


def test_component_labels_partition_like_a_union_find():
    """The vectorized labels group nodes exactly as a plain union-find does, on random graphs with long
    chains (the worst case for label propagation) and isolated nodes."""
    from datakit.dedup.forest import component_labels
    import numpy as np

    rng = np.random.default_rng(0)
    for trial in range(100):
        n = int(rng.integers(1, 200))
        u, v = rng.integers(0, n, int(rng.integers(0, 150))), rng.integers(0, n, 0)
        v = rng.integers(0, n, len(u))
        if trial % 3 == 0 and n > 2:
            chain = rng.permutation(n)
            u, v = np.concatenate([u, chain[:-1]]), np.concatenate([v, chain[1:]])
        parent = list(range(n))

        def find(x):
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for a, b in zip(u.tolist(), v.tolist()):
            parent[find(a)] = find(b)
        roots = [find(x) for x in range(n)]
        labels = component_labels(u.astype(np.int64), v.astype(np.int64), n).tolist()
        assert len(set(zip(labels, roots))) == len(set(labels)) == len(set(roots)), trial


def test_a_change_to_most_of_the_corpus_is_built_in_full(tmp_path, monkeypatch):
    """Past key_index.MAX_CHANGE_SHARE of the documents, the change is not applied on the driver: a full
    build on the engine, with the same marks."""
    monkeypatch.setattr(key_index, "MAX_CHANGE_SHARE", 0.01)
    pool = _pool()
    cfg = DedupConfig()
    first, _ = _build(tmp_path, "first", CHANGES[0][1], pool, None, cfg)
    inc, c = _build(tmp_path, "second", CHANGES[1][1], pool, first, cfg)
    full, _ = _build(tmp_path, "full", CHANGES[1][1], pool, None, cfg)
    assert "incremental_documents" not in c and _marks(inc) == _marks(full)
    pool["apache-again"] = pool["apache"][:1] + pool["json"][:1]
    e_first, _ = _exact(tmp_path, "e-first", EXACT_CHANGES[0][1], pool, None)
    e_inc, ce = _exact(tmp_path, "e-second", EXACT_CHANGES[1][1], pool, e_first)
    e_full, _ = _exact(tmp_path, "e-full", EXACT_CHANGES[1][1], pool, None)
    assert "incremental_ids" not in ce and _marks(e_inc) == _marks(e_full)


def test_a_build_resumed_from_engine_checkpoints_completes_its_state(tmp_path, monkeypatch):
    """After a killed driver the engine resumes stages from their checkpoints, so their tasks do not write
    the keys, ids and index parts they write on the side: the full build writes the missing ones itself,
    the same bytes (simulated here by tasks that write nothing)."""
    from datakit.dedup import exact_incremental, fuzzy_state

    pool = _pool()
    cfg = DedupConfig()
    layout = CHANGES[1][1]
    fz_whole, _ = _build(tmp_path, "whole", layout, pool, None, cfg)
    ex_whole, _ = _exact(tmp_path, "ex-whole", layout, pool, None)
    monkeypatch.setattr(fuzzy_state.KeysSink, "write", lambda self, rows, keys: None)
    monkeypatch.setattr(exact_incremental.IdsSink, "write", lambda self, hi, lo: None)
    monkeypatch.setattr(key_index.IndexSink, "write", lambda self, part, key, node: None)
    fz_resumed, _ = _build(tmp_path, "resumed", layout, pool, None, cfg)
    ex_resumed, _ = _exact(tmp_path, "ex-resumed", layout, pool, None)
    for whole, resumed in ((fz_whole, fz_resumed), (ex_whole, ex_resumed)):
        a, b = (dict(_state_files(x)) for x in (whole, resumed))
        assert a == b and any("/seg-full/" in k for k in a) and any(k.split("/")[3] in ("keys", "ids") for k in a)


def _state_files(out: str):
    for p in sorted(glob.glob(f"{out}/reuse/*/*/**/*", recursive=True)):
        if os.path.isfile(p):
            yield os.path.relpath(p, out), open(p, "rb").read()
