"""Per-file reuse across builds of one step (datakit/steps/reuse.py) on real text: a rebuilt step takes
the files whose inputs did not change from its earlier build, and its outputs are byte for byte those of
a from-scratch build; a damaged earlier file is never taken; --force takes nothing."""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import sysconfig

from datakit import pipeline

from datakit.steps import reuse

STDLIB = sysconfig.get_paths()["stdlib"]


def _sources(tmp_path, extra: bool) -> list[dict]:
    lic = tmp_path / "licenses"
    if not lic.exists():
        lic.mkdir()
        for name in ("Apache-2.0", "GPL-3", "LGPL-2.1", "MPL-2.0", "Artistic"):
            shutil.copy(f"/usr/share/common-licenses/{name}", lic / f"{name}.txt")
    sources = [{"name": "licenses", "uri": f"{lic}/*.txt", "format": "text"},
               {"name": "json", "uri": f"{STDLIB}/json/*.py", "format": "text"}]
    if extra:  # one more source: a new license copy (an exact duplicate) and the stdlib's email package
        more = tmp_path / "more"
        more.mkdir(exist_ok=True)
        shutil.copy("/usr/share/common-licenses/GPL-3", more / "gpl.txt")
        for path in sorted(glob.glob(f"{STDLIB}/email/*.py"))[:12]:
            shutil.copy(path, more / os.path.basename(path))
        sources.append({"name": "more", "uri": f"{more}/*", "format": "text"})
    return sources


def _manifest(tmp_path, prefix: str, extra: bool):
    return pipeline.manifest_from_dict({
        "prefix": str(tmp_path / prefix), "sources": _sources(tmp_path, extra),
        "normalize": {"target_shard_bytes": 20_000},
        "dedup": {"fuzzy": False}, "pii": {}, "tokenize": {"vocab_size": 300}})


def _until_tokenize(m) -> list[str]:
    return [s.name for s in pipeline.build_steps(m) if s.stage not in ("tokenizer", "tokenize", "train")]


def _outputs(summary, step: str) -> dict[str, str]:
    d = _step(summary, step)["output"]
    out = {}
    for path in sorted(glob.glob(os.path.join(d, "outputs", "**", "*.parquet"), recursive=True)):
        with open(path, "rb") as f:
            out[os.path.relpath(path, d)] = hashlib.sha256(f.read()).hexdigest()
    assert out, d
    return out


def _step(summary, name: str) -> dict:
    return next(s for s in summary.to_dict()["steps"] if s["name"] == name)


def test_adding_a_source_reuses_the_old_sources_files_and_equals_a_rebuild(tmp_path):
    before = _manifest(tmp_path, "inc", extra=False)
    assert pipeline.run(before, workers=2, only=_until_tokenize(before)).ok
    after = _manifest(tmp_path, "inc", extra=True)
    s = pipeline.run(after, workers=2, only=_until_tokenize(after))
    assert s.ok
    # consolidate and pii of the old sources have new identities (the exact step saw a new source), but
    # their files are unchanged: every one is taken, none computed.
    for name in ("consolidate-json", "pii-json"):
        step = _step(s, name)
        assert step["status"] == "succeeded"
        assert step["counters"]["files/computed"] == 0 and step["counters"]["files/reused"] > 1, step
    # The licenses source lost nothing either (the new GPL copy is the duplicate: later source).
    assert _step(s, "pii-licenses")["counters"]["files/computed"] == 0
    fresh = _manifest(tmp_path, "fresh", extra=True)
    f = pipeline.run(fresh, workers=1, only=_until_tokenize(fresh))
    assert f.ok
    for name in ("consolidate-json", "consolidate-licenses", "consolidate-more", "pii-json", "pii-licenses",
                 "pii-more"):
        assert _outputs(s, name) == _outputs(f, name), name


def test_a_damaged_earlier_file_is_computed_not_taken(tmp_path):
    m = _manifest(tmp_path, "p", extra=False)
    assert pipeline.run(m, workers=1, only=_until_tokenize(m)).ok
    [old] = glob.glob(str(tmp_path / "p" / "pii-json-*"))
    earlier = reuse.load(old)
    key, unit = next(iter(earlier.keys.items()))
    victim = os.path.join(old, unit.files[0])
    with open(victim, "r+b") as f:  # same size, one byte changed
        f.seek(10)
        b = f.read(1)
        f.seek(10)
        f.write(bytes([b[0] ^ 0xFF]))
    dst = tmp_path / "new"
    assert reuse.take(earlier, key, str(dst)) is None
    assert not any(p.is_file() for p in dst.rglob("*"))  # nothing half-taken is left
    assert reuse.take(earlier, "no-such-key", str(dst)) is None
    assert reuse.take(None, key, str(dst)) is None


def test_force_takes_nothing(tmp_path):
    before = _manifest(tmp_path, "f", extra=False)
    assert pipeline.run(before, workers=1, only=_until_tokenize(before)).ok
    after = _manifest(tmp_path, "f", extra=True)
    s = pipeline.run(after, workers=1, only=_until_tokenize(after), force=["pii-json"])
    assert _step(s, "pii-json")["counters"]["files/reused"] == 0
    assert _step(s, "consolidate-json")["counters"]["files/computed"] == 0


def _copies(tmp_path, name: str, licenses: tuple[str, ...]) -> dict:
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    for lic in licenses:
        shutil.copy(f"/usr/share/common-licenses/{lic}", d / f"{lic}.txt")
    return {"name": name, "uri": f"{d}/*.txt", "format": "text"}


def _priority_manifest(tmp_path, prefix: str, first: bool):
    sources = [_copies(tmp_path, "copies", ("GPL-3", "Apache-2.0")), *_sources(tmp_path, extra=False)]
    if first:  # a new source before the others: it now holds the surviving GPL-3 copy
        sources.insert(0, _copies(tmp_path, "first", ("GPL-3",)))
    return pipeline.manifest_from_dict({
        "prefix": str(tmp_path / prefix), "sources": sources, "normalize": {"target_shard_bytes": 20_000},
        "dedup": {"fuzzy": False}, "tokenize": {"vocab_size": 300}})


def _removed_details(summary, step: str) -> dict[str, str]:
    import pyarrow.parquet as pq

    d = _step(summary, step)["output"]
    out = {}
    for path in glob.glob(os.path.join(d, "outputs", "removed", "*.parquet")):
        t = pq.read_table(path)
        out.update(zip(t.column("id").to_pylist(), t.column("detail").to_pylist()))
    return out


def test_a_mark_whose_reason_alone_changed_takes_the_documents_and_rewrites_the_removed_file(tmp_path):
    """A new first source holding a copy the licenses source had already lost to `copies`: the licenses
    documents stay as they were (taken, not recomputed) while their removed listing now names `first`
    as the surviving copy's source, byte for byte what a from-scratch build writes."""
    before = _priority_manifest(tmp_path, "inc", first=False)
    b = pipeline.run(before, workers=2, only=_until_tokenize(before))
    assert b.ok
    assert sorted(_removed_details(b, "consolidate-licenses").values()) == ["copies", "copies"]
    after = _priority_manifest(tmp_path, "inc", first=True)
    s = pipeline.run(after, workers=2, only=_until_tokenize(after))
    assert s.ok
    assert sorted(_removed_details(s, "consolidate-licenses").values()) == ["copies", "first"]
    step = _step(s, "consolidate-licenses")
    assert step["counters"]["files/computed"] == 0 and step["counters"]["files/reused"] > 1, step
    assert _step(s, "consolidate-copies")["counters"]["files/computed"] >= 1  # its GPL-3 copy now goes
    fresh = _priority_manifest(tmp_path, "fresh", first=True)
    f = pipeline.run(fresh, workers=1, only=_until_tokenize(fresh))
    assert f.ok
    for name in ("consolidate-first", "consolidate-copies", "consolidate-licenses", "consolidate-json"):
        assert _outputs(s, name) == _outputs(f, name), name
    assert _step(s, "consolidate-licenses")["counters"] == _step(f, "consolidate-licenses")["counters"] | {
        "files/reused": step["counters"]["files/reused"], "files/computed": 0}
