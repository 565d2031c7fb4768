"""GPT-2's byte-level BPE conventions, which both the tokenizer trainer (`tokenizer.py`) and the tiktoken
conversion (`engine.py`) must spell identically: the split pattern and the byte -> character table a
byte-level vocabulary is written in. One copy, so a trained tokenizer is always one `engine.convert` takes."""

from __future__ import annotations

__all__ = ["GPT2_PATTERN", "bytes_to_unicode"]

# What HF's ByteLevel pre-tokenizer splits with when use_regex is true (tiktoken's "gpt2" pattern).
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table, which byte-level BPE vocabularies are spelled in."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    table = {b: chr(b) for b in keep}
    n = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return table
