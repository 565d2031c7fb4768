"""Turn one raw record into one output row (or a drop, or a reject): pure functions, no I/O.

The row's `id` is the content id of the *final* text (`datakit.core.documents`), so it is computed
last, after whitespace compaction: two documents that differ only in an over-long whitespace run get the same id and are
deduplicated as they should be.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from functools import lru_cache
from typing import Any

from datakit.core.documents import CORE_COLUMNS, content_id_utf8
from datakit.manifest import SourceSpec
from datakit.sources.readers import BINARY, OVERSIZED, WRONG_TYPE, RawRecord, Reject, decode_bytes, excerpt_of

from .config import NormalizeConfig

_CORE = frozenset(CORE_COLUMNS)
# Field names of records that lack the text field are remembered (as counters "field/<name>") for the
# "wrong text_field?" message; a sample of such records per task is plenty.
NOTE_FIELDS_OF = 100
FIELD_PREFIX = "field/"

# What flows through the shuffle: (id, file_index, pos, row). The key is the id; (file_index, pos)
# orders copies so "first copy" is the same whatever the sharding or worker count.
Item = tuple[str, int, int, dict]

_SURROGATES = re.compile("[\ud800-\udfff]")
# Not text: NUL and C0 controls other than tab/newline/vertical tab/form feed/carriage return, DEL, C1
# controls, U+FFFD (what undecodable bytes became) and lone surrogates (what JSON's "\udc80" escapes of
# undecodable bytes become; they turn into U+FFFD below). One regex search proves a text clean.
_SUSPECT = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f\ufffd\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f]")
# The same test on the UTF-8 bytes, at C speed (the regex scan was the largest cost of cleaning a clean
# text): an ASCII suspect is its own byte, which never occurs inside a multi-byte character; a C1 control
# is 0xC2 0x80-0x9F and U+FFFD is EF BF BD, and 0xC2 and 0xEF are only ever lead bytes. So
# `_maybe_suspect(data, data.translate(_CLASSES))` is exactly `_SUSPECT.search(text) is not None`.
_ASCII_SUSPECT = bytes([*range(0x00, 0x09), *range(0x0E, 0x20), 0x7F])
_C1_UTF8 = re.compile(b"\xc2[\x80-\x9f]")


def _maybe_suspect(data: bytes, classes: bytes) -> bool:
    # one byte is looked for with memchr, a sequence with a search ten times slower: 0xEF first
    return (b"\x00" in classes or (b"\xef" in data and b"\xef\xbf\xbd" in data)
            or (b"\xc2" in data and _C1_UTF8.search(data) is not None))


@lru_cache(maxsize=16)
def _ws_run(max_run: int) -> re.Pattern:
    # The look-behind anchors matches at the start of a run, so scanning stays linear in run length
    # (without it every position inside a long run would start a fresh attempt).
    return re.compile(r"(?<!\s)\s{%d,}" % (max_run + 1))


def compact_whitespace(text: str, max_run: int) -> tuple[str, int]:
    """Cap every run of Python whitespace (incl. NBSP, U+3000...) at `max_run` characters, keeping the
    run's first characters (so a run of newlines stays newlines). Returns (text, runs capped)."""
    return _ws_run(max_run).subn(lambda m: m.group()[:max_run], text)


# Byte-level pre-check: every byte of the UTF-8 form of a whitespace character -> b" ", the rest -> b"a".
# A run of N whitespace characters becomes at least N spaces, so no N+1 spaces in the translation proves
# there is no long run, at C speed; only texts that might have one pay for the regex. (Every non-ASCII
# byte used to count: 129 bytes of CJK or Cyrillic text sent a text to the regex for nothing.) No
# whitespace character lies above U+3000 (tests check the whole range).
WS_LAST = 0x3000
_WS_BYTES = frozenset(b for c in range(WS_LAST + 1) if chr(c).isspace() for b in chr(c).encode())
_MAYBE_WS = bytes((0x20 if i in _WS_BYTES else 0x61) for i in range(256))
# Both pre-checks in one pass over a text's bytes: _MAYBE_WS, but an ASCII suspect -> b"\x00". A text
# without b"\x00" in it has none of those bytes, where the two tables agree (0x1C-0x1F are both
# whitespace and suspect: a text holding one is screened, and its run check translates again).
_CLASSES = bytes(0x00 if i in _ASCII_SUSPECT else _MAYBE_WS[i] for i in range(256))


def _may_have_long_run(data: bytes, classes: bytes | None, max_run: int) -> bool:
    """Whether ``data`` may hold a whitespace run over ``max_run``; ``classes``: its `_CLASSES`
    translation when it holds no ASCII suspect (None: translate here)."""
    if len(data) <= max_run:
        return False
    return b" " * (max_run + 1) in (classes if classes is not None else data.translate(_MAYBE_WS))


def _encoded(text: str, stats: Counter) -> tuple[str, bytes]:
    """The text and its UTF-8 bytes; lone surrogates (only reachable through exotic inputs) become
    U+FFFD first, counted as decode replacements."""
    try:
        return text, text.encode("utf-8")
    except UnicodeEncodeError:
        text, n = _SURROGATES.subn("\ufffd", text)
        stats["decode_replacements"] += n
        return text, text.encode("utf-8")


def _utf8_or_none(text: str) -> bytes | None:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return None


def output_name(name: str, taken: Any) -> str:
    """Input columns named like a core column are kept as `orig_<name>` (then `orig_orig_...`)."""
    while name in _CORE or name in taken:
        name = "orig_" + name
    return name


def _reject(raw: RawRecord, reason: str, detail: str) -> Reject:
    if raw.raw is not None:
        ex = excerpt_of(raw.raw)
    else:
        try:
            ex = excerpt_of(json.dumps(raw.fields, ensure_ascii=False, default=repr))
        except (TypeError, ValueError):
            ex = excerpt_of(repr(raw.fields))
    return Reject(raw.file_index, raw.file, raw.pos, raw.line, raw.offset, reason, detail, ex)


def _note_fields(fields: dict, stats: Counter) -> None:
    if stats["empty_missing_field"] <= NOTE_FIELDS_OF:
        for k in list(fields)[:50]:
            stats[FIELD_PREFIX + str(k)] += 1


def _screen(raw: RawRecord, text: str, cfg: NormalizeConfig, stats: Counter) -> str | Reject | None:
    """A text with suspect characters: a `binary` reject when they are more than `binary_fraction` of
    it, or its control characters alone more than `control_fraction` (garbage decoded as text is not a
    document, whether the reader decoded it or a JSON string spelled it out in escapes); else count its
    control characters and strip them if configured (None: nothing but controls was left, dropped as
    empty)."""
    suspect = len(_SUSPECT.findall(text))
    if suspect > cfg.binary_fraction * len(text):
        return _reject(raw, BINARY, f"{suspect} of {len(text)} characters are replacement characters (undecodable "
                                    f"bytes), control characters or NULs; above binary_fraction "
                                    f"{cfg.binary_fraction:g}: not text")
    controls = len(_CONTROL.findall(text))
    if controls > cfg.control_fraction * len(text):
        return _reject(raw, BINARY, f"{controls} of {len(text)} characters are control characters or NULs; above "
                                    f"control_fraction {cfg.control_fraction:g}: not text")
    if not controls:
        return text
    stats["control_chars"] += controls
    stats["nul_chars"] += text.count("\x00")
    if cfg.control_chars != "strip":
        return text
    stats["control_chars_stripped"] += controls
    text = _CONTROL.sub("", text)
    if not text or text.isspace():
        stats["empty_blank"] += 1
        stats["empty_dropped"] += 1
        return None
    return text


def clean_record(raw: RawRecord, spec: SourceSpec, cfg: NormalizeConfig, stats: Counter) -> Item | Reject | None:
    """One raw record -> an `Item`, a `Reject`, or None (dropped as empty, counted in `stats`); ``spec``
    says where the text and id are, ``cfg`` how the text is cleaned. Missing, None, "" and whitespace-only
    texts are *empty* (dropped, counted); a text field of another type (a number, a list) is a *reject*
    (bad data worth a look); bytes are decoded as UTF-8."""
    stats["decode_replacements"] += raw.replacements
    fields = raw.fields
    tf = spec.text_field
    if tf not in fields:
        stats["empty_missing_field"] += 1
        stats["empty_dropped"] += 1
        _note_fields(fields, stats)
        return None
    text = fields[tf]
    if text is None:
        stats["empty_null"] += 1
        stats["empty_dropped"] += 1
        return None
    if type(text) is not str:
        if isinstance(text, (bytes, bytearray, memoryview)):
            text, n = decode_bytes(bytes(text))
            stats["decode_replacements"] += n
        elif isinstance(text, str):
            text = str(text)
        else:
            return _reject(raw, WRONG_TYPE, f"text field {tf!r} is a {type(text).__name__}, expected a string")
    if len(text) > cfg.max_record_chars:
        return _reject(raw, OVERSIZED, f"text of {len(text)} characters exceeds max_record_chars "
                                       f"{cfg.max_record_chars}")
    if not text or text.isspace():
        stats["empty_blank"] += 1
        stats["empty_dropped"] += 1
        return None
    data = _utf8_or_none(text)
    classes = data.translate(_CLASSES) if data is not None else None
    if (_maybe_suspect(data, classes) if data is not None else _SUSPECT.search(text) is not None):
        screened = _screen(raw, text, cfg, stats)
        if type(screened) is Reject or screened is None:
            return screened
        if screened is not text:
            text, data = screened, None
        classes = None  # it may hold ASCII suspects, where the classes say nothing of whitespace
    if data is None:
        text, data = _encoded(text, stats)
    if _may_have_long_run(data, classes, cfg.max_whitespace_run):
        text, runs = compact_whitespace(text, cfg.max_whitespace_run)
        if runs:
            stats["whitespace_compacted"] += 1
            stats["whitespace_runs_capped"] += runs
            data = text.encode("utf-8")
    doc_id = content_id_utf8(data)

    source_id = raw.source_id
    idf = spec.id_field
    if idf is not None:
        value = fields.get(idf)
        if value is None or type(value) is str:
            source_id = value
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            source_id = str(value)
        else:
            return _reject(raw, WRONG_TYPE, f"id field {idf!r} is a {type(value).__name__}, expected a string "
                                            "or a number")
    url = raw.url
    url_value = fields.get("url") if "url" not in (tf, idf) else None
    url_is_core = url_value is None or type(url_value) is str
    if url is None and url_is_core:
        url = url_value

    row = {"id": doc_id, "text": text, "source": spec.name, "source_id": source_id, "url": url}
    if not spec.bare:
        for k, v in fields.items():
            if k == tf or k == idf or (k == "url" and url_is_core):
                continue
            row[output_name(k, row) if k in row else k] = v
    return (doc_id, raw.file_index, raw.pos, row)


__all__ = ["Item", "clean_record", "compact_whitespace", "output_name"]
