"""core.fsio.link_or_copy puts a file's bytes at a new path as a hard link (how reuse takes an earlier
build's file), replacing what is there, making the folder when missing, and copying where the file
system cannot link."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from datakit.core.fsio import link_or_copy

TEXT = Path("/usr/share/common-licenses/GPL-3").read_bytes()


def test_a_link_into_a_missing_folder_is_the_same_file(tmp_path):
    src = tmp_path / "a.txt"
    src.write_bytes(TEXT)
    dst = tmp_path / "new" / "deeper" / "b.txt"
    link_or_copy(str(src), str(dst))
    assert dst.read_bytes() == TEXT and dst.stat().st_ino == src.stat().st_ino
    assert sorted(os.listdir(dst.parent)) == ["b.txt"]  # no temp name left behind


def test_an_existing_file_is_replaced_by_the_link(tmp_path):
    src = tmp_path / "a.txt"
    src.write_bytes(TEXT)
    dst = tmp_path / "b.txt"
    dst.write_bytes(b"an older output")
    link_or_copy(str(src), str(dst))
    assert dst.read_bytes() == TEXT and dst.stat().st_ino == src.stat().st_ino
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "b.txt"]


def test_a_missing_source_raises_and_leaves_nothing(tmp_path):
    with pytest.raises(FileNotFoundError):
        link_or_copy(str(tmp_path / "gone.txt"), str(tmp_path / "out" / "b.txt"))
    assert not (tmp_path / "out" / "b.txt").exists()


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm (a second file system) to cross")
def test_across_file_systems_the_bytes_are_copied(tmp_path):
    with tempfile.TemporaryDirectory(dir="/dev/shm") as other:
        if os.stat(other).st_dev == os.stat(tmp_path).st_dev:
            pytest.skip("/dev/shm is on the same file system here")
        src = Path(other) / "a.txt"
        src.write_bytes(TEXT)
        dst = tmp_path / "b.txt"
        link_or_copy(str(src), str(dst))
        assert dst.read_bytes() == TEXT and dst.stat().st_ino != src.stat().st_ino
