"""Ferry checks of the quality layer (quality, linededup, pii): files as declared, documents in = kept +
removed (and = the input step's documents), removed/ rows by rule equal to the per-rule counters, the
per-rule envelopes, and the planted items handled.

Planted items are documents carrying a ``planted`` column (the bundled manifest's ``web`` source reads
them from ``smoke_web.jsonl``); its value names what must happen to the document, and each stage checks
its own kinds with a reader of its own (DuckDB, plain string and regex work), never the stage's code:

- ``non_english``: removed by the quality step with a ``langid.*`` rule (in its removed/ with the rule);
- ``spam``: removed by the quality step with a Gopher repetition or quality rule;
- any other kind (``prose``, ``boilerplate``, ``pii``): kept by the quality step;
- ``boilerplate``: every line (paragraph, per the step's unit) of at least ``min_chars`` shared by two or
  more of them survives line dedup in exactly one document, the first in the pipeline's order;
- ``pii``: every email address and public IP address in it is gone from the pii step's output.
"""

from __future__ import annotations

import ipaddress
import os
import re

from .checking import CheckFailed, RunContext, eq, fmt_range, frac
from .checks_data import with_outputs_check
from .envelopes import within
from datakit.stages.plan import PlanStep

PLANTED = "planted"
REMOVED_BY = {"non_english": ("langid.",), "spam": ("gopher_repetition.", "gopher_quality.")}
# Deliberately simpler than datakit.quality.pii: what a reader would call an address.
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_IPV4 = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}\b")


def _files(ctx: RunContext, name: str) -> tuple[list[str], list[str]]:
    res = ctx.res(name)
    main = [ctx.path(name, r) for r in res.get("main_files") or []]
    removed = [ctx.path(name, r) for r in res.get("removed_files") or []]
    if not main:
        raise CheckFailed("the result lists no main_files")
    missing = [p for p in main + removed if not os.path.exists(p)]
    if missing:
        raise CheckFailed(f"{len(missing)} declared file(s) missing, first {ctx.rel(missing[0])}")
    return main, removed


def _input(ctx: RunContext, ref: PlanStep, src: str) -> str:
    """The documents step a per-source step reads (its dependency of the same source)."""
    dep = next((d for d in ref.deps if ctx.plan.step(d) is not None and ctx.plan.step(d).source == src), None)
    if dep is None:
        raise CheckFailed(f"no dependency of source {src}: cannot tell which documents it read")
    return dep


def _counts(ctx: RunContext, name: str, src: str, dep: str, main: list[str], removed: list[str]) -> str:
    c = ctx.cnt(name)
    kept, gone = ctx.rows(main), ctx.rows(removed)
    eq(kept, c.get("docs_out"), "main parquet rows vs counters.docs_out")
    eq(gone, c.get("removed"), "removed parquet rows vs counters.removed")
    eq(c.get("docs_in"), kept + gone, "counters.docs_in vs kept + removed")
    eq(c.get("docs_in"), ctx.rows(ctx.documents(dep)), f"counters.docs_in vs {dep} documents")
    by_rule = dict(ctx.q("select reason, count(*) from read_parquet(?) group by 1", [removed])) if removed else {}
    want = {k.split("/", 1)[1]: v for k, v in c.items() if k.startswith("removed/") and v}
    eq(dict(sorted(by_rule.items())), dict(sorted(want.items())), "removed/ rows by reason vs counters removed/<rule>")
    ctx.src_info(src, **{f"removed_{name.rsplit('-' + src, 1)[0]}": gone})
    return f"{c.get('docs_in')} in = {kept} kept + {gone} removed ({len(by_rule)} rules)"


def _envelope(ctx: RunContext, name: str, key: str, removed_key: str = "removed") -> str:
    c = ctx.cnt(name)
    f, rng = frac(c.get(removed_key, 0), c.get("docs_in", 0)), getattr(ctx.env, key)
    if not within(f, rng):
        raise CheckFailed(f"{c.get(removed_key, 0)} of {c.get('docs_in', 0)} docs {removed_key} = {f:.4f}, outside "
                          f"{key} {fmt_range(rng)}")
    return f"{removed_key} {f:.4f} within {fmt_range(rng)}"


def _rule_envelope(ctx: RunContext, name: str) -> str:
    """Each rule's share of the step's documents within quality_rule_fraction."""
    c, rng = ctx.cnt(name), ctx.env.quality_rule_fraction
    n = c.get("docs_in", 0)
    rules = {k.split("/", 1)[1]: v for k, v in c.items() if k.startswith("removed/") and v}
    for rule, v in sorted(rules.items(), key=lambda kv: -kv[1]):
        if not within(frac(v, n), rng):
            raise CheckFailed(f"rule {rule} removed {v} of {n} docs = {frac(v, n):.4f}, outside quality_rule_fraction "
                              f"{fmt_range(rng)}")
    top = max(rules.items(), key=lambda kv: kv[1], default=("none", 0))
    return f"{len(rules)} rules, largest {top[0]} {frac(top[1], n):.4f} within {fmt_range(rng)}"


# ---------------------------------------------------------------------------------------------- planted
def _columns(ctx: RunContext, files: list[str]) -> set[str]:
    if not files:
        return set()
    return {r[0] for r in ctx.q("select column_name from (describe select * from read_parquet(?))", [files])}


def _planted(ctx: RunContext, files: list[str], kinds: tuple[str, ...] | None = None) -> list[tuple]:
    """(id, kind, text, source_id, file name, row) of the planted documents in ``files``, in the pipeline's
    order (file name, row); [] when the files have no ``planted`` column."""
    if PLANTED not in _columns(ctx, files):
        return []
    rows = ctx.q(f"select id, {PLANTED}, text, source_id, filename, file_row_number from "
                 f"read_parquet(?, filename=true, file_row_number=true) where {PLANTED} is not null", [files])
    rows = [(i, k, t, s, os.path.basename(f), r) for i, k, t, s, f, r in rows if kinds is None or k in kinds]
    return sorted(rows, key=lambda r: (r[4], r[5]))


def _planted_note(ctx: RunContext, src: str, kind: str, what: str) -> None:
    ctx.summary["planted"].setdefault("quality", {}).setdefault(kind, []).append(f"{src}: {what}")


def _planted_quality(ctx: RunContext, name: str, src: str, dep: str, main: list[str], removed: list[str]) -> str:
    docs = _planted(ctx, ctx.documents(dep))
    if not docs:
        return "no planted documents"
    reasons = {i: (r, v) for i, r, v in ctx.q("select id, reason, value from read_parquet(?)", [removed])} \
        if removed else {}
    kept = dict(ctx.q(f"select {PLANTED}, count(*) from read_parquet(?) where {PLANTED} is not null group by 1",
                      [main])) if PLANTED in _columns(ctx, main) else {}
    want_kept: dict[str, int] = {}
    for doc_id, kind, _, source_id, _, _ in docs:
        rules = REMOVED_BY.get(kind)
        if rules is None:
            want_kept[kind] = want_kept.get(kind, 0) + 1
            continue
        if doc_id not in reasons:
            raise CheckFailed(f"planted {kind} document {source_id} (id {doc_id}) was not removed; expected a "
                              f"{' or '.join(r + '*' for r in rules)} rule")
        rule, value = reasons[doc_id]
        if not rule.startswith(rules):
            raise CheckFailed(f"planted {kind} document {source_id} was removed by {rule}, expected a "
                              f"{' or '.join(r + '*' for r in rules)} rule")
        _planted_note(ctx, src, kind, f"removed by {rule} ({value:.4g})" if value is not None else f"removed by {rule}")
    for kind, n in sorted(want_kept.items()):
        eq(kept.get(kind, 0), n, f"planted {kind} documents kept vs in the input (only non_english and spam go)")
    kinds = sorted({d[1] for d in docs})
    return f"{len(docs)} planted documents ({', '.join(kinds)}) handled"


def _segments(text: str, unit: str, min_chars: int) -> list[str]:
    parts = text.split("\n") if unit == "line" else re.split(r"\n[ \t]*\n", text)
    return [p.strip() for p in parts if len(p.strip()) >= min_chars]


def _planted_linededup(ctx: RunContext, name: str, src: str, dep: str, main: list[str]) -> str:
    docs = _planted(ctx, ctx.documents(dep), ("boilerplate",))
    if not docs:
        return "no planted boilerplate"
    rules = (ctx.artifacts[name].get("config") or {}).get("rules") or {}
    unit, min_chars = rules.get("unit", "line"), int(rules.get("min_chars", 40))
    holders: dict[str, list[tuple]] = {}
    for d in docs:
        for seg in dict.fromkeys(_segments(d[2], unit, min_chars)):
            holders.setdefault(seg, []).append(d)
    shared = {seg: ds for seg, ds in holders.items() if len(ds) > 1}
    if not shared:
        raise CheckFailed(f"the {len(docs)} planted boilerplate documents share no {unit} of >= {min_chars} chars: "
                          "the check would prove nothing")
    out = ctx.q("select source_id, text from read_parquet(?)", [main])
    for seg, ds in shared.items():
        keep = [sid for sid, text in out if seg in _segments(text, unit, min_chars)]
        first = ds[0][3]
        if keep != [first]:
            raise CheckFailed(f"planted boilerplate {unit} {seg[:50]!r}... is in {len(keep)} output document(s) "
                              f"{keep[:3]}, expected only the first of its {len(ds)} copies ({first})")
    copies = sum(len(ds) for ds in shared.values())
    _planted_note(ctx, src, "boilerplate", f"{len(shared)} shared {unit}(s) kept once, {copies - len(shared)} later "
                                           "copies removed")
    return f"{len(shared)} boilerplate {unit}(s) of {len(docs)} planted documents kept in the first copy only"


def _pii_items(text: str) -> list[str]:
    items = _EMAIL.findall(text)
    for quad in _IPV4.findall(text):
        try:
            if ipaddress.ip_address(quad).is_global:
                items.append(quad)
        except ValueError:
            pass
    return items


def _planted_pii(ctx: RunContext, name: str, src: str, dep: str, main: list[str]) -> str:
    docs = _planted(ctx, ctx.documents(dep), ("pii",))
    if not docs:
        return "no planted pii"
    out = dict(ctx.q("select id, text from read_parquet(?) where id in (select unnest(?::VARCHAR[]))",
                     [main, [d[0] for d in docs]]))
    found = 0
    for doc_id, _, text, source_id, _, _ in docs:
        items = _pii_items(text)
        if not items:
            raise CheckFailed(f"planted pii document {source_id} holds no email or public IP address: the check "
                              "would prove nothing")
        if doc_id not in out:
            raise CheckFailed(f"planted pii document {source_id} (id {doc_id}) is missing from the output "
                              "(ids are kept)")
        left = [x for x in items if x in out[doc_id]]
        if left:
            raise CheckFailed(f"planted pii document {source_id} still holds {left[0]!r} after redaction")
        found += len(items)
    redacted = sum(v for k, v in ctx.cnt(name).items() if k.startswith("redacted/"))
    if redacted < found:
        raise CheckFailed(f"counters redacted/* total {redacted} < the {found} addresses in planted documents")
    _planted_note(ctx, src, "pii", f"{found} address(es) redacted in {len(docs)} document(s)")
    return f"{found} email/IP address(es) of {len(docs)} planted document(s) redacted"


def _ids_kept(ctx: RunContext, dep: str, main: list[str]) -> str:
    """PII redaction keeps every id, in every file, in order."""
    before = ctx.q("select filename, file_row_number, id from read_parquet(?, filename=true, file_row_number=true) "
                   "order by 1, 2", [ctx.documents(dep)])
    after = ctx.q("select filename, file_row_number, id from read_parquet(?, filename=true, file_row_number=true) "
                  "order by 1, 2", [main])
    strip = lambda rows: [(os.path.basename(f), r, i) for f, r, i in rows]  # noqa: E731
    b, a = strip(before), strip(after)
    if b != a:
        diff = next((x, y) for x, y in zip(b + [None], a + [None]) if x != y)
        raise CheckFailed(f"ids differ from {dep}'s (first difference {diff[0]} vs {diff[1]}): redaction must keep "
                          "ids and order")
    return f"{len(a)} ids kept, same files and order as {dep}"


# ---------------------------------------------------------------------------------------------- the checks
def _documents_step(ctx: RunContext, ref: PlanStep, src: str) -> tuple[dict[str, list[str]], str] | None:
    """files + counts of a documents-rewriting step; (files, input step) when its files are readable."""
    name, got = ref.name, {}

    def files() -> str:
        got["dep"] = _input(ctx, ref, src)
        got["main"], got["removed"] = _files(ctx, name)
        return f"{len(got['main'])} main + {len(got['removed'])} removed files"

    if not ctx.check(name, "files", files, breaks=True):
        return None
    needs = (got["dep"],)
    ctx.check(name, "counts", lambda: _counts(ctx, name, src, got["dep"], got["main"], got["removed"]), needs)
    return got, got["dep"]


@with_outputs_check
def check_quality(ctx: RunContext, ref: PlanStep, src: str) -> None:
    name = ref.name
    step = _documents_step(ctx, ref, src)
    if step is None:
        return
    got, dep = step
    ctx.check(name, "planted", lambda: _planted_quality(ctx, name, src, dep, got["main"], got["removed"]), (dep,))
    ctx.check(name, "envelope", lambda: _envelope(ctx, name, "quality_removed_fraction"))
    ctx.check(name, "rule_envelope", lambda: _rule_envelope(ctx, name))


@with_outputs_check
def check_linededup(ctx: RunContext, ref: PlanStep, src: str | None) -> None:
    if src is None:  # the corpus-wide index: one removals file per source
        def files() -> str:
            per = ctx.res(ref.name).get("sources") or {}
            missing = [s for s, rel in per.items() if not os.path.exists(ctx.path(ref.name, rel))]
            if missing:
                raise CheckFailed(f"removals file of {missing[0]} missing")
            eq(ctx.rows([ctx.path(ref.name, r) for r in per.values()]), ctx.cnt(ref.name).get("removals"),
               "removals rows vs counters.removals")
            return f"{len(per)} sources, {ctx.cnt(ref.name).get('removals')} removals"

        ctx.check(ref.name, "files", files, breaks=True)
        return
    name = ref.name
    step = _documents_step(ctx, ref, src)
    if step is None:
        return
    got, dep = step
    ctx.check(name, "planted", lambda: _planted_linededup(ctx, name, src, dep, got["main"]), (dep,))
    ctx.check(name, "envelope", lambda: _envelope(ctx, name, "linededup_emptied_fraction", "docs_emptied"))


@with_outputs_check
def check_pii(ctx: RunContext, ref: PlanStep, src: str) -> None:
    name = ref.name
    step = _documents_step(ctx, ref, src)
    if step is None:
        return
    got, dep = step
    ctx.check(name, "ids_kept", lambda: _ids_kept(ctx, dep, got["main"]), (dep,))
    ctx.check(name, "planted", lambda: _planted_pii(ctx, name, src, dep, got["main"]), (dep,))


def _removed_only_listed(ctx: RunContext, main: list[str], removed: list[str]) -> str:
    """Every removed row says which entry matched, and no kept document carries a removed id."""
    bad = ctx.q("select count(*) from read_parquet(?) where reason <> 'takedown' or detail is null", [removed])[0][0]
    if bad:
        raise CheckFailed(f"{bad} removed rows without reason 'takedown' and the matching entry")
    n = ctx.q("select count(*) from read_parquet(?)", [removed])[0][0]
    if n:
        back = ctx.q("select count(*) from read_parquet(?) where id in (select id from read_parquet(?))",
                     [main, removed])[0][0]
        if back:
            raise CheckFailed(f"{back} taken-down ids are still in the kept documents")
    return f"{n} documents taken down, none of them kept"


@with_outputs_check
def check_takedown(ctx: RunContext, ref: PlanStep, src: str) -> None:
    step = _documents_step(ctx, ref, src)
    if step is None:
        return
    got, dep = step
    ctx.check(ref.name, "listed", lambda: _removed_only_listed(ctx, got["main"], got["removed"]), (dep,))
