"""``<prefix>/history.jsonl``: one record per ferry run, the memory the report and the notifier read.

A record is self-contained (run id, status, the first failing stage/check, per-step wall times and
counters, the validator's checks and summary, the loss curve), so a report can be rebuilt from the
history alone after the run directories themselves were pruned. The file is rewritten whole (temp +
rename) on every append: it is small, and a crash mid-write must never leave a torn last line.
Unreadable lines are skipped and counted, never fatal: one bad line must not hide a month of runs.
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass

from datakit.core.fsio import atomic_write_bytes

HISTORY_FILE = "history.jsonl"
STATUS_FILE = "status.json"
SLOW_WINDOW = 7  # successes the "slow run" baseline is computed over


@dataclass
class History:
    records: list[dict]
    bad_lines: list[int]  # 1-based line numbers that could not be parsed


def read_history(prefix: str) -> History:
    path = os.path.join(prefix, HISTORY_FILE)
    records, bad = [], []
    if not os.path.exists(path):
        return History(records, bad)
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                bad.append(lineno)
                continue
            if isinstance(rec, dict) and "run_id" in rec:
                records.append(rec)
            else:
                bad.append(lineno)
    return History(records, bad)


def append_history(prefix: str, record: dict) -> None:
    path = os.path.join(prefix, HISTORY_FILE)
    old = b""
    if os.path.exists(path):
        with open(path, "rb") as f:
            old = f.read()
        if old and not old.endswith(b"\n"):
            old += b"\n"
    atomic_write_bytes(path, old + json.dumps(record, sort_keys=True, allow_nan=False).encode() + b"\n")


def write_status(prefix: str, status: dict) -> None:
    """The notifier's file: small, fixed keys, always the latest run (see runbooks/daily-smoke-ferry.md)."""
    body = json.dumps(status, indent=1, sort_keys=True) + "\n"
    atomic_write_bytes(os.path.join(prefix, STATUS_FILE), body.encode())


def read_status(prefix: str) -> dict | None:
    path = os.path.join(prefix, STATUS_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def slow_baseline(previous: list[dict], key=lambda r: r.get("wall_s")) -> tuple[float, float, int] | None:
    """(mean, sigma, n) of ``key`` over the last SLOW_WINDOW successful records in ``previous`` (oldest
    first), or None with fewer than 2 (one run says nothing about spread). Population sigma: the window
    IS the population we compare against, not a sample of a larger one."""
    vals = [float(key(r)) for r in previous if r.get("status") == "succeeded" and isinstance(key(r), (int, float))]
    vals = vals[-SLOW_WINDOW:]
    if len(vals) < 2:
        return None
    return statistics.fmean(vals), statistics.pstdev(vals), len(vals)


def is_slow(value: float | None, baseline: tuple[float, float, int] | None) -> bool:
    """Amber: strictly slower than mean + 1 sigma of the baseline."""
    return value is not None and baseline is not None and value > baseline[0] + baseline[1]


def flag_slow_runs(records: list[dict]) -> list[dict]:
    """For each record (oldest first): {"slow": bool, "threshold": float | None, "baseline_n": int}."""
    out = []
    for i, rec in enumerate(records):
        base = slow_baseline(records[:i])
        out.append({"slow": rec.get("status") == "succeeded" and is_slow(rec.get("wall_s"), base),
                    "threshold": base[0] + base[1] if base else None, "baseline_n": base[2] if base else 0})
    return out
