"""The data summary of a run: per source, the funnel from documents in to documents out and tokens, the
tokenizer and the training figures, and warnings for every source a stage emptied or whose download's
size nothing confirmed.

It is computed from what the steps recorded (their counters and results, tagged with the stage and
source that built them), so it covers any stage list: the built-in stages by their known counters, any
other per-source step (user stages, filters) by its ``docs_in`` / ``docs_out`` counters and, when it
gives them, its ``removed/<reason>`` counters. `datakit run` prints it, `--json` carries it, the API
returns it (`RunSummary.data`), and `datakit report` draws it.
"""

from __future__ import annotations

import posixpath
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

# How the built-in stages' counters read as funnel rows: (label, counter).
_NORMALIZE_REMOVED = (("rejects", "rejects"), ("in-source dups", "dups"), ("empty", "empty_dropped"))
_CONSOLIDATE_REMOVED = (("exact dups", "removed_exact"), ("fuzzy dups", "removed_fuzzy"),
                        ("contaminated", "removed_decontaminate"))


@dataclass
class SourceFunnel:
    """One source's documents through the pipeline, in step order."""

    docs_in: int | None = None
    removed: dict[str, int] = field(default_factory=dict)   # label -> documents removed, in step order
    docs_out: int | None = None                              # documents left after the last document step
    tokens: int | None = None                                # train + validation tokens
    tokenized_docs: int | None = None
    emptied_by: str | None = None                            # the step that left no documents


@dataclass
class DataSummary:
    sources: dict[str, SourceFunnel] = field(default_factory=dict)
    tokenizer: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    contamination: dict[str, dict[str, int]] = field(default_factory=dict)  # benchmark -> source -> docs flagged
    classifier: dict[str, Any] = field(default_factory=dict)  # quality classifier: held-out metrics, examples
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class StepView:
    """What the summary reads of one step: its tags, counters and result (None when not built)."""

    name: str
    stage: str
    source: str | None
    counters: dict[str, int]
    result: dict | None
    output: str | None


def emptied_warning(step: StepView) -> str | None:
    """A warning when a per-source document step left its source without documents."""
    if step.source is None:
        return None
    docs_in, docs_out = _docs_in_out(step)
    if docs_out == 0 and docs_in:
        return (f"source {step.source}: emptied by {step.name} (all {docs_in} documents removed); it has nothing "
                f"to tokenize or train on: fix its input or filters, or give it weight: 0")
    return None


def unsized_warning(step: StepView) -> str | None:
    """A warning when a download kept files nothing confirmed whole (``allow_unsized: true``): a
    connection closed early would have looked the same, so the reader should know."""
    if step.stage != "download":
        return None
    names = [f.get("name") for f in (step.result or {}).get("files") or [] if f.get("size_unconfirmed")]
    if not names:
        return None
    listed = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return (f"source {step.source}: size unconfirmed for {len(names)} downloaded file(s) ({listed}): the server "
            "sent no length or digest and allow_unsized: true accepted them; pin sha256 to confirm them")


def _docs_in_out(step: StepView) -> tuple[int | None, int | None]:
    c = step.counters
    if step.stage == "normalize":
        return c.get("records_in"), c.get("records_out")
    if "docs_in" in c or "docs_out" in c:
        return c.get("docs_in"), c.get("docs_out")
    return None, None


def _removed(step: StepView) -> dict[str, int]:
    c = step.counters
    if step.stage == "normalize":
        return {label: c.get(key, 0) for label, key in _NORMALIZE_REMOVED}
    if step.stage == "consolidate":
        return {label: c.get(key, 0) for label, key in _CONSOLIDATE_REMOVED}
    reasons = {k.split("/", 1)[1]: v for k, v in c.items() if k.startswith("removed/")}
    if reasons:
        return reasons
    docs_in, docs_out = _docs_in_out(step)
    if docs_in is None or docs_out is None:
        return {}
    label = (step.result or {}).get("stage") or step.name.removesuffix(f"-{step.source}")
    return {label: docs_in - docs_out}


def _add_document_step(funnel: SourceFunnel, step: StepView) -> None:
    docs_in, docs_out = _docs_in_out(step)
    if funnel.docs_in is None and docs_in is not None:
        funnel.docs_in = docs_in
    for label, n in _removed(step).items():
        funnel.removed[label] = funnel.removed.get(label, 0) + n
    if docs_out is not None:
        funnel.docs_out = docs_out
        if docs_out == 0 and docs_in and funnel.emptied_by is None:
            funnel.emptied_by = step.name


def _add_tokens(funnel: SourceFunnel, step: StepView) -> None:
    splits = (step.result or {}).get("splits") or {}
    funnel.tokens = sum(int(s.get("tokens", 0)) for s in splits.values())
    funnel.tokenized_docs = sum(int(s.get("docs", 0)) for s in splits.values())


def _train_figures(step: StepView, prefix: str) -> dict[str, Any]:
    r = step.result or {}
    out = {k: r.get(k) for k in ("steps", "final_loss", "eval_loss", "bpb", "tokens_per_sec", "num_params",
                                 "skipped_steps")}
    if r.get("skipped_sources"):
        out["skipped_sources"] = r["skipped_sources"]
    if step.output and r.get("plot_path"):
        out["loss_plot"] = relative(posixpath.join(step.output, r["plot_path"]), prefix)
    return out


def contamination(counters: dict[str, int]) -> dict[str, dict[str, int]]:
    """Documents flagged per benchmark and per source, from the decontaminate step's
    ``contaminated/<source>/<benchmark>`` counters."""
    out: dict[str, dict[str, int]] = {}
    for key, n in sorted(counters.items()):
        parts = key.split("/")
        if len(parts) == 3 and parts[0] == "contaminated":
            out.setdefault(parts[2], {})[parts[1]] = n
    return out


def removal_labels(sources: dict[str, dict]) -> list[str]:
    """Every removal reason of every source, in pipeline order: a reason first seen in a later source goes
    right after the reason that precedes it in that source (quality filters before exact dedup)."""
    labels: list[str] = []
    for funnel in sources.values():
        previous = None
        for label in funnel.get("removed", {}):
            if label not in labels:
                labels.insert(labels.index(previous) + 1 if previous in labels else 0, label)
            previous = label
    return labels


def relative(path: str, prefix: str) -> str:
    """A path as the user reads it: relative to the run's prefix (never truncated)."""
    root = prefix.rstrip("/") + "/"
    return path[len(root):] if path.startswith(root) else path


def data_summary(steps: Iterable[StepView], prefix: str) -> DataSummary:
    """The data summary of the built steps, in plan order (module docstring)."""
    out = DataSummary()
    for step in steps:
        if step.result is None:
            continue
        if step.source is not None:
            funnel = out.sources.setdefault(step.source, SourceFunnel())
            if step.stage == "tokenize":
                _add_tokens(funnel, step)
            elif step.stage not in ("download",) and not step.stage.startswith(("minhash", "fuzzy")):
                _add_document_step(funnel, step)
            for warning in (emptied_warning(step), unsized_warning(step)):
                if warning:
                    out.warnings.append(warning)
        elif step.stage == "decontaminate":
            out.contamination = contamination(step.counters)
        elif step.stage == "quality_classifier":
            out.classifier = {"metrics": step.result.get("metrics"), **step.counters}
        elif step.stage == "tokenizer":
            out.tokenizer = {"vocab_size": step.result.get("vocab_size") or
                             (step.result.get("identity") or {}).get("vocab_size")}
        elif step.stage == "train":
            out.train = _train_figures(step, prefix)
            for name in out.train.get("skipped_sources") or []:
                out.warnings.append(f"source {name}: no training tokens; training skipped it (weight ignored)")
    return out


def views(summary: Any, steps: Iterable[Any]) -> list[StepView]:
    """StepViews of a RunSummary's steps (tags from the planned Steps, results from its records)."""
    by_name = {s.name: s for s in steps}
    out = []
    for entry in summary.steps:
        step = by_name.get(entry["name"])
        rec = summary.records.get(entry["name"])
        out.append(StepView(entry["name"], getattr(step, "stage", "") or "", getattr(step, "source", None),
                            dict(entry.get("counters") or {}), rec.result if rec else None, entry.get("output")))
    return out
