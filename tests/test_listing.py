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


# ------------------------------------------------------------------------------------------ symlinks


def _linked_tree(tmp_path: Path) -> Path:
    """A source folder with a file, a link to a secret outside it, a link to a file inside it, a link to
    a folder inside it, and a folder link that loops; the secret sits beside the source."""
    _tree(tmp_path, ["src/a.txt", "src/sub/b.txt", "secret/passwd.txt", "elsewhere/c.txt"])
    src = tmp_path / "src"
    (src / "leak.txt").symlink_to(tmp_path / "secret" / "passwd.txt")
    (src / "again.txt").symlink_to(src / "a.txt")  # a second name for a file: a file of its own (GPL -> GPL-3)
    (src / "alias").symlink_to(src / "sub", target_is_directory=True)  # a second name for a listed folder
    (src / "sub" / "up").symlink_to("..", target_is_directory=True)  # a loop
    return src


def test_symlinks_out_of_the_source_are_skipped_and_counted_unless_followed(tmp_path: Path):
    src = _linked_tree(tmp_path)
    found = scan(str(src))
    assert [f.rel for f in found.files] == ["a.txt", "again.txt", "sub/b.txt"]  # not alias/b.txt: sub/b.txt
    assert found.symlinks_outside == 1 and found.symlink_loops == [str(src / "sub" / "up")]
    assert "1 symlink outside the source skipped (follow_symlinks: true follows them)" in found.skipped_links()
    followed = scan(str(src), follow_symlinks=True)
    assert [(f.rel, f.size) for f in followed.files] == [("a.txt", 9), ("again.txt", 9), ("leak.txt", 17),
                                                          ("sub/b.txt", 13)]
    assert followed.symlinks_outside == 0 and followed.symlink_loops == [str(src / "sub" / "up")]
    # the engine's listing follows the same rule
    assert [f.rel for f in engine_list_files(str(src))] == ["a.txt", "again.txt", "sub/b.txt"]


def test_globs_judge_only_the_links_they_match(tmp_path: Path):
    src = _linked_tree(tmp_path)
    (src / "c.md").symlink_to(tmp_path / "elsewhere" / "c.txt")
    found = scan(f"{src}/*.txt")
    assert [f.rel for f in found.files] == ["a.txt", "again.txt"] and found.symlinks_outside == 1  # not c.md
    assert [f.rel for f in scan(f"{src}/*.md", follow_symlinks=True).files] == ["c.md"]
    # a link inside the root to a file the glob's own folder does not hold is read under the link's name
    (src / "b-link.txt").symlink_to(src / "sub" / "b.txt")
    assert [f.rel for f in list_files(f"{src}/*.txt")] == ["a.txt", "again.txt", "b-link.txt"]
    # ** walks into folder links inside the root, never round a loop, and lists what it reaches twice once
    found = scan(f"{src}/**/*.txt")
    assert [f.rel for f in found.files] == ["a.txt", "again.txt", "b-link.txt", "sub/b.txt"]
    assert found.symlink_loops == [str(src / "sub" / "up")]


def test_a_folder_link_is_walked_and_a_root_behind_a_link_is_judged_where_it_is(tmp_path: Path):
    _tree(tmp_path, ["real/data/x.txt", "shared/y.txt"])
    (tmp_path / "real" / "data" / "more").symlink_to(tmp_path / "shared", target_is_directory=True)
    (tmp_path / "linked").symlink_to(tmp_path / "real" / "data", target_is_directory=True)
    found = scan(str(tmp_path / "linked"))  # the root itself is a link: its files are inside it
    assert [f.rel for f in found.files] == ["x.txt"] and found.symlinks_outside == 1
    assert [f.rel for f in scan(str(tmp_path / "linked"), follow_symlinks=True).files] == ["more/y.txt", "x.txt"]
    # a file a pattern names itself is read wherever it points: the user named it
    (tmp_path / "named.txt").symlink_to(tmp_path / "shared" / "y.txt")
    assert [(f.rel, f.size) for f in list_files(str(tmp_path / "named.txt"))] == [("named.txt", 12)]


def test_a_loop_between_two_followed_folders_is_named_once_and_ends(tmp_path: Path):
    _tree(tmp_path, ["src/a.txt", "out1/b.txt", "out2/c.txt"])
    (tmp_path / "src" / "one").symlink_to(tmp_path / "out1", target_is_directory=True)
    (tmp_path / "out1" / "two").symlink_to(tmp_path / "out2", target_is_directory=True)
    (tmp_path / "out2" / "back").symlink_to(tmp_path / "out1", target_is_directory=True)
    found = scan(str(tmp_path / "src"), follow_symlinks=True)
    assert [f.rel for f in found.files] == ["a.txt", "one/b.txt", "one/two/c.txt"]
    assert found.symlink_loops == [str(tmp_path / "src" / "one" / "two" / "back")]


def test_a_source_left_with_only_skipped_links_says_so(tmp_path: Path):
    _tree(tmp_path, ["secret.txt"])
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "leak.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(SourceNotFound, match=r"no files under this directory \(1 symlink outside the source skipped"):
        list_source_files(str(tmp_path / "src"))
    (tmp_path / "src" / ".hidden-link").symlink_to(tmp_path / "secret.txt")  # hidden: counted as hidden only
    with pytest.raises(SourceNotFound, match=r"left \(1 hidden \(\./_\) files skipped, 0 excluded; 1 symlink outside"):
        list_source_files(str(tmp_path / "src"))
    assert [f.rel for f in list_source_files(str(tmp_path / "src"), follow_symlinks=True)] == ["leak.txt"]
    assert scan(str(tmp_path / "src")).hidden == 1


def test_file_links_that_loop_or_point_nowhere_are_named_never_listed(tmp_path: Path):
    """`a -> b -> a` and `self -> self` cannot be resolved (ELOOP), `gone -> missing` points nowhere: each
    is named in one line; listing them would fail later, on a stat, with a traceback."""
    _tree(tmp_path, ["src/a.txt"])
    src = tmp_path / "src"
    (src / "b.txt").symlink_to("c.txt")
    (src / "c.txt").symlink_to("b.txt")
    (src / "self.txt").symlink_to("self.txt")
    (src / "gone.txt").symlink_to(tmp_path / "missing.txt")
    (src / ".gone").symlink_to(tmp_path / "missing.txt")  # hidden: counted as hidden, not resolved
    for follow in (False, True):
        found = scan(str(src), follow_symlinks=follow)
        assert [f.rel for f in found.files] == ["a.txt"] and found.hidden == 1
        assert found.symlink_loops == [str(src / n) for n in ("b.txt", "c.txt", "self.txt")]
        assert found.symlinks_broken == [str(src / "gone.txt")] and found.symlinks_outside == 0
    assert found.skipped_links() == (f"3 symlink loops skipped ({src}/b.txt, {src}/c.txt, {src}/self.txt); "
                                     f"1 broken symlink skipped ({src}/gone.txt)")
    assert [f.rel for f in scan(f"{src}/a*").files] == ["a.txt"] and scan(f"{src}/a*").skipped_links() == ""


def test_content_sha256_of_a_file_and_of_a_directory_under_the_one_hidden_rule(tmp_path):
    """One content hash for every file input (step identities, a benchmark's recorded hash): a file's
    sha256; a directory's over its files' names and hashes: dot-files not counted, '_' names counted (a
    benchmark of Python files reads its `__init__.py`, so editing it must change the hash)."""
    import hashlib

    from datakit.core.listing import content_sha256

    d = tmp_path / "bench"
    (d / "sub").mkdir(parents=True)
    (d / "a.jsonl").write_text('{"q": "one"}\n')
    (d / "sub" / "b.jsonl").write_text('{"q": "two"}\n')
    assert content_sha256(str(d / "a.jsonl")) == hashlib.sha256(b'{"q": "one"}\n').hexdigest()
    before = content_sha256(str(d))
    (d / ".cache").write_text("editor state")
    assert content_sha256(str(d)) == before
    (d / "__init__.py").write_text("# read too")
    assert content_sha256(str(d)) != before
    (d / "__init__.py").unlink()
    (d / "sub" / "b.jsonl").rename(d / "sub" / "c.jsonl")
    renamed = content_sha256(str(d))
    assert renamed != before
    (d / "sub" / "c.jsonl").write_text('{"q": "three"}\n')
    assert content_sha256(str(d)) not in (before, renamed)
