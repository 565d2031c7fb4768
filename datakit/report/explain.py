"""`datakit explain`: why a document was removed, or where it went, from a run's own outputs (no rerun).

A query (an id, ``source:file[:line]`` or a text excerpt: `explain_query`) names documents; each is
followed along the published plan from the step where it entered the run to its token cache:

- every documents step of its chain (``plan.chain``): kept (``outputs/main``, maybe with its text
  changed under the same id), changed (its text changed, so it has a new id, found again by its
  ``source_id``), or removed (``outputs/removed``: the rule, the detail, the measured value, and the
  setting at the rule's path in the step's recorded config, e.g. the threshold);
- the first step's identical copies (``outputs/dups``) and unreadable records (``outputs/rejects``);
- every attribute step (``plan.attributes``) at the point of the chain they read: a duplicate mark with
  the kept copy (its id, source and source_id) and the cluster, or a contamination flag with its
  benchmark item;
- the token cache of each mixture component it reached: its token count and place, read from the
  cache's document offsets (no re-tokenizing: the offsets are the cache's own index of documents).

Nothing here names a stage: steps are found through the plan (chains, attributes, tokens) and what a
step did is read from the files its kind of output has.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from datakit.core.layout import DocumentsDir
from datakit.stages.plan import Plan, read_plan

from .explain_query import DOC_COLUMNS, Found, Origin, origins, resolve, step_dir
from .explain_read import Row, artifact, attribute_members, attribute_rows, find_rows, token_span

DEFAULT_LIMIT = 5
CLUSTER_SHOWN = 10
_ENDS = ("removed", "gone", "not built", "rejected")  # verdicts after which a document goes no further


@dataclass(frozen=True)
class Hop:
    """One step's verdict on the document: kept, changed, removed, rejected, duplicate, canonical,
    flagged, marked, unmarked, elsewhere (another component of a split), tokens, final, unknown, gone or
    not built; a readable note and the facts behind it."""

    step: str
    verdict: str
    note: str = ""
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Trace:
    """One document's way through the run: where it entered (source, source_id, id), its hops, the
    outcome in one line, and the copy kept in its place when it was dropped as a duplicate."""

    source: str
    source_id: str | None
    id: str | None
    hops: tuple[Hop, ...]
    outcome: str
    kept_copy: dict[str, Any] | None = None


@dataclass(frozen=True)
class Explanation:
    """What `datakit explain` answers: the traces of the documents a query names (``more``: more
    matched than the limit)."""

    prefix: str
    query: str
    how: str
    traces: tuple[Trace, ...]
    more: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Doc:
    """The document as a step left it (the text is compared with the next step's to see a change)."""

    id: str
    file: str
    source_id: str | None
    text: str | None


@dataclass
class _Walk:
    """One trace being built: the run, the document's origin, the hops so far and the kept copy."""

    prefix: str
    plan: Plan
    origin: Origin
    hops: list[Hop] = field(default_factory=list)
    kept_copy: dict[str, Any] | None = None


def explain(prefix: str, query: str, limit: int = DEFAULT_LIMIT) -> Explanation:
    """The traces of the documents ``query`` names in the run under ``prefix`` (at most ``limit`` for a
    text excerpt). Raises FileNotFoundError when the prefix has no published plan."""
    plan = read_plan(prefix)
    if plan is None:
        raise FileNotFoundError(f"{prefix}: no plan.json (explain reads the plan a run publishes: run `datakit run` "
                                "first, or pass the run's --prefix)")
    matches = resolve(prefix, plan, query, limit)
    return Explanation(prefix, query, matches.how, tuple(trace(prefix, plan, f) for f in matches.found), matches.more)


def trace(prefix: str, plan: Plan, found: Found) -> Trace:
    """Follow one found document from the step it was found at to its token caches (module docstring)."""
    w = _Walk(prefix, plan, found.origin)
    v = found.row.values
    if found.row.kind == "rejects":
        where = f"{v.get('file')}:{v.get('line')}" if v.get("line") is not None else str(v.get("file"))
        w.hops.append(Hop(found.step, "rejected", f"{v.get('reason')}: {v.get('detail')} ({where})", v))
        return Trace(found.origin.source, where, None, tuple(w.hops), f"rejected at {found.step}: {v.get('reason')}")
    doc = _Doc(v["id"], found.row.file, v.get("source_id"), v.get("text"))
    if found.row.kind == "dups":
        return _in_source_copy(w, found.step, doc)
    w.hops.append(_entry_hop(w, found, doc))
    docs = {found.step: doc}
    readers = {plan.read_by_attributes(c) for c in found.origin.components} if plan.attributes else set()
    if found.step in readers:
        w.hops.extend(_attribute_hops(w, doc))
    for name in _steps_after(plan, found.origin, found.step):
        before = docs.get(plan.input_of(name) or "")
        if before is None:
            continue
        hop, docs[name] = _documents_hop(w, name, before)
        w.hops.append(hop)
        if name in readers and docs[name] is not None:
            w.hops.extend(_attribute_hops(w, docs[name]))
    return _finish(w, doc, docs)


def _steps_after(plan: Plan, origin: Origin, start: str) -> list[str]:
    """The documents steps after ``start`` on the origin's chains, in chain order, each once (a source
    split into components walks their shared steps once, then each component's own)."""
    chains = [plan.chain(c) for c in origin.components if start in plan.chain(c)]
    return list(dict.fromkeys(n for chain in chains for n in chain[chain.index(start) + 1:]))


def _entry_hop(w: _Walk, found: Found, doc: _Doc) -> Hop:
    """The step the document was found at: kept there, and the identical copies that step dropped."""
    note = [f"{doc.file}"]
    if found.step != found.origin.step:
        note.append(f"first seen here: the first step {found.origin.step} has no document with its source_id")
    copies = find_rows(step_dir(w.prefix, w.plan, found.step), "dups", "id", doc.id, ("source_id",), first=doc.file)
    if copies:
        names = ", ".join(str(r.values.get("source_id")) for r in copies)
        note.append(f"{len(copies)} identical cop{'y' if len(copies) == 1 else 'ies'} dropped here ({names})")
    return Hop(found.step, "kept", "; ".join(note), {"id": doc.id, "file": doc.file, "source_id": doc.source_id,
                                                    "identical_copies": [r.values.get("source_id") for r in copies]})


def _in_source_copy(w: _Walk, step: str, doc: _Doc) -> Trace:
    """A copy the first step dropped because a document with the same text (the same id) was kept."""
    kept = find_rows(step_dir(w.prefix, w.plan, step), "main", "id", doc.id, ("source_id",), first=doc.file)
    kept_sid = kept[0].values.get("source_id") if kept else None
    copy = {"id": doc.id, "source": w.origin.source, "source_id": kept_sid}
    w.hops.append(Hop(step, "removed", f"identical to {kept_sid} (same text, id {doc.id}), which is kept",
                      {"reason": "identical copy", "kept_copy": copy}))
    outcome = f"removed at {step}: an identical copy of {w.origin.source}:{kept_sid} (explain {doc.id} follows it)"
    return Trace(w.origin.source, doc.source_id, doc.id, tuple(w.hops), outcome, copy)


def _documents_hop(w: _Walk, step: str, doc: _Doc) -> tuple[Hop, _Doc | None]:
    """What one documents step did to the document: kept, changed (new id), removed, or gone."""
    d = step_dir(w.prefix, w.plan, step)
    art = artifact(d)
    if art is None:
        return Hop(step, "not built", "the step has no finished output under the prefix"), None
    rows = find_rows(d, "main", "id", doc.id, DOC_COLUMNS, first=doc.file)
    if rows:
        after = _doc(rows[0])
        changed = doc.text is not None and after.text != doc.text
        return Hop(step, "kept", "text changed, id kept" if changed else "", {"text_changed": changed}), after
    removed = find_rows(d, "removed", "id", doc.id, (), first=doc.file)
    if removed:
        return _removal_hop(step, removed[0].values, art.get("config") or {}), None
    rows = find_rows(d, "main", "source_id", doc.source_id, DOC_COLUMNS, first=doc.file) if doc.source_id else []
    if rows:
        after = _doc(rows[0])
        sizes = f"{len(doc.text or '')} -> {len(after.text or '')} characters"
        return Hop(step, "changed", f"text changed ({sizes}): new id {after.id}", {"new_id": after.id}), after
    siblings = _siblings(w.plan, step)
    if siblings:
        return Hop(step, "elsewhere", f"not in this part of the split: the document went to {' or '.join(siblings)}, "
                                      "or nowhere"), None
    return Hop(step, "gone", f"in neither outputs/main nor outputs/removed, and no kept document has source_id "
                             f"{doc.source_id!r} (a changed text identical to another document's is kept once)"), None


def _siblings(plan: Plan, step: str) -> list[str]:
    """The other steps reading the same documents as ``step`` where a stage split a source into mixture
    components (each keeps its own share, so a document missing from one went to another)."""
    before = plan.input_of(step)
    nexts = {c[c.index(before) + 1] for c in plan.chains.values() if before in c and c.index(before) + 1 < len(c)}
    return sorted(nexts - {step})


def _doc(row: Row) -> _Doc:
    return _Doc(row.values["id"], row.file, row.values.get("source_id"), row.values.get("text"))


def _removal_hop(step: str, row: dict[str, Any], config: dict[str, Any]) -> Hop:
    """A removed row: its rule, detail, measured value, and the setting at the rule's dotted path in the
    step's config (the threshold the value was held against)."""
    reason, detail, value = row.get("reason"), row.get("detail"), row.get("value")
    note = [f"{reason}: {detail}" if detail else str(reason)]
    facts: dict[str, Any] = {"reason": reason, "detail": detail}
    if value is not None:
        facts["value"] = value
        note.append(f"value {value:.6g}")
    setting = _setting(config, str(reason)) if reason and "." in str(reason) else None
    if setting is not None:
        facts["threshold"], facts["setting"] = setting[1], setting[0]
        note.append(f"config {setting[0]} = {setting[1]!r}")
    return Hop(step, "removed", "; ".join(note), facts)


def _setting(config: Any, dotted: str, path: tuple[str, ...] = ()) -> tuple[str, Any] | None:
    """(path, value) of the first place in a nested config where the keys of ``dotted`` follow each
    other (``gopher_quality.min_alpha_words_ratio`` under ``rules``)."""
    if not isinstance(config, dict):
        return None
    node: Any = config
    keys = dotted.split(".")
    for k in keys:
        if not isinstance(node, dict) or k not in node:
            break
        node = node[k]
    else:
        return ".".join((*path, *keys)), node
    for k, v in config.items():
        hit = _setting(v, dotted, (*path, str(k)))
        if hit is not None:
            return hit
    return None


def _attribute_hops(w: _Walk, doc: _Doc) -> list[Hop]:
    """Every attribute step's marks on the document (the steps that read the documents step it is in)."""
    hops = []
    for name in w.plan.attributes:
        rows = attribute_rows(step_dir(w.prefix, w.plan, name), w.origin.source, doc.file, doc.id)
        if rows is None:
            continue
        hops.append(_attribute_hop(w, name, rows[0]) if rows else Hop(name, "unmarked"))
    return hops


def _attribute_hop(w: _Walk, name: str, row: dict[str, Any]) -> Hop:
    """One attribute row, by what it records: a cluster membership, an exact duplicate, a benchmark flag."""
    if "cluster_id" in row:
        return _cluster_hop(w, name, row)
    if "duplicate_of" in row:
        w.kept_copy = _copy(w, row["id"], row["duplicate_of"])
        return Hop(name, "duplicate", f"exact duplicate: the identical copy in {row['duplicate_of']} is kept "
                                      f"({w.kept_copy['source_id']})", {**row, "kept_copy": w.kept_copy})
    if "benchmark" in row:
        facts = {k: v for k, v in row.items() if k not in ("flags", "spans")}
        note = (f"{row['benchmark']} item {row.get('item')}: fraction {row.get('fraction', 0):.2f}, "
                f"{row.get('ngram_hits')} n-gram hits, action {row.get('action')}")
        return Hop(name, "flagged", note + (f", new id {row['new_id']}" if row.get("new_id") else ""), facts)
    return Hop(name, "marked", ", ".join(f"{k}={v}" for k, v in row.items() if k != "id"), row)


def _cluster_hop(w: _Walk, name: str, row: dict[str, Any]) -> Hop:
    members = attribute_members(step_dir(w.prefix, w.plan, name), w.plan.sources, "cluster_id", row["cluster_id"],
                                CLUSTER_SHOWN)
    facts = {**row, "members": [{"source": m["source"], "id": m["id"]} for m in members]}
    size = row.get("cluster_size")
    if row.get("is_canonical"):
        return Hop(name, "canonical", f"the kept copy of a near-duplicate cluster of {size}", facts)
    w.kept_copy = _copy(w, row["cluster_id"], row.get("canonical_source") or w.origin.source)
    facts["kept_copy"] = w.kept_copy
    parent = (f"near-duplicate of {row['parent_id']} in {row['parent_source']}, "
              if row.get("parent_id") else "near-duplicate ")
    return Hop(name, "duplicate", f"{parent}in a cluster of {size}: kept copy {row['cluster_id']} in "
                                  f"{w.kept_copy['source']} ({w.kept_copy['source_id']})", facts)


def _copy(w: _Walk, doc_id: str, source: str) -> dict[str, Any]:
    """The kept copy of a duplicate: its id, source and source_id (read from the documents the
    attribute steps read for that source)."""
    origin = next((o for o in origins(w.plan) if o.source == source), None)
    read = w.plan.read_by_attributes(origin.components[0]) if origin else None
    rows = find_rows(step_dir(w.prefix, w.plan, read), "main", "id", doc_id, ("source_id",)) if read else []
    return {"id": doc_id, "source": source, "source_id": rows[0].values.get("source_id") if rows else None}


def _finish(w: _Walk, first: _Doc, docs: dict[str, _Doc | None]) -> Trace:
    """The token hops of the components the document reached, and the outcome line."""
    reached = [c for c in w.origin.components if docs.get(w.plan.documents(c) or "") is not None]
    for component in reached:
        w.hops.append(_token_hop(w, component, docs[w.plan.documents(component) or ""]))
    if reached:
        where = [f"{h.facts['component']} ({h.facts['tokens']} tokens, {h.facts['split']} split)"
                 if h.verdict == "tokens" else h.step for h in w.hops[-len(reached):]]
        outcome = f"kept in {', '.join(where)}"
    else:
        last = next((h for h in reversed(w.hops) if h.verdict in _ENDS), w.hops[-1])
        outcome = f"{last.verdict} at {last.step}: {last.facts.get('reason') or last.note}"
        if w.kept_copy:
            outcome += f"; kept copy {w.kept_copy['id']} in {w.kept_copy['source']} ({w.kept_copy['source_id']})"
    return Trace(w.origin.source, first.source_id, first.id, tuple(w.hops), outcome, w.kept_copy)


def _token_hop(w: _Walk, component: str, doc: _Doc) -> Hop:
    """Where the document's tokens are in the component's token cache (from the cache's offsets)."""
    from datakit.tokenize.cache import CacheNotReady

    name = w.plan.tokens.get(component)
    if name is None:
        return Hop(w.plan.documents(component) or component, "final", f"in {component}'s final documents "
                                                                      "(the run has no token cache for it)")
    d = step_dir(w.prefix, w.plan, name)
    if artifact(d) is None:
        return Hop(name, "not built", "the token cache has no finished output under the prefix")
    try:
        span = token_span(d, DocumentsDir(step_dir(w.prefix, w.plan, w.plan.documents(component) or "")).main,
                          doc.file, doc.id)
    except CacheNotReady as e:
        return Hop(name, "not built", str(e))
    if isinstance(span, str):
        return Hop(name, "unknown", span)
    note = (f"{span.tokens} tokens in {component}'s {span.split} split (shard {span.shard}, document {span.index}, "
            f"tokens {span.start}..{span.end}; from the cache's document offsets)")
    return Hop(name, "tokens", note, {"component": component, **asdict(span), "tokens": span.tokens})


def render_text(e: Explanation) -> str:
    """The readable trace: a header, then per document one line per step and its outcome."""
    if not e.traces:
        what = {"id": f"document {e.query}", "provenance": f"{e.query} (as provenance or text)"}.get(
            e.how, f"no document containing {e.query!r}")
        return f"{what}: not found in {e.prefix}"
    more = f" (more match: showing the first {len(e.traces)}; --limit shows more)" if e.more else ""
    n = len(e.traces)
    lines = [f"{e.query!r} in {e.prefix}: {n} document{'s' if n != 1 else ''} (by {e.how}){more}"]
    for t in e.traces:
        width = max(len(h.step) for h in t.hops)
        lines += ["", f"{t.source}:{t.source_id}  " + (f"id {t.id}" if t.id else "no id (never read as a document)")]
        lines += [f"  {h.step:<{width}}  {h.verdict:<10} {h.note}".rstrip() for h in t.hops]
        lines.append(f"  => {t.outcome}")
    return "\n".join(lines)
