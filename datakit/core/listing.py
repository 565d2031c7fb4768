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
- Symlinks (local listings, `datakit.core.walk`): one whose target lies outside its pattern's root is
  not followed but counted (`Listing.symlinks_outside`) unless ``follow_symlinks``; a symlinked folder
  that leads back into itself is a loop, never followed, named (`Listing.symlink_loops`), and so is
  one that points nowhere (`Listing.symlinks_broken`); any other is
  followed: a file link is listed under its own name, a folder link is walked, and a file the walk also
  reaches without the folder link is listed once. A file a pattern names itself (no glob, not a folder)
  is read wherever it points: the user named it.
- Order: sorted by path, so every run sees the same order.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import posixpath
import urllib.parse
from dataclasses import dataclass, field
from functools import partial
from typing import Sequence

from datakit.core.fsio import bounded, fs_for, is_local, local_path, retrying, sha256_file
from datakit.core.walk import Walk, any_path, glob_depth, glob_matcher, walk

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
    symlinks_outside: int = 0  # symlinks not followed: their target lies outside the pattern's root
    symlink_loops: list[str] = field(default_factory=list)  # symlinks that loop (a folder holding itself)
    symlinks_broken: list[str] = field(default_factory=list)  # symlinks that point nowhere

    def skipped_links(self) -> str:
        """The symlinks skipped, in words for a message ('' when none)."""
        said = []
        if self.symlinks_outside:
            said.append(f"{self.symlinks_outside} symlink{'s' if self.symlinks_outside != 1 else ''} outside "
                        "the source skipped (follow_symlinks: true follows them)")
        for paths, what in ((self.symlink_loops, "symlink loop"), (self.symlinks_broken, "broken symlink")):
            if paths:
                more = f" and {len(paths) - 3} more" if len(paths) > 3 else ""
                said.append(f"{len(paths)} {what}{'s' if len(paths) != 1 else ''} skipped "
                            f"({', '.join(paths[:3])}{more})")
        return "; ".join(said)


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
    """One remote pattern's files, and why it named nothing (None when it named something)."""
    if is_http(uri):
        if has_glob(uri):
            raise ValueError(f"{uri}: globs are not supported over http(s) (a web server has no listing); "
                             "list the file URLs instead")
        path = urllib.parse.unquote(urllib.parse.urlsplit(uri).path)
        return [_Found(uri, path, None, posixpath.dirname(path))], None
    fs = fs_for(uri)  # the store's filesystem with its per-call deadlines
    path = fs._strip_protocol(uri)
    if has_glob(path):
        found, root = bounded(fs, "glob", path, detail=True, nbytes=None), pattern_root(path)
    elif bounded(fs, "isdir", path):
        found, root = bounded(fs, "find", path, detail=True, nbytes=None), path.rstrip("/")
    else:
        try:
            found, root = {path: bounded(fs, "info", path)}, posixpath.dirname(path.rstrip("/"))
        except FileNotFoundError:
            return [], "no such file or directory"
    files = [_Found(fs.unstrip_protocol(p), p, _size(info), root)
             for p, info in found.items() if info.get("type") != "directory"]
    if not files:
        return [], "no files match this pattern" if has_glob(path) else "no files under this directory"
    return files, None


def _expand_local(uri: str, exclude: Sequence[str], follow: bool, out: Listing) -> tuple[list[_Found], str | None]:
    """One local pattern's files under the symlink rules (`datakit.core.walk`; what it skipped is added to
    ``out``), and why it named nothing (None when it named something)."""
    path = os.path.abspath(os.path.expanduser(local_path(uri)))
    glob = has_glob(path)
    root = pattern_root(path) if glob else path
    if not glob and not os.path.isdir(path):
        if not os.path.exists(path):
            return [], "no such file or directory"
        return [_Found(path, path, os.path.getsize(path), posixpath.dirname(path))], None
    found = Walk()
    if os.path.isdir(root):
        found = walk(root, maxdepth=glob_depth(path, root) if glob else None, follow=follow,
                     match=glob_matcher(path) if glob else any_path,
                     skip=partial(_left_alone, root=root, exclude=tuple(exclude)))
    out.symlinks_outside += found.outside
    out.symlink_loops += found.loops
    out.symlinks_broken += found.broken
    files = [_Found(p, p, size, root.rstrip("/") or "/") for p, size in found.files]
    if not files:
        why = "no files match this pattern" if glob else "no files under this directory"
        skipped = Listing(symlinks_outside=found.outside, symlink_loops=found.loops,
                          symlinks_broken=found.broken).skipped_links()
        return [], f"{why} ({skipped})" if skipped else why
    return files, None


def _left_alone(path: str, root: str, exclude: tuple[str, ...]) -> bool:
    """A link the walk leaves unresolved: hidden or excluded, the listing counts it so."""
    rel = relative_to(path, root)
    return is_hidden(rel) or _excluded(rel, path, exclude)


def _size(info: dict) -> int | None:
    size = info.get("size")
    return None if size is None else int(size)


def _excluded(rel: str, full: str, exclude: Sequence[str]) -> bool:
    base = posixpath.basename(rel)
    return any(fnmatch.fnmatchcase(rel, pat) or fnmatch.fnmatchcase(base, pat) or fnmatch.fnmatchcase(full, pat)
               for pat in exclude)


def scan(patterns: str | Sequence[str], exclude: Sequence[str] = (), follow_symlinks: bool = False) -> Listing:
    """Every file the pattern(s) name under the rules of this module, with what was skipped."""
    uris = [patterns] if isinstance(patterns, str) else list(patterns)
    out = Listing()
    found: list[_Found] = []
    for u in uris:
        if is_local(u):
            files, missing = _expand_local(u, exclude, follow_symlinks, out)
        else:
            files, missing = _expand(u) if is_http(u) else retrying("list", u, lambda: _expand(u))
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


def list_files(patterns: str | Sequence[str], exclude: Sequence[str] = (), follow_symlinks: bool = False,
               ) -> list[FileInfo]:
    """All files matching the pattern(s), sorted by path; hidden and excluded files and symlinks out of
    the root skipped (see module)."""
    return scan(patterns, exclude, follow_symlinks).files


def directory_files(path: str) -> list[str]:
    """Every file of a local directory given as one input (a benchmark directory; a directory hashed for a
    step identity), as sorted relative paths: dot-files and dot-folders skipped, but not '_' names, which
    `is_hidden` skips in a data listing (a benchmark of Python files keeps its `__init__.py`)."""
    out = []
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        out.extend(os.path.relpath(os.path.join(root, f), path) for f in files if not f.startswith("."))
    return sorted(out)


def content_sha256(path: str) -> str:
    """The sha256 of a local file; of a directory, the sha256 of its files' relative names and sha256s
    (`directory_files`: every file a reader of the directory may read), so a renamed, added or edited
    file changes it. The one content hash of a file input: step identities and recorded benchmark hashes."""
    local = local_path(path)
    if not os.path.isdir(local):
        return sha256_file(local)
    h = hashlib.sha256()
    for rel in directory_files(local):
        h.update(f"{rel}\0{sha256_file(os.path.join(local, rel))}\n".encode())
    return h.hexdigest()


__all__ = ["FileInfo", "Listing", "scan", "list_files", "content_sha256", "directory_files", "is_hidden", "is_http", "has_glob", "pattern_root",
           "common_root", "relative_to", "GLOB_CHARS"]
