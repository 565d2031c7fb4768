"""What this process's writers published, with each file's digest, so that nothing a run wrote is read
back (or, on an object store, downloaded) only to be hashed.

Why: a step's outputs manifest (steps/verify.py) records every output's xxh3-128, and a token cache's
ledger its shards'. Hashing a file just written on a local disk is a page-cache read of everything the
step wrote; on an object store it was a download of it, by the driver alone, after the workers had
uploaded it (at 1 TB of documents, 1 TB more through one machine for every step). The bytes a writer
publishes are in memory or in a local file while it writes them, so it hashes them there and notes the
digest here: on an object store every upload (`fsio.commit`, `fsio.atomic_write_bytes`); on a local disk
the writers that hold their bytes whole (`fsio.write_noted`, `tokenize.cache.write_npy_atomic`) and the
token shards hashed where they were streamed (`tokenize.cache.shard_checksums`), with the file's stat.

How a note reaches the manifest, on every backend: a task's notes (`take_since` the task's `mark`)
travel with its result to the driver (`shuffle.tasks.run_task`); the driver notes those of accepted
attempts only (`shuffle.executor`), so a failed attempt's files are never vouched for; the runner takes
the notes under a step's dir for its manifest (`take_under`). A manifest uses a note only while the file
is still the one noted (locally the same stat, on an object store the same size: `verify`); anything else
is read, as before, and `steps/stamps.py` remembers what was read.

Notes are kept in the order they were made, and a later note of a path wins: a file rewritten later in
a build (normalize's cross-unit pass) is noted again, and its note arrives later, since the rewrite
runs after the task that wrote it first was accepted.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Written:
    """A file a writer published, and what it holds: its size and xxh3-128, computed from the bytes it
    wrote, and on a local disk its stat right after (mtime_ns, inode). A step's outputs manifest takes the
    digest instead of reading the file back while the file still has that stat (steps/verify.py): a
    step's documents were written, then read again whole to be hashed, and on an object store that read
    is a download of everything the step wrote."""

    path: str
    size: int
    xxh3_128: str
    mtime_ns: int | None = None
    inode: int | None = None


_lock = threading.Lock()
_seq = itertools.count()
_notes: list[tuple[int, Written]] = []


def note(w: Written) -> None:
    """Remember an upload this process made (or a task of it made: `note_all`)."""
    with _lock:
        _notes.append((next(_seq), w))


def note_all(ws: Iterable[Written]) -> None:
    for w in ws:
        note(w)


def mark() -> int:
    """A position: `take_since(mark())` later returns what was noted after this call."""
    with _lock:
        return next(_seq)


def take_since(position: int) -> list[Written]:
    """Remove and return the notes made after ``position`` (a task's uploads, in order)."""
    with _lock:
        keep = [(s, w) for s, w in _notes if s < position]
        out = [w for s, w in _notes if s >= position]
        _notes[:] = keep
    return out


def take_under(directory: str) -> list[Written]:
    """Remove and return the notes of files under ``directory`` (a step's dir), in order."""
    root = directory.rstrip("/") + "/"
    with _lock:
        out = [w for _, w in _notes if w.path.startswith(root)]
        _notes[:] = [(s, w) for s, w in _notes if not w.path.startswith(root)]
    return out


def latest(path: str) -> "Written | None":
    """The last note of ``path`` (a writer asking for the digest of what it just uploaded), or None."""
    with _lock:
        for _, w in reversed(_notes):
            if w.path == path:
                return w
    return None
