"""Step events as the lines a person reads while a run goes on (the CLI, the API's logger, the ferry's log):
one line for what the run builds and reuses, started (and why, unless it is simply the first build),
finished with wall time, failed, waiting on another run, reused after waiting on another run's lease,
a worker retried, records rejected, training progress, and a warning the moment a stage empties a
source. Steps reused as they are and steps not run because a dependency failed get no line of their
own: the first line counts the one, the run summary groups the other by the failure behind it."""

from __future__ import annotations

import time
from typing import Any

from .summary import StepView, emptied_warning

_SHOWN = ("run_started", "step_started", "step_succeeded", "step_skipped", "step_failed", "step_waiting",
          "step_log", "step_worker_retried")


def event_lines(ev: dict, steps: dict[str, Any]) -> list[str]:
    """Zero or more lines for one event; ``steps`` maps step names to planned Steps (stage, source tags)."""
    kind = ev.get("event")
    if kind not in _SHOWN:
        return []
    stamp, name = time.strftime("%H:%M:%S"), ev.get("step")
    if kind == "run_started":
        build = len(ev.get("build") or ())
        return [f"[{stamp}] {build} step{'' if build == 1 else 's'} to build, "
                f"{len(ev.get('steps') or ()) - build} reused"]
    if kind == "step_log":
        return [f"[{stamp}] {name}: {ev.get('message')}"]
    if kind == "step_waiting":
        holder = ev.get("holder") or {}
        return [f"[{stamp}] waiting: {name} is being built by another run ({holder.get('owner')} on "
                f"{holder.get('host')}, pid {holder.get('pid')}); it will be used when that run finishes"]
    if kind == "step_worker_retried":
        return [f"[{stamp}] retried: {name}: {ev.get('label')}: {ev.get('cause')} ({ev.get('detail')}); "
                f"attempt {ev.get('attempt')} (outputs are unaffected)"]
    if kind == "step_skipped":  # only one another run built while this one waited says more than the count
        return [f"[{stamp}] reused: {name}: {ev['reason']}"] if ev.get("reason") else []
    extra = f" ({ev['wall_s']:.1f}s)" if ev.get("wall_s") is not None else ""
    shown_reason = kind == "step_started" and ev.get("reason") and not ev.get("first_build")
    why = f": {ev['reason']}" if shown_reason else ""
    err = f": {ev['error']}" if ev.get("error") else ""
    lines = [f"[{stamp}] {kind.replace('step_', '')}: {name}{extra}{why}{err}"]
    if kind == "step_succeeded":
        lines += _rejected_line(stamp, name, dict(ev.get("counters") or {}))
        step = steps.get(name)
        if step is not None:
            warning = emptied_warning(StepView(name, step.stage, step.source, dict(ev.get("counters") or {}), {}, None))
            if warning:
                lines.append(f"[{stamp}] warning: {warning}")
    return lines


def _rejected_line(stamp: str, name: str, counters: dict[str, int]) -> list[str]:
    """Records a step quarantined, by reason: never only "succeeded"."""
    if not counters.get("rejects"):
        return []
    reasons = ", ".join(f"{k.split('/', 1)[1]} {v}" for k, v in sorted(counters.items())
                        if k.startswith("rejects/") and v)
    return [f"[{stamp}] rejected: {name}: {counters['rejects']} of {counters.get('records_in', '?')} records"
            + (f" ({reasons})" if reasons else "") + "; see its outputs/rejects/ (file, line, reason)"]
