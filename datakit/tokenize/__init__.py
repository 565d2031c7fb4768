"""Tokenization into shard caches, and the training-data reader (Feistel shuffle, mixtures).

Modules: tokenizer (load/identify/train HF tokenizers), encode (batch encoding with long-text
splitting), cache (on-disk format, writer helpers, TokenCache reader), tokenize_step (the engine
pipeline), feistel and mixture (stateless shuffling and mixing), reader (TrainBatches),
inspection (`datakit cache inspect`), fixtures (real-text sources for tests and benchmarks).

The stage entry point lives in tokenize_step, which pulls in the shuffle engine; every name here is
imported lazily, so that training code reading caches does not load the engine, and an engine worker
does not load the reader.
"""

from datakit.core.lazy import lazy_exports

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
__all__ = sorted(_SOURCES)
__getattr__, __dir__ = lazy_exports(__name__, _SOURCES, globals())
