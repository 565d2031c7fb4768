"""The run summary as plain text for a terminal or a log: the steps, the data funnel per source, the
per-language table (where a step counted languages), the tokenizer and training figures, the stages' own
lines, warnings, failures (steps a failure kept from running grouped on one line per failure). Columns
size to their content and no value is ever cut; the tables fit ``WIDTH`` columns (a step's output shown
by its identity, since its directory is ``<name>-<identity>``; a funnel with many sources continued
below; a row that cannot fit wrapped), and ``wide`` gives the full table with every output's path.
Warnings and failures wrap to ``WIDTH`` with a hanging indent, each starting on a line of its own
(``warning: ...``, ``<step> failed: ...``) so grep finds it."""

from __future__ import annotations

import textwrap
from collections import defaultdict
from typing import Any

from .summary import language_rows, relative, removal_labels, reuse_note

WIDTH = 100  # the summary's tables fit a terminal of this many columns unless asked for the wide form


def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for r in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        out.append("  ".join(cells).rstrip())
    return out


def _fitted(rows: list[list[str]], right: set[int], width: int | None) -> list[str]:
    """The table, or, when a row would not fit ``width``, each row's first cell on a line of its own
    and the other cells as a table indented below it (long names stay whole)."""
    lines = _table(rows, right)
    if width is None or max(len(x) for x in lines) <= width:
        return lines
    rest = _table([r[1:] for r in rows], {i - 1 for i in right if i})
    return [x for r, tail in zip(rows, rest) for x in (r[0], "    " + tail)]


def _num(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:,}" if isinstance(v, int) else f"{v:.4g}" if isinstance(v, float) else str(v)


def _where(step: dict, prefix: str, wide: bool) -> str:
    """A step's output: its path relative to the prefix (wide), else its identity (the directory is
    ``<name>-<identity>``), marked when the output is in the mirror rather than the prefix."""
    if wide:
        return relative(step.get("output") or "", prefix)
    return (step.get("identity") or "") + (" (mirror)" if step.get("location") == "mirror" else "")


def steps_table(steps: list[dict], prefix: str, wide: bool = False) -> list[str]:
    rows = [["step", "status", "wall", "output" if wide else "identity"]]
    for s in steps:
        rows.append([s["name"], s["status"], f"{s.get('wall_s') or 0:.1f}s", _where(s, prefix, wide)])
    return _fitted(rows, {2}, None if wide else WIDTH)


def funnel_table(sources: dict[str, dict], width: int | None = None) -> list[str]:
    """Rows: documents in, each removal reason in pipeline order, documents out, tokens; a column per
    source. Within ``width``, the sources that do not fit continue in another table below."""
    if not sources:
        return []
    labels = removal_labels(sources)
    heads = ["documents", "in", *(f"- {label}" for label in labels), "out", "tokens"]

    def column(n: str) -> list[str]:
        src = sources[n]
        return [n, _num(src.get("docs_in")), *(_num(src.get("removed", {}).get(x)) for x in labels),
                _num(src.get("docs_out")), _num(src.get("tokens"))]

    groups: list[list[list[str]]] = [[]]
    used = max(len(h) for h in heads)
    for col in (column(n) for n in sources):
        need = 2 + max(len(c) for c in col)
        if width is not None and groups[-1] and used + need > width:
            groups.append([])
            used = max(len(h) for h in heads)
        groups[-1].append(col)
        used += need
    out: list[str] = []
    for cols in groups:
        rows = [[h, *(c[i] for c in cols)] for i, h in enumerate(heads)]
        out += ([""] if out else []) + _table(rows, set(range(1, len(cols) + 1)))
    return out


def _kept(row: dict) -> str:
    return f"{row['out'] / row['in']:.0%}" if row["in"] else "-"


def _removed_by(removed: dict[str, int], wide: bool) -> str:
    """The reasons that removed a language's documents, largest first: the first (all when ``wide``)."""
    items = [f"{r} {n:,}" for r, n in removed.items()]
    if wide or len(items) <= 1:
        return ", ".join(items)
    return f"{items[0]} (+{len(items) - 1} more)"


def language_table(sources: dict[str, dict], wide: bool = False) -> list[str]:
    """Documents in and out per source and language (the languages above a small share; the rest as
    "other") and the reasons that removed them: for sources whose steps counted languages."""
    rows = [["source", "language", "in", "out", "kept", "removed by"]]
    for name, funnel in sources.items():
        for i, row in enumerate(language_rows(funnel)):
            rows.append([name if i == 0 else "", row["lang"], _num(row["in"]), _num(row["out"]), _kept(row),
                         _removed_by(row["removed"], wide)])
    if len(rows) == 1:
        return []
    return ["documents per language (in: documents that reached language ID):"] + _fitted(rows, {2, 3, 4}, None if wide else WIDTH)


def train_lines(train: dict) -> list[str]:
    """Training's figures, and the loss plot on a line of its own (a path is never cut)."""
    if not train:
        return []
    parts = [f"{train.get('steps')} steps", f"final loss {_num(train.get('final_loss'))}"]
    if train.get("eval_loss") is not None:
        parts.append(f"eval loss {_num(train.get('eval_loss'))} ({_num(train.get('bpb'))} bits/byte)")
    lines = ["train: " + ", ".join(parts)]
    if train.get("loss_plot"):
        lines.append(f"train: loss plot {train['loss_plot']}")
    return lines


def failure_lines(steps: list[dict]) -> list[str]:
    """Each failed step with its error; the steps it kept from running on one line per cause."""
    lines = [f"{s['name']} {s['status']}: {s['error']}" for s in steps if s.get("error") and s["status"] != "cascaded"]
    not_run: dict[str, int] = defaultdict(int)
    for s in steps:
        if s["status"] == "cascaded":
            not_run[s.get("error") or "not run"] += 1
    lines += [f"{n} step{'' if n == 1 else 's'} not run: {error}" for error, n in not_run.items()]
    return lines


def wrapped(text: str, width: int = WIDTH) -> list[str]:
    """A warning or error as lines of at most ``width`` columns where words allow (a URL or path is never
    broken): each of its own lines that is too long continues on lines indented two spaces more."""
    out: list[str] = []
    for line in text.splitlines() or [""]:
        if len(line) <= width:
            out.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip()) + 2)
        out += textwrap.wrap(line, width, subsequent_indent=indent, break_long_words=False,
                             break_on_hyphens=False)
    return out


def format_summary(d: dict, prefix: str, wide: bool = False) -> str:
    """The whole human summary of a `datakit run` (``d`` is RunSummary.to_dict()); its tables fit
    ``WIDTH`` columns unless ``wide``."""
    data = d.get("data") or {}
    lines = [f"datakit run: {d['status']} in {d.get('wall_s') or 0:.1f}s", f"prefix: {prefix}", ""]
    lines += steps_table(d["steps"], prefix, wide)
    funnel = funnel_table(data.get("sources") or {}, None if wide else WIDTH)
    if funnel:
        lines += [""] + funnel
    languages = language_table(data.get("sources") or {}, wide)
    if languages:
        lines += [""] + languages
    lines += list(data.get("notes") or [])  # the stages' own lines (their summarize hooks)
    note = reuse_note(data.get("reuse") or {})
    if note:
        lines += wrapped(note)
    if (data.get("tokenizer") or {}).get("vocab_size"):
        lines.append(f"tokenizer: vocabulary {data['tokenizer']['vocab_size']:,}")
    lines += train_lines(data.get("train") or {})
    lines += [line for w in data.get("warnings") or [] for line in wrapped(f"warning: {w}")]
    failures = [line for f in failure_lines(d["steps"]) for line in wrapped(f)]
    return "\n".join(lines + ([""] + failures if failures else []))
