"""Where a source's files are: local-vs-remote, the source listing, and cheap reachability checks.

Validation and download must agree on which files a source means, so both list through
`list_source_files`, which is `datakit.core.listing.scan` (the engine's listing: its hidden-file,
root and exclude rules) plus the source's own contract: a URI that names nothing is an error
(SourceNotFound), and ``max_files`` keeps the first files by path. Each file's *relative name*
(`FileInfo.rel`) is the downloader's local name, so two files with the same basename in different
folders do not collide.

HTTP(S) is special: a web server has no listing, so an http URI is one file (or the manifest gives a
list of them), and it is probed with our own HEAD request because fsspec's HTTP layer folds every
failure (403, 503, ...) into FileNotFoundError, which would hide whether a retry can help.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence

from datakit.core.listing import FileInfo, has_glob, is_http, scan

__all__ = ["SourceNotFound", "is_remote", "list_source_files", "check_uri", "http_probe", "USER_AGENT"]

USER_AGENT = "datakit/0.1 (+https://github.com/datakit)"


class SourceNotFound(FileNotFoundError):
    """A source URI that names no data file (missing path, empty glob, everything excluded)."""


def is_remote(uri: str) -> bool:
    """True for anything with a protocol other than file:// (a source that must be downloaded first)."""
    return "://" in uri and not uri.startswith("file://")


def list_source_files(
    uri: str | Sequence[str],
    *,
    exclude: Sequence[str] = (),
    max_files: int | None = None,
    follow_symlinks: bool = False,
) -> list[FileInfo]:
    """All data files of a source, sorted by path (`datakit.core.listing.scan`: its rules), then the
    first ``max_files``. Raises SourceNotFound naming the URI when one names nothing, or when nothing
    is left after hidden-file skipping, ``exclude`` and symlinks out of the source."""
    uris = [uri] if isinstance(uri, str) else list(uri)
    found = scan(uris, exclude, follow_symlinks)
    if found.missing:
        u, why = found.missing[0]
        raise SourceNotFound(f"{u}: {why}")
    if not found.files:
        shown = uris[0] if len(uris) == 1 else f"{uris[0]} (+{len(uris) - 1} more)"
        links = found.skipped_links()
        raise SourceNotFound(f"{shown}: no data files left ({found.hidden} hidden (./_) files skipped, "
                             f"{found.excluded} excluded{'; ' + links if links else ''})")
    return found.files[:max_files] if max_files is not None else found.files


def http_probe(url: str, *, timeout: float = 5.0) -> str | None:
    """HEAD a URL; None when it answers 2xx/3xx, else a short reason ("HTTP 404 Not Found").

    Servers that refuse HEAD (405/501) get a one-byte ranged GET instead. urllib is imported here, not
    with the module: it brings http.client and ssl (~20 ms) into every run, most of which probe nothing.
    """
    import urllib.error
    import urllib.request

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


def check_uri(uri: str | Sequence[str], *, exclude: Sequence[str] = (), timeout: float = 5.0,
              follow_symlinks: bool = False) -> list[str]:
    """Reasons this source cannot be read (empty list = fine). Cheap: a listing or a HEAD per URL.

    For http(s) every listed URL is probed; for anything else the same listing the pipeline uses
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
            list_source_files(other, exclude=exclude, follow_symlinks=follow_symlinks)
        except SourceNotFound as exc:
            problems.append(str(exc))
        except ImportError as exc:
            problems.append(f"{other[0]}: {exc}")
        except (ValueError, OSError) as exc:
            problems.append(f"unreachable: {other[0]}: {exc}")
    return problems
