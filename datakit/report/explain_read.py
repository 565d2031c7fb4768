"""What `datakit explain` reads: one document's rows in the outputs a run's steps wrote, through the store.

Why its own module: `explain` answers from the run's files alone (no rerun), and every answer is a row
looked up in a documents dir (``outputs/main``, ``dups``, ``rejects``, ``removed``), an attribute set
co-partitioned with the documents, or a token cache's document offsets. These functions find such rows;
`datakit.report.explain` decides what they mean. Reads go through `datakit.core.fsio`, so a prefix on an
object store works too. Files are read one at a time and only the columns asked for (the text column
only where the answer needs it), so memory stays bounded by one part.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from datakit.core.fsio import exists, read_if_exists, read_parquet_metadata, read_table
from datakit.core.layout import AttributesDir, DocumentsDir, TokenCacheDir, join

STATUS_FILE, ARTIFACT_FILE, SUCCESS = ".status", "artifact.json", "SUCCESS"


@dataclass(frozen=True)
class Row:
    """One row found in a step's outputs: the kind of dir (main, dups, rejects, removed or an attribute
    set), the part's base name, and the row's values."""

    kind: str
    file: str
    values: dict[str, Any]


def artifact(step_dir: str) -> dict | None:
    """A built step's artifact.json record; None when the step is not built (no SUCCESS status)."""
    status = read_if_exists(join(step_dir, STATUS_FILE))
    record = read_if_exists(join(step_dir, ARTIFACT_FILE))
    try:
        if status is None or record is None or json.loads(status).get("status") != SUCCESS:
            return None
        return json.loads(record)
    except ValueError:
        return None


def _columns(path: str, wanted: tuple[str, ...]) -> list[str]:
    names = read_parquet_metadata(path).schema.to_arrow_schema().names
    return [c for c in wanted if c in names]


def _equal(table: pa.Table, column: str, value: Any) -> pa.Array:
    return pc.fill_null(pc.equal(table.column(column), pa.scalar(value, table.schema.field(column).type)), False)


def _matches(path: str, column: str, value: Any, columns: tuple[str, ...]) -> list[dict]:
    """The rows of one parquet file whose ``column`` equals ``value``, with ``columns`` (all when empty).
    The key column is read first; the others only from a file that holds a match."""
    names = read_parquet_metadata(path).schema.to_arrow_schema().names
    if column not in names:
        return []
    if not pc.any(_equal(read_table(path, [column]), column, value)).as_py():
        return []
    table = read_table(path, [c for c in names if c in (column, *columns)] if columns else None)
    return table.filter(_equal(table, column, value)).to_pylist()


def find_rows(step_dir: str, kind: str, column: str, value: Any, columns: tuple[str, ...],
              first: str | None = None) -> list[Row]:
    """Rows of a documents dir's ``kind`` with ``column == value``. ``first``: the part to look in
    first (steps keep their input's file names); the others are read only when it holds none."""
    docs = DocumentsDir(step_dir)
    names = docs.parquet_names(kind)
    order = ([first] if first in names else []) + [n for n in names if n != first]
    for name in order:
        rows = _matches(join(docs.dir(kind), name), column, value, columns)
        if rows:
            return [Row(kind, name, r) for r in rows]
    return []


def search_text(step_dir: str, kind: str, column: str, excerpt: str, columns: tuple[str, ...],
                limit: int) -> list[Row]:
    """Up to ``limit`` rows of a documents dir's ``kind`` whose ``column`` contains ``excerpt``, part by
    part in name order; stops reading as soon as it has ``limit``. Any run of whitespace in the excerpt
    matches any other (a sentence copied from one line may be wrapped in the document)."""
    pattern = r"\s+".join(re.escape(word) for word in excerpt.split())
    docs = DocumentsDir(step_dir)
    found: list[Row] = []
    for name in docs.parquet_names(kind):
        path = join(docs.dir(kind), name)
        cols = _columns(path, tuple(dict.fromkeys((column, *columns))))
        if column not in cols:
            continue
        table = read_table(path, cols)
        hits = table.filter(pc.fill_null(pc.match_substring_regex(table.column(column), pattern), False))
        found += [Row(kind, name, r) for r in hits.slice(0, limit - len(found)).to_pylist()]
        if len(found) >= limit:
            break
    return found


def attribute_rows(step_dir: str, source: str, file: str, doc_id: str) -> list[dict] | None:
    """The rows an attribute step wrote about ``doc_id`` in ``source``'s set, from the part paired with
    the documents file ``file``; None when the step has no set for the source."""
    attrs = AttributesDir.of(step_dir, source)
    if not exists(attrs.meta):
        return None
    path = attrs.file(file)
    return _matches(path, "id", doc_id, ()) if exists(path) else []


def attribute_members(step_dir: str, sources: tuple[str, ...], column: str, value: str,
                      limit: int) -> list[dict]:
    """Up to ``limit`` rows (with their ``source``) of an attribute step whose ``column == value``, over
    every source's set: a duplicate cluster's members."""
    out: list[dict] = []
    for source in sources:
        attrs = AttributesDir.of(step_dir, source)
        for name in attrs.parquet_names() if exists(attrs.meta) else []:
            out += [{"source": source, **r} for r in _matches(attrs.file(name), column, value, ())]
            if len(out) >= limit:
                return out[:limit]
    return out


@dataclass(frozen=True)
class TokenSpan:
    """Where a document's tokens lie in its token cache: split, shard, its index among the shard's
    documents of that split, and its tokens' [start, end) in the shard (EOS/BOS included)."""

    split: str
    shard: int
    index: int
    start: int
    end: int

    @property
    def tokens(self) -> int:
        return self.end - self.start


def token_span(cache_dir: str, documents_main: str, file: str, doc_id: str) -> TokenSpan | str:
    """The document's tokens, from the cache's per-shard document offsets (no re-tokenizing): shard i of
    a split holds the documents of input part i routed to that split, in file order. A string says
    why the span cannot be told (the cache does not match its documents file)."""
    from datakit.tokenize import cache as tokens
    from datakit.tokenize.tokenize_step import is_validation

    table = read_table(join(documents_main, file), ["id", "text"])
    valid = pc.and_(pc.is_valid(table.column("id")), pc.is_valid(table.column("text")))
    ids = table.column("id").filter(valid).to_pylist()
    if doc_id not in ids:
        return f"{doc_id} is not in {file} of the documents the cache was built from"
    cache = TokenCacheDir(cache_dir)
    ledgers = {s: tokens.read_ledger(cache.split(s)) for s in TokenCacheDir.SPLITS}
    fraction = float(ledgers[TokenCacheDir.SPLITS[0]].get("validation_fraction") or 0.0)
    splits = [TokenCacheDir.SPLITS[1] if is_validation(i, fraction) else TokenCacheDir.SPLITS[0] for i in ids]
    pos = ids.index(doc_id)
    split = splits[pos]
    shard = next((s for s in ledgers[split]["shards"] if s.get("input") == file), None)
    if shard is None:
        return f"the {split} cache has no shard for {file}"
    if shard["rows"] != splits.count(split):
        return (f"{split} shard {shard['index']} holds {shard['rows']} documents, {file} routes "
                f"{splits.count(split)} there")
    index = splits[:pos].count(split)
    offsets = tokens.load_npy(join(cache.split(split), shard["offsets_file"]))
    return TokenSpan(split, int(shard["index"]), index, int(offsets[index]), int(offsets[index + 1]))
