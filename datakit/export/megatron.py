"""Megatron-LM / Megatron-core indexed datasets: per component and split a ``<name>.bin`` (the tokens,
documents back to back) and ``<name>.idx`` (megatron-core's ``MMIDIDX`` index), plus the weighted
``--data-path`` string for the mixture.

The .idx layout (megatron/core/datasets/indexed_dataset.py, ``_IndexWriter``), all little-endian::

    b"MMIDIDX\\x00\\x00"  uint64 version = 1  uint8 dtype code
    uint64 sequence count N   uint64 document-index count N + 1
    int32[N]  sequence lengths        int64[N]  byte pointers into .bin
    int64[N + 1]  document indices (0, 1, ..., N: every document is one sequence)

Every count is known from the cache's ledger before a byte is written, so the index streams shard by
shard in three passes over the (memory-mapped) offsets: memory stays bounded by one shard's offsets.
"""

from __future__ import annotations

import struct
from typing import IO

import numpy as np

from datakit.core.fsio import atomic_output

from .inputs import Component, ShardRef, iter_chunks, ledger_facts, load_offsets, rel, shard_refs

INDEX_HEADER = b"MMIDIDX\x00\x00"
DTYPE_CODES = {np.dtype(np.uint16): 8, np.dtype(np.int32): 4}
CHUNK_TOKENS = 1 << 24


def token_dtype(vocab_size: int) -> np.dtype:
    """megatron-core's own rule (``DType.optimal_dtype``): uint16 below 65,500 ids, else int32."""
    return np.dtype(np.uint16) if vocab_size < 65500 else np.dtype(np.int32)


def _write_bin(out: IO[bytes], refs: list[ShardRef], dtype: np.dtype) -> None:
    for ref in refs:
        for tokens, _ in iter_chunks(ref, CHUNK_TOKENS):
            out.write(tokens.astype(dtype, copy=False).tobytes())


def _lengths(ref: ShardRef) -> np.ndarray:
    return np.diff(np.asarray(load_offsets(ref), dtype=np.int64))


def _write_idx(out: IO[bytes], refs: list[ShardRef], dtype: np.dtype, docs: int) -> None:
    out.write(INDEX_HEADER + struct.pack("<Q", 1) + struct.pack("<B", DTYPE_CODES[dtype]))
    out.write(struct.pack("<Q", docs) + struct.pack("<Q", docs + 1))
    for ref in refs:
        out.write(_lengths(ref).astype("<i4").tobytes())
    pointer = 0
    for ref in refs:
        lengths = _lengths(ref)
        starts = np.concatenate([[0], np.cumsum(lengths[:-1], dtype=np.int64)]) if len(lengths) else lengths
        out.write(((starts + pointer) * dtype.itemsize).astype("<i8").tobytes())
        pointer += int(lengths.sum())
    for lo in range(0, docs + 1, 1 << 22):
        out.write(np.arange(lo, min(docs + 1, lo + (1 << 22)), dtype="<i8").tobytes())


def write_component(component: Component, split: str, dest: str) -> dict:
    """``dest/<split>/<component>.bin`` and ``.idx``; returns the documents and tokens written."""
    facts = ledger_facts(component, split)
    refs = shard_refs(component, split)
    dtype = token_dtype(facts["vocab_size"])
    stem = rel(dest, split, component.name)
    with atomic_output(stem + ".bin") as out:
        _write_bin(out, refs, dtype)
    with atomic_output(stem + ".idx") as out:
        _write_idx(out, refs, dtype, facts["docs"])
    return {"component": component.name, "split": split, "docs": facts["docs"], "tokens": facts["tokens"],
            "files": [f"{split}/{component.name}.bin", f"{split}/{component.name}.idx"], "dtype": dtype.name}


def data_path(dest: str, split: str, weights: dict[str, float], written: dict[str, int]) -> str:
    """Megatron's ``--data-path`` value: ``weight prefix`` pairs for the components with documents and
    a positive weight (megatron normalises the weights itself)."""
    pairs = [f"{weights[n]:.6g} {rel(dest, split, n)}" for n in sorted(weights)
             if weights[n] > 0 and written.get(n, 0) > 0]
    return " ".join(pairs)
