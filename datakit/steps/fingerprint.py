"""Input fingerprints by content: what a step's local input files hold, not when they were touched.

    fp = fingerprint_files(paths, cache_dir="out/.cache/hashes")
    Step("normalize-web", fn, {"input": fp.digest, ...}, inputs=fp.files)

Why content: a fingerprint of (name, size, mtime) changes on ``touch``, a fresh checkout or a copy that
keeps the bytes, and every identity downstream changes with it: the whole DAG rebuilds for nothing.
A content hash changes only when bytes change. Names are relative to the files' common parent dir, so
moving the tree (another machine, another home dir) keeps the digest.

Why a cache: hashing a corpus on every ``datakit run`` costs a full read of it. Each file's sha256 is
kept keyed by the file itself (device and inode), with its size and mtime_ns; a file whose stat is
unchanged is not read again, under any of its names: a corpus moved within its file system (``mv``), or
pointed at through a folder of hard links, is not read again either.
A touched file is read once more (same bytes, same sha256, same digest): that rehash is the price of
never trusting a stat alone for content.

Cache layout, safe for concurrent runs on a local disk or any fsspec prefix: ``<cache_dir>/`` holds
immutable JSONL segments ``sha256-<time_ns>-<random>.jsonl``. A call that hashed files publishes ONE
new segment atomically; it never appends to or rewrites a segment, so two runs cannot interleave bytes.
Readers merge all segments and skip lines that do not parse (a torn segment costs cache hits, never
correctness: an entry is used only when it matches the file's current stat). When segments pile up, a
writer merges what it read into one new segment, publishes it, and only then deletes the segments it
read; a concurrent reader that misses a deleted segment just rehashes those files once.

Racy files: file systems keep mtimes at some granularity (a timer tick, 1-2 s on some), so a file
rewritten within the same tick with the same size keeps its stat. A stat is therefore cached only when
every later write must change it (git's "racily clean" rule): when the file's mtime was already behind
the file system's own clock before it was read (a caller that knows that clock, `fsio.clock_ns` read in
the same directory before hashing, passes it: a step's outputs hashed right after they were written are
then cached unless written within the same tick), or else when it is more than ``RACY_WINDOW_S`` in the
past. A racy file is rehashed until its mtime is safely in the past.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import posixpath
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from datakit.core import fsio
from datakit.core.listing import common_root, relative_to

DIGEST_CHARS = 20
RACY_WINDOW_S = 2.0
MAX_SEGMENTS = 16          # more than this and the next writer merges them into one
HASH_THREADS = 8           # hashing is I/O bound: threads overlap reads (hashlib releases the GIL)
_POOL_MIN_FILES = 4        # below this a pool costs more than it saves
DIGEST_HEX = {"sha256": 64, "xxh3_128": 32}  # the digests a cache may hold, and their length in hex
log = logging.getLogger("datakit.steps.fingerprint")
_SEGMENTS: dict[tuple[str, str, str], list] = {}  # (cache dir, algo, segment name) -> its entries, read once


@dataclass(frozen=True)
class InputFingerprint:
    """Content fingerprint of a set of local files.

    digest: short hex over the sorted (relative name, sha256) pairs ("empty" for no files): put it in
            the step config, so content changes change the identity.
    files:  relative name -> sha256 hex: give it to ``Step(inputs=...)`` so a dry run can name the
            files that changed.
    hashed / cached: files read this call vs served from the cache (not part of equality).
    """

    digest: str
    files: dict[str, str] = field(hash=False)
    hashed: int = field(default=0, compare=False)
    cached: int = field(default=0, compare=False)


@dataclass(frozen=True)
class FileStat:
    """The part of a stat that says "same file, untouched": any change means read it again."""

    size: int
    mtime_ns: int
    inode: int

    @classmethod
    def of(cls, path: str) -> "FileStat":
        st = os.stat(path)
        return cls(st.st_size, st.st_mtime_ns, st.st_ino)


@dataclass(frozen=True)
class CacheEntry:
    """One cache line: the digest (``algo``: sha256 or xxh3_128) of the file ``path`` names while it had
    ``stat``. ``path`` is the cache's key: an absolute path for inputs; outputs are keyed by inode
    (`datakit.steps.stamps`), so that hard links of one file share one entry."""

    path: str
    stat: FileStat
    digest: str

    def to_line(self, algo: str = "sha256") -> str:
        return json.dumps({"path": self.path, "size": self.stat.size, "mtime_ns": self.stat.mtime_ns,
                           "inode": self.stat.inode, algo: self.digest}, sort_keys=True)

    @classmethod
    def from_line(cls, line: str, algo: str = "sha256") -> "CacheEntry | None":
        """The entry on a line, or None for anything else (torn write, foreign content)."""
        try:
            d = json.loads(line)
            entry = cls(d["path"], FileStat(int(d["size"]), int(d["mtime_ns"]), int(d["inode"])), d[algo])
        except (ValueError, TypeError, KeyError):
            return None
        ok = isinstance(entry.path, str) and isinstance(entry.digest, str) and len(entry.digest) == DIGEST_HEX[algo]
        return entry if ok else None


def digest_of(files: dict[str, str]) -> str:
    """The digest of a {relative name: sha256} map (what InputFingerprint.digest holds)."""
    if not files:
        return "empty"
    h = hashlib.sha256()
    for name, sha in sorted(files.items()):
        h.update(f"{name}\0{sha}\n".encode("utf-8"))
    return h.hexdigest()[:DIGEST_CHARS]


def relative_names(paths: list[str]) -> dict[str, str]:
    """absolute path -> name relative to the files' common parent dir (POSIX separators)."""
    if not paths:
        return {}
    root = common_root(paths)
    return {p: relative_to(p, root) for p in paths}


class HashCache:
    """The segment store described in the module docstring. ``load`` once, ``lookup``, ``save`` once.
    ``algo`` names the digest it keeps (and its segments: ``<algo>-<time_ns>-<random>.jsonl``)."""

    def __init__(self, cache_dir: str | None, algo: str = "sha256"):
        self.cache_dir, self.algo = cache_dir, algo
        self._segment = re.compile(rf"^{algo}-\d{{20}}-[0-9a-f]{{12}}\.jsonl$")
        self.entries: dict[str, CacheEntry] = {}   # path -> newest entry read
        self.segments: list[str] = []              # names of the segments read in full

    def load(self) -> "HashCache":
        if self.cache_dir is None:
            return self
        for name in self._segment_names():
            entries = self._segment_entries(name)
            if entries is None:
                continue
            self.segments.append(name)
            for entry in entries:
                self.entries[entry.path] = entry  # names sort by time: later segments win
        return self

    def _segment_entries(self, name: str) -> list[CacheEntry] | None:
        """A segment's entries, parsed once per process: a segment is never rewritten (its name is new
        each time), and a run loads the prefix's record once per rebuilt step (`reuse.load`), which on
        an object store was a download of the whole record each time."""
        key = (self.cache_dir, self.algo, name)
        if key not in _SEGMENTS:
            raw = self._read_segment(name)
            if raw is None:
                return None
            lines = raw.decode("utf-8", errors="replace").splitlines()
            _SEGMENTS[key] = [e for line in lines if (e := CacheEntry.from_line(line, self.algo)) is not None]
        return _SEGMENTS[key]

    def lookup(self, path: str, stat: FileStat) -> str | None:
        entry = self.entries.get(path)
        return entry.digest if entry is not None and entry.stat == stat else None

    def save(self, new: list[CacheEntry]) -> None:
        """Publish ``new`` as one segment (merging all segments read when there are too many).
        A cache that cannot be written is logged and skipped: it only saves time."""
        if self.cache_dir is None or not new:
            return
        merge = len(self.segments) + 1 > MAX_SEGMENTS
        entries = {**self.entries, **{e.path: e for e in new}} if merge else {e.path: e for e in new}
        data = "".join(e.to_line(self.algo) + "\n" for e in entries.values()).encode("utf-8")
        name = f"{self.algo}-{time.time_ns():020d}-{uuid.uuid4().hex[:12]}.jsonl"
        try:
            fsio.makedirs(self.cache_dir)
            fsio.atomic_write_bytes(posixpath.join(self.cache_dir, name), data)
            if merge:
                self._remove_segments(self.segments)
        except OSError as e:
            if fsio.store_failure(e) is not None:  # the store's own one line says what and where
                log.warning("could not write the file hash cache under %s: %s", self.cache_dir, e)
            else:
                log.warning("could not write the file hash cache under %s", self.cache_dir, exc_info=True)

    def _segment_names(self) -> list[str]:
        return [n for n in fsio.list_names(self.cache_dir) if self._segment.match(n)]

    def _read_segment(self, name: str) -> bytes | None:
        return fsio.read_if_exists(fsio.join(self.cache_dir, name))  # None: merged away by a concurrent writer

    def _remove_segments(self, names: list[str]) -> None:
        for name in names:
            fsio.remove(fsio.join(self.cache_dir, name))


@dataclass(frozen=True)
class Hashed:
    """A file's digest, and the cache entry that may vouch for it later."""

    digest: str
    entry: CacheEntry | None  # None: the file changed while hashed, or too recently to trust its stat


def hash_stamped(path: str, before: FileStat, key: str, digest: Callable[[str], str],
                 clock_ns: int | None = None) -> Hashed:
    """``digest(path)``, plus a cache entry under ``key`` when the file's stat can vouch for that content
    later: unchanged while it was read, and last modified before ``clock_ns`` (the file system's clock,
    `fsio.clock_ns`, read before ``before`` was taken: a later write gets an mtime at or after it) or
    longer than ``RACY_WINDOW_S`` ago."""
    value = digest(path)
    after = FileStat.of(path)
    return Hashed(value, CacheEntry(key, after, value) if after == before and settled(after, clock_ns) else None)


def settled(stat: FileStat, clock_ns: int | None = None) -> bool:
    """Whether any later write to a file with this stat must change it: its mtime behind ``clock_ns``
    (the file system's clock, read before the stat was taken) or older than ``RACY_WINDOW_S``."""
    behind_clock = clock_ns is not None and stat.mtime_ns < clock_ns
    return behind_clock or time.time_ns() - stat.mtime_ns > RACY_WINDOW_S * 1e9


def stat_key(path: str) -> tuple[str, FileStat]:
    """A local file's cache key (its device and inode, not its path: a hard link or a moved file is the
    same file, and a rewrite that replaces the file gets a new inode) and its stat."""
    st = os.stat(path)
    return f"inode:{st.st_dev}:{st.st_ino}", FileStat(st.st_size, st.st_mtime_ns, st.st_ino)


def _hash_one(path: str, key: str, before: FileStat) -> Hashed:
    return hash_stamped(path, before, key, fsio.sha256_file)


def _hash_all(todo: dict[str, tuple[str, FileStat]]) -> dict[str, Hashed]:
    paths = sorted(todo)
    if len(paths) < _POOL_MIN_FILES:
        return {p: _hash_one(p, *todo[p]) for p in paths}
    with ThreadPoolExecutor(max_workers=min(HASH_THREADS, len(paths))) as pool:
        return dict(zip(paths, pool.map(_hash_one, paths, *zip(*(todo[p] for p in paths)))))


def fingerprint_files(paths: list[str], cache_dir: str | None, *, save: bool = True) -> InputFingerprint:
    """Content fingerprint of local files (see the module docstring). ``cache_dir`` (local dir or
    fsspec URL; None: no cache) keeps each file's sha256 keyed by (device and inode, size, mtime_ns);
    ``save=False`` only reads it (a dry run writes nothing)."""
    absolute = sorted({os.path.abspath(fsio.local_path(str(p))) for p in paths})
    stats = {p: stat_key(p) for p in absolute}
    cache = HashCache(cache_dir).load()
    shas = {p: cache.lookup(*stats[p]) for p in absolute}
    fresh = _hash_all({p: stats[p] for p, sha in shas.items() if sha is None})
    if save:
        cache.save([h.entry for h in fresh.values() if h.entry is not None])
    shas.update({p: h.digest for p, h in fresh.items()})
    files = {name: shas[p] for p, name in relative_names(absolute).items()}
    return InputFingerprint(digest_of(files), dict(sorted(files.items())), hashed=len(fresh),
                            cached=len(absolute) - len(fresh))
