"""Exact dedup, minhash, fuzzy clusters, decontamination and consolidation on the engine."""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import sysconfig
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datakit.dedup import (
    AttributeMismatch,
    BenchmarkSpec,
    DecontamConfig,
    DedupConfig,
    DedupInputError,
    FuzzySource,
    consolidate,
    decontaminate,
    exact_dups,
    fuzzy_dups,
    jaccard,
    minhash_params,
    minhash_source,
    shingle_set,
)
from datakit.core.documents import content_id
from datakit.dedup.fixtures import write_normalized_source
from datakit.shuffle import ExecConfig, ShardFailed

LOCAL1 = ExecConfig(backend="local", max_workers=1)
LOCAL2 = ExecConfig(backend="local", max_workers=2)


def vocabulary() -> list[str]:
    src = open(os.path.join(sysconfig.get_paths()["stdlib"], "argparse.py"), encoding="utf-8").read()
    return sorted(set(re.findall(r"\b[a-z]{3,12}\b", src)))


VOCAB = vocabulary()


def text(n_words: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(VOCAB) for _ in range(n_words))


def mutate(t: str, k: int, seed: int) -> str:
    rng = random.Random(seed)
    words = t.split()
    for _ in range(k):
        words[rng.randrange(len(words))] = rng.choice(VOCAB)
    return " ".join(words)


def read_rows(path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def attr_rows(out_dir, source) -> list[dict]:
    d = Path(out_dir) / "attributes" / source
    rows = []
    for f in sorted(d.glob("*.parquet")):
        rows.extend(read_rows(f))
    return rows


def groups_by_label(fuzzy_dir, labels: dict[str, dict[str, str]]) -> list[list[str]]:
    """Clusters as sorted lists of fixture labels (source_id), from the fuzzy attribute files."""
    clusters: dict[str, list[str]] = {}
    for source, id_to_label in labels.items():
        for r in attr_rows(fuzzy_dir, source):
            clusters.setdefault(r["cluster_id"], []).append(id_to_label[r["id"]])
    return sorted(sorted(c) for c in clusters.values())


def source(tmp_path, name, texts, files=1, labels=None) -> tuple[str, dict[str, str]]:
    d = str(tmp_path / name)
    sid_to_id = write_normalized_source(d, name, texts, files, labels)
    return d, {i: s for s, i in sid_to_id.items()}


# ---------------------------------------------------------------- exact
def test_exact_dups_across_sources_by_priority(tmp_path):
    shared_ab, shared_bc, shared_all = text(50, 1), text(50, 2), text(50, 3)
    a, _ = source(tmp_path, "a", [shared_ab, shared_all, text(50, 10), text(50, 11)], 2)
    b, _ = source(tmp_path, "b", [shared_ab, shared_bc, shared_all, text(50, 12)], 3)
    c, _ = source(tmp_path, "c", [shared_bc, shared_all, text(50, 13)], 1)
    out = tmp_path / "exact"
    res = exact_dups([("a", a, 0), ("b", b, 1), ("c", c, 2)], str(out), LOCAL2)
    marks = {s: {r["id"]: r["duplicate_of"] for r in attr_rows(out, s)} for s in "abc"}
    assert marks["a"] == {}
    assert marks["b"] == {content_id(shared_ab): "a", content_id(shared_all): "a"}
    assert marks["c"] == {content_id(shared_bc): "b", content_id(shared_all): "a"}
    assert res.sources["b"]["duplicates"] == 2 and res.sources["c"]["duplicates"] == 2
    assert res.sources["a"]["docs"] == 4 and res.sources["b"]["docs"] == 4
    # co-partitioned: one attribute file per source file, same names, ids sorted
    for s, d in (("a", a), ("b", b), ("c", c)):
        src_files = sorted(os.listdir(Path(d) / "outputs/main"))
        attr_files = sorted(f for f in os.listdir(out / "attributes" / s) if f.endswith(".parquet"))
        assert attr_files == src_files
        for f in attr_files:
            ids = pq.read_table(out / "attributes" / s / f).column("id").to_pylist()
            assert ids == sorted(ids)
            src_ids = set(pq.read_table(Path(d) / "outputs/main" / f).column("id").to_pylist())
            assert set(ids) <= src_ids
        meta = json.loads((out / "attributes" / s / "attrs.json").read_text())
        assert meta["kind"] == "exact" and meta["source"] == s and meta["files"] == src_files
    # reversing priorities moves the survivor
    out2 = tmp_path / "exact2"
    exact_dups([("a", a, 2), ("b", b, 1), ("c", c, 0)], str(out2), LOCAL2)
    marks_a = {r["id"]: r["duplicate_of"] for r in attr_rows(out2, "a")}
    assert marks_a == {content_id(shared_ab): "b", content_id(shared_all): "c"}


def test_missing_shard_is_an_error(tmp_path):
    a, _ = source(tmp_path, "a", [text(20, i) for i in range(10)], 3)
    os.unlink(Path(a) / "outputs/main/part-00001-of-00003.parquet")
    with pytest.raises(DedupInputError, match="2 of 3 shards present; missing 1"):
        exact_dups([("a", a, 0)], str(tmp_path / "x"), LOCAL2)
    with pytest.raises(DedupInputError, match="no parquet files"):
        minhash_source("b", str(tmp_path / "nothing"), str(tmp_path / "y"))


# ---------------------------------------------------------------- minhash
def test_minhash_source_writes_co_partitioned_buckets(tmp_path):
    texts = [text(80, i) for i in range(30)] + ["", "!!!", "tiny doc"]
    a, _ = source(tmp_path, "a", texts, 3)
    out = tmp_path / "mh"
    cfg = DedupConfig(bands=10, rows=5, num_perms=50)
    res = minhash_source("a", a, str(out), cfg, LOCAL2)
    assert res.counters["docs"] == 33 and res.counters["no_shingles"] == 2
    assert res.attributes == "attributes/a" and res.params["bands"] == 10
    for f in sorted(os.listdir(Path(a) / "outputs/main")):
        src = pq.read_table(Path(a) / "outputs/main" / f)
        t = pq.read_table(out / "attributes/a" / f)
        assert t.column("id").to_pylist() == src.column("id").to_pylist()
        assert t.schema.field("buckets").type == pa.list_(pa.uint64(), 10)
        for tx, bk in zip(src.column("text").to_pylist(), t.column("buckets").to_pylist()):
            assert (bk is None) == (tx in ("", "!!!"))
        md = json.loads(t.schema.metadata[b"datakit.dedup"])
        assert md["params"] == res.params
    meta = json.loads((out / "attributes/a/attrs.json").read_text())
    assert meta["params"]["seed"] == 42 and meta["kind"] == "minhash" and sum(meta["rows"]) == 33


def _minhash_all(tmp_path, sources, cfg, ex=LOCAL2, tag="mh"):
    dirs = {}
    for name, d in sources.items():
        out = str(tmp_path / f"{tag}_{name}")
        minhash_source(name, d, out, cfg, ex)
        dirs[name] = out
    return dirs


# ---------------------------------------------------------------- fuzzy: peer cases
FIVE = {"1": "A test string", "2": "A different test string", "300": "A different object",
        "4": "The quick brown fox jumps over the lazy dog", "-1": "The quick black cat jumps over the lazy dog"}


@pytest.mark.parametrize("bands,verify,threshold,expected", [
    (5, True, 0.5, [["-1", "4"]]),
    (10, True, 0.39, [["-1", "4"], ["1", "2"]]),
    (10, True, 0.3, [["-1", "4"], ["1", "2", "300"]]),
    (15, True, 0.3, [["-1", "4"], ["1", "2", "300"]]),
    (10, False, None, [["-1", "4"], ["1", "2", "300"]]),
])
def test_five_documents_char_ngrams(tmp_path, bands, verify, threshold, expected):
    """Peer case: char 5-grams, one hash per band; true Jaccard 1-2: 0.40, 2-300: 0.32, 4-(-1): 0.53."""
    d, labels = source(tmp_path, "s", list(FIVE.values()), 2, list(FIVE.keys()))
    cfg = DedupConfig(ngram=5, ngram_unit="char", num_perms=bands, bands=bands, rows=1)
    mh = _minhash_all(tmp_path, {"s": d}, cfg)
    out = tmp_path / "fz"
    fcfg = DedupConfig(verify=verify, verify_threshold=threshold or 0.0)
    res = fuzzy_dups([FuzzySource("s", d, mh["s"], 0)], str(out), fcfg, LOCAL2)
    assert groups_by_label(out, {"s": labels}) == expected
    rows = attr_rows(out, "s")
    canon = {r["cluster_id"]: [] for r in rows}
    for r in rows:
        canon[r["cluster_id"]].append(r["is_canonical"])
    assert all(sum(v) == 1 for v in canon.values())  # exactly one survivor per cluster
    assert res.counters["clusters"] == len(expected)
    assert res.sources["s"]["duplicates"] == sum(len(g) - 1 for g in expected)
    # the canonical is the lowest id (single source)
    for r in rows:
        members = [x["id"] for x in rows if x["cluster_id"] == r["cluster_id"]]
        assert r["cluster_id"] == min(members) and r["is_canonical"] == (r["id"] == min(members))


LONG_TEXT = text(600, 99)
WINDOWS = [[0, 20, 50], [400, 420], [800, 810, 820, 840, 860], [1205, 1215, 1225, 1245], [1600], [2000]]


def test_overlapping_windows_form_four_clusters(tmp_path):
    """Peer case: 400-char windows of one text; each window cluster keeps exactly one document."""
    texts, labels = [], []
    for ci, cluster in enumerate(WINDOWS):
        for xi, x in enumerate(cluster):
            texts.append(LONG_TEXT[x : x + 400])
            labels.append(f"{ci}_{xi}")
    d, id_to_label = source(tmp_path, "s", texts, 3, labels)
    mh = _minhash_all(tmp_path, {"s": d}, DedupConfig())
    out = tmp_path / "fz"
    res = fuzzy_dups([FuzzySource("s", d, mh["s"], 0)], str(out), DedupConfig(), LOCAL2)
    groups = groups_by_label(out, {"s": id_to_label})
    assert groups == [[f"{ci}_{xi}" for xi in range(len(c))] for ci, c in enumerate(WINDOWS) if len(c) > 1]
    removed = [id_to_label[r["id"]] for r in attr_rows(out, "s") if not r["is_canonical"]]
    for ci, cluster in enumerate(WINDOWS):
        assert sum(lab.startswith(f"{ci}_") for lab in removed) == len(cluster) - 1
    assert res.counters["clusters"] == 4 and res.cc_rounds >= 1
    assert res.counters["verified_pairs"] <= res.counters["candidate_pairs"]


def test_identical_documents_in_two_sources_one_canonical(tmp_path):
    same = text(120, 5)
    near = mutate(same, 2, 6)
    a, la = source(tmp_path, "a", [same, text(120, 7)], 1, ["a_same", "a_other"])
    b, lb = source(tmp_path, "b", [text(120, 8), same, near], 2, ["b_other", "b_same", "b_near"])
    mh = _minhash_all(tmp_path, {"a": a, "b": b}, DedupConfig())
    results = []
    for prio, ex in (((0, 1), LOCAL1), ((0, 1), LOCAL2), ((1, 0), LOCAL2)):
        out = tmp_path / f"fz_{prio}_{ex.max_workers}"
        fuzzy_dups([("a", a, mh["a"], prio[0]), ("b", b, mh["b"], prio[1])], str(out), None, ex)
        rows = {**{la[r["id"]]: r for r in attr_rows(out, "a")}, **{lb[r["id"]]: r for r in attr_rows(out, "b")}}
        results.append(rows)
        assert set(rows) == {"a_same", "b_same", "b_near"}
        assert sum(r["is_canonical"] for r in rows.values()) == 1
        assert len({r["cluster_id"] for r in rows.values()}) == 1
    assert results[0] == results[1]  # worker count changes nothing
    assert results[0]["a_same"]["is_canonical"] and results[0]["a_same"]["canonical_source"] == "a"
    assert results[2]["b_same"]["is_canonical"] and results[2]["b_same"]["canonical_source"] == "b"


def test_verification_drops_lsh_false_positives(tmp_path):
    base = [text(60, 200 + i) for i in range(6)]
    # each variant shares roughly half of its base's words: a low-threshold LSH pairs them, Jaccard is ~0.3
    variants = [mutate(t, 20, 300 + i) for i, t in enumerate(base)]
    close = [mutate(t, 1, 400 + i) for i, t in enumerate(base)]
    texts = base + variants + close
    d, labels = source(tmp_path, "s", texts, 2, [f"b{i}" for i in range(6)] + [f"v{i}" for i in range(6)]
                       + [f"c{i}" for i in range(6)])
    cfg = DedupConfig(num_perms=40, bands=40, rows=1)  # threshold ~0.03: nearly everything collides
    mh = _minhash_all(tmp_path, {"s": d}, cfg)
    loose = fuzzy_dups([("s", d, mh["s"])], str(tmp_path / "loose"), DedupConfig(verify=False), LOCAL2)
    strict = fuzzy_dups([("s", d, mh["s"])], str(tmp_path / "strict"), DedupConfig(verify_threshold=0.7), LOCAL2)
    assert strict.counters["rejected_pairs"] > 0
    assert strict.counters["verified_pairs"] + strict.counters["rejected_pairs"] == strict.counters["candidate_pairs"]
    groups = groups_by_label(tmp_path / "strict", {"s": labels})
    assert groups == [[f"b{i}", f"c{i}"] for i in range(6)]
    for i in range(6):
        j = jaccard(shingle_set(base[i], 5), shingle_set(close[i], 5))
        assert j >= 0.7
    assert loose.counters["cluster_members"] > strict.counters["cluster_members"]


def test_refuses_to_mix_minhash_parameters(tmp_path):
    a, _ = source(tmp_path, "a", [text(50, i) for i in range(5)])
    b, _ = source(tmp_path, "b", [text(50, 10 + i) for i in range(5)])
    minhash_source("a", a, str(tmp_path / "mh_a"), DedupConfig(seed=42), LOCAL2)
    minhash_source("b", b, str(tmp_path / "mh_b"), DedupConfig(seed=43), LOCAL2)
    with pytest.raises(AttributeMismatch, match="seed=42.*seed=43"):
        fuzzy_dups([("a", a, str(tmp_path / "mh_a")), ("b", b, str(tmp_path / "mh_b"))], str(tmp_path / "f"))
    # the minhash set of another source is refused too
    with pytest.raises(DedupInputError, match="no attribute set for source 'b'"):
        fuzzy_dups([("b", b, str(tmp_path / "mh_a"))], str(tmp_path / "f"))
    # the source changed after its minhashes were made
    write_normalized_source(a, "a", [text(50, i) for i in range(6)])
    with pytest.raises(AttributeMismatch, match="minhashes cover 5 rows"):
        fuzzy_dups([("a", a, str(tmp_path / "mh_a"))], str(tmp_path / "f"))


# ---------------------------------------------------------------- decontamination
def _benchmark(tmp_path, items, name="quiz.jsonl.gz"):
    path = tmp_path / name
    with gzip.open(path, "wt") as f:
        for it in items:
            f.write(json.dumps(it) + "\n")
    return str(path)


def test_decontamination_marks_and_reports(tmp_path):
    question = text(30, 500)
    choice = text(14, 501)
    items = [
        {"qid": "q1", "question": question, "choices": ["yes", "no"]},
        {"qid": "q2", "question": "too short to count", "choices": [choice, "b"]},
        {"qid": "q3", "question": "Short again", "choices": []},
        {"qid": "q4", "choices": ["x"]},
    ]
    bench = _benchmark(tmp_path, items)
    leaked = text(40, 600) + " " + question.upper().replace(" ", ", ") + " " + text(40, 601)
    leaked_choice = text(20, 602) + " " + choice + "!"
    partial_only = " ".join(question.split()[:12]) + " " + text(30, 603)  # 12 words < 13: no match
    a, la = source(tmp_path, "a", [leaked, text(80, 604), partial_only], 2, ["leak", "clean", "partial"])
    b, lb = source(tmp_path, "b", [leaked_choice, text(80, 605)], 1, ["leak_choice", "clean"])
    out = tmp_path / "decon"
    spec = BenchmarkSpec("quiz", bench, ("question", "choices"), id_field="qid")
    res = decontaminate([("a", a, 0), ("b", b, 1)], [spec], str(out), DecontamConfig(), LOCAL2)
    ra = {la[r["id"]]: r for r in attr_rows(out, "a")}
    rb = {lb[r["id"]]: r for r in attr_rows(out, "b")}
    assert set(ra) == {"leak"} and ra["leak"]["benchmark"] == "quiz" and ra["leak"]["item"] == "q1"
    assert ra["leak"]["ngram_hits"] == 30 - 13 + 1
    assert set(rb) == {"leak_choice"} and rb["leak_choice"]["item"] == "q2"
    report = json.loads((out / "report.json").read_text())
    q = report["benchmarks"]["quiz"]
    assert q["docs_marked"] == {"a": 1, "b": 1} and q["docs_marked_total"] == 2
    assert q["items"] == 4 and q["items_without_ngrams"] == 2 and q["missing_field"] == 1
    assert any("q3" in e for e in q["examples"]) and any(":4: field 'question' missing" in e for e in q["examples"])
    assert res.sources["a"]["contaminated"] == 1 and res.sources["a"]["by_benchmark"] == {"quiz": 1}
    assert res.params["benchmarks"][0]["sha256"] == q["sha256"]


def test_decontamination_input_errors(tmp_path):
    a, _ = source(tmp_path, "a", [text(30, 1)])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": broken\n')
    with pytest.raises(DedupInputError, match=r"bad.jsonl:2: malformed JSON"):
        decontaminate([("a", a)], [BenchmarkSpec("b", str(bad))], str(tmp_path / "o"))
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text('{"prompt": "x y z", "answer": "q"}\n')
    with pytest.raises(DedupInputError, match="fields seen: answer, prompt"):
        decontaminate([("a", a)], [BenchmarkSpec("w", str(wrong), ("text",))], str(tmp_path / "o"))
    with pytest.raises(DedupInputError, match="file not found"):
        decontaminate([("a", a)], [BenchmarkSpec("m", str(tmp_path / "missing.jsonl"))], str(tmp_path / "o"))


def test_decontamination_reads_parquet_benchmarks(tmp_path):
    item = text(20, 700)
    path = tmp_path / "bench.parquet"
    pq.write_table(pa.table({"prompt": [item, text(20, 701)]}), path)
    a, la = source(tmp_path, "a", [text(10, 702) + " " + item, text(60, 703)], 1, ["hit", "miss"])
    decontaminate([("a", a)], [BenchmarkSpec("p", str(path), ("prompt",))], str(tmp_path / "o"), None, LOCAL2)
    rows = attr_rows(tmp_path / "o", "a")
    assert [(la[r["id"]], r["item"]) for r in rows] == [("hit", "1")]  # no id_field: the row number from 1


# ---------------------------------------------------------------- the whole chain + consolidate
def _corpus(tmp_path):
    rng = random.Random(11)
    # long enough that 1-2 edits keep Jaccard >= 0.92: an LSH miss is then a 1e-5 event, not luck
    base = [text(rng.randrange(250, 400), 1000 + i) for i in range(60)]
    quiz_q = text(25, 2000)
    a_texts = base[:40] + [mutate(base[i], 2, 3000 + i) for i in range(5)] + [text(50, 2001) + " " + quiz_q]
    b_texts = base[30:60] + [mutate(base[i], 1, 4000 + i) for i in range(35, 45)] + ["", "a b c"]
    a, la = source(tmp_path, "a", a_texts, 3)
    b, lb = source(tmp_path, "b", b_texts, 2)
    bench = _benchmark(tmp_path, [{"question": quiz_q}])
    return {"a": a, "b": b}, BenchmarkSpec("quiz", bench, ("question",)), (la, lb)


def _run_chain(tmp_path, sources, spec, ex, tag):
    root = tmp_path / tag
    pr = [("a", sources["a"], 0), ("b", sources["b"], 1)]
    exact_dups(pr, str(root / "exact"), ex)
    mh = {n: str(root / f"mh_{n}") for n in sources}
    for n, d in sources.items():
        minhash_source(n, d, mh[n], DedupConfig(), ex)
    fuzzy_dups([(n, d, mh[n], p) for n, d, p in pr], str(root / "fuzzy"), DedupConfig(), ex)
    decontaminate(pr, [spec], str(root / "decon"), DecontamConfig(), ex)
    results = {}
    for n, d in sources.items():
        results[n] = consolidate(n, d, [str(root / "exact"), str(root / "fuzzy"), str(root / "decon")],
                                 str(root / f"final_{n}"), ex)
    return root, results


def test_chain_counts_add_up_and_contaminated_doc_is_removed(tmp_path):
    sources, spec, (la, lb) = _corpus(tmp_path)
    root, results = _run_chain(tmp_path, sources, spec, LOCAL2, "run")
    for n, res in results.items():
        c = res.counters
        assert c["docs_in"] == c["docs_out"] + c["removed_exact"] + c["removed_fuzzy"] + c["removed_decontaminate"]
        main = root / f"final_{n}" / "outputs/main"
        src_files = sorted(os.listdir(Path(sources[n]) / "outputs/main"))
        assert sorted(os.listdir(main)) == src_files
        kept = [r for f in src_files for r in read_rows(main / f)]
        assert len(kept) == c["docs_out"]
        for f in src_files:
            ids = pq.read_table(main / f).column("id").to_pylist()
            assert ids == sorted(ids)
            assert pq.read_table(main / f).schema == pq.read_table(Path(sources[n]) / "outputs/main" / f).schema
        removed = [r for f in src_files for r in read_rows(root / f"final_{n}" / "outputs/removed" / f)]
        assert len(removed) == c["docs_in"] - c["docs_out"]
    a, b = results["a"].counters, results["b"].counters
    assert b["removed_exact"] == 10  # base[30:40] are in both sources; "a" has priority
    assert a["removed_decontaminate"] == 1
    assert a["removed_fuzzy"] == 5 and b["removed_fuzzy"] == 10  # mutated copies of base docs
    assert a["docs_in"] == 46 and b["docs_in"] == 42
    removed_a = {r["reason"] for f in os.listdir(root / "final_a/outputs/removed")
                 for r in read_rows(root / "final_a/outputs/removed" / f)}
    assert removed_a == {"fuzzy", "decontaminate"}
    # nothing left is a near-duplicate of something else kept (across both sources)
    kept_texts = [r["text"] for n in "ab" for f in os.listdir(root / f"final_{n}/outputs/main")
                  for r in read_rows(root / f"final_{n}/outputs/main" / f)]
    sets = [shingle_set(t, 5) for t in kept_texts if t.split()]
    for i in range(len(sets)):
        for j in range(i + 1, len(sets)):
            assert jaccard(sets[i], sets[j]) < 0.7


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_one_and_two_workers_give_identical_bytes(tmp_path):
    sources, spec, _ = _corpus(tmp_path)
    r1, _ = _run_chain(tmp_path, sources, spec, LOCAL1, "w1")
    r2, _ = _run_chain(tmp_path, sources, spec, LOCAL2, "w2")
    t1, t2 = _tree(r1), _tree(r2)
    assert sorted(t1) == sorted(t2)
    assert len(t1) > 20
    diff = [k for k in t1 if t1[k] != t2[k]]
    assert diff == []


def test_consolidate_refuses_bad_attribute_sets(tmp_path):
    sources, spec, _ = _corpus(tmp_path)
    root, _ = _run_chain(tmp_path, sources, spec, LOCAL2, "run")
    a = sources["a"]
    # attributes of another source
    with pytest.raises(AttributeMismatch, match="for source 'b', not 'a'"):
        consolidate("a", a, [str(root / "exact/attributes/b")], str(tmp_path / "x"))
    # two sets of one kind
    with pytest.raises(AttributeMismatch, match="two exact attribute sets"):
        consolidate("a", a, [str(root / "exact"), str(root / "exact")], str(tmp_path / "x"))
    # a minhash set is not a drop list
    with pytest.raises(DedupInputError, match="cannot be consolidated"):
        consolidate("a", a, [str(root / "mh_a")], str(tmp_path / "x"))
    # a missing attribute file is an error, never "keep"
    victim = sorted((root / "fuzzy/attributes/a").glob("*.parquet"))[0]
    victim.rename(victim.with_suffix(".bak"))
    with pytest.raises(ShardFailed, match="missing attribute file"):
        consolidate("a", a, [str(root / "fuzzy")], str(tmp_path / "x"))
    victim.with_suffix(".bak").rename(victim)
    # attribute ids that the source does not have
    f = sorted((root / "decon/attributes/a").glob("*.parquet"))[0]
    pq.write_table(pa.table({"id": ["f" * 32], "benchmark": ["quiz"], "item": ["0"], "ngram_hits": [1]}), f)
    with pytest.raises(ShardFailed, match="not in .*these attributes were made for different data"):
        consolidate("a", a, [str(root / "decon")], str(tmp_path / "x"))


def test_consolidate_rejects_unsorted_source(tmp_path):
    d = tmp_path / "s"
    (d / "outputs/main").mkdir(parents=True)
    ids = sorted(content_id(text(10, i)) for i in range(3))[::-1]
    pq.write_table(pa.table({"id": ids, "text": ["x", "y", "z"]}), d / "outputs/main/part-00000-of-00001.parquet")
    exact_dups([("s", str(d), 0)], str(tmp_path / "e"), LOCAL2)
    with pytest.raises(ShardFailed, match="row 1: ids are not sorted"):
        consolidate("s", str(d), [str(tmp_path / "e")], str(tmp_path / "out"), LOCAL2)


def test_no_near_duplicates_gives_empty_attribute_files(tmp_path):
    d, _ = source(tmp_path, "s", [text(100, 9000 + i) for i in range(20)], 3)
    mh = _minhash_all(tmp_path, {"s": d}, DedupConfig())
    res = fuzzy_dups([("s", d, mh["s"])], str(tmp_path / "fz"), None, LOCAL2)
    files = sorted((tmp_path / "fz/attributes/s").glob("*.parquet"))
    assert len(files) == 3 and all(pq.read_table(f).num_rows == 0 for f in files)
    assert res.counters.get("clusters", 0) == 0 and res.cc_rounds == 0
    assert not (tmp_path / "fz/work").exists()


def test_rerun_into_the_same_dir_with_other_parameters(tmp_path):
    """Nothing from the first run (attributes, component checkpoints) leaks into the second."""
    d, labels = source(tmp_path, "s", list(FIVE.values()), 2, list(FIVE.keys()))
    mh = _minhash_all(tmp_path, {"s": d}, DedupConfig(ngram=5, ngram_unit="char", num_perms=15, bands=15, rows=1))
    out = tmp_path / "fz"
    fuzzy_dups([("s", d, mh["s"])], str(out), DedupConfig(verify_threshold=0.3), LOCAL2)
    assert groups_by_label(out, {"s": labels}) == [["-1", "4"], ["1", "2", "300"]]
    fuzzy_dups([("s", d, mh["s"])], str(out), DedupConfig(verify_threshold=0.5), LOCAL2)
    assert groups_by_label(out, {"s": labels}) == [["-1", "4"]]
    meta = json.loads((out / "attributes/s/attrs.json").read_text())
    assert meta["params"]["verify_threshold"] == 0.5


def test_stale_metadata_is_removed_before_rewriting(tmp_path):
    d, _ = source(tmp_path, "s", [text(40, i) for i in range(4)])
    out = tmp_path / "mh"
    minhash_source("s", d, str(out), DedupConfig(), LOCAL2)
    assert (out / "attributes/s/attrs.json").exists()
    os.unlink(Path(d) / "outputs/main/part-00000-of-00001.parquet")
    write_normalized_source(d, "s", [text(40, i) for i in range(4)], 2)
    (Path(d) / "outputs/main/part-00001-of-00002.parquet").write_bytes(b"not parquet")
    with pytest.raises(ShardFailed, match="part-00001-of-00002.parquet"):
        minhash_source("s", d, str(out), DedupConfig(), LOCAL2)
    assert not (out / "attributes/s/attrs.json").exists()  # the failed rerun left no valid-looking set


# ---------------------------------------------------------------- verification reads, pairs per bucket, threshold
def test_verification_texts_are_streamed_by_row_group(tmp_path):
    """shingle_rows reads only the row groups holding wanted rows, a batch at a time, and gives the same
    sets as shingling the whole column's rows at once."""
    from datakit.dedup.fuzzy_core import shingle_rows, shingle_sets

    texts = [text(40 + i % 50, 1000 + i) for i in range(700)]
    path = tmp_path / "doc.parquet"
    table = pa.table({"id": [content_id(t) for t in texts], "text": texts})
    pq.write_table(table, path, row_group_size=97)  # 8 row groups, the last one short
    assert pq.ParquetFile(path).metadata.num_row_groups == 8
    cfg = minhash_params(DedupConfig())
    rows = np.array(sorted(random.Random(0).sample(range(700), 150) + [0, 96, 97, 699]))
    rows = np.unique(rows)
    want = shingle_sets([texts[i] for i in rows], cfg)
    got = shingle_rows(str(path), rows, cfg)
    assert np.array_equal(got.offsets, want.offsets) and np.array_equal(got.values, want.values)
    one = shingle_rows(str(path), np.array([500]), cfg)
    assert np.array_equal(one.values, shingle_sets([texts[500]], cfg).values)
    assert len(shingle_rows(str(path), np.array([], np.int64), cfg)) == 0
    with pytest.raises(AttributeMismatch, match="row 700 wanted"):
        shingle_rows(str(path), np.array([5, 700]), cfg)


def test_large_buckets_pair_each_member_with_its_predecessors():
    """A bucket of up to clique_max members gives its clique; a larger one clique_max - 1 pairs per member
    (linear, not quadratic), a superset of the chain; clique_max 1 is the chain."""
    from datakit.dedup.fuzzy import _bucket_pairs

    key = np.array([7] * 5 + [9] * 40 + [3], dtype=np.uint64)
    node = np.arange(len(key), dtype=np.int64)[::-1].copy()
    b = {"key": key, "node": node}
    pairs = _bucket_pairs(0, b, clique_max=8)
    got = set(zip(pairs["u"].tolist(), pairs["v"].tolist()))
    small = sorted(node[:5].tolist())
    assert {(a, c) for i, a in enumerate(small) for c in small[i + 1:]} <= got  # the clique of 5
    big = sorted(node[5:45].tolist())
    big_pairs = {(a, c) for a, c in got if a in big}
    assert big_pairs == {(big[i], big[j]) for j in range(40) for i in range(max(0, j - 7), j)}
    assert len(got) == 10 + len(big_pairs) and len(big_pairs) == 7 * 40 - 28
    chain = _bucket_pairs(0, b, clique_max=1)
    assert set(zip(chain["u"].tolist(), chain["v"].tolist())) == (
        {(small[i], small[i + 1]) for i in range(4)} | {(big[i], big[i + 1]) for i in range(39)})
    assert _bucket_pairs(0, {"key": key[:1], "node": node[:1]}, clique_max=8) is None


def test_one_false_neighbour_does_not_cut_a_member_off(tmp_path):
    """Documents share a long boilerplate, so most buckets hold all of them; a pair of copies is adjacent
    there only by chance. Verified at 0.9 (copies ~0.97, boilerplate siblings ~0.8), a chain loses the
    copies that no small bucket links; pairing with several predecessors finds more, the clique all."""
    boiler = text(300, 42)
    base = [boiler + " " + text(30, 600 + i) for i in range(8)]
    copies = [boiler + " " + mutate(t[len(boiler) + 1:], 1, 700 + i) for i, t in enumerate(base)]
    d, labels = source(tmp_path, "s", base + copies, 1, [f"b{i}" for i in range(8)] + [f"c{i}" for i in range(8)])
    mh = _minhash_all(tmp_path, {"s": d}, DedupConfig(num_perms=4, bands=4, rows=1))
    res = {}
    for cm in (1, 4, 16):
        out = tmp_path / f"fz{cm}"
        fuzzy_dups([("s", d, mh["s"])], str(out), DedupConfig(verify_threshold=0.9), LOCAL2,
                   clique_max=cm)
        res[cm] = groups_by_label(out, {"s": labels})
    assert res[16] == [[f"b{i}", f"c{i}"] for i in range(8)]  # the full clique: every true pair
    assert len(res[1]) < len(res[4]) <= 8
    assert all(g in res[4] for g in res[1])


def test_verify_threshold_follows_the_lsh_parameters(tmp_path):
    from datakit.dedup import verify_threshold
    from datakit.dedup.lsh_params import candidate_threshold

    default = minhash_params(DedupConfig())
    assert DedupConfig().verify_threshold is None
    assert verify_threshold(DedupConfig(), default) == round(candidate_threshold(14, 8), 4)
    assert verify_threshold(DedupConfig(threshold=0.8), default) == 0.8
    assert verify_threshold(DedupConfig(threshold=0.8, verify_threshold=0.6), default) == 0.6
    d, _ = source(tmp_path, "s", [text(100, 1), mutate(text(100, 1), 3, 2), text(100, 3)], 1)
    for bands, rows in ((14, 8), (20, 5)):
        mh = _minhash_all(tmp_path, {"s": d}, DedupConfig(num_perms=bands * rows, bands=bands, rows=rows),
                          tag=f"mh{bands}")
        out = tmp_path / f"fz{bands}"
        res = fuzzy_dups([("s", d, mh["s"])], str(out), DedupConfig(), LOCAL1)
        assert res.params["verify_threshold"] == round(candidate_threshold(bands, rows), 4)
        assert res.counters["clusters"] == 1


def test_verification_sends_each_set_once_per_partition_and_chunks_give_the_same_bytes(tmp_path, monkeypatch):
    """A family of copies puts every member in many pairs; its sets still travel once per verification
    partition, and merging pairs a small chunk at a time writes the same marks as one merge."""
    import datakit.dedup.fuzzy_core as fz

    base = text(150, 77)
    texts = [base] + [mutate(base, 2, 800 + i) for i in range(30)] + [text(150, 900 + i) for i in range(20)]
    d, _ = source(tmp_path, "s", texts, 2)
    mh = _minhash_all(tmp_path, {"s": d}, DedupConfig())
    inline = ExecConfig(backend="inline")
    one = fuzzy_dups([("s", d, mh["s"])], str(tmp_path / "one"), DedupConfig(), inline,
                     num_partitions=1)
    c = one.counters
    assert c["candidate_pairs"] > 3 * c["verify_texts_read"]  # many pairs per document
    assert c["verify_sets_sent"] == c["verify_texts_read"]  # one partition: each set once
    monkeypatch.setattr(fz, "VERIFY_CHUNK_FINGERPRINTS", 64)
    small = fuzzy_dups([("s", d, mh["s"])], str(tmp_path / "small"), DedupConfig(), inline,
                     num_partitions=1)
    assert small.counters == one.counters
    assert _tree(tmp_path / "one" / "attributes") == _tree(tmp_path / "small" / "attributes")
    assert one.counters["cluster_members"] == 31
