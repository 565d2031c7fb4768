"""`datakit report`: a static HTML page for any run, from its prefix (or its manifest's current plan).

Everything comes from the run's plan (datakit.stages.plan: which steps hold each source's documents, its
token cache, the attribute sets, the mixture and the model) and what the steps wrote (artifact.json
records; the parquet outputs read with DuckDB; the token caches' results; the training metrics), so the
page works for any stage list, never names a stage, and covers runs made by `datakit run`, the API or
the ferry. Sections: the per-source funnel (removal reasons grouped by stage, funnel_view), removal
reasons with sample documents and their measured values, the largest near-duplicate clusters and the
LSH S-curve (dedup_view), distributions per source (document length, language and its score, quality
score; dedup cluster sizes), tokens per component against the weights training used (mixture_view),
the loss curves, and time per stage (its steps folded).

Stage-specific content arrives through the plan (kinds, attribute steps) or the data summary's sections
that a stage's `summarize` hook gives (``clusters``, ``lsh``, ``contamination``...), never by stage name.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import duckdb

from datakit.core.layout import TrainDir
from datakit.core.results import DocumentsResult, MixtureResult, ModelResult, TokensResult
from datakit.stages.contract import ATTRIBUTES, DOCUMENTS
from datakit.stages.plan import Plan, read_plan

from . import charts
from .dedup_view import dedup_section
from .funnel_view import funnel_section
from .html import esc, num, page, scroll, section, table
from .mixture_view import mixture_section, search_section
from .summary import StepView, data_summary

SAMPLES_PER_REASON = 3
EXCERPT_CHARS = 300


@dataclass(frozen=True)
class BuiltStep:
    view: StepView
    artifact: dict
    path: str


def _read_artifact(d: str) -> dict | None:
    try:
        with open(os.path.join(d, ".status"), encoding="utf-8") as f:
            if json.load(f).get("status") != "SUCCESS":
                return None
        with open(os.path.join(d, "artifact.json"), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def load_steps(prefix: str, plan: Plan) -> list[BuiltStep]:
    """The plan's built steps under a prefix, in the order they finished (which respects dependencies)."""
    built = []
    for ref in plan.steps:
        path = os.path.join(prefix, ref.dirname)
        art = _read_artifact(path)
        if art is None:
            continue
        view = StepView(ref.name, ref.stage, ref.source, art.get("counters") or {}, art.get("result") or {}, path,
                        ref.kind)
        built.append(BuiltStep(view, art, path))
    return sorted(built, key=lambda b: b.artifact.get("finished", ""))


# ------------------------------------------------------------------ queries
def _parquet(files: list[str]) -> str | None:
    files = [f for f in files if os.path.exists(f)]
    return "[" + ", ".join("'" + f.replace("'", "''") + "'" for f in files) + "]" if files else None


def _main_files(step: BuiltStep) -> list[str]:
    res = DocumentsResult.of(step.view)
    if res.main_files:
        return [os.path.join(step.path, r) for r in res.main_files]
    main = os.path.join(step.path, res.main_dir)
    return sorted(os.path.join(main, n) for n in os.listdir(main) if n.endswith(".parquet")) \
        if os.path.isdir(main) else []


def _removed_files(step: BuiltStep) -> list[str]:
    res = DocumentsResult.of(step.view)
    if res.removed_files:
        return [os.path.join(step.path, r) for r in res.removed_files]
    d = os.path.join(step.path, res.removed_dir)
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".parquet")) if os.path.isdir(d) else []


def removal_samples(con, step: BuiltStep, source: BuiltStep | None) -> list[tuple]:
    """(reason, removed, [(id, detail, excerpt)]) per reason of one step's removed documents."""
    removed = _parquet(_removed_files(step))
    if removed is None:
        return []
    docs = _parquet(_main_files(source)) if source is not None else None
    text = f"substr(d.text, 1, {EXCERPT_CHARS})" if docs else "NULL"
    join = f"left join read_parquet({docs}) d on d.id = r.id" if docs else ""
    rows = con.execute(f"""
        select reason, count(*) over (partition by reason) as n, r.id, r.detail, {text} as excerpt
        from read_parquet({removed}) r {join}
        qualify row_number() over (partition by reason order by r.id) <= {SAMPLES_PER_REASON}
        order by reason, r.id""").fetchall()
    out: dict[str, tuple[int, list]] = {}
    for reason, n, doc_id, detail, excerpt in rows:
        out.setdefault(reason, (n, []))[1].append((doc_id, detail, excerpt))
    return [(reason, n, samples) for reason, (n, samples) in out.items()]


def dup_samples(con, step: BuiltStep) -> list[tuple]:
    """Normalize's in-source duplicates (later copies of a text already kept), with their text."""
    files = _parquet([os.path.join(step.path, r) for r in DocumentsResult.of(step.view).dups_files or []])
    if files is None:
        return []
    rows = con.execute(f"""
        select id, count(*) over (), source_id, substr(text, 1, {EXCERPT_CHARS}) from read_parquet({files})
        qualify row_number() over (order by id) <= {SAMPLES_PER_REASON} order by id""").fetchall()
    return [("in-source dups", rows[0][1], [(i, sid, t) for i, _, sid, t in rows])] if rows else []


def reject_samples(con, step: BuiltStep) -> list[tuple]:
    files = _parquet([os.path.join(step.path, r) for r in DocumentsResult.of(step.view).rejects_files or []])
    if files is None:
        return []
    rows = con.execute(f"""
        select reason, count(*) over (partition by reason), file || ':' || line, detail,
               substr(excerpt, 1, {EXCERPT_CHARS})
        from read_parquet({files})
        qualify row_number() over (partition by reason order by file, line) <= {SAMPLES_PER_REASON}
        order by reason, file, line""").fetchall()
    out: dict[str, tuple[int, list]] = {}
    for reason, n, where, detail, excerpt in rows:
        out.setdefault(reason, (n, []))[1].append((where, detail, excerpt))
    return [(reason, n, samples) for reason, (n, samples) in out.items()]


def _column(con, files: str, expr: str, column: str) -> list:
    names = {r[0] for r in con.execute(f"describe select * from read_parquet({files}, union_by_name=true)").fetchall()}
    if column not in names:
        return []
    return [r[0] for r in con.execute(f"select {expr} from read_parquet({files}, union_by_name=true) "
                                      f"where {column} is not null").fetchall()]


# ------------------------------------------------------------------ sections
def _samples_html(kind: str, step: str, groups: list[tuple]) -> str:
    parts = []
    for reason, n, samples in groups:
        items = "".join(f"<li><code>{esc(a)}</code> {esc(b or '')}<pre class=excerpt>{esc(c or '')}</pre></li>"
                        for a, b, c in samples)
        parts.append(f'<details class="reason" data-step="{esc(step)}" data-reason="{esc(reason)}"><summary>'
                     f"{esc(step)}: {esc(kind)} <b>{esc(reason)}</b>: {num(n)}</summary><ul>{items}</ul></details>")
    return "".join(parts)


def _removals_section(con, steps: list[BuiltStep], plan: Plan) -> str:
    """Every per-source step's removal reasons with samples, under the stage that removed them."""
    by_name = {s.view.name: s for s in steps}
    by_stage: dict[str, list[str]] = {}
    for s in steps:
        if s.view.source is None or s.view.kind != DOCUMENTS:
            continue
        source = by_name.get(plan.input_of(s.view.name) or "")
        parts = (_samples_html("rejected", s.view.name, reject_samples(con, s))
                 + _samples_html("removed", s.view.name, dup_samples(con, s))
                 + _samples_html("removed", s.view.name, removal_samples(con, s, source)))
        if parts:
            by_stage.setdefault(s.view.stage, []).append(parts)
    body = "".join(f'<h3 data-stage="{esc(stage)}">{esc(stage)}</h3>{"".join(parts)}'
                   for stage, parts in by_stage.items())
    return section("removals", "Removal reasons, with samples",
                   body or "<p class=muted>Nothing was removed or rejected.</p>")


def _final_documents(steps: list[BuiltStep], plan: Plan) -> dict[str, list[str]]:
    """Per source (or component), the documents that were tokenized: the last step of its chain."""
    by_name = {s.view.name: s for s in steps}
    last = {source: by_name.get(plan.documents(source) or "") for source in plan.chains}
    return {source: _main_files(s) for source, s in last.items() if s is not None and _main_files(s)}


# (column, the value plotted, axis title, chart id): the distributions drawn per source when present
DISTRIBUTIONS = (("text", "length(text)", "characters per document", "hist-length"),
                 ("lang", "lang", "documents per language", "hist-lang"),
                 ("lang_score", "lang_score", "lang_score", "hist-lang-score"),
                 ("quality_score", "quality_score", "quality_score", "hist-quality"))
TOP_LANGUAGES = 12


def _distribution_chart(values: list, source: str, column: str, title: str, chart_id: str) -> str:
    if column != "lang":
        return charts.histogram(values, title, chart_id, log_x=column == "text", heading=source)
    counts: dict[str, int] = {}
    for lang in values:
        counts[lang] = counts.get(lang, 0) + 1
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_LANGUAGES]
    return charts.bars([k for k, _ in top], [v for _, v in top], title, chart_id, heading=source, width=3.7)


def _histograms_section(con, steps: list[BuiltStep], plan: Plan) -> str:
    """Each distribution once per source (or component), side by side: pooled, a code source's lengths
    and a web source's languages hid each other."""
    per_source = {n: _parquet(fs) for n, fs in _final_documents(steps, plan).items()}
    groups = []
    for column, expr, title, chart_id in DISTRIBUTIONS:
        drawn = []
        for source, files in per_source.items():
            values = _column(con, files, expr, column) if files else []
            if values:
                drawn.append(_distribution_chart(values, source, column, title, f"{chart_id}-{source}"))
        if drawn:
            groups.append(f'<h3>{esc(title)}</h3><div class=charts id="{chart_id}">{"".join(drawn)}</div>')
    sizes = _cluster_sizes(con, steps, plan)
    if sizes:
        groups.append("<h3>near-duplicate clusters</h3><div class=charts>"
                      + charts.histogram(sizes, "documents per near-duplicate cluster", "hist-clusters") + "</div>")
    return section("histograms", "Distributions per source", "".join(groups) or "<p class=muted>No documents.</p>")


def _cluster_sizes(con, steps: list[BuiltStep], plan: Plan) -> list[int]:
    """The size of every near-duplicate cluster (one row per cluster: its canonical member), from the
    attribute sets that record clusters (a ``cluster_size`` column)."""
    attributes = {a.name for a in plan.of_kind(ATTRIBUTES)}
    sizes: list[int] = []
    for step in (s for s in steps if s.view.name in attributes):
        files = _parquet([os.path.join(root, n) for root, _, names in os.walk(step.path) for n in names
                          if n.endswith(".parquet")])
        if files is None or not _column(con, files, "1", "cluster_size"):
            continue
        sizes += [r[0] for r in con.execute(f"select cluster_size from read_parquet({files}, union_by_name=true) "
                                            "where is_canonical").fetchall()]
    return sizes


def _product(steps: list[BuiltStep], name: str | None) -> BuiltStep | None:
    return next((s for s in steps if s.view.name == name), None) if name else None


def _mixture(steps: list[BuiltStep], plan: Plan) -> str:
    built = {s.view.name: s for s in steps}
    caches = {source: TokensResult.of(built[name].view) for source, name in plan.tokens.items() if name in built}
    train = _product(steps, plan.model)
    return mixture_section(caches, plan.weights(),
                           (train.artifact.get("config") or {}, ModelResult.of(train.view).phases) if train else None)


def _search(steps: list[BuiltStep], plan: Plan) -> str:
    search = _product(steps, plan.mixture)
    return search_section(search.view.name, MixtureResult.of(search.view)) if search else ""


def _loss_section(steps: list[BuiltStep], plan: Plan) -> str:
    train = _product(steps, plan.model)
    metrics = os.path.join(train.path, TrainDir.METRICS) if train else None
    if not metrics or not os.path.exists(metrics):
        return section("loss", "Loss", "<p class=muted>No training run.</p>")
    recs = [json.loads(line) for line in open(metrics, encoding="utf-8") if line.strip()]
    train_pts = [(r["step"], r["loss_window_mean"]) for r in recs
                 if r.get("kind") == "train" and r.get("loss_window_mean") is not None]
    eval_pts = [(r["step"], r["loss"]) for r in recs if r.get("kind") == "eval" and r.get("loss") is not None]
    res = ModelResult.of(train.view)
    facts = table(["figure", "value"], [["steps", res.steps], ["final train loss", res.final_loss],
                                        ["eval loss", res.eval_loss], ["bits per byte", res.bpb]])
    return section("loss", "Loss", charts.lines({"train loss": train_pts, "eval loss": eval_pts}, "step",
                                                "loss (nats/token)", "loss-chart") + facts)


def _time_section(steps: list[BuiltStep]) -> str:
    """Time per stage (its steps folded: a corpus of 7 sources has 70 steps), each step in a table below."""
    if not steps:
        return section("time", "Time per stage", "<p class=muted>No steps.</p>")
    per_stage: dict[str, list[BuiltStep]] = {}
    for s in steps:
        per_stage.setdefault(s.view.stage or s.view.name, []).append(s)
    labels = [f"{stage} ({len(built)} step{'s' if len(built) > 1 else ''})" for stage, built in per_stage.items()]
    walls = [sum(float(s.artifact.get("wall_s") or 0) for s in built) for built in per_stage.values()]
    rows = sorted(([s.view.name, s.view.stage, float(s.artifact.get("wall_s") or 0)] for s in steps),
                  key=lambda r: -r[2])
    folded = (f"<details><summary>every step ({len(steps)})</summary>"
              f"{scroll(table(['step', 'stage', 'seconds'], rows, left=2, cls='steps'))}</details>")
    return section("time", "Time per stage", charts.bars(labels, walls, "seconds", "time-chart") + folded)


def published_plan(prefix: str) -> Plan:
    """The plan the last run under ``prefix`` published (FileNotFoundError naming what to do if none)."""
    plan = read_plan(prefix)
    if plan is None:
        raise FileNotFoundError(f"{prefix}: no plan.json (no run has published its plan here); "
                                "rerun `datakit run`, or give the manifest instead of the prefix")
    return plan


def render_run_report(prefix: str, plan: Plan | None = None, title: str = "datakit run report") -> str:
    """The page for ``plan``'s built steps under ``prefix`` (default: the plan the prefix holds)."""
    plan = plan or published_plan(prefix)
    steps = load_steps(prefix, plan)
    con = duckdb.connect()
    data = data_summary([s.view for s in steps], plan, prefix).to_dict()
    sections = [funnel_section(data), _removals_section(con, steps, plan), dedup_section(data),
                _histograms_section(con, steps, plan), _mixture(steps, plan), _search(steps, plan),
                _loss_section(steps, plan), _time_section(steps)]
    sections = [s for s in sections if s]
    return page(title, f"{prefix} · {len(steps)} built steps", sections)


def write_run_report(prefix: str, out: str | None = None, plan: Plan | None = None) -> str:
    from datakit.core.fsio import atomic_write_bytes

    path = out or os.path.join(prefix, "report.html")
    atomic_write_bytes(path, render_run_report(prefix, plan).encode("utf-8"))
    return path

