"""A persistent key -> document index kept across builds, so a corpus-wide dedup step can answer "who
else has this key?" for the documents that changed without reading the corpus again.

Why segments: a file's entries (key, file token, row) spread over every key partition, so an index kept
as one sorted table would be rewritten whole by any change. Instead an index is a list of immutable
*segments*, each the entries of a set of files, sorted by key within each of its partitions
(``route_keys(key, parts)``). A build takes the earlier build's segments as they are (hard links,
checked against their recorded hashes), adds one segment for its new files, and filters out entries of
files that are gone or changed (*dead* tokens) when it queries. When dead entries or segments pile up
(`needs_compaction`), the live entries are merged into one segment again.

A file token (`file_token`) names one file's exact content in one source, so an entry of an unchanged
file stays valid across builds and an edited file is a removed token plus a new one. Queries read only
the partitions their keys route to, by binary search on memory-mapped key columns where the index is
local (a remote index is read whole per partition touched).
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import xxhash

from datakit.core import fsio
from datakit.steps import reuse

from .hashing import U64, node_file, node_rank, node_row, route_keys

COLUMNS = ("key", "tok", "row")
MAX_SEGMENTS = 8        # more segments than this: compact (every query searches each one)
MAX_DEAD_SHARE = 0.5    # more dead entries than this share: compact
ENTRIES_PER_PART = 1 << 22  # a compacted segment's partitions: ~80 MB each
# A change to more than this share of the documents is built in full on the engine: the change is applied
# on the driver alone, which pays off for a new snapshot's files, not for half the corpus.
MAX_CHANGE_SHARE = 0.5


def change_too_big(old: dict[int, int], new: dict[int, int]) -> bool:
    """Whether the documents of removed files (``old``: token -> rows) and of new files (``new``) are
    more than MAX_CHANGE_SHARE of all documents either build has."""
    gone = sum(n for t, n in old.items() if t not in new)
    added = sum(n for t, n in new.items() if t not in old)
    every = sum(old.values()) + added
    return gone + added > MAX_CHANGE_SHARE * max(every, 1)


def file_token(source: str, name: str, content_hash: str) -> int:
    """The 64-bit token of one file's content in one source (a renamed or edited file is a new token)."""
    return xxhash.xxh3_64_intdigest(f"{source}\0{name}\0{content_hash}".encode())


@dataclass(frozen=True)
class Segment:
    """Entries of some files, in ``parts`` key partitions under ``rel`` (relative to the index's root);
    ``present`` lists the partitions that hold entries (the others are empty and have no files);
    ``entries`` counts them all, dead or alive."""

    rel: str
    parts: int
    present: tuple[int, ...]
    entries: int

    def to_dict(self) -> dict:
        return {"rel": self.rel, "parts": self.parts, "present": list(self.present), "entries": self.entries}

    @classmethod
    def from_dict(cls, d: dict) -> "Segment":
        return cls(str(d["rel"]), int(d["parts"]), tuple(int(p) for p in d["present"]), int(d["entries"]))


@dataclass
class State:
    """A dedup build's persistent state (exact's and fuzzy's): where it lives (``step_dir`` + ``folder``),
    its sources in rank order, its files (each dedup kind records its own per-file fields) and its index
    segments."""

    step_dir: str
    folder: str
    sources: list[str]
    files: list[Any] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    samples: dict[tuple[int, int], str] = field(default_factory=dict)  # fuzzy: largest.SampleTexts

    @property
    def root(self) -> str:
        """The state's folder, absolute (the root its index segments are relative to)."""
        return fsio.join(self.step_dir, self.folder)

    def path(self, rel: str) -> str:
        return fsio.join(self.root, rel)


def part_rel(seg_rel: str, part: int, parts: int, column: str) -> str:
    return f"{seg_rel}/p{part:05d}-of-{parts:05d}.{column}.npy"


def save_array(path: str, arr: np.ndarray) -> None:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(arr), allow_pickle=False)
    fsio.atomic_write_bytes(path, buf.getvalue())


def load_array(path: str, mmap: bool = False) -> np.ndarray:
    """An .npy array; memory-mapped when asked and the file is local (a query touches a few pages)."""
    if mmap and fsio.is_local(path):
        return np.load(fsio.local_path(path), mmap_mode="r", allow_pickle=False)
    return np.load(io.BytesIO(fsio.read_bytes(path)), allow_pickle=False)


@dataclass(frozen=True)
class IndexSink:
    """Where a full build's shuffle writes its partitions of an index: one segment (``seg_rel`` under
    ``root``, the state folder, absolute) with the shuffle's ``parts`` partitions. ``tokens[gidx]`` is
    each input file's token; ``bases`` maps a node's rank to its first gidx."""

    root: str
    seg_rel: str
    parts: int
    tokens: np.ndarray
    bases: np.ndarray

    def write(self, part: int, key: np.ndarray, node: np.ndarray) -> None:
        gidx = self.bases[node_rank(node)] + node_file(node)
        write_part(self.root, self.seg_rel, part, self.parts, key, self.tokens[gidx], node_row(node))


def write_part(root: str, seg_rel: str, part: int, parts: int, key: np.ndarray, tok: np.ndarray,
               row: np.ndarray) -> None:
    """One partition of a segment, sorted by key (then token, row: the same bytes however it was made)."""
    order = np.lexsort((row, tok, key))
    for column, values, dtype in (("key", key, U64), ("tok", tok, U64), ("row", row, np.int64)):
        save_array(fsio.join(root, part_rel(seg_rel, part, parts, column)),
                   np.asarray(values, dtype=dtype)[order])


def write_segment(root: str, seg_rel: str, key: np.ndarray, tok: np.ndarray, row: np.ndarray,
                  parts: int = 1) -> Segment:
    """A whole segment from its entries, in ``parts`` partitions."""
    key = np.asarray(key, dtype=U64)
    route = route_keys(key, parts) if parts > 1 else np.zeros(len(key), np.int64)
    present = []
    for p in np.unique(route).tolist():
        mine = route == p
        write_part(root, seg_rel, p, parts, key[mine], np.asarray(tok)[mine], np.asarray(row)[mine])
        present.append(p)
    return Segment(seg_rel, parts, tuple(present), len(key))


def present(root: str, seg_rel: str) -> tuple[int, ...]:
    """The partitions of a segment that are on disk (one listing)."""
    names = fsio.list_names(fsio.join(root, seg_rel))
    return tuple(sorted({int(n[1:6]) for n in names if n.startswith("p") and n.endswith(".key.npy")}))


Files = dict[int, tuple[np.ndarray, np.ndarray]]  # token -> (rows, keys: rows x k), a file's entries


def entries_of(per_file: Files) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (key, tok, row) entries of these files, by token, then row, then key column."""
    toks = sorted(per_file)
    if not toks:
        return np.empty(0, U64), np.empty(0, U64), np.empty(0, np.int64)
    key = np.concatenate([np.asarray(per_file[t][1], U64).reshape(-1) for t in toks])
    tok = np.concatenate([np.full(np.asarray(per_file[t][1]).size, t, U64) for t in toks])
    row = np.concatenate([np.repeat(np.asarray(per_file[t][0], np.int64), np.asarray(per_file[t][1]).reshape(
        len(per_file[t][0]), -1).shape[1]) for t in toks])
    return key, tok, row


def next_segments(old_root: str, new_root: str, old: Sequence[Segment], new_files: Files, live: np.ndarray,
                  dead_entries: int) -> list[Segment]:
    """A later build's index: the earlier build's segments (linked from ``old_root``) and one segment of
    the new files' entries; or, when dead entries or segments pile up (`needs_compaction`), one segment of
    every live entry. Segment names come from the tokens they hold, so the same change names them alike."""
    key, tok, row = entries_of(new_files)
    if needs_compaction([*old, *([Segment("new", 1, (), len(key))] if new_files else [])], dead_entries):
        k, t, r = scan(old_root, old, live)
        key, tok, row = np.concatenate([k, key]), np.concatenate([t, tok]), np.concatenate([r, row])
        rel = f"seg-{reuse.content_key([f'{int(x):016x}' for x in live.tolist()])[:16]}"
        return [write_segment(new_root, rel, key, tok, row, max(1, -(-len(key) // ENTRIES_PER_PART)))]
    for rel in files_of(old):
        fsio.link_or_copy(fsio.join(old_root, rel), fsio.join(new_root, rel))
    segments = list(old)
    if new_files:
        rel = f"seg-{reuse.content_key([f'{t:016x}' for t in sorted(new_files)])[:16]}"
        segments.append(write_segment(new_root, rel, key, tok, row))
    return segments


def complete(root: str, seg_rel: str, parts: int, per_file: Files) -> tuple[int, ...]:
    """Write the partitions of a full build's segment that are missing, from every file's entries
    (``per_file``: token -> (rows, keys (rows x k))), with the bytes the build's shuffle writes; the
    partitions present. Why: the engine resumes a stage from its checkpoint after a killed driver, and
    then the stage's tasks do not run again, so what they wrote on the side into a rebuilt step dir is
    missing (a state the next build would refuse, and bytes another run of the same inputs has)."""
    key, tok, row = entries_of(per_file)
    route = route_keys(key, parts) if parts > 1 else np.zeros(len(key), np.int64)
    have = set(present(root, seg_rel))
    want = np.unique(route).tolist()
    for p in want:
        if p not in have:
            mine = route == p
            write_part(root, seg_rel, p, parts, key[mine], tok[mine], row[mine])
    return tuple(want)


def query(root: str, segments: Sequence[Segment], keys: np.ndarray, live: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every entry (key, tok, row) whose key is in ``keys`` and whose token is in ``live`` (sorted
    unique uint64 tokens), over all segments; in no particular order."""
    keys = np.unique(np.asarray(keys, dtype=U64))
    out_k, out_t, out_r = [], [], []
    for seg in segments:
        route = route_keys(keys, seg.parts) if seg.parts > 1 else np.zeros(len(keys), np.int64)
        for p in seg.present:
            q = keys[route == p]
            if not len(q):
                continue
            col = load_array(fsio.join(root, part_rel(seg.rel, p, seg.parts, "key")), mmap=True)
            lo, hi = np.searchsorted(col, q, "left"), np.searchsorted(col, q, "right")
            hit = hi > lo
            if not hit.any():
                continue
            idx = _ranges(lo[hit], hi[hit])
            tok = load_array(fsio.join(root, part_rel(seg.rel, p, seg.parts, "tok")), mmap=True)[idx]
            row = load_array(fsio.join(root, part_rel(seg.rel, p, seg.parts, "row")), mmap=True)[idx]
            alive = _member(tok, live)
            out_k.append(np.asarray(col[idx])[alive])
            out_t.append(np.asarray(tok)[alive])
            out_r.append(np.asarray(row)[alive])
    if not out_k:
        return np.empty(0, U64), np.empty(0, U64), np.empty(0, np.int64)
    return np.concatenate(out_k), np.concatenate(out_t), np.concatenate(out_r)


def scan(root: str, segments: Sequence[Segment], live: np.ndarray
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every live entry of every segment (for compaction)."""
    out = [[], [], []]
    for seg in segments:
        for p in seg.present:
            cols = [load_array(fsio.join(root, part_rel(seg.rel, p, seg.parts, c))) for c in COLUMNS]
            alive = _member(cols[1], live)
            for acc, c in zip(out, cols):
                acc.append(c[alive])
    if not out[0]:
        return np.empty(0, U64), np.empty(0, U64), np.empty(0, np.int64)
    return tuple(np.concatenate(acc) for acc in out)  # type: ignore[return-value]


def files_of(segments: Sequence[Segment]) -> list[str]:
    """Every file of these segments, relative to the step dir."""
    return [part_rel(s.rel, p, s.parts, c) for s in segments for p in s.present for c in COLUMNS]


def needs_compaction(segments: Sequence[Segment], dead_entries: int) -> bool:
    total = sum(s.entries for s in segments)
    return len(segments) > MAX_SEGMENTS or (total > 0 and dead_entries > MAX_DEAD_SHARE * total)


def _member(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """values[i] in sorted_set, by binary search."""
    if not len(sorted_set):
        return np.zeros(len(values), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_set, values), len(sorted_set) - 1)
    return sorted_set[pos] == values


def _ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The concatenation of arange(lo[i], hi[i]) for all i, without a Python loop."""
    lengths = hi - lo
    total = int(lengths.sum())
    starts = np.repeat(lo - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    return starts + np.arange(total, dtype=np.int64)
