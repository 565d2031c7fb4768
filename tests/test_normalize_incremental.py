"""Normalize costs what changed (issue #27): one part per stable unit of input files, and a rebuild reads
only the units whose files changed; every other unit is taken from the earlier build. The whole step
dir then equals, byte for byte, a from-scratch build of the final files. Real text: the licenses in
/usr/share/common-licenses and the stdlib's email package."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import sysconfig
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from datakit import pipeline
from datakit.manifest import SourceSpec
from datakit.normalize import NormalizeConfig, normalize_source
from datakit.shuffle import ExecConfig, list_files
from datakit.steps import reuse

STDLIB = sysconfig.get_paths()["stdlib"]
TARGET = 40_000
MARKERS = (".status", "artifact.json")


def _source(root: Path) -> Path:
    """Several units: licenses and the email package, and a copy of email/utils.py sorted last (the
    same text in a later unit: a duplicate across units)."""
    src = root / "src"
    (src / "licenses").mkdir(parents=True)
    (src / "email").mkdir()
    (src / "zz").mkdir()
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if not os.path.islink(path):
            shutil.copy(path, src / "licenses" / (os.path.basename(path) + ".txt"))
    for path in sorted(glob.glob(f"{STDLIB}/email/*.py")):
        shutil.copy(path, src / "email" / os.path.basename(path))
    shutil.copy(src / "email" / "utils.py", src / "zz" / "utils_copy.py")
    return src


def _run(root: Path, prefix: str, src: Path, workers: int = 2, part_bytes: int = TARGET) -> dict:
    m = pipeline.manifest_from_dict({
        "prefix": str(root / prefix), "sources": [{"name": "code", "uri": f"{src}/**/*", "format": "text"}],
        "normalize": {"target_shard_bytes": TARGET, "part_bytes": part_bytes}, "dedup": {"fuzzy": False},
        "tokenize": {"vocab_size": 300}})
    s = pipeline.run(m, workers=workers, only=["normalize-code"])
    assert s.ok
    return next(x for x in s.to_dict()["steps"] if x["name"] == "normalize-code")


def _tree(step_dir: str) -> dict[str, str]:
    """Every file of a step dir but its run markers (the outputs manifest and reuse.json included)."""
    root = Path(step_dir)
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name not in MARKERS
            and not p.name.startswith(".lease")}


def _same_counters(a: dict, b: dict) -> None:
    strip = lambda c: {k: v for k, v in c.items() if not k.startswith("files/")}  # noqa: E731
    assert strip(a["counters"]) == strip(b["counters"])


def _rebuild_equals_fresh(tmp_path: Path, src: Path, step: dict, part_bytes: int = TARGET) -> None:
    fresh = _run(tmp_path, "fresh", src, workers=1, part_bytes=part_bytes)
    assert fresh["counters"]["files/reused"] == 0
    _same_counters(step, fresh)
    assert _tree(step["output"]) == _tree(fresh["output"])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("inc")
    src = _source(root)
    first = _run(root, "p", src)
    return root, src, first


def test_a_fresh_build_has_several_units_and_keeps_the_first_copy_across_units(built):
    _root, _src, first = built
    c = first["counters"]
    n = c["files/computed"]
    assert n >= 6 and c["files/reused"] == 0
    out = Path(first["output"])
    mains = sorted((out / "outputs" / "main").iterdir())
    assert len(mains) == n and all(p.name.startswith("unit-") for p in mains)
    kept = [r for p in mains for r in pq.read_table(p, columns=["source_id"]).column("source_id").to_pylist()]
    dups = [r for p in sorted((out / "outputs" / "dups").iterdir())
            for r in pq.read_table(p, columns=["source_id"]).column("source_id").to_pylist()]
    # email/utils.py sorts before zz/utils_copy.py: the first copy by file order is kept, in another unit
    assert "email/utils.py" in kept and "zz/utils_copy.py" not in kept and "zz/utils_copy.py" in dups
    assert c["dups"] >= 1 and c["records_out"] == len(kept)
    # the part that lost the copy was finished apart from its part as read, which is kept for reuse
    assert list((out / "units" / "main").iterdir())


def test_editing_one_byte_reads_its_unit_only_and_equals_a_fresh_build(built, tmp_path):
    root, src, first = built
    work = tmp_path / "src"
    shutil.copytree(src, work)
    shutil.copytree(Path(first["output"]).parent, tmp_path / "p", symlinks=True)
    victim = work / "licenses" / "GPL-2.txt"
    data = bytearray(victim.read_bytes())
    data[100] = ord("#") if data[100] != ord("#") else ord("%")  # one byte, same size
    victim.write_bytes(bytes(data))
    step = _run(tmp_path, "p", work)
    c = step["counters"]
    assert (c["files/computed"], c["files/reused"]) == (1, first["counters"]["files/computed"] - 1)
    # the part that loses the copy of email/utils.py was taken finished: a hard link to the earlier one
    lost = [p for p in (Path(step["output"]) / "units" / "main").iterdir()]
    assert lost
    for p in lost:
        final = Path(step["output"]) / "outputs" / "main" / p.name
        earlier = Path(first["output"]).name
        assert os.stat(final).st_nlink >= 2, f"{final} was rewritten, not taken ({earlier})"
    _rebuild_equals_fresh(tmp_path, work, step)


@pytest.mark.parametrize("change", ["add", "remove"])
def test_adding_or_removing_a_file_reads_few_units_and_equals_a_fresh_build(built, tmp_path, change):
    root, src, first = built
    work = tmp_path / "src"
    shutil.copytree(src, work)
    shutil.copytree(Path(first["output"]).parent, tmp_path / "p", symlinks=True)
    if change == "add":  # a copy of a license sorted first: now the first copy, so that license's unit loses it
        shutil.copy(work / "licenses" / "MPL-2.0.txt", work / "aaa_mpl.txt")
    else:
        (work / "email" / "charset.py").unlink()
    step = _run(tmp_path, "p", work)
    c = step["counters"]
    assert 1 <= c["files/computed"] <= 3, c
    assert c["files/reused"] >= first["counters"]["files/computed"] - 3
    _rebuild_equals_fresh(tmp_path, work, step)


def test_workers_and_backends_give_identical_bytes(built, tmp_path):
    """Units split into id-range parts (part_bytes below the units' size) included."""
    _root, src, _first = built
    spec = SourceSpec(name="code", uri="in", format="text")
    trees = []
    for i, ec in enumerate((ExecConfig(backend="local", max_workers=1), ExecConfig(backend="local", max_workers=2),
                            ExecConfig(backend="inline"))):
        out = tmp_path / f"o{i}"
        normalize_source(spec, files=list_files(f"{src}/**/*"), out_dir=str(out),
                         cfg=NormalizeConfig(target_shard_bytes=TARGET, part_bytes=TARGET // 3,
                                             input_shard_bytes=30_000, inline_bytes=0), exec_config=ec)
        trees.append(_tree(str(out)))
    assert trees[0] == trees[1] == trees[2] and len(trees[0]) > 10


def _ids(path: Path) -> list[str]:
    return pq.read_table(path, columns=["id"]).column("id").to_pylist()


def test_a_big_unit_is_split_into_id_ranges_and_an_edit_rereads_its_unit_only(built, tmp_path):
    """A unit of more than part_bytes is written as ceil(text / part_bytes) parts, each one id range
    (so a source of few files still gives downstream stages several tasks); an edit recomputes the
    parts of its own unit only, and the step equals a fresh build."""
    _root, src, _first = built
    small = TARGET // 3
    first = _run(tmp_path, "split", src, part_bytes=small)
    whole = _run(tmp_path, "whole", src)
    assert first["counters"]["files/computed"] > whole["counters"]["files/computed"]
    mains = sorted((Path(first["output"]) / "outputs" / "main").iterdir())
    ids = [_ids(p) for p in mains]
    assert sorted(i for part in ids for i in part) == sorted(
        i for p in (Path(whole["output"]) / "outputs" / "main").iterdir() for i in _ids(p))
    assert all(part == sorted(part) for part in ids)
    work = tmp_path / "src"
    shutil.copytree(src, work)
    victim = work / "licenses" / "GPL-2.txt"
    victim.write_bytes(victim.read_bytes().replace(b"GNU", b"GnU", 1))
    step = _run(tmp_path, "split", work, part_bytes=small)
    c = step["counters"]
    assert 2 <= c["files/computed"] <= 4 and c["files/reused"] >= first["counters"]["files/computed"] - 4, c
    _rebuild_equals_fresh(tmp_path, work, step, part_bytes=small)


def test_dedup_none_keeps_the_copies_across_units(built, tmp_path):
    _root, src, _first = built
    res = normalize_source(SourceSpec(name="code", uri="in", format="text", dedup="none"),
                           files=list_files(f"{src}/**/*"), out_dir=str(tmp_path / "o"),
                           cfg=NormalizeConfig(target_shard_bytes=TARGET), exec_config=ExecConfig(backend="inline"))
    assert res.counters["dups"] == 0
    kept = [r for f in res.main_files
            for r in pq.read_table(tmp_path / "o" / f, columns=["source_id"]).column("source_id").to_pylist()]
    assert "email/utils.py" in kept and "zz/utils_copy.py" in kept


def test_reuse_records_are_deterministic_and_name_every_unit(built):
    _root, _src, first = built
    out = first["output"]
    earlier = reuse.load(out)
    assert earlier is not None
    record = json.loads(Path(out, "reuse.json").read_bytes())
    assert list(record["keys"]) == sorted(record["keys"])
    mains = {f for u in earlier.keys.values() for f in u.files if f.startswith(("outputs/main/", "units/main/"))}
    names = {os.path.basename(f) for f in mains}
    assert names == {p.name for p in (Path(out) / "outputs" / "main").iterdir()}


def _paragraph_source(root: Path) -> Path:
    """One jsonl file per license, one document per paragraph: files that hold different numbers of
    documents, so a dry run's counts name which files changed."""
    src = root / "jsonl"
    src.mkdir()
    for path in sorted(glob.glob("/usr/share/common-licenses/*"))[:8]:
        paras = [p.strip() for p in Path(path).read_text().split("\n\n") if p.strip()]
        with open(src / (os.path.basename(path) + ".jsonl"), "w") as f:
            for i, p in enumerate(paras):
                f.write(json.dumps({"id": f"{os.path.basename(path)}-{i}", "text": p}) + "\n")
    return src


def test_dry_run_says_how_many_documents_the_changed_and_removed_files_held(tmp_path):
    """`run --dry-run` after an edit, a deletion and a new file: normalize's plan counts the documents
    the edited and the deleted file held in the earlier build (the new file is not read yet)."""
    from click.testing import CliRunner

    from datakit.cli import main

    src = _paragraph_source(tmp_path)
    m = {"prefix": str(tmp_path / "out"), "backend": "inline",
         "sources": [{"name": "lic", "uri": f"{src}/*.jsonl", "format": "jsonl", "id_field": "id"}],
         "normalize": {"target_shard_bytes": 20_000}, "dedup": {"exact": False, "fuzzy": False},
         "tokenize": {"vocab_size": 300}}
    assert pipeline.run(pipeline.manifest_from_dict(m), only=["normalize-lic"]).ok
    files = sorted(src.iterdir())
    lines = {p.name: len(p.read_text().splitlines()) for p in files}
    edited, removed = files[1], files[4]
    edited.write_text("".join(edited.read_text().splitlines(keepends=True)[:-1]))  # one paragraph fewer
    removed.unlink()
    (src / "zz-new.jsonl").write_text(json.dumps({"id": "new-0", "text": "A new file."}) + "\n")
    summary = pipeline.run(pipeline.manifest_from_dict(m), only=["normalize-lic"], dry_run=True)
    plan = next(s["plan"] for s in summary.to_dict()["steps"] if s["name"] == "normalize-lic")
    assert plan["files"] == {"new": 1, "changed": 1, "removed": 1, "total": len(files),
                             "changed_documents": lines[edited.name], "removed_documents": lines[removed.name]}
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps(m))
    out = CliRunner().invoke(main, ["run", str(manifest), "--dry-run", "--only", "normalize-lic"])
    assert (f"1 changed ({lines[edited.name]:,} documents), 1 removed ({lines[removed.name]:,} documents) of "
            f"{len(files)} files recomputed, + 1 new files not yet read") in out.output, out.output
