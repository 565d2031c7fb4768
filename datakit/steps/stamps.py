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
never trusted early.

Object stores have no stat, but each object has a version that every write changes, given with its size
by the same listing the check makes anyway (`fsio.version_of`: S3's ETag, GCS's generation). There an
entry is keyed by the object's URL, its "stat" the size and that version (`object_stat`), and the record
lives in the store under the same ``<prefix>/.datakit/verified/``. Before, a run on an object store
downloaded every output of every built step to check it, so a one-file change to a built corpus cost a
download of the whole prefix. An object read to be checked is recorded only when a HEAD after the read
shows the version the listing gave (it was not replaced meanwhile); an object a step just uploaded is
recorded with the digest its uploader computed (`core/publish_log.py`) and the version the manifest's
listing shows, a listing made right after the step's own uploads, under its lease. A store whose
listing gives no version (none known to `fsio.version_of`) is read on every check, as before.
"""
from __future__ import annotations

import xxhash

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
        """The record under a prefix root (on a local disk or an object store); None: an empty one."""
        if root is None:
            return cls(None)
        where = fsio.local_path(root) if fsio.is_local(root) else root
        return cls(HashCache(fsio.join(where, VERIFIED_DIR), ALGO).load())

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

    def xxh3_listed(self, url: str, size: int, version: str | None) -> str:
        """An object's xxh3-128, given the size and version its listing shows: the recorded one when that
        (size, version) is recorded, else read (one download) and recorded when a HEAD after the read
        shows the same object."""
        if self.cache is None or version is None:
            return fsio.xxh3_file(url)
        stat = object_stat(size, version)
        known = self.cache.lookup(url, stat)
        if known is not None:
            return known
        digest = fsio.xxh3_file(url)
        after = fsio.info(url)
        if int(after.get("size", -1)) == size and fsio.version_of(after) == version:
            self._remember(CacheEntry(url, stat, digest))
        return digest

    def adopt_uploaded(self, url: str, size: int, version: str | None, digest: str) -> None:
        """Record that the object at ``url`` with this listed size and version holds ``digest``, which its
        uploader computed from the bytes it sent (module docstring)."""
        if self.cache is not None and version is not None:
            self._remember(CacheEntry(url, object_stat(size, version), digest))

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

    def vouches_object(self, url: str, size: int, version: str | None, digest: str) -> bool:
        """Whether the record says the object with this listed size and version holds ``digest``."""
        return self.cache is not None and version is not None \
            and self.cache.lookup(url, object_stat(size, version)) == digest

    def save(self) -> None:
        if self.cache is not None and self.new:
            self.cache.save(self.new)
            self.new = []


def object_stat(size: int, version: str) -> FileStat:
    """An object's "stat" in the record: its size, and its version where a local file's inode goes (as a
    63-bit hash; no mtime): the record's format is the local files' one."""
    return FileStat(size, 0, xxhash.xxh3_64_intdigest(version.encode()) >> 1)


def same_file(path: str, stat: FileStat) -> bool:
    """Whether a local file has exactly this stat (a hard link of a vouched-for file has it)."""
    try:
        return fsio.is_local(path) and stat_key(fsio.local_path(path))[1] == stat
    except FileNotFoundError:
        return False


__all__ = ["Stamps", "same_file", "ALGO"]
