"""URL filtering by registered domain: block and allow lists of domains or URLs.

The registered domain ("example.co.uk" of "https://a.b.example.co.uk/x") comes from tldextract with
its bundled public-suffix snapshot and no fetch (``suffix_list_urls=()``, no cache dir), so results do
not depend on the network or on when the list was last downloaded. Private suffixes (github.io,
blogspot.com) are not suffixes here: "x.github.io" registers under "github.io", as the ICANN list says.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .config import UrlConfig

_lock = threading.Lock()
_extractor: Any = None


def _extract() -> Any:
    global _extractor
    if _extractor is None:
        with _lock:
            if _extractor is None:
                import tldextract

                _extractor = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)
    return _extractor


def host_of(url: str) -> str:
    """The lowercased host of a URL (a bare domain is its own host)."""
    url = url.strip()
    if "://" not in url:
        url = "http://" + url
    try:
        return (urlsplit(url).hostname or "").lower().rstrip(".")
    except ValueError:
        return ""


def registered_domain(url_or_host: str) -> str:
    """``example.co.uk`` for any URL or host under it; the host itself when it has no public suffix
    (an IP address, localhost)."""
    host = host_of(url_or_host)
    if not host:
        return ""
    parts = _extract()(host)
    if parts.domain and parts.suffix:
        return f"{parts.domain}.{parts.suffix}"
    return host


def canonical_url(url: str) -> str:
    """A URL as the lists compare it: scheme and host lowercased, no fragment, no trailing slash."""
    url = url.strip()
    try:
        s = urlsplit(url if "://" in url else "http://" + url)
    except ValueError:
        return url
    path = s.path.rstrip("/")
    query = f"?{s.query}" if s.query else ""
    return f"{(s.hostname or '').lower()}{':' + str(s.port) if s.port else ''}{path}{query}"


def read_list(path: str | None) -> list[str]:
    """Entries of a list file: one per line, '#' starts a comment, blank lines ignored."""
    if not path:
        return []
    with open(path, encoding="utf-8") as f:
        return [e for e in (line.split("#", 1)[0].strip() for line in f) if e]


@dataclass(frozen=True)
class UrlLists:
    """The `url:` rules (`UrlConfig`) as the filter looks them up: each list's inline and file entries
    together, normalized once (domains to registered domains, URLs to canonical form). Derived from the
    config by `of`, never filled field by field."""

    block_domains: frozenset[str]
    block_urls: frozenset[str]
    allow_domains: frozenset[str]
    allow_urls: frozenset[str]
    allow_only: bool = False

    @classmethod
    def of(cls, cfg: UrlConfig) -> "UrlLists":
        """The lists of one source's `url:` rules, list files read (once per task: the chain holds them)."""
        return cls(frozenset(registered_domain(d) for d in (*cfg.block_domains, *read_list(cfg.block_file))),
                   frozenset(canonical_url(u) for u in cfg.block_urls),
                   frozenset(registered_domain(d) for d in (*cfg.allow_domains, *read_list(cfg.allow_file))),
                   frozenset(canonical_url(u) for u in cfg.allow_urls), cfg.allow_only)

    def verdict(self, url: str) -> str | None:
        """None to keep; "blocked_domain", "blocked_url" or "not_allowed" to remove."""
        domain, canon = registered_domain(url), canonical_url(url)
        if canon in self.allow_urls or domain in self.allow_domains:
            return None
        if canon in self.block_urls:
            return "blocked_url"
        if domain in self.block_domains:
            return "blocked_domain"
        return "not_allowed" if self.allow_only else None
