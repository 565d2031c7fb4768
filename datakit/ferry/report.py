"""`datakit ferry report`: one static HTML page from the ferry history, no external assets.

Everything is inline (CSS, SVG), so the page can be attached to a CI run, mailed, or opened from a
bucket without a server and without a network. What it shows, in the order an on-call reader needs it:
the latest verdict and its first failing check; run times across runs (amber = slower than mean + 1
sigma of the previous 7 successes, see history.flag_slow_runs); the runs table; the latest run's
per-step time bars, loss curve, dedup and contamination counts per source; all validator checks.
"""

from __future__ import annotations

import os
import time

from datakit.core.fsio import atomic_write_bytes
from datakit.report.html import CSS, esc, num

from .history import flag_slow_runs, is_slow, read_history, slow_baseline

COLORS = {"succeeded": "#2e7d32", "slow": "#e69500", "failed": "#c62828", "interrupted": "#757575",
          "running": "#1565c0"}
_CSS = CSS
_e = esc
_num = num


def _state(rec: dict, flag: dict) -> str:
    if rec.get("status") == "succeeded":
        return "slow" if flag["slow"] else "succeeded"
    return rec.get("status") or "failed"


def _badge(state: str) -> str:
    label = {"succeeded": "ok", "slow": "slow", "failed": "failed"}.get(state, state)
    return f'<span class="badge" style="background:{COLORS.get(state, "#555")}">{_e(label)}</span>'


# ---------------------------------------------------------------- SVG pieces
def _run_time_svg(records: list[dict], flags: list[dict]) -> str:
    w, h, pad_l, pad_b, pad_t = 760, 190, 50, 24, 12
    walls = [float(r.get("wall_s") or 0) for r in records]
    top = max(walls + [t["threshold"] or 0 for t in flags] + [1.0]) * 1.1
    n = len(records)
    slot = (w - pad_l - 10) / max(n, 1)
    bw = max(2.0, min(28.0, slot * 0.7))
    ys = lambda v: pad_t + (h - pad_t - pad_b) * (1 - v / top)  # noqa: E731
    parts = [f'<svg id="run-times" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" '
             f'aria-label="wall time per run">',
             f'<line x1="{pad_l}" y1="{ys(0)}" x2="{w - 5}" y2="{ys(0)}" stroke="#999"/>',
             f'<text x="{pad_l - 6}" y="{ys(top / 1.1) + 4:.1f}" text-anchor="end" font-size="11">'
             f'{top / 1.1:.0f}s</text>',
             f'<text x="{pad_l - 6}" y="{ys(0) + 4:.1f}" text-anchor="end" font-size="11">0</text>']
    for i, (rec, flag) in enumerate(zip(records, flags, strict=True)):
        x = pad_l + i * slot + (slot - bw) / 2
        state = _state(rec, flag)
        y = ys(walls[i])
        tip = f"{rec.get('run_id')}: {walls[i]:.1f}s, {state}"
        if flag["threshold"] is not None:
            tip += f" (amber above {flag['threshold']:.1f}s)"
            ty = ys(flag["threshold"])
            parts.append(f'<line x1="{x - 2:.1f}" y1="{ty:.1f}" x2="{x + bw + 2:.1f}" y2="{ty:.1f}" '
                         f'stroke="#e69500" stroke-dasharray="3,2"/>')
        parts.append(f'<rect class="run-bar" data-run-id="{_e(rec.get("run_id"))}" x="{x:.1f}" y="{y:.1f}" '
                     f'width="{bw:.1f}" height="{max(ys(0) - y, 1):.1f}" fill="{COLORS.get(state, "#555")}">'
                     f'<title>{_e(tip)}</title></rect>')
    if n:
        first, last = _e(records[0].get("run_id")), _e(records[-1].get("run_id"))
        parts.append(f'<text x="{pad_l}" y="{h - 6}" font-size="11">{first}</text>')
        parts.append(f'<text x="{w - 8}" y="{h - 6}" font-size="11" text-anchor="end">{last}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _step_bars_svg(rec: dict, previous: list[dict]) -> str:
    steps = [s for s in rec.get("steps") or [] if isinstance(s.get("wall_s"), (int, float))]
    if not steps:
        return '<p class="muted">No step timings (the pipeline did not run).</p>'
    row, label_w, w = 20, 230, 760
    h = row * len(steps) + 24
    top = max(float(s["wall_s"]) for s in steps) or 1.0
    scale = (w - label_w - 90) / top
    parts = [f'<svg id="step-times" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" '
             f'aria-label="wall time per step of the latest run">']
    for i, s in enumerate(steps):
        y = 8 + i * row
        name = s["name"]
        base = slow_baseline(previous, key=lambda r, n=name: _step_wall(r, n))
        slow = rec.get("status") == "succeeded" and is_slow(float(s["wall_s"]), base)
        color = COLORS["slow"] if slow else (COLORS["failed"] if s.get("status") in ("failed", "cascaded")
                                             else "#4a7bd0")
        bw = max(float(s["wall_s"]) * scale, 1.0)
        tip = f"{name}: {s['wall_s']:.2f}s ({s.get('status')})"
        if base:
            tip += f"; previous successes mean {base[0]:.2f}s, sigma {base[1]:.2f}s"
        parts.append(f'<text x="{label_w - 6}" y="{y + 12}" text-anchor="end" font-size="12">{_e(name)}</text>')
        parts.append(f'<rect class="step-bar" data-step="{_e(name)}" x="{label_w}" y="{y}" width="{bw:.1f}" '
                     f'height="{row - 6}" fill="{color}"><title>{_e(tip)}</title></rect>')
        if base:
            mx = label_w + min(base[0], top * 1.2) * scale
            parts.append(f'<line x1="{mx:.1f}" y1="{y - 1}" x2="{mx:.1f}" y2="{y + row - 5}" stroke="#222" '
                         f'stroke-width="2"><title>mean of previous successes {base[0]:.2f}s</title></line>')
        parts.append(f'<text x="{label_w + bw + 6:.1f}" y="{y + 12}" font-size="11">{s["wall_s"]:.1f}s</text>')
    parts.append("</svg>")
    return "".join(parts)


def _step_wall(rec: dict, name: str):
    for s in rec.get("steps") or []:
        if s.get("name") == name and s.get("status") == "succeeded":
            return s.get("wall_s")
    return None


def _loss_svg(rec: dict, previous: dict | None) -> str:
    loss = (rec.get("summary") or {}).get("loss") or {}
    pts = [(float(s), float(v)) for s, v in loss.get("points") or []]
    prev_loss = ((previous or {}).get("summary") or {}).get("loss") or {}
    prev = [(float(s), float(v)) for s, v in prev_loss.get("points") or []]
    evals = [(float(s), float(v)) for s, v in loss.get("eval") or []]
    if not pts:
        return '<p class="muted">No loss curve (training did not log).</p>'
    w, h, pl, pr, pt, pb = 760, 260, 56, 16, 14, 34
    allp = pts + prev + evals
    x0, x1 = 0.0, max(p[0] for p in allp) or 1.0
    y0, y1 = min(p[1] for p in allp), max(p[1] for p in allp)
    if y1 - y0 < 1e-9:
        y0, y1 = y0 - 0.5, y1 + 0.5
    sx = lambda x: pl + (w - pl - pr) * (x - x0) / (x1 - x0)  # noqa: E731
    sy = lambda y: pt + (h - pt - pb) * (1 - (y - y0) / (y1 - y0))  # noqa: E731
    poly = lambda ps: " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in ps)  # noqa: E731
    parts = [f'<svg id="loss-curve" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" '
             f'aria-label="training loss of the latest run">',
             f'<line x1="{pl}" y1="{h - pb}" x2="{w - pr}" y2="{h - pb}" stroke="#999"/>',
             f'<line x1="{pl}" y1="{pt}" x2="{pl}" y2="{h - pb}" stroke="#999"/>',
             f'<text x="{pl - 6}" y="{sy(y1) + 4:.1f}" text-anchor="end" font-size="11">{y1:.2f}</text>',
             f'<text x="{pl - 6}" y="{sy(y0) + 4:.1f}" text-anchor="end" font-size="11">{y0:.2f}</text>',
             f'<text x="{sx(x1):.1f}" y="{h - pb + 16}" text-anchor="end" font-size="11">step {x1:.0f}</text>',
             f'<text x="{pl}" y="{h - pb + 16}" font-size="11">step 0</text>']
    if prev:
        parts.append(f'<polyline points="{poly(prev)}" fill="none" stroke="#aaa" stroke-dasharray="4,3" '
                     f'stroke-width="1.5"><title>previous successful run {_e(previous.get("run_id"))}</title>'
                     '</polyline>')
    parts.append(f'<polyline class="loss-line" points="{poly(pts)}" fill="none" stroke="#1f77b4" stroke-width="2"/>')
    for x, y in pts:
        parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="#1f77b4"><title>step {x:.0f}: '
                     f'loss {y:.4f}</title></circle>')
    for x, y in evals:
        parts.append(f'<rect x="{sx(x) - 4:.1f}" y="{sy(y) - 4:.1f}" width="8" height="8" fill="#d62728">'
                     f'<title>eval at step {x:.0f}: {y:.4f}</title></rect>')
    parts.append(f'<text x="{w - pr}" y="{pt + 10}" text-anchor="end" font-size="11">'
                 f'<tspan fill="#1f77b4">train loss</tspan>'
                 + (' <tspan fill="#d62728">■ eval</tspan>' if evals else "")
                 + (' <tspan fill="#888">-- previous run</tspan>' if prev else "") + "</text>")
    parts.append("</svg>")
    return "".join(parts)


# ---------------------------------------------------------------- tables
def _runs_table(records: list[dict], flags: list[dict]) -> str:
    head = ("<tr><th class=l>run</th><th class=l>started (UTC)</th><th class=l>status</th><th>wall s</th>"
            "<th>docs in</th><th>docs out</th><th>exact</th><th>fuzzy</th><th>contaminated</th><th>planted left</th>"
            "<th>tokens</th><th>loss first → last</th><th class=l>first failing check</th></tr>")
    rows = []
    for rec, flag in reversed(list(zip(records, flags, strict=True))):
        state = _state(rec, flag)
        summ = rec.get("summary") or {}
        tot = summ.get("totals") or {}
        loss = summ.get("loss") or {}
        fail = rec.get("failing") or {}
        lossx = (f"{loss['first']:.3f} → {loss['last']:.3f}" if isinstance(loss.get("first"), (int, float))
                 and isinstance(loss.get("last"), (int, float)) else "–")
        wall = f"{float(rec.get('wall_s') or 0):.1f}"
        if flag["slow"]:
            wall += f' <span title="amber threshold {flag["threshold"]:.1f}s">▲</span>'
        failx = f"<b>{_e(fail.get('stage'))}: {_e(fail.get('check'))}</b> {_e(fail.get('message'))}" if fail else ""
        rows.append(
            f'<tr class="run-row {state}" data-run-id="{_e(rec.get("run_id"))}" data-status="{state}">'
            f'<td class=l><code>{_e(rec.get("run_id"))}</code></td><td class=l>{_e(rec.get("started", ""))}</td>'
            f"<td class=l>{_badge(state)}</td><td>{wall}</td><td>{_num(tot.get('records_in'))}</td>"
            f"<td>{_num(tot.get('docs_out'))}</td><td>{_num(tot.get('removed_exact'))}</td>"
            f"<td>{_num(tot.get('removed_fuzzy'))}</td><td>{_num(tot.get('removed_decontaminate'))}</td>"
            f"<td>{_num((summ.get('planted') or {}).get('left'))}</td><td>{_num(tot.get('tokens'))}</td>"
            f"<td>{lossx}</td><td class=l>{failx}</td></tr>")
    return f'<table id="runs">{head}{"".join(rows)}</table>'


def _sources_table(rec: dict) -> str:
    summ = rec.get("summary") or {}
    srcs = summ.get("sources") or {}
    if not srcs:
        return '<p class="muted">No per-source counts.</p>'
    cols = [("records_in", "records in"), ("normalize_dups", "in-source dups"), ("rejects", "rejects"),
            ("normalized", "normalized"), ("removed_exact", "exact dups"), ("removed_fuzzy", "fuzzy dups"),
            ("removed_decontaminate", "contaminated"), ("docs_out", "docs out"), ("tokens", "tokens")]
    head = "<tr><th class=l>source</th>" + "".join(f"<th>{_e(t)}</th>" for _, t in cols) + "</tr>"
    body = "".join(f'<tr class="source-row"><td class=l>{_e(name)}</td>'
                   + "".join(f"<td>{_num(vals.get(k))}</td>" for k, _ in cols) + "</tr>"
                   for name, vals in srcs.items())
    planted = summ.get("planted") or {}
    note = ""
    if planted:
        found = planted.get("found") or []
        note = (f'<p id="planted">Planted benchmark items: {_num(planted.get("items"))} searchable, '
                f'{len(found)} found in the normalized corpus ({_e(", ".join(found)) or "none"}), '
                f'<b>{_num(planted.get("left"))}</b> left after consolidation.</p>')
    return f'<table id="sources">{head}{body}</table>{note}'


def _checks_block(rec: dict) -> str:
    val = rec.get("validation") or {}
    checks = val.get("checks") or []
    if not checks:
        return f'<p class="muted">No validator results ({_e(rec.get("error") or "validator did not run")}).</p>'
    counts = val.get("counts") or {}
    failed = [c for c in checks if c.get("status") == "failed"]
    head = (f'<p>{_num(counts.get("ok"))} ok, <b>{_num(counts.get("failed"))} failed</b>, '
            f'{_num(counts.get("skipped"))} skipped.</p>')
    fl = "".join(f'<li class="failed-check"><b>{_e(c["stage"])}: {_e(c["check"])}</b>: {_e(c["message"])}</li>'
                 for c in failed)
    rows = "".join(f'<tr class="check-{_e(c.get("status"))}"><td class=l>{_e(c.get("stage"))}</td>'
                   f'<td class=l>{_e(c.get("check"))}</td><td class=l>{_e(c.get("status"))}</td>'
                   f'<td class=l>{_e(c.get("message"))}</td></tr>' for c in checks)
    return (head + (f"<ul>{fl}</ul>" if fl else "")
            + f'<details><summary>all {len(checks)} checks</summary><table id="checks"><tr><th class=l>stage</th>'
              f'<th class=l>check</th><th class=l>status</th><th class=l>message</th></tr>{rows}</table></details>')


def render_report(records: list[dict], *, bad_lines: list[int] | tuple = (), limit: int = 30,
                  title: str = "datakit smoke ferry", where: str = "", generated: str | None = None) -> str:
    """The page for ``records`` (oldest first, as in history.jsonl). Pure: no I/O."""
    flags_all = flag_slow_runs(records)
    shown, flags = records[-limit:], flags_all[-limit:]
    generated = generated or time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime())
    out = [f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{_e(title)}</title>"
           f"<style>{_CSS}</style></head><body>",
           f'<h1>{_e(title)}</h1><p class="muted">{_e(where)} · generated {_e(generated)} · '
           f'{len(records)} run(s) in history, last {len(shown)} shown</p>']
    if bad_lines:
        out.append(f'<p class="warn">{len(bad_lines)} unreadable history line(s) skipped '
                   f'(line {", ".join(map(str, list(bad_lines)[:10]))}).</p>')
    if not records:
        out.append('<p id="empty">No ferry runs recorded yet: run <code>datakit ferry run</code>.</p></body></html>')
        return "".join(out)
    last, last_flag = records[-1], flags_all[-1]
    state = _state(last, last_flag)
    fail = last.get("failing") or {}
    verdict = (f"first failing check <b>{_e(fail.get('stage'))}: {_e(fail.get('check'))}</b> — "
               f"{_e(fail.get('message'))}"
               if fail else "all checks passed")
    if last_flag["slow"]:
        verdict += (f"; slow: {float(last['wall_s']):.1f}s > {last_flag['threshold']:.1f}s (mean + 1σ of the "
                    f"previous {last_flag['baseline_n']} successes)")
    out.append(f'<div id="latest" class="card" data-status="{state}" style="--c:{COLORS.get(state, "#555")}">'
               f'{_badge(state)} <b>{_e(last.get("run_id"))}</b> · {float(last.get("wall_s") or 0):.1f}s · '
               f'{_e(last.get("started", ""))}<br>{verdict}</div>')
    previous = records[:-1]
    prev_ok = next((r for r in reversed(previous) if r.get("status") == "succeeded"), None)
    out.append("<h2>Run time per run</h2>" + _run_time_svg(shown, flags))
    out.append("<h2>Runs</h2>" + _runs_table(shown, flags))
    out.append(f"<h2>Steps of {_e(last.get('run_id'))}</h2>" + _step_bars_svg(last, previous))
    out.append("<h2>Training loss</h2>" + _loss_svg(last, prev_ok))
    out.append("<h2>Dedup and contamination</h2>" + _sources_table(last))
    out.append("<h2>Validator</h2>" + _checks_block(last))
    out.append("</body></html>")
    return "".join(out)


def write_report(prefix: str, out: str | None = None, limit: int = 30) -> str:
    """Render ``<prefix>/history.jsonl`` to ``out`` (default ``<prefix>/report.html``); returns the path."""
    hist = read_history(prefix)
    out = out or os.path.join(prefix, "report.html")
    page = render_report(hist.records, bad_lines=hist.bad_lines, limit=limit, where=os.path.abspath(prefix))
    atomic_write_bytes(os.path.abspath(out), page.encode("utf-8"))
    return out
