"""Garbage collection of a prefix: step outputs that no longer belong to the current plan.

Every change of config, input or version builds a step beside its old output (identities never
overwrite), so a prefix collects outdated `<name>-<identity>/` dirs; globs over them count documents
twice. `collect_garbage` removes the step dirs of the prefix whose `<name>-<identity>` is not in the
plan it is given. It never touches a dir whose lease is live (a run is building it), anything that is
not a step dir (no `.status` nor `artifact.json`: not ours), or a mirror (it only sees the prefix).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

from datakit.core import fsio

from .lease import read_holder
from .step import Step

_STEP_DIR = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)-(?P<identity>[0-9a-f]{10})$")


@dataclass
class GcReport:
    removed: list[str] = field(default_factory=list)     # dir names removed (or that would be, dry run)
    kept_running: list[str] = field(default_factory=list)
    current: list[str] = field(default_factory=list)     # the plan's dirs present in the prefix
    bytes_freed: int = 0

    def to_dict(self) -> dict:
        return {"removed": self.removed, "kept_running": self.kept_running, "current": self.current,
                "bytes_freed": self.bytes_freed}


def _is_step_dir(path: str) -> bool:
    names = fsio.list_names(path)
    return ".status" in names or "artifact.json" in names


def _size(path: str) -> int:
    try:
        return sum(fsio.walk(path).values())
    except (OSError, ValueError):
        return 0


def collect_garbage(steps: Iterable[Step], prefix: str, *, dry_run: bool = False,
                    lease_timeout_s: float = 60.0) -> GcReport:
    """Remove (or, dry run, list) the prefix's step dirs that the plan ``steps`` does not name."""
    root = fsio.store_url(prefix)
    planned = {s.dirname for s in steps}
    report = GcReport()
    for name in fsio.list_names(root):
        path = fsio.join(root, name)
        if not _STEP_DIR.match(name) or not _is_step_dir(path):  # a file lists no markers under it
            continue
        if name in planned:
            report.current.append(name)
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
