"""Per-unit reuse for normalize (`datakit.steps.reuse`): an edited file re-reads its own unit only.

Two keys per unit, both recorded in the step's ``reuse.json``:

- the *unit key* (`unit_key`): normalize's version, the source's and the config's identity settings,
  and each member's relative name, sha256 (the run's planned files carry it) and row-group range. It
  names the unit's parts as read (`write.write_unit`, one per id range), its rejects and its counts. A
  unit whose key the earlier build has is taken from it, never read;
- the *final key* (`final_key`): the unit key, the part's name, the ids the part loses to earlier
  units and the source-wide schema. It names the finished part when finishing changed it
  (`finish.py`), so a part that loses the same ids under the same schema as before is taken finished
  too.

Where a unit's part as read is kept: at its final place (``outputs/main``, ``outputs/dups``) when
finishing leaves it as it is (the usual case, no extra bytes), else under ``units/`` beside the
finished one, so the next build can finish it differently without reading its files again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import xxhash

from datakit.core import fsio
from datakit.core.layout import DocumentsDir
from datakit.steps import reuse

from .units import Unit


@dataclass(frozen=True)
class UnitReuse:
    """What besides its files a unit's part depends on (``settings``: normalize's version, the source's
    and the config's identity settings; never the source's file list), and the earlier build."""

    settings: tuple
    earlier: reuse.Earlier | None


def unit_key(settings: tuple, unit: Unit, digests: dict[int, str | None]) -> str | None:
    """The unit's content key; None when a member's sha256 is unknown (then it is always read)."""
    members = []
    for ref in unit.refs:
        digest = digests.get(ref.index)
        if digest is None:
            return None
        members.append((ref.rel, digest, list(ref.row_groups) if ref.row_groups else None))
    return reuse.content_key("normalize-unit", settings, members)


def final_key(key: str, name: str, lost: tuple[str, ...], schema: pa.Schema) -> str:
    """The finished part's key: its unit and name, the ids it loses and the schema it is written under."""
    return reuse.content_key("normalize-final", key, name, xxhash.xxh3_128_hexdigest("\n".join(lost).encode()),
                             schema.to_string(show_schema_metadata=False))


@dataclass
class Part:
    """One part of a unit (the ``j``-th id range, named ``name``) in this build, before finishing:
    where its files as read are (relative to the step dir), its rejects file (the unit's, on its first
    part only; None: it had none), its counts (the unit's read counts on its first part), and whether
    it was taken."""

    index: int
    unit: Unit
    j: int
    key: str | None
    main: str
    dups: str
    rejects: str | None
    stats: dict[str, int]
    taken: bool
    schemas: tuple[pa.Schema, pa.Schema] | None = field(default=None)

    @property
    def name(self) -> str:
        return self.unit.names[self.j]

    def files(self) -> tuple[str, ...]:
        return (self.main, self.dups) + ((self.rejects,) if self.rejects else ())


def computed_part(index: int, unit: Unit, j: int, key: str | None, summary: dict) -> Part:
    name = unit.names[j]
    rejects = DocumentsDir.rel_unit("rejects", name) if summary["rejects"] else None
    return Part(index, unit, j, key, DocumentsDir.rel_file("main", name), DocumentsDir.rel_file("dups", name),
                rejects, dict(summary["stats"]), taken=False)


def _found(files: tuple[str, ...], kind: str, name: str) -> str | None:
    return next((f for f in files if f in (DocumentsDir.rel_file(kind, name), DocumentsDir.rel_unit(kind, name))),
                None)


def taken_parts(index: int, unit: Unit, key: str | None, reuse_from: UnitReuse | None, out_dir: str
                ) -> list[Part] | None:
    """The unit's parts as read (numbered from ``index``), taken from the earlier build (at the places
    they had there), or None."""
    if key is None or reuse_from is None:
        return None
    got = reuse.take(reuse_from.earlier, key, out_dir)
    if got is None:
        return None
    parts = []
    for j, name in enumerate(unit.names):
        main, dups = _found(got.files, "main", name), _found(got.files, "dups", name)
        if main is None or dups is None:  # not a record this code writes: compute
            for f in got.files:
                fsio.remove(fsio.join(out_dir, f))
            return None
        rejects = _found(got.files, "rejects", name) if j == 0 else None
        parts.append(Part(index + j, unit, j, key, main, dups, rejects, dict(got.stats) if j == 0 else {},
                          taken=True))
    return parts


def unit_record(parts: list[Part]) -> reuse.Unit:
    """The reuse record of one unit's parts as read: every part's files, the unit's counts."""
    stats: dict[str, int] = {}
    for p in parts:
        for k, v in p.stats.items():
            stats[k] = stats.get(k, 0) + v
    return reuse.Unit(tuple(f for p in parts for f in p.files()), stats)


def move(out_dir: str, part: Part, final: bool) -> None:
    """Put the part's files as read at their final place (``final``) or under ``units/``."""
    for kind in ("main", "dups"):
        src = getattr(part, kind)
        dst = (DocumentsDir.rel_file if final else DocumentsDir.rel_unit)(kind, part.name)
        if src != dst:
            fsio.link_or_copy(fsio.join(out_dir, src), fsio.join(out_dir, dst))
            fsio.remove(fsio.join(out_dir, src))
            setattr(part, kind, dst)


__all__ = ["Part", "UnitReuse", "computed_part", "final_key", "move", "taken_parts", "unit_key", "unit_record"]
