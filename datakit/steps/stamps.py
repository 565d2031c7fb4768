"""Output files whose content was read and found right, remembered by stat: read a file again only when
it changed.

Why: a built step is trusted only when every output still hashes to what its outputs manifest recorded
(`verify`), a file taken from an earlier build is checked against that build's record (`reuse.take`),
and a build's manifest hashes every output, the taken ones included. On an incremental run that is
every byte of the corpus read two or three times to change one file. Git's index settles the same
question for a working tree: a file whose stat is the one it had when its content was read has that
content still.

So each time an output's xxh3-128 is read on a local disk, its stat (size, mtime_ns, inode, device) is
recorded with the digest under ``<prefix>/.datakit/verified/`` (the segment store of
`fingerprint.HashCache`: immutable JSONL segments, safe for concurrent runs; a cache, safe to delete).
Entries are keyed by device and inode, not path, so a hard link of a file (how reuse takes a file)
shares the entry of the file it links. A later check whose stat matches an entry uses its digest without
reading the file. The safety of the content check stands: any write to a file, even one that keeps its
size, changes its mtime (and a copy changes its inode), and then the file is read again. Only a stat
that was already in the past when the file was read is recorded (a file rewritten within the file
system's timestamp granularity could keep its stat): its mtime behind the file system's own clock, read
in the step dir before a step's manifest hashes its outputs (`fsio.clock_ns`), or older than
``RACY_WINDOW_S``. So the outputs a build hashes for its manifest are not read again by the next run's
check, unless written within the same clock tick as that hashing began; those are read once more later,
never trusted early. Object stores have no such stat: there every check reads.
"""
from __future__ import annotations

from datakit.core import fsio
from datakit.core.layout import VERIFIED_DIR

from .fingerprint import CacheEntry, FileStat, HashCache, hash_stamped, settled, stat_key

ALGO = "xxh3_128"


class Stamps:
    """The verified-stat record of one prefix: ``xxh3`` serves or reads a file's digest, ``vouches``
    says whether a stat is recorded as holding a digest, ``save`` publishes what this process learned
    (never called by a dry run, which writes nothing)."""

    def __init__(self, cache: HashCache | None) -> None:
        self.cache = cache
        self.new: list[CacheEntry] = []

    @classmethod
    def of_prefix(cls, root: str | None) -> "Stamps":
        """The record under a prefix root; an empty one that reads every file on an object store."""
        if root is None or not fsio.is_local(root):
            return cls(None)
        return cls(HashCache(fsio.join(fsio.local_path(root), VERIFIED_DIR), ALGO).load())

    def xxh3(self, path: str, clock_ns: int | None = None) -> str:
        """The file's xxh3-128: the recorded one when its stat is the recorded stat, else read (and
        recorded when its stat can vouch for it later; ``clock_ns``: the file system's clock read in the
        file's directory before this call, `fingerprint.hash_stamped`)."""
        if self.cache is None or not fsio.is_local(path):
            return fsio.xxh3_file(path)
        local = fsio.local_path(path)
        key, before = stat_key(local)
        known = self.cache.lookup(key, before)
        if known is not None:
            return known
        hashed = hash_stamped(local, before, key, fsio.xxh3_file, clock_ns)
        if hashed.entry is not None:
            self._remember(hashed.entry)
        return hashed.digest

    def _remember(self, entry: CacheEntry) -> None:
        self.new.append(entry)
        self.cache.entries[entry.path] = entry

    def adopt_written(self, path: str, mtime_ns: int | None, inode: int | None, digest: str,
                      clock_ns: int | None = None) -> bool:
        """Whether local ``path`` is still the file a writer published holding ``digest``: its stat now
        is the one the writer saw right after publishing (``mtime_ns``, ``inode``). Then its stat is
        recorded as holding that digest when it could vouch for it later (`fingerprint.settled`), as
        for a file read now."""
        if self.cache is None or mtime_ns is None or inode is None or not fsio.is_local(path):
            return False
        try:
            key, st = stat_key(fsio.local_path(path))
        except FileNotFoundError:
            return False
        if st.mtime_ns != mtime_ns or st.inode != inode:
            return False
        if settled(st, clock_ns):
            self._remember(CacheEntry(key, st, digest))
        return True

    def vouches(self, path: str, digest: str) -> FileStat | None:
        """The file's stat when the record says that stat holds ``digest`` (no read), else None."""
        if self.cache is None or not fsio.is_local(path):
            return None
        try:
            key, st = stat_key(fsio.local_path(path))
        except FileNotFoundError:
            return None
        return st if self.cache.lookup(key, st) == digest else None

    def save(self) -> None:
        if self.cache is not None and self.new:
            self.cache.save(self.new)
            self.new = []


def same_file(path: str, stat: FileStat) -> bool:
    """Whether a local file has exactly this stat (a hard link of a vouched-for file has it)."""
    try:
        return fsio.is_local(path) and stat_key(fsio.local_path(path))[1] == stat
    except FileNotFoundError:
        return False


__all__ = ["Stamps", "same_file", "ALGO"]
