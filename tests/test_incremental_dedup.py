"""The corpus-level steps recompute only what a change touches (issue #27), on real text: the stdlib's
email package (one document per file, so an edit changes one or two normalized parts), the licenses
of this machine, a benchmark cut from them. A build, then one input file edited and one source added:
the incremental build of exact dedup, minhash, fuzzy dedup, decontamination and line dedup writes
byte for byte what a from-scratch build on the final inputs writes, and their reuse counters show that
only the changed files' work was computed (minhash signatures, n-gram scans, segment keys, line dedup
rewrites) and that the verified-pair cache answered the pairs it already knew."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import sysconfig

from datakit import pipeline

STDLIB = sysconfig.get_paths()["stdlib"]
LICENSES = "/usr/share/common-licenses"
STEP_PREFIXES = ("exact-dedup", "minhash-", "fuzzy-dups", "decontaminate", "consolidate-", "linededup-")
MARKERS = {".status", "artifact.json", "error.txt"}


def _inputs(root, final: bool) -> list[dict]:
    """Two sources; ``final``: one email file edited, and a third source (an exact copy of a license, a
    near copy of an email file, the json package)."""
    lic, py = root / "licenses", root / "py"
    if not lic.exists():
        lic.mkdir()
        for name in ("Apache-2.0", "GPL-3", "LGPL-2.1", "MPL-2.0", "Artistic", "GPL-2"):
            shutil.copy(f"{LICENSES}/{name}", lic / f"{name}.txt")
    shutil.rmtree(py, ignore_errors=True)
    py.mkdir()
    for path in sorted(glob.glob(f"{STDLIB}/email/*.py"))[:24]:
        shutil.copy(path, py / os.path.basename(path))
    for name in ("header.py", "message.py"):  # near copies: pairs the first build verifies
        text = (py / name).read_text()
        (py / f"copy_of_{name}").write_text(text.replace("def ", "def  ", 2))
    sources = [{"name": "licenses", "uri": f"{lic}/*.txt", "format": "text"},
               {"name": "py", "uri": f"{py}/*.py", "format": "text"}]
    if final:
        with open(py / "charset.py", "a") as f:
            f.write("\n# an edit: one more line in one file\n")
        more = root / "more"
        shutil.rmtree(more, ignore_errors=True)
        more.mkdir()
        shutil.copy(f"{LICENSES}/GPL-3", more / "gpl.txt")
        text = open(f"{STDLIB}/email/feedparser.py").read()
        (more / "feedparser_copy.py").write_text(text.replace("def ", "def  ", 3))
        for path in sorted(glob.glob(f"{STDLIB}/json/*.py")):
            shutil.copy(path, more / os.path.basename(path))
        sources.append({"name": "more", "uri": f"{more}/*", "format": "text"})
    return sources


def _benchmark(root) -> str:
    path = root / "bench.jsonl"
    lgpl = open(f"{LICENSES}/LGPL-2.1").read().split("\n\n")
    items = [p for p in lgpl if len(p.split()) > 60][:3]
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in items))
    return str(path)


def _manifest(root, prefix: str, final: bool):
    return pipeline.manifest_from_dict({
        "prefix": str(root / prefix), "sources": _inputs(root, final),
        "normalize": {"target_shard_bytes": 30_000},
        "dedup": {"exact": True, "fuzzy": True},
        "decontaminate": {"benchmarks": [{"name": "lgpl", "path": _benchmark(root)}]},
        "line_dedup": {}, "tokenize": {"vocab_size": 300}})


def _run(m) -> dict[str, dict]:
    only = [s.name for s in pipeline.build_steps(m) if s.name.startswith(("normalize-", *STEP_PREFIXES))]
    s = pipeline.run(m, workers=2, only=only)
    assert s.ok
    return {st["name"]: st for st in s.to_dict()["steps"]}


def _files(step_dir: str) -> dict[str, str]:
    out = {}
    for base, _, names in os.walk(step_dir):
        for n in names:
            if n not in MARKERS and not n.startswith(".lease"):
                path = os.path.join(base, n)
                with open(path, "rb") as f:
                    out[os.path.relpath(path, step_dir)] = hashlib.sha256(f.read()).hexdigest()
    return out


def _comparable(step_dir: str) -> dict[str, str]:
    """A step's files for the equality check. The fuzzy and exact index segments (reuse/{fuzzy,exact}/*/seg-*)
    say which files share a segment, which follows the builds' history (key_index.py), and so do the outputs
    manifest listing them and state.json's segment list: those are left out, state.json is compared without
    it."""
    out = {}
    indexed = ("fuzzy", "exact")
    for rel, digest in _files(step_dir).items():
        parts = rel.split("/")
        if rel == "outputs.manifest.json" and any(os.path.isdir(os.path.join(step_dir, "reuse", d)) for d in indexed):
            continue
        if parts[0] == "reuse" and parts[1] in indexed and len(parts) > 3 and parts[3].startswith("seg-"):
            continue
        if parts[0] == "reuse" and parts[1] in indexed and parts[-1] == "state.json":
            with open(os.path.join(step_dir, rel)) as f:
                body = json.load(f)
            digest = json.dumps({k: v for k, v in body.items() if k != "segments"}, sort_keys=True)
        out[rel] = digest
    return out


def fz_docs(c: dict) -> int:
    return c["fuzzy-dups"]["docs"]


def _changed_parts(before: dict, after: dict, source: str) -> int:
    old, new = (_files(x[f"normalize-{source}"]["output"]) for x in (before, after))
    return sum(1 for k, v in new.items() if k.startswith("outputs/main/") and old.get(k) != v)


def test_one_edited_file_and_one_new_source_recompute_only_that_and_equal_a_fresh_build(tmp_path):
    before = _run(_manifest(tmp_path, "inc", final=False))
    after = _run(_manifest(tmp_path, "inc", final=True))
    fresh = _run(_manifest(tmp_path, "fresh", final=True))
    for name, st in fresh.items():
        if name.startswith(STEP_PREFIXES):  # every file, reuse records and pair cache included
            assert _comparable(after[name]["output"]) == _comparable(st["output"]), name

    py_parts = len(glob.glob(os.path.join(after["normalize-py"]["output"], "outputs", "main", "*.parquet")))
    more_parts = len(glob.glob(os.path.join(after["normalize-more"]["output"], "outputs", "main", "*.parquet")))
    changed = _changed_parts(before, after, "py")
    assert 1 <= changed < py_parts, (changed, py_parts)
    c = {name: st["counters"] for name, st in after.items()}
    assert after["minhash-licenses"]["status"] == "skipped"
    assert (c["minhash-py"]["files/computed"], c["minhash-py"]["files/reused"]) == (changed, py_parts - changed)
    lic_parts = len(glob.glob(os.path.join(after["normalize-licenses"]["output"], "outputs", "main", "*.parquet")))
    # per-file scans and segment keys: changed + new only (a unit is keyed by content: an empty part of the
    # new source is the empty part seen before). Line dedup reads consolidate's files: those it rewrote.
    rewritten = sum(c[f"consolidate-{s}"]["files/computed"] for s in ("py", "licenses"))
    for step, touched in (("decontaminate", changed), ("linededup-index", rewritten)):
        assert 1 <= c[step]["files/computed"] <= touched + more_parts, (step, c[step])
    # units are counted once per distinct content (identical files share a key), so this is a lower bound
    # on the files the index took rather than their count
    assert c["decontaminate"]["files/reused"] >= lic_parts + py_parts - changed, c["decontaminate"]
    assert c["linededup-index"]["files/reused"] >= 1, c["linededup-index"]
    # the marks of files that kept their marks are byte-identical: consolidate takes those files
    assert c["consolidate-py"]["files/computed"] <= changed + 1, c["consolidate-py"]
    # the licenses come first: neither the edit nor the new source changes what their files lose
    assert c["linededup-licenses"]["files/computed"] == 0 and c["linededup-licenses"]["files/reused"] >= 1
    assert 0 < c["exact-dedup"]["incremental_ids"] < fz_docs(c), c["exact-dedup"]  # decided again: changed ids only
    fz = c["fuzzy-dups"]
    assert 0 < fz["incremental_documents"] < fz["docs"], fz  # re-paired: only what the change reached
    assert "incremental_documents" not in fresh["fuzzy-dups"]["counters"]
    assert fz["pairs_cached"] > 0 and fz["pairs_verified_now"] < fz["candidate_pairs"], fz
    assert fz["pairs_cached"] + fz.get("pairs_verified_now", 0) + fz.get("pairs_unverified", 0) == fz["candidate_pairs"]
    assert fresh["fuzzy-dups"]["counters"]["pairs_cached"] == 0
    assert fresh["decontaminate"]["counters"]["files/reused"] == 0


def _marks(out_dir) -> dict[str, str]:
    return {k: v for k, v in _files(str(out_dir)).items() if k.startswith("attributes/")}


def test_the_pair_cache_survives_a_new_partition_count_and_a_damaged_file_is_verified_again(tmp_path):
    from datakit.dedup import DedupConfig, FuzzySource, fuzzy_dups, minhash_source
    from datakit.dedup.fixtures import write_normalized_source
    from datakit.dedup.keyed import Reuse
    from datakit.shuffle import ExecConfig
    from datakit.steps import reuse, verify

    texts = [open(p).read() for p in sorted(glob.glob(f"{STDLIB}/email/*.py"))[:20]]
    texts += [t.replace("def ", "def  ", 2) for t in texts[:8]]  # eight near copies
    docs = str(tmp_path / "docs")
    write_normalized_source(docs, "py", texts, num_files=4)
    ex = ExecConfig(backend="inline")
    minhash_source("py", docs, str(tmp_path / "mh"), DedupConfig(), ex)
    src = [FuzzySource("py", docs, str(tmp_path / "mh"), 0)]

    def build(name: str, earlier: str | None, parts: int):
        out = tmp_path / name
        res = fuzzy_dups(src, str(out), DedupConfig(), ex, num_partitions=parts,
                         reuse_from=Reuse(("test",), reuse.load(earlier)))
        verify.write_manifest(str(out))
        return out, res.counters

    first, c1 = build("first", None, 1)
    assert c1["pairs_cached"] == 0 and c1["pairs_verified_now"] == c1["candidate_pairs"] >= 8
    # another partition count (one cache file before, four ranges now): every pair is still found
    second, c2 = build("second", str(first), 4)
    assert c2["pairs_cached"] == c2["candidate_pairs"] and "pairs_verified_now" not in c2
    assert _marks(second) == _marks(first)
    path = second / sorted(p for p in _files(str(second)) if p.startswith("reuse/pairs/"))[0]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte changed
    path.write_bytes(bytes(data))
    third, c3 = build("third", str(second), 4)
    assert c3["pairs_verified_now"] > 0 and c3["pairs_cached"] + c3["pairs_verified_now"] == c3["candidate_pairs"]
    assert _marks(third) == _marks(first)


def test_a_change_links_the_pair_cache_files_it_leaves_as_they_were_and_rewrites_a_damaged_one(tmp_path):
    """An incremental fuzzy build writes only the cache partitions whose pairs changed: the others hold the
    very bytes the earlier build recorded and are linked from its step dir (no new file). An earlier file
    that no longer holds what its build recorded is written again (the right bytes), not linked."""
    from datakit.dedup import DedupConfig, FuzzySource, fuzzy_dups, minhash_source
    from datakit.dedup.fixtures import write_normalized_source
    from datakit.dedup.keyed import Reuse
    from datakit.shuffle import ExecConfig
    from datakit.steps import reuse, verify

    texts = [open(p).read() for p in sorted(glob.glob(f"{STDLIB}/email/*.py"))[:24]]
    texts += [t.replace("def ", "def  ", 2) for t in texts[:16]]  # near copies: pairs in every partition
    ex = ExecConfig(backend="inline")
    sources = []
    for name, batch in (("py", texts), ("more", [texts[20].replace("def ", "def  ", 3)])):
        write_normalized_source(str(tmp_path / name), name, batch, num_files=4 if name == "py" else 1)
        verify.write_manifest(str(tmp_path / name))  # files with recorded hashes: the state can name them
        minhash_source(name, str(tmp_path / name), str(tmp_path / f"mh-{name}"), DedupConfig(), ex)
        sources.append(FuzzySource(name, str(tmp_path / name), str(tmp_path / f"mh-{name}"), len(sources)))

    def build(name: str, srcs: list, earlier: str | None):
        out = tmp_path / name
        res = fuzzy_dups(srcs, str(out), DedupConfig(), ex, num_partitions=8,
                         reuse_from=Reuse(("test",), reuse.load(earlier)))
        verify.write_manifest(str(out))
        return out, res.counters

    def cache(out) -> dict[str, os.stat_result]:
        return {rel: os.stat(out / rel) for rel in _files(str(out)) if rel.startswith("reuse/pairs/")}

    first, _ = build("first", sources[:1], None)
    second, c2 = build("second", sources, str(first))
    assert "incremental_documents" in c2, c2  # the change was applied, not built in full
    before, after = cache(first), cache(second)
    assert len(after) > 2, sorted(after)
    linked = [rel for rel, st in after.items() if rel in before and st.st_ino == before[rel].st_ino]
    assert 0 < len(linked) < len(after), (linked, sorted(after))  # some partitions changed, the rest linked
    # the same change applied again, to the same earlier build: the same cache, every file written anew
    # by a build that has no earlier cache files to link (their names changed), byte for byte
    want = {k: v for k, v in _files(str(second)).items() if k in after}
    for rel in before:
        os.rename(first / rel, first / (rel + ".moved"))
    again, _ = build("again", sources, str(first))
    for rel in before:
        os.rename(first / (rel + ".moved"), first / rel)
    assert {k: v for k, v in _files(str(again)).items() if k in after} == want
    assert not any(os.stat(again / rel).st_ino == st.st_ino for rel, st in before.items())
    # damage one file the next build would link (same size, one byte): it is written again, not linked
    path = second / linked[0]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    os.unlink(path)  # a new inode: the first build's file stays intact
    path.write_bytes(bytes(data))
    third, _ = build("third", sources, str(second))
    assert _files(str(third))[linked[0]] == want[linked[0]]
    assert os.stat(third / linked[0]).st_ino != os.stat(path).st_ino


def test_line_dedup_and_exact_dedup_do_not_depend_on_their_reducer_counts(tmp_path, monkeypatch):
    """The index shuffles size their reducers by their keys; one reducer per file (the old default)
    gives the same files, byte for byte."""
    from datakit.dedup import exact
    from datakit.stages import linededup_index

    sized = _run(_manifest(tmp_path, "sized", final=True))
    monkeypatch.setattr(linededup_index, "KEYS_PER_PARTITION", 1)
    monkeypatch.setattr(exact, "IDS_PER_PARTITION", 1)
    per_file = _run(_manifest(tmp_path, "per-file", final=True))
    for step in ("exact-dedup", "linededup-index", "linededup-py", "linededup-licenses"):
        assert step in sized, sorted(sized)
        assert _comparable(sized[step]["output"]) == _comparable(per_file[step]["output"]), step


def _largest(step_dir: str) -> list[dict]:
    with open(os.path.join(step_dir, "artifact.json")) as f:
        return json.load(f)["result"]["largest"]


def _sample_keys(step_dir: str) -> set[tuple[str, int]]:
    (path,) = glob.glob(os.path.join(step_dir, "reuse", "fuzzy", "*", "state.json"))
    with open(path) as f:
        return {(tok, row) for tok, row, _ in json.load(f)["samples"]}


def test_the_largest_clusters_samples_of_unchanged_files_are_taken_not_read(tmp_path, monkeypatch):
    """The fuzzy report's samples (largest.py) are named by their documents file's content and row: a change
    reads only the samples the earlier build did not show (new clusters, changed files), and the clusters
    with their samples equal a fresh build's."""
    from datakit.dedup import largest

    before = _run(_manifest(tmp_path, "inc", final=False))
    read: list[str] = []
    real = largest._text_at
    monkeypatch.setattr(largest, "_text_at", lambda path, row: read.append(path) or real(path, row))
    after = _run(_manifest(tmp_path, "inc", final=True))
    monkeypatch.undo()
    fresh = _run(_manifest(tmp_path, "fresh", final=True))
    want = _largest(fresh["fuzzy-dups"]["output"])
    assert _largest(after["fuzzy-dups"]["output"]) == want and want
    known = _sample_keys(before["fuzzy-dups"]["output"])
    used = _sample_keys(after["fuzzy-dups"]["output"])
    assert used == _sample_keys(fresh["fuzzy-dups"]["output"])
    assert known & used, "the change kept no sample: the test shows nothing"
    assert len(read) == len(used - known), (read, used - known)


def _marks_rows(steps: dict, source: str = "*") -> dict[str, dict]:
    """Fuzzy dedup's marks rows by id, of ``source`` (default: every source)."""
    import pyarrow.parquet as pq

    rows = {}
    for path in glob.glob(os.path.join(steps["fuzzy-dups"]["output"], "attributes", source, "*.parquet")):
        for r in pq.read_table(path).to_pylist():
            rows[r["id"]] = r
    return rows


def _dropped(steps: dict, source: str) -> set[str]:
    """The ids fuzzy dedup's marks drop from ``source``."""
    return {i for i, r in _marks_rows(steps, source).items() if not r["is_canonical"]}


def _verified_manifest(tmp_path, prefix: str, sources: list[dict]):
    """Fuzzy dedup with candidates from 0.5 and verification at 0.7, on ``sources``."""
    return pipeline.manifest_from_dict({
        "prefix": str(tmp_path / prefix), "sources": sources,
        "dedup": {"exact": True, "fuzzy": True, "threshold": 0.5, "verify_threshold": 0.7},
        "tokenize": {"vocab_size": 300}})


def test_a_source_added_last_removes_none_of_the_earlier_sources_documents(tmp_path):
    """README's keep rule on real text: a and c are the first and last 80% of one stdlib file (their
    Jaccard about 0.6, under the 0.7 verified here), b is the whole file (about 0.8 with each). With a
    and c in the first source and b added as a new last source, b goes and both a and c stay, so the
    first source's marks and consolidated files are taken whole from the build before, as a fresh build
    on the final inputs has them (the marks files gain b's cluster rows, not a dropped id). The connected
    components of the pairs would have removed a or c."""
    text = open(f"{STDLIB}/email/feedparser.py", encoding="utf-8").read()
    cut = len(text) // 5
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    new.mkdir()
    (old / "a.py").write_text(text[: len(text) - cut])
    (old / "c.py").write_text(text[cut:])
    for path in sorted(glob.glob(f"{STDLIB}/json/*.py")):
        shutil.copy(path, old / os.path.basename(path))
    (new / "b.py").write_text(text)
    first = [{"name": "old", "uri": f"{old}/*.py", "format": "text"}]
    both = first + [{"name": "new", "uri": f"{new}/*.py", "format": "text"}]
    before = _run(_verified_manifest(tmp_path, "inc", first))
    after = _run(_verified_manifest(tmp_path, "inc", both))
    fresh = _run(_verified_manifest(tmp_path, "fresh", both))
    fz = after["fuzzy-dups"]["counters"]
    assert fz["duplicates/new"] == 1 and fz.get("duplicates/old", 0) == 0, fz
    assert after["consolidate-old"]["counters"]["files/computed"] == 0, after["consolidate-old"]["counters"]
    assert after["consolidate-old"]["counters"]["files/reused"] >= 1
    assert _dropped(after, "old") == _dropped(before, "old") == set()  # b joins a's or c's cluster, as a leaf
    assert len(_dropped(after, "new")) == 1
    # the marks as a fresh build writes them (its pair state knows one Jaccard more: b's later candidate,
    # which the incremental build leaves unverified once b's earliest one passed)
    assert _marks(after["fuzzy-dups"]["output"]) == _marks(fresh["fuzzy-dups"]["output"])
    assert after["fuzzy-dups"]["counters"]["pairs_unverified"] == 1
    for name in ("consolidate-old", "consolidate-new"):
        assert _comparable(after[name]["output"]) == _comparable(fresh[name]["output"]), name


def _removed_detail(steps: dict, source: str) -> dict[str, str]:
    import pyarrow.parquet as pq

    out = {}
    for path in glob.glob(os.path.join(steps[f"consolidate-{source}"]["output"], "outputs", "removed", "*.parquet")):
        out |= {r["id"]: r["detail"] for r in pq.read_table(path).to_pylist() if r["reason"] == "fuzzy"}
    return out


def test_a_removed_near_duplicate_names_its_parent_which_need_not_be_the_kept_root(tmp_path):
    """Real text, a chain: a and c are the first and last 80% of one stdlib file (their Jaccard about 0.6,
    under the 0.7 verified here), b the whole file (about 0.8 with each), in sources s1, s2, s3. a is
    kept; b goes for a and c for b, its only earlier near-duplicate, though the cluster's kept copy is a.
    The marks say so (parent_id, parent_source; none on a), consolidate's removed rows give source:id
    as the detail, and adding s3 to a build of s1 and s2 writes the marks a fresh build writes."""
    text = open(f"{STDLIB}/email/feedparser.py", encoding="utf-8").read()
    cut = len(text) // 5
    parts = {"s1": text[: len(text) - cut], "s2": text, "s3": text[cut:]}
    sources = []
    for name, body in parts.items():
        d = tmp_path / name
        d.mkdir()
        (d / f"{name}.py").write_text(body)
        shutil.copy(f"{STDLIB}/json/decoder.py", d / f"decoder_{name}.py")  # exact copies: not near-duplicates
        sources.append({"name": name, "uri": f"{d}/*.py", "format": "text"})

    _run(_verified_manifest(tmp_path, "inc", sources[:2]))
    after = _run(_verified_manifest(tmp_path, "inc", sources))
    fresh = _run(_verified_manifest(tmp_path, "fresh", sources))
    assert _marks(after["fuzzy-dups"]["output"]) == _marks(fresh["fuzzy-dups"]["output"])
    from datakit.core.documents import content_id

    a, b, c = (content_id(parts[s]) for s in ("s1", "s2", "s3"))
    rows = _marks_rows(fresh)
    assert {r["id"] for r in rows.values() if r["cluster_id"] == a} == {a, b, c}
    assert (rows[a]["is_canonical"], rows[a]["parent_id"], rows[a]["parent_source"]) == (True, None, None)
    assert (rows[b]["parent_id"], rows[b]["parent_source"]) == (a, "s1")
    assert (rows[c]["parent_id"], rows[c]["parent_source"]) == (b, "s2")
    assert _removed_detail(fresh, "s2") == {b: f"s1:{a}"} and _removed_detail(fresh, "s3") == {c: f"s2:{b}"}
    assert _removed_detail(after, "s3") == _removed_detail(fresh, "s3")
