"""Line and paragraph exact dedup across documents: the pure parts (segmenting a text, keying its
segments, dropping the repeated ones). `datakit.stages.linededup` runs them over the corpus.

A segment is a line, or a paragraph (text between blank lines). Two segments are the same when their
stripped text is; segments shorter than ``min_chars`` never take part. The first document (in the
pipeline's order: source, file, row) holding a segment keeps every copy of it; every later document
loses every copy.
"""

from __future__ import annotations

import re

import xxhash

_PARA_SEP = re.compile(r"(\n[ \t]*\n\s*)")


def split(text: str, unit: str) -> list[str]:
    """Segments and separators alternating (segment, sep, segment, ...): joining them gives the text."""
    if unit == "line":
        parts = text.split("\n")
        out: list[str] = []
        for i, p in enumerate(parts):
            if i:
                out.append("\n")
            out.append(p)
        return out
    return _PARA_SEP.split(text)


def key(segment: str) -> int:
    """The signed 64-bit key of a segment's stripped text (the engine routes signed 64-bit keys)."""
    return xxhash.xxh3_64_intdigest(segment.strip().encode("utf-8")) - (1 << 63)


def keys(text: str, unit: str, min_chars: int) -> list[int]:
    """Keys of the segments long enough to take part, each once, in order of first appearance."""
    seen: dict[int, None] = {}
    for seg in split(text, unit)[::2]:
        if len(seg.strip()) >= min_chars:
            seen.setdefault(key(seg), None)
    return list(seen)


def drop(text: str, unit: str, min_chars: int, remove: set[int]) -> tuple[str, int]:
    """(text without the segments keyed in ``remove``, how many segments went). A dropped segment takes
    the separator before it (the one after it for the first segment), so no blank runs pile up."""
    parts = split(text, unit)
    kept: list[str] = []
    gone = 0
    for i in range(0, len(parts), 2):
        seg = parts[i]
        if len(seg.strip()) >= min_chars and key(seg) in remove:
            gone += 1
            continue
        if kept:
            kept.append(parts[i - 1])
        kept.append(seg)
    return "".join(kept), gone
