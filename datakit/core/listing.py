"""Which files a path, glob, directory or URL means: the one listing of data inputs.

Validation, download and the engine must agree on which files a source has, so all of them list through
`list_files` (`scan` when the caller also wants to know what was skipped). The rules, in one place:

- Expansion: a glob is one ``glob(detail=True)`` call (sizes come with the names, no stat per file:
  thousands of round trips on object stores), a directory is every file below it, anything else is one
  file. An http(s) URL is one file of unknown size: a web server has no listing.
- Root and relative name (`FileInfo.rel`): one pattern's root is its fixed directory prefix
  (`pattern_root`: 'data/*/x*.jsonl' -> 'data'; a directory is its own root; a file's root is its
  folder); several patterns share the deepest folder holding every listed file (`common_root`), so two
  files with the same basename in different folders never collide.
- Hidden (`is_hidden`): a file is skipped when a folder or its own name below the root starts with '.'
  or '_' (.git, .DS_Store, _SUCCESS, our own temp files). With several patterns "below the root" means
  below the shallower of the pattern's own root and the common root, so what one pattern's listing
  would skip is skipped in every combination.
- ``exclude``: glob patterns matched (case-sensitively) against the relative name, the basename or the
  full path.
- Order: sorted by path, so every run sees the same order.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import urllib.parse
from dataclasses import dataclass, field
from typing import Sequence

import fsspec

from datakit.core.fsio import bounded, fs_for, is_local, local_path, retrying

GLOB_CHARS = "*?["


@dataclass(frozen=True, order=True)
class FileInfo:
    """One listed file: where to open it, its size and its name under the listing's root."""

    path: str  # a local absolute path, or a full URL (protocol included) that fsio / urllib can open
    size: int | None  # bytes; None when the listing cannot know (an http URL)
    rel: str  # '/'-separated name under the listing's root (the downloader's local name)


@dataclass
class Listing:
    """What `scan` found: the files, how many were skipped and why, and the patterns that named nothing
    (pattern, reason) - an error for a source, an empty input for the engine."""

    files: list[FileInfo] = field(default_factory=list)
    hidden: int = 0
    excluded: int = 0
    missing: list[tuple[str, str]] = field(default_factory=list)


def is_http(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def has_glob(uri: str) -> bool:
    """Glob magic in the path part. For http(s) '?' starts a query string, so only '*' and '[' count."""
    if is_http(uri):
        return any(c in urllib.parse.urlsplit(uri).path for c in "*[")
    return any(c in uri for c in GLOB_CHARS)


def is_hidden(rel: str) -> bool:
    """Dot- and underscore-prefixed files and folders are not data (.git, .DS_Store, _SUCCESS, temp files)."""
    return any(part.startswith((".", "_")) for part in rel.split("/") if part not in ("", ".", ".."))


def pattern_root(pattern: str) -> str:
    """The fixed directory prefix of a glob pattern: 'data/*/x*.jsonl' -> 'data' ('/' when none)."""
    fixed = []
    for part in pattern.split("/"):
        if any(c in part for c in GLOB_CHARS):
            break
        fixed.append(part)
    return "/".join(fixed) or "/"


def common_root(paths: Sequence[str]) -> str:
    """The deepest folder holding every path, compared part by part ('/'-separated, so URLs work too);
    '' when they share nothing. The one rule for naming files relative to each other."""
    if not paths:
        return ""
    parts = [(p.rstrip("/").rsplit("/", 1)[0] if "/" in p else "").split("/") for p in paths]
    common = parts[0]
    for p in parts[1:]:
        n = 0
        while n < min(len(common), len(p)) and common[n] == p[n]:
            n += 1
        common = common[:n]
    return "/".join(common)


def relative_to(path: str, root: str) -> str:
    """``path``'s name under ``root`` ('/'-separated); a path outside it keeps its basename."""
    if root in ("", "/"):
        return path.lstrip("/")
    if path.startswith(root.rstrip("/") + "/"):
        return path[len(root.rstrip("/")) + 1 :]
    return posixpath.basename(path)


@dataclass(frozen=True)
class _Found:
    path: str  # where to open it
    listed: str  # the path in listing space (protocol stripped), where roots are computed
    size: int | None
    root: str  # its pattern's root, in listing space


def _expand(uri: str) -> tuple[list[_Found], str | None]:
    """One pattern's files, and why it named nothing (None when it named something)."""
    if is_http(uri):
        if has_glob(uri):
            raise ValueError(f"{uri}: globs are not supported over http(s) (a web server has no listing); "
                             "list the file URLs instead")
        path = urllib.parse.unquote(urllib.parse.urlsplit(uri).path)
        return [_Found(uri, path, None, posixpath.dirname(path))], None
    remote = not is_local(uri)
    target = uri if remote else os.path.abspath(os.path.expanduser(local_path(uri)))
    fs = fs_for(target) if remote else fsspec.filesystem("file")
    path = fs._strip_protocol(target)
    if has_glob(path):
        found, root = bounded(fs, "glob", path, detail=True, nbytes=None), pattern_root(path)
    elif bounded(fs, "isdir", path):
        found, root = bounded(fs, "find", path, detail=True, nbytes=None), path.rstrip("/")
    else:
        try:
            found, root = {path: bounded(fs, "info", path)}, posixpath.dirname(path.rstrip("/"))
        except FileNotFoundError:
            return [], "no such file or directory"
    files = [_Found(fs.unstrip_protocol(p) if remote else p, p, _size(info), root)
             for p, info in found.items() if info.get("type") != "directory"]
    if not files:
        return [], "no files match this pattern" if has_glob(path) else "no files under this directory"
    return files, None


def _size(info: dict) -> int | None:
    size = info.get("size")
    return None if size is None else int(size)


def _excluded(rel: str, full: str, exclude: Sequence[str]) -> bool:
    base = posixpath.basename(rel)
    return any(fnmatch.fnmatchcase(rel, pat) or fnmatch.fnmatchcase(base, pat) or fnmatch.fnmatchcase(full, pat)
               for pat in exclude)


def scan(patterns: str | Sequence[str], exclude: Sequence[str] = ()) -> Listing:
    """Every file the pattern(s) name under the rules of this module, with what was skipped."""
    uris = [patterns] if isinstance(patterns, str) else list(patterns)
    out = Listing()
    found: list[_Found] = []
    for u in uris:
        remote = not is_local(u) and not is_http(u)
        files, missing = retrying("list", u, lambda: _expand(u)) if remote else _expand(u)
        found += files
        if missing:
            out.missing.append((u, missing))
    root = found[0].root if len(uris) == 1 and found else common_root([f.listed for f in found])
    seen: dict[str, str] = {}
    for f in sorted(found, key=lambda f: f.path):
        rel = relative_to(f.listed, root)
        if is_hidden(rel) or is_hidden(relative_to(f.listed, f.root)):
            out.hidden += 1
        elif _excluded(rel, f.path, exclude):
            out.excluded += 1
        elif seen.setdefault(rel, f.path) != f.path:
            raise ValueError(f"{f.path} and {seen[rel]} would both be stored as '{rel}'")
        elif not out.files or out.files[-1].path != f.path:  # the same file named by two patterns: once
            out.files.append(FileInfo(f.path, f.size, rel))
    return out


def list_files(patterns: str | Sequence[str], exclude: Sequence[str] = ()) -> list[FileInfo]:
    """All files matching the pattern(s), sorted by path; hidden and excluded files skipped (see module)."""
    return scan(patterns, exclude).files


__all__ = ["FileInfo", "Listing", "scan", "list_files", "is_hidden", "is_http", "has_glob", "pattern_root",
           "common_root", "relative_to", "GLOB_CHARS"]
