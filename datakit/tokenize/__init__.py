"""Tokenization into shard caches, and the training-data reader (Feistel shuffle, mixtures).

Modules: tokenizer (load/identify/train HF tokenizers), encode (batch encoding with long-text
splitting), cache (on-disk format, writer helpers, TokenCache reader), tokenize_step (the engine
pipeline), feistel and mixture (stateless shuffling and mixing), reader (TrainBatches),
inspection (`datakit cache inspect`), fixtures (real-text sources for tests and benchmarks).

The stage entry point lives in tokenize_step, which pulls in the shuffle engine; it is imported lazily
so that training code reading caches does not load the engine.
"""

from datakit.tokenize.cache import CacheNotReady, TokenCache, open_cache
from datakit.tokenize.feistel import feistel_inverse, feistel_permute, lcg_permute
from datakit.tokenize.inspection import format_inspect, inspect_cache
from datakit.tokenize.mixture import BlockMixture, largest_remainder_counts
from datakit.tokenize.reader import TrainBatches
from datakit.tokenize.tokenizer import TokenizerError, TokenizerIdentity, load_tokenizer, train_tokenizer

__all__ = [
    "CacheNotReady", "TokenCache", "open_cache", "TrainBatches",
    "feistel_permute", "feistel_inverse", "lcg_permute", "BlockMixture", "largest_remainder_counts",
    "TokenizerError", "TokenizerIdentity", "load_tokenizer", "train_tokenizer",
    "inspect_cache", "format_inspect", "tokenize_source", "TokenizeResult",
]


def __getattr__(name: str):
    if name in ("tokenize_source", "TokenizeResult"):
        from datakit.tokenize import tokenize_step

        return getattr(tokenize_step, name)
    raise AttributeError(f"module 'datakit.tokenize' has no attribute {name!r}")
