"""Garbage collection of a prefix: step outputs that no longer belong to the current plan.

Every change of config, input or version builds a step beside its old output (identities never
overwrite), so a prefix collects outdated `<name>-<identity>/` dirs; globs over them count documents
twice. `collect_garbage` removes the step dirs of the prefix whose `<name>-<identity>` is not in the
plan it is given. It never touches a dir that a live run's plan names (its run record, see
`datakit.steps.runs`: a running run reads finished outputs of earlier steps, not only the one it is
building), a dir whose lease is live (a run is building it), anything that is not a step dir (no
`.status` nor `artifact.json`: not ours), or a mirror (it only sees the prefix). Records of runs that
crashed (stale or dead) are removed with the garbage.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

from datakit.core import fsio

from .lease import read_holder
from .runs import read_runs
from .step import Step

_STEP_DIR = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)-(?P<identity>[0-9a-f]{10})$")
_RUN_FIELDS = ("run_id", "host", "pid", "started", "heartbeat_iso")


@dataclass
class GcReport:
    removed: list[str] = field(default_factory=list)     # dir names removed (or that would be, dry run)
    kept_running: list[str] = field(default_factory=list)  # a live lease: being built
    kept_in_use: dict[str, list[str]] = field(default_factory=dict)  # run id -> dirs its live plan names
    runs: list[dict] = field(default_factory=list)       # the live runs (id, host, pid, started, heartbeat)
    current: list[str] = field(default_factory=list)     # the plan's dirs present in the prefix
    bytes_freed: int = 0

    def to_dict(self) -> dict:
        return {"removed": self.removed, "kept_running": self.kept_running, "kept_in_use": self.kept_in_use,
                "runs": self.runs, "current": self.current, "bytes_freed": self.bytes_freed}


def _is_step_dir(path: str) -> bool:
    names = fsio.list_names(path)
    return ".status" in names or "artifact.json" in names


def _size(path: str) -> int:
    try:
        return sum(fsio.walk(path).values())
    except (OSError, ValueError):
        return 0


def _live_plans(root: str, lease_timeout_s: float, dry_run: bool, report: GcReport) -> dict[str, str]:
    """Step dir name -> id of a live run whose plan names it; stale run records are removed."""
    users: dict[str, str] = {}
    for rec in read_runs(root, lease_timeout_s):
        if rec["state"] != "live":
            if not dry_run:
                fsio.remove(rec["path"])
            continue
        report.runs.append({k: rec.get(k) for k in _RUN_FIELDS})
        for name in rec["step_dirs"]:
            users.setdefault(str(name), str(rec.get("run_id")))
    return users


def collect_garbage(steps: Iterable[Step], prefix: str, *, dry_run: bool = False,
                    lease_timeout_s: float = 60.0) -> GcReport:
    """Remove (or, dry run, list) the prefix's step dirs that the plan ``steps`` does not name."""
    root = fsio.store_url(prefix)
    planned = {s.dirname for s in steps}
    report = GcReport()
    in_use = _live_plans(root, lease_timeout_s, dry_run, report)
    for name in fsio.list_names(root):
        path = fsio.join(root, name)
        if not _STEP_DIR.match(name) or not _is_step_dir(path):  # a file lists no markers under it
            continue
        if name in planned:
            report.current.append(name)
            continue
        if name in in_use:
            report.kept_in_use.setdefault(in_use[name], []).append(name)
            continue
        holder = read_holder(path, lease_timeout_s)
        if holder is not None and holder.get("state") == "live":
            report.kept_running.append(name)
            continue
        report.bytes_freed += _size(path)
        report.removed.append(name)
        if not dry_run:
            fsio.remove(path)
    return report
