"""Stage checks over the record-level data: normalize, exact dedup, MinHash, fuzzy dups,
decontaminate, consolidate. Every count is recomputed from the parquet files with DuckDB and compared
with the step's own record and with the neighbouring stages' records (see validate.py for the order).
"""

from __future__ import annotations

import os

from datakit.core.layout import DocumentsDir, parquet_names, parse_unit_part_name
from datakit.core.results import AttributesResult, DocumentsResult

from .checking import CheckFailed, RunContext, eq, fmt_range, frac
from .envelopes import within
from datakit.stages.plan import PlanStep


def check_outputs(ctx: RunContext, name: str) -> None:
    """Every output file re-hashed against the manifest the step wrote before SUCCESS (the same
    manifests `datakit run` and `datakit verify` use): an edit that keeps sizes and counts, such as one
    valid token id overwritten by another, is still caught. Runs last for its step, so the specific
    checks above it report first."""
    from datakit.core.fsio import store_url
    from datakit.steps.verify import verify_step_dir

    def outputs() -> str:
        report = verify_step_dir(store_url(ctx.path(name)))
        if not report.manifest and report.ok:
            return "no output manifest (built before output manifests existed)"
        if not report.ok:
            more = f" (and {len(report.problems) - 1} more)" if len(report.problems) > 1 else ""
            raise CheckFailed(f"output damaged: {report.problems[0]}{more}")
        return f"{report.checked} files match their manifest"

    ctx.check(name, "outputs", outputs)


def with_outputs_check(fn):
    """A stage check followed by the outputs check of the same step (see check_outputs)."""
    import functools

    @functools.wraps(fn)
    def run(ctx: RunContext, ref: PlanStep, src) -> None:
        fn(ctx, ref, src)
        check_outputs(ctx, ref.name)

    return run


@with_outputs_check
def check_normalize(ctx: RunContext, ref: PlanStep, src: str) -> None:
    name, res, c = ref.name, ctx.res(ref.name), ctx.cnt(ref.name)

    def files() -> str:
        main, n = res.get("main_files") or [], res.get("num_shards")
        if not main:
            raise CheckFailed("the result lists no main_files")
        eq(len(main), n, "main_files listed vs num_shards")
        want = sorted(os.path.basename(r) for r in main)
        bad = [w for w in want if parse_unit_part_name(w) is None]
        if bad:
            raise CheckFailed(f"main file {bad[0]} is not named by its unit (unit-<16 hex>.parquet)")
        eq(main, [DocumentsDir.rel_file("main", w) for w in want], "main files (sorted, in outputs/main)")
        eq(res.get("dups_files") or [], [DocumentsDir.rel_file("dups", w) for w in want], "dups files")
        declared = main + (res.get("dups_files") or []) + (res.get("rejects_files") or [])
        missing = [r for r in declared if not os.path.exists(ctx.path(name, r))]
        if missing:
            raise CheckFailed(f"{len(missing)} declared file(s) missing, first {missing[0]}")
        have = parquet_names(DocumentsDir(ctx.path(name)).main)
        eq(have, want, f"parquet files in {DocumentsDir.MAIN}/")
        ctx.stage_info(name, files=n)
        return f"{n} main shards, {len(declared)} files"

    if not ctx.check(name, "files", files, breaks=True):
        return

    def rows() -> str:
        main_rows = ctx.rows(ctx.documents(name))
        eq(main_rows, c.get("records_out"), "main parquet rows vs counters.records_out")
        dups = ctx.rows([ctx.path(name, r) for r in res.get("dups_files") or []])
        eq(dups, c.get("dups"), "dups parquet rows vs counters.dups")
        rejects = ctx.rows([ctx.path(name, r) for r in res.get("rejects_files") or []])
        eq(rejects, c.get("rejects"), "rejects parquet rows vs counters.rejects")
        eq(c.get("records_in"), c.get("records_out", 0) + c.get("dups", 0) + c.get("empty_dropped", 0)
            + rejects, "counters.records_in vs records_out + dups + empty_dropped + rejects")
        ctx.stage_info(name, rows=main_rows)
        ctx.src_info(src, records_in=c.get("records_in"), normalized=main_rows, normalize_dups=dups,
                      rejects=rejects)
        return f"{main_rows} rows ({c.get('records_in')} in, {dups} dups, {rejects} rejects)"

    ctx.check(name, "rows", rows)

    def envelope() -> str:
        n_in = c.get("records_in", 0)
        rej, dup = frac(c.get("rejects", 0), n_in), frac(c.get("dups", 0), n_in)
        if not within(rej, ctx.env.normalize_reject_fraction):
            raise CheckFailed(f"reject fraction {rej:.4f} outside normalize_reject_fraction "
                              f"{fmt_range(ctx.env.normalize_reject_fraction)}")
        if not within(dup, ctx.env.normalize_dup_fraction):
            raise CheckFailed(f"in-source duplicate fraction {dup:.4f} outside normalize_dup_fraction "
                              f"{fmt_range(ctx.env.normalize_dup_fraction)}")
        return f"rejects {rej:.4f}, dups {dup:.4f}"

    ctx.check(name, "envelope", envelope)

def _per_source_attrs(ctx: RunContext, name: str) -> dict[str, str]:
    """source -> attribute dir, for every normalized source, checked co-partitioned."""
    per = ctx.res(name).get("sources") or {}
    out = {}
    for src in ctx.sources_with("normalize"):
        if src not in per:
            raise CheckFailed(f"the result has no entry for source {src}")
        out[src] = ctx.check_attr_dir(name, src, per[src].get("attributes"))
    return out

def _norm_needs(ctx: RunContext) -> tuple[str, ...]:
    return tuple(ctx.docs_step(s) for s in ctx.sources_with("normalize"))

def _files_check(ctx: RunContext, name: str, needs: tuple[str, ...]) -> bool:
    """The check every corpus-wide attribute step starts with: one co-partitioned attribute directory per
    normalized source. False stops that step's other checks (they would only repeat the failure)."""
    return ctx.check(name, "files", lambda: f"{len(_per_source_attrs(ctx, name))} sources co-partitioned",
                     needs, breaks=True)


def _duplicates_envelope(ctx: RunContext, name: str, per: dict, needs: tuple[str, ...], key: str) -> None:
    ctx.check(name, "envelope", lambda: _fraction_envelope(
        ctx, name, sum(per[s].get("duplicates", 0) for s in per), key), needs)


@with_outputs_check
def check_exact(ctx: RunContext, ref: PlanStep, _src: None) -> None:
    name, needs = ref.name, _norm_needs(ctx)
    if not _files_check(ctx, name, needs):
        return
    per, c = ctx.res(name)["sources"], ctx.cnt(name)

    def rows() -> str:
        total = 0
        for src in ctx.sources_with("normalize"):
            marked = ctx.rows(ctx.attr_files(name, src, per[src]["attributes"]))
            eq(marked, per[src].get("duplicates"), f"{src}: attribute rows vs result duplicates")
            n = ctx.docs_count(src)
            eq(per[src].get("docs"), n, f"{src}: result docs vs {ctx.docs_step(src)} documents")
            if f"docs/{src}" in c:
                eq(c[f"docs/{src}"], n, f"{src}: counters docs/{src} vs {ctx.docs_step(src)} documents")
            ctx.src_info(src, exact_marked=marked)
            total += marked
        ctx.stage_info(name, rows=total)
        return f"{total} exact duplicates marked"

    ctx.check(name, "rows", rows, needs)
    _duplicates_envelope(ctx, name, per, needs, "exact_fraction")

def _fraction_envelope(ctx: RunContext, name: str, marked: int, key: str) -> str:
    docs = sum((ctx.docs_count(s) or 0) for s in ctx.sources_with("normalize"))
    f, rng = frac(marked, docs), getattr(ctx.env, key)
    if not within(f, rng):
        raise CheckFailed(f"{marked} of {docs} docs marked = {f:.4f}, outside {key} {fmt_range(rng)}")
    return f"{marked}/{docs} = {f:.4f} within {fmt_range(rng)}"

@with_outputs_check
def check_minhash(ctx: RunContext, ref: PlanStep, src: str) -> None:
    name, needs = ref.name, (ctx.docs_step(src),)

    def files() -> str:
        ctx.check_attr_dir(name, src, ctx.res(name).get("attributes"))
        return f"{len(ctx.norm_names(src))} attribute files"

    if not ctx.check(name, "files", files, needs, breaks=True):
        return

    def rows() -> str:
        n = ctx.rows(ctx.attr_files(name, src, ctx.res(name)["attributes"]))
        eq(n, ctx.cnt(name).get("docs"), "signature rows vs counters.docs")
        eq(n, ctx.docs_count(src), f"signature rows vs {ctx.docs_step(src)} documents")
        ctx.stage_info(name, rows=n)
        return f"{n} signatures"

    ctx.check(name, "rows", rows, needs)

@with_outputs_check
def check_fuzzy(ctx: RunContext, ref: PlanStep, _src: None) -> None:
    name, needs = ref.name, _norm_needs(ctx)
    if not _files_check(ctx, name, needs):
        return
    per, c = ctx.res(name)["sources"], ctx.cnt(name)

    def rows() -> str:
        total = 0
        for src in ctx.sources_with("normalize"):
            files = ctx.attr_files(name, src, per[src]["attributes"])
            members = ctx.rows(files)
            dups = int(ctx.q("select count(*) from read_parquet(?) where not is_canonical", [files])[0][0])
            eq(members, per[src].get("cluster_members"), f"{src}: attribute rows vs result cluster_members")
            eq(dups, per[src].get("duplicates"), f"{src}: non-canonical rows vs result duplicates")
            if f"duplicates/{src}" in c:
                eq(c[f"duplicates/{src}"], dups, f"{src}: counters duplicates/{src} vs non-canonical rows")
            ctx.src_info(src, fuzzy_marked=dups)
            total += dups
        ctx.stage_info(name, rows=total)
        return f"{total} fuzzy duplicates marked"

    ctx.check(name, "rows", rows, needs)

    def marks_files() -> list[str]:
        return [f for s in ctx.sources_with("normalize") for f in ctx.attr_files(name, s, per[s]["attributes"])]

    def clusters() -> str:
        files = marks_files()
        bad = ctx.q("select cluster_id, k from (select cluster_id, sum(is_canonical::INT) k from "
                     "read_parquet(?) group by 1) where k != 1 order by 1 limit 3", [files])
        if bad:
            raise CheckFailed(f"cluster {bad[0][0]} has {bad[0][1]} canonical members (want exactly 1)")
        n = ctx.q("select count(distinct cluster_id) from read_parquet(?)", [files])[0][0]
        return f"{n} clusters, one canonical each"

    ctx.check(name, "clusters", clusters, needs)

    def parents() -> str:
        """Each removed member names its parent, a member of its own cluster; the kept one names none."""
        files = marks_files()
        if files and "parent_id" not in {c[0] for c in ctx.con.execute(
                "select * from read_parquet(?) limit 0", [files]).description}:
            return "marks made before fuzzy dedup named parents (its stage version 5): nothing to check"
        removed, misplaced, orphan = ctx.q(
            "with m as (select * from read_parquet(?)), orphans as (select c.id from m c left join m p on "
            "p.cluster_id = c.cluster_id and p.id = c.parent_id where not c.is_canonical and p.id is null) "
            "select (select count(*) from m where not is_canonical), "
            "(select count(*) from m where is_canonical = (parent_id is not null)), (select min(id) from orphans)",
            [files])[0]
        if misplaced:
            raise CheckFailed(f"{misplaced} members: a parent on a kept one or none on a removed one")
        if orphan is not None:
            raise CheckFailed(f"document {orphan}: its parent is not a member of its cluster")
        return f"{removed} removed members, each with its parent in its cluster"

    ctx.check(name, "parents", parents, needs)
    _duplicates_envelope(ctx, name, per, needs, "fuzzy_fraction")

@with_outputs_check
def check_decontaminate(ctx: RunContext, ref: PlanStep, _src: None) -> None:
    name, needs = ref.name, _norm_needs(ctx)
    if not _files_check(ctx, name, needs):
        return
    per = ctx.res(name)["sources"]

    def rows() -> str:
        total = 0
        for src in ctx.sources_with("normalize"):
            n = ctx.rows(ctx.attr_files(name, src, per[src]["attributes"]))
            eq(n, per[src].get("contaminated"), f"{src}: attribute rows vs result contaminated")
            eq(per[src].get("docs"), ctx.docs_count(src),
                f"{src}: result docs vs {ctx.docs_step(src)} documents")
            ctx.src_info(src, decontaminate_marked=n)
            total += n
        ctx.stage_info(name, rows=total)
        return f"{total} contaminated docs marked"

    ctx.check(name, "rows", rows, needs)

    def planted() -> str:
        needles = ctx.needles()
        hits = []
        for src in ctx.sources_with("normalize"):
            for item, doc, _ in ctx.find_planted(ctx.norm_files(src)):
                hits.append((item, src, doc))
        items = sorted({h[0] for h in hits})
        ctx.summary["planted"].update(items=len({i for i, _ in needles}), found=items,
                                       found_docs=len(hits))
        if len(items) < ctx.env.planted_min_found:
            raise CheckFailed(f"{len(items)} benchmark item(s) occur verbatim in the normalized corpus, "
                              f"envelope planted_min_found is {ctx.env.planted_min_found}: the contamination "
                              "check would prove nothing")
        for item, src, doc in hits:
            marked = ctx.q("select count(*) from read_parquet(?) where id = ?",
                            [ctx.attr_files(name, src, per[src]["attributes"]), doc])[0][0]
            if not marked:
                raise CheckFailed(f"doc {doc} of {src} contains benchmark item {item} verbatim but is not marked")
        return f"{len(items)} planted item(s) found in {len(hits)} doc(s), all marked"

    ctx.check(name, "planted", planted, needs)
    ctx.check(name, "envelope", lambda: _fraction_envelope(
        ctx, name, sum(per[s].get("contaminated", 0) for s in per), "decontaminate_fraction"), needs)

@with_outputs_check
def check_consolidate(ctx: RunContext, ref: PlanStep, src: str) -> None:
    name, res, c = ref.name, ctx.res(ref.name), ctx.cnt(ref.name)
    norm = ctx.docs_step(src)
    attrs = [a for a in (ctx.artifacts[name].get("config") or {}).get("attributes", []) if ctx.has(a)]
    needs = (norm, *attrs)
    main_dir = ctx.path(name, res.get("main", DocumentsDir.MAIN))
    removed_dir = ctx.path(name, res.get("removed", DocumentsDir.REMOVED))
    names = ctx.norm_names(src) if norm not in ctx.broken else []
    main = [os.path.join(main_dir, n) for n in names]
    removed = [os.path.join(removed_dir, n) for n in names]
    dirs = (main_dir, removed_dir)
    if not ctx.check(name, "files", lambda: _consolidate_files(ctx, name, res, norm, names, dirs), (norm,),
                     breaks=True):
        return
    ctx.check(name, "sorted", lambda: _sorted_ids(ctx, main))
    ctx.check(name, "no_duplicates", lambda: _no_duplicates_kept(ctx, src, attrs, main), needs)
    ctx.check(name, "no_contamination", lambda: _no_contamination_kept(ctx, src, attrs, main), needs)
    ctx.check(name, "counts", lambda: _consolidate_counts(ctx, name, src, c, attrs, main, removed), needs)


def _consolidate_files(ctx: RunContext, name: str, res: dict, norm: str, names: list[str],
                       dirs: tuple[str, str]) -> str:
    """The main and removed dirs hold exactly the normalize step's shard names."""
    eq(res.get("num_shards"), len(names), f"result num_shards vs {norm} shards")
    for d in dirs:
        have = parquet_names(d)
        if have != names:
            missing = sorted(set(names) - set(have))
            extra = sorted(set(have) - set(names))
            raise CheckFailed(f"{ctx.rel(d)}/ has {len(have)} of {len(names)} shards"
                              + (f"; missing {', '.join(missing[:3])}" if missing else "")
                              + (f"; unexpected {', '.join(extra[:3])}" if extra else ""))
    ctx.stage_info(name, files=len(names))
    return f"{len(names)} shards (same names as {norm})"


def _sorted_ids(ctx: RunContext, main: list[str]) -> str:
    bad = ctx.q("select filename, id, p from (select filename, id, lag(id) over (partition by filename "
                 "order by file_row_number) p from read_parquet(?, filename=true, file_row_number=true)) "
                 "where p > id limit 1", [main])
    if bad:
        raise CheckFailed(f"{ctx.rel(bad[0][0])}: id {bad[0][1]} follows {bad[0][2]}: not sorted by id")
    return "every shard sorted by id"


def _no_duplicates_kept(ctx: RunContext, src: str, attrs: list[str], main: list[str]) -> str:
    """Ids unique within the output and across the other sources' outputs; no document an exact or
    fuzzy dedup step marked as a duplicate kept."""
    twice = ctx.q("select id, count(*) from read_parquet(?) group by id having count(*) > 1 "
                   "order by id limit 3", [main])
    if twice:
        raise CheckFailed(f"id {twice[0][0]} occurs {twice[0][1]} times in the output "
                          f"({len(twice)}{'+' if len(twice) == 3 else ''} duplicated ids)")
    for other in ctx.sources_with("consolidate"):
        o = f"consolidate-{other}"
        if other == src or o in ctx.broken or o not in ctx.artifacts:
            continue
        o_main = [os.path.join(ctx.path(o, DocumentsResult.of(ctx.record(o)).main_dir), n)
                  for n in ctx.norm_names(other)]
        shared = ctx.q("select min(id), count(*) from read_parquet(?) where id in "
                        "(select id from read_parquet(?))", [main, o_main])[0]
        if shared[1]:
            raise CheckFailed(f"{shared[1]} id(s) also in {o} (first {shared[0]}): a cross-source "
                              "exact duplicate survived")
    for step, where in (("exact-dedup", ""), ("fuzzy-dups", " where not is_canonical")):
        if step not in attrs:
            continue
        files = ctx.attr_files(step, src, AttributesResult.of(ctx.record(step)).attributes(src))
        hit = ctx.q(f"select min(id), count(*) from read_parquet(?) where id in "
                     f"(select id from read_parquet(?){where})", [main, files])[0]
        if hit[1]:
            raise CheckFailed(f"{hit[1]} doc(s) marked as duplicates by {step} are in the output "
                              f"(first {hit[0]})")
    return "ids unique, no marked duplicate kept"


def _no_contamination_kept(ctx: RunContext, src: str, attrs: list[str], main: list[str]) -> str:
    """No document decontaminate marked is in the output, and no planted benchmark text either."""
    if "decontaminate" in attrs:
        files = ctx.attr_files("decontaminate", src, AttributesResult.of(ctx.record("decontaminate")).attributes(src))
        hit = ctx.q("select min(id), count(*) from read_parquet(?) where id in "
                     f"(select id from read_parquet(?){_decon_where(ctx, files, kept=False)})", [main, files])[0]
        if hit[1]:
            raise CheckFailed(f"{hit[1]} doc(s) marked contaminated are in the output (first {hit[0]})")
    left = ctx.find_planted(main)
    ctx.summary["planted"].setdefault("left", 0)
    ctx.summary["planted"]["left"] += len(left)
    if left:
        item, doc, f = left[0]
        raise CheckFailed(f"benchmark item {item} is still in {ctx.rel(f)} (doc {doc})")
    return f"no benchmark text among {len(ctx.needles())} searched"


def _consolidate_counts(ctx: RunContext, name: str, src: str, c: dict, attrs: list[str], main: list[str],
                        removed: list[str]) -> str:
    """docs_in = docs_out + removals by reason, each against the files: the input documents, the output
    rows, the removed rows by reason, and the marks not already removed by an earlier reason."""
    n_in = ctx.docs_count(src)
    eq(c.get("docs_in"), n_in, f"counters.docs_in vs {ctx.docs_step(src)} documents")
    removed_c = {k: c.get(f"removed_{k}", 0) for k in ("exact", "fuzzy", "decontaminate")}
    eq(c.get("docs_out"), c.get("docs_in", 0) - sum(removed_c.values()),
        "counters.docs_out vs docs_in - removed_exact - removed_fuzzy - removed_decontaminate")
    out_rows = ctx.rows(main)
    eq(out_rows, c.get("docs_out"), "output parquet rows vs counters.docs_out")
    by_reason = dict(ctx.q("select reason, count(*) from read_parquet(?) group by 1", [removed]))
    for k, n in removed_c.items():
        eq(by_reason.get(k, 0), n, f"{DocumentsDir.REMOVED} rows with reason {k} vs counters.removed_{k}")
    expect = _expected_removals(ctx, src, attrs)
    for k, n in expect.items():
        eq(removed_c[k], n, f"counters.removed_{k} vs {k} marks not already removed by an earlier reason")
    ctx.stage_info(name, rows=out_rows)
    ctx.src_info(src, docs_in=c.get("docs_in"), docs_out=out_rows,
                 **{f"removed_{k}": n for k, n in removed_c.items()})
    return (f"{c.get('docs_in')} in = {out_rows} out + {removed_c['exact']} exact + {removed_c['fuzzy']} "
            f"fuzzy + {removed_c['decontaminate']} contaminated")


def _decon_where(ctx: RunContext, files: list[str], kept: bool) -> str:
    """The decontaminate rows that leave a document's id out of the output: action `remove` (kept=True:
    only those are counted as removed) or also `cut` (the cut text has a new id). Attribute sets from
    before actions existed remove every marked document."""
    if not files or "action" not in [r[0] for r in ctx.q("describe select * from read_parquet(?)", [files])]:
        return ""
    return " where action = 'remove'" if kept else " where action <> 'annotate'"


def _expected_removals(ctx: RunContext, src: str, attrs: list[str]) -> dict[str, int]:
    """Per reason, the marked ids consolidate must have dropped under that reason (first reason wins,
    in the order exact, fuzzy, decontaminate), computed from the attribute files themselves."""
    sets: list[tuple[str, str, list[str]]] = []
    for step, kind, where in (("exact-dedup", "exact", ""), ("fuzzy-dups", "fuzzy", " where not is_canonical"),
                              ("decontaminate", "decontaminate", None)):
        if step in attrs:
            files = ctx.attr_files(step, src, AttributesResult.of(ctx.record(step)).attributes(src))
            sets.append((kind, _decon_where(ctx, files, kept=True) if where is None else where, files))
    out: dict[str, int] = {}
    for i, (kind, where, files) in enumerate(sets):
        sql = f"select count(distinct id) from read_parquet(?){where}"
        params: list = [files]
        for _, w2, f2 in sets[:i]:
            sql += (" and" if "where" in sql else " where") + f" id not in (select id from read_parquet(?){w2})"
            params.append(f2)
        out[kind] = int(ctx.q(sql, params)[0][0])
    return out
