"""The manifest's optional `export:` section: the formats to write the token caches in after tokenize,
each one step (`export-<format>`) whose identity is its settings plus the identities of the caches it
reads, so it is rebuilt only when a cache changes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Format = Literal["megatron", "hf", "mds", "nanogpt"]
Split = Literal["train", "validation"]


@dataclass(frozen=True)
class ExportConfig:
    """``formats``: megatron (indexed .bin/.idx per component and the --data-path weights), hf (a
    `datasets` directory and parquet files per component), mds (MosaicML streaming shards per
    component), nanogpt (train.bin / val.bin). ``splits``: which token cache splits to export.
    ``seq_len``: hf only; rows of exactly ``seq_len`` tokens packed from the documents back to back (the
    remainder under one row is left out) instead of one row per document."""

    formats: tuple[Format, ...] = field(default=("megatron",), metadata={"min": 1})
    splits: tuple[Split, ...] = ("train", "validation")
    seq_len: int | None = field(default=None, metadata={"min": 1})

    def seq_len_for(self, fmt: str) -> int | None:
        """The packing length a format's step uses: ``seq_len`` for hf, none for the others."""
        return self.seq_len if fmt == "hf" else None
