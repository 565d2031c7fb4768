"""Small fsspec helpers the step runner needs: atomic writes, exclusive create, append.

Why a module of its own: markers and leases are only trustworthy if a reader can never see a half
written file. Local disks get temp + fsync + rename (and link() for create-if-absent, which is atomic
AND publishes the full content at once); other fsspec stores get a single put, which object stores
apply atomically. Everything takes an (fs, path) pair as returned by ``fsspec.core.url_to_fs``.
"""
from __future__ import annotations

import errno
import os
import posixpath
import shutil
import tempfile
import uuid
from dataclasses import dataclass

import fsspec
from fsspec.implementations.local import LocalFileSystem


def open_prefix(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """(filesystem, root path without protocol) for a local dir or an fsspec URL."""
    fs, root = fsspec.core.url_to_fs(url)
    return fs, root.rstrip("/") or "/"


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    return isinstance(fs, LocalFileSystem)


def join(root: str, *parts: str) -> str:
    return posixpath.join(root, *parts)


def to_url(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """What users see: plain paths for local disk, protocol URLs for everything else."""
    return path if is_local(fs) else fs.unstrip_protocol(path)


def read_bytes(fs: fsspec.AbstractFileSystem, path: str) -> bytes | None:
    """File content, or None when it does not exist (a normal state for markers)."""
    try:
        return fs.cat_file(path)
    except FileNotFoundError:
        return None


def _write_temp(directory: str, data: bytes, tmp_prefix: str) -> str:
    """A durable (fsynced) temp file holding `data` in `directory`; the caller renames or links it."""
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=tmp_prefix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        _unlink_quiet(tmp)
        raise
    return tmp


def write_atomic(fs: fsspec.AbstractFileSystem, path: str, data: bytes, *, tmp_prefix: str = ".tmp-") -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new file, never a mix."""
    if is_local(fs):
        tmp = _write_temp(os.path.dirname(path), data, tmp_prefix)
        try:
            os.replace(tmp, path)
        except BaseException:
            _unlink_quiet(tmp)
            raise
    else:
        fs.pipe_file(path, data)


def create_exclusive(fs: fsspec.AbstractFileSystem, path: str, data: bytes, *, tmp_prefix: str = ".tmp-") -> bool:
    """Create ``path`` holding ``data`` only if it does not exist. True if this call created it.

    Local: write a temp file, then link() it to the target: link fails if the target exists, and the
    target appears with its full content (O_EXCL alone would expose an empty file for a moment).
    Other stores: mode "xb" (conditional put where the store supports it); stores without it fall back
    to check-then-put, which is best effort - the lease re-verifies after creating for that reason.
    """
    if is_local(fs):
        tmp = _write_temp(os.path.dirname(path), data, tmp_prefix)
        try:
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            return True
        finally:
            _unlink_quiet(tmp)
    try:
        with fs.open(path, "xb") as f:
            f.write(data)
        return True
    except FileExistsError:
        return False
    except (ValueError, NotImplementedError, TypeError):
        # Store without exclusive-create support.
        if fs.exists(path):
            return False
        fs.pipe_file(path, data)
        return True


def append_line(fs: fsspec.AbstractFileSystem, path: str, line: str) -> None:
    """Append one line. Local: a single O_APPEND write, so concurrent runners interleave whole lines."""
    data = (line.rstrip("\n") + "\n").encode("utf-8")
    if is_local(fs):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        return
    try:
        with fs.open(path, "ab") as f:
            f.write(data)
    except (ValueError, NotImplementedError, TypeError):
        # Object stores cannot append: rewrite (not safe against concurrent appenders; documented).
        old = read_bytes(fs, path) or b""
        fs.pipe_file(path, old + data)


def list_names(fs: fsspec.AbstractFileSystem, directory: str) -> list[str]:
    """Base names directly under ``directory`` (empty if it does not exist), never from a stale cache."""
    if is_local(fs):
        try:
            return sorted(os.listdir(directory))
        except FileNotFoundError:
            return []
    fs.invalidate_cache(directory)
    try:
        entries = fs.ls(directory, detail=False)
    except FileNotFoundError:
        return []
    return sorted(posixpath.basename(str(e).rstrip("/")) for e in entries)


def remove(fs: fsspec.AbstractFileSystem, path: str) -> None:
    """Remove a file or a whole tree; already gone is fine (another cleaner got there first)."""
    try:
        if is_local(fs):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        else:
            fs.rm(path, recursive=True)
    except FileNotFoundError:
        pass


def _unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


# ---------------------------------------------------------------- full and read-only disks

# errno values that mean "this place cannot take our bytes", as opposed to a bug or bad data.
_NO_SPACE = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}
_NOT_WRITABLE = {errno.EROFS, errno.EACCES, errno.EPERM}
_ERRNO_TEXT = {errno.ENOSPC: "[Errno 28]", errno.EROFS: "[Errno 30]", errno.EACCES: "[Errno 13]"}
TEMP_MARK = ".tmp-"


@dataclass(frozen=True)
class DiskProblem:
    """A write that failed because of the disk, not the code: full, read-only or not ours to write.

    Why a record of its own: a 134-line chained traceback of a full disk tells the user nothing they
    can act on; this says what happened, where, and what to do, in one line."""

    code: int
    path: str | None

    @property
    def no_space(self) -> bool:
        return self.code in _NO_SPACE

    def message(self, where: str | None = None) -> str:
        path = self.path or where or "the output prefix"
        if self.no_space:
            return (f"no space left on device while writing {path}: free space there (or pass --prefix "
                    "on a bigger disk) and rerun; finished steps are kept")
        what = "read-only file system" if self.code == errno.EROFS else "permission denied"
        return (f"cannot write {path}: {what}; choose a writable --prefix (or fix its permissions) and "
                "rerun")


class PrefixNotWritable(RuntimeError):
    """The output prefix cannot be written at all (read-only, no permission, or already full)."""

    def __init__(self, problem: DiskProblem, root: str):
        super().__init__(problem.message(root))
        self.problem, self.root = problem, root


def disk_problem(exc: BaseException | None) -> DiskProblem | None:
    """The disk problem behind an exception, looking through its cause/context chain and through
    errors re-raised from engine workers (which carry only the original's type and message)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in _NO_SPACE | _NOT_WRITABLE:
            return DiskProblem(exc.errno, exc.filename if isinstance(exc.filename, str) else None)
        info = getattr(exc, "info", None)
        if isinstance(info, dict):
            text = f"{info.get('type', '')}: {info.get('message', '')}"
            for code, mark in _ERRNO_TEXT.items():
                if mark in text:
                    return DiskProblem(code, _quoted_path(str(info.get("message", ""))))
        exc = exc.__cause__ or exc.__context__
    return None


def _quoted_path(message: str) -> str | None:
    """The path in an OSError's text (``[Errno 28] No space left on device: '/x/y'``), if any."""
    head, sep, tail = message.rpartition(": '")
    return tail[:-1] if sep and tail.endswith("'") else None


def check_writable(fs: fsspec.AbstractFileSystem, root: str) -> None:
    """Create the prefix and write (then remove) a small probe file in it; PrefixNotWritable if the
    disk refuses. Why up front: a read-only or full prefix should cost one clear line, not a step."""
    probe = join(root, f"{TEMP_MARK}probe-{uuid.uuid4().hex[:12]}")
    try:
        fs.makedirs(root, exist_ok=True)
        write_atomic(fs, probe, b"probe\n")
    except OSError as e:
        problem = disk_problem(e)
        if problem is None:
            raise
        raise PrefixNotWritable(problem, to_url(fs, root)) from None
    finally:
        try:
            remove(fs, probe)
        except OSError:
            pass


def is_temp_name(name: str) -> bool:
    """Names our writers give unpublished files (``.tmp-*``, ``.<name>.tmp-*``): never outputs."""
    return TEMP_MARK in name


def remove_temp_files(fs: fsspec.AbstractFileSystem, directory: str, keep=lambda name: False) -> int:
    """Remove every unpublished temp file under ``directory`` except names ``keep`` protects (a live
    lease's own temp file); returns how many. A failed attempt's temp files are garbage (they are never
    renamed into place) and may be what filled the disk."""
    removed = 0
    try:
        found = fs.find(directory, withdirs=False) if not is_local(fs) else [
            os.path.join(r, n) for r, _, names in os.walk(directory) for n in names]
    except FileNotFoundError:
        return 0
    for path in found:
        name = posixpath.basename(str(path))
        if is_temp_name(name) and not keep(name):
            remove(fs, str(path))
            removed += 1
    return removed
