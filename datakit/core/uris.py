"""Where a source's files are: local-vs-remote, glob expansion, and cheap reachability checks.

Validation and download must agree on which files a source means, so both go through `list_files`:
one listing call per pattern, hidden files and folders skipped (names starting with '.' or '_', as
in the engine: .git, .DS_Store, _SUCCESS, our own temp files), ``exclude`` globs applied, sorted by path so every run sees the same order, then
``max_files``. Each file also gets a *relative name* (its path under the pattern's fixed prefix) that the
downloader uses as its local name, so two files with the same basename in different folders do not
collide.

HTTP(S) is special: a web server has no listing, so an http URI is one file (or the manifest gives a
list of them), and it is probed with our own HEAD request because fsspec's HTTP layer folds every
failure (403, 503, ...) into FileNotFoundError, which would hide whether a retry can help.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass

import fsspec

from datakit.core.fsio import retrying


__all__ = [
    "RemoteFile",
    "SourceNotFound",
    "is_remote",
    "is_http",
    "has_glob",
    "local_path",
    "list_files",
    "check_uri",
    "http_probe",
]

USER_AGENT = "datakit/0.1 (+https://github.com/datakit)"
_GLOB_CHARS = "*?["


class SourceNotFound(FileNotFoundError):
    """A source URI that names no data file (missing path, empty glob, everything excluded)."""


@dataclass(frozen=True)
class RemoteFile:
    """One file of a source: where to open it, its relative name, and its size when the listing knew it."""

    path: str  # a local path, or a full URL (protocol included) that fsspec / urllib can open
    name: str  # relative name under the source's root, '/'-separated
    size: int | None


def is_remote(uri: str) -> bool:
    """True for anything with a protocol other than file:// (a source that must be downloaded first)."""
    return "://" in uri and not uri.startswith("file://")


def is_http(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def has_glob(uri: str) -> bool:
    """Glob magic in the path part. For http(s) '?' starts a query string, so only '*' and '[' count."""
    if is_http(uri):
        path = urllib.parse.urlsplit(uri).path
        return any(c in path for c in "*[")
    return any(c in uri for c in _GLOB_CHARS)


def local_path(uri: str) -> str:
    """A plain filesystem path for a local URI (``file://`` stripped)."""
    return uri[len("file://") :] if uri.startswith("file://") else uri


def _glob_root(pattern: str) -> str:
    """The fixed directory prefix of a glob pattern: 'data/*/x*.jsonl' -> 'data'."""
    parts = pattern.split("/")
    fixed = []
    for part in parts:
        if any(c in part for c in _GLOB_CHARS):
            break
        fixed.append(part)
    return "/".join(fixed) or "/"


def _is_hidden(rel: str) -> bool:
    """Dot- and underscore-prefixed files/folders are not data (.git, .DS_Store, _SUCCESS, our temp
    files): the same rule as the engine's `datakit.shuffle.list_files`, so validation, download and
    the pipeline agree on which files a source has."""
    return any(part.startswith((".", "_")) for part in rel.split("/") if part not in ("", ".", ".."))


def _excluded(rel: str, full: str, exclude: Sequence[str]) -> bool:
    base = posixpath.basename(rel)
    return any(
        fnmatch.fnmatchcase(rel, pat) or fnmatch.fnmatchcase(base, pat) or fnmatch.fnmatchcase(full, pat)
        for pat in exclude
    )


def _expand_one(uri: str) -> tuple[list[tuple[str, str, int | None]], str]:
    """Expand one URI into (open_path, listing_path, size) triples and its root (listing-path space).

    Raises SourceNotFound when nothing is there.
    """
    if is_http(uri):
        if has_glob(uri):
            raise ValueError(
                f"{uri}: globs are not supported over http(s) (a web server has no listing); "
                "list the file URLs instead"
            )
        path = urllib.parse.unquote(urllib.parse.urlsplit(uri).path)
        return [(uri, path, None)], posixpath.dirname(path)

    remote = is_remote(uri)
    target = uri if remote else os.path.abspath(local_path(uri))
    fs, path = fsspec.core.url_to_fs(target)

    def opener(p: str) -> str:
        return fs.unstrip_protocol(p) if remote else p

    if has_glob(path):
        found = fs.glob(path, detail=True)
        files = [(opener(p), p, info.get("size")) for p, info in found.items() if info.get("type") != "directory"]
        root = _glob_root(path)
    elif fs.isdir(path):
        found = fs.find(path, detail=True)
        files = [(opener(p), p, info.get("size")) for p, info in found.items()]
        root = path
    else:
        try:
            info = fs.info(path)
        except FileNotFoundError:
            raise SourceNotFound(f"{uri}: no such file or directory") from None
        files = [(opener(path), path, info.get("size"))]
        root = posixpath.dirname(path.rstrip("/"))
    if not files:
        what = "no files match" if has_glob(path) else "no files under"
        raise SourceNotFound(f"{uri}: {what} this {'pattern' if has_glob(path) else 'directory'}")
    return files, root


def list_files(
    uri: str | Sequence[str],
    *,
    exclude: Sequence[str] = (),
    max_files: int | None = None,
) -> list[RemoteFile]:
    """All data files of a source, sorted by path, as `RemoteFile`s.

    ``uri`` is a path, glob, directory (all files below it) or URL, or a list of those. Raises
    SourceNotFound naming the URI when nothing (after dot-file skipping and ``exclude``) is left.
    """
    uris = [uri] if isinstance(uri, str) else list(uri)
    triples: list[tuple[str, str, int | None]] = []
    roots: list[str] = []
    for u in uris:
        files, root = retrying("list", u, lambda: _expand_one(u)) if is_remote(u) and not is_http(u) else _expand_one(u)
        triples.extend(files)
        roots.append(root)
    if len(uris) == 1:
        root = roots[0]
    else:
        root = posixpath.commonpath([posixpath.dirname(t[1]) for t in triples] or ["/"])
    seen: dict[str, str] = {}
    out: list[RemoteFile] = []
    skipped_hidden = skipped_excluded = 0
    for open_path, list_path, size in sorted(triples, key=lambda t: t[0]):
        rel = posixpath.relpath(list_path, root) if root not in ("", "/") else list_path.lstrip("/")
        if rel.startswith("..") or rel == ".":
            rel = posixpath.basename(list_path)
        if _is_hidden(rel):
            skipped_hidden += 1
            continue
        if _excluded(rel, open_path, exclude):
            skipped_excluded += 1
            continue
        if rel in seen:
            if seen[rel] == open_path:
                continue  # the same file listed twice
            raise ValueError(f"{open_path} and {seen[rel]} would both be stored as '{rel}'")
        seen[rel] = open_path
        out.append(RemoteFile(path=open_path, name=rel, size=size))
    if not out:
        shown = uris[0] if len(uris) == 1 else f"{uris[0]} (+{len(uris) - 1} more)"
        raise SourceNotFound(
            f"{shown}: no data files left ({skipped_hidden} hidden (./_) files skipped, {skipped_excluded} excluded)"
        )
    if max_files is not None:
        out = out[:max_files]
    return out


def http_probe(url: str, *, timeout: float = 5.0) -> str | None:
    """HEAD a URL; None when it answers 2xx/3xx, else a short reason ("HTTP 404 Not Found").

    Servers that refuse HEAD (405/501) get a one-byte ranged GET instead.
    """
    for method in ("HEAD", "GET"):
        headers = {"User-Agent": USER_AGENT}
        if method == "GET":
            headers["Range"] = "bytes=0-0"
        request = urllib.request.Request(url, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout):
                return None
        except urllib.error.HTTPError as exc:
            if method == "HEAD" and exc.code in (405, 501):
                continue
            return f"HTTP {exc.code} {exc.reason}"
        except (TimeoutError, socket.timeout):
            return f"timed out after {timeout:g}s"
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, (TimeoutError, socket.timeout)):
                return f"timed out after {timeout:g}s"
            return str(getattr(reason, "strerror", None) or reason)
        except (OSError, ValueError) as exc:
            return str(exc)
    return None  # pragma: no cover


def check_uri(uri: str | Sequence[str], *, exclude: Sequence[str] = (), timeout: float = 5.0) -> list[str]:
    """Reasons this source cannot be read (empty list = fine). Cheap: a listing or a HEAD per URL.

    For http(s) every listed URL is probed; for anything else the same `list_files` the pipeline uses
    is run, so "no files match" here means exactly "the pipeline would read nothing".
    """
    uris = [uri] if isinstance(uri, str) else list(uri)
    problems: list[str] = []
    http = [u for u in uris if is_http(u)]
    other = [u for u in uris if not is_http(u)]
    for u in http:
        if has_glob(u):
            problems.append(f"{u}: globs are not supported over http(s); list the file URLs instead")
            continue
        reason = http_probe(u, timeout=timeout)
        if reason:
            problems.append(f"unreachable: {u}: {reason}")
    if other:
        try:
            list_files(other, exclude=exclude)
        except SourceNotFound as exc:
            problems.append(str(exc))
        except ImportError as exc:
            problems.append(f"{other[0]}: {exc}")
        except (ValueError, OSError) as exc:
            problems.append(f"unreachable: {other[0]}: {exc}")
    return problems
