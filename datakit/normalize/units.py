"""Units: the stable pieces a source's files are cut into; each unit is normalized into one output part.

Why units: a change must cost what changed. When output parts were id-hash partitions, every input
file fed every part, so one edited file rewrote all of them and nothing downstream could be reused.
Now a part holds the documents of one *unit*: a run of consecutive files of the source's sorted file
list (or, for a big parquet file, a range of its row groups). An unchanged unit reads to the same part,
under the same name, and a rebuild takes it from the earlier build instead of reading it.

The rule (`plan_units`), a pure function of the files' relative names and sizes and
``target_shard_bytes``:

- every file's text is estimated from its size (`EXPANSION`: compressed inputs count several times
  their size), the same estimate the shard count used to come from;
- a unit ends *after* a file chosen by its name: one whose xxh3-64 of the relative name falls below
  ``2**64 * BOUNDARY_SHARE * c / target`` where ``c`` is the file's estimated text rounded down to a
  power of two. So a file ends a unit with a probability proportional to its size, and units hold
  about ``target / BOUNDARY_SHARE`` to ``target`` of text whether the source has ten big files or a
  million small ones; and the choice does not move when other files change, nor when the file's own
  size changes within its power of two (an edit of a few bytes);
- a unit also ends *before* a file that would take it over ``target`` (the cap; a single bigger file
  is a unit of its own);
- a parquet file of more than ``target`` is cut into row-group ranges of at most ``target`` each
  (estimated from the footer), every range a unit of its own.

So adding, removing or editing one file changes its own unit only, plus, when the cap cut a unit
after it, the units up to the next boundary chosen by name. A unit is named by its first member
(`unit_name`: its relative name and first row group), never by its position, so an unchanged unit
keeps its name when another is inserted before it.

A unit is written as ``k = ceil(text / part_bytes)`` parts (`part_count`), each the documents whose id
falls in one k-th of the id space (`part_of`): the ids are content hashes, so the parts are even, and
every per-file stage downstream gets k tasks where it used to get one: a source of two files, or of one
huge file, no longer runs on one core. ``k`` depends on the unit's estimated text only, never on the
worker count, and a part is named by its unit's first member and ``j/k`` (`part_names`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import xxhash

from datakit.core.layout import unit_part_name
from datakit.sources.readers import FileRef

# Text bytes per stored byte, by suffix: compressed inputs hold several times their size in text. An
# estimate by name only (no read), so the units are known before any task runs and are the same on
# every machine and for every worker count.
EXPANSION = {".gz": 4, ".zst": 4, ".zstd": 4, ".bz2": 4, ".xz": 4, ".lz4": 3, ".parquet": 3}
# A unit ends after a file chosen by name with probability BOUNDARY_SHARE * size / target: units then
# hold about target / BOUNDARY_SHARE of text on average before the cap at target.
BOUNDARY_SHARE = 2
_SPACE = 1 << 64


@dataclass(frozen=True)
class Piece:
    """One thing to place in a unit: a file (or a parquet row-group range) and its estimated text.
    ``alone``: a range of a big parquet file, always a unit of its own."""

    ref: FileRef
    text_bytes: int
    alone: bool = False


@dataclass(frozen=True)
class Unit:
    """A run of consecutive pieces of one source, normalized into ``len(names)`` parts (id ranges)."""

    names: tuple[str, ...]
    refs: tuple[FileRef, ...]
    text_bytes: int

    @property
    def parts(self) -> int:
        return len(self.names)

    def label(self) -> str:
        first = self.refs[0]
        if len(self.refs) == 1:
            rg = first.row_groups
            return first.rel + (f" row groups {rg[0]}..{rg[1] - 1}" if rg and rg[0] else "")
        return f"{first.rel} .. {self.refs[-1].rel} ({len(self.refs)} files)"


def estimated_text(path: str, size: int) -> int:
    """Text bytes a file of ``size`` stored bytes is expected to hold (by its suffix)."""
    return size * EXPANSION.get(os.path.splitext(path)[1].lower(), 1)


def unit_name(ref: FileRef) -> str:
    """The part name of the unit that starts with ``ref``: its relative name and first row group."""
    start = ref.row_groups[0] if ref.row_groups else 0
    return unit_part_name(xxhash.xxh3_64_hexdigest(f"{ref.rel}\0{start}".encode()))


def part_count(text_bytes: int, part_bytes: int) -> int:
    """How many id-range parts a unit of ``text_bytes`` estimated text is written as."""
    return max(1, -(-text_bytes // part_bytes))


def part_names(ref: FileRef, k: int) -> tuple[str, ...]:
    """The names of the ``k`` parts of the unit that starts with ``ref`` (one part: `unit_name`)."""
    if k == 1:
        return (unit_name(ref),)
    start = ref.row_groups[0] if ref.row_groups else 0
    return tuple(unit_part_name(xxhash.xxh3_64_hexdigest(f"{ref.rel}\0{start}\0{j}/{k}".encode()))
                 for j in range(k))


def part_of(doc_id: str, k: int) -> int:
    """Which of a unit's ``k`` parts holds the document ``doc_id`` (32 hex digits): its k-th of the id
    space, so each part is a contiguous range of the unit's id order."""
    return (int(doc_id[:16], 16) * k) >> 64 if k > 1 else 0


def ends_unit(rel: str, text_bytes: int, target: int) -> bool:
    """Whether the file named ``rel`` ends its unit (see the module doc): by name and size class."""
    if text_bytes <= 0:
        return False
    size_class = 1 << (text_bytes.bit_length() - 1)
    return xxhash.xxh3_64_intdigest(rel.encode()) < min(_SPACE, _SPACE * BOUNDARY_SHARE * size_class // target)


def _unit(pieces: list[Piece], part_bytes: int) -> Unit:
    text = sum(p.text_bytes for p in pieces)
    return Unit(part_names(pieces[0].ref, part_count(text, part_bytes)), tuple(p.ref for p in pieces), text)


def plan_units(pieces: Sequence[Piece], target: int, part_bytes: int) -> list[Unit]:
    """The source's pieces (in sorted file order) cut into units by the rule of the module doc, each
    split into parts of about ``part_bytes`` of estimated text."""
    runs: list[list[Piece]] = []
    cur: list[Piece] = []
    acc = 0
    for piece in pieces:
        if cur and (piece.alone or acc + piece.text_bytes > target):
            runs.append(cur)
            cur, acc = [], 0
        cur.append(piece)
        acc += piece.text_bytes
        if piece.alone or ends_unit(piece.ref.rel, piece.text_bytes, target):
            runs.append(cur)
            cur, acc = [], 0
    if cur:
        runs.append(cur)
    units = [_unit(run, part_bytes) for run in runs]
    seen: dict[str, Unit] = {}
    for u in units:  # a 64-bit collision between two part names: never silently
        for name in u.names:
            if name in seen:
                raise ValueError(f"units {seen[name].label()!r} and {u.label()!r} share the part name {name}; "
                                 "rename one of their first files")
            seen[name] = u
    return units


__all__ = ["BOUNDARY_SHARE", "EXPANSION", "Piece", "Unit", "estimated_text", "ends_unit", "part_count",
           "part_names", "part_of", "plan_units", "unit_name"]
