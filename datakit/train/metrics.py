"""metrics.jsonl: the live, append-only record of a training run (one JSON object per line), its
reader, its trim on resume, and the per-step and per-window train records.

The file is appended line by line so a running job can be watched; the resume trim is the temp +
rename kind. JSON has no NaN or infinity, so non-finite values are written as null.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Callable

import numpy as np

from datakit.core.fsio import atomic_write_bytes


class MetricsLog:
    """Appends records to metrics.jsonl and hands each to the live-progress hook (state: the path and
    the hook; the file is opened per record so a crash never leaves a buffered tail unwritten)."""

    def __init__(self, path: str, on_log: Callable[[dict], None] | None) -> None:
        self.path = path
        self.on_log = on_log

    def write(self, record: dict[str, Any]) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
        self.announce(record)

    def announce(self, record: dict[str, Any]) -> None:
        """Hand ``record`` to the live-progress hook only: what the run is doing now (compiling,
        evaluating), which is progress for a person and no metric, so metrics.jsonl never holds it."""
        if self.on_log is not None:
            self.on_log(record)


def read_metrics(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a torn last line from a crash; the resume trims past it anyway
    return out


def trim_metrics(path: str, upto_step: int, drop_eval_at_end: bool) -> None:
    """On resume, drop records past the checkpoint so the file reads as one uninterrupted run.

    ``drop_eval_at_end``: the run is already complete and will re-evaluate at ``upto_step``, so an
    earlier eval record for that step would be a duplicate.
    """
    if not os.path.exists(path):
        return

    def keep(r: dict) -> bool:
        step = int(r.get("step", 0))
        if drop_eval_at_end and r.get("kind") == "eval" and step == upto_step:
            return False
        return step <= upto_step

    kept = [r for r in read_metrics(path) if keep(r)]
    text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept)
    atomic_write_bytes(os.path.abspath(path), text.encode("utf-8"))


def step_record(step: int, m: dict[str, Any]) -> dict[str, Any]:
    """One step's train record (written only when log_every=1, or for a skipped step)."""
    return {"kind": "train", "step": step, "loss": nan_to_none(m["loss"]), "ce": nan_to_none(m["ce"]),
            "ok": bool(m["ok"]), "lr": float(m["lr"]), "grad_norm": nan_to_none(m["grad_norm"])}


def loss_points(history: list[dict[str, Any]]) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """The (step, loss) points of the train and eval curves. The window mean is the smoother curve;
    per-step records (log_every=1, skipped steps) lack it and give their ce."""
    train_pts = [
        (r["step"], r.get("loss_window_mean", r.get("ce")))
        for r in history
        if r.get("kind") == "train" and r.get("loss_window_mean", r.get("ce")) is not None
    ]
    eval_pts = [(r["step"], r["loss"]) for r in history if r.get("kind") == "eval" and r.get("loss") is not None]
    return train_pts, eval_pts


def finite_or_none(x: float | None) -> float | None:
    """JSON has no NaN/inf: a diverged eval is recorded as null, not as invalid JSON."""
    return x if x is not None and math.isfinite(x) else None


def nan_to_none(x: Any) -> float | None:
    v = float(np.asarray(x))
    return v if math.isfinite(v) else None
