"""The report's "Documents per source": one stacked bar per source (kept, then every removal reason), its
legend and its table grouped by the stage that removed the documents, every reason in its own colour;
then, where a step counted languages, documents in and out per source and language with the reasons
that removed them (the larger languages; the rest as "other").

Why grouped: a corpus with the quality layer, user stages and dedup has 30+ removal reasons. A legend of
30 entries beside the chart ran off the page and a palette of ten colours gave `rejects`, a Gopher rule
and the classifier one orange; listed under their stage, each reason has a colour no other reason has
(`charts.distinct_colours`), and the table (a row per reason, a column per source) scrolls inside its box.
"""

from __future__ import annotations

from . import charts
from .html import esc, num, scroll, section, swatch
from .summary import language_rows, removal_labels


def grouped_labels(sources: dict[str, dict], reason_stages: dict[str, str]) -> dict[str, list[str]]:
    """Removal labels by the stage that removed them (the summary's ``reason_stages``, whose order is
    the order the summary met the stages: the pipeline's), labels in pipeline order."""
    groups: dict[str, list[str]] = {stage: [] for stage in dict.fromkeys(reason_stages.values())}
    for label in removal_labels(sources):
        groups.setdefault(reason_stages.get(label, "other"), []).append(label)
    return {stage: labels for stage, labels in groups.items() if labels}


def _legend(groups: dict[str, list[str]], colours: dict[str, str]) -> str:
    parts = [f'<div><b>kept</b>{swatch(charts.KEPT, "kept")}</div>']
    for stage, labels in groups.items():
        items = "".join(f"{swatch(colours[label], label)}{esc(label)}" for label in labels)
        parts.append(f'<div data-stage="{esc(stage)}"><b>{esc(stage)}</b>{items}</div>')
    return f"<div class=legend>{''.join(parts)}</div>"


def _row(label: str, values: list, mark: str = "") -> str:
    return f"<tr><td class=l>{mark}{esc(label)}</td>" + "".join(f"<td>{num(v)}</td>" for v in values) + "</tr>"


def _table(sources: dict[str, dict], groups: dict[str, list[str]], colours: dict[str, str]) -> str:
    """A row per figure (in, each reason under its stage, out, tokens), a column per source."""
    names = list(sources)
    head = "<th class=l>documents</th>" + "".join(f"<th>{esc(n)}</th>" for n in names)
    rows = [_row("in", [sources[n].get("docs_in") for n in names])]
    for stage, labels in groups.items():
        rows.append(f'<tr class=group><td colspan="{len(names) + 1}">removed by {esc(stage)}</td></tr>')
        rows += [_row(label, [sources[n].get("removed", {}).get(label) for n in names], swatch(colours[label], label))
                 for label in labels]
    rows.append(_row("out", [sources[n].get("docs_out") for n in names]))
    rows.append(_row("tokens", [sources[n].get("tokens") for n in names]))
    return scroll(f'<table class="funnel"><tr>{head}</tr>{"".join(rows)}</table>')


def languages_table(sources: dict[str, dict]) -> str:
    """A row per source and language: in, out, kept share, and every reason that removed some, largest
    first; empty when no step counted languages."""
    rows = []
    for name, funnel in sources.items():
        for row in language_rows(funnel):
            kept = f"{row['out'] / row['in']:.0%}" if row["in"] else "–"
            why = "; ".join(f"{esc(r)} {num(n)}" for r, n in row["removed"].items())
            rows.append(f'<tr data-source="{esc(name)}" data-lang="{esc(row["lang"])}"><td class=l>{esc(name)}</td>'
                        f'<td class=l>{esc(row["lang"])}</td><td>{num(row["in"])}</td><td>{num(row["out"])}</td>'
                        f"<td>{kept}</td><td class=l>{why}</td></tr>")
    if not rows:
        return ""
    head = "".join(f"<th{' class=l' if i in (0, 1, 5) else ''}>{h}</th>"
                   for i, h in enumerate(("source", "language", "in", "out", "kept", "removed by")))
    body = f"<table class=languages><tr>{head}</tr>{''.join(rows)}</table>"
    return f"<h3>Documents per language</h3>{scroll(body)}"


def funnel_section(data: dict) -> str:
    """The section for a data summary (``DataSummary.to_dict()``): chart, grouped legend, table, then the
    summary's warnings and the stages' own lines."""
    sources = data.get("sources") or {}
    if not sources:
        return section("funnel", "Documents per source", "<p class=muted>No per-source steps were built.</p>")
    groups = grouped_labels(sources, data.get("reason_stages") or {})
    colours = charts.reason_colours([label for labels in groups.values() for label in labels])
    warn = "".join(f"<p class=warn>{esc(w)}</p>" for w in data.get("warnings") or [])
    warn += "".join(f"<p>{esc(line)}</p>" for line in data.get("notes") or [])
    body = (charts.funnel(sources, colours) + _legend(groups, colours) + _table(sources, groups, colours)
            + languages_table(sources) + warn)
    return section("funnel", "Documents per source", body)
