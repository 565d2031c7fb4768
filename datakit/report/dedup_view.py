"""The report's near-duplicate section: the largest clusters with a sample of the kept copy and of a
removed one, and the S-curve of the LSH bands x rows the run used.

Both come from sections of the data summary that a dedup stage's `summarize` hook gives (``clusters``:
the largest clusters as its step recorded them; ``lsh``: its bands, rows and verification threshold),
so this module names no stage and draws whatever dedup stage reports them.

Why: "fuzzy dups 997" says nothing about *why*. The largest cluster and its texts do (`t0` ... `t999`
are one text once digits fold to 0), and the S-curve says which similarities the bands catch.
"""

from __future__ import annotations

from datakit.dedup.lsh_params import candidate_probability

from . import charts
from .html import esc, num, scroll, section

CURVE_POINTS = 101                                   # points of the drawn S-curve
TABLE_SIMILARITIES = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)  # the similarities its table lists


def s_curve_points(bands: int, rows: int, verify_threshold: float | None = None,
                   similarities=None) -> list[tuple[float, float]]:
    """(similarity, probability of being flagged): 1 - (1 - s^rows)^bands, 0 below the verification
    threshold (a candidate pair under it is dropped)."""
    xs = similarities if similarities is not None else [i / (CURVE_POINTS - 1) for i in range(CURVE_POINTS)]
    return [(s, 0.0 if verify_threshold is not None and s < verify_threshold
             else candidate_probability(s, bands, rows)) for s in xs]


def _lsh_html(lsh: dict) -> str:
    bands, rows = lsh.get("bands"), lsh.get("rows")
    if not bands or not rows:
        return ""
    threshold = lsh.get("verify_threshold") if lsh.get("verify") else None
    label = f"{bands} bands x {rows} rows"
    chart = charts.s_curve(s_curve_points(bands, rows, threshold), threshold, label, "lsh-curve")
    cells = "".join(f'<td data-s="{s:g}" data-p="{p:.6f}">{p:.3f}</td>'
                    for s, p in s_curve_points(bands, rows, threshold, TABLE_SIMILARITIES))
    head = "".join(f"<th>{s:g}</th>" for s in TABLE_SIMILARITIES)
    table = (f'<table class="lsh"><tr><th class=l>Jaccard similarity</th>{head}</tr>'
             f"<tr><td class=l>probability of being flagged</td>{cells}</tr></table>")
    verify = (f"verified by exact shingle Jaccard &ge; {threshold:g}" if threshold is not None
              else "candidates are not verified")
    note = (f"<p class=muted>{esc(label)}: a pair with Jaccard similarity s becomes a candidate with probability "
            f"1 - (1 - s<sup>{rows}</sup>)<sup>{bands}</sup>; {verify}. Shingles are taken after folding: "
            "every digit reads 0, case is ignored, punctuation separates words.</p>")
    return f"<h3>LSH S-curve</h3>{chart}{table}{note}"


def _clusters_html(clusters: list[dict]) -> str:
    if not clusters:
        return ""
    rows = []
    for c in clusters:
        members = ", ".join(f"{esc(s)} {num(n)}" for s, n in (c.get("members") or {}).items())
        rows.append(f'<tr class="cluster" data-size="{int(c["size"])}"><td>{num(c["size"])}</td>'
                    f"<td class=l>{members}</td><td class=l>{esc(c.get('canonical_source', ''))}"
                    f"<pre class=excerpt>{esc(c.get('kept') or '')}</pre></td>"
                    f"<td class=l>{esc(c.get('removed_source', ''))}<pre class=excerpt>{esc(c.get('removed') or '')}"
                    "</pre></td></tr>")
    head = ("<tr><th>documents</th><th class=l>members per source</th><th class=l>kept copy (source, text)</th>"
            "<th class=l>a removed copy (source, text)</th></tr>")
    table = f"<table class=clusters>{head}{''.join(rows)}</table>"
    return f"<h3>Largest clusters</h3>{scroll(table)}"


def dedup_section(data: dict) -> str:
    """The section for a data summary (``DataSummary.to_dict()``); empty when no stage reported either."""
    body = _clusters_html(data.get("clusters") or []) + _lsh_html(data.get("lsh") or {})
    return section("dedup", "Near-duplicates", body) if body else ""
