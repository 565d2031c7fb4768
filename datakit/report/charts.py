"""Charts for the reports, drawn with matplotlib as inline SVG (headless, no files, reproducible bytes)."""

from __future__ import annotations

import colorsys
import io
from typing import Sequence

_PALETTE = ["#1f77b4", "#ff7f0e", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
            "#17becf", "#aec7e8"]  # no green: green is "kept"
# Removal reasons: 30 hand-picked colours that read apart (no green: green is "kept"), then generated ones.
_DISTINCT = _PALETTE + ["#ffbb78", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5",
                        "#393b79", "#843c39", "#7b4173", "#e7ba52", "#6b6ecf", "#d6616b", "#ce6dbd", "#bd9e39",
                        "#5254a3", "#ad494a", "#a55194", "#8c6d31"]
KEPT = "#2e7d32"


def distinct_colours(n: int) -> list[str]:
    """``n`` different colours, none green: the hand-picked ones, then hues stepped by the golden ratio
    (skipping greens) at alternating saturation and brightness, so a report with 33 removal reasons
    never gives two of them one colour."""
    out = list(_DISTINCT[:n])
    i = 0
    while len(out) < n:
        hue = (0.13 + 0.618034 * i) % 1.0
        i += 1
        if 0.2 < hue < 0.45:  # greens
            continue
        sat, val = ((0.85, 0.55), (0.5, 0.9), (0.75, 0.75))[i % 3]
        colour = "#%02x%02x%02x" % tuple(round(c * 255) for c in colorsys.hsv_to_rgb(hue, sat, val))
        if colour not in out and colour != KEPT:
            out.append(colour)
    return out


def reason_colours(labels: Sequence[str]) -> dict[str, str]:
    """One colour per removal label, in the order given (the report orders them by stage)."""
    return dict(zip(labels, distinct_colours(len(labels))))


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


def funnel(sources: dict[str, dict], colours: dict[str, str], chart_id: str = "funnel-chart") -> str:
    """Per source, one stacked bar: the documents kept, then each removal reason in ``colours``' order
    (its legend is the page's, grouped by stage: a matplotlib legend of 30 reasons does not fit)."""
    names = list(sources)
    fig = _figure(9.0, 1.0 + 0.4 * max(len(names), 1))
    ax = fig.add_subplot()
    left = [float(sources[n].get("docs_out") or 0) for n in names]
    ax.barh(names, left, color=KEPT, label="kept")
    for label, colour in colours.items():
        vals = [float(sources[n].get("removed", {}).get(label) or 0) for n in names]
        ax.barh(names, vals, left=left, color=colour, label=label, edgecolor="white", linewidth=0.3)
        left = [a + b for a, b in zip(left, vals)]
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=8)
    ax.set_xlabel("documents")
    return _svg(fig, chart_id)


def histogram(values: Sequence[float], title: str, chart_id: str, *, bins: int = 30, log_x: bool = False,
              heading: str | None = None) -> str:
    import numpy as np

    fig = _figure(3.7, 2.6)
    ax = fig.add_subplot()
    if heading:
        ax.set_title(heading, fontsize=9)
    data = np.asarray(values, dtype=float)
    if log_x and len(data):
        data = np.log10(np.maximum(data, 1))
        ax.set_xlabel(f"log10 {title}")
    else:
        ax.set_xlabel(title)
    ax.hist(data, bins=bins, color="#4a7bd0")
    ax.set_ylabel("count")
    return _svg(fig, chart_id)


def bars(labels: Sequence[str], values: Sequence[float], xlabel: str, chart_id: str, *, heading: str | None = None,
         width: float = 7.6) -> str:
    """Horizontal bars; each bar's SVG element has the id ``<chart_id>-bar-<i>`` (so a test can count them)."""
    fig = _figure(width, 0.6 + 0.32 * max(len(labels), 1) + (0.3 if heading else 0))
    ax = fig.add_subplot()
    drawn = ax.barh(list(labels), list(values), color="#4a7bd0")
    for i, patch in enumerate(drawn):
        patch.set_gid(f"{chart_id}-bar-{i}")
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.tick_params(axis="y", labelsize=8)
    if heading:
        ax.set_title(heading, fontsize=9)
    return _svg(fig, chart_id)


def s_curve(points: Sequence[tuple[float, float]], threshold: float | None, label: str, chart_id: str) -> str:
    """Probability that a pair becomes a candidate (y) against its Jaccard similarity (x), with the
    verification threshold (pairs below it are dropped however they were found)."""
    fig = _figure(5.5, 3.0)
    ax = fig.add_subplot()
    ax.plot([p[0] for p in points], [p[1] for p in points], color=_PALETTE[0], linewidth=2, label=label)
    if threshold is not None:
        ax.axvline(threshold, color=_PALETTE[2], linestyle="--", linewidth=1,
                   label=f"verification threshold {threshold:g}")
    ax.set_xlabel("Jaccard similarity of a pair (shingle sets)")
    ax.set_ylabel("probability of being flagged")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.grid(True, color="#e0e0e0")
    ax.legend(fontsize=8, loc="upper left")
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
