"""Turning a batch of documents into one flat token array plus per-document lengths.

Why pieces: the Rust tokenizer's pre-tokeniser and BPE get slow on very long strings, so texts over
``max_chars`` characters are cut at whitespace into pieces, all pieces of the batch are encoded in ONE
``encode_batch_fast`` call (parallel over the tokenizer's threads), and each document's pieces are
concatenated again. A cut falls where a whitespace run starts (after a character that is not
whitespace): no piece of GPT-2's split or of `byte_level.SPLIT_PATTERN` spans a non-whitespace character
and the whitespace after it, and both split a run that starts a text as they split it mid-text, so a
document's pieces encode to exactly its whole encoding (checked on every long document of the tokenize
benchmark's 40 MB: the cut before a run's last whitespace character, used before, changed 300 of 736
under GPT-2's split and 497 under ours). Byte-level decoding is exact whatever the cut.
"""

from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np
from tokenizers import Tokenizer

__all__ = ["MAX_PIECE_CHARS", "split_long_text", "to_pieces", "assemble", "assemble_flat", "encode_documents",
           "token_dtype"]

MAX_PIECE_CHARS = 10_000
# assemble_flat copies document by document when documents average at least this many tokens
_COPY_LOOP_MIN_TOKENS = 64
_WS = (" ", "\n", "\t", "\r")


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (vocab <= 65536), else uint32; always little-endian on disk."""
    return np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<u4")


def split_long_text(text: str, max_chars: int = MAX_PIECE_CHARS) -> list[str]:
    """Cut ``text`` into pieces of at most ``max_chars`` characters, preferably where a whitespace run
    starts (its last whitespace searched in the second half of each window, then the run followed back
    to its first character); ``"".join(pieces) == text`` always."""
    if len(text) <= max_chars:
        return [text]
    pieces = []
    start = 0
    n = len(text)
    while n - start > max_chars:
        lo, hi = start + max_chars // 2, start + max_chars
        cut = _run_start(text, max(text.rfind(w, lo, hi) for w in _WS), start)
        if cut <= start:
            cut = hi  # no whitespace in the window: a hard cut (still lossless, text is characters)
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces


def _run_start(text: str, at: int, start: int) -> int:
    """Where the whitespace run holding ``text[at]`` starts, or ``at`` itself when that run reaches back
    to ``start`` (a piece is never empty; such a cut is lossless, only not on a split boundary)."""
    if at <= start:
        return at
    first = at
    while first > start and text[first - 1].isspace():
        first -= 1
    return first if first > start else at


def to_pieces(texts: Sequence[str], max_chars: int = MAX_PIECE_CHARS) -> tuple[list[str], np.ndarray]:
    """Flatten documents into encoder inputs: (pieces, number of pieces per document)."""
    pieces: list[str] = []
    piece_counts = np.empty(len(texts), dtype=np.int64)
    for i, t in enumerate(texts):
        if len(t) <= max_chars:
            pieces.append(t)
            piece_counts[i] = 1
        else:
            parts = split_long_text(t, max_chars)
            pieces.extend(parts)
            piece_counts[i] = len(parts)
    return pieces, piece_counts


def assemble(
    encodings: Sequence,
    piece_counts: np.ndarray,
    *,
    eos_id: int,
    bos_id: int | None = None,
    dtype: np.dtype | str = "<u2",
) -> tuple[np.ndarray, np.ndarray]:
    """Encoded pieces -> (flat tokens, per-document token counts): each document's pieces concatenated,
    wrapped as [BOS] + tokens + [EOS] (BOS only if ``bos_id`` is given). ``encodings`` holds HF
    Encodings, plain id lists or id arrays (what the tiktoken engine returns, see
    :mod:`datakit.tokenize.engine`)."""
    dtype = np.dtype(dtype)
    piece_lens = np.fromiter((len(e) for e in encodings), dtype=np.int64, count=len(encodings))
    if encodings and all(isinstance(e, np.ndarray) for e in encodings):
        content = np.concatenate(encodings).astype(dtype, copy=False)
    else:
        content = np.fromiter(
            itertools.chain.from_iterable(getattr(e, "ids", e) for e in encodings), dtype=dtype,
            count=int(piece_lens.sum()),
        )
    return assemble_flat(content, piece_lens, piece_counts, eos_id=eos_id, bos_id=bos_id, dtype=dtype)


def assemble_flat(
    content: np.ndarray,
    piece_lens: np.ndarray,
    piece_counts: np.ndarray,
    *,
    eos_id: int,
    bos_id: int | None = None,
    dtype: np.dtype | str = "<u2",
) -> tuple[np.ndarray, np.ndarray]:
    """``assemble`` from the pieces' ids already concatenated (``content``, cast to ``dtype``) and the
    number of ids per piece: what ``ShardEncoder.encode_flat`` gives."""
    dtype = np.dtype(dtype)
    n_docs = len(piece_counts)
    if n_docs == 0:
        return np.empty(0, dtype=dtype), np.empty(0, dtype=np.int64)
    if len(content) != int(piece_lens.sum()):
        raise ValueError(f"{len(content)} ids for pieces of {int(piece_lens.sum())} ids in all")
    first_piece = np.concatenate([[0], np.cumsum(piece_counts)[:-1]])
    doc_content = np.add.reduceat(piece_lens, first_piece)
    extra = 1 + (bos_id is not None)
    doc_lens = doc_content + extra
    out = np.empty(int(doc_lens.sum()), dtype=dtype)
    ends = np.cumsum(doc_lens)
    starts = ends - doc_lens
    if n_docs * _COPY_LOOP_MIN_TOKENS <= len(content):
        # long documents: one slice copy each (a few times faster than a mask over every token)
        src_ends = np.cumsum(doc_content).tolist()
        a = 0
        for d, b in zip((starts + (extra - 1)).tolist(), src_ends):
            out[d:d + b - a] = content[a:b]
            a = b
    else:
        special = np.zeros(len(out), dtype=bool)
        special[ends - 1] = True
        if bos_id is not None:
            special[starts] = True
        out[~special] = content
    out[ends - 1] = eos_id
    if bos_id is not None:
        out[starts] = bos_id
    return out, doc_lens


def encode_documents(
    tok: Tokenizer,
    texts: Sequence[str],
    *,
    eos_id: int,
    bos_id: int | None = None,
    dtype: np.dtype | str = "<u2",
    max_chars: int = MAX_PIECE_CHARS,
) -> tuple[np.ndarray, np.ndarray]:
    """Encode documents to (flat tokens, per-document token counts) with one ``encode_batch_fast`` call.

    Each document becomes [BOS] + tokens + [EOS] (BOS only if ``bos_id`` is given). The tokenizer is
    called without post-processing templates (``add_special_tokens=False``): the cache adds exactly
    the specials above, nothing else."""
    pieces, piece_counts = to_pieces(texts, max_chars)
    encodings = tok.encode_batch_fast(pieces, add_special_tokens=False) if pieces else []
    return assemble(encodings, piece_counts, eos_id=eos_id, bos_id=bos_id, dtype=dtype)
