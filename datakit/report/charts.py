"""Charts for the reports, drawn with matplotlib as inline SVG (headless, no files, reproducible bytes)."""

from __future__ import annotations

import io
from typing import Sequence

from .summary import removal_labels

_PALETTE = ["#1f77b4", "#ff7f0e", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
            "#17becf", "#aec7e8"]  # no green: green is "kept"


def _figure(width: float = 7.6, height: float = 3.0):
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100)


def _svg(fig, chart_id: str) -> str:
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    return text[text.index("<svg"):].replace("<svg", f'<svg id="{chart_id}" class="chart"', 1)


def funnel(sources: dict[str, dict], chart_id: str = "funnel-chart") -> str:
    """Per source, one stacked bar: the documents kept, then each removal reason, in pipeline order."""
    names = list(sources)
    labels = removal_labels(sources)
    fig = _figure(9.0, 1.0 + 0.5 * max(len(names), 1))
    ax = fig.add_subplot()
    left = [float(sources[n].get("docs_out") or 0) for n in names]
    ax.barh(names, left, color="#2e7d32", label="kept")
    for i, label in enumerate(labels):
        vals = [float(sources[n].get("removed", {}).get(label) or 0) for n in names]
        ax.barh(names, vals, left=left, color=_PALETTE[i % len(_PALETTE)], label=label)
        left = [a + b for a, b in zip(left, vals)]
    ax.invert_yaxis()
    ax.set_xlabel("documents")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return _svg(fig, chart_id)


def histogram(values: Sequence[float], title: str, chart_id: str, *, bins: int = 30, log_x: bool = False) -> str:
    import numpy as np

    fig = _figure(3.7, 2.6)
    ax = fig.add_subplot()
    data = np.asarray(values, dtype=float)
    if log_x and len(data):
        data = np.log10(np.maximum(data, 1))
        ax.set_xlabel(f"log10 {title}")
    else:
        ax.set_xlabel(title)
    ax.hist(data, bins=bins, color="#4a7bd0")
    ax.set_ylabel("count")
    return _svg(fig, chart_id)


def bars(labels: Sequence[str], values: Sequence[float], xlabel: str, chart_id: str) -> str:
    fig = _figure(7.6, 0.6 + 0.32 * max(len(labels), 1))
    ax = fig.add_subplot()
    ax.barh(list(labels), list(values), color="#4a7bd0")
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.tick_params(axis="y", labelsize=8)
    return _svg(fig, chart_id)


def lines(series: dict[str, Sequence[tuple[float, float]]], xlabel: str, ylabel: str, chart_id: str) -> str:
    fig = _figure()
    ax = fig.add_subplot()
    for i, (name, pts) in enumerate(series.items()):
        style = {"marker": "s", "linestyle": "none"} if name.startswith("eval") else {"linewidth": 2}
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color=_PALETTE[i % len(_PALETTE)], label=name, **style)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, color="#e0e0e0")
    ax.legend(fontsize=8)
    return _svg(fig, chart_id)


def proxy_scatter(proxies: Sequence[dict], chart_id: str) -> str:
    """The mixture search: each proxy's weight of each component (x) against its measured target bits
    per byte (y), one colour per component; proxy 0 (the proportional baseline) is ringed."""
    fig = _figure()
    ax = fig.add_subplot()
    names = sorted(proxies[0]["weights"]) if proxies else []
    for i, name in enumerate(names):
        xs = [float(p["weights"].get(name, 0.0)) for p in proxies]
        ys = [float(p["measured_bpb"]) for p in proxies]
        ax.scatter(xs, ys, color=_PALETTE[i % len(_PALETTE)], label=name, s=28)
        ax.scatter(xs[:1], ys[:1], facecolors="none", edgecolors="black", s=90)
    ax.set_xlabel("component weight in the proxy's mixture (ringed: proportional)")
    ax.set_ylabel("target bits per byte")
    ax.grid(True, color="#e0e0e0")
    ax.legend(fontsize=8)
    return _svg(fig, chart_id)


def mixture_pair(baseline: dict[str, float], chosen: dict[str, float], labels: tuple[str, str], chart_id: str) -> str:
    """Two mixtures side by side per component (the chosen one beside proportional)."""
    names = sorted(set(baseline) | set(chosen))
    fig = _figure(7.6, 0.8 + 0.45 * max(len(names), 1))
    ax = fig.add_subplot()
    ys = list(range(len(names)))
    ax.barh([y - 0.2 for y in ys], [baseline.get(n, 0.0) for n in names], height=0.4, color="#7f7f7f",
            label=labels[0])
    ax.barh([y + 0.2 for y in ys], [chosen.get(n, 0.0) for n in names], height=0.4, color="#1f77b4", label=labels[1])
    ax.set_yticks(ys, names)
    ax.invert_yaxis()
    ax.set_xlabel("weight")
    ax.legend(fontsize=8, loc="lower right")
    return _svg(fig, chart_id)
