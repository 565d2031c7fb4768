"""Walking a local directory tree for the listing (`datakit.core.listing`), symlinks judged one by one.

A dataset unpacked from an archive or a shared folder may hold symlinks, and following them blindly
reads what the source never held (``in/leak.txt -> /etc/passwd`` became a document) or walks in
circles (``in/sub/up -> ..``). So, below the walk's root:

- A symlink whose target lies outside the root (both sides resolved, so a root that is itself a link,
  or sits under one, is judged by where it really is) is not followed, only counted (`Walk.outside`),
  unless the source allows it (``follow_symlinks: true``).
- A symlinked directory that contains the link itself, or any directory the walk is inside, is a loop:
  never followed, named in `Walk.loops`; so is a link the system cannot resolve for looping
  (``a -> b -> a``). A link that points nowhere is never read, named in `Walk.broken`.
- Any other symlink is followed. A file link is listed under its own name like any file (Debian's
  ``GPL -> GPL-3``: normalize's exact dedup keeps one copy and counts the other). A folder link is
  walked like a folder, and what the walk also reaches without it is listed once, under the name that
  needs no folder link, so an aliased tree is not read twice.

Hidden and excluded links (the caller's ``skip``) are left as they are, unresolved: the listing counts
them as hidden or excluded, as it would any file.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Walk:
    """What one walk found: files (path, size), symlinks not followed because they point outside the
    root, symlinks not followed because they loop, and symlinks that point nowhere."""

    files: list[tuple[str, int]] = field(default_factory=list)
    outside: int = 0
    loops: list[str] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Dir:
    path: str  # as listed (under the root's name, through links)
    real: str  # where it really is
    depth: int
    chain: tuple[str, ...]  # real directories of the links walked to get here, the root's first
    linked: bool = False  # reached through a symlink


@dataclass(frozen=True)
class _Seen:
    path: str
    size: int
    real: str  # where the entry itself is, its folders resolved (a file link's own place, not its target's)
    linked: bool  # reached through a folder link


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _child(parent: str, name: str) -> str:
    return f"{parent.rstrip('/')}/{name}"


def _size(entry: os.DirEntry) -> int:
    try:
        return entry.stat(follow_symlinks=True).st_size
    except OSError:  # a hidden or excluded dangling link, listed for the caller to count: never read
        return 0


def any_path(path: str) -> bool:
    return True


def no_path(path: str) -> bool:
    return False


@dataclass
class _State:
    """One walk's rules and what it has found so far."""

    real_root: str
    follow: bool
    match: Callable[[str], bool]
    stack: list[_Dir]
    seen: list[_Seen] = field(default_factory=list)
    outside: int = 0
    # where a looping link really is -> its first name (reached without links first, then by path)
    loops: dict[str, tuple[bool, str]] = field(default_factory=dict)
    broken: dict[str, tuple[bool, str]] = field(default_factory=dict)  # the same, for links to nothing


def walk(root: str, *, maxdepth: int | None = None, follow: bool = False,
         match: Callable[[str], bool] = any_path, skip: Callable[[str], bool] = no_path) -> Walk:
    """Every file below ``root`` (a local directory, absolute) under the module's symlink rules, at most
    ``maxdepth`` levels down; ``match`` picks the files (a glob), ``skip`` names links to leave alone
    (hidden or excluded: listed as they are, for the caller to count)."""
    real_root = os.path.realpath(root)
    st = _State(real_root, follow, match, [_Dir(root.rstrip("/") or "/", real_root, 0, (real_root,))])
    while st.stack:
        here = st.stack.pop()
        deeper = maxdepth is None or here.depth + 1 < maxdepth
        with os.scandir(here.path) as entries:
            for entry in entries:
                path, real = _child(here.path, entry.name), _child(here.real, entry.name)
                if entry.is_symlink() and not skip(path):
                    _follow(st, entry, path, here, deeper)
                elif entry.is_dir(follow_symlinks=False):
                    if deeper:
                        st.stack.append(_Dir(path, real, here.depth + 1, here.chain, here.linked))
                elif match(path):
                    st.seen.append(_Seen(path, _size(entry), real, here.linked))
    return Walk(_once(st.seen), st.outside, _names(st.loops), _names(st.broken))


def _follow(st: _State, entry: os.DirEntry, path: str, here: _Dir, deeper: bool) -> None:
    """One symlink met by the walk: followed, counted as outside, or named as a loop (once, under its own
    name, however many folder links lead to it)."""
    real = os.path.realpath(path)
    try:
        is_dir = stat.S_ISDIR(os.stat(path).st_mode)
    except OSError as exc:  # it loops (ELOOP) or points nowhere: never read, named
        if st.match(path):
            _note(st.loops if exc.errno == errno.ELOOP else st.broken, here, entry.name, path)
        return
    if is_dir and not deeper:
        return
    if is_dir and any(_within(d, real) for d in (*here.chain, here.real)):
        _note(st.loops, here, entry.name, path)
    elif not st.follow and not _within(real, st.real_root):
        st.outside += 1 if is_dir or st.match(path) else 0
    elif is_dir:
        st.stack.append(_Dir(path, real, here.depth + 1, (*here.chain, real), True))
    elif st.match(path):  # a file link is a file of its folder: known by where it is, not where it points
        st.seen.append(_Seen(path, _size(entry), _child(here.real, entry.name), here.linked))


def _note(found: dict[str, tuple[bool, str]], here: _Dir, name: str, path: str) -> None:
    """Remember a link by where it is, under its name that needs no folder link if it has one."""
    where, named = _child(here.real, name), (here.linked, path)
    found[where] = min(named, found.get(where, named))


def _names(found: dict[str, tuple[bool, str]]) -> list[str]:
    return sorted(path for _, path in found.values())


def _once(seen: list[_Seen]) -> list[tuple[str, int]]:
    """Each entry once: under the name that needs no folder link when there is one, else the first by
    path."""
    kept: dict[str, _Seen] = {}
    for s in sorted(seen, key=lambda s: (s.linked, s.path)):
        kept.setdefault(s.real, s)
    return sorted((s.path, s.size) for s in kept.values())


def glob_matcher(pattern: str) -> Callable[[str], bool]:
    """fsspec's glob rule for one pattern (`*` within a folder, `**` across folders), as a predicate."""
    regex = re.compile(glob_regex(pattern))
    return lambda path: regex.match(path) is not None


def glob_regex(pattern: str) -> str:
    """The regular expression of fsspec's glob rule (``fsspec.utils.glob_translate``: a lone ``*`` is
    one non-empty folder or name, ``**`` any number of folders, and within a name ``*``, ``?`` and
    ``[...]`` never cross a ``/``), written here because importing fsspec imports asyncio: ~80 ms of
    CPU that a local run listing its inputs by a glob spent on nothing else. Tests hold it to fsspec's."""
    parts = pattern.split("/")
    last = len(parts) - 1
    out = []
    for i, part in enumerate(parts):
        if part == "*":
            out.append("[^/]+/" if i < last else "[^/]+")
            continue
        if part == "**":
            out.append("(?:.+/)?" if i < last else ".*")
            continue
        if "**" in part:
            raise ValueError(f"glob {pattern!r}: '**' can only be a whole path component (as in a/**/b)")
        out.append(_name_regex(part, pattern))
        if i < last:
            out.append("/")
    return rf"(?s:{''.join(out)})\Z"


def _name_regex(part: str, pattern: str) -> str:
    """One path component of a glob: ``*`` any run of characters but ``/``, ``?`` one, ``[...]`` a set
    (``[!...]`` its complement), anything else itself."""
    out: list[str] = []
    i, n = 0, len(part)
    while i < n:
        c = part[i]
        i += 1
        if c == "*":
            if not out or out[-1] != "[^/]*":
                out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = i + (i < n and part[i] == "!")
            j += j < n and part[j] == "]"
            j = part.find("]", j)
            if j < 0:
                out.append("\\[")
                continue
            out.append(_char_set(part[i:j], pattern))
            i = j + 1
        else:
            out.append(re.escape(c))
    return "".join(out)


def _char_set(inside: str, pattern: str) -> str:
    """A ``[...]`` set as a regular expression set (the text between the brackets)."""
    if inside == "!":  # as fsspec reads a negated empty set: any character
        return "."
    body = re.sub(r"([&~|])", r"\\\1", inside.replace("\\", "\\\\"))
    if body.startswith("!"):
        body = "^" + body[1:]
    elif body.startswith(("^", "[")):
        body = "\\" + body
    regex = f"[{body}]"
    try:
        re.compile(regex)
    except re.error as e:
        raise ValueError(f"glob {pattern!r}: bad character set [{inside}]: {e}") from None
    return regex


def glob_depth(pattern: str, root: str) -> int | None:
    """How many levels below ``root`` a glob can match (None: any, with ``**``)."""
    if "**" in pattern:
        return None
    return pattern[len(root):].strip("/").count("/") + 1
