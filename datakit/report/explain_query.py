"""Which documents a `datakit explain` query names: a document id, ``source:file[:line]`` or a text excerpt.

Every answer starts where the document entered the run: its source's first documents step (the first
step of the plan's chain; normalize today, but nothing here names it). That step keeps each record's
provenance: ``source_id`` (``file:line`` for jsonl, ``file:row`` for parquet, the file for text, the
record id for WARC) on the kept documents (``outputs/main``) and on the identical copies it dropped
(``outputs/dups``), ``file`` and ``line`` on the records it could not read (``outputs/rejects``).

An id may also be one a later step gave a changed text (ids are content hashes): it is then found in
that step's documents and traced back to the first step by its ``source_id``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from datakit.core.layout import join
from datakit.stages.plan import Plan

from .explain_read import Row, find_rows, search_text

DOC_COLUMNS = ("id", "source_id", "text")
REJECT_COLUMNS = ("file", "line", "offset", "reason", "detail", "excerpt")
_ID = re.compile(r"^[0-9a-f]{32}$")
_LINE = re.compile(r"^(.*):(\d+)$")


@dataclass(frozen=True)
class Origin:
    """A source's first documents step and the chains (the source, or the mixture components a stage
    split it into) that start there."""

    step: str
    source: str
    components: tuple[str, ...]


@dataclass(frozen=True)
class Found:
    """One document a query names: its origin, the step its trace starts at (the origin's, unless only
    a later step knows it) and its row there."""

    origin: Origin
    step: str
    row: Row


@dataclass(frozen=True)
class Matches:
    """What a query resolved to: how it was read (id, provenance, excerpt), the documents, and whether
    more matched than the limit let through."""

    how: str
    found: tuple[Found, ...]
    more: bool = False


def origins(plan: Plan) -> list[Origin]:
    """Each first documents step of the plan's chains, with its source and the chains starting there."""
    groups: dict[str, list[str]] = {}
    for component, chain in plan.chains.items():
        if chain:
            groups.setdefault(chain[0], []).append(component)
    out = []
    for step, components in groups.items():
        ref = plan.step(step)
        out.append(Origin(step, (ref.source if ref else None) or components[0], tuple(components)))
    return out


def step_dir(prefix: str, plan: Plan, name: str) -> str:
    ref = plan.step(name)
    return join(prefix, ref.dirname if ref else name)


def resolve(prefix: str, plan: Plan, query: str, limit: int) -> Matches:
    """The documents ``query`` names (module docstring): an id, then ``source:file[:line]`` when the
    part before the first colon is a source, else a text excerpt (at most ``limit`` documents)."""
    query_id = query.strip().lower()
    if _ID.match(query_id):
        return Matches("id", tuple(_by_id(prefix, plan, query_id)))
    source, sep, rest = query.partition(":")
    provenance = bool(sep and rest and any(o.source == source for o in origins(plan)))
    found = _by_provenance(prefix, plan, source, rest) if provenance else []
    if found:
        return Matches("provenance", tuple(found))
    found = _by_excerpt(prefix, plan, query, limit + 1)
    how = "provenance" if provenance and not found else "excerpt"
    return Matches(how, tuple(found[:limit]), len(found) > limit)


def _by_id(prefix: str, plan: Plan, doc_id: str) -> list[Found]:
    found = []
    for o in origins(plan):
        d = step_dir(prefix, plan, o.step)
        rows = find_rows(d, "main", "id", doc_id, DOC_COLUMNS) or find_rows(d, "dups", "id", doc_id, DOC_COLUMNS)
        found += [Found(o, o.step, r) for r in rows]
    return found or _by_later_id(prefix, plan, doc_id)


def _by_later_id(prefix: str, plan: Plan, doc_id: str) -> list[Found]:
    """An id no first step holds: a text a later step changed. Found in that step's documents, then
    traced from the first step through its source_id when the first step has it."""
    for o in origins(plan):
        later = dict.fromkeys(n for c in o.components for n in plan.chain(c)[1:])
        for name in later:
            rows = find_rows(step_dir(prefix, plan, name), "main", "id", doc_id, DOC_COLUMNS)
            if not rows:
                continue
            source_id = rows[0].values.get("source_id")
            first = find_rows(step_dir(prefix, plan, o.step), "main", "source_id", source_id, DOC_COLUMNS) \
                if source_id is not None else []
            return [Found(o, o.step, first[0])] if first else [Found(o, name, rows[0])]
    return []


def _by_provenance(prefix: str, plan: Plan, source: str, rest: str) -> list[Found]:
    found = []
    for o in (o for o in origins(plan) if o.source == source):
        d = step_dir(prefix, plan, o.step)
        rows = [r for kind in ("main", "dups") for r in find_rows(d, kind, "source_id", rest, DOC_COLUMNS)]
        m = _LINE.match(rest)
        file, line = (m.group(1), int(m.group(2))) if m else (rest, None)
        if not rows:
            rows = [r for r in find_rows(d, "rejects", "file", file, REJECT_COLUMNS)
                    if line is None or r.values.get("line") == line]
        found += [Found(o, o.step, r) for r in rows]
    return found


def _by_excerpt(prefix: str, plan: Plan, excerpt: str, limit: int) -> list[Found]:
    """Documents of the first steps whose text holds ``excerpt``, then rejects whose excerpt does."""
    found: list[Found] = []
    for kind, column, columns in (("main", "text", DOC_COLUMNS), ("dups", "text", DOC_COLUMNS),
                                  ("rejects", "excerpt", REJECT_COLUMNS)):
        for o in origins(plan):
            if len(found) >= limit:
                return found
            rows = search_text(step_dir(prefix, plan, o.step), kind, column, excerpt, columns, limit - len(found))
            found += [Found(o, o.step, r) for r in rows]
    return found
