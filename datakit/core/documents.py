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
# zstd level 1: half the CPU of level 3 on text (0.31 vs 0.58 CPU-s for 97 MB of documents) for files
# 15% bigger; documents files are intermediates every later stage reads once.
ZSTD_LEVEL = 1
# Columns whose every value is its document's own: a dictionary of them is wasted work.
UNIQUE_COLUMNS = ("id", "text")


def parquet_options(schema: pa.Schema) -> dict:
    """How every stage encodes a documents file (`pq.ParquetWriter`'s and `pq.write_table`'s keyword
    arguments), one encoding for all of them: zstd at `ZSTD_LEVEL`; no dictionary for `UNIQUE_COLUMNS`
    (Arrow tries one, fills a whole dictionary page with a row group's text, then falls back to plain:
    8% of the CPU of encoding the incremental benchmark's documents files, 11% of reading them, and a
    page every reader decodes before the first row); no min/max statistics for text (whole documents in
    the footer)."""
    names = schema.names
    return {"compression": "zstd", "compression_level": ZSTD_LEVEL,
            "use_dictionary": [n for n in names if n not in UNIQUE_COLUMNS],
            "write_statistics": [n for n in names if n != "text"]}


def content_id_utf8(data: bytes) -> str:
    """The id of the text whose UTF-8 encoding is ``data`` (for callers that already hold the bytes)."""
    return xxhash.xxh3_128_hexdigest(data)


def content_id(text: str) -> str:
    """A document's id: 32 hex chars, the xxh3-128 of its UTF-8 text."""
    return content_id_utf8(text.encode("utf-8"))
