"""Normalize stage: every source format into one clean, id-sorted, exactly deduplicated record stream.

    result = normalize_source(name="wiki", files=list_files("data/wiki/*.jsonl.zst"), fmt="jsonl",
                              out_dir="runs/normalize-wiki-1a2b", cfg=NormalizeConfig())

Output under `out_dir`: `outputs/main/part-00000-of-000NN.parquet` (zstd, each file sorted by `id`),
`outputs/dups/` (the non-first copies, same partitioning) and `outputs/rejects/part-00000-of-00001.parquet`
(file, line, offset, reason, detail, excerpt of every bad record).
"""

from .clean import CleanSpec, clean_record, compact_whitespace
from .config import (
    SCHEMA_VERSION, NormalizeConfig, NormalizeError, NormalizeResult, SchemaConflictError,
)
from .pipeline import normalize_source

__all__ = [
    "SCHEMA_VERSION", "NormalizeConfig", "NormalizeResult", "NormalizeError", "SchemaConflictError",
    "normalize_source", "CleanSpec", "clean_record", "compact_whitespace",
]
