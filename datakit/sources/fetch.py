"""Download a remote source into a step's output directory, verifiably.

Why each piece:

- Streaming in fixed-size chunks: source files can be far larger than memory; nothing here ever
  holds a whole file.
- A thread pool: downloads are I/O bound; N transfers in flight hide per-request latency.
- Temp name + rename: a file appears under its final name only once complete and verified, so a
  crash leaves nothing a rerun would trust, and a rerun skips files that are already there.
- Size and sha256 checks: a truncated transfer is retried; a pinned digest that does not match
  fails at once (the upstream content changed, or was tampered with: retrying will not fix it).
- Retry with exponential backoff on transient failures only (connection reset, timeouts, 5xx, 429);
  401/403/404 fail fast, naming the URL and the status, because waiting will not fix a permission.
- Provenance (uri, revision, per-file name/size/sha256) is returned and written as provenance.json
  (sorted keys, no timestamps: the same download gives the same bytes).

http(s) goes through urllib (stdlib), which reports status codes exactly; every other non-local
protocol (gs://, s3://, memory://, ...) goes through fsspec. Local sources are read in place.

Layout written under ``out_dir``: ``files/<relative name>`` for the data, ``provenance.json``.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import posixpath
import random
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from typing import Any

import fsspec

from datakit.manifest import SourceSpec
from datakit.core.uris import USER_AGENT, RemoteFile, is_http, is_remote, list_files, local_path

__all__ = [
    "FetchError",
    "FetchedFile",
    "FetchResult",
    "RetryPolicy",
    "fetch_source",
    "is_remote",
    "PROVENANCE_FILE",
    "FILES_DIR",
]

log = logging.getLogger(__name__)

PROVENANCE_FILE = "provenance.json"
FILES_DIR = "files"
_FATAL_HTTP = {400, 401, 403, 404, 405, 410, 451}
_TRANSIENT_HTTP = {408, 425, 429}


class FetchError(RuntimeError):
    """A download that failed for good. ``url`` and ``status`` (HTTP code, if any) say which and why."""

    def __init__(self, message: str, *, url: str | None = None, status: int | None = None):
        super().__init__(message)
        self.url = url
        self.status = status


class _Cancelled(FetchError):
    """Internal: this file stopped because another one failed (never the error reported)."""


class _Transient(Exception):
    """Internal: a failure worth retrying (carries the reason for the final message)."""

    def __init__(self, reason: str, retry_after: float | None = None):
        super().__init__(reason)
        self.retry_after = retry_after


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff: wait ``backoff * 2**k`` (capped at ``max_backoff``, +-25% jitter) before
    retry k+1, at most ``attempts`` tries per file."""

    attempts: int = 5
    backoff: float = 1.0
    max_backoff: float = 30.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        base = min(self.max_backoff, self.backoff * (2**attempt))
        if retry_after is not None:
            base = min(self.max_backoff, max(base, retry_after))
        return base * random.uniform(0.75, 1.25)


@dataclass(frozen=True)
class FetchedFile:
    """One file of a fetched source. ``path`` is where to read it now (under out_dir, or in place for
    a local source); ``uri`` where it came from."""

    name: str
    path: str
    uri: str
    size: int
    sha256: str | None


@dataclass
class FetchResult:
    source: str
    uri: str | list[str]
    revision: str | None
    out_dir: str | None  # None for a local source (read in place)
    local: bool
    files: list[FetchedFile]
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def paths(self) -> list[str]:
        """Paths of the files to read, in name order (feed these to the normalize stage)."""
        return [f.path for f in self.files]

    def paths_under(self, out_dir: str) -> list[str]:
        """The downloaded files' paths if the output directory now lives at ``out_dir`` (a step found
        under a mirror prefix, or moved): results stay valid by relative name, not absolute path."""
        if self.local:
            return self.paths
        root = out_dir.rstrip("/")
        return [f"{root}/{FILES_DIR}/{f.name}" for f in self.files]

    def provenance(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "uri": self.uri,
            "revision": self.revision,
            "files": [{"name": f.name, "uri": f.uri, "size": f.size, "sha256": f.sha256} for f in self.files],
        }

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "FetchResult":
        data = dict(data)
        data["files"] = [FetchedFile(**f) for f in data["files"]]
        return cls(**data)


# ----------------------------------------------------------------------------------------------
# pins


def _pin_for(spec: SourceSpec, rf: RemoteFile) -> str | None:
    pins = spec.sha256
    if pins is None:
        return None
    if isinstance(pins, str):
        return pins
    for key in (rf.name, rf.path, posixpath.basename(rf.name)):
        if key in pins:
            return pins[key]
    return None


def _check_pins(spec: SourceSpec, files: list[RemoteFile]) -> None:
    """Every pin must name a listed file: a pin that matches nothing means a file went missing."""
    pins = spec.sha256
    if pins is None:
        return
    if isinstance(pins, str):
        if len(files) != 1:
            raise FetchError(
                f"source {spec.name!r}: sha256 is a single digest but {len(files)} files were listed; "
                "map file names to digests instead"
            )
        return
    known = {k for rf in files for k in (rf.name, rf.path, posixpath.basename(rf.name))}
    missing = sorted(k for k in pins if k not in known)
    if missing:
        raise FetchError(f"source {spec.name!r}: pinned file(s) not found at {spec.uri}: {', '.join(missing)}")


# ----------------------------------------------------------------------------------------------
# readers: yield chunks from a remote file, translating failures into fatal / transient


def _http_chunks(url: str, chunk_size: int, timeout: float) -> tuple[int | None, Any]:
    """Open a GET; return (content length or None, chunk iterator). Raises FetchError / _Transient."""
    request = urllib.request.Request(
        url, headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
    )
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code in _TRANSIENT_HTTP or exc.code >= 500:
            retry_after = _retry_after(exc.headers.get("Retry-After") if exc.headers else None)
            raise _Transient(f"HTTP {exc.code} {exc.reason}", retry_after) from None
        hint = {401: " (authentication required)", 403: " (access denied)"}.get(exc.code, "")
        raise FetchError(f"{url}: HTTP {exc.code} {exc.reason}{hint}", url=url, status=exc.code) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", exc)
        raise _Transient(f"{type(reason).__name__}: {reason}") from None
    length = response.headers.get("Content-Length")
    expected = int(length) if length and length.isdigit() else None

    def chunks():
        with response:
            while True:
                try:
                    data = response.read(chunk_size)
                except (OSError, http.client.HTTPException) as exc:
                    raise _Transient(f"connection broke mid-transfer: {type(exc).__name__}: {exc}") from None
                if not data:
                    return
                yield data

    return expected, chunks()


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


def _fsspec_chunks(path: str, chunk_size: int) -> tuple[int | None, Any]:
    try:
        fs, p = fsspec.core.url_to_fs(path)
        f = fs.open(p, "rb", block_size=chunk_size)
    except (FileNotFoundError, PermissionError, IsADirectoryError) as exc:
        raise FetchError(f"{path}: {type(exc).__name__}: {exc}", url=path) from None
    except ImportError as exc:
        raise FetchError(f"{path}: {exc}", url=path) from None
    except (OSError, TimeoutError, ConnectionError) as exc:
        raise _Transient(f"{type(exc).__name__}: {exc}") from None

    def chunks():
        with f:
            while True:
                try:
                    data = f.read(chunk_size)
                except (FileNotFoundError, PermissionError) as exc:
                    raise FetchError(f"{path}: {type(exc).__name__}: {exc}", url=path) from None
                except (OSError, TimeoutError, ConnectionError) as exc:
                    raise _Transient(f"{type(exc).__name__}: {exc}") from None
                if not data:
                    return
                yield data

    return None, chunks()


# ----------------------------------------------------------------------------------------------
# writing


class _Dest:
    """The output directory, local or fsspec; temp files are dot-files (never read as data)."""

    def __init__(self, out_dir: str):
        self.local = not is_remote(out_dir)
        self.root = os.path.abspath(local_path(out_dir)) if self.local else out_dir.rstrip("/")
        self.fs = None if self.local else fsspec.core.url_to_fs(out_dir)[0]

    def path(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts) if not self.local else os.path.join(self.root, *parts)

    def makedirs(self, path: str) -> None:
        if self.local:
            os.makedirs(path, exist_ok=True)
        else:
            self.fs.makedirs(path, exist_ok=True)

    def exists(self, path: str) -> bool:
        return os.path.exists(path) if self.local else self.fs.exists(path)

    def size(self, path: str) -> int:
        return os.path.getsize(path) if self.local else int(self.fs.info(path)["size"])

    def open(self, path: str, mode: str):
        return open(path, mode) if self.local else self.fs.open(path, mode)

    def temp_for(self, path: str) -> str:
        head, tail = os.path.split(path) if self.local else posixpath.split(path)
        name = f".{tail}.tmp-{uuid.uuid4().hex[:12]}"
        return os.path.join(head, name) if self.local else posixpath.join(head, name)

    def commit(self, tmp: str, path: str) -> None:
        if self.local:
            os.replace(tmp, path)
        else:
            self.fs.mv(tmp, path)

    def discard(self, tmp: str) -> None:
        try:
            if self.local:
                os.unlink(tmp)
            else:
                self.fs.rm(tmp)
        except FileNotFoundError:
            pass

    def write_bytes_atomic(self, path: str, data: bytes) -> None:
        tmp = self.temp_for(path)
        try:
            with self.open(tmp, "wb") as f:
                f.write(data)
        except BaseException:
            self.discard(tmp)
            raise
        self.commit(tmp, path)


def _sha256_of(dest: _Dest, path: str, chunk_size: int) -> str:
    h = hashlib.sha256()
    with dest.open(path, "rb") as f:
        while data := f.read(chunk_size):
            h.update(data)
    return h.hexdigest()


# ----------------------------------------------------------------------------------------------
# one file


class _Stats:
    """Counters shared by the download threads (a lock because += on a dict is not atomic)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values = {"files": 0, "bytes": 0, "downloaded_files": 0, "skipped_existing": 0, "retries": 0}

    def add(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.values[name] += n


def _fetch_one(
    rf: RemoteFile,
    pin: str | None,
    dest: _Dest,
    *,
    chunk_size: int,
    timeout: float,
    policy: RetryPolicy,
    stats: _Stats,
    stop: threading.Event,
    sleep: Callable[[float], None],
) -> FetchedFile:
    final = dest.path(FILES_DIR, *rf.name.split("/"))
    dest.makedirs(os.path.dirname(final) if dest.local else posixpath.dirname(final))

    # Resume: a file under its final name was complete when renamed; re-verify it cheaply.
    if dest.exists(final):
        size = dest.size(final)
        if rf.size is None or size == rf.size:
            digest = _sha256_of(dest, final, chunk_size)
            if pin is None or digest == pin:
                stats.add("files")
                stats.add("bytes", size)
                stats.add("skipped_existing")
                return FetchedFile(rf.name, final, rf.path, size, digest)
        log.info("re-downloading %s: existing copy does not match the listing/pin", rf.path)

    last_exc: _Transient | None = None
    for attempt in range(policy.attempts):
        if stop.is_set():
            raise _Cancelled(f"{rf.path}: cancelled (another file failed)", url=rf.path)
        if last_exc is not None:
            stats.add("retries")
            delay = policy.delay(attempt - 1, last_exc.retry_after)
            log.warning("retrying %s in %.2fs (attempt %d/%d): %s", rf.path, delay, attempt + 1,
                        policy.attempts, last_exc)
            sleep(delay)
        tmp = dest.temp_for(final)
        try:
            if is_http(rf.path):
                expected, chunks = _http_chunks(rf.path, chunk_size, timeout)
            else:
                expected, chunks = _fsspec_chunks(rf.path, chunk_size)
            if expected is None:
                expected = rf.size
            h = hashlib.sha256()
            size = 0
            with dest.open(tmp, "wb") as out:
                for data in chunks:
                    if stop.is_set():
                        raise _Cancelled(f"{rf.path}: cancelled (another file failed)", url=rf.path)
                    h.update(data)
                    out.write(data)
                    size += len(data)
            if expected is not None and size != expected:
                raise _Transient(f"truncated transfer: got {size} of {expected} bytes")
            digest = h.hexdigest()
            if pin is not None and digest != pin:
                raise FetchError(
                    f"{rf.path}: sha256 mismatch: expected {pin}, got {digest} ({size} bytes); "
                    "the upstream file changed or is corrupt (update the pin if the change is intended)",
                    url=rf.path,
                )
            dest.commit(tmp, final)
        except _Transient as exc:
            dest.discard(tmp)
            last_exc = exc
            continue
        except BaseException:
            dest.discard(tmp)
            raise
        stats.add("files")
        stats.add("bytes", size)
        stats.add("downloaded_files")
        return FetchedFile(rf.name, final, rf.path, size, digest)
    raise FetchError(f"{rf.path}: failed after {policy.attempts} attempts: {last_exc}", url=rf.path)


# ----------------------------------------------------------------------------------------------
# a source


def _local_result(spec: SourceSpec, files: list[RemoteFile], chunk_size: int) -> FetchResult:
    """Local sources are not copied; sha256 is computed (and checked) only where pinned."""
    out: list[FetchedFile] = []
    for rf in files:
        path = local_path(rf.path)
        size = os.path.getsize(path)
        pin = _pin_for(spec, rf)
        digest = None
        if pin is not None:
            h = hashlib.sha256()
            with open(path, "rb") as f:
                while data := f.read(chunk_size):
                    h.update(data)
            digest = h.hexdigest()
            if digest != pin:
                raise FetchError(f"{path}: sha256 mismatch: expected {pin}, got {digest}", url=path)
        out.append(FetchedFile(rf.name, path, rf.path, size, digest))
    counters = {"files": len(out), "bytes": sum(f.size for f in out), "downloaded_files": 0,
                "skipped_existing": 0, "retries": 0}
    uri = spec.uri if isinstance(spec.uri, str) else list(spec.uri)
    return FetchResult(spec.name, uri, spec.revision, None, True, out, counters)


def _list_with_retries(
    spec: SourceSpec, uri: str | list[str], policy: RetryPolicy, sleep: Callable[[float], None]
) -> list[RemoteFile]:
    """The source's listing; a flaky object-store listing is retried like a download."""
    for attempt in range(policy.attempts):
        try:
            return list_files(uri, exclude=spec.exclude, max_files=spec.max_files)
        except (FileNotFoundError, PermissionError, ImportError, ValueError) as exc:
            raise FetchError(f"source {spec.name!r}: {exc}", url=str(uri)) from None
        except (OSError, TimeoutError) as exc:
            if attempt + 1 == policy.attempts:
                raise FetchError(
                    f"source {spec.name!r}: listing {uri} failed after {policy.attempts} attempts: {exc}",
                    url=str(uri),
                ) from None
            log.warning("retrying listing of %s: %s", uri, exc)
            sleep(policy.delay(attempt))
    raise AssertionError("unreachable")  # pragma: no cover


def fetch_source(
    spec: SourceSpec,
    out_dir: str,
    *,
    workers: int = 4,
    chunk_size: int = 1 << 20,
    timeout: float = 60.0,
    retry: RetryPolicy | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> FetchResult:
    """Materialize a source's files and return them with provenance.

    Remote sources are copied to ``out_dir/files/`` (``out_dir`` local or any fsspec URL) with
    ``workers`` parallel streams, and ``out_dir/provenance.json`` is written last. Local sources are
    listed and returned in place (nothing written). Raises FetchError (naming the URL) on a fatal
    failure or when retries run out; files finished before the failure stay, so a rerun resumes.
    """
    policy = retry or RetryPolicy()
    uri = spec.uri if isinstance(spec.uri, str) else list(spec.uri)
    files = _list_with_retries(spec, uri, policy, sleep)
    _check_pins(spec, files)
    if not spec.remote:
        return _local_result(spec, files, chunk_size)

    dest = _Dest(out_dir)
    dest.makedirs(dest.path(FILES_DIR))
    stats = _Stats()
    stop = threading.Event()
    results: dict[str, FetchedFile] = {}
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="datakit-fetch") as pool:
        futures = {
            pool.submit(
                _fetch_one, rf, _pin_for(spec, rf), dest, chunk_size=chunk_size, timeout=timeout,
                policy=policy, stats=stats, stop=stop, sleep=sleep,
            ): rf
            for rf in files
        }
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        if any(f.exception() is not None for f in done):
            stop.set()
            for f in futures:
                f.cancel()
            wait(futures)
            failed = [
                f for f in futures
                if not f.cancelled() and f.exception() is not None and not isinstance(f.exception(), _Cancelled)
            ]
            # Report the first real failure in file order, so the message is deterministic.
            first = min(failed, key=lambda f: futures[f].name)
            raise first.exception()  # type: ignore[misc]
        for f, rf in futures.items():
            results[rf.name] = f.result()
    fetched = [results[rf.name] for rf in files]
    result = FetchResult(spec.name, uri, spec.revision, out_dir, False, fetched, dict(stats.values))
    dest.write_bytes_atomic(
        dest.path(PROVENANCE_FILE),
        (json.dumps(result.provenance(), indent=2, sort_keys=True) + "\n").encode(),
    )
    return result
