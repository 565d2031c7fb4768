"""Per-file reuse across builds of one step: so that a change costs what changed, not the whole corpus.

A step's identity covers all of its inputs, so one changed input file gives the whole step a new
identity and a new dir. Most of its output files, though, depend on a small part of the inputs only: a
per-file document stage's output file depends on its one input file and the stage's settings. Such a
step gives each unit of work a *content key* (`content_key`: the step's own settings and version, and
the content hashes of exactly what that unit reads) and records, in ``reuse.json`` beside its outputs,
which files each key produced. The next build of the same step name (any identity) looks its keys up
in the newest earlier build (`Earlier`, found by the runner: `StepContext.earlier`) and takes the files
of a key it finds (`take`: a hard link, or a copy on object stores) instead of computing them.

Why this is safe: a key holds everything the unit's output depends on, and the function is
deterministic, so a taken file is byte for byte what computing it would write (the equality with a
from-scratch build is tested per stage). A taken file is checked against the xxh3-128 the earlier build
recorded in its outputs manifest; a file that no longer matches is never taken (the unit is computed).
A hard link of a file whose stat the prefix's stamps vouch for (`stamps`: its content was read and
found right while it had that stat) is not read again: any write since would have changed its stat.
The earlier build's own markers say it finished (only SUCCESS builds are offered), and a build killed
halfway leaves no SUCCESS, so nothing of it is ever reused. ``--force`` builds with no earlier build.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from typing import Any, Callable

import xxhash

from datakit.core import fsio, publish_log

from . import verify
from .fingerprint import FileStat
from .stamps import Stamps, object_stat, same_file

REUSE_FILE = "reuse.json"
REUSE_FORMAT = "datakit.reuse"


def content_key(*parts: Any) -> str:
    """The xxh3-128 (hex) of ``parts`` as canonical JSON: the key of one unit of work."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return xxhash.xxh3_128_hexdigest(blob.encode())


@dataclass(frozen=True)
class Earlier:
    """The newest earlier build of a step (same name, another identity) as reuse sees it: its dir, the
    files each content key produced there, and every output's recorded xxh3-128 (its outputs manifest);
    ``vouched``: the stat of each file the prefix's stamps say holds that hash now (a link with this stat
    is taken unread). Small and picklable, so engine tasks receive it with their job."""

    step_dir: str
    keys: dict[str, "Unit"]
    hashes: dict[str, str]
    vouched: dict[str, FileStat] = field(default_factory=dict)


@dataclass(frozen=True)
class Unit:
    """What one key produced: its files (relative to the step dir) and the counters computing it added,
    so a taken unit counts exactly as a computed one."""

    files: tuple[str, ...]
    stats: dict[str, int]


def load(step_dir: str | None) -> Earlier | None:
    """The earlier build at ``step_dir`` (None: there is none, or it recorded no reuse keys, or its
    records are unreadable: then everything is computed, which is always correct)."""
    if step_dir is None:
        return None
    raw = fsio.read_if_exists(fsio.join(step_dir, REUSE_FILE))
    if raw is None:
        return None
    try:
        record = json.loads(raw)
        files = verify.earlier_manifest(step_dir)
        if record.get("format") != REUSE_FORMAT or files is None:
            return None
        keys = {str(k): Unit(tuple(str(p) for p in v["files"]), {str(n): int(c) for n, c in v["stats"].items()})
                for k, v in record["keys"].items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    stamps = Stamps.of_prefix(posixpath.dirname(step_dir.rstrip("/")))
    if fsio.is_local(step_dir):
        vouched = {f.path: st for f in files if (st := stamps.vouches(fsio.join(step_dir, f.path), f.xxh3_128))}
    else:
        vouched = _vouched_objects(step_dir, files, stamps)
    return Earlier(step_dir, keys, {f.path: f.xxh3_128 for f in files}, vouched)


def _vouched_objects(step_dir: str, files: list, stamps: Stamps) -> dict[str, FileStat]:
    """On an object store: the earlier build's objects whose listed (size, version) the stamps record as
    holding the manifest's digest (one listing), so they are taken without a download."""
    listed = verify.earlier_listing(step_dir)
    out = {}
    for f in files:
        size, version = listed.get(f.path, (None, None))
        if size == f.size and stamps.vouches_object(fsio.join(step_dir, f.path), size, version, f.xxh3_128):
            out[f.path] = object_stat(size, version)
    return out


def take(earlier: Earlier | None, key: str, step_dir: str,
         place: Callable[[str], str] | None = None) -> Unit | None:
    """Put the files ``key`` produced in the earlier build into ``step_dir`` at the same relative
    paths (or at ``place(path)``, for a step whose file names hold the unit's position, such as a token
    shard's index and count): the unit as the earlier build recorded it, or None (nothing taken) when
    the key is unknown or a file is missing or no longer what the earlier build recorded."""
    unit = earlier.keys.get(key) if earlier is not None else None
    if unit is None or not unit.files or any(rel not in earlier.hashes for rel in unit.files):
        return None
    done: list[str] = []
    for rel in unit.files:
        dst = fsio.join(step_dir, place(rel) if place is not None else rel)
        done.append(dst)
        if not take_file(earlier, rel, dst):
            for path in done:
                fsio.remove(path)
            return None
    return unit


def take_file(earlier: Earlier, rel: str, dst: str) -> bool:
    """Link (or copy) the earlier build's file ``rel`` to ``dst`` when it is still what that build
    recorded; False (``dst`` may then hold a bad copy: the caller removes or rewrites it) otherwise."""
    if rel not in earlier.hashes:
        return False
    src = fsio.join(earlier.step_dir, rel)
    try:
        if not fsio.is_local(dst) and rel in earlier.vouched:
            # the store copies an object the stamps vouch for: its bytes and digest are the earlier's
            fsio.copy_file(src, dst)
            publish_log.note(publish_log.Written(dst, earlier.vouched[rel].size, earlier.hashes[rel]))
            return True
        fsio.link_or_copy(src, dst)
        return _holds(earlier, rel, dst)
    except FileNotFoundError:
        return False


def intact(earlier: Earlier, rel: str) -> bool:
    """The earlier build recorded ``rel`` and the file still hashes to what it recorded (read in place,
    unless the prefix's stamps vouch for its stat)."""
    if rel not in earlier.hashes:
        return False
    try:
        return _holds(earlier, rel, fsio.join(earlier.step_dir, rel))
    except FileNotFoundError:
        return False


def _holds(earlier: Earlier, rel: str, path: str) -> bool:
    """Whether ``path`` (the earlier build's file ``rel``, or a link of it) holds what that build recorded:
    its stat vouched for by the stamps, else its xxh3-128 read."""
    stat = earlier.vouched.get(rel)
    if stat is not None and (same_file(path, stat) if fsio.is_local(path)
                             else path == fsio.join(earlier.step_dir, rel)):
        return True
    return fsio.xxh3_file(path) == earlier.hashes[rel]


def write(step_dir: str, units: dict[str, Unit]) -> None:
    """Record which files and counters each key produced in this build (sorted: a deterministic step
    writes the same bytes whether its units were computed or taken)."""
    record = {"format": REUSE_FORMAT,
              "keys": {k: {"files": sorted(u.files), "stats": dict(sorted(u.stats.items()))}
                       for k, u in sorted(units.items())}}
    fsio.atomic_write_bytes(fsio.join(step_dir, REUSE_FILE),
                            json.dumps(record, sort_keys=True, separators=(",", ":")).encode())


def output_hashes(step_dir: str) -> dict[str, str]:
    """An input step's recorded outputs (relative path -> xxh3-128): the content half of a unit's key,
    read from its manifest rather than by hashing the files again. Empty for a step built before
    manifests (its dependents then compute everything)."""
    files = verify.read_manifest(step_dir)
    return {} if files is None else {f.path: f.xxh3_128 for f in files}
