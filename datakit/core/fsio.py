"""Small filesystem layer: local paths fast, everything else through fsspec; atomic publishes.

Every output the engine writes goes to a temporary name first and is renamed into place, so a crash
leaves nothing a rerun would mistake for a finished file. On object stores (gs://, s3://) an output is
written to a local temporary file (the only local footprint: spill) and uploaded in one request when it
is complete, straight to its final name: a PUT becomes visible only when it completes, which gives the
same guarantee without a copy + delete "rename", and the upload can be retried as a whole.

Object stores go away for seconds at a time (a restart, a network blip, throttling). Every remote call
made here goes through `retrying`: exponential backoff over `DATAKIT_STORE_RETRY_S` seconds (default
60), then `StoreUnavailable` naming the URL and what to do. Remote reads are ranged GETs of bounded
chunks (`open_read`, `open_range`), so a reader fetches only the bytes it asks for and a dropped
connection costs one chunk, re-fetched on retry, never the whole file.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import socket
import tempfile
import time
import uuid
from typing import IO, Callable, Iterator, TypeVar

import fsspec

T = TypeVar("T")
READ_CHUNK_BYTES = 8 << 20  # one ranged GET per chunk on object stores


class StoreUnavailable(OSError):
    """The object store did not answer (connection refused, timeouts, 5xx) within the retry budget."""


def is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def local_path(path: str) -> str:
    """A local path or file:// URL as a plain filesystem path."""
    return path[len("file://") :] if path.startswith("file://") else path


def fs_for(path: str):
    fs, _ = fsspec.core.url_to_fs(path)
    return fs


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
    and a store that stays down fails with one clear line instead of a botocore traceback."""
    budget = _retry_budget() if budget_s is None else budget_s
    deadline = time.monotonic() + budget
    delay, attempts = 0.2, 0
    while True:
        attempts += 1
        try:
            return fn()
        except Exception as exc:
            if not _transient(exc):
                raise
            if time.monotonic() + delay > deadline:
                raise StoreUnavailable(
                    f"object store unavailable: {what} {path} failed {attempts} times over {budget:g}s "
                    f"(last error: {type(exc).__name__}: {exc}); check that the store at "
                    f"{_store_of(path)} is up and reachable from every node (endpoint, credentials, network), "
                    "then rerun the same command: finished steps are kept (raise DATAKIT_STORE_RETRY_S to "
                    "wait longer)") from exc
            _invalidate(path)
            time.sleep(delay)
            delay = min(delay * 2, 10.0)


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
        data = retrying("read", self.path, lambda: self.fs.cat_file(self.path, start=lo, end=lo + n))
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
    size = retrying("stat", path, lambda: int(fs_for(path).size(path)))
    return io.BufferedReader(_RemoteRange(path, 0, size), READ_CHUNK_BYTES)


def read_bytes(path: str) -> bytes:
    """A whole (small) file's bytes: one GET on an object store, no HEAD first (sidecars, markers)."""
    if is_local(path):
        with open(local_path(path), "rb") as f:
            return f.read()
    return retrying("read", path, lambda: fs_for(path).cat_file(path))


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


def makedirs(path: str) -> None:
    if is_local(path):
        os.makedirs(local_path(path), exist_ok=True)
    else:
        retrying("makedirs", path, lambda: fs_for(path).makedirs(path, exist_ok=True))


def remove_tree(path: str) -> None:
    """Delete a directory and everything under it (local or remote); a missing one is fine. Remote: one
    listing and batched deletes (S3's DeleteObjects takes 1,000 keys a request)."""
    if is_local(path):
        shutil.rmtree(local_path(path), ignore_errors=True)
        return
    fs = fs_for(path)
    try:
        retrying("delete", path, lambda: fs.rm(path, recursive=True))
    except FileNotFoundError:
        pass


def exists(path: str) -> bool:
    if is_local(path):
        return os.path.exists(local_path(path))
    return retrying("exists", path, lambda: fs_for(path).exists(path))


def tmp_name(path: str) -> str:
    head, tail = os.path.split(path)
    return os.path.join(head, f".tmp-{uuid.uuid4().hex[:12]}-{tail}")


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
        retrying("upload", path, lambda: fs_for(path).put_file(tmp, path))
    finally:
        discard(tmp)


def discard(tmp: str) -> None:
    try:
        if is_local(tmp):
            os.unlink(local_path(tmp))
        else:
            retrying("delete", tmp, lambda: fs_for(tmp).rm(tmp))
    except FileNotFoundError:
        pass


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
    """Copy `src` to `dst` (local paths or fsspec URLs, in any mix), streamed and published atomically."""
    with open_read(src) as f, atomic_output(dst) as out:
        shutil.copyfileobj(f, out, 1 << 20)


def atomic_write_bytes(path: str, data: bytes) -> None:
    """Publish `data` at `path` all at once."""
    with atomic_output(path) as f:
        f.write(data)
