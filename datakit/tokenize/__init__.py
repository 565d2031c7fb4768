"""Tokenization into shard caches, and the training-data reader (Feistel shuffle, mixtures).

Modules: tokenizer (load/identify/train HF tokenizers), encode (batch encoding with long-text
splitting), cache (on-disk format, writer helpers, TokenCache reader), tokenize_step (the engine
pipeline), feistel and mixture (stateless shuffling and mixing), reader (TrainBatches),
inspection (`datakit cache inspect`), fixtures (real-text sources for tests and benchmarks).

The stage entry point lives in tokenize_step, which pulls in the shuffle engine; every name here is
imported lazily, so that training code reading caches does not load the engine, and an engine worker
does not load the reader.
"""

import importlib

# Every public name -> the submodule defining it; each is imported on first use (PEP 562), so that a
# process that only tokenizes (an engine worker) or only reads caches loads just what it needs.
_SOURCES = {
    "CacheNotReady": "cache", "TokenCache": "cache", "open_cache": "cache",
    "feistel_inverse": "feistel", "feistel_permute": "feistel", "lcg_permute": "feistel",
    "format_inspect": "inspection", "inspect_cache": "inspection",
    "BlockMixture": "mixture", "largest_remainder_counts": "mixture",
    "TrainBatches": "reader",
    "TokenizerError": "tokenizer", "TokenizerIdentity": "tokenizer", "load_tokenizer": "tokenizer",
    "train_tokenizer": "tokenizer",
    "tokenize_source": "tokenize_step", "TokenizeResult": "tokenize_step",
}

__all__ = [
    "CacheNotReady", "TokenCache", "open_cache", "TrainBatches",
    "feistel_permute", "feistel_inverse", "lcg_permute", "BlockMixture", "largest_remainder_counts",
    "TokenizerError", "TokenizerIdentity", "load_tokenizer", "train_tokenizer",
    "inspect_cache", "format_inspect", "tokenize_source", "TokenizeResult",
]


def __getattr__(name: str):
    if name in _SOURCES:
        value = getattr(importlib.import_module(f"{__name__}.{_SOURCES[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'datakit.tokenize' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
