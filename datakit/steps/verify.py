"""Self-verifying steps: a manifest of every output file (path, size, xxh3-128), written before SUCCESS.

Why: a SUCCESS marker says a step *finished*, not that its files are still what it wrote. A token
shard deleted by a cleanup script, a parquet part truncated by a full disk during a copy, a hand-edited
``.stats.json``, one token id overwritten by another valid id were all trusted by ``datakit run`` and
served downstream. With the manifest:

- ``datakit run`` checks every output of a built step before skipping it: any changed byte, even
  one that keeps the size, rebuilds the step and everything downstream, and the reason names the file.
  A local file whose stat (size, mtime_ns, inode) is the one it had when its content was last read and
  found right is not read again (`stamps`: any write changes the mtime, a copy the inode).
- ``datakit verify`` and ``datakit ferry validate`` do the same check and report it per step.
- ``--fast`` (on both commands) checks sizes only (a stat per file; small local files, such as JSON
  records, are hashed too, which is as cheap): for prefixes too large or too remote to read in full.
- On an object store the manifest takes the digests the uploaders computed (`core/publish_log.py`) and
  a check takes recorded digests by the objects' versions (`stamps`), so neither downloads an object
  that nobody has written since it was hashed.

xxh3-128 because it hashes at memory speed: the content check costs one read of the outputs, small
next to building them (tokenizing, deduplicating). The token cache's ledger keeps the same xxh3-128 of
its shards; the manifest lists those files too, so a cache is hashed once, not twice. The manifest
holds no timestamps, so a deterministic step writes a byte-identical manifest. Steps built before
manifests existed have none: they are trusted as before (and ``verify`` says so).
"""
from __future__ import annotations

import contextvars
import json
import os
import posixpath
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterator, Sequence, TypeVar

from datakit.core import fsio

from . import markers
from .lease import is_lease_name
from .stamps import Stamps
from .step import collect_steps

MANIFEST_FORMAT = "datakit.step_outputs"
MANIFEST_VERSION = 1
QUICK_HASH_BYTES = 64 << 10     # local files up to this size are hashed by the fast check too


@dataclass(frozen=True)
class OutputFile:
    """One output file of a step: its path relative to the step dir, size and xxh3-128 (hex)."""

    path: str
    size: int
    xxh3_128: str


@dataclass
class VerifyReport:
    """The outcome of checking one step dir against its manifest. ``problems`` are one-line sentences
    naming the file; ``checked`` counts the files compared; ``manifest`` is False for a step built
    before output manifests existed (nothing to compare with); ``fast``: sizes only, not content."""

    step_dir: str
    manifest: bool
    checked: int = 0
    fast: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def is_output_name(rel: str) -> bool:
    """Whether a file under a step dir is an output (not a marker, lease or unpublished temp file)."""
    name = posixpath.basename(rel)
    top = rel.split("/", 1)[0]
    return not (top in markers.MARKER_FILES or is_lease_name(name) or fsio.is_temp_name(name))


def _walk(step_dir: str) -> dict[str, tuple[int, str | None]]:
    """Relative path -> (size, version) of every output file under the step dir (one listing on object
    stores, whose versions `Stamps` keys on; None on a local disk)."""
    return {rel: sv for rel, sv in fsio.walk_versions(step_dir).items() if is_output_name(rel)}


# What `earlier_reads` has read of earlier builds while the step now building builds: (kind, dir) -> result.
_EARLIER_READS: contextvars.ContextVar[dict | None] = contextvars.ContextVar("earlier_reads", default=None)
_T = TypeVar("_T")


@contextmanager
def earlier_reads() -> Iterator[None]:
    """While one step builds (the runner holds this around its function and its manifest): an earlier
    build's outputs manifest and listing are read once, though both the reuse the step takes
    (`reuse.load`) and the digests its manifest takes from the files it took (`build_manifest`) need
    them. On an object store each is a request per rebuilt step. Only earlier builds are read through
    it, which nothing writes while a later build of their step runs."""
    token = _EARLIER_READS.set({})
    try:
        yield
    finally:
        _EARLIER_READS.reset(token)


def _once(kind: str, step_dir: str, read: Callable[[], _T]) -> _T:
    memo = _EARLIER_READS.get()
    if memo is None:
        return read()
    if (kind, step_dir) not in memo:
        memo[(kind, step_dir)] = read()
    return memo[(kind, step_dir)]


def earlier_manifest(step_dir: str) -> list[OutputFile] | None:
    """`read_manifest` of an earlier build (read once within `earlier_reads`; the list is shared)."""
    return _once("manifest", step_dir, lambda: read_manifest(step_dir))


def earlier_listing(step_dir: str) -> dict[str, tuple[int, str | None]]:
    """`fsio.walk_versions` of an earlier build's dir (listed once within `earlier_reads`; the dict is
    shared, not to be changed)."""
    return _once("listing", step_dir, lambda: fsio.walk_versions(step_dir))


def _linked_digests(earlier: str | None) -> dict[tuple[int, int], str]:
    """(device, inode) -> recorded xxh3-128 of each local output of an earlier build: a file of this build
    that is a hard link of one of them was taken from it (`reuse.take`, which checked it against this
    very record), so its digest is known without reading it again."""
    if earlier is None or not fsio.is_local(earlier):
        return {}
    try:
        files = earlier_manifest(earlier) or []
    except ValueError:
        return {}
    out = {}
    for f in files:
        try:
            st = os.stat(fsio.local_path(fsio.join(earlier, f.path)))
        except FileNotFoundError:
            continue
        if st.st_size == f.size:
            out[(st.st_dev, st.st_ino)] = f.xxh3_128
    return out


def _copied_digests(earlier: str | None) -> dict[tuple[int, str], str]:
    """On an object store: (size, content version) -> recorded xxh3-128 of each output of an earlier
    build whose listed version is a digest of its bytes (`fsio.content_version`: S3's MD5 ETag), which
    the store's own copy of it keeps. A file of this build with the same size and version was copied from
    it (`fsio.copy_file`: `reuse.take`, the dedup indexes' unchanged segments), so its digest is known
    without a download."""
    if earlier is None or fsio.is_local(earlier):
        return {}
    try:
        files = earlier_manifest(earlier) or []
    except ValueError:
        return {}
    listed = earlier_listing(earlier)
    out = {}
    for f in files:
        size, version = listed.get(f.path, (None, None))
        if size == f.size and fsio.content_version(version):
            out[(size, version)] = f.xxh3_128
    return out


def _digest(path: str, listed: tuple[int, str | None], linked: dict, stamps: Stamps | None,
            clock_ns: int | None) -> str:
    if not fsio.is_local(path):
        if listed in linked:
            return linked[listed]
        return stamps.xxh3_listed(path, *listed) if stamps is not None else fsio.xxh3_file(path)
    if linked:
        st = os.stat(fsio.local_path(path))
        if (st.st_dev, st.st_ino) in linked:
            return linked[(st.st_dev, st.st_ino)]
    return stamps.xxh3(path, clock_ns) if stamps is not None else fsio.xxh3_file(path)


def _written_digest(path: str, listed: tuple[int, str | None], w: fsio.Written, stamps: Stamps | None,
                    clock_ns: int | None) -> str | None:
    """The digest the step's writer computed for ``path``, when the file is still the one it published:
    the same size, and on a local disk the same stat (then stamped like a file read now, when its mtime
    is behind the clock; on an object store stamped with the version listed). None: read it."""
    size, version = listed
    if w.size != size:
        return None
    if not fsio.is_local(path):
        if stamps is not None:
            stamps.adopt_uploaded(path, size, version, w.xxh3_128)
        return w.xxh3_128
    if stamps is None:
        return None
    return w.xxh3_128 if stamps.adopt_written(path, w.mtime_ns, w.inode, w.xxh3_128, clock_ns) else None


def build_manifest(step_dir: str, stamps: Stamps | None = None, earlier: str | None = None,
                   written: Sequence[fsio.Written] = ()) -> list[OutputFile]:
    """Every output file of the step dir, sorted by path, with size and hash. A file taken from the
    ``earlier`` build by a hard link has that build's recorded hash, a file the step ``written`` with its
    digest has that digest while it is still the file published, and a file whose stat ``stamps`` vouch
    for is not read again. What is read is stamped when its mtime is behind the file system's clock,
    read in the step dir first (`fsio.clock_ns`): the step's outputs, written before this, are then not
    read again by the next run's check."""
    local = fsio.is_local(step_dir)
    listed = _walk(step_dir)
    linked = _linked_digests(earlier) if local else _copied_digests(earlier)
    clock = fsio.clock_ns(step_dir) if stamps is not None and local else None
    root = step_dir.rstrip("/") + "/"
    known = {w.path[len(root):]: w for w in written if w.path.startswith(root)}
    out = []
    for rel in sorted(listed):
        path = fsio.join(step_dir, rel)
        w = known.get(rel)
        digest = _written_digest(path, listed[rel], w, stamps, clock) if w is not None else None
        out.append(OutputFile(rel, listed[rel][0], digest or _digest(path, listed[rel], linked, stamps, clock)))
    return out


def write_manifest(step_dir: str, stamps: Stamps | None = None, earlier: str | None = None,
                   written: Sequence[fsio.Written] = ()) -> list[OutputFile]:
    """Record the step's outputs (called by the runner after the step fn, before the artifact)."""
    files = build_manifest(step_dir, stamps, earlier, written)
    record = {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "files": [asdict(f) for f in files]}
    fsio.atomic_write_bytes(fsio.join(step_dir, markers.OUTPUTS_FILE), markers.to_json_bytes(record))
    return files


def read_manifest(step_dir: str) -> list[OutputFile] | None:
    """The recorded outputs; None when the step has no manifest. An unreadable manifest raises
    ValueError (a damaged step, never a trusted one)."""
    raw = fsio.read_if_exists(fsio.join(step_dir, markers.OUTPUTS_FILE))
    if raw is None:
        return None
    try:
        record = json.loads(raw)
        if record.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"format {record.get('format')!r}")
        return [OutputFile(str(f["path"]), int(f["size"]), str(f["xxh3_128"])) for f in record["files"]]
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{markers.OUTPUTS_FILE} is unreadable ({e})") from None


def _problem(step_dir: str, f: OutputFile, listed: dict[str, tuple[int, str | None]], hash_it: bool,
             stamps: Stamps | None) -> str | None:
    if f.path not in listed:
        return f"{f.path} is missing"
    size = listed[f.path][0]
    if size != f.size:
        return f"{f.path} size {size} != {f.size} recorded"
    if hash_it:
        path = fsio.join(step_dir, f.path)
        got = _digest(path, listed[f.path], {}, stamps, None)
        if got != f.xxh3_128:
            return f"{f.path} content changed (xxh3-128 {got} != {f.xxh3_128} recorded)"
    return None


def verify_step_dir(step_dir: str, *, fast: bool = False, max_problems: int = 20,
                    stamps: Stamps | None = None) -> VerifyReport:
    """Compare a step dir with its manifest: every file's size and xxh3-128 (default), or with ``fast``
    sizes only, plus hashes of small local files. Files the manifest does not list are ignored (they
    were never trusted). ``stamps``: the prefix's verified stats (a file with its stamped stat is not
    read again; what is read is stamped)."""
    report = VerifyReport(step_dir, manifest=True, fast=fast)
    try:
        files = read_manifest(step_dir)
    except ValueError as e:
        report.problems.append(str(e))
        return report
    if files is None:
        report.manifest = False
        return report
    listed = _walk(step_dir)
    local = fsio.is_local(step_dir)
    for f in files:
        hash_it = not fast or (local and f.size <= QUICK_HASH_BYTES)
        problem = _problem(step_dir, f, listed, hash_it, stamps)
        report.checked += 1
        if problem:
            report.problems.append(problem)
            if len(report.problems) >= max_problems:
                break
    return report


def damage_reason(step_dir: str, *, fast: bool = False, stamps: Stamps | None = None) -> str | None:
    """One line saying why a built step's outputs cannot be trusted (content, or sizes with ``fast``),
    else None."""
    report = verify_step_dir(step_dir, fast=fast, max_problems=3, stamps=stamps)
    if report.ok:
        return None
    more = f" (and {len(report.problems) - 1} more)" if len(report.problems) > 1 else ""
    return f"output damaged: {report.problems[0]}{more}"


def verify_steps(steps, prefix: str, *, fast: bool = False) -> list[dict]:
    """``datakit verify``: each step of the DAG as {name, state, detail, path}; state is OK, DAMAGED,
    UNVERIFIED (built before output manifests existed) or NOT_BUILT."""
    root = fsio.store_url(prefix)
    stamps = Stamps.of_prefix(root)
    rows = []
    for step in collect_steps(steps):
        d = fsio.join(root, step.dirname)
        row = {"name": step.name, "path": d}
        if not markers.is_built(d):
            rows.append({**row, "state": "NOT_BUILT", "detail": "not built under this prefix"})
            continue
        report = verify_step_dir(d, fast=fast, stamps=stamps)
        if not report.manifest and report.ok:
            state, detail = "UNVERIFIED", f"no {markers.OUTPUTS_FILE} (built before output manifests)"
        elif report.ok:
            state, detail = "OK", f"{report.checked} file(s) match"
        else:
            state, detail = "DAMAGED", "; ".join(report.problems)
        rows.append({**row, "state": state, "detail": detail})
    return rows  # the stamps are only read: `verify` writes nothing under the prefix


__all__ = ["OutputFile", "VerifyReport", "build_manifest", "write_manifest", "read_manifest", "verify_step_dir",
           "damage_reason", "is_output_name", "verify_steps"]
