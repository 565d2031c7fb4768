"""`datakit report`: a static HTML page for any run, from its prefix (or its manifest's current plan).

Everything comes from the run's plan (datakit.stages.plan: which steps hold each source's documents, its
token cache, the attribute sets, the mixture and the model) and what the steps wrote (artifact.json
records; the parquet outputs read with DuckDB; the token caches' results; the training metrics), so the
page works for any stage list, never names a stage, and covers runs made by `datakit run`, the API or
the ferry. Sections: the per-source funnel,
removal reasons with sample documents and their measured values, histograms (document length, language
and its score, quality score, dedup cluster sizes), tokens per source against the planned mixture, the
loss curves, and time per step.
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
from .html import esc, num, page, section, table
from .summary import StepView, data_summary, removal_labels

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
def _funnel_section(steps: list[BuiltStep], plan: Plan, prefix: str) -> str:
    data = data_summary([s.view for s in steps], plan, prefix).to_dict()
    sources = data["sources"]
    if not sources:
        return section("funnel", "Documents per source", "<p class=muted>No per-source steps were built.</p>")
    labels = removal_labels(sources)
    rows = [[name, f.get("docs_in"), *(f.get("removed", {}).get(k) for k in labels), f.get("docs_out"), f.get("tokens")]
            for name, f in sources.items()]
    warn = "".join(f"<p class=warn>{esc(w)}</p>" for w in data.get("warnings") or [])
    warn += "".join(f"<p>{esc(line)}</p>" for line in data.get("notes") or [])
    body = (charts.funnel(sources) + table(["source", "docs in", *labels, "docs out", "tokens"], rows, cls="funnel")
            + warn)
    return section("funnel", "Documents per source", body)


def _samples_html(kind: str, step: str, groups: list[tuple]) -> str:
    parts = []
    for reason, n, samples in groups:
        items = "".join(f"<li><code>{esc(a)}</code> {esc(b or '')}<pre class=excerpt>{esc(c or '')}</pre></li>"
                        for a, b, c in samples)
        parts.append(f'<details class="reason" data-step="{esc(step)}" data-reason="{esc(reason)}"><summary>'
                     f"{esc(step)}: {esc(kind)} <b>{esc(reason)}</b>: {num(n)}</summary><ul>{items}</ul></details>")
    return "".join(parts)


def _removals_section(con, steps: list[BuiltStep], plan: Plan) -> str:
    by_name = {s.view.name: s for s in steps}
    parts = []
    for s in steps:
        if s.view.source is None or s.view.kind != DOCUMENTS:
            continue
        parts.append(_samples_html("rejected", s.view.name, reject_samples(con, s)))
        parts.append(_samples_html("removed", s.view.name, dup_samples(con, s)))
        source = by_name.get(plan.input_of(s.view.name) or "")
        parts.append(_samples_html("removed", s.view.name, removal_samples(con, s, source)))
    body = "".join(parts) or "<p class=muted>Nothing was removed or rejected.</p>"
    return section("removals", "Removal reasons, with samples", body)


def _final_documents(steps: list[BuiltStep], plan: Plan) -> dict[str, list[str]]:
    """Per source (or component), the documents that were tokenized: the last step of its chain."""
    by_name = {s.view.name: s for s in steps}
    last = {source: by_name.get(plan.documents(source) or "") for source in plan.chains}
    return {source: _main_files(s) for source, s in last.items() if s is not None and _main_files(s)}


def _histograms_section(con, steps: list[BuiltStep], plan: Plan) -> str:
    files = _parquet([f for fs in _final_documents(steps, plan).values() for f in fs])
    charts_html = []
    if files:
        lengths = _column(con, files, "length(text)", "text")
        if lengths:
            charts_html.append(charts.histogram(lengths, "characters per document", "hist-length", log_x=True))
        langs = _column(con, files, "lang", "lang")
        if langs:
            counts: dict[str, int] = {}
            for lang in langs:
                counts[lang] = counts.get(lang, 0) + 1
            top = sorted(counts.items(), key=lambda kv: -kv[1])[:20]
            charts_html.append(charts.bars([k for k, _ in top], [v for _, v in top], "documents", "hist-lang"))
        for column, chart_id in (("lang_score", "hist-lang-score"), ("quality_score", "hist-quality")):
            values = _column(con, files, column, column)
            if values:
                charts_html.append(charts.histogram(values, column, chart_id))
    sizes = _cluster_sizes(con, steps, plan)
    if sizes:
        charts_html.append(charts.histogram(sizes, "documents per near-duplicate cluster", "hist-clusters"))
    body = f"<div class=charts>{''.join(charts_html)}</div>" if charts_html else "<p class=muted>No documents.</p>"
    return section("histograms", "Distributions", body)


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


def _mixture_section(steps: list[BuiltStep], plan: Plan) -> str:
    caches = {step: source for source, step in plan.tokens.items()}
    tokens = {caches[s.view.name]: TokensResult.of(s.view).total_tokens for s in steps if s.view.name in caches}
    train = _product(steps, plan.model)
    weights = (train.artifact.get("config") or {}).get("weights") if train else None
    resolved = ModelResult.of(train.view).phases if train else None
    if resolved:  # a `mixture:` section: the weights the run trained on (first phase), not the manifest's
        weights = resolved[0]["weights"]
    if not tokens:
        return section("mixture", "Tokens and mixture", "<p class=muted>No token caches.</p>")
    total_t = sum(tokens.values()) or 1
    total_w = sum((weights or {}).values()) or 1
    rows = [[n, t, t / total_t, ((weights or {}).get(n, 0.0) / total_w) if weights else None]
            for n, t in tokens.items()]
    body = charts.bars(list(tokens), list(tokens.values()), "tokens", "tokens-chart") + table(
        ["source", "tokens", "token share", "mixture weight"], rows, cls="mixture")
    return section("mixture", "Tokens and mixture", body)


def _search_section(steps: list[BuiltStep], plan: Plan) -> str:
    """The mixture search: every proxy's weights against its target loss; the chosen mixture beside
    proportional, with their measured (and predicted) target bits per byte. Empty without a search."""
    search = _product(steps, plan.mixture)
    res = MixtureResult.of(search.view) if search else None
    if res is None or not res.proxies or res.baseline is None:
        return ""
    base, chosen = res.baseline, res.chosen
    facts = table(["mixture", "weights", "predicted bpb", "measured bpb"],
                  [["proportional", _weights_text(base.weights), base.predicted_bpb, base.measured_bpb],
                   ["chosen", _weights_text(chosen.weights), chosen.predicted_bpb, chosen.measured_bpb]], left=2)
    fit = res.fit or {}
    note = (f"<p class=muted>fit: {esc(fit.get('formula', ''))}; R² {num(fit.get('r2'), 3)}, leave-one-out RMSE "
            f"{num(fit.get('loo_rmse'), 4)} bpb over {len(res.proxies)} proxies; mixture file: "
            f"{esc(search.view.name)}/{esc(res.file or '')}</p>")
    body = (charts.proxy_scatter(res.proxies, "mix-proxies-chart")
            + charts.mixture_pair(base.weights, chosen.weights, ("proportional", "chosen"), "mix-choice-chart")
            + facts + note)
    return section("mixture-search", "Mixture search", body)


def _weights_text(weights: dict) -> str:
    return ", ".join(f"{n} {float(w):.3f}" for n, w in weights.items())


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
    walls = [(s.view.name, float(s.artifact.get("wall_s") or 0)) for s in steps]
    if not walls:
        return section("time", "Time per step", "<p class=muted>No steps.</p>")
    return section("time", "Time per step", charts.bars([n for n, _ in walls], [w for _, w in walls], "seconds",
                                                          "time-chart"))


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
    sections = [_funnel_section(steps, plan, prefix), _removals_section(con, steps, plan),
                _histograms_section(con, steps, plan), _mixture_section(steps, plan), _search_section(steps, plan),
                _loss_section(steps, plan), _time_section(steps)]
    sections = [s for s in sections if s]
    return page(title, f"{prefix} · {len(steps)} built steps", sections)


def write_run_report(prefix: str, out: str | None = None, plan: Plan | None = None) -> str:
    from datakit.core.fsio import atomic_write_bytes

    path = out or os.path.join(prefix, "report.html")
    atomic_write_bytes(path, render_run_report(prefix, plan).encode("utf-8"))
    return path

