"""benchmarks/scale.py's code path on a corpus of ~1 MB: the streamed corpus (pool, recombined text past
the pool, plants, resume) and one measured run of the whole pipeline. Never at size: the benchmark's
figures come from running it (see its docstring), not from this test."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import zstandard

from benchmarks import _scale_corpus as sc
from benchmarks import scale

LICENSES = Path("/usr/share/common-licenses")
FILE_MB = 0.25


def _rows(path: Path) -> list[dict]:
    data = zstandard.ZstdDecompressor().decompress(path.read_bytes(), max_output_size=2**28)
    return [json.loads(line) for line in data.decode().splitlines()]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if not LICENSES.is_dir():
        pytest.skip(f"{LICENSES} is absent (Debian's base-files ships it)")
    work = tmp_path_factory.mktemp("scale")
    kinds = sc.build_pool(work / "pool", {"doc": ("doc", sorted(LICENSES.iterdir()))})
    pool_mb = sum(v["bytes"] for v in kinds.values()) / 1e6
    n_files = int(2 * pool_mb / FILE_MB) + 2  # twice the pool: recombined text in the later files
    parts = sc.build_parts(work / "corpus", work / "pool", kinds, n_files, FILE_MB, seed=0)
    return work, kinds, parts


def test_corpus_goes_past_the_pool_without_repeating_a_document(built):
    work, kinds, parts = built
    pool = {json.loads(line) for k in kinds for line in open(work / "pool" / f"{k}.jsonl", encoding="utf-8")}
    assert len(pool) == sum(v["docs"] for v in kinds.values())
    assert parts[0].recombined_bytes == 0 and parts[-1].unique_bytes == 0 and parts[-1].recombined_bytes > 0
    seen_ids, base_texts = set(), []
    for p in parts:
        rows = _rows(work / "corpus" / p.name)
        assert len(rows) == p.docs and sum(len(r["text"].encode()) for r in rows) == p.text_bytes
        seen_ids.update(r["id"] for r in rows)
        base_texts += [r["text"] for r in rows if "-" in r["id"]]  # planted copies have no '-'
        assert p.plants["exact"] + p.plants["near"] == len(rows) - sum("-" in r["id"] for r in rows)
    assert len(seen_ids) == sum(p.docs for p in parts)
    assert len(set(base_texts)) == len(base_texts)  # the pool once, then only new documents
    recombined = [t for t in base_texts if t not in pool]
    assert recombined and all(t.count("\n\n") >= sc.MIN_PIECES - 1 for t in recombined)


def test_a_stopped_build_resumes_with_the_same_bytes(built):
    work, kinds, parts = built
    digests = [hashlib.sha256((work / "corpus" / p.name).read_bytes()).hexdigest() for p in parts]
    for p in parts[-2:]:
        (work / "corpus" / p.name.replace(".jsonl.zst", ".json")).unlink()
    again = sc.build_parts(work / "corpus", work / "pool", kinds, len(parts), FILE_MB, seed=0)
    assert [hashlib.sha256((work / "corpus" / p.name).read_bytes()).hexdigest() for p in again] == digests


def test_one_size_is_measured_step_by_step(built):
    work, _, parts = built
    tok, training = scale.prepare_tokenizer(work, parts, vocab=512)
    assert tok.exists() and training["vocab"] == 512
    s = scale.Setup(work, parts, tok, FILE_MB, workers=2, timeout=600, keep_outputs=False)
    r = scale.run_size(s, 3 * FILE_MB)
    steps = {v["stage"] for v in r["steps"].values()}
    assert {"normalize", "quality", "exact", "fuzzy", "consolidate", "tokenize"} <= steps
    assert r["total"]["cpu_s"] > 0 and r["total"]["peak_pss_worker_mb"] > 0 and r["total"]["workers_seen"] >= 1
    assert r["total"]["peak_pss_tree_mb"] >= r["total"]["peak_pss_worker_mb"]
    assert set(r["fuzzy_phases"]) == {"candidates", "components", "marks", "rest"}
    tokenize = next(n for n, v in r["steps"].items() if v["stage"] == "tokenize")
    assert r["rates"][tokenize]["tokens_per_cpu_s"] > 0 and "marin" in r["rates"][tokenize]
    assert not (work / "runs" / "0.75" / "prefix").exists()  # outputs deleted, records kept
    assert (work / "runs" / "0.75" / "events.jsonl").exists() and (work / "runs" / "0.75" / "result.json").exists()
    assert scale.cost_model_args(r)["command"].startswith("python scripts/cost_model.py --cpu-s-per-mb ")


def test_no_quality_runs_the_same_pipeline_without_the_quality_stage_and_keeps_results_apart(tmp_path):
    def setup(quality: str) -> scale.Setup:
        return scale.Setup(tmp_path, [], tmp_path / "tokenizer.json", FILE_MB, workers=2, timeout=60,
                           keep_outputs=False, quality=quality)

    files = [str(tmp_path / "a.jsonl.zst")]
    full, bare = (scale.manifest(setup(q), tmp_path / "prefix", files) for q in ("annotate_only", "off"))
    assert full["quality"]["annotate_only"] and "quality" not in bare
    assert {k: v for k, v in full.items() if k != "quality"} == bare
    assert [setup(q).runs.name for q in ("annotate_only", "filter", "off")] == ["runs", "runs-filter", "runs-no-quality"]
    assert setup("off").report.name == "report-no-quality.json" and setup("annotate_only").report.name == "report.json"


def _fuzzy_result(mb: float, cpu: float, docs: int, texts: int) -> dict:
    phase = {"cpu_s": cpu, "wall_s": cpu, "peak_pss_worker_mb": 100}
    counters = {"docs": docs, "verify_texts_read": texts, "candidate_pairs": 2 * texts, "verify_sets_sent": texts}
    return {"mb": mb, "corpus": {"mb_text": mb}, "fuzzy_phases": {"candidates": phase},
            "steps": {"fuzzy-dups": {"stage": "fuzzy", **phase, "counters": counters},
                      "normalize-corpus": {"stage": "normalize", "cpu_s": 1.0, "counters": {"docs_out": docs}}}}


def test_the_fuzzy_ladder_tells_growing_work_from_a_growing_cost_per_unit_of_work():
    results = [_fuzzy_result(100, 2.0, 1000, 300), _fuzzy_result(200, 5.0, 2000, 750)]
    (step,) = scale.fuzzy_ladder(results)
    assert step["fuzzy"]["cpu_s"]["ratio"] == 2.5
    assert step["workload"]["docs"] == {"ratio": 2.0, "cpu_per_unit_ratio": 1.25}
    assert step["workload"]["verify_texts_read"] == {"ratio": 2.5, "cpu_per_unit_ratio": 1.0}
    assert scale.cost_model_args(results[1]) is None  # no quality stage: its rate cannot be given
    assert scale.rates(results[1]["steps"])["fuzzy-dups"]["docs_per_cpu_s"] == 400  # normalize's docs_out


def _long_words(text: str) -> set[str]:
    return {w for w in text.lower().split() if sum(c.isalnum() for c in w) >= 3}


def test_a_rotated_copy_keeps_every_byte_length_and_shares_no_word():
    texts = ["Hello World 2024 foo_bar.baz()", "Привет, мир", "日本語のテキスト", "Grüße aus Köln", "a\tbee\n\n-- x"]
    for j in (1, 2, 7):
        table = sc._Rotation(j)
        for t in texts:
            r = t.translate(table)
            assert len(r.encode()) == len(t.encode())
            assert [c.isalnum() for c in r] == [c.isalnum() for c in t]  # word boundaries where they were
            assert [c for c in r if not c.isalnum()] == [c for c in t if not c.isalnum()]
            assert not _long_words(r) & _long_words(t)  # (a one-letter word becomes another one)
        letters = [cp for cp in range(0x20, 0x3100) if chr(cp).isalnum()]
        assert len({table[cp] for cp in letters}) == len(letters)  # one to one: no two words merge


def test_disjoint_copies_grow_the_fuzzy_work_exactly_as_the_corpus(built):
    """On real text (the licenses), twice the files as rotated copies is twice the fuzzy step's work: the
    copies' exact and near duplicates are the original's and none cross a copy. Exactly twice for what
    does not depend on MinHash (documents, exact copies); within a pair or two for what LSH finds, since
    a copy's shingles hash to other values, so a band collision of the original may miss in the copy or
    the other way round (a copy sharing words with the original would add pairs across copies)."""
    work, _, parts = built
    tok, _ = scale.prepare_tokenizer(work, parts, vocab=512)
    s = scale.Setup(work, parts, tok, FILE_MB, workers=2, timeout=600, keep_outputs=False, quality="off",
                    copies_of=2 * FILE_MB)
    assert s.runs.name == "runs-no-quality-copies"
    one, two = (scale.run_size(s, k * 2 * FILE_MB) for k in (1, 2))
    f1, f2 = (next(v for n, v in r["steps"].items() if v["stage"] == "fuzzy")["counters"] for r in (one, two))
    assert f1["verified_pairs"] > 0
    n1, n2 = (next(v for v in r["steps"].values() if v["stage"] == "normalize")["counters"] for r in (one, two))
    assert (n2["docs_in"], n2["dups"]) == (2 * n1["docs_in"], 2 * n1["dups"]) and f2["docs"] == 2 * f1["docs"]
    for key in ("candidate_pairs", "verified_pairs", "cluster_members", "clusters", "verify_texts_read"):
        assert abs(f2[key] - 2 * f1[key]) <= max(2, 0.1 * f1[key]), (key, f1[key], f2[key])
    assert two["corpus"]["mb_text"] == 2 * one["corpus"]["mb_text"] and two["corpus"]["disjoint_copies"]["copies"] == 2
    with pytest.raises(SystemExit, match="not a whole multiple"):
        scale.size_files(s, 3 * FILE_MB)


def test_a_saved_result_is_reused_only_in_the_same_mode(tmp_path):
    s = scale.Setup(tmp_path, [], tmp_path / "t.json", FILE_MB, workers=2, timeout=60, keep_outputs=False,
                    quality="off", copies_of=100.0)
    copies = {"quality_mode": "off", "corpus": {"disjoint_copies": {"of_mb": 100.0, "copies": 4}}}
    assert scale._same_mode(copies, s)
    assert not scale._same_mode({**copies, "corpus": {"disjoint_copies": {"of_mb": 200.0}}}, s)
    assert not scale._same_mode({"quality_mode": "off", "corpus": {}}, s)  # a plain ladder's result
    plain = scale.Setup(tmp_path, [], tmp_path / "t.json", FILE_MB, workers=2, timeout=60, keep_outputs=False,
                        quality="off")
    assert scale._same_mode({"quality_mode": "off", "corpus": {}}, plain) and not scale._same_mode(copies, plain)
