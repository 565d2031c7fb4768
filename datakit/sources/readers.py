"""Lenient, streaming format readers for the normalize stage.

The engine's generic readers (`datakit.shuffle.read_jsonl`, ...) are strict: the first bad line aborts
the task. Normalize must instead keep going, count every bad record and report it as `file:line` plus
a reason, so these readers never raise on bad *data*: every unit they look at comes out either as a
`RawRecord` or as a `Reject`. They raise only on programming errors or unreadable *files* (permission
denied, file vanished), which a retry might fix and which must not be mistaken for bad data.

One file at a time, streaming: memory is bounded by one chunk plus one record (a line longer than the
record cap is skipped without being held in memory). Compression is detected by magic bytes (gzip,
zstd), not by extension, and decompressed here with zlib/zstandard decompress objects rather than
`gzip.GzipFile`/`stream_reader`, because those either stop silently at a truncated end (zstd) or hide
where the stream broke; a truncated or corrupt stream becomes one reject at the offset where it broke,
and every record before it is kept.

Positions: `line` is the 1-based line (jsonl) or row (parquet) number, `offset` the byte offset in the
*decompressed* stream (jsonl line start, WARC record start). `pos` is the ordering position inside the
file (line/row number, or WARC offset) that, with the file's index, makes "first copy" deterministic.
"""

from __future__ import annotations

import codecs
import hashlib
import io
import json
import re
import threading
import zlib
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterator

import pyarrow.parquet as pq
import zstandard

from datakit.core.fsio import open_read
from datakit.core.json_exact import loads as _loads
from datakit.normalize.config import NormalizeConfig
from datakit.sources.extract import (DEPTH_CHECK_TAGS, MAX_MAIN_CONTENT_DEPTH, ExtractDied, ExtractTimeout,
                                     deeper_than_limit, extract_text)

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
CHUNK_BYTES = 1 << 20
# WARC streams are inflated from 64 KiB reads (same bytes, same break offsets): with a gzip member per
# record, as in Common Crawl, each member's end copies the rest of the input buffer into `unused_data`,
# so 1 MiB reads cost a quarter more inflate time.
WARC_INFLATE_BYTES = 1 << 16
EXCERPT_CHARS = 256
HTML_CONTENT_TYPES = frozenset({"text/html", "application/xhtml+xml"})

# Reject reasons: a closed vocabulary, so counters and dashboards stay stable.
MALFORMED_JSON = "malformed_json"
NOT_AN_OBJECT = "not_a_json_object"
WRONG_TYPE = "wrong_type"
OVERSIZED = "oversized"
TRUNCATED = "truncated_file"
CORRUPT = "corrupt_file"
HTML_PARSE = "html_parse_error"
EXTRACT_TIMEOUT = "extract_timeout"
WARC_PARSE = "warc_parse_error"
UNSUPPORTED_ENCODING = "unsupported_content_encoding"
BINARY = "binary"  # mostly replacement characters, control bytes or NULs: not text


@dataclass(frozen=True)
class FileRef:
    """One unit of reading: a file, or for parquet a `[start, end)` range of its row groups.

    `index` is the file's position in the source's sorted file list (the first-copy tie-breaker);
    `rel` is its name relative to the source root, the only name written into outputs, so outputs do
    not change when the data moves.
    """

    index: int
    path: str
    rel: str
    size: int = 0
    row_groups: tuple[int, int] | None = None
    # The plan's promise about the whole file (normalize's planned inputs): its size and sha256. When
    # set, the reader proves that the bytes it read are those bytes (see `open_ref`).
    planned_size: int | None = None
    sha256: str | None = None


# Rows per parquet batch read (memory per task, never the output).
PARQUET_BATCH_ROWS = 1024


@dataclass(slots=True)
class RawRecord:
    fields: dict[str, Any]
    file_index: int
    file: str
    pos: int
    line: int | None = None
    offset: int | None = None
    source_id: str | None = None
    url: str | None = None
    replacements: int = 0
    raw: str | None = None  # the raw unit (a jsonl line), kept only as a reference for reject excerpts


@dataclass(slots=True)
class Reject:
    file_index: int
    file: str
    pos: int
    line: int | None
    offset: int | None
    reason: str
    detail: str
    excerpt: str

    def to_row(self, source: str) -> dict:
        return {"source": source, "file": self.file, "line": self.line, "offset": self.offset,
                "reason": self.reason, "detail": self.detail, "excerpt": self.excerpt}


# ------------------------------------------------------------------------------------------------
# decoding


_tls = threading.local()


def _count_replace(exc: UnicodeError) -> tuple[str, int]:
    _tls.count = getattr(_tls, "count", 0) + 1
    return "\ufffd", exc.end  # type: ignore[attr-defined]


codecs.register_error("datakit-count-replace", _count_replace)


def decode_bytes(data: bytes, encoding: str = "utf-8") -> tuple[str, int]:
    """Decode with U+FFFD replacement; return the text and how many replacements were made.

    Exact count (a counting error handler, not a count of U+FFFD, which may be legitimate content);
    the strict attempt first keeps valid input on CPython's fast path."""
    try:
        return data.decode(encoding), 0
    except UnicodeDecodeError:
        pass
    _tls.count = 0
    text = data.decode(encoding, "datakit-count-replace")
    return text, _tls.count


def excerpt_of(data: bytes | str, n: int = EXCERPT_CHARS) -> str:
    if isinstance(data, (bytes, bytearray, memoryview)):
        data = bytes(data[: n * 4]).decode("utf-8", "replace")
    return data[:n]


# ------------------------------------------------------------------------------------------------
# planned inputs: prove that what was read is what was planned

INPUT_CHANGED = "input_changed"
INPUT_MISSING = "input_missing"


class _CheckedFile:
    """A read-only file that hashes every byte read through it. On close it reads whatever the reader
    left unread (a reader may stop early) and records whether size and sha256 match the plan.

    Why: a file deleted, truncated or rewritten between planning and reading used to vanish from the
    output (or half of it did) with no error at all. A check while reading costs no second read."""

    def __init__(self, ref: FileRef) -> None:
        self.ref, self._f = ref, open_read(ref.path)
        self.size, self._sha = 0, hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self._sha.update(data)
        self.size += len(data)
        return data

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def __enter__(self) -> "_CheckedFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._f is None:
            return
        while self.read(CHUNK_BYTES):
            pass
        self._f.close()
        self._f = None
        digest = self._sha.hexdigest()
        ref = self.ref
        verdict = None
        if ref.planned_size is not None and self.size != ref.planned_size:
            verdict = f"read {self.size} bytes but {ref.planned_size} were planned: the file changed after planning"
        elif ref.sha256 is not None and digest != ref.sha256:
            verdict = (f"content changed after planning (sha256 {digest[:16]}..., planned "
                       f"{ref.sha256[:16]}...)")
        _verdicts()[ref.path] = verdict


def _verdicts() -> dict[str, str | None]:
    if not hasattr(_tls, "verdicts"):
        _tls.verdicts = {}
    return _tls.verdicts


def open_ref(ref: FileRef):
    """Open a file for a reader: hashed against the plan when the ref carries one."""
    if ref.sha256 is None and ref.planned_size is None:
        return open_read(ref.path)
    return _CheckedFile(ref)


def input_verdict(ref: FileRef) -> str | None:
    """After a reader finished a planned file: why its bytes are not the planned ones (None if they are)."""
    return _verdicts().pop(ref.path, None)


def planned_reject(ref: FileRef, reason: str, detail: str) -> Reject:
    """A planned input that is missing or changed, as a reject naming the file (the step then fails)."""
    return Reject(ref.index, ref.rel, -1, None, None, reason, detail, "")


# ------------------------------------------------------------------------------------------------
# decompression


class StreamBroken(Exception):
    """A compressed stream ended early (`truncated_file`) or is corrupt (`corrupt_file`)."""

    def __init__(self, reason: str, detail: str, decompressed_offset: int) -> None:
        super().__init__(detail)
        self.reason, self.detail, self.decompressed_offset = reason, detail, decompressed_offset


def _read_exact_start(f, n: int) -> bytes:
    parts, got = [], 0
    while got < n:
        b = f.read(n - got)
        if not b:
            break
        parts.append(b)
        got += len(b)
    return b"".join(parts)


def _zstd_skippable(buf: bytes) -> bool:
    """Skippable zstd frames (magic 0x184D2A5?) carry metadata, e.g. the seek table of seekable zstd."""
    return len(buf) >= 4 and buf[0] & 0xF0 == 0x50 and buf[1:4] == b"\x2a\x4d\x18"


def compression_of(head: bytes) -> str | None:
    if head[:2] == GZIP_MAGIC:
        return "gzip"
    if head[:4] == ZSTD_MAGIC or _zstd_skippable(head):
        return "zstd"
    return None


def iter_decompressed(f, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """Yield the decompressed content of a binary file object in chunks.

    gzip (multi-member) and zstd (multi-frame) are detected by magic bytes; anything else passes
    through. Raises `StreamBroken` after the last good chunk when the stream is truncated or corrupt.
    """
    head = _read_exact_start(f, max(chunk_bytes, 8))  # enough for any magic number
    kind = compression_of(head)
    if kind is None:
        if head:
            yield head
        while True:
            b = f.read(chunk_bytes)
            if not b:
                return
            yield b
    yield from _inflate(f, head, kind, chunk_bytes)


def _new_decoder(kind: str):
    return zlib.decompressobj(wbits=31) if kind == "gzip" else zstandard.ZstdDecompressor().decompressobj()


def _inflate(f, head: bytes, kind: str, chunk_bytes: int) -> Iterator[bytes]:
    dec = _new_decoder(kind)
    compressed_pos = 0  # compressed bytes handed to finished members + current decoder
    out_pos = 0
    fed = False  # current member/frame has received input
    buf = head
    label = "gzip" if kind == "gzip" else "zstd"
    skip = 0  # bytes left of a skippable zstd frame
    while True:
        if not buf:
            buf = f.read(chunk_bytes)
            if not buf:
                break
        if skip:
            n = min(skip, len(buf))
            buf, skip, compressed_pos = buf[n:], skip - n, compressed_pos + n
            continue
        if not fed:
            # between members: skip zero padding; anything else must start a new member
            stripped = buf.lstrip(b"\x00")
            compressed_pos += len(buf) - len(stripped)
            buf = stripped
            if not buf:
                continue
            if kind == "zstd" and (_zstd_skippable(buf) or (len(buf) < 8 and buf[:1] in b"PQRSTUVWXYZ[\\]^_")):
                while len(buf) < 8:
                    more = f.read(chunk_bytes)
                    if not more:
                        break
                    buf += more
                if _zstd_skippable(buf) and len(buf) >= 8:
                    skip = 8 + int.from_bytes(buf[4:8], "little")
                    continue
            magic = GZIP_MAGIC if kind == "gzip" else ZSTD_MAGIC
            if not buf.startswith(magic[: len(buf)]):
                raise StreamBroken(
                    CORRUPT, f"{label}: garbage after the end of the compressed stream at compressed byte "
                    f"{compressed_pos}", out_pos)
        try:
            if kind == "gzip":
                out = dec.decompress(buf, chunk_bytes)
                while not dec.eof and (dec.unconsumed_tail or len(out) == chunk_bytes):
                    if out:
                        out_pos += len(out)
                        yield out
                    out = dec.decompress(dec.unconsumed_tail, chunk_bytes)
                    if not out and not dec.unconsumed_tail:
                        break
            else:
                out = dec.decompress(buf)
        except (zlib.error, zstandard.ZstdError) as e:
            raise StreamBroken(CORRUPT, f"{label}: corrupt data near compressed byte {compressed_pos}: {e}",
                               out_pos) from None
        fed = True
        if out:
            out_pos += len(out)
            yield out
        if dec.eof:
            rest = dec.unused_data
            compressed_pos += len(buf) - len(rest)
            buf = rest
            dec = _new_decoder(kind)
            fed = False
        else:
            compressed_pos += len(buf)
            buf = b""
    if fed or skip:
        raise StreamBroken(
            TRUNCATED, f"{label} stream truncated: input ended at compressed byte {compressed_pos} "
            f"(decompressed byte {out_pos}) before the end-of-stream marker", out_pos)


class _ChunkStream(io.RawIOBase):
    """A read-only file object over `iter_decompressed`, for FastWARC; records a break instead of
    raising, so the WARC reader can tell which record the break cut."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._buf = b""
        self._pos = 0
        self.delivered = 0
        self.broken: StreamBroken | None = None
        self.eof = False

    def readable(self) -> bool:
        return True

    def tell(self) -> int:  # FastWARC asks where the stream starts
        return self.delivered

    def _fill(self, want: int) -> None:
        while not self.eof and len(self._buf) - self._pos < want:
            try:
                chunk = next(self._chunks)
            except StopIteration:
                self.eof = True
                break
            except StreamBroken as e:
                self.broken = e
                self.eof = True
                break
            self._buf = self._buf[self._pos :] + chunk
            self._pos = 0

    def read(self, size: int = -1) -> bytes:
        want = size if size is not None and size >= 0 else 1 << 62
        self._fill(want if want < 1 << 62 else 1 << 40)
        end = min(len(self._buf), self._pos + want)
        out = self._buf[self._pos : end]
        self._pos = end
        self.delivered += len(out)
        return out

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


# ------------------------------------------------------------------------------------------------
# jsonl


def read_jsonl(ref: FileRef, cfg: NormalizeConfig = NormalizeConfig(),
               stats: Counter | None = None) -> Iterator[RawRecord | Reject]:
    """One record per non-blank line; the line must be a JSON object.

    Blank lines are not records (counted as `blank_lines`). A line longer than
    `cfg.max_record_bytes` is skipped without being buffered and rejected as oversized.
    """
    stats = stats if stats is not None else Counter()
    cap = cfg.max_record_bytes
    line_no = 0
    offset = 0  # decompressed offset of the current line's start
    parts: list[bytes] = []  # pieces of the current, incomplete line
    held = 0
    skipping: bytes | None = None  # excerpt of an oversized line being skipped
    with open_ref(ref) as f:
        try:
            for chunk in iter_decompressed(f):
                start = 0
                while True:
                    nl = chunk.find(b"\n", start)
                    if nl < 0:
                        piece = chunk[start:]
                        held += len(piece)
                        if skipping is None:
                            if held > cap:
                                skipping = (b"".join(parts) + piece)[: EXCERPT_CHARS * 4]
                                parts = []
                            elif piece:
                                parts.append(piece)
                        break
                    piece = chunk[start:nl]
                    held += len(piece)
                    line_no += 1
                    if skipping is not None or held > cap:
                        head = skipping if skipping is not None else (b"".join(parts) + piece)[: EXCERPT_CHARS * 4]
                        yield _oversized_line(ref, line_no, offset, held, cap, head)
                    else:
                        rec = _jsonl_line(b"".join(parts) + piece if parts else piece, ref, line_no, offset, stats)
                        if rec is not None:
                            yield rec
                    parts, skipping = [], None
                    offset += held + 1
                    held = 0
                    start = nl + 1
        except StreamBroken as e:
            head = skipping if skipping is not None else b"".join(parts)
            yield Reject(ref.index, ref.rel, line_no + 1, line_no + 1, offset, e.reason,
                         f"{e.detail}; the incomplete line {line_no + 1} was dropped, the {line_no} lines before "
                         "it were kept", excerpt_of(head))
            return
    if skipping is not None:
        yield _oversized_line(ref, line_no + 1, offset, held, cap, skipping)
    elif parts:
        rec = _jsonl_line(b"".join(parts), ref, line_no + 1, offset, stats)
        if rec is not None:
            yield rec


def _oversized_line(ref: FileRef, line_no: int, offset: int, size: int, cap: int, head: bytes) -> Reject:
    return Reject(ref.index, ref.rel, line_no, line_no, offset, OVERSIZED,
                  f"line of {size} bytes exceeds the record cap of {cap} bytes", excerpt_of(head))


def _jsonl_line(raw: bytes, ref: FileRef, line_no: int, offset: int, stats: Counter) -> RawRecord | Reject | None:
    if raw[:1] != b"{" and not raw.strip():
        stats["blank_lines"] += 1
        return None
    text, replaced = decode_bytes(raw)
    if line_no == 1 and text.startswith("\ufeff"):
        text = text[1:]
    try:
        obj = _loads(text)
    except json.JSONDecodeError as e:
        return Reject(ref.index, ref.rel, line_no, line_no, offset, MALFORMED_JSON,
                      f"{e.msg} at column {e.colno}", excerpt_of(text))
    except RecursionError:
        return Reject(ref.index, ref.rel, line_no, line_no, offset, MALFORMED_JSON,
                      "JSON nested too deeply", excerpt_of(text))
    if type(obj) is not dict:
        return Reject(ref.index, ref.rel, line_no, line_no, offset, NOT_AN_OBJECT,
                      f"line is a JSON {type(obj).__name__}, expected an object", excerpt_of(text))
    return RawRecord(obj, ref.index, ref.rel, line_no, line_no, offset, f"{ref.rel}:{line_no}", None, replaced, text)


_SURROGATE = re.compile("[\ud800-\udfff]")


def fix_surrogates(value: Any) -> tuple[Any, int]:
    """JSON may escape lone surrogates (\\ud800), which cannot be encoded as UTF-8: replace them with
    U+FFFD, in strings nested anywhere. Readers leave them in place (checking every line would cost more
    than the rare fix); the stages that encode text call this when encoding fails."""
    if isinstance(value, str):
        fixed, n = _SURROGATE.subn("\ufffd", value)
        return fixed, n
    if isinstance(value, dict):
        total, out = 0, {}
        for k, v in value.items():
            k2, n1 = fix_surrogates(k)
            v2, n2 = fix_surrogates(v)
            out[k2] = v2
            total += n1 + n2
        return out, total
    if isinstance(value, list):
        total, items = 0, []
        for v in value:
            v2, n = fix_surrogates(v)
            items.append(v2)
            total += n
        return items, total
    return value, 0


# ------------------------------------------------------------------------------------------------
# parquet


def read_parquet(ref: FileRef, cfg: NormalizeConfig = NormalizeConfig(),
                 stats: Counter | None = None, columns: tuple[str, ...] | None = None
                 ) -> Iterator[RawRecord | Reject]:
    """Rows of one file, or of the row-group range `ref.row_groups`, reading only ``columns`` (None: all).

    Row numbers are file-global (1-based), whatever range this ref covers."""
    with open_read(ref.path) as f:
        try:
            pf = pq.ParquetFile(f)
        except Exception as e:  # not parquet, or a truncated footer
            yield Reject(ref.index, ref.rel, 0, None, None, CORRUPT, f"cannot open as parquet: {e}", "")
            return
        meta = pf.metadata
        start, end = ref.row_groups if ref.row_groups else (0, meta.num_row_groups)
        row = sum(meta.row_group(i).num_rows for i in range(start))
        names = set(pf.schema_arrow.names)
        cols = [c for c in columns if c in names] if columns is not None else None
        if start >= end:
            return
        try:
            for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS, row_groups=list(range(start, end)),
                                         columns=cols, use_threads=False):
                for rec in batch.to_pylist():
                    row += 1
                    yield RawRecord(rec, ref.index, ref.rel, row, row, None, f"{ref.rel}:{row}")
        except Exception as e:  # a corrupt page: keep what came before, reject the rest of the range
            yield Reject(ref.index, ref.rel, row + 1, row + 1, None, CORRUPT,
                         f"parquet read failed after row {row} (row groups {start}..{end - 1}): {e}", "")


# ------------------------------------------------------------------------------------------------
# one document per file: text and html


def _read_whole(ref: FileRef, cfg: NormalizeConfig) -> bytes | Reject:
    cap = cfg.max_record_bytes
    if ref.size > cap:
        with open_ref(ref) as f:
            head = f.read(EXCERPT_CHARS * 4)
        return Reject(ref.index, ref.rel, 0, None, None, OVERSIZED,
                      f"file of {ref.size} bytes exceeds the record cap of {cap} bytes",
                      excerpt_of(head) if compression_of(head) is None else "")
    parts, total = [], 0
    with open_ref(ref) as f:
        try:
            for chunk in iter_decompressed(f):
                parts.append(chunk)
                total += len(chunk)
                if total > cap:
                    return Reject(ref.index, ref.rel, 0, None, None, OVERSIZED,
                                  f"file decompresses to more than the record cap of {cap} bytes",
                                  excerpt_of(parts[0]))
        except StreamBroken as e:
            return Reject(ref.index, ref.rel, 0, None, e.decompressed_offset, e.reason,
                          e.detail + "; a one-document file is all or nothing, so the document was dropped",
                          excerpt_of(b"".join(parts)))
    return b"".join(parts)


def read_text(ref: FileRef, cfg: NormalizeConfig = NormalizeConfig(),
              stats: Counter | None = None) -> Iterator[RawRecord | Reject]:
    """The whole file is one document (e.g. a source file); its source id is its relative path."""
    data = _read_whole(ref, cfg)
    if isinstance(data, Reject):
        yield data
        return
    text, replaced = decode_bytes(data)
    if text.startswith("\ufeff"):
        text = text[1:]
    yield RawRecord({"text": text}, ref.index, ref.rel, 0, None, None, ref.rel, None, replaced)


@dataclass(frozen=True)
class HtmlText:
    text: str
    title: str | None
    url: str | None
    replacements: int
    encoding: str
    deep_fallback: bool = False  # main-content mode skipped: the DOM is pathologically deep


_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_:.\-]+)""", re.I)


def _charset_name(name: str | None) -> str | None:
    if not name:
        return None
    from resiliparse.parse.encoding import map_encoding_to_html5

    try:
        mapped = map_encoding_to_html5(name.strip().lower())
        codecs.lookup(mapped)
        return mapped
    except (LookupError, TypeError, ValueError):
        return None


def decode_html(data: bytes, charset: str | None = None) -> tuple[str, int, str]:
    """Bytes of a page to text: declared charset (HTTP header, BOM, <meta>), else UTF-8 if it decodes
    cleanly, else Resiliparse's detector. Returns (text, replacements, encoding used)."""
    if data.startswith(codecs.BOM_UTF8):
        text, n = decode_bytes(data[3:], "utf-8")
        return text, n, "utf-8"
    enc = _charset_name(charset)
    if enc is None:
        m = _META_CHARSET.search(data[:4096])
        enc = _charset_name(m.group(1).decode("ascii", "replace")) if m else None
    if enc is None:
        try:
            return data.decode("utf-8"), 0, "utf-8"
        except UnicodeDecodeError:
            from resiliparse.parse.encoding import detect_encoding

            enc = _charset_name(detect_encoding(data)) or "utf-8"
    text, n = decode_bytes(data, enc)
    return text, n, enc


def html_to_text(data: bytes | str, *, charset: str | None = None, main_content: bool = True,
                 base_url: str | None = None) -> HtmlText:
    """Main (or all visible) text of a page with Resiliparse, plus its <title> and canonical URL.

    Raises `resiliparse.parse.html.HTMLParserException` when the page cannot be parsed, and
    `ExtractTimeout` / `ExtractDied` when a big page's bounded extraction fails (datakit.sources.extract)."""
    from resiliparse.parse.html import HTMLTree

    if isinstance(data, str):
        html, replaced, enc = data, 0, "utf-8"
    else:
        html, replaced, enc = decode_html(data, charset)
    tree = HTMLTree.parse(html)
    n_tags = html.count("<")
    deep = main_content and n_tags > DEPTH_CHECK_TAGS and deeper_than_limit(tree)
    text = extract_text(tree, html, main_content and not deep, n_tags)
    title = (tree.title or "").strip() or None
    url = base_url
    if url is None and tree.head is not None:
        link = tree.head.query_selector('link[rel="canonical"]')
        href = link.getattr("href") if link is not None else None
        if href is None:
            meta = tree.head.query_selector('meta[property="og:url"]')
            href = meta.getattr("content") if meta is not None else None
        url = href.strip() or None if href else None
    return HtmlText(text, title, url, replaced, enc, deep)


def read_html(ref: FileRef, cfg: NormalizeConfig = NormalizeConfig(),
              stats: Counter | None = None) -> Iterator[RawRecord | Reject]:
    """One page per file; text via Resiliparse, `title` kept, URL from <link rel=canonical>/og:url."""
    from resiliparse.parse.html import HTMLParserException

    data = _read_whole(ref, cfg)
    if isinstance(data, Reject):
        yield data
        return
    try:
        doc = html_to_text(data, main_content=cfg.html_main_content)
    except ExtractTimeout as e:
        yield Reject(ref.index, ref.rel, 0, None, None, EXTRACT_TIMEOUT, str(e), excerpt_of(data))
        return
    except (HTMLParserException, ValueError, TypeError, ExtractDied) as e:
        yield Reject(ref.index, ref.rel, 0, None, None, HTML_PARSE, f"Resiliparse could not parse the page: {e}",
                     excerpt_of(data))
        return
    if doc.deep_fallback and stats is not None:
        stats["html_deep_fallback"] += 1
    yield RawRecord({"text": doc.text, "title": doc.title}, ref.index, ref.rel, 0, None, None, ref.rel, doc.url,
                    doc.replacements)


# ------------------------------------------------------------------------------------------------
# warc


def _dechunk(body: bytes) -> bytes:
    """Undo HTTP chunked transfer encoding (as stored by crawlers that keep the raw stream)."""
    out, pos = [], 0
    while True:
        eol = body.find(b"\r\n", pos)
        if eol < 0:
            raise ValueError("chunked body: missing chunk size line")
        size = int(body[pos:eol].split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            return b"".join(out)
        start = eol + 2
        if start + size > len(body):
            raise ValueError("chunked body: chunk runs past the end of the payload")
        out.append(body[start : start + size])
        pos = start + size + 2


def _decode_http_body(body: bytes, headers) -> bytes:
    te = (headers.get("Transfer-Encoding") or "").lower() if headers is not None else ""
    if "chunked" in te:
        body = _dechunk(body)
    ce = (headers.get("Content-Encoding") or "").strip().lower() if headers is not None else ""
    if ce in ("", "identity", "none"):
        return body
    if ce in ("gzip", "x-gzip"):
        return zlib.decompress(body, wbits=47)
    if ce == "deflate":
        try:
            return zlib.decompress(body)
        except zlib.error:
            return zlib.decompress(body, wbits=-15)
    raise LookupError(f"Content-Encoding {ce!r} is not supported")


def read_warc(ref: FileRef, cfg: NormalizeConfig = NormalizeConfig(),
              stats: Counter | None = None) -> Iterator[RawRecord | Reject]:
    """HTML response records of a .warc/.warc.gz/.warc.zst (FastWARC), text via Resiliparse.

    Keeps WARC-Target-URI as `url` and WARC-Record-ID as the source id. Non-HTML responses are not
    documents (counted as `warc_non_html_skipped`). A record cut by a truncated file is rejected and
    everything before it kept; offsets are record starts in the decompressed WARC stream.
    """
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    stats = stats if stats is not None else Counter()
    with open_ref(ref) as f:
        stream = _ChunkStream(iter_decompressed(f, WARC_INFLATE_BYTES))
        records = iter(ArchiveIterator(stream, record_types=WarcRecordType.response, parse_http=False))
        reported_break = False
        while True:
            try:
                rec = next(records)
            except StopIteration:
                break
            except Exception as e:  # FastWARC gave up on the stream: keep what came before
                if stream.broken is None:
                    yield Reject(ref.index, ref.rel, stream.delivered, None, None, WARC_PARSE,
                                 f"WARC parsing stopped near decompressed byte {stream.delivered}: "
                                 f"{type(e).__name__}: {e}", "")
                    return
                break
            out = _warc_record(rec, ref, cfg, stats, stream)
            if out is None:
                continue
            if type(out) is Reject and out.reason == TRUNCATED:
                reported_break = True
            yield out
        if stream.broken is not None and not reported_break:
            b = stream.broken
            yield Reject(ref.index, ref.rel, b.decompressed_offset, None, b.decompressed_offset, b.reason,
                         b.detail + "; records before it were kept", "")


def _warc_record(rec, ref: FileRef, cfg: NormalizeConfig, stats: Counter,
                 stream: _ChunkStream) -> RawRecord | Reject | None:
    from resiliparse.parse.html import HTMLParserException

    offset = rec.stream_pos
    rid = rec.record_id
    uri = rec.headers.get("WARC-Target-URI")

    def reject(reason: str, detail: str, excerpt: str = "") -> Reject:
        return Reject(ref.index, ref.rel, offset, None, offset, reason, f"record {rid}: {detail}", excerpt)

    try:
        rec.parse_http()
    except Exception as e:  # FastWARC raises OSError/ValueError on bad or cut HTTP headers
        if stream.broken is not None:
            return reject(TRUNCATED, f"cut inside its HTTP headers; {stream.broken.detail}", uri or "")
        return reject(WARC_PARSE, f"bad HTTP headers: {e}", uri or "")
    if (rec.http_content_type or "").lower() not in HTML_CONTENT_TYPES:
        stats["warc_non_html_skipped"] += 1
        return None
    payload_len = rec.content_length
    if payload_len > cfg.max_record_bytes:
        return reject(OVERSIZED, f"payload of {payload_len} bytes exceeds the record cap of "
                                 f"{cfg.max_record_bytes} bytes", uri or "")
    body = rec.reader.read()
    if len(body) < payload_len:
        detail = f"({uri}) is cut short: {len(body)} of {payload_len} payload bytes"
        if stream.broken is not None:
            detail += f"; {stream.broken.detail}"
        return reject(TRUNCATED, detail, excerpt_of(body))
    try:
        body = _decode_http_body(body, rec.http_headers)
    except LookupError as e:
        return reject(UNSUPPORTED_ENCODING, str(e), uri or "")
    except (ValueError, zlib.error) as e:
        return reject(WARC_PARSE, f"cannot decode the HTTP body: {e}", excerpt_of(body))
    try:
        doc = html_to_text(body, charset=rec.http_charset, main_content=cfg.html_main_content, base_url=uri)
    except ExtractTimeout as e:
        return reject(EXTRACT_TIMEOUT, f"({uri}) {e}", excerpt_of(body))
    except (HTMLParserException, ValueError, TypeError, ExtractDied) as e:
        return reject(HTML_PARSE, f"Resiliparse could not parse the page: {e}", excerpt_of(body))
    if doc.deep_fallback:
        stats["html_deep_fallback"] += 1
    return RawRecord({"text": doc.text, "title": doc.title}, ref.index, ref.rel, offset, None, offset, rid, uri,
                     doc.replacements)


READERS = {"jsonl": read_jsonl, "parquet": read_parquet, "text": read_text, "html": read_html, "warc": read_warc}
FORMATS = tuple(READERS)


def read_file(ref: FileRef, fmt: str, cfg: NormalizeConfig = NormalizeConfig(),
              stats: Counter | None = None, columns: tuple[str, ...] | None = None) -> Iterator[RawRecord | Reject]:
    """The records of one read unit; ``cfg`` is the normalize section (raw size cap, HTML main content),
    ``columns`` a parquet projection."""
    try:
        reader = READERS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}: expected one of {', '.join(FORMATS)}") from None
    if fmt == "parquet":
        return read_parquet(ref, cfg, stats, columns)
    return reader(ref, cfg, stats)


__all__ = [
    "FORMATS", "FileRef", "RawRecord", "Reject", "HtmlText", "StreamBroken", "decode_bytes",
    "decode_html", "html_to_text", "iter_decompressed", "read_file", "read_jsonl", "read_parquet", "read_text",
    "read_html", "read_warc", "fix_surrogates", "READERS", "open_ref", "input_verdict",
    "planned_reject", "INPUT_CHANGED", "INPUT_MISSING", "BINARY", "EXTRACT_TIMEOUT", "MAX_MAIN_CONTENT_DEPTH",
]
