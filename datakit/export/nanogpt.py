"""nanoGPT's data files: ``train.bin`` / ``val.bin``, every document's tokens back to back as one flat
array, each document followed by the end-of-text id, as nanoGPT's ``data/*/prepare.py`` writes them
(``ids.append(enc.eot_token)``; then ``arr.tofile``), and as its ``train.py`` reads them
(``np.memmap(path, dtype=np.uint16, mode='r')``). The cache's documents already end with EOS (and start
with BOS when the tokenize section asks for one), so the tokens go out unchanged. nanoGPT has no mixture:
components follow one another in name order; the provenance records where each starts.
"""

from __future__ import annotations

import numpy as np

from datakit.core.fsio import atomic_output

from .inputs import Component, ExportRequest, iter_chunks, ledger_facts, rel, shard_refs

FILES = {"train": "train.bin", "validation": "val.bin"}
CHUNK_TOKENS = 1 << 24


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 as nanoGPT reads it; uint32 when ids do not fit (then read with dtype=np.uint32)."""
    return np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<u4")


def write_split(req: ExportRequest, split: str) -> dict:
    """One flat file for the split; returns its name, dtype, totals and each component's token range."""
    comps: list[Component] = sorted(req.components, key=lambda c: c.name)
    dtype = token_dtype(max(ledger_facts(c, split)["vocab_size"] for c in comps))
    ranges, pos, docs = {}, 0, 0
    with atomic_output(rel(req.dest, FILES[split])) as out:
        for c in comps:
            start = pos
            for ref in shard_refs(c, split):
                docs += ref.docs
                for tokens, _ in iter_chunks(ref, CHUNK_TOKENS):
                    out.write(tokens.astype(dtype, copy=False).tobytes())
                    pos += len(tokens)
            ranges[c.name] = [start, pos]
    return {"split": split, "file": FILES[split], "dtype": dtype.name, "tokens": pos, "docs": docs,
            "components": ranges}
