"""HTML building blocks shared by the run report (`datakit report`) and the ferry's report page: one
stylesheet, escaping, number formatting, tables and sections, so the two pages read alike."""

from __future__ import annotations

import html
from typing import Any, Iterable

CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;background:#fafafa}
h1{margin:0 0 4px}h2{margin:28px 0 8px;font-size:18px}.muted{color:#666}
.card{background:#fff;border:1px solid #ddd;border-left:8px solid var(--c);padding:12px 16px;border-radius:4px}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-weight:600;font-size:12px}
table{border-collapse:collapse;background:#fff}th,td{border:1px solid #ddd;padding:4px 8px;text-align:right}
th{background:#f0f0f0}td.l,th.l{text-align:left}tr.failed td{background:#fdecea}tr.slow td{background:#fff6e0}
.warn{background:#fff6e0;border:1px solid #e69500;padding:6px 10px}svg{background:#fff;border:1px solid #ddd}
code{font-size:12px}details{margin-top:8px}pre.excerpt{white-space:pre-wrap;background:#fff;border:1px solid #eee;
padding:6px;max-height:8em;overflow:auto;font-size:12px}.charts{display:flex;flex-wrap:wrap;gap:12px}
svg.chart{max-width:100%;height:auto}.scroll{max-width:100%;overflow:auto;max-height:40em}h3{margin:16px 0 6px;font-size:15px}
.legend{display:flex;flex-wrap:wrap;gap:4px 18px;margin:6px 0;font-size:12px}.legend div{max-width:100%}
.sw{display:inline-block;width:11px;height:11px;margin:0 4px 0 8px;vertical-align:-1px;border:1px solid #888}
tr.group td{background:#f6f6f6;font-weight:600;text-align:left}
"""


def esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def num(x: Any, digits: int = 0) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return f"{x:,}" if isinstance(x, int) else esc(x)


def table(headers: Iterable[str], rows: Iterable[Iterable[Any]], *, left: int = 1, cls: str = "") -> str:
    """A table whose first ``left`` columns are left-aligned text, the rest right-aligned numbers."""
    head = "".join(f"<th class=l>{esc(h)}</th>" if i < left else f"<th>{esc(h)}</th>" for i, h in enumerate(headers))
    body = []
    for row in rows:
        cells = [f"<td class=l>{esc(c)}</td>" if i < left else f"<td>{num(c, 4 if isinstance(c, float) else 0)}</td>"
                 for i, c in enumerate(row)]
        body.append("<tr>" + "".join(cells) + "</tr>")
    attr = f' class="{esc(cls)}"' if cls else ""
    return f"<table{attr}><tr>{head}</tr>{''.join(body)}</table>"


def scroll(body: str) -> str:
    """A box that scrolls what does not fit (a wide or long table) instead of running off the page."""
    return f"<div class=scroll>{body}</div>"


def swatch(colour: str, label: str) -> str:
    """A colour square for a legend or a table row (``data-reason``/``data-colour`` say which is which)."""
    return f'<span class=sw style="background:{esc(colour)}" data-reason="{esc(label)}" data-colour="{esc(colour)}"></span>'


def section(anchor: str, title: str, body: str) -> str:
    return f'<section id="{esc(anchor)}"><h2>{esc(title)}</h2>{body}</section>'


def page(title: str, subtitle: str, sections: Iterable[str]) -> str:
    return (f"<!DOCTYPE html><html><head><meta charset=utf-8><title>{esc(title)}</title><style>{CSS}</style>"
            f"</head><body><h1>{esc(title)}</h1><p class=muted>{esc(subtitle)}</p>{''.join(sections)}</body></html>")
