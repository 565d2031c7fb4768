"""What an export reads: the mixture components, each one token cache (a tokenize step's output), their
weights and the identities of the steps that made them; and the cache shards, one at a time."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from datakit.core.layout import TokenCacheDir
from datakit.tokenize.cache import join, load_npy, read_ledger

SPLITS = TokenCacheDir.SPLITS


@dataclass(frozen=True)
class Component:
    """One mixture component: ``cache`` is its tokenize step's output dir (train/, validation/,
    tokenizer.json), ``step`` that step's directory name (name-identity), ``weight`` its mixture weight."""

    name: str
    cache: str
    step: str
    weight: float

    def split(self, split: str) -> str:
        return TokenCacheDir(self.cache).split(split)


@dataclass(frozen=True)
class ExportRequest:
    """One export: ``fmt`` of ``splits`` of ``components`` into ``dest`` (a directory or URL).
    ``steps``: every step the export depends on, name -> identity (recorded in the provenance)."""

    fmt: str
    dest: str
    components: tuple[Component, ...]
    splits: tuple[str, ...] = SPLITS
    steps: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.splits) - set(SPLITS))
        if unknown or not self.splits:
            raise ValueError(f"splits {list(self.splits)}: each must be one of {', '.join(SPLITS)}")
        if not self.components:
            raise ValueError("nothing to export: no token caches were given")

    @property
    def tokenizer(self) -> str:
        """Every component's cache holds a copy of the one tokenizer (checked by `check_tokenizers`)."""
        return TokenCacheDir(self.components[0].cache).tokenizer


@dataclass(frozen=True)
class ShardRef:
    """Shard ``index`` of one component's split: the unit of parallel work."""

    component: str
    split_dir: str
    index: int
    tokens_file: str
    offsets_file: str
    docs: int
    tokens: int


def shard_refs(component: Component, split: str) -> list[ShardRef]:
    """The shards of a component's split, from its ledger (a finished cache, or CacheNotReady)."""
    split_dir = component.split(split)
    return [ShardRef(component.name, split_dir, int(e["index"]), e["tokens_file"], e["offsets_file"],
                     int(e["rows"]), int(e["tokens"])) for e in read_ledger(split_dir)["shards"]]


def load_shard(ref: ShardRef) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, offsets) of one shard: memory-mapped when local, so only the pages read are resident."""
    return load_npy(join(ref.split_dir, ref.tokens_file)), load_npy(join(ref.split_dir, ref.offsets_file))


def load_offsets(ref: ShardRef) -> np.ndarray:
    """A shard's document offsets alone (the index writers never need its tokens)."""
    return load_npy(join(ref.split_dir, ref.offsets_file))


def iter_chunks(ref: ShardRef, max_tokens: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(tokens, document offsets relative to them) in runs of whole documents of about ``max_tokens``
    tokens (one longer document is its own chunk): the bounded unit every writer holds in memory."""
    tokens, offsets = load_shard(ref)
    lo = 0
    while lo < len(offsets) - 1:
        hi = int(np.searchsorted(offsets, offsets[lo] + max_tokens, side="right")) - 1
        hi = max(hi, lo + 1)
        start, stop = int(offsets[lo]), int(offsets[hi])
        yield np.asarray(tokens[start:stop]), np.asarray(offsets[lo:hi + 1]) - start
        lo = hi


def ledger_facts(component: Component, split: str) -> dict:
    """A split's totals and tokenizer identity, from its ledger."""
    lg = read_ledger(component.split(split))
    return {"docs": int(lg["total_docs"]), "tokens": int(lg["total_tokens"]), "vocab_size": int(lg["vocab_size"]),
            "dtype": lg["dtype"], "tokenizer": dict(lg["tokenizer"])}


def check_tokenizers(req: ExportRequest) -> dict:
    """The one tokenizer identity all components share; mixing caches of two tokenizers is refused."""
    seen = {c.name: ledger_facts(c, req.splits[0])["tokenizer"] for c in req.components}
    shas = {t["sha256"] for t in seen.values()}
    if len(shas) > 1:
        raise ValueError(f"the caches were built with different tokenizers ({sorted(shas)}): "
                         "their token ids do not mean the same; export them separately")
    return next(iter(seen.values()))


def normalized_weights(components: tuple[Component, ...]) -> dict[str, float]:
    """The components' weights summing to 1 (all equal when every weight is 0)."""
    total = sum(max(c.weight, 0.0) for c in components)
    if total <= 0:
        return {c.name: 1.0 / len(components) for c in components}
    return {c.name: max(c.weight, 0.0) / total for c in components}


def rel(dest: str, *parts: str) -> str:
    return posixpath.join(dest.rstrip("/"), *parts)
