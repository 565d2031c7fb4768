"""The manifest's `tokenize:` section, read by the tokenizer stage (train or copy a tokenizer.json) and the
tokenize stage (encode every source into a token cache)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from datakit.manifest.checks import probe_tokenizer


@dataclass(frozen=True)
class TokenizeConfig:
    """``tokenizer``: path or URL of a tokenizer.json; null trains a byte-level BPE on the corpus with
    ``vocab_size`` from at most ``train_tokenizer_bytes`` of text (``seed`` picks the sample).

    ``engine``: what encodes documents. auto runs tiktoken when the tokenizer converts to it exactly (a
    byte-level BPE, see datakit.tokenize.engine) and HF tokenizers otherwise; hf always runs HF; tiktoken
    fails if the tokenizer does not convert. Every shard is also checked against HF on a sample (its first
    32 Ki characters and two short non-ASCII pieces, and at least ``engine_check_pieces`` pieces per
    worker process), falling back to HF on a mismatch, so the cache bytes never depend on this setting:
    it is no part of the step identity.

    ``retrain``: a trained tokenizer is pinned under the prefix, and later runs use it instead of
    training on changed data (datakit.tokenize.pin); true trains on the current data again (as a fresh
    prefix would) and pins the result; it does nothing when ``tokenizer`` is given. Which tokenizer is
    used is in the identity by its content, so this switch is not."""

    tokenizer: str | None = field(default=None, metadata={"path": True, "probe": probe_tokenizer})
    vocab_size: int = field(default=8192, metadata={"min": 256})
    train_tokenizer_bytes: int = field(default=20_000_000, metadata={"min": 1})
    validation_fraction: float = field(default=0.01, metadata={"min": 0, "lt": 1})
    bos: bool = False
    seed: int = 0
    engine: Literal["auto", "hf", "tiktoken"] = "auto"
    engine_check_pieces: int = field(default=64, metadata={"min": 1})
    retrain: bool = field(default=False, metadata={"identity": False})
