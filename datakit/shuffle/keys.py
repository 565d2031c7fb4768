"""Canonical, order-preserving key encoding and shard routing.

Keys are encoded to bytes once on the map side. The encoding is *order preserving within a type* (byte
order of the encoding == natural order of the values), so reducers can merge sorted runs by comparing
bytes, and id-sorted outputs fall out of the shuffle for free. Routing hashes the same bytes with
xxh3_64, except that integer keys already in [0, N) go to shard `key` unchanged: hashing them again
(as Zephyr once did) leaves shards empty when users pre-bucket their keys.
"""

from __future__ import annotations

import struct
from typing import Any

import xxhash

_INT_OFFSET = 1 << 63
_F64 = struct.Struct(">d")
_U64 = struct.Struct(">Q")


class KeyEncodingError(TypeError):
    """A key (or sort key) is not one of the encodable types."""


def _escape(raw: bytes) -> bytes:
    # Inside tuples, variable-length parts need a terminator that sorts below every byte: 0x00 0x00.
    return raw.replace(b"\x00", b"\x00\xff") + b"\x00\x00"


def _encode_into(key: Any, out: list[bytes], nested: bool) -> None:
    t = type(key)
    if t is str:
        raw = key.encode("utf-8")
        out.append(b"\x06" + (_escape(raw) if nested else raw))
    elif t is int:
        if not -_INT_OFFSET <= key < _INT_OFFSET:
            raise KeyEncodingError(f"integer key {key} is outside the signed 64-bit range")
        out.append(b"\x04" + _U64.pack(key + _INT_OFFSET))
    elif key is None:
        out.append(b"\x01")
    elif t is bool:
        out.append(b"\x03" if key else b"\x02")
    elif t is float:
        bits = _U64.unpack(_F64.pack(key))[0]
        bits = bits ^ 0xFFFFFFFFFFFFFFFF if bits >> 63 else bits | (1 << 63)
        out.append(b"\x05" + _U64.pack(bits))
    elif t is bytes:
        out.append(b"\x07" + (_escape(key) if nested else key))
    elif t is tuple:
        out.append(b"\x08")
        for part in key:
            _encode_into(part, out, True)
        out.append(b"\x00" if nested else b"")
    else:
        raise KeyEncodingError(
            f"cannot use a {t.__name__} as a shuffle key ({key!r:.80}): keys must be None, bool, int, "
            "float, str, bytes or tuples of these; convert it in your key function (e.g. str(...) or a tuple)"
        )


def encode_key(key: Any) -> bytes:
    """Encode a key to bytes whose order matches the key's natural order (within one type)."""
    t = type(key)
    if t is str:  # fast path: the overwhelmingly common case (document ids)
        return b"\x06" + key.encode("utf-8")
    if t is int and -_INT_OFFSET <= key < _INT_OFFSET:
        return b"\x04" + _U64.pack(key + _INT_OFFSET)
    out: list[bytes] = []
    _encode_into(key, out, False)
    return b"".join(out)


def _unescape_until_terminator(buf: bytes, pos: int) -> tuple[bytes, int]:
    out = bytearray()
    while True:
        i = buf.index(b"\x00", pos)
        out += buf[pos:i]
        nxt = buf[i + 1]
        if nxt == 0x00:
            return bytes(out), i + 2
        out.append(0)  # escaped zero byte (0x00 0xff)
        pos = i + 2


def _decode_at(buf: bytes, pos: int, nested: bool) -> tuple[Any, int]:
    tag = buf[pos]
    pos += 1
    if tag == 0x06 or tag == 0x07:
        if nested:
            raw, pos = _unescape_until_terminator(buf, pos)
        else:
            raw, pos = buf[pos:], len(buf)
        return (raw.decode("utf-8") if tag == 0x06 else raw), pos
    if tag == 0x04:
        return _U64.unpack_from(buf, pos)[0] - _INT_OFFSET, pos + 8
    if tag == 0x01:
        return None, pos
    if tag in (0x02, 0x03):
        return tag == 0x03, pos
    if tag == 0x05:
        bits = _U64.unpack_from(buf, pos)[0]
        bits = bits & 0x7FFFFFFFFFFFFFFF if bits >> 63 else bits ^ 0xFFFFFFFFFFFFFFFF
        return _F64.unpack(_U64.pack(bits))[0], pos + 8
    if tag == 0x08:
        parts = []
        while pos < len(buf) and not (nested and buf[pos] == 0x00):
            part, pos = _decode_at(buf, pos, True)
            parts.append(part)
        return tuple(parts), pos + (1 if nested else 0)
    raise ValueError(f"corrupt key encoding (tag {tag:#x})")


def decode_key(encoded: bytes) -> Any:
    """Inverse of `encode_key`."""
    if encoded[:1] == b"\x06":
        return encoded[1:].decode("utf-8")
    return _decode_at(encoded, 0, False)[0]


def route(key: Any, encoded: bytes, num_shards: int) -> int:
    """The reducer that owns `key`: ints in [0, N) pass through, everything else is hashed."""
    if type(key) is int and 0 <= key < num_shards:
        return key
    return xxhash.xxh3_64_intdigest(encoded) % num_shards
