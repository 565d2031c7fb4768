"""The document contract every room shares: the columns a documents file must have, and the id.

A document's id is a hash of its final text, so the same text gets the same id wherever it is made:
normalize computes it, and every stage that changes a text (C4 line cleaning, line dedup, PII
redaction, a user map, decontamination's cuts) gives the new text its new id. Defining it once keeps
those stages and consolidate's check of recorded cuts from ever disagreeing.
"""

from __future__ import annotations

import pyarrow as pa
import xxhash

# The columns every documents file starts with (normalize's fixed schema; a source's own columns follow).
CORE_COLUMNS = ("id", "text", "source", "source_id", "url")
CORE_FIELDS = [pa.field(name, pa.string()) for name in CORE_COLUMNS]
CORE_SCHEMA = pa.schema(CORE_FIELDS)


def content_id_utf8(data: bytes) -> str:
    """The id of the text whose UTF-8 encoding is ``data`` (for callers that already hold the bytes)."""
    return xxhash.xxh3_128_hexdigest(data)


def content_id(text: str) -> str:
    """A document's id: 32 hex chars, the xxh3-128 of its UTF-8 text."""
    return content_id_utf8(text.encode("utf-8"))
