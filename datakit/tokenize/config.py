"""The manifest's `tokenize:` section, read by the tokenizer stage (train or copy a tokenizer.json) and the
tokenize stage (encode every source into a token cache)."""

from __future__ import annotations

from dataclasses import dataclass, field

from datakit.manifest.checks import probe_tokenizer


@dataclass(frozen=True)
class TokenizeConfig:
    """``tokenizer``: path or URL of a tokenizer.json; null trains a byte-level BPE on the corpus with
    ``vocab_size`` from at most ``train_tokenizer_bytes`` of text (``seed`` picks the sample)."""

    tokenizer: str | None = field(default=None, metadata={"path": True, "probe": probe_tokenizer})
    vocab_size: int = field(default=8192, metadata={"min": 256})
    train_tokenizer_bytes: int = field(default=20_000_000, metadata={"min": 1})
    validation_fraction: float = field(default=0.01, metadata={"min": 0, "lt": 1})
    bos: bool = False
    seed: int = 0
