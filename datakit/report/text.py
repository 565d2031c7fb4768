"""The run summary as plain text for a terminal or a log: the steps, the data funnel per source, the
tokenizer and training figures, the stages' own lines, warnings. Columns size to their content and nothing is ever cut, so a
path reads the same at 80 columns, in a pipe or in CI."""

from __future__ import annotations

from typing import Any

from .summary import relative, removal_labels


def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for r in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        out.append("  ".join(cells).rstrip())
    return out


def _num(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:,}" if isinstance(v, int) else f"{v:.4g}" if isinstance(v, float) else str(v)


def steps_table(steps: list[dict], prefix: str) -> list[str]:
    rows = [["step", "status", "wall", "output"]]
    for s in steps:
        rows.append([s["name"], s["status"], f"{s.get('wall_s') or 0:.1f}s", relative(s.get("output") or "", prefix)])
    return _table(rows, {2})


def funnel_table(sources: dict[str, dict]) -> list[str]:
    """Rows: documents in, each removal reason in pipeline order, documents out, tokens; a column per source."""
    if not sources:
        return []
    names = list(sources)
    labels = removal_labels(sources)
    rows = [["documents", *names], ["in", *(_num(sources[n].get("docs_in")) for n in names)]]
    rows += [[f"- {label}", *(_num(sources[n].get("removed", {}).get(label)) for n in names)] for label in labels]
    rows.append(["out", *(_num(sources[n].get("docs_out")) for n in names)])
    rows.append(["tokens", *(_num(sources[n].get("tokens")) for n in names)])
    return _table(rows, set(range(1, len(names) + 1)))


def train_line(train: dict) -> str | None:
    if not train:
        return None
    parts = [f"{train.get('steps')} steps", f"final loss {_num(train.get('final_loss'))}"]
    if train.get("eval_loss") is not None:
        parts.append(f"eval loss {_num(train.get('eval_loss'))} ({_num(train.get('bpb'))} bits/byte)")
    if train.get("loss_plot"):
        parts.append(f"loss plot {train['loss_plot']}")
    return "train: " + ", ".join(parts)


def format_summary(d: dict, prefix: str) -> str:
    """The whole human summary of a `datakit run` (``d`` is RunSummary.to_dict())."""
    data = d.get("data") or {}
    lines = [f"datakit run: {d['status']} in {d.get('wall_s') or 0:.1f}s (prefix {prefix})", ""]
    lines += steps_table(d["steps"], prefix)
    funnel = funnel_table(data.get("sources") or {})
    if funnel:
        lines += [""] + funnel
    lines += list(data.get("notes") or [])  # the stages' own lines (their summarize hooks)
    if (data.get("tokenizer") or {}).get("vocab_size"):
        lines.append(f"tokenizer: vocabulary {data['tokenizer']['vocab_size']:,}")
    train = train_line(data.get("train") or {})
    if train:
        lines.append(train)
    lines += [f"warning: {w}" for w in data.get("warnings") or []]
    for s in d["steps"]:
        if s.get("error"):
            lines += ["", f"{s['name']} {s['status']}: {s['error']}"]
    return "\n".join(lines)
