"""A checked-in lock of each built-in stage's code fingerprint, so an unbumped code change cannot hide.

A step's output directory is keyed by an identity that includes its stage's version string. If a
stage's code changes and nobody bumps the version, every user keeps being served cached outputs built
by the old code. `versions.lock.json` (next to this file) records, for each stage, the fingerprint of
its code at every version it has had; `check` fails when the current code no longer matches the
fingerprint recorded for the current version, and says exactly which command resolves it.

Fingerprints hash a normalized form of the source (the AST without docstrings or positions), so
comment, docstring and formatting edits never trip the check, while any code edit does.

    python -m datakit.stages.lock check
    python -m datakit.stages.lock record [--output-preserving NAME ...] [--forget NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from .code_fingerprint import module_fingerprint

LOCK_PATH = Path(__file__).with_name("versions.lock.json")
CLI = "python -m datakit.stages.lock"

Lock = dict[str, dict[str, str]]


class StageLike(Protocol):
    """What the lock needs of a stage: `datakit.stages.registry.Stage` satisfies it."""

    name: str
    version: str
    code: tuple[str, ...]


# ---------------------------------------------------------------------------------------------------
# The lock


def _version_location(stage: StageLike) -> str:
    """Where a developer bumps a stage's version: the stage's `version_source`, else the convention."""
    explicit = getattr(stage, "version_source", None)
    return explicit or f"datakit/stages/{stage.name.replace('-', '_')}.py: VERSION"


def changed_message(stage: StageLike, recorded: str, current: str) -> str:
    """The problem for a recorded version whose code changed: both ways out, spelled as commands."""
    return (f"stage {stage.name}: code changed since version {stage.version} was recorded "
            f"(fingerprint {recorded} != {current}). If outputs can change, bump its version "
            f"({_version_location(stage)}) and run `{CLI} record`; if the change is output-preserving, "
            f"run `{CLI} record --output-preserving {stage.name}`.")


def _stage_problem(stage: StageLike, lock: Mapping[str, Mapping[str, str]]) -> str | None:
    """What is wrong with one stage's lock entry, or None."""
    try:
        current = module_fingerprint(stage.code)
    except (ImportError, ValueError, SyntaxError, OSError) as exc:
        return f"stage {stage.name}: cannot fingerprint its code {list(stage.code)}: {exc}"
    recorded = lock.get(stage.name, {}).get(stage.version)
    if recorded is None:
        return f"stage {stage.name}: version {stage.version} is not recorded; run `{CLI} record`"
    if recorded != current:
        return changed_message(stage, recorded, current)
    return None


def _duplicates(stages: Sequence[StageLike]) -> list[str]:
    """Stage names that occur more than once: the lock is keyed by name, so they would share entries."""
    names = [stage.name for stage in stages]
    return sorted({name for name in names if names.count(name) > 1})


def check(stages: Sequence[StageLike], lock: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Every problem with the lock against the stages' current code; empty means the lock holds."""
    problems = [f"stage {name}: defined more than once in the registry" for name in _duplicates(stages)]
    problems += [p for stage in stages if (p := _stage_problem(stage, lock)) is not None]
    known = {stage.name for stage in stages}
    problems += [f"stage {name}: recorded in the lock but not in the registry; if it was removed or "
                 f"renamed, run `{CLI} record --forget {name}`" for name in sorted(set(lock) - known)]
    return problems


def _validate_names(stages: Sequence[StageLike], lock: Mapping[str, Any],
                    output_preserving: set[str], forget: set[str]) -> None:
    """Rejects misspelled option names before anything is recorded, so a typo cannot pass silently."""
    known = {stage.name for stage in stages}
    if duplicates := _duplicates(stages):
        raise ValueError(f"stages defined more than once: {', '.join(duplicates)}")
    if unknown := sorted(output_preserving - known):
        raise ValueError(f"--output-preserving names unknown stages: {', '.join(unknown)}")
    if live := sorted(forget & known):
        raise ValueError(f"--forget names stages still in the registry: {', '.join(live)}")
    if absent := sorted(forget - set(lock)):
        raise ValueError(f"--forget names stages not in the lock: {', '.join(absent)}")


def record(stages: Sequence[StageLike], lock: Mapping[str, Mapping[str, str]],
           output_preserving: set[str], forget: set[str] = frozenset()) -> Lock:
    """The new lock with every stage's current version recorded; earlier versions stay as history.

    Re-recording a version whose code changed is allowed only for stages named in `output_preserving`
    (a deliberate statement that cached outputs stay valid); otherwise it raises ValueError. History
    of stages gone from the registry is kept unless named in `forget`, since a name that comes back
    must not reuse a version number with different code.
    """
    _validate_names(stages, lock, set(output_preserving), set(forget))
    new: Lock = {name: dict(versions) for name, versions in lock.items() if name not in forget}
    for stage in stages:
        current = module_fingerprint(stage.code)
        versions = new.setdefault(stage.name, {})
        recorded = versions.get(stage.version)
        if recorded is not None and recorded != current and stage.name not in output_preserving:
            raise ValueError(changed_message(stage, recorded, current))
        versions[stage.version] = current
    return new


def load_lock(path: Path) -> Lock:
    """The lock file's contents; a missing file is an empty lock (every stage then reads as unrecorded)."""
    if not path.exists():
        return {}
    return json.loads(path.read_text())


def dump_lock(lock: Mapping[str, Mapping[str, str]]) -> str:
    """The lock's canonical text (sorted keys, indent 1, trailing newline), so diffs stay minimal."""
    return json.dumps(lock, sort_keys=True, indent=1) + "\n"


def save_lock(lock: Mapping[str, Mapping[str, str]], path: Path) -> None:
    """Writes the lock through a temporary file, so an interrupted write never leaves half a lock."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(dump_lock(lock))
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------------
# CLI


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=CLI, description="Check or record the stage code fingerprints.")
    parser.add_argument("command", nargs="?", choices=["check", "record"], default="check")
    parser.add_argument("--output-preserving", action="extend", nargs="+", default=[], metavar="NAME",
                        help="re-record these stages' current versions: their code change keeps outputs")
    parser.add_argument("--forget", action="extend", nargs="+", default=[], metavar="NAME",
                        help="drop the history of these stages, removed from the registry")
    return parser


def _registry_stages() -> Sequence[StageLike]:
    """The built-in stages, imported late: the registry imports stage code this module must not need."""
    from datakit.stages.registry import STAGES

    return STAGES


def _describe_changes(old: Mapping[str, Mapping[str, str]], new: Mapping[str, Mapping[str, str]]) -> list[str]:
    """One line per stage version that `record` added, changed or dropped."""
    lines = []
    for name in sorted(set(old) | set(new)):
        before, after = old.get(name, {}), new.get(name, {})
        for version in sorted(set(before) | set(after)):
            if before.get(version) != after.get(version):
                lines.append(f"{name} {version}: {before.get(version, '-')} -> {after.get(version, '-')}")
    return lines


def main(argv: Sequence[str] | None = None, stages: Sequence[StageLike] | None = None,
         lock_path: Path | None = None) -> int:
    """Runs `check` or `record`; 0 when the lock holds (or was written), 1 with the problems otherwise.

    `stages` and `lock_path` default to the registry and the checked-in lock; tests inject their own.
    """
    args = _parser().parse_args(argv)
    stages = _registry_stages() if stages is None else stages
    lock_path = LOCK_PATH if lock_path is None else Path(lock_path)
    lock = load_lock(lock_path)
    if args.command == "check":
        problems = check(stages, lock)
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    try:
        new = record(stages, lock, set(args.output_preserving), set(args.forget))
    except (ValueError, ImportError, SyntaxError) as exc:
        print(exc, file=sys.stderr)
        return 1
    save_lock(new, lock_path)
    for line in _describe_changes(lock, new) or ["lock unchanged"]:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
