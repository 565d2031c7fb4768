"""The data summary of a run: per source, the funnel from documents in to documents out and tokens, the
tokenizer and the training figures, and warnings for every source a stage emptied, whose download's
size nothing confirmed, or whose listing skipped symlinks (outside the source, or loops).

It is computed from what the steps recorded (their counters and results) read through the run's plan
(datakit.stages.plan): a source's funnel is its documents steps (``docs_in`` / ``docs_out`` counters and,
when given, ``removed/<reason>``), its tokens are its token cache, the tokenizer and training figures are
the plan's tokenizer and model, and a stage with more to say gives a ``summarize`` hook (sections of
this summary and lines for its text). So it covers any stage list and never names a stage. `datakit run`
prints it, `--json` carries it, the API returns it (`RunSummary.data`), and `datakit report` draws it.
"""

from __future__ import annotations

import posixpath
import textwrap
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from datakit.core.listing import Listing
from datakit.core.results import FilesResult, ModelResult, TokenizerResult, TokensResult
from datakit.stages.contract import DOCUMENTS, FILES, MODEL, TOKENIZER, TOKENS
from datakit.stages.plan import Plan

WARNING_WIDTH = 90  # a warning's lines, so that `warning: ` + a line fits 100 columns

@dataclass
class SourceFunnel:
    """One source's documents through the pipeline, in step order."""

    docs_in: int | None = None
    removed: dict[str, int] = field(default_factory=dict)   # label -> documents removed, in step order
    docs_out: int | None = None                              # documents left after the last document step
    tokens: int | None = None                                # train + validation tokens
    tokenized_docs: int | None = None
    validation_docs: int | None = None                       # documents in its validation split
    emptied_by: str | None = None                            # the step that left no documents


@dataclass
class DataSummary:
    sources: dict[str, SourceFunnel] = field(default_factory=dict)
    tokenizer: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    stages: dict[str, Any] = field(default_factory=dict)   # sections the stages' summarize hooks gave
    reason_stages: dict[str, str] = field(default_factory=dict)  # removal label -> the stage that removed
    notes: list[str] = field(default_factory=list)         # their lines, in plan order
    warnings: list[str] = field(default_factory=list)
    # Per-file reuse in the steps this run built (steps/reuse.py): step -> {"reused": n, "computed": m}.
    reuse: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {**d.pop("stages"), **d}


@dataclass(frozen=True)
class StepView:
    """What the summary reads of one step: its tags, counters and result (None when not built)."""

    name: str
    stage: str
    source: str | None
    counters: dict[str, int]
    result: dict | None
    output: str | None
    kind: str | None = None   # the kind of data the plan says it produces
    status: str | None = None  # what this run did with it (succeeded: built now; skipped: reused whole)


def emptied_warning(step: StepView) -> str | None:
    """A warning when a per-source document step left its source without documents. Documents a step
    passed to another component (``moved/<component>`` counters: a quality tier's documents that went to
    another tier) are not removed, so the warning says where they went, and by the step's own criterion
    when its result gives one (``kept_if``: "scored ≥ 0.8")."""
    if step.source is None or step.kind != DOCUMENTS:
        return None
    docs_in, docs_out = _docs_in_out(step)
    if docs_out != 0 or not docs_in:
        return None
    moved = {k.split("/", 1)[1]: v for k, v in step.counters.items() if k.startswith("moved/") and v}
    if not moved:
        return (f"source {step.source}: emptied by {step.name} (all {docs_in} documents removed); it has nothing "
                f"to tokenize or train on: fix its input or filters, or give it weight: 0")
    kept_if = (step.result or {}).get("kept_if") or f"kept by {step.name}"
    went = [f"{n} went to {component}" for component, n in moved.items()]
    removed = docs_in - sum(moved.values())
    went += [f"{removed} removed"] if removed else []
    return f"{step.source}: 0 of {docs_in} documents {kept_if} ({', '.join(went)}); it has nothing to train on"


def unsized_warning(step: StepView) -> str | None:
    """A warning when a download kept files nothing confirmed whole (``allow_unsized: true``): a
    connection closed early would have looked the same, so the reader should know."""
    if step.kind != FILES:
        return None
    names = [f.name for f in FilesResult.of(step).files if f.size_unconfirmed]
    if not names:
        return None
    listed = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return (f"source {step.source}: size unconfirmed for {len(names)} downloaded file(s) ({listed}): the server "
            "sent no length or digest and allow_unsized: true accepted them; pin sha256 to confirm them")


def symlinks_warning(step: StepView) -> str | None:
    """A warning when normalize's listing skipped symlinks (outside the source, looping, broken): files
    the source's folder shows but the run did not read."""
    c, r = step.counters, step.result or {}
    said = Listing(symlinks_outside=c.get("symlinks_outside_skipped", 0), symlink_loops=r.get("symlink_loops") or [],
                   symlinks_broken=r.get("symlinks_broken") or []).skipped_links()
    return f"source {step.source}: {said}" if said else None


def _docs_in_out(step: StepView) -> tuple[int | None, int | None]:
    return step.counters.get("docs_in"), step.counters.get("docs_out")


def _removed(step: StepView, order: tuple[str, ...] = ()) -> dict[str, int]:
    """Documents removed per reason (``removed/<reason>`` counters), in the order its stage applies them
    (``order``, the plan's record of the stage's reasons; others after, alphabetically); a step that
    gives no reason counts its losses under its stage's name."""
    reasons = {k.split("/", 1)[1]: v for k, v in step.counters.items() if k.startswith("removed/")}
    if reasons:
        rank = {r: i for i, r in enumerate(order)}
        return dict(sorted(reasons.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])))
    docs_in, docs_out = _docs_in_out(step)
    if docs_in is None or docs_out is None:
        return {}
    return {step.stage: docs_in - docs_out}


def _add_document_step(out: DataSummary, step: StepView, order: tuple[str, ...]) -> None:
    funnel = out.sources.setdefault(step.source, SourceFunnel())
    docs_in, docs_out = _docs_in_out(step)
    if funnel.docs_in is None and docs_in is not None:
        funnel.docs_in = docs_in
    for label, n in _removed(step, order).items():
        funnel.removed[label] = funnel.removed.get(label, 0) + n
        out.reason_stages.setdefault(label, step.stage)
    if docs_out is not None:
        funnel.docs_out = docs_out
        if docs_out == 0 and docs_in and funnel.emptied_by is None:
            funnel.emptied_by = step.name


def _add_tokens(funnel: SourceFunnel, step: StepView) -> None:
    cache = TokensResult.of(step)
    funnel.tokens = cache.total_tokens
    funnel.tokenized_docs = cache.total_docs
    if "validation" in cache.splits:
        funnel.validation_docs = int(cache.splits["validation"].docs or 0)


def no_validation_warning(sources: dict[str, SourceFunnel], weights: dict[str, float]) -> str | None:
    """A warning when some components with documents and a weight (``weights``; a name not in it
    counts) have no validation documents (a validation_fraction too small for them): the eval loss
    then comes from fewer components than training mixes, and nothing else says so."""
    tokenized = {n: f for n, f in sources.items() if f.tokenized_docs and weights.get(n, 1.0) > 0}
    empty = [n for n, f in tokenized.items() if f.validation_docs == 0]
    if not empty:
        return None
    text = (f"no validation documents in {len(empty)} of {len(tokenized)} tokenized components "
            f"({', '.join(empty)}): the eval loss comes from {len(tokenized) - len(empty)} of them only; "
            "raise tokenize.validation_fraction to give each at least one")
    return "\n  ".join(textwrap.wrap(text, WARNING_WIDTH, break_on_hyphens=False))


def _train_figures(step: StepView, prefix: str) -> dict[str, Any]:
    m = ModelResult.of(step)
    out = {"steps": m.steps, "final_loss": m.final_loss, "eval_loss": m.eval_loss, "bpb": m.bpb,
           "tokens_per_sec": m.tokens_per_sec, "num_params": m.num_params, "skipped_steps": m.skipped_steps}
    if m.skipped_sources:
        out["skipped_sources"] = m.skipped_sources
    if step.output and m.plot_path:
        out["loss_plot"] = relative(posixpath.join(step.output, m.plot_path), prefix)
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


def _stage_summary(out: DataSummary, step: StepView) -> None:
    """What the step's own stage says about it (its `summarize` hook), if the stage is registered."""
    from datakit.stages.registry import STAGES

    stage = next((s for s in STAGES if s.name == step.stage), None)
    said = stage.summarize(step.counters, step.result or {}) if stage and stage.summarize else None
    if said is not None:
        out.stages.update(said.sections)
        out.notes.extend(said.lines)
        out.warnings.extend(said.warnings)


def _add_step(out: DataSummary, step: StepView, plan: Plan, prefix: str) -> None:
    if step.kind == DOCUMENTS and step.source is not None:
        _add_document_step(out, step, plan.reasons.get(step.stage, ()))
        out.warnings += [w for w in (symlinks_warning(step), emptied_warning(step)) if w]
    elif step.kind == FILES and step.source is not None:
        warning = unsized_warning(step)
        if warning:
            out.warnings.append(warning)
    elif step.kind == TOKENS and step.source is not None:
        _add_tokens(out.sources.setdefault(step.source, SourceFunnel()), step)
    elif step.kind == TOKENIZER:
        out.tokenizer = {"vocab_size": TokenizerResult.of(step).vocab}
    elif step.kind == MODEL:
        out.train = _train_figures(step, prefix)
        for name in out.train.get("skipped_sources") or []:
            out.warnings.append(f"source {name}: no training tokens; training skipped it (weight ignored)")


def _add_reuse(out: DataSummary, step: StepView) -> None:
    """A step built in this run that took files from its earlier build: how many, and how many it computed."""
    c = step.counters
    if step.status == "succeeded" and "files/reused" in c:
        out.reuse[step.name] = {"reused": int(c["files/reused"]), "computed": int(c.get("files/computed", 0))}


def reuse_note(reuse: dict[str, dict[str, int]]) -> str | None:
    """One line on per-file reuse, when this run rebuilt steps that took files from their earlier builds."""
    reused = sum(r["reused"] for r in reuse.values())
    if not reused:
        return None
    total = reused + sum(r["computed"] for r in reuse.values())
    computed = [f"{name} {r['computed']}/{r['reused'] + r['computed']}" for name, r in reuse.items() if r["computed"]]
    return (f"incremental: {len(reuse)} rebuilt steps took {reused:,} of {total:,} files from their earlier builds"
            + (f"; computed: {', '.join(computed)}" if computed else "; computed none"))


def data_summary(steps: Iterable[StepView], plan: Plan, prefix: str) -> DataSummary:
    """The data summary of the built steps, in plan order (module docstring)."""
    out = DataSummary()
    for step in steps:
        if step.result is None or plan.step(step.name) is None:
            continue
        _add_step(out, step, plan, prefix)
        _stage_summary(out, step)
        _add_reuse(out, step)
    warning = no_validation_warning(out.sources, plan.weights())
    if warning:
        out.warnings.append(warning)
    return out


def views(summary: Any, plan: Plan) -> list[StepView]:
    """StepViews of a RunSummary's steps (tags from the plan, results from its records)."""
    out = []
    for entry in summary.steps:
        step = plan.step(entry["name"])
        rec = summary.records.get(entry["name"])
        out.append(StepView(entry["name"], step.stage if step else "", step.source if step else None,
                            dict(entry.get("counters") or {}), rec.result if rec else None, entry.get("output"),
                            step.kind if step else None, entry.get("status")))
    return out
