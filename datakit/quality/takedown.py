"""Takedowns: documents a publisher, a court or a licence says must go, listed by id, URL or domain.

The `takedown:` manifest section lists them inline or in a file (one per line, ``id <value>``,
``url <value>`` or ``domain <value>``; ``#`` starts a comment), and the takedown stage removes every
matching document from every source's final documents (datakit/stages/takedown.py says where and why),
so the token caches and the model never see it. An id matches a document's content id (``id``) or the id it had in its
input (``source_id``); a URL matches the document's URL column exactly (after trimming); a domain
matches every URL whose registered domain (public suffix list bundled with tldextract, as the URL
filter's) is that domain.

Why a stage of its own rather than a quality rule: a takedown must hold whatever the quality settings
are (and with the quality layer off), and its list changes on its own schedule. With per-file reuse
(steps/reuse.py) a new takedown rewrites only the files that hold a listed document.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datakit.core import arrow_numpy as an
from datakit.core.fsio import read_bytes

from .urls import registered_domain

KINDS = ("id", "url", "domain")


@dataclass(frozen=True)
class TakedownConfig:
    """The `takedown:` section: what to remove, inline or in ``file`` (see the module docstring)."""

    ids: tuple[str, ...] = ()
    urls: tuple[str, ...] = ()
    domains: tuple[str, ...] = ()
    file: str | None = field(default=None, metadata={"path": True})
    url_column: str = "url"

    @property
    def enabled(self) -> bool:
        return bool(self.ids or self.urls or self.domains or self.file)


class TakedownFileError(ValueError):
    """A takedown file line that is not ``<kind> <value>``: refused, never guessed."""


def parse_file(data: bytes, path: str) -> dict[str, set[str]]:
    """The entries of a takedown file, by kind; a malformed line fails naming file and line."""
    out: dict[str, set[str]] = {k: set() for k in KINDS}
    for number, raw in enumerate(data.decode("utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        kind, _, value = line.partition(" ")
        if kind not in KINDS or not value.strip():
            raise TakedownFileError(f"{path}:{number}: expected '<kind> <value>' with kind one of "
                                    f"{', '.join(KINDS)} (e.g. 'domain example.com'), got {raw.strip()!r}")
        out[kind].add(value.strip())
    return out


@lru_cache(maxsize=2)
def _parsed(data: bytes, path: str) -> dict[str, frozenset[str]]:
    """``parse_file``, once per content: a task asks for the list of every file it keys and rewrites."""
    return {kind: frozenset(values) for kind, values in parse_file(data, path).items()}


@dataclass(frozen=True)
class Takedowns:
    """Every entry of one `takedown:` section, loaded once per task."""

    ids: frozenset[str]
    urls: frozenset[str]
    domains: frozenset[str]
    url_column: str

    @classmethod
    def of(cls, cfg: TakedownConfig) -> "Takedowns":
        entries = {"id": set(cfg.ids), "url": set(cfg.urls), "domain": set(cfg.domains)}
        if cfg.file:
            for kind, values in _parsed(read_bytes(cfg.file), cfg.file).items():
                entries[kind] |= values
        domains = {registered_domain(d) or d.lower() for d in entries["domain"]}
        return cls(frozenset(entries["id"]), frozenset(u.strip() for u in entries["url"]), frozenset(domains),
                   cfg.url_column)

    def match(self, doc: dict) -> str | None:
        """Why ``doc`` is taken down (``id <x>``, ``url <x>``, ``domain <x>``), or None."""
        for key in ("id", "source_id"):
            value = doc.get(key)
            if value is not None and str(value) in self.ids:
                return f"id {value}"
        url = doc.get(self.url_column)
        if not isinstance(url, str) or not url:
            return None
        if url.strip() in self.urls:
            return f"url {url.strip()}"
        if self.domains:
            domain = registered_domain(url)
            if domain in self.domains:
                return f"domain {domain}"
        return None

    def rows(self, table: pa.Table) -> list[tuple[int, str, str]]:
        """(row, id, why) of every listed document of ``table``, in row order, exactly as ``match`` says.
        Ids are looked up column-wise (a takedown of a few thousand ids scans a corpus at Arrow speed);
        ``match`` then runs on the few candidate rows only. URLs and domains are compared per row."""
        candidate = np.zeros(table.num_rows, dtype=bool)
        for key in ("id", "source_id"):
            if key in table.column_names and self.ids:
                candidate |= _listed(table.column(key), self.ids)
        if self.url_column in table.column_names and (self.urls or self.domains):
            candidate |= np.fromiter((self.match({self.url_column: u}) is not None
                                      for u in table.column(self.url_column).to_pylist()), bool, table.num_rows)
        rows = np.flatnonzero(candidate)
        cols = [c for c in ("id", "source_id", self.url_column) if c in table.column_names]
        docs = table.select(cols).take(an.from_numpy(rows.astype(np.int64))).to_pylist()
        return [(int(r), d["id"], why) for r, d in zip(rows, docs) if (why := self.match(d)) is not None]


@lru_cache(maxsize=4)
def _value_set(ids: frozenset[str], type_: pa.DataType) -> pa.Array:
    """The listed ids as an Arrow array, built once per task (every file of a source is looked up in it,
    by its id and its source_id column), from buffers: ``pa.array`` would import pandas into the worker."""
    return an.strings(sorted(ids), type_)


def _listed(column: pa.ChunkedArray, ids: frozenset[str]) -> np.ndarray:
    """Which values of an id column are listed, as ``str(value) in ids`` says (strings and integers are
    compared in Arrow, whose text of an integer is Python's; any other type value by value)."""
    if pa.types.is_integer(column.type):
        column = pc.cast(column, pa.string())
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        hit = pc.is_in(column, value_set=_value_set(ids, column.type))
        return an.bools(hit)
    return np.fromiter((v is not None and str(v) in ids for v in column.to_pylist()), bool, len(column))
