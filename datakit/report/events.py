"""Step events as the lines a person reads while a run goes on (the CLI, the API's logger, the ferry's log):
started (and why), finished with wall time, skipped, failed, waiting on another run, training progress,
and a warning the moment a stage empties a source."""

from __future__ import annotations

import time
from typing import Any

from .summary import StepView, emptied_warning

_SHOWN = ("step_started", "step_succeeded", "step_skipped", "step_failed", "step_cascaded", "step_waiting",
          "step_log")


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
    extra = f" ({ev['wall_s']:.1f}s)" if ev.get("wall_s") is not None else ""
    why = f": {ev['reason']}" if kind == "step_started" and ev.get("reason") else ""
    err = f": {ev['error']}" if ev.get("error") else ""
    lines = [f"[{stamp}] {kind.replace('step_', '')}: {name}{extra}{why}{err}"]
    step = steps.get(name)
    if kind == "step_succeeded" and step is not None:
        view = StepView(name, step.stage, step.source, dict(ev.get("counters") or {}), {}, None)
        warning = emptied_warning(view)
        if warning:
            lines.append(f"[{stamp}] warning: {warning}")
    return lines
