"""Per-unit reuse for normalize (`datakit.steps.reuse`): an edited file re-reads its own unit only.

Two keys per unit, both recorded in the step's ``reuse.json``:

- the *unit key* (`unit_key`): normalize's version, the source's and the config's identity settings,
  and each member's relative name, sha256 (the run's planned files carry it) and row-group range. It
  names the unit's part as read (`write.write_unit`), its rejects and its counts. A unit whose key
  the earlier build has is taken from it, never read;
- the *final key* (`final_key`): the unit key, the ids the part loses to earlier units and the
  source-wide schema. It names the finished part when finishing changed it (`finish.py`), so a part
  that loses the same ids under the same schema as before is taken finished too.

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


def final_key(key: str, lost: tuple[str, ...], schema: pa.Schema) -> str:
    """The finished part's key: its unit, the ids it loses and the schema it is written under."""
    return reuse.content_key("normalize-final", key, xxhash.xxh3_128_hexdigest("\n".join(lost).encode()),
                             schema.to_string(show_schema_metadata=False))


@dataclass
class Part:
    """One unit's part in this build, before finishing: where its files as read are (relative to the
    step dir), its rejects file (None: it had none), its counts, and whether it was taken."""

    index: int
    unit: Unit
    key: str | None
    main: str
    dups: str
    rejects: str | None
    stats: dict[str, int]
    taken: bool
    schemas: tuple[pa.Schema, pa.Schema] | None = field(default=None)

    def files(self) -> tuple[str, ...]:
        return (self.main, self.dups) + ((self.rejects,) if self.rejects else ())


def computed_part(index: int, unit: Unit, key: str | None, summary: dict) -> Part:
    name = unit.name
    rejects = DocumentsDir.rel_unit("rejects", name) if summary["rejects"] else None
    return Part(index, unit, key, DocumentsDir.rel_file("main", name), DocumentsDir.rel_file("dups", name),
                rejects, dict(summary["stats"]), taken=False)


def taken_part(index: int, unit: Unit, key: str | None, reuse_from: UnitReuse | None, out_dir: str
               ) -> Part | None:
    """The unit's part as read, taken from the earlier build (at the places it had there), or None."""
    if key is None or reuse_from is None:
        return None
    got = reuse.take(reuse_from.earlier, key, out_dir)
    if got is None:
        return None
    name = unit.name
    where = {kind: next((f for f in got.files if f in (DocumentsDir.rel_file(kind, name),
                                                          DocumentsDir.rel_unit(kind, name))), None)
             for kind in ("main", "dups", "rejects")}
    if where["main"] is None or where["dups"] is None:  # not a record this code writes: compute
        for f in got.files:
            fsio.remove(fsio.join(out_dir, f))
        return None
    return Part(index, unit, key, where["main"], where["dups"], where["rejects"], dict(got.stats), taken=True)


def move(out_dir: str, part: Part, final: bool) -> None:
    """Put the part's files as read at their final place (``final``) or under ``units/``."""
    for kind in ("main", "dups"):
        src = getattr(part, kind)
        dst = (DocumentsDir.rel_file if final else DocumentsDir.rel_unit)(kind, part.unit.name)
        if src != dst:
            fsio.link_or_copy(fsio.join(out_dir, src), fsio.join(out_dir, dst))
            fsio.remove(fsio.join(out_dir, src))
            setattr(part, kind, dst)


__all__ = ["Part", "UnitReuse", "computed_part", "final_key", "move", "taken_part", "unit_key"]
