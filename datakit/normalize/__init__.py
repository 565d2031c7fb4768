"""Normalize stage: every source format into one clean, id-sorted, exactly deduplicated record stream.

    spec = SourceSpec(name="wiki", uri="data/wiki/*.jsonl.zst", format="jsonl")
    result = normalize_source(spec, files=list_files(spec.uri), out_dir="runs/normalize-wiki-1a2b",
                              cfg=NormalizeConfig())

Output under `out_dir`: `outputs/main/unit-<16 hex>.parquet`, one part per unit of input files (see
`units.py`; zstd, each file sorted by `id`), `outputs/dups/` (the non-first copies, same file names),
`outputs/rejects/part-00000-of-00001.parquet` (file, line, offset, reason, detail, excerpt of every bad
record) and `units/` (per-unit records kept for the next build's reuse, see `incremental.py`).
"""

from datakit.core.lazy import lazy_exports

# Imported on first use, so the readers (which take NormalizeConfig) can import .config without
# importing the pipeline that imports them.
_HOMES = {
    "SCHEMA_VERSION": "config", "NormalizeConfig": "config", "NormalizeResult": "config",
    "NormalizeError": "config", "SchemaConflictError": "config", "normalize_source": "pipeline",
    "clean_record": "clean", "compact_whitespace": "clean",
}
__all__ = list(_HOMES)
__getattr__, __dir__ = lazy_exports(__name__, _HOMES, globals())
