"""Tests for datakit.steps.fingerprint: content fingerprints of local inputs and their hash cache.

Real files, real cache dirs (local and memory://), real threads and processes racing on one cache.
Files are back-dated an hour after writing: a file modified within RACY_WINDOW_S is deliberately
never cached (see the module docstring), and these tests are about the cache working.
"""
from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import shutil
import threading
import time
import uuid
from pathlib import Path

import pytest

from datakit.steps import InputFingerprint, digest_of, fingerprint_files
from datakit.steps.fingerprint import MAX_SEGMENTS, CacheEntry, HashCache

pytestmark = pytest.mark.timeout(120)

HOUR_NS = 3600 * 10**9


def write(path: Path, data: bytes, age_ns: int = HOUR_NS) -> Path:
    """Write ``data`` and set the mtime ``age_ns`` in the past (old enough to be cached)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    t = time.time_ns() - age_ns
    os.utime(path, ns=(t, t))
    return path


def touch(path: Path) -> None:
    """Like ``touch``: a new mtime, same bytes (still in the past, so the new stat is cacheable)."""
    t = path.stat().st_mtime_ns + 10**9
    os.utime(path, ns=(t, t))


def tree(root: Path) -> list[str]:
    files = {"a.py": b"print('a')\n", "docs/b.txt": b"bee\n" * 1000, "docs/deep/c.txt": b""}
    return [str(write(root / name, data)) for name, data in files.items()]


def segments(cache: Path) -> list[Path]:
    return sorted(p for p in cache.iterdir() if p.name.startswith("sha256-"))


# ---------------------------------------------------------------- the fingerprint itself


def test_names_are_relative_and_hashes_are_sha256(tmp_path):
    paths = tree(tmp_path / "src")
    fp = fingerprint_files(paths, None)
    assert isinstance(fp, InputFingerprint)
    assert fp.files == {
        "a.py": hashlib.sha256(b"print('a')\n").hexdigest(),
        "docs/b.txt": hashlib.sha256(b"bee\n" * 1000).hexdigest(),
        "docs/deep/c.txt": hashlib.sha256(b"").hexdigest(),
    }
    assert len(fp.digest) == 20 and fp.digest == digest_of(fp.files)
    assert (fp.hashed, fp.cached) == (3, 0)
    assert fingerprint_files([], None) == InputFingerprint("empty", {})
    # order and duplicates of the given paths do not matter
    assert fingerprint_files(list(reversed(paths)) + paths[:1], None) == fp


def test_same_after_touch_and_after_copy_to_another_dir(tmp_path):
    paths = tree(tmp_path / "src")
    before = fingerprint_files(paths, None)
    for p in paths:
        touch(Path(p))
    assert fingerprint_files(paths, None) == before

    shutil.copytree(tmp_path / "src", tmp_path / "elsewhere" / "moved")
    copied = [p.replace(str(tmp_path / "src"), str(tmp_path / "elsewhere" / "moved")) for p in paths]
    after = fingerprint_files(copied, str(tmp_path / "cache"))
    assert after == before and after.files == before.files


def test_one_changed_byte_changes_the_digest_and_names_the_file(tmp_path):
    paths = tree(tmp_path / "src")
    cache = str(tmp_path / "cache")
    before = fingerprint_files(paths, cache)
    b = tmp_path / "src" / "docs" / "b.txt"
    data = bytearray(b.read_bytes())
    data[1234] ^= 1  # same size: only the content tells
    write(b, bytes(data), age_ns=HOUR_NS // 2)
    after = fingerprint_files(paths, cache)
    assert after.digest != before.digest
    assert {n for n in after.files if after.files[n] != before.files[n]} == {"docs/b.txt"}
    assert (after.hashed, after.cached) == (1, 2)


# ---------------------------------------------------------------- the cache


def test_cache_serves_unchanged_files_and_rehashes_a_touched_one(tmp_path):
    paths = tree(tmp_path / "src")
    cache = str(tmp_path / "cache")
    first = fingerprint_files(paths, cache)
    assert (first.hashed, first.cached) == (3, 0)
    second = fingerprint_files(paths, cache)
    assert (second.hashed, second.cached) == (0, 3) and second == first
    touch(Path(paths[0]))
    third = fingerprint_files(paths, cache)
    assert (third.hashed, third.cached) == (1, 2) and third == first
    fourth = fingerprint_files(paths, cache)
    assert (fourth.hashed, fourth.cached) == (0, 3)


def test_a_moved_tree_and_a_folder_of_hard_links_are_not_read_again_but_a_replaced_file_is(tmp_path):
    """The cache knows a file by device and inode: another name for the same file (a hard link, or the
    tree moved with ``mv``) is served from it; a file replaced by a new one (an editor's save: a new
    inode, even with the same bytes and stat times) is read again."""
    cache = str(tmp_path / "cache")
    first = fingerprint_files(tree(tmp_path / "src"), cache)
    links = tmp_path / "links"
    for p in (tmp_path / "src").rglob("*"):
        if p.is_file():
            (links / p.relative_to(tmp_path / "src")).parent.mkdir(parents=True, exist_ok=True)
            os.link(p, links / p.relative_to(tmp_path / "src"))
    linked = fingerprint_files([str(p) for p in links.rglob("*") if p.is_file()], cache)
    assert linked == first and (linked.hashed, linked.cached) == (0, 3)
    (tmp_path / "src").rename(tmp_path / "moved")
    moved = fingerprint_files([str(p) for p in (tmp_path / "moved").rglob("*") if p.is_file()], cache)
    assert moved == first and (moved.hashed, moved.cached) == (0, 3)
    victim = tmp_path / "moved" / "a.py"
    st = victim.stat()
    new = write(tmp_path / "moved" / "a.py.tmp", b"print('a')\n")  # written while the old one exists: a new inode
    os.utime(new, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(new, victim)
    assert victim.stat().st_ino != st.st_ino and victim.stat().st_mtime_ns == st.st_mtime_ns
    again = fingerprint_files([str(p) for p in (tmp_path / "moved").rglob("*") if p.is_file()], cache)
    assert again == first and (again.hashed, again.cached) == (1, 2)


def test_a_freshly_written_file_is_not_cached_until_its_mtime_settles(tmp_path):
    # Same size + same mtime tick after a quick rewrite would otherwise serve a stale hash.
    fresh = tmp_path / "src" / "new.txt"
    write(fresh, b"just written", age_ns=0)
    cache = str(tmp_path / "cache")
    assert fingerprint_files([str(fresh)], cache).hashed == 1
    assert fingerprint_files([str(fresh)], cache).hashed == 1
    t = time.time_ns() - HOUR_NS  # now it is old: hashed once more, then served from the cache
    os.utime(fresh, ns=(t, t))
    assert fingerprint_files([str(fresh)], cache).hashed == 1
    assert fingerprint_files([str(fresh)], cache).hashed == 0


def test_torn_and_foreign_lines_are_skipped(tmp_path):
    paths = tree(tmp_path / "src")
    cache = tmp_path / "cache"
    expected = fingerprint_files(paths, str(cache))
    (seg,) = segments(cache)
    with seg.open("ab") as f:
        f.write(b'not json\n[1, 2]\n{"path": "/x", "size": 1, "sha256": "ab"}\n')
        f.write(b'{"path": "/x", "size": 1, "mtime_ns": 2, "inode": 3, "sha2')  # a torn last line
    (cache / "notes.txt").write_text("not a segment")
    again = fingerprint_files(paths, str(cache))
    assert again == expected and (again.hashed, again.cached) == (0, 3)


def test_segments_are_merged_when_they_pile_up(tmp_path):
    cache = tmp_path / "cache"
    paths = []
    for i in range(MAX_SEGMENTS + 5):
        paths.append(str(write(tmp_path / "src" / f"f{i:02d}.txt", f"file {i}".encode())))
        assert fingerprint_files(paths, str(cache)).hashed == 1
    assert len(segments(cache)) <= MAX_SEGMENTS
    final = fingerprint_files(paths, str(cache))
    assert (final.hashed, final.cached) == (0, len(paths))


def test_cache_on_a_memory_fsspec_prefix(tmp_path):
    paths = tree(tmp_path / "src")
    cache = f"memory://dk-hash-cache-{uuid.uuid4().hex}/hashes"
    first = fingerprint_files(paths, cache)
    second = fingerprint_files(paths, cache)
    assert first == second and (second.hashed, second.cached) == (0, 3)
    assert len(HashCache(cache).load().entries) == 3


def _writer_round(cache: str, root: str, rounds: int) -> None:
    """One concurrent runner: each round adds a new file and fingerprints everything it has so far."""
    paths: list[str] = []
    for r in range(rounds):
        paths.append(str(write(Path(root) / f"r{r}.txt", f"{root} {r}".encode() * 100)))
        fp = fingerprint_files(paths, cache)
        assert fp.hashed >= 1


def _check_cache_complete(cache: Path, roots: list[Path], rounds: int) -> None:
    """Every segment line parses (no interleaved bytes) and every file is served from the cache."""
    for seg in segments(cache):
        lines = seg.read_text().splitlines()
        assert lines and all(CacheEntry.from_line(line) is not None for line in lines), seg.name
    assert len(segments(cache)) <= MAX_SEGMENTS + len(roots)
    everything = [str(root / f"r{r}.txt") for root in roots for r in range(rounds)]
    final = fingerprint_files(everything, str(cache))
    assert (final.hashed, final.cached) == (0, len(everything))


def test_concurrent_threads_leave_a_readable_complete_cache(tmp_path):
    cache, rounds = tmp_path / "cache", 5
    roots = [tmp_path / f"writer{i}" for i in range(8)]  # 8 x 5 segments: several merges race
    errors: list[BaseException] = []

    def run(root: Path) -> None:
        try:
            _writer_round(str(cache), str(root), rounds)
        except BaseException as e:  # noqa: BLE001 - surfaced below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(root,)) for root in roots]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    _check_cache_complete(cache, roots, rounds)


def test_concurrent_processes_leave_a_readable_complete_cache(tmp_path):
    cache, rounds = tmp_path / "cache", 8
    roots = [tmp_path / f"proc{i}" for i in range(3)]
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer_round, args=(str(cache), str(root), rounds)) for root in roots]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    _check_cache_complete(cache, roots, rounds)
