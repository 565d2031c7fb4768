"""Download a remote source into a step's output directory, verifiably.

Why each piece:

- Streaming in fixed-size chunks: source files can be far larger than memory; nothing here ever
  holds a whole file.
- A thread pool: downloads are I/O bound; N transfers in flight hide per-request latency.
- Temp name + rename: a file appears under its final name only once complete and verified, so a
  crash leaves nothing a rerun would trust, and a rerun skips files that are already there.
- Size and sha256 checks: a truncated transfer is retried; a pinned digest that does not match
  fails at once (the upstream content changed, or was tampered with: retrying will not fix it).
- A file nothing vouches for is refused: no length (GET, HEAD or listing), no MD5, no pin, and not
  chunked. A body that ends with the connection reads, to urllib, exactly like a whole file, so its
  completeness cannot be known; the source must pin its sha256, or accept the risk with
  ``allow_unsized: true`` (then the file is recorded ``size_unconfirmed``). Not a second fetch: a
  server that breaks at the same byte every time (a generator failing on the same row, a proxy's
  limit) gives two equal truncated copies, so agreement would prove nothing, at twice the transfer.
- Retry with exponential backoff on transient failures only (connection reset, timeouts, 5xx, 429);
  401/403/404 fail fast, naming the URL and the status, because waiting will not fix a permission.
- Provenance (uri, revision, per-file name/size/sha256) is returned and written as provenance.json
  (sorted keys, no timestamps: the same download gives the same bytes).

http(s) goes through urllib (stdlib), which reports status codes exactly; every other non-local
protocol (gs://, s3://, memory://, ...) goes through `datakit.core.fsio` (fsspec under it). Local sources are
read in place.

Layout written under ``out_dir``: ``files/<relative name>`` for the data, ``provenance.json``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import http.client
import json
import logging
import os
import posixpath
import random
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from typing import Any


from datakit.manifest import SourceSpec
from datakit.core import fsio
from datakit.core.fsio import local_path, stream_digest
from datakit.core.layout import FETCHED_FILES_DIR
from datakit.core.listing import FileInfo, is_http
from datakit.core.uris import USER_AGENT, is_remote, list_source_files

__all__ = [
    "FetchError",
    "FetchedFile",
    "FetchResult",
    "RetryPolicy",
    "fetch_source",
    "is_remote",
    "PROVENANCE_FILE",
]

log = logging.getLogger(__name__)

PROVENANCE_FILE = "provenance.json"
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
    """Internal: a failure worth retrying (carries the reason for the final message). ``restart``:
    what was received so far cannot be resumed from (the next attempt starts at byte 0)."""

    def __init__(self, reason: str, retry_after: float | None = None, *, restart: bool = False):
        super().__init__(reason)
        self.retry_after = retry_after
        self.restart = restart


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
    announced_size: int | None = None  # the length the server/store announced (None: it never said)
    etag: str | None = None
    size_unconfirmed: bool = False  # accepted with nothing vouching it is whole (allow_unsized: true)


@dataclass(frozen=True)
class Upstream:
    """What the server or store said about a file before and while sending it: its announced length
    and integrity signals. Why: a connection closed early without a Content-Length reads, to urllib,
    exactly like a complete file; only what was announced elsewhere (HEAD, the listing, an MD5) can
    tell the two apart."""

    length: int | None = None
    etag: str | None = None
    md5: str | None = None          # hex MD5 of the content: Content-MD5, or a store's MD5 ETag
    ranges: bool = False            # Accept-Ranges: bytes (a broken transfer can resume)
    framed: bool = False            # chunked: the last chunk marks the end (a cut body raises)

    def merged(self, other: "Upstream") -> "Upstream":
        """This answer, with the gaps filled from ``other`` (the GET's headers win over HEAD's).
        ``framed`` is the GET's own: only the transfer that delivered the bytes can vouch for them."""
        return Upstream(self.length if self.length is not None else other.length, self.etag or other.etag,
                        self.md5 or other.md5, self.ranges or other.ranges, self.framed)

    def vouches(self, pin: str | None) -> bool:
        """Whether anything confirms that the received bytes are the whole file: a length to compare,
        a digest (MD5 or the pin), or chunked framing (http.client raises on a chunked body cut early)."""
        return self.length is not None or self.md5 is not None or pin is not None or self.framed


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
        return [f"{root}/{FETCHED_FILES_DIR}/{f.name}" for f in self.files]

    def provenance(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "uri": self.uri,
            "revision": self.revision,
            "files": [_provenance_of(f) for f in self.files],
        }

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "FetchResult":
        data = dict(data)
        data["files"] = [FetchedFile(**f) for f in data["files"]]
        return cls(**data)


def _provenance_of(f: FetchedFile) -> dict[str, Any]:
    """A file's provenance: what was received (size, sha256). What the server announced is in the
    step's record (``announced_size``, ``etag``), not here: provenance stays byte-stable."""
    return {"name": f.name, "uri": f.uri, "size": f.size, "sha256": f.sha256}


# ----------------------------------------------------------------------------------------------
# pins


def _pin_for(spec: SourceSpec, rf: FileInfo) -> str | None:
    pins = spec.sha256
    if pins is None:
        return None
    if isinstance(pins, str):
        return pins
    for key in (rf.rel, rf.path, posixpath.basename(rf.rel)):
        if key in pins:
            return pins[key]
    return None


def _check_pins(spec: SourceSpec, files: list[FileInfo]) -> None:
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
    known = {k for rf in files for k in (rf.rel, rf.path, posixpath.basename(rf.rel))}
    missing = sorted(k for k in pins if k not in known)
    if missing:
        raise FetchError(f"source {spec.name!r}: pinned file(s) not found at {spec.uri}: {', '.join(missing)}")


# ----------------------------------------------------------------------------------------------
# readers: yield chunks from a remote file, translating failures into fatal / transient


_MD5_ETAG = re.compile(r'^"?([0-9a-fA-F]{32})"?$')
_STORE_HEADERS = ("x-amz-", "x-goog-")   # stores whose plain ETag is the object's MD5


def _md5_of_headers(headers) -> str | None:
    """The content MD5 a response vouches for: Content-MD5 (base64), or the ETag of an object store
    that uses the MD5 as its ETag (S3, GCS single-part objects). Other servers' ETags are opaque."""
    content_md5 = headers.get("Content-MD5")
    if content_md5:
        try:
            return base64.b64decode(content_md5, validate=True).hex()
        except (ValueError, binascii.Error):
            return None
    etag = headers.get("ETag") or ""
    m = _MD5_ETAG.match(etag)
    if m and any(k.lower().startswith(_STORE_HEADERS) for k in headers.keys()):
        return m.group(1).lower()
    return None


def _upstream_of(headers, *, partial: bool = False) -> Upstream:
    """Upstream from response headers; for a 206 the full length is Content-Range's total."""
    length = None
    if partial:
        total = (headers.get("Content-Range") or "").rpartition("/")[2]
        length = int(total) if total.isdigit() else None
    else:
        raw = headers.get("Content-Length")
        length = int(raw) if raw and raw.isdigit() else None
    etag = headers.get("ETag") or None
    ranges = (headers.get("Accept-Ranges") or "").lower() == "bytes"
    framed = (headers.get("Transfer-Encoding") or "").lower() == "chunked"  # http.client's own test
    return Upstream(length, etag, None if partial else _md5_of_headers(headers), ranges, framed)


def _http_head(url: str, timeout: float) -> Upstream:
    """HEAD the URL for its announced length and integrity signals; an empty answer when the server
    refuses HEAD or fails (the GET that follows reports real errors)."""
    request = urllib.request.Request(url, method="HEAD",
                                     headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return _upstream_of(response.headers)
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError):
        return Upstream()


def _http_chunks(url: str, chunk_size: int, timeout: float, start: int = 0,
                 etag: str | None = None) -> tuple[Upstream, int, Any]:
    """Open a GET (from byte ``start`` with a Range request); return (what the response announced,
    the byte offset the body starts at: ``start`` for a 206, else 0, chunk iterator).
    Raises FetchError / _Transient."""
    headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
    if start:
        headers["Range"] = f"bytes={start}-"
        if etag and not etag.startswith("W/"):
            headers["If-Range"] = etag  # a changed file answers 200 with all of it, never a mixed splice
    request = urllib.request.Request(url, headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code in _TRANSIENT_HTTP or exc.code >= 500:
            retry_after = _retry_after(exc.headers.get("Retry-After") if exc.headers else None)
            raise _Transient(f"HTTP {exc.code} {exc.reason}", retry_after) from None
        if exc.code == 416 and start:
            raise _Transient("HTTP 416 (range not satisfiable): starting over", restart=True) from None
        hint = {401: " (authentication required)", 403: " (access denied)"}.get(exc.code, "")
        raise FetchError(f"{url}: HTTP {exc.code} {exc.reason}{hint}", url=url, status=exc.code) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", exc)
        raise _Transient(f"{type(reason).__name__}: {reason}") from None
    partial = response.status == 206
    offset = _range_start(response.headers) if partial else 0
    if partial and offset != start:
        response.close()
        raise _Transient(f"server resumed at byte {offset}, not {start}: starting over", restart=True)

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

    return _upstream_of(response.headers, partial=partial), offset, chunks()


def _range_start(headers) -> int:
    """First byte of a 206 body, from ``Content-Range: bytes START-END/TOTAL`` (-1 if unreadable)."""
    m = re.match(r"^bytes (\d+)-", headers.get("Content-Range") or "")
    return int(m.group(1)) if m else -1


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


def _store_md5(info: dict) -> str | None:
    """The MD5 an object store records for an object: GCS's md5Hash (base64), S3's single-part ETag."""
    b64 = info.get("md5Hash")
    if isinstance(b64, str):
        try:
            return base64.b64decode(b64, validate=True).hex()
        except (ValueError, binascii.Error):
            return None
    m = _MD5_ETAG.match(str(info.get("ETag") or info.get("etag") or ""))
    return m.group(1).lower() if m else None


def _store_chunks(path: str, chunk_size: int, start: int = 0) -> tuple[Upstream, int, Any]:
    """Open ``path`` on its store at byte ``start``, through fsio (every GET retried, in ranges);
    (what the store says, start, chunks)."""
    try:
        info = fsio.info(path)
        size = info.get("size")
        f = fsio.open_range(path, start, int(size) - start) if size is not None else fsio.open_read(path)
        if start and size is None:
            f.seek(start)
    except (FileNotFoundError, PermissionError, IsADirectoryError) as exc:
        raise FetchError(f"{path}: {type(exc).__name__}: {exc}", url=path) from None
    except ImportError as exc:
        raise FetchError(f"{path}: {exc}", url=path) from None
    except (OSError, TimeoutError, ConnectionError) as exc:
        raise _Transient(f"{type(exc).__name__}: {exc}") from None
    size = info.get("size")
    etag = info.get("ETag") or info.get("etag")
    upstream = Upstream(int(size) if size is not None else None, str(etag) if etag else None, _store_md5(info),
                        True)

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

    return upstream, start, chunks()


# ----------------------------------------------------------------------------------------------
# writing


def _dest_root(out_dir: str) -> str:
    """Where a download goes: an absolute local path, or the URL as given (its files are written through
    `datakit.core.fsio`, so every remote call is retried and no upload is left half done)."""
    return out_dir.rstrip("/") if is_remote(out_dir) else os.path.abspath(local_path(out_dir))


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


class _Partial:
    """The temp file of one download in progress: the bytes so far and their sha256/md5. It is never
    published unless complete and verified; a broken transfer resumes from its end (Range)."""

    def __init__(self, final: str):
        f, self.tmp = fsio.open_atomic(final)  # a local file: beside `final`, or in TMPDIR for a remote one
        f.close()
        self.size = 0
        self.sha, self.md5 = hashlib.sha256(), hashlib.md5()

    def reset(self) -> None:
        """Forget what was received (the server restarted from byte 0, or the bytes were wrong)."""
        self.size = 0
        self.sha, self.md5 = hashlib.sha256(), hashlib.md5()

    def receive(self, rf: FileInfo, head: Upstream, chunk_size: int, timeout: float,
                stop: threading.Event) -> Upstream:
        """One GET (a Range GET when bytes are already here); returns what that response announced."""
        if is_http(rf.path):
            got, offset, chunks = _http_chunks(rf.path, chunk_size, timeout, self.size, head.etag)
        else:
            got, offset, chunks = _store_chunks(rf.path, chunk_size, self.size)
        if offset == 0 and self.size:
            self.reset()  # the server sent the whole file again: start over
        with open(self.tmp, "ab" if self.size else "wb") as out:
            for data in chunks:
                if stop.is_set():
                    raise _Cancelled(f"{rf.path}: cancelled (another file failed)", url=rf.path)
                self.sha.update(data)
                self.md5.update(data)
                out.write(data)
                self.size += len(data)
        return got


def _check_complete(rf: FileInfo, part: _Partial, expected: int | None, md5: str | None,
                    pin: str | None) -> None:
    """Raise unless the received bytes are the whole, intact file: the announced length (GET, HEAD or
    the listing), the store's MD5, the pinned sha256."""
    if expected is not None and part.size < expected:
        raise _Transient(f"truncated transfer: got {part.size} of {expected} bytes (the connection closed "
                         "early)")
    if expected is not None and part.size > expected:
        raise _Transient(f"got {part.size} bytes but {expected} were announced", restart=True)
    if md5 is not None and part.md5.hexdigest() != md5:
        raise _Transient(f"MD5 mismatch: the server announced {md5}, got {part.md5.hexdigest()} "
                         f"({part.size} bytes)", restart=True)
    digest = part.sha.hexdigest()
    if pin is not None and digest != pin:
        raise FetchError(
            f"{rf.path}: sha256 mismatch: expected {pin}, got {digest} ({part.size} bytes); "
            "the upstream file changed or is corrupt (update the pin if the change is intended)",
            url=rf.path,
        )


def _unsized_error(rf: FileInfo, size: int) -> FetchError:
    return FetchError(
        f"{rf.path}: cannot confirm the download is complete ({size:,} bytes received; the server sent no "
        "length or digest, and the source pins no sha256): pin the file's sha256 in the source (sha256:), "
        "or accept it unconfirmed with allow_unsized: true",
        url=rf.path,
    )


def _reuse_existing(rf: FileInfo, pin: str | None, final: str, announced: int | None,
                    stats: _Stats, allow_unsized: bool) -> FetchedFile | None:
    """A file under its final name was complete when renamed; reuse it if it still matches what the
    upstream announces now (length) and the pin. A different answer re-downloads, never reuses; so does
    a copy nothing can confirm now (no length, no pin) unless the source allows unsized files (the
    download itself may confirm it, by chunked framing, or refuse it)."""
    if not fsio.exists(final):
        return None
    size = fsio.size(final)
    unconfirmed = announced is None and pin is None
    if (announced is None or size == announced) and (allow_unsized or not unconfirmed):
        digest = fsio.sha256_file(final)
        if pin is None or digest == pin:
            stats.add("files")
            stats.add("bytes", size)
            stats.add("skipped_existing")
            return FetchedFile(rf.rel, final, rf.path, size, digest, announced, size_unconfirmed=unconfirmed)
    log.info("re-downloading %s: existing copy does not match the upstream answer or the pin", rf.path)
    return None


def _fetch_one(
    rf: FileInfo,
    pin: str | None,
    root: str,
    *,
    chunk_size: int,
    timeout: float,
    policy: RetryPolicy,
    stats: _Stats,
    stop: threading.Event,
    sleep: Callable[[float], None],
    allow_unsized: bool = False,
) -> FetchedFile:
    """Download one file: HEAD for its announced length, GET (resuming with Range after a break),
    verify against every signal there is, publish by rename. Never publishes a partial file, nor one
    nothing vouches for unless ``allow_unsized`` (then it is marked ``size_unconfirmed``)."""
    final = fsio.join(root, FETCHED_FILES_DIR, *rf.rel.split("/"))
    fsio.makedirs(posixpath.dirname(final))
    head = _http_head(rf.path, timeout) if is_http(rf.path) else Upstream(rf.size)
    existing = _reuse_existing(rf, pin, final, head.length if head.length is not None else rf.size, stats,
                               allow_unsized)
    if existing is not None:
        return existing
    part = _Partial(final)
    last_exc: _Transient | None = None
    try:
        for attempt in range(policy.attempts):
            if stop.is_set():
                raise _Cancelled(f"{rf.path}: cancelled (another file failed)", url=rf.path)
            if last_exc is not None:
                stats.add("retries")
                delay = policy.delay(attempt - 1, last_exc.retry_after)
                log.warning("retrying %s in %.2fs (attempt %d/%d%s): %s", rf.path, delay, attempt + 1,
                            policy.attempts, f", resuming at byte {part.size}" if part.size else "", last_exc)
                sleep(delay)
            try:
                upstream = part.receive(rf, head, chunk_size, timeout, stop).merged(head)
                expected = upstream.length if upstream.length is not None else rf.size
                _check_complete(rf, part, expected, upstream.md5, pin)
            except _Transient as exc:
                last_exc = exc
                if exc.restart:
                    part.reset()
                continue
            unconfirmed = expected is None and not upstream.vouches(pin)
            if unconfirmed and not allow_unsized:
                raise _unsized_error(rf, part.size)
            if unconfirmed:
                log.warning("%s: size unconfirmed (%d bytes; no length, digest or pin; allow_unsized: true)",
                            rf.path, part.size)
            fsio.commit(part.tmp, final)
            stats.add("files")
            stats.add("bytes", part.size)
            stats.add("downloaded_files")
            return FetchedFile(rf.rel, final, rf.path, part.size, part.sha.hexdigest(), expected,
                               upstream.etag, unconfirmed)
    finally:
        fsio.discard(part.tmp)  # nothing left behind (a no-op once published)
    raise FetchError(f"{rf.path}: failed after {policy.attempts} attempts: {last_exc}", url=rf.path)


# ----------------------------------------------------------------------------------------------
# a source


def _local_result(spec: SourceSpec, files: list[FileInfo], chunk_size: int) -> FetchResult:
    """Local sources are not copied; sha256 is computed (and checked) only where pinned."""
    out: list[FetchedFile] = []
    for rf in files:
        path = local_path(rf.path)
        size = os.path.getsize(path)
        pin = _pin_for(spec, rf)
        digest = None
        if pin is not None:
            with open(path, "rb") as f:
                digest = stream_digest(f, hashlib.sha256(), chunk_size)
            if digest != pin:
                raise FetchError(f"{path}: sha256 mismatch: expected {pin}, got {digest}", url=path)
        out.append(FetchedFile(rf.rel, path, rf.path, size, digest))
    counters = {"files": len(out), "bytes": sum(f.size for f in out), "downloaded_files": 0,
                "skipped_existing": 0, "retries": 0}
    uri = spec.uri if isinstance(spec.uri, str) else list(spec.uri)
    return FetchResult(spec.name, uri, spec.revision, None, True, out, counters)


def _list_with_retries(
    spec: SourceSpec, uri: str | list[str], policy: RetryPolicy, sleep: Callable[[float], None]
) -> list[FileInfo]:
    """The source's listing; a flaky object-store listing is retried like a download."""
    for attempt in range(policy.attempts):
        try:
            return list_source_files(uri, exclude=spec.exclude, max_files=spec.max_files)
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

    root = _dest_root(out_dir)
    fsio.makedirs(fsio.join(root, FETCHED_FILES_DIR))
    stats = _Stats()
    stop = threading.Event()
    results: dict[str, FetchedFile] = {}
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="datakit-fetch") as pool:
        futures = {
            pool.submit(
                _fetch_one, rf, _pin_for(spec, rf), root, chunk_size=chunk_size, timeout=timeout,
                policy=policy, stats=stats, stop=stop, sleep=sleep, allow_unsized=spec.allow_unsized,
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
            first = min(failed, key=lambda f: futures[f].rel)
            raise first.exception()  # type: ignore[misc]
        for f, rf in futures.items():
            results[rf.rel] = f.result()
    fetched = [results[rf.rel] for rf in files]
    result = FetchResult(spec.name, uri, spec.revision, out_dir, False, fetched, dict(stats.values))
    fsio.atomic_write_bytes(
        fsio.join(root, PROVENANCE_FILE),
        (json.dumps(result.provenance(), indent=2, sort_keys=True) + "\n").encode(),
    )
    return result


def unconfirmed_copy(spec: SourceSpec, files: list[dict]) -> str | None:
    """Why a built download is not to be trusted under the source's settings now, or None: a file
    kept with nothing vouching that it is whole (allowed then by ``allow_unsized``, or built before
    such files were refused: no ``size_unconfirmed`` and no announced size), while the source does not
    allow that now and pins no digest for it. Why: ``allow_unsized`` is not in the step's identity
    (it changes no byte of a whole file), so turning it off must reach the kept copy this way."""
    if spec.allow_unsized:
        return None
    for f in files:
        unconfirmed = f.get("size_unconfirmed", f.get("announced_size") is None)
        if unconfirmed and _pin_for(spec, FileInfo(f.get("uri") or "", f.get("size"), f["name"])) is None:
            return (f"{f['name']}: its size was never confirmed (no length, digest or pin) and the source "
                    "does not set allow_unsized: true")
    return None


def upstream_changes(files: list[dict], timeout: float = 10.0) -> str | None:
    """Why a built download no longer matches its server, or None: for each http file, a fresh HEAD
    that now announces a length other than the bytes we kept, or another ETag than the one we got.

    Why: a server that sent no length gave us no way to tell a truncated transfer from a whole file; if
    it answers differently now (fixed, or the file changed), the copy we kept is not to be trusted. No
    answer (offline, HEAD refused) proves nothing, and keeps the built copy."""
    for f in files:
        if not is_http(f.get("uri") or ""):
            continue
        now = _http_head(f["uri"], timeout)
        if now.length is not None and now.length != f.get("size"):
            return f"{f['name']}: the server now announces {now.length:,} bytes; {f.get('size'):,} were downloaded"
        if now.etag and f.get("etag") and now.etag != f["etag"]:
            return f"{f['name']}: the server's ETag changed ({f['etag']} -> {now.etag})"
    return None
