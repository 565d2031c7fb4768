"""Dedup and decontamination: global exact dedup, MinHash fuzzy dedup (each document with an earlier near
duplicate goes: forest.py) on the engine, benchmark decontamination, and consolidation of all their marks
into the final shards.

Every step reads normalized sources (`<dir>/outputs/main/*.parquet`, each sorted by id) and writes
attribute files co-partitioned with them (same file names, same id order, marked ids only), plus an
`attrs.json` recording the parameters, so consolidation is a per-file streaming merge and attribute
sets made differently are never mixed.
"""

from .components import CCResult, components_in_memory, connected_components, large_star, small_star
from .config import DedupConfig
from .consolidate import ConsolidateResult, consolidate
from .decontaminate import BenchmarkSpec, DecontamConfig, DecontamResult, decontaminate
from .exact import ExactResult, exact_dups
from .fuzzy import FuzzyResult, FuzzySource, fuzzy_dups, verify_threshold
from .layout import AttributeMismatch, DedupInputError, SourceRef
from .lsh_params import candidate_probability, effective_threshold, lsh_params
from .minhash import MinHashResult, band_buckets, buckets_for_texts, minhash_params, minhash_source, signatures
from .shingles import jaccard, normalize_text, shingle_hashes, shingle_set

__all__ = [
    "AttributeMismatch", "BenchmarkSpec", "CCResult", "ConsolidateResult", "DecontamConfig", "DecontamResult",
    "DedupConfig", "DedupInputError", "ExactResult", "FuzzyResult", "FuzzySource", "MinHashResult", "SourceRef",
    "band_buckets", "buckets_for_texts", "candidate_probability", "components_in_memory", "connected_components",
    "consolidate", "decontaminate", "effective_threshold", "exact_dups", "fuzzy_dups", "jaccard", "large_star",
    "lsh_params", "minhash_params", "minhash_source", "normalize_text", "shingle_hashes", "shingle_set",
    "signatures", "small_star", "verify_threshold",
]
