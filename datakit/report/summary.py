"""The data summary of a run: per source, the funnel from documents in to documents out and tokens, and
per language where a step counted languages; the tokenizer and the training figures; and warnings for
every source a stage emptied or stripped of more than its share (the guardrail: plan.removed_share_limit,
naming the reason that removed most), whose download's size nothing confirmed, or whose listing skipped
symlinks (outside the source, or loops).

It is computed from what the steps recorded (their counters and results) read through the run's plan
(datakit.stages.plan): a source's funnel is its documents steps (``docs_in`` / ``docs_out`` counters and,
when given, ``removed/<reason>``; per language ``lang_in/``, ``lang_out/``, ``removed_lang/``), its
tokens are its token cache, the tokenizer and training figures are the plan's tokenizer and model, and a stage with more to say gives a ``summarize`` hook (sections of
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
from datakit.stages.contract import DOCUMENTS, FILES, LANG_IN, LANG_OUT, MODEL, REMOVED_LANG, TOKENIZER, TOKENS
from datakit.stages.plan import Plan

WARNING_WIDTH = 90  # a warning's lines, so that `warning: ` + a line fits 100 columns
LANGUAGE_SHARE = 0.02  # a language with a smaller share of a source's documents is shown within "other"
LANGUAGE_ROWS = 8      # at most this many languages of a source shown on their own
OTHER = "other"

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
    # per language (a step's lang_in/ counters): code -> {"in", "out", "removed": {reason: n}}, and the
    # step(s) that counted them (languages are known from language ID on; later steps do not count them)
    languages: dict[str, dict] = field(default_factory=dict)
    languages_by: list[str] = field(default_factory=list)


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
        reasons = {r: n for r, n in _removed(step).items() if n}
        said = _most(reasons)[1] if reasons else ""
        by = f" {said}" if said.startswith("by ") else f", {said}" if said else ""
        return (f"source {step.source}: emptied by {step.name} (all {docs_in} documents removed{by}); it has "
                f"nothing to tokenize or train on: fix its input or filters, or give it weight: 0")
    kept_if = (step.result or {}).get("kept_if") or f"kept by {step.name}"
    went = [f"{n} went to {component}" for component, n in moved.items()]
    removed = docs_in - sum(moved.values())
    went += [f"{removed} removed"] if removed else []
    return f"{step.source}: 0 of {docs_in} documents {kept_if} ({', '.join(went)}); it has nothing to train on"


def _most(reasons: dict[str, int]) -> tuple[str, str]:
    """The reason that removed most (the first in the stage's order on a tie) and how a warning says it:
    "by X" when it is the only one, else "most by X (n)"."""
    top = max(reasons, key=lambda r: reasons[r])
    return top, f"by {top}" if len(reasons) == 1 else f"most by {top} ({reasons[top]})"


def _languages_of(step: StepView, reason: str) -> str:
    """The languages the step removed for ``reason``, largest first ("140 de, 8 en"), when it counted them."""
    key = REMOVED_LANG
    per = {k[len(key):].split("/", 1)[0]: v for k, v in step.counters.items()
           if k.startswith(key) and k.split("/", 2)[-1] == reason and v}
    top = sorted(per.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{n} {lang}" for lang, n in top[:3]) + (", ..." if len(top) > 3 else "")


def removed_share_warning(step: StepView, limit: float, order: tuple[str, ...] = ()) -> str | None:
    """The guardrail: a warning when a per-source document step removed more than ``limit`` of its
    input but left some (an emptied source has its own warning), naming the reason that removed most
    and, when the step counted languages, the languages it removed. Why: a rule that does not fit a
    source (English stop words on German text) strips it without emptying it, and nothing else says so."""
    if step.source is None or step.kind != DOCUMENTS:
        return None
    docs_in, docs_out = _docs_in_out(step)
    if not docs_in or not docs_out:
        return None
    moved = sum(v for k, v in step.counters.items() if k.startswith("moved/"))
    removed = docs_in - docs_out - moved
    if removed / docs_in <= limit:
        return None
    reasons = _removed(step, order)
    reasons = {r: n for r, n in reasons.items() if n} or {step.stage: removed}
    top, said = _most(reasons)
    langs = _languages_of(step, top)
    text = (f"source {step.source}: {step.name} removed {removed} of {docs_in} documents ({removed / docs_in:.1%}, "
            f"more than {limit * 100:.4g}%), {said}{f': {langs}' if langs else ''}; check that its rules fit this "
            "source (its language, its kind of text)")
    return "\n  ".join(textwrap.wrap(text, WARNING_WIDTH, break_on_hyphens=False))


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
    _add_languages(funnel, step)


def _add_languages(funnel: SourceFunnel, step: StepView) -> None:
    """The step's per-language counters into the source's: documents in from the first step that counted
    languages, removed ones summed, documents out from the last."""
    c = step.counters
    ins = {k[len(LANG_IN):]: v for k, v in c.items() if k.startswith(LANG_IN)}
    if not ins:
        return
    first = not funnel.languages
    for lang, n in ins.items():
        entry = funnel.languages.setdefault(lang, {"in": 0, "out": 0, "removed": {}})
        if first:
            entry["in"] = n
    for lang, entry in funnel.languages.items():
        entry["out"] = c.get(f"{LANG_OUT}{lang}", 0)
    for k, n in c.items():
        if k.startswith(REMOVED_LANG):
            lang, reason = k[len(REMOVED_LANG):].split("/", 1)
            removed = funnel.languages.setdefault(lang, {"in": 0, "out": 0, "removed": {}})["removed"]
            removed[reason] = removed.get(reason, 0) + n
    funnel.languages_by.append(step.name)


def language_rows(funnel: dict, share: float = LANGUAGE_SHARE, most: int = LANGUAGE_ROWS) -> list[dict]:
    """A source's languages as the summary shows them (``funnel``: a SourceFunnel as a dict): each with
    at least ``share`` of its documents in, largest first, at most ``most`` of them; the rest summed as
    "other". Each row: lang, in, out, removed (reason -> n, largest first)."""
    langs = funnel.get("languages") or {}
    total = sum(e["in"] for e in langs.values()) or 1
    order = sorted(langs, key=lambda k: (-langs[k]["in"], k))
    shown = [k for k in order if langs[k]["in"] / total >= share][:most]
    rows = [{"lang": k, **langs[k]} for k in shown]
    rest = [langs[k] for k in order if k not in shown]
    if rest:
        removed: dict[str, int] = {}
        for e in rest:
            for r, n in e["removed"].items():
                removed[r] = removed.get(r, 0) + n
        rows.append({"lang": OTHER, "in": sum(e["in"] for e in rest), "out": sum(e["out"] for e in rest),
                     "removed": removed})
    for row in rows:
        row["removed"] = dict(sorted(row["removed"].items(), key=lambda kv: (-kv[1], kv[0])))
    return rows


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
        order = plan.reasons.get(step.stage, ())
        _add_document_step(out, step, order)
        guard = removed_share_warning(step, plan.removed_share_limit(step.name), order)
        out.warnings += [w for w in (symlinks_warning(step), emptied_warning(step), guard) if w]
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
