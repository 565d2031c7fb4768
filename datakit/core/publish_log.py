"""What this process uploaded to an object store, with each file's digest, so that nothing a run wrote
is downloaded again only to be hashed.

Why: a step's outputs manifest (steps/verify.py) records every output's xxh3-128, and a token cache's
ledger its shards'. Hashing a file just written on a local disk is a page-cache read; on an object store
it was a download of everything the step wrote, by the driver alone, after the workers had uploaded it
(at 1 TB of documents, 1 TB more through one machine for every step). The bytes an upload sends are in
a local file or in memory while they are sent, so the uploader hashes them there (`fsio.commit`,
`fsio.atomic_write_bytes`) and notes the digest here.

How a note reaches the manifest: a task's notes (`take_since` the task's `mark`) travel with its result
to the driver (`shuffle.tasks.run_task`); the driver notes those of accepted attempts only
(`shuffle.executor`), so a failed attempt's uploads are never vouched for; the runner takes the notes
under a step's dir for its manifest (`take_under`). A manifest uses a note only while the file has the
noted size (`verify`); anything else is read, as before. Local files are not noted: their writers record
what they wrote with its stat (`fsio.Written`) and `steps/stamps.py` remembers what was read.

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
