"""What an export reads: the mixture components, each one token cache (a tokenize step's output), their
weights and the identities of the steps that made them, the tokenizer; and the cache shards, one at a
time. Caches and the tokenizer are read from their steps' records through their typed results
(`TokensResult`, `TokenizerResult`), never by guessing paths inside a step dir."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from datakit.core.fsio import open_read
from datakit.core.layout import TokenCacheDir
from datakit.core.results import TokenizerResult, TokensResult
from datakit.steps import StepRecord
from datakit.tokenize.cache import join, load_npy, read_ledger

SPLITS = TokenCacheDir.SPLITS


@dataclass(frozen=True)
class Component:
    """One mixture component: ``step`` its tokenize step's directory name (name-identity), ``weight`` its
    mixture weight, ``splits`` each split's cache dir (as the step's `TokensResult` names it)."""

    name: str
    step: str
    weight: float
    splits: dict[str, str]

    @classmethod
    def of(cls, name: str, record: StepRecord, weight: float) -> "Component":
        """The component whose token cache ``record`` (a built tokenize step) holds."""
        res = TokensResult.of(record)
        return cls(name, f"{record.name}-{record.identity}", float(weight),
                   {s: res.split_dir(record.output, s) for s in res.splits})

    def split(self, split: str) -> str:
        if split not in self.splits:
            raise ValueError(f"component {self.name}: its token cache ({self.step}) has no {split!r} split "
                             f"(it has {', '.join(sorted(self.splits)) or 'none'})")
        return self.splits[split]


def tokenizer_file(record: StepRecord) -> str:
    """The tokenizer.json a built tokenizer step wrote (its `TokenizerResult`)."""
    return record.path(TokenizerResult.of(record).tokenizer)


@dataclass(frozen=True)
class ExportRequest:
    """One export: ``fmt`` of ``splits`` of ``components`` into ``dest`` (a directory or URL), with
    ``tokenizer`` (the tokenizer.json the caches were built with) copied beside it. ``steps``: every step
    the export depends on, name -> identity (recorded in the provenance). ``seq_len``: hf only, rows of
    exactly that many tokens packed from the documents instead of one row per document."""

    fmt: str
    dest: str
    components: tuple[Component, ...]
    tokenizer: str
    splits: tuple[str, ...] = SPLITS
    steps: dict[str, str] = field(default_factory=dict)
    seq_len: int | None = None

    def __post_init__(self) -> None:
        unknown = sorted(set(self.splits) - set(SPLITS))
        if unknown or not self.splits:
            raise ValueError(f"splits {list(self.splits)}: each must be one of {', '.join(SPLITS)}")
        if not self.components:
            raise ValueError("nothing to export: no token caches were given")
        if self.seq_len is not None and (self.fmt != "hf" or self.seq_len < 1):
            raise ValueError(f"seq_len {self.seq_len}: packing applies to the hf format only, with seq_len >= 1")


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


def _npy_head(path: str, n: int) -> np.ndarray:
    """The first ``n`` values of a 1-D .npy, reading only its header and them (ranged reads remotely)."""
    with open_read(path) as f:
        version = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read_header(f)
        n = min(n, int(shape[0]))
        return np.frombuffer(f.read(n * dtype.itemsize), dtype=dtype, count=n)


def head_tokens(refs: tuple[ShardRef, ...], n: int) -> np.ndarray:
    """The first ``n`` tokens of the shards ``refs`` back to back (fewer when they hold fewer)."""
    parts, need = [], n
    for ref in refs:
        if need <= 0:
            break
        parts.append(_npy_head(join(ref.split_dir, ref.tokens_file), need))
        need -= len(parts[-1])
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)


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
