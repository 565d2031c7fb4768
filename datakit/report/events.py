"""Step events as the lines a person reads while a run goes on (the CLI, the API's logger, the ferry's log):
started (and why), finished with wall time, skipped (and why, e.g. built by another run after waiting on
its lease), failed, waiting on another run, a worker retried, records rejected, training progress, and a
warning the moment a stage empties a source."""

from __future__ import annotations

import time
from typing import Any

from .summary import StepView, emptied_warning

_SHOWN = ("step_started", "step_succeeded", "step_skipped", "step_failed", "step_cascaded", "step_waiting",
          "step_log", "step_worker_retried")


def event_lines(ev: dict, steps: dict[str, Any]) -> list[str]:
    """Zero or more lines for one event; ``steps`` maps step names to planned Steps (stage, source tags)."""
    kind = ev.get("event")
    if kind not in _SHOWN:
        return []
    stamp, name = time.strftime("%H:%M:%S"), ev.get("step")
    if kind == "step_log":
        return [f"[{stamp}] {name}: {ev.get('message')}"]
    if kind == "step_waiting":
        holder = ev.get("holder") or {}
        return [f"[{stamp}] waiting: {name} is being built by another run ({holder.get('owner')} on "
                f"{holder.get('host')}, pid {holder.get('pid')}); it will be used when that run finishes"]
    if kind == "step_worker_retried":
        return [f"[{stamp}] retried: {name}: {ev.get('label')}: {ev.get('cause')} ({ev.get('detail')}); "
                f"attempt {ev.get('attempt')} (outputs are unaffected)"]
    extra = f" ({ev['wall_s']:.1f}s)" if ev.get("wall_s") is not None else ""
    why = f": {ev['reason']}" if kind in ("step_started", "step_skipped") and ev.get("reason") else ""
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
