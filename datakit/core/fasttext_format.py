"""fastText's binary model format and word hash, as the classifier's scorer (`classify/compact.py`) and
language ID (`quality/lid176.py`) both read them.

Why here: both compute fastText 0.9.2's predict without fastText, from the model file itself, and must
hash words exactly as fastText does to find their rows. The two rooms do not import each other, so the
format's constants and the one hash they share live in `core/`: a second copy could drift from the
first (a changed constant in one would silently score differently from fastText).

fastText's ``Dictionary::hash`` is 32-bit FNV-1a over a word's bytes with each byte read as a C ``char``:
signed, so a byte of 0x80 or above is sign-extended before the XOR. Its n-gram ids and its word lookups
both use it (`fnv1a_spans`).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from datakit.core import arrow_numpy as an

__all__ = ["MAGIC", "VERSION", "EOS", "LABEL_PREFIX", "FNV_OFFSET", "FNV_PRIME", "fnv1a", "fnv1a_spans"]

MAGIC, VERSION = 793712314, 12  # the first two int32s of a model file (fastText 0.9.x's format)
EOS = "</s>"  # the word a line's end is read as
LABEL_PREFIX = "__label__"  # a token starting so is a label, not a word
FNV_OFFSET, FNV_PRIME = 2166136261, 16777619
_LONG = 256  # spans longer than this are hashed one by one (rare: numpy's passes go by span length)


def fnv1a(tokens: pa.Array) -> np.ndarray:
    """fastText's word hash per token (a string or binary array), as int32 (fastText keeps word hashes in
    an int32 vector)."""
    tokens = tokens.cast(pa.large_binary())
    if len(tokens) == 0:
        return np.zeros(0, dtype=np.int32)
    offsets = an.offsets(tokens)
    data = np.frombuffer(tokens.buffers()[2], np.int8) if tokens.buffers()[2] is not None else np.zeros(0, np.int8)
    return fnv1a_spans(data, offsets[:-1], np.diff(offsets))


def fnv1a_spans(data: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """fastText's hash (int32) of each byte span ``data[starts[i]:starts[i] + lens[i]]`` (``data`` int8, so
    bytes sign-extend as fastText's do), in the spans' order: one numpy pass per byte position over the
    spans still that long (longest first, so each pass is a prefix), Python's loop only for the rare spans
    longer than `_LONG`."""
    n = len(starts)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    h = np.full(n, FNV_OFFSET, dtype=np.uint32)
    short = np.flatnonzero(lens <= _LONG)
    order = short[np.argsort(-lens[short], kind="stable")]
    first, sl = starts[order], lens[order]
    hs = h[order]
    active = np.searchsorted(-sl, -np.arange(int(sl[0]) if len(sl) else 0), side="left")  # lengths > j
    prime = np.uint32(FNV_PRIME)
    for j, k in enumerate(active.tolist()):
        part = hs[:k]
        part ^= data[first[:k] + j].astype(np.int32).view(np.uint32)
        part *= prime
    h[order] = hs
    for i in np.flatnonzero(lens > _LONG).tolist():
        x = FNV_OFFSET
        for byte in data[starts[i]:starts[i] + lens[i]].tolist():
            x = ((x ^ (byte & 0xFFFFFFFF)) * FNV_PRIME) & 0xFFFFFFFF
        h[i] = x
    return h.view(np.int32)
