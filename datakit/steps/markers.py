"""Markers in a step dir: ``.status`` (written LAST), ``artifact.json``, ``error.txt``.

Why this order: a step dir is trusted only when ``.status`` says SUCCESS, and that marker is written
after the artifact record and after the step's own outputs. A crash at any earlier point leaves
RUNNING (or no status), which the runner treats as "not built": it clears the dir and rebuilds.
"""
from __future__ import annotations

import json
import os
import socket
import time
from datetime import datetime, timezone

from datakit.core import fsio

STATUS_FILE = ".status"
ARTIFACT_FILE = "artifact.json"
ERROR_FILE = "error.txt"
# Every output file's path, size and xxh3-128, written after the step's outputs and before the artifact
# record (datakit.steps.verify): what `datakit run` and `datakit verify` check a built step against.
OUTPUTS_FILE = "outputs.manifest.json"
# Files in a step dir that describe the step rather than being its output.
MARKER_FILES = frozenset({STATUS_FILE, ARTIFACT_FILE, ERROR_FILE, OUTPUTS_FILE})

RUNNING, SUCCESS, FAILED = "RUNNING", "SUCCESS", "FAILED"


def now_iso(t: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if t is None else t, timezone.utc).isoformat(timespec="milliseconds")


def to_json_bytes(obj: dict) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n").encode("utf-8")


def read_status(step_dir: str) -> dict | None:
    """The status record, None if absent. An unreadable marker counts as not built (state UNKNOWN)."""
    raw = fsio.read_if_exists(fsio.join(step_dir, STATUS_FILE))
    if raw is None:
        return None
    try:
        record = json.loads(raw)
        if not isinstance(record, dict) or "status" not in record:
            raise ValueError("not a status record")
        return record
    except ValueError:
        return {"status": "UNKNOWN", "error": f"unreadable {STATUS_FILE}: {raw[:80]!r}"}


def is_built(step_dir: str) -> bool:
    status = read_status(step_dir)
    return status is not None and status.get("status") == SUCCESS


def write_status(step_dir: str, status: str, **fields) -> None:
    record = {"status": status, "time": now_iso(), "host": socket.gethostname(), "pid": os.getpid(), **fields}
    fsio.atomic_write_bytes(fsio.join(step_dir, STATUS_FILE), to_json_bytes(record))


def remove_status(step_dir: str) -> None:
    fsio.remove(fsio.join(step_dir, STATUS_FILE))


def read_artifact(step_dir: str) -> dict:
    """The artifact record of a built step. A SUCCESS dir without a valid record is a hard error."""
    path = fsio.join(step_dir, ARTIFACT_FILE)
    raw = fsio.read_if_exists(path)
    if raw is None:
        raise FileNotFoundError(f"{path}: missing although {STATUS_FILE} says {SUCCESS}")
    try:
        return json.loads(raw)
    except ValueError as e:
        raise ValueError(f"{path}: invalid JSON: {e}") from None


def write_artifact(step_dir: str, record: dict) -> None:
    fsio.atomic_write_bytes(fsio.join(step_dir, ARTIFACT_FILE), to_json_bytes(record))


def write_error(step_dir: str, text: str) -> None:
    fsio.atomic_write_bytes(fsio.join(step_dir, ERROR_FILE), text.encode("utf-8"))


def clear_step_dir(step_dir: str, keep) -> None:
    """Remove everything a previous, untrusted attempt left (status first, so a crash mid-clear
    still reads as not built). ``keep(name)`` protects the lease files."""
    remove_status(step_dir)
    for name in fsio.list_names(step_dir):
        if not keep(name):
            fsio.remove(fsio.join(step_dir, name))
