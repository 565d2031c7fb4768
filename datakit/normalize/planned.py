"""Planned inputs are a contract: the files normalize reads are exactly the files it planned.

Why: the step's identity is computed from the files' content when the pipeline is planned; reading
happens later. A file deleted in between used to vanish from the output with no warning (824 of 825
records, exit 0), and once restored, nothing rebuilt: the loss was permanent. Now the planned list
(path, size, sha256) travels to the step, is checked before reading (cheap: a stat per file; parquet,
read by random access, is hashed here) and while reading (every byte read is hashed, see
`datakit.sources.readers.open_ref`); any difference fails the step naming the file. A failed step is
rebuilt on the next run, so restoring the file and rerunning recovers everything.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Sequence

from datakit.core.fsio import exists, is_local, local_path, read_table, sha256_file, size
from datakit.sources.readers import INPUT_CHANGED, INPUT_MISSING, FileRef

from .config import NormalizeError, PlannedFile

_RESTORE = ("restore it and rerun (this step is rebuilt), or rerun as is to plan again without the "
            "change (the step identity then follows the new content)")


def _size_of(path: str) -> int | None:
    try:
        return size(path)
    except FileNotFoundError:
        return None


def _key(path: str) -> str:
    return os.path.abspath(local_path(path)) if is_local(path) else path


def planned_digests(refs: list[FileRef], planned: Sequence[PlannedFile]) -> dict[int, str | None]:
    """Each ref's planned sha256, by file index (what per-unit reuse keys a unit's members by)."""
    plan = {_key(p.path): p for p in planned}
    return {ref.index: getattr(plan.get(_key(ref.path)), "sha256", None) for ref in refs}


def check_parquet_hashes(name: str, refs: Sequence[FileRef], planned: Sequence[PlannedFile]) -> None:
    """Parquet is read by random access, so its bytes cannot be hashed while read: the files about to
    be read are hashed here against the plan (files of units taken from an earlier build are not read,
    so not hashed). Raises NormalizeError naming the first that changed."""
    plan = {_key(p.path): p for p in planned}
    for ref in {r.path: r for r in refs}.values():
        p = plan.get(_key(ref.path))
        if p is not None and p.sha256 and sha256_file(ref.path) != p.sha256:
            raise NormalizeError(f"normalize {name!r}: planned input {ref.rel} changed after planning (same size, "
                                 f"different sha256); {_RESTORE}")


def check_planned(name: str, fmt: str, refs: list[FileRef], planned: Sequence[PlannedFile]) -> list[FileRef]:
    """Refs carrying their plan (size, sha256), after checking every planned file is still there with
    its planned size (parquet's sha256: `check_parquet_hashes`, for the files read). Raises
    NormalizeError naming the first file that is missing or changed."""
    plan = {_key(p.path): p for p in planned}
    out = []
    for ref in refs:
        p = plan.get(_key(ref.path))
        if p is None:
            raise NormalizeError(f"normalize {name!r}: {ref.rel} is not among the planned inputs; rerun to plan again")
        size = _size_of(ref.path) if exists(ref.path) else None
        if size is None:
            raise NormalizeError(f"normalize {name!r}: planned input {ref.rel} is missing (it had {p.size} bytes "
                                 f"when the run was planned); {_RESTORE}")
        if size != p.size:
            raise NormalizeError(f"normalize {name!r}: planned input {ref.rel} changed after planning: {size} "
                                 f"bytes now, {p.size} planned; {_RESTORE}")
        out.append(dataclasses.replace(ref, planned_size=p.size, sha256=p.sha256) if fmt != "parquet" else ref)
    return out


def planned_failures(rejects_path: str) -> list[str]:
    """'file: detail' for every planned input the readers found missing or changed (from the rejects)."""
    if not exists(rejects_path):
        return []
    table = read_table(rejects_path, columns=["file", "reason", "detail"])
    return [f"{row['file']}: {row['detail']}" for row in table.to_pylist()
            if row["reason"] in (INPUT_CHANGED, INPUT_MISSING)]


def planned_error(name: str, failures: list[str]) -> str:
    shown = "; ".join(failures[:5]) + (f"; and {len(failures) - 5} more" if len(failures) > 5 else "")
    return f"normalize {name!r}: planned inputs changed while being read: {shown}; {_RESTORE}"


__all__ = ["check_parquet_hashes", "check_planned", "planned_digests", "planned_failures", "planned_error"]
