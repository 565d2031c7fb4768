"""WARC (and HTML) reading for the normalize stage: `datakit.sources.readers.read_warc`'s records,
rejects and counters, byte for byte, at less cost, with text extraction bounded per page.

Where the reader's time went (benchmarks/normalize.py's 5,000 pydoc pages, one core, 3.6 s): Resiliparse
parse + extract ~55%, the main-content depth guard ~35% (a Python walk over every node of the 1% of
pages with more than 5,000 tags, each node a weak-cached wrapper object), gzip inflate ~5%. Here:

* the depth guard is one CSS query run by Lexbor in C (`*>*>...>*`, 1,000 compounds: it matches an
  element with 999 element ancestors, i.e. depth > MAX_MAIN_CONTENT_DEPTH counting the document as 1);
  same decision as the walk (tests compare them), 50-300x cheaper;
* the compressed stream is inflated from 64 KiB reads instead of 1 MiB ones (same bytes, same break
  offsets): with a gzip member per record, as in Common Crawl, each member's end copies the rest of
  the input buffer into `unused_data` (inflate -25%);
* extraction is bounded per page. Resiliparse's extractor is native code that never returns to the
  interpreter, so neither SIGALRM nor Resiliparse's own `time_guard` can stop it mid-page (measured: a
  1 MB page of 100 sibling 990-deep <div> chains takes ~2 s in main-content mode and runs to the end
  under both). Its cost grows with tags times DOM depth, and depth is capped (deeper pages with more
  than 5,000 tags are extracted in full-text mode), so pages of at most GUARD_TAGS tags and GUARD_CHARS
  characters cannot be slow (worst cases measured: ~0.25 s): they are extracted inline, the fast path.
  Bigger ones are extracted in a forked child (it inherits the parsed tree: nothing is serialized but
  the text coming back) that is killed after EXTRACT_TIMEOUT_S; the page becomes an `extract_timeout`
  reject with its file and record offset, and the worker goes on. A child that dies (out of memory, a
  crash in native code) is an `html_parse_error` reject. The fork costs a few milliseconds, paid only
  by big pages (about 1% of the benchmark's), whose extraction takes tens of milliseconds anyway.
  Where fork is unavailable every page is extracted inline.
"""

from __future__ import annotations

import os
import select
import signal
import time
import zlib
from collections import Counter
from typing import Iterator

from datakit.sources import readers as _readers
from datakit.sources.readers import (
    DEPTH_CHECK_TAGS, HTML_CONTENT_TYPES, HTML_PARSE, MAX_MAIN_CONTENT_DEPTH, OVERSIZED, TRUNCATED,
    UNSUPPORTED_ENCODING, WARC_PARSE, FileRef, HtmlText, RawRecord, ReaderOptions, Reject, _ChunkStream, _decode_http_body,
    _read_whole, decode_html, excerpt_of, iter_decompressed, open_ref,
)

EXTRACT_TIMEOUT = "extract_timeout"
# Pages above either size are extracted in a forked, time-limited child; below both, inline.
GUARD_TAGS = 20_000
GUARD_CHARS = 2_000_000
EXTRACT_TIMEOUT_S = 60.0
INFLATE_CHUNK = 1 << 16

_DEEP_SELECTOR = ">".join(["*"] * (MAX_MAIN_CONTENT_DEPTH))


class ExtractTimeout(Exception):
    pass


class ExtractDied(Exception):
    pass


def deeper_than_limit(tree) -> bool:
    """Whether the DOM is deeper than MAX_MAIN_CONTENT_DEPTH (readers._deeper_than(document, limit))."""
    return tree.document is not None and tree.document.query_selector(_DEEP_SELECTOR) is not None


def _extract_inline(tree, main_content: bool) -> str:
    from resiliparse.extract.html2text import extract_plain_text

    return extract_plain_text(tree, preserve_formatting=True, main_content=main_content)


def _extract_forked(tree, main_content: bool, timeout: float) -> str:
    """extract_plain_text in a forked child that inherits `tree`; killed after `timeout` seconds."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: extract, write status byte + UTF-8 text, leave without cleanup
        code = 0
        try:
            os.close(r)
            try:
                data = b"\x00" + _extract_inline(tree, main_content).encode("utf-8", "surrogatepass")
            except BaseException as e:  # noqa: BLE001 - reported to the parent as a parse error
                data = b"\x01" + str(e).encode("utf-8", "replace")
            view = memoryview(data)
            while view:
                view = view[os.write(w, view):]
        except BaseException:  # noqa: BLE001
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    done = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ExtractTimeout(f"text extraction took longer than {timeout:g} s; the extractor was stopped")
            if not select.select([r], [], [], left)[0]:
                continue
            b = os.read(r, 1 << 20)
            if not b:
                done = True
                break
            chunks.append(b)
    finally:  # timed out, or interrupted: the child must not outlive this call
        os.close(r)
        if not done:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _, status = os.waitpid(pid, 0)
    data = b"".join(chunks)
    if not data:
        how = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
               else f"exit status {os.WEXITSTATUS(status)}")
        raise ExtractDied(f"the extractor process died ({how}), e.g. out of memory")
    if data[:1] == b"\x01":
        raise ValueError(data[1:].decode("utf-8", "replace"))
    return data[1:].decode("utf-8", "surrogatepass")


def extract_text(tree, html: str, main_content: bool, n_tags: int) -> str:
    if (n_tags > GUARD_TAGS or len(html) > GUARD_CHARS) and hasattr(os, "fork"):
        return _extract_forked(tree, main_content, EXTRACT_TIMEOUT_S)
    return _extract_inline(tree, main_content)


def html_to_text(data: bytes | str, *, charset: str | None = None, main_content: bool = True,
                 base_url: str | None = None) -> HtmlText:
    """readers.html_to_text, with the C depth guard and bounded extraction. Raises ExtractTimeout,
    ExtractDied, or what Resiliparse raises on a page it cannot parse."""
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


def read_html(ref: FileRef, opts: ReaderOptions = ReaderOptions(),
              stats: Counter | None = None) -> Iterator[RawRecord | Reject]:
    """readers.read_html with bounded extraction."""
    from resiliparse.parse.html import HTMLParserException

    data = _read_whole(ref, opts)
    if isinstance(data, Reject):
        yield data
        return
    try:
        doc = html_to_text(data, main_content=opts.html_main_content)
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


def read_warc(ref: FileRef, opts: ReaderOptions = ReaderOptions(),
              stats: Counter | None = None) -> Iterator[RawRecord | Reject]:
    """readers.read_warc (same records, rejects, counters), faster and with bounded extraction."""
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    stats = stats if stats is not None else Counter()
    with open_ref(ref) as f:
        stream = _ChunkStream(iter_decompressed(f, INFLATE_CHUNK))
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
            out = _warc_record(rec, ref, opts, stats, stream)
            if out is None:
                continue
            if type(out) is Reject and out.reason == TRUNCATED:
                reported_break = True
            yield out
        if stream.broken is not None and not reported_break:
            b = stream.broken
            yield Reject(ref.index, ref.rel, b.decompressed_offset, None, b.decompressed_offset, b.reason,
                         b.detail + "; records before it were kept", "")


def _warc_record(rec, ref: FileRef, opts: ReaderOptions, stats: Counter,
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
    if payload_len > opts.max_record_bytes:
        return reject(OVERSIZED, f"payload of {payload_len} bytes exceeds the record cap of "
                                 f"{opts.max_record_bytes} bytes", uri or "")
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
        doc = html_to_text(body, charset=rec.http_charset, main_content=opts.html_main_content, base_url=uri)
    except ExtractTimeout as e:
        return reject(EXTRACT_TIMEOUT, f"({uri}) {e}", excerpt_of(body))
    except (HTMLParserException, ValueError, TypeError, ExtractDied) as e:
        return reject(HTML_PARSE, f"Resiliparse could not parse the page: {e}", excerpt_of(body))
    if doc.deep_fallback:
        stats["html_deep_fallback"] += 1
    return RawRecord({"text": doc.text, "title": doc.title}, ref.index, ref.rel, offset, None, offset, rid, uri,
                     doc.replacements)


def read_file(ref: FileRef, fmt: str, opts: ReaderOptions = ReaderOptions(),
              stats: Counter | None = None) -> Iterator[RawRecord | Reject]:
    """readers.read_file, with this module's WARC and HTML readers."""
    if fmt == "warc":
        return read_warc(ref, opts, stats)
    if fmt == "html":
        return read_html(ref, opts, stats)
    return _readers.read_file(ref, fmt, opts, stats)


__all__ = ["EXTRACT_TIMEOUT", "ExtractTimeout", "deeper_than_limit", "html_to_text", "read_file", "read_html",
           "read_warc"]
