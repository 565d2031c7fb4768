"""The one listing (datakit.core.listing): roots, relative names, hidden files and excludes, one rule each,
the same for the engine (`datakit.shuffle.list_files`) and the sources (`list_source_files`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from datakit.core.listing import common_root, is_hidden, list_files, pattern_root, relative_to, scan
from datakit.core.uris import SourceNotFound, list_source_files
from datakit.shuffle import list_files as engine_list_files


def _tree(root: Path, names: list[str]) -> None:
    for name in names:
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(name)


def test_roots_and_relative_names():
    assert pattern_root("data/*/x*.jsonl") == "data" and pattern_root("/d/*.py") == "/d" and pattern_root("*.py") == "/"
    assert common_root(["/a/b/c/x", "/a/b/d/y"]) == "/a/b" and common_root(["/a/x", "/b/y"]) == ""
    assert common_root(["s3://bk/p/x", "s3://bk/p/q/y"]) == "s3://bk/p" and common_root([]) == ""
    assert relative_to("/a/b/x", "/a") == "b/x" and relative_to("/a/x", "") == "a/x"
    assert relative_to("/z/x", "/a") == "x"  # outside the root: its basename


def test_one_pattern_names_files_under_its_fixed_prefix_and_skips_hidden(tmp_path: Path):
    _tree(tmp_path, ["d/a.jsonl", "d/sub/b.jsonl", "d/.git/c.jsonl", "d/_SUCCESS", "d/sub/_tmp/e.jsonl", "d/.f.jsonl"])
    found = scan(str(tmp_path / "d"))
    assert [f.rel for f in found.files] == ["a.jsonl", "sub/b.jsonl"] and found.hidden == 4
    assert [f.rel for f in list_files(f"{tmp_path}/d/**/*.jsonl")] == ["a.jsonl", "sub/b.jsonl"]
    assert [(f.path, f.size) for f in list_files(str(tmp_path / "d" / "a.jsonl"))] == [(str(tmp_path / "d/a.jsonl"), 9)]
    # the engine and the sources list the same files, by the same rule
    assert engine_list_files(str(tmp_path / "d")) == list_source_files(str(tmp_path / "d"))


def test_several_patterns_share_the_common_root_and_hidden_is_judged_below_the_shallower_root(tmp_path: Path):
    _tree(tmp_path, ["a/x.jsonl", "b/x.jsonl", "a/_stage/y.jsonl", "only/_tmp/z.jsonl", "only/_tmp/w.jsonl"])
    files = list_files([str(tmp_path / "a" / "*.jsonl"), str(tmp_path / "b" / "*.jsonl")])
    assert [f.rel for f in files] == ["a/x.jsonl", "b/x.jsonl"]  # same basename, no collision
    # a pattern that names an '_' folder below the common root: hidden, as its combined name shows
    assert [f.rel for f in list_files([f"{tmp_path}/a/*.jsonl", f"{tmp_path}/a/_stage/*.jsonl"])] == ["x.jsonl"]
    # files below a hidden folder the patterns do not name: hidden, though the common root is inside it
    assert list_files([f"{tmp_path}/only/*/z.jsonl", f"{tmp_path}/only/*/w.jsonl"]) == []
    assert engine_list_files([f"{tmp_path}/a/x.jsonl", f"{tmp_path}/a/x.jsonl"]) == list_files(f"{tmp_path}/a/x.jsonl")


def test_excludes_match_the_relative_name_the_basename_or_the_path(tmp_path: Path):
    _tree(tmp_path, ["d/a.jsonl", "d/sub/b.jsonl", "d/sub/c.json"])
    d = str(tmp_path / "d")
    assert [f.rel for f in engine_list_files(d, ["sub/*"])] == ["a.jsonl"]
    assert [f.rel for f in engine_list_files(d, ["*.json"])] == ["a.jsonl", "sub/b.jsonl"]
    assert [f.rel for f in engine_list_files(d, [f"{d}/a.*"])] == ["sub/b.jsonl", "sub/c.json"]
    found = scan(d, ["*"])
    assert found.files == [] and found.excluded == 3
    with pytest.raises(SourceNotFound, match=r"no data files left \(0 hidden \(\./_\) files skipped, 3 excluded\)"):
        list_source_files(d, exclude=["*"])


def test_a_pattern_that_names_nothing_is_missing_for_sources_and_empty_for_the_engine(tmp_path: Path):
    assert scan(str(tmp_path / "nope")).missing == [(str(tmp_path / "nope"), "no such file or directory")]
    assert list_files(f"{tmp_path}/*.x") == []
    with pytest.raises(SourceNotFound, match="no files match this pattern"):
        list_source_files(f"{tmp_path}/*.x")
    assert is_hidden("a/.b/c") and is_hidden("_x") and not is_hidden("../a/b")
