"""The one way to the store: every read, write, exclusive create, append, removal and listing of the
engine goes through this module, local paths fast, everything else through fsspec.

Atomic publishes. Every output goes to a temporary name first and is renamed into place, so a crash
leaves nothing a rerun would mistake for a finished file. Local disks get temp + fsync + rename, and
``link()`` for create-if-absent (atomic AND the target appears with its full content). On object stores
(gs://, s3://) an output is one PUT straight to its final name (a small record: `atomic_write_bytes`;
a streamed output: a local temporary file, the only local footprint, uploaded by `commit`): a PUT becomes
visible only when it completes, which gives the same guarantee without a copy + delete "rename", and it
can be retried as a whole. Exclusive create is a conditional PUT (If-None-Match) where the store has it.
Each upload is hashed by its uploader, from the local file or the bytes it sends, and noted with its
size (`publish_log`): the step's manifest takes that digest instead of downloading the object again.

Bounded waits. Object stores go away for seconds at a time (a restart, a network blip, throttling).
Every remote call made here goes through `retrying`: exponential backoff over `DATAKIT_STORE_RETRY_S`
seconds (default 60), then `StoreUnavailable` naming the store, its endpoint, the call and what to do.
Every single call has a deadline too (`DATAKIT_STORE_TIMEOUT_S`, default 20 s: botocore's connect and
read timeouts, and fsspec's own timeout around the call, longer by the bytes it moves), so a store that
stops answering (paused, partitioned) costs a timeout and a retry, never a hang; a call still retrying
after that long logs "store ... not answering for N s (retrying until ...)". A store that exhausted a
whole budget is remembered as down in this process: later calls try it once, without a new budget, until
one answers, so a failing run's clean-up fails in seconds. No remote file object is
left for a destructor to flush: writes are single puts or uploads of closed local files. Remote reads
are ranged GETs of bounded chunks (`open_read`, `open_range`), so a reader fetches only the bytes it asks
for and a dropped connection costs one chunk, re-fetched on retry, never the whole file.

Paths are strings: a local path (or file:// URL) or an fsspec URL; `store_url` gives a prefix's canonical
form and `join` appends to either. Full and read-only disks are classified here too (`disk_problem`), so
one clear line replaces a chained traceback wherever a write fails.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import inspect
import io
import logging
import os
import posixpath
import re
import shutil
import socket
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import IO, Callable, Iterator, Sequence, TypeVar

from . import publish_log
from .publish_log import Written


T = TypeVar("T")
R = TypeVar("R")
READ_CHUNK_BYTES = 8 << 20  # one ranged GET per chunk on object stores
MIN_TRANSFER_RATE = 1 << 20  # bytes/s a call that moves data is allowed on top of its deadline
log = logging.getLogger("datakit.store")
_DOWN: set[str] = set()         # stores this process found down (a whole retry budget spent)
_WARNED: dict[str, float] = {}  # store -> when this process last said it is not answering


class StoreUnavailable(OSError):
    """The object store did not answer (connection refused, timeouts, 5xx) within the retry budget."""


def is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def map_reads(fn: Callable[[T], R], items: Sequence[T], local: bool, threads: int) -> list[R]:
    """``fn`` over ``items`` (small reads: footers, sidecars), results in order: one after another in this
    thread when the reads are ``local``, concurrently on up to ``threads`` threads on an object store, where
    each read is a request. Locally a thread pool costs more than the reads: 116 parquet footers took
    0.025-0.05 CPU-s on 8 threads against 0.008-0.014 in one; a reducer's sidecars, thousands of thread
    starts per step."""
    if local:
        return [fn(x) for x in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(items)))) as pool:
        return list(pool.map(fn, items))


def local_path(path: str) -> str:
    """A local path or file:// URL as a plain filesystem path."""
    return path[len("file://") :] if path.startswith("file://") else path


def _fsspec():
    """fsspec, imported when a path first needs it: a run on local paths never does, and its import
    (with asyncio's) is about 0.07 CPU-s of every process's start."""
    import fsspec

    return fsspec


def fs_for(path: str):
    """The fsspec filesystem of a URL, with the per-call deadline configured where the client has one."""
    protocol = path.split("://", 1)[0] if "://" in path else "file"
    fs, _ = _fsspec().core.url_to_fs(path, **_store_options(protocol))
    if protocol in _S3:
        fs.retries = 1  # s3fs retries a stalled call 5 times on its own (a class attribute): `retrying` decides
    return fs


_S3 = ("s3", "s3a")


def call_timeout() -> float:
    """Seconds one store call may take (connect, or wait for a reply) before it counts as failed."""
    return float(os.environ.get("DATAKIT_STORE_TIMEOUT_S", "20"))


def _store_options(protocol: str) -> dict:
    """Client settings that bound every call: botocore's connect/read timeouts from one setting, and a
    single attempt per call (botocore's own retries would multiply the deadline; `retrying` retries).
    Settings the user put in fsspec's configuration for the protocol win."""
    if protocol not in _S3:
        return {}
    t = call_timeout()
    conf = _fsspec().config.conf.get(protocol, {})
    user = dict(conf.get("config_kwargs") or {})
    options = {"config_kwargs": {"connect_timeout": t, "read_timeout": t, "retries": {"total_max_attempts": 1},
                                 **user}}
    # The endpoint from the environment, named in the options, so fsspec's instance cache keys on it: a
    # filesystem made for one endpoint is never handed out after the environment points at another.
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        options["client_kwargs"] = {"endpoint_url": endpoint, **dict(conf.get("client_kwargs") or {})}
    return options


def bounded(fs, method: str, *args, nbytes: int | None = 0, **kwargs):
    """``fs.<method>(*args, **kwargs)`` with a deadline: fsspec's timeout around the call (the call timeout
    plus ``nbytes`` at `MIN_TRANSFER_RATE`) on async filesystems. ``nbytes=None``: a call of many
    requests (a deep listing, a recursive delete) bounded per request by the client's timeouts only."""
    fn = getattr(fs, method)
    if nbytes is not None and inspect.iscoroutinefunction(getattr(fn, "__wrapped__", None)):
        kwargs["timeout"] = call_timeout() + nbytes / MIN_TRANSFER_RATE
    return fn(*args, **kwargs)


def store_url(url: str) -> str:
    """The canonical form of a prefix: an absolute local path, or a protocol URL without a trailing
    slash. Why: step dirs and reports name the same place the same way however the user typed it.
    A local path is made absolute as fsspec's local filesystem does (without importing fsspec)."""
    if is_local(url) and os.sep == "/":
        return _absolute_posix(local_path(url)).rstrip("/") or "/"
    fs, path = _fsspec().core.url_to_fs(url)
    path = path.rstrip("/") or "/"
    return path if is_local(url) else fs.unstrip_protocol(path)


def _absolute_posix(path: str) -> str:
    """What fsspec's ``make_path_posix`` gives for a path on a POSIX system: as it is when absolute, the
    user's home expanded, else under the working directory (no other normalisation)."""
    if path.startswith("/"):
        return path
    if path.startswith("~"):
        return os.path.expanduser(path)
    if path.startswith("./"):
        path = path[2:]
    elif path == ".":
        path = ""
    return f"{os.getcwd()}/{path}"


def join(root: str | os.PathLike, *rel: str) -> str:
    """``root/rel...`` with one slash between parts, for local paths and URLs alike (no os.sep: an
    fsspec URL always uses "/", and the same string must come out on every platform)."""
    root = os.fspath(root)
    parts = [p for p in rel if p]
    if not root:
        return "/".join(parts)
    return "/".join([root.rstrip("/"), *parts])


def _transient(exc: BaseException) -> bool:
    """Errors worth retrying: the store (or the way to it) failed, not the request.

    Missing files, permissions and bad arguments are answers, not outages; anything that looks like a
    refused/reset connection, a timeout or a 5xx/throttling reply is retried."""
    if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError,
                        FileExistsError, ValueError, TypeError)):
        return False
    if isinstance(exc, (ConnectionError, TimeoutError, socket.timeout)):
        return True
    names = {c.__name__ for c in type(exc).__mro__}
    if names & {"EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ClientConnectorError",
                "ServerDisconnectedError", "ClientOSError", "ClientPayloadError", "IncompleteRead",
                "ResponseStreamingError", "HTTPClientError", "ProxyConnectionError", "FSTimeoutError"}:
        return True
    text = str(exc)
    return any(s in text for s in ("Connection refused", "Could not connect", "SlowDown", "ServiceUnavailable",
                                   "InternalError", "503", "500 Internal", "Connection reset", "timed out"))


def _retry_budget() -> float:
    return float(os.environ.get("DATAKIT_STORE_RETRY_S", "60"))


def retrying(what: str, path: str, fn: Callable[[], T], budget_s: float | None = None) -> T:
    """Call ``fn`` (one remote operation on ``path``), retrying transient store errors with exponential
    backoff (0.2 s doubling to 10 s) for ``budget_s`` seconds, then raise `StoreUnavailable`.

    Why here: every stage reaches the store through this module, so one retry policy covers them all,
    and a store that stays down fails with one clear line instead of a botocore traceback. A store this
    process already found down gets one attempt (no new budget) until it answers again."""
    store = _store_of(path)
    budget = 0.0 if store in _DOWN else (_retry_budget() if budget_s is None else budget_s)
    start = time.monotonic()
    deadline = start + budget
    delay, attempts = 0.2, 0
    while True:
        attempts += 1
        try:
            result = fn()
        except Exception as exc:
            if not _transient(exc):
                _DOWN.discard(store)  # an answer (missing file, refused permission): the store is up
                raise
            if time.monotonic() + delay > deadline:
                _DOWN.add(store)
                raise StoreUnavailable(_unavailable(what, path, store, attempts, budget, exc)) from exc
            _warn_slow(store, what, path, time.monotonic() - start, deadline)
            _invalidate(path)
            time.sleep(delay)
            delay = min(delay * 2, 10.0)
        else:
            _DOWN.discard(store)
            return result


def _unavailable(what: str, path: str, store: str, attempts: int, budget: float, exc: BaseException) -> str:
    """The one line a store that stayed down costs: the store and its endpoint, the call, what to do."""
    last = " ".join(f"{type(exc).__name__}: {exc}".split())
    tried = f"failed {attempts} times over {budget:g}s" if budget else "failed (the store was already down)"
    return (f"object store unavailable: {what} {path} {tried} (last error: {last}); check that the store at "
            f"{store} is up and reachable from every node (endpoint, credentials, network), then rerun the "
            "same command: finished steps are kept (raise DATAKIT_STORE_RETRY_S to wait longer)")


def _warn_slow(store: str, what: str, path: str, waited: float, deadline: float) -> None:
    """Say so when a call has been retrying for a call timeout or more (at most once per call timeout
    per store and process): a store that stopped answering must not look like a silent stall."""
    every = call_timeout()
    now = time.monotonic()
    if waited < every or now - _WARNED.get(store, float("-inf")) < every:
        return
    _WARNED[store] = now
    until = time.strftime("%H:%M:%S", time.localtime(time.time() + deadline - now))
    log.warning("store %s not answering for %.0f s (retrying until %s): %s %s", store, waited, until, what, path)


def store_failure(exc: BaseException | None) -> StoreUnavailable | None:
    """The `StoreUnavailable` behind an exception (its cause/context chain, or an engine worker's error
    re-raised with only its type and message), so a caller prints its one line instead of a traceback."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, StoreUnavailable):
            return exc
        info = getattr(exc, "info", None)
        if isinstance(info, dict) and info.get("type") == StoreUnavailable.__name__:
            return StoreUnavailable(str(info.get("message", "")))
        exc = exc.__cause__ or exc.__context__
    return None


def _store_of(path: str) -> str:
    """The store part of a URL, plus the endpoint when one is configured (s3-compatible servers)."""
    scheme, _, rest = path.partition("://")
    store = f"{scheme}://{rest.split('/', 1)[0]}"
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    return f"{store} (endpoint {endpoint})" if endpoint and scheme in ("s3", "s3a") else store


def _invalidate(path: str) -> None:
    """Forget cached listings for a path after a failure, so a retry asks the store again."""
    try:
        fs_for(path).invalidate_cache()
    except Exception:
        pass


class _RemoteRange(io.RawIOBase):
    """A seekable read-only view of [start, start+length) of a remote file: each read is one ranged GET
    (through `retrying`), so a reader never downloads bytes it does not ask for."""

    def __init__(self, path: str, start: int, length: int) -> None:
        super().__init__()
        self.path, self.start, self.length, self.pos = path, start, length, 0
        self.fs = fs_for(path)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.length}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def size(self) -> int:
        return self.length

    def readall(self) -> bytes:
        parts = []
        while self.pos < self.length:
            chunk = bytearray(min(READ_CHUNK_BYTES, self.length - self.pos))
            parts.append(bytes(chunk[: self.readinto(chunk)]))
        return b"".join(parts)

    def readinto(self, buf) -> int:
        n = min(len(buf), self.length - self.pos)
        if n <= 0:
            return 0
        lo = self.start + self.pos
        data = retrying("read", self.path, lambda: bounded(self.fs, "cat_file", self.path, start=lo, end=lo + n, nbytes=n))
        if len(data) != n:
            raise IOError(f"{self.path}: asked bytes {lo}-{lo + n} and got {len(data)} bytes; the object "
                          "changed or was truncated while being read; rerun the step")
        buf[: len(data)] = data
        self.pos += len(data)
        return len(data)


def open_read(path: str) -> IO[bytes]:
    """Open a file for reading. Remote: one HEAD for the size, then ranged GETs of up to 8 MB as read."""
    if is_local(path):
        return open(local_path(path), "rb")
    return io.BufferedReader(_RemoteRange(path, 0, size(path)), READ_CHUNK_BYTES)


def info(path: str) -> dict:
    """What the store records for a file (size, and on object stores its ETag / checksums): one HEAD."""
    if is_local(path):
        return {"name": path, "size": os.path.getsize(local_path(path)), "type": "file"}
    fs = fs_for(path)
    fs.invalidate_cache(path)  # the store's answer now, not a listing fsspec kept
    return retrying("stat", path, lambda: dict(bounded(fs, "info", path)))


def size(path: str) -> int:
    """A file's size in bytes (FileNotFoundError when it is not there): one HEAD on object stores."""
    if is_local(path):
        return os.path.getsize(local_path(path))
    return retrying("stat", path, lambda: int(bounded(fs_for(path), "size", path)))


def read_bytes(path: str) -> bytes:
    """A whole (small) file's bytes: one GET on an object store, no HEAD first (sidecars, markers)."""
    if is_local(path):
        with open(local_path(path), "rb") as f:
            return f.read()
    return retrying("read", path, lambda: bounded(fs_for(path), "cat_file", path, nbytes=READ_CHUNK_BYTES))


def open_range(path: str, offset: int, length: int) -> IO[bytes]:
    """Open only bytes [offset, offset+length) of a file: reducers read their ranges of a shuffle file
    with this, so on an object store they GET exactly those bytes (in chunks of at most 8 MB)."""
    if is_local(path):
        f = open(local_path(path), "rb")
        f.seek(offset)
        return _Limited(f, length)
    raw = _RemoteRange(path, offset, length)
    return io.BufferedReader(raw, max(1, min(length, READ_CHUNK_BYTES)))


class _Limited(io.RawIOBase):
    """A local file object that ends after ``length`` bytes from where it stands."""

    def __init__(self, f: IO[bytes], length: int) -> None:
        super().__init__()
        self._f, self._left = f, length

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        n = min(len(buf), self._left)
        if n <= 0:
            return 0
        data = self._f.read(n)
        buf[: len(data)] = data
        self._left -= len(data)
        return len(data)

    def close(self) -> None:
        self._f.close()
        super().close()


def read_if_exists(path: str) -> bytes | None:
    """A whole small file's bytes, or None when it does not exist (a normal state for markers)."""
    try:
        return read_bytes(path)
    except FileNotFoundError:
        return None


def read_table(path: str, columns: Sequence[str] | None = None):
    """One parquet file as an Arrow table (only ``columns`` when given). Local: pyarrow reads the
    path itself, through `ParquetFile` rather than `pq.read_table`, whose dataset layer costs every
    process that first calls it half a CPU-second of imports (a worker of a small incremental run
    spends more on that than on its data); remote: through `open_read`, so every ranged GET is
    retried like any other call."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = list(columns) if columns is not None else None
    if is_local(path):
        with pq.ParquetFile(local_path(path)) as pf:
            missing = [c for c in cols or () if c not in pf.schema_arrow.names]
            if missing:  # as pq.read_table says it (ParquetFile.read would skip the column)
                raise pa.ArrowInvalid(f"No match for FieldRef.Name({missing[0]}) in {path}")
            return pf.read(columns=cols)
    with open_read(path) as f:
        return pq.read_table(f, columns=cols)


def read_parquet_metadata(path: str):
    """A parquet file's footer (row counts, row groups, schema) without its data: one ranged read of
    the tail on object stores."""
    import pyarrow.parquet as pq

    if is_local(path):
        return pq.read_metadata(local_path(path))
    with open_read(path) as f:
        return pq.read_metadata(f)


def exists(path: str) -> bool:
    if is_local(path):
        return os.path.exists(local_path(path))
    return retrying("exists", path, lambda: bounded(fs_for(path), "exists", path))


def is_dir(path: str) -> bool:
    if is_local(path):
        return os.path.isdir(local_path(path))
    return retrying("stat", path, lambda: bounded(fs_for(path), "isdir", path))


def list_names(directory: str) -> list[str]:
    """Base names directly under ``directory``, sorted (empty if it does not exist), never from a
    stale listing cache: markers and leases are read back right after a peer wrote them."""
    if is_local(directory):
        try:
            return sorted(os.listdir(local_path(directory)))
        except (FileNotFoundError, NotADirectoryError):
            return []
    return retrying("list", directory, lambda: _remote_names(directory))


def _remote_names(directory: str) -> list[str]:
    fs = fs_for(directory)
    fs.invalidate_cache(directory)
    try:
        entries = bounded(fs, "ls", directory, detail=False)
    except FileNotFoundError:
        return []
    return sorted(posixpath.basename(str(e).rstrip("/")) for e in entries)


def walk(directory: str) -> dict[str, int]:
    """Every file under ``directory`` (relative '/'-separated path -> size), hidden ones included: what a
    step dir holds (one listing on object stores). Data inputs are listed by `datakit.core.listing`."""
    if is_local(directory):
        base = local_path(directory)
        out: dict[str, int] = {}
        for root, _, names in os.walk(base):
            for n in names:
                full = os.path.join(root, n)
                out[os.path.relpath(full, base).replace(os.sep, "/")] = os.path.getsize(full)
        return out
    return {rel: size for rel, (size, _) in walk_versions(directory).items()}


def walk_versions(directory: str) -> dict[str, tuple[int, str | None]]:
    """`walk`, each file with its version on an object store (`version_of`; None on a local disk), from the
    same one listing."""
    if is_local(directory):
        return {rel: (size, None) for rel, size in walk(directory).items()}
    return retrying("list", directory, lambda: _remote_walk(directory))


def _remote_walk(directory: str) -> dict[str, tuple[int, str | None]]:
    fs = fs_for(directory)
    base = fs._strip_protocol(directory).rstrip("/") + "/"
    try:
        found = bounded(fs, "find", directory, withdirs=False, detail=True, nbytes=None)
    except FileNotFoundError:
        return {}
    out = {}
    for path, info in found.items():
        rel = str(path)[len(base):] if str(path).startswith(base) else posixpath.basename(str(path))
        out[rel] = (int(info.get("size") or 0), version_of(info))
    return out


# What an object store's listing and HEAD say changes whenever an object is written again: S3's ETag
# (the content's MD5 for a single-part upload), GCS's generation, Azure's etag, memory://'s creation time.
_VERSION_KEYS = ("ETag", "generation", "etag", "created")


_MD5_ETAG = re.compile(r'^"?[0-9a-f]{32}"?$')


def content_version(version: str | None) -> bool:
    """Whether an object's version is a digest of its bytes, so equal versions mean equal bytes: S3's ETag
    of an object uploaded in one part (its MD5; a multipart upload's ETag ends in -N and is not)."""
    return version is not None and _MD5_ETAG.match(version) is not None


def version_of(info: dict) -> str | None:
    """An object's version from its listing or HEAD entry (`_VERSION_KEYS`), or None where the store gives
    none: with the size, it stands where a local file's mtime and inode do (`steps/stamps.py`)."""
    for key in _VERSION_KEYS:
        value = info.get(key)
        if value not in (None, ""):
            return str(value)
    return None


# ---------------------------------------------------------------- writes


def makedirs(path: str) -> None:
    if is_local(path):
        os.makedirs(local_path(path), exist_ok=True)
    else:
        retrying("makedirs", path, lambda: bounded(fs_for(path), "makedirs", path, exist_ok=True))


def remove(path: str) -> None:
    """Delete a file or a whole tree (local or remote); already gone is fine (another cleaner got there
    first). Remote: one listing and batched deletes (S3's DeleteObjects takes 1,000 keys a request)."""
    if is_local(path):
        p = local_path(path)
        try:
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)
        except FileNotFoundError:
            pass
        return
    try:
        retrying("delete", path, lambda: bounded(fs_for(path), "rm", path, recursive=True, nbytes=None))
    except FileNotFoundError:
        pass


def remove_if_empty(directory: str) -> None:
    """Remove a local directory that is empty (bookkeeping dirs a run leaves nothing in); anything else,
    and object stores (which have no empty directories), is left as it is."""
    if is_local(directory):
        try:
            os.rmdir(local_path(directory))
        except OSError:
            pass


TEMP_MARK = ".tmp-"


def tmp_name(path: str) -> str:
    head, tail = os.path.split(path)
    return os.path.join(head, f"{TEMP_MARK}{uuid.uuid4().hex[:12]}-{tail}")


def is_temp_name(name: str) -> bool:
    """Names our writers give unpublished files (``.tmp-*``, ``.<name>.tmp-*``): never outputs."""
    return TEMP_MARK in name


def remove_temp_files(directory: str, keep: Callable[[str], bool] = lambda name: False) -> int:
    """Remove every unpublished temp file under ``directory`` except names ``keep`` protects (a live
    lease's own temp file); returns how many. A failed attempt's temp files are garbage (they are never
    renamed into place) and may be what filled the disk."""
    removed = 0
    for rel in walk(directory):
        name = posixpath.basename(rel)
        if is_temp_name(name) and not keep(name):
            remove(join(directory, rel))
            removed += 1
    return removed


def open_atomic(path: str) -> tuple[IO[bytes], str]:
    """Open a temp file for `path`; `commit(tmp, path)` publishes it, `discard(tmp)` drops it.

    Local: beside `path` (renamed into place). Remote: a local temporary file (TMPDIR), uploaded to
    `path` by `commit` in one retried PUT, so the store never holds a half-written object."""
    if is_local(path):
        tmp = local_path(tmp_name(path))
        os.makedirs(os.path.dirname(tmp) or ".", exist_ok=True)
        return open(tmp, "wb"), tmp
    fd, tmp = tempfile.mkstemp(prefix="datakit-upload-", suffix="-" + path.rsplit("/", 1)[-1][-60:])
    return os.fdopen(fd, "wb"), tmp


def commit(tmp: str, path: str) -> None:
    if is_local(path):
        os.replace(tmp, local_path(path))
        return
    if not is_local(tmp):  # a remote temp name (from older callers): rename within the store
        retrying("rename", path, lambda: fs_for(path).mv(tmp, path))
        return
    try:
        size, digest = os.path.getsize(tmp), xxh3_file(tmp)  # a local read: no download to hash it later
        retrying("upload", path, lambda: bounded(fs_for(path), "put_file", tmp, path, nbytes=size))
    finally:
        discard(tmp)
    publish_log.note(Written(path, size, digest))


def discard(tmp: str) -> None:
    try:
        if is_local(tmp):
            os.unlink(local_path(tmp))
        else:
            retrying("delete", tmp, lambda: bounded(fs_for(tmp), "rm", tmp))
    except FileNotFoundError:
        pass


@contextlib.contextmanager
def atomic_output(path: str) -> Iterator[IO[bytes]]:
    """Write `path` through a temp file: published on success (local files fsynced first), discarded on error."""
    f, tmp = open_atomic(path)
    try:
        with f:
            yield f
            if is_local(path):
                f.flush()
                os.fsync(f.fileno())
    except BaseException:
        discard(tmp)
        raise
    commit(tmp, path)


def copy_file(src: str, dst: str) -> None:
    """Copy `src` to `dst` (local paths or fsspec URLs, in any mix), published atomically: within one
    object store the store copies it (S3 CopyObject, GCS rewrite: no byte passes through this process,
    and the copy appears whole), else streamed through a temporary file."""
    if not is_local(src) and not is_local(dst) and src.split("://", 1)[0] == dst.split("://", 1)[0]:
        fs = fs_for(dst)
        retrying("copy", dst, lambda: bounded(fs, "copy", fs._strip_protocol(src), fs._strip_protocol(dst),
                                               nbytes=None))
        return
    with open_read(src) as f, atomic_output(dst) as out:
        shutil.copyfileobj(f, out, 1 << 20)


def link_or_copy(src: str, dst: str) -> None:
    """Put `src`'s bytes at `dst`: a hard link when both are on one local file system (free: outputs are
    never written in place, every write is temp + rename, so a link never sees a later change), else a
    copy (`copy_file`). An existing `dst` is replaced."""
    if is_local(src) and is_local(dst) and _hard_link(local_path(src), local_path(dst)):
        return
    copy_file(src, dst)


def _hard_link(s: str, d: str) -> bool:
    """Link ``s`` at ``d``: straight to its name when nothing is there (the usual case: a step's outputs
    go to a fresh dir; an edit links hundreds of files, each a temp link and a rename before), else
    through a temp link renamed over it; the folder is made only when missing. False where the file
    system cannot link (then the caller copies)."""
    try:
        try:
            os.link(s, d)
        except FileNotFoundError:
            if not os.path.exists(s):
                raise
            os.makedirs(os.path.dirname(d) or ".", exist_ok=True)
            os.link(s, d)
    except FileExistsError:
        tmp = tmp_name(d)
        os.link(s, tmp)
        os.replace(tmp, d)
    except OSError as e:
        if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
        return False
    return True


def _write_temp(directory: str, data: bytes, tmp_prefix: str) -> str:
    """A durable (fsynced) temp file holding `data` in `directory`; the caller renames or links it."""
    fd, tmp = tempfile.mkstemp(dir=directory or ".", prefix=tmp_prefix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        _unlink_quiet(tmp)
        raise
    return tmp


def clock_ns(directory: str) -> int | None:
    """The file system's own clock where local ``directory`` lives, in its timestamp granularity: the
    mtime of a file created there now (and removed). None for a remote directory. Why not
    ``time.time_ns()``: a stat vouches for content only when any later write must change the mtime, that
    is when the file's mtime is already behind the clock that stamps writes, at the file system's
    granularity, which only a file written there shows (steps/fingerprint.py, racy files). None too
    where no file can be created there."""
    if not is_local(directory):
        return None
    try:
        fd, tmp = tempfile.mkstemp(dir=local_path(directory) or ".", prefix=TEMP_MARK + "clock-")
    except OSError:  # missing or read-only: callers fall back to the wall clock's safety window
        return None
    try:
        return os.fstat(fd).st_mtime_ns
    finally:
        os.close(fd)
        _unlink_quiet(tmp)


def _unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def atomic_write_bytes(path: str, data: bytes, *, tmp_prefix: str = TEMP_MARK, digest: str | None = None) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new file, never a mix. Local:
    an fsynced temp file (named ``tmp_prefix``..., so a lease can protect its own) renamed into place;
    remote: one retried PUT, noted with ``data``'s xxh3-128 (``digest`` when the caller has it)."""
    if not is_local(path):
        retrying("write", path, lambda: bounded(fs_for(path), "pipe_file", path, data, nbytes=len(data)))
        publish_log.note(Written(path, len(data), digest or _xxh3_bytes(data)))
        return
    p = local_path(path)
    os.makedirs(os.path.dirname(p) or ".", exist_ok=True)
    tmp = _write_temp(os.path.dirname(p), data, tmp_prefix)
    try:
        os.replace(tmp, p)
    except BaseException:
        _unlink_quiet(tmp)
        raise


def _xxh3_bytes(data: bytes) -> str:
    import xxhash

    return xxhash.xxh3_128_hexdigest(data)


def write_noted(path: str, data: bytes) -> Written:
    """`atomic_write_bytes`, noted in `publish_log` with ``data``'s xxh3-128 (hashed once; on a local disk
    with the file's stat right after), so that the step's outputs manifest takes the digest instead of
    reading the file back. Returns the note."""
    digest = _xxh3_bytes(data)
    atomic_write_bytes(path, data, digest=digest)  # an upload is noted there
    return note_published(path, len(data), digest)


def note_published(path: str, size: int, digest: str) -> Written:
    """The record of a file just published holding ``size`` bytes whose xxh3-128 is ``digest`` (computed
    by its writer from what it wrote), for the step's outputs manifest: on a local disk with the stat it
    has now, and noted in `publish_log`; on an object store the upload itself noted it (`commit`,
    `atomic_write_bytes`)."""
    if not is_local(path):
        return Written(path, size, digest)
    st = os.stat(local_path(path))
    w = Written(path, size, digest, st.st_mtime_ns, st.st_ino)
    publish_log.note(w)
    return w


def create_exclusive(path: str, data: bytes, *, tmp_prefix: str = TEMP_MARK) -> bool:
    """Create ``path`` holding ``data`` only if it does not exist. True if this call created it.

    Local: write a temp file, then link() it to the target: link fails if the target exists, and the
    target appears with its full content (O_EXCL alone would expose an empty file for a moment).
    Remote: a conditional PUT (If-None-Match) where the store supports it; stores without it fall back
    to check-then-put, which is best effort - the lease re-verifies after creating for that reason. A
    retried PUT whose first try landed reads as "exists": the lease then waits out its own record."""
    if is_local(path):
        p = local_path(path)
        tmp = _write_temp(os.path.dirname(p), data, tmp_prefix)
        try:
            os.link(tmp, p)
            return True
        except FileExistsError:
            return False
        finally:
            _unlink_quiet(tmp)
    try:
        retrying("create", path, lambda: _put_if_absent(path, data))
        return True
    except FileExistsError:
        return False


def _put_if_absent(path: str, data: bytes) -> None:
    fs = fs_for(path)
    try:
        bounded(fs, "pipe_file", path, data, mode="create", nbytes=len(data))
    except (NotImplementedError, TypeError):  # a store without conditional puts
        if bounded(fs, "exists", path):
            raise FileExistsError(path) from None
        bounded(fs, "pipe_file", path, data, nbytes=len(data))


def append_line(path: str, line: str) -> None:
    """Append one line. Local: a single O_APPEND write, so concurrent runners interleave whole lines.
    Remote: object stores cannot append, so read + rewrite in one PUT (not safe against concurrent
    appenders: the event log of a shared remote prefix may lose a line, never gain a torn one)."""
    data = (line.rstrip("\n") + "\n").encode("utf-8")
    if is_local(path):
        fd = os.open(local_path(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        return
    old = read_if_exists(path) or b""
    retrying("write", path, lambda: bounded(fs_for(path), "pipe_file", path, old + data, nbytes=len(old) + len(data)))


# ---------------------------------------------------------------- content hashes


def stream_digest(f: IO[bytes], h, chunk_bytes: int = 1 << 20) -> str:
    """Hex digest of what is left of an open binary file, read in chunks (``h``: a fresh hashlib or
    xxhash object): one loop for every content hash the pipeline keeps."""
    while chunk := f.read(chunk_bytes):
        h.update(chunk)
    return h.hexdigest()


def sha256_file(path: str) -> str:
    """Hex sha256 of a file's bytes, streamed (local or any fsspec URL)."""
    with open_read(path) as f:
        return stream_digest(f, hashlib.sha256())


def xxh3_file(path: str) -> str:
    """Hex xxh3-128 of a file's bytes, streamed: the fast checksum of outputs and token shards."""
    import xxhash

    with open_read(path) as f:
        return stream_digest(f, xxhash.xxh3_128(), 4 << 20)


# ---------------------------------------------------------------- full and read-only disks

# errno values that mean "this place cannot take our bytes", as opposed to a bug or bad data.
_NO_SPACE = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}
_NOT_WRITABLE = {errno.EROFS, errno.EACCES, errno.EPERM}
_ERRNO_TEXT = {errno.ENOSPC: "[Errno 28]", errno.EROFS: "[Errno 30]", errno.EACCES: "[Errno 13]"}


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


def check_writable(root: str) -> None:
    """Create the prefix and write (then remove) a small probe file in it; PrefixNotWritable if the
    disk refuses. Why up front: a read-only or full prefix should cost one clear line, not a step."""
    probe = join(root, f"{TEMP_MARK}probe-{uuid.uuid4().hex[:12]}")
    try:
        makedirs(root)
        atomic_write_bytes(probe, b"probe\n")
    except OSError as e:
        problem = disk_problem(e)
        if problem is None:
            raise
        raise PrefixNotWritable(problem, root) from None
    finally:
        try:
            remove(probe)
        except OSError:
            pass
