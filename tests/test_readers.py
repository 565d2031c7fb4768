"""Tests for datakit.sources.readers: lenient streaming readers with provenance.

Fixtures are generated here: jsonl (plain, .gz, .zst, multi-member, truncated), parquet with several row
groups, text from Python's own stdlib sources, HTML pages written by the test (plus /usr/share/doc HTML
when the machine has some), and WARC files both hand-written (gzip per record) and written by FastWARC.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import sysconfig
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from datakit.core.listing import is_hidden
from datakit.normalize.config import NormalizeConfig
from datakit.sources.readers import (
    CORRUPT, MALFORMED_JSON, NOT_AN_OBJECT, OVERSIZED, TRUNCATED, FileRef, RawRecord, Reject,
    StreamBroken, decode_bytes, decode_html, html_to_text, iter_decompressed, read_file, read_html,
    read_jsonl, read_parquet, read_text, read_warc,
)


def ref(path: Path, index: int = 0, rel: str | None = None, row_groups=None) -> FileRef:
    return FileRef(index, str(path), rel or path.name, path.stat().st_size, row_groups)


def split(out):
    recs = [o for o in out if isinstance(o, RawRecord)]
    rejs = [o for o in out if isinstance(o, Reject)]
    assert len(recs) + len(rejs) == len(out)
    return recs, rejs


def jsonl_bytes(n: int, start: int = 0) -> bytes:
    return b"".join(json.dumps({"text": f"document {i} " + "lorem ipsum " * (i % 7), "n": i}).encode() + b"\n"
                    for i in range(start, start + n))


# ------------------------------------------------------------------------------------------------ decoding


def test_decode_bytes_counts_exact_replacements():
    assert decode_bytes(b"plain") == ("plain", 0)
    # two invalid sequences -> two replacements; a *legitimate* U+FFFD in the input is not counted
    text, n = decode_bytes(b"a\xffb\xc3(c" + "\ufffd".encode())
    assert n == 2
    assert text == "a\ufffdb\ufffd(c\ufffd"
    text, n = decode_bytes("caf\xe9".encode("cp1252"), "cp1252")
    assert (text, n) == ("caf\xe9", 0)


def test_decode_html_charset_priority():
    page = '<html><head><meta charset="windows-1252"></head><body>na\xefve</body></html>'.encode("cp1252")
    text, n, enc = decode_html(page)
    assert "na\xefve" in text and n == 0 and enc == "cp1252"
    # the HTTP header wins over everything else
    text, n, enc = decode_html("\u017elu\u0165".encode("iso-8859-2"), charset="iso-8859-2")
    assert text == "\u017elu\u0165" and n == 0
    # no declaration, not UTF-8: detected, not replaced
    text, n, enc = decode_html(("<p>" + "d\xe9j\xe0 vu, tr\xe8s bien. " * 20 + "</p>").encode("cp1252"))
    assert "d\xe9j\xe0" in text and n == 0
    text, n, enc = decode_html(codecs_bom() + "<p>x\u00e9</p>".encode())
    assert text == "<p>x\u00e9</p>"


def codecs_bom() -> bytes:
    import codecs

    return codecs.BOM_UTF8


# ------------------------------------------------------------------------------------------------ decompression


def _chunks(data: bytes, chunk: int = 1 << 16) -> bytes:
    return b"".join(iter_decompressed(io.BytesIO(data), chunk))


@pytest.mark.parametrize("chunk", [1, 7, 1 << 16])
def test_iter_decompressed_round_trips_plain_gzip_zstd_multimember(chunk):
    data = jsonl_bytes(3000 if chunk > 1 else 200)
    assert _chunks(data, chunk) == data
    assert _chunks(gzip.compress(data), chunk) == data
    assert _chunks(zstandard.ZstdCompressor().compress(data), chunk) == data
    multi_gz = gzip.compress(data[:1000]) + gzip.compress(data[1000:]) + b"\x00" * 64  # padding tolerated
    assert _chunks(multi_gz, chunk) == data
    multi_zst = b"".join(zstandard.ZstdCompressor().compress(data[i : i + 7000]) for i in range(0, len(data), 7000))
    assert _chunks(multi_zst, chunk) == data
    # skippable frames (seekable zstd's seek table, metadata) are skipped, at the start, between, at the end
    skippable = b"\x5e\x2a\x4d\x18" + (12).to_bytes(4, "little") + b"seek-table.."
    assert _chunks(skippable + multi_zst + skippable + skippable, chunk) == data
    with pytest.raises(StreamBroken, match="truncated"):
        _chunks(zstandard.ZstdCompressor().compress(data) + skippable[:10], chunk)
    assert _chunks(b"", chunk) == b""


@pytest.mark.parametrize("kind", ["gzip", "zstd"])
def test_iter_decompressed_truncated_stream_breaks_after_good_data(kind):
    data = jsonl_bytes(20000)
    comp = gzip.compress(data) if kind == "gzip" else zstandard.ZstdCompressor().compress(data)
    cut = comp[: len(comp) // 2]
    got = []
    with pytest.raises(StreamBroken) as info:
        for c in iter_decompressed(io.BytesIO(cut), 1 << 15):
            got.append(c)
    out = b"".join(got)
    assert info.value.reason == TRUNCATED
    assert info.value.decompressed_offset == len(out)
    assert 0 < len(out) < len(data) and data.startswith(out)


def test_iter_decompressed_corrupt_and_garbage():
    data = jsonl_bytes(2000)
    comp = bytearray(gzip.compress(data))
    comp[len(comp) // 2 : len(comp) // 2 + 40] = b"\xff" * 40
    with pytest.raises(StreamBroken) as info:
        b"".join(iter_decompressed(io.BytesIO(bytes(comp))))
    assert info.value.reason == CORRUPT
    with pytest.raises(StreamBroken) as info:
        b"".join(iter_decompressed(io.BytesIO(gzip.compress(data) + b"not gzip at all")))
    assert info.value.reason == CORRUPT and "garbage" in info.value.detail


# ------------------------------------------------------------------------------------------------ jsonl


@pytest.mark.parametrize("suffix", ["", ".gz", ".zst"])
def test_read_jsonl_round_trip_with_provenance(tmp_path, suffix):
    data = jsonl_bytes(500)
    path = tmp_path / f"part.jsonl{suffix}"
    comp = {"": lambda d: d, ".gz": gzip.compress, ".zst": zstandard.ZstdCompressor().compress}[suffix]
    path.write_bytes(comp(data))
    recs, rejs = split(list(read_jsonl(ref(path, 3, f"sub/part.jsonl{suffix}"))))
    assert not rejs
    assert [r.fields for r in recs] == [json.loads(line) for line in data.splitlines()]
    assert [r.line for r in recs] == list(range(1, 501))
    assert recs[10].source_id == f"sub/part.jsonl{suffix}:11"
    assert recs[0].file_index == 3
    # offsets are line starts in the decompressed stream
    starts = [0]
    for line in data.splitlines(keepends=True)[:-1]:
        starts.append(starts[-1] + len(line))
    assert [r.offset for r in recs] == starts


def test_read_jsonl_parses_exactly_like_the_standard_library(tmp_path):
    """The fast parser must not change a value: integers past 64 bits stay exact integers, NaN and
    Infinity load as the standard library loads them, nested and unicode content round-trips."""
    lines = ['{"id": 123456789012345678901234567890, "text": "big int"}',
             '{"id": -98765432109876543210, "meta": {"ids": [18446744073709551616, 1]}, "text": "nested"}',
             '{"score": NaN, "hi": Infinity, "lo": -Infinity, "text": "non-finite"}',
             '{"score": 0.25, "n": 9223372036854775807, "m": -9223372036854775808, "text": "edges"}',
             r'{"f": 1e300, "g": 12345678901234567890.5, "text": "floats \u00e9 \ud83d\ude00 日本"}',
             '{"a": 1, "a": 2, "text": "duplicate key"}']
    path = tmp_path / "exact.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    recs, rejs = split(list(read_jsonl(ref(path))))
    assert not rejs
    want = [json.loads(line) for line in lines]
    assert [r.fields for r in recs][0:2] == want[0:2] and [r.fields for r in recs][3:] == want[3:]
    assert type(recs[0].fields["id"]) is int and recs[0].fields["id"] == 123456789012345678901234567890
    assert recs[1].fields["meta"]["ids"][0] == 2**64
    nf = recs[2].fields  # NaN != NaN: compare by repr
    assert repr(nf) == repr(want[2])


def test_read_jsonl_bad_lines_become_rejects_with_line_numbers(tmp_path):
    lines = [b'{"text": "ok 1"}', b'{"text": broken', b"", b"   ", b"[1, 2]", b'"just a string"',
             b'{"text": "bad \xff utf8"}', b'{"text": "lone \\ud800 surrogate"}', b'{"text": "last, no newline"}']
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(codecs_bom() + b"\r\n".join(lines))
    stats = Counter()
    recs, rejs = split(list(read_jsonl(ref(path), stats=stats)))
    assert [(r.line, r.reason) for r in rejs] == [(2, MALFORMED_JSON), (5, NOT_AN_OBJECT), (6, NOT_AN_OBJECT)]
    assert "column" in rejs[0].detail and rejs[0].excerpt.startswith('{"text": broken')
    assert [r.line for r in recs] == [1, 7, 8, 9]
    assert recs[0].fields == {"text": "ok 1"}  # BOM stripped
    assert recs[1].fields["text"] == "bad \ufffd utf8" and recs[1].replacements == 1
    assert recs[2].fields["text"] == "lone \ud800 surrogate"  # left for the encoding stage to fix
    assert recs[3].fields["text"] == "last, no newline"
    assert stats["blank_lines"] == 2


@pytest.mark.parametrize("kind", ["zst", "gz"])
def test_read_jsonl_truncated_file_keeps_records_before_the_break(tmp_path, kind):
    data = jsonl_bytes(20000)
    comp = zstandard.ZstdCompressor().compress(data) if kind == "zst" else gzip.compress(data)
    path = tmp_path / f"cut.jsonl.{kind}"
    path.write_bytes(comp[: len(comp) * 2 // 3])
    recs, rejs = split(list(read_jsonl(ref(path))))
    assert len(rejs) == 1
    rej = rejs[0]
    assert rej.reason == TRUNCATED
    assert rej.line == len(recs) + 1
    assert 1000 < len(recs) < 20000
    assert [r.fields["n"] for r in recs] == list(range(len(recs)))  # a clean prefix, nothing lost silently
    # the offset is where the broken line starts in the decompressed data
    assert rej.offset == len(b"".join(data.splitlines(keepends=True)[: len(recs)]))


def test_read_jsonl_oversized_line_is_skipped_not_buffered(tmp_path):
    path = tmp_path / "big.jsonl"
    with open(path, "wb") as f:
        f.write(b'{"text": "small"}\n')
        f.write(b'{"text": "' + b"x" * 3_000_000 + b'"}\n')
        f.write(b'{"text": "after"}\n')
        f.write(b'{"text": "' + b"y" * 2_500_000)  # oversized *and* unterminated
    recs, rejs = split(list(read_jsonl(ref(path), NormalizeConfig(max_record_chars=125_000))))
    assert [r.fields["text"] for r in recs] == ["small", "after"]
    assert [(r.line, r.reason) for r in rejs] == [(2, OVERSIZED), (4, OVERSIZED)]
    assert rejs[0].offset == 18 and "3000012 bytes" in rejs[0].detail
    assert rejs[0].excerpt.startswith('{"text": "xxx') and len(rejs[0].excerpt) <= 256


# ------------------------------------------------------------------------------------------------ parquet


def _parquet(path: Path, n: int, row_group: int, extra: dict | None = None) -> None:
    cols = {"text": [f"row {i}" for i in range(n)], "id": list(range(n)), "lang": ["en"] * n}
    cols.update(extra or {})
    pq.write_table(pa.table(cols), path, row_group_size=row_group)


def test_read_parquet_projection_and_row_group_ranges(tmp_path):
    path = tmp_path / "t.parquet"
    _parquet(path, 100, 30)  # row groups of 30, 30, 30, 10
    whole, rejs = split(list(read_parquet(ref(path), columns=("text", "missing"))))
    assert not rejs
    assert whole[0].fields == {"text": "row 0"}  # only the asked columns that exist
    assert [r.line for r in whole] == list(range(1, 101))
    part, _ = split(list(read_parquet(ref(path, row_groups=(1, 3)))))
    assert [r.line for r in part] == list(range(31, 91))  # file-global row numbers
    assert part[0].fields == {"text": "row 30", "id": 30, "lang": "en"}
    assert part[0].source_id == "t.parquet:31"
    pieces = [split(list(read_parquet(ref(path, row_groups=r))))[0] for r in [(0, 1), (1, 3), (3, 4)]]
    assert [r.fields for p in pieces for r in p] == [r.fields for r in
                                                     split(list(read_parquet(ref(path))))[0]]


def test_read_parquet_not_parquet_is_one_reject(tmp_path):
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"PAR1 this is not really parquet")
    recs, rejs = split(list(read_parquet(ref(path))))
    assert not recs and rejs[0].reason == CORRUPT and rejs[0].file == "broken.parquet"


# ------------------------------------------------------------------------------------------------ text


def _stdlib_files(n: int) -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in (root / "json").glob("*.py"))[:n]
    assert files, "the stdlib json package should be there"
    return files


def test_read_text_one_document_per_file(tmp_path):
    for src in _stdlib_files(3):
        recs, rejs = split(list(read_text(ref(src, 0, f"json/{src.name}"))))
        assert not rejs and len(recs) == 1
        assert recs[0].fields["text"] == src.read_text(encoding="utf-8")
        assert recs[0].source_id == f"json/{src.name}"
        assert recs[0].line is None
    src = _stdlib_files(1)[0]
    gz = tmp_path / "mod.py.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    assert split(list(read_text(ref(gz))))[0][0].fields["text"] == src.read_text(encoding="utf-8")


def test_read_text_oversized_truncated_and_invalid_utf8(tmp_path):
    big = tmp_path / "big.txt"
    big.write_bytes(b"a" * 5000)
    _, rejs = split(list(read_text(ref(big), NormalizeConfig(max_record_chars=125))))
    assert rejs[0].reason == OVERSIZED and rejs[0].excerpt.startswith("aaa")
    cut = tmp_path / "cut.txt.gz"
    cut.write_bytes(gzip.compress(b"hello world " * 10000)[:200])
    recs, rejs = split(list(read_text(ref(cut))))
    assert not recs and rejs[0].reason == TRUNCATED
    bad = tmp_path / "latin.txt"
    bad.write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    recs, _ = split(list(read_text(ref(bad))))
    assert recs[0].fields["text"] == "caf\ufffd cr\ufffdme" and recs[0].replacements == 2


# ------------------------------------------------------------------------------------------------ html

PAGE = """<!doctype html><html><head><title> A test page </title>
<link rel="canonical" href="https://example.org/page"></head>
<body><nav><a href="/">Home</a> | <a href="/about">About</a></nav>
<main><article><h1>Main heading</h1><p>{body}</p><p>Second paragraph with more words in it.</p></article></main>
<footer>Copyright footer text</footer><script>var x = "never text";</script></body></html>"""


def test_read_html_title_url_main_content(tmp_path):
    page = tmp_path / "page.html"
    page.write_text(PAGE.format(body="The body of the article, long enough to be main content. " * 5))
    recs, rejs = split(list(read_html(ref(page, 0, "site/page.html"))))
    assert not rejs
    rec = recs[0]
    assert rec.fields["title"] == "A test page"
    assert rec.url == "https://example.org/page"
    assert rec.source_id == "site/page.html"
    text = rec.fields["text"]
    assert "Main heading" in text and "Second paragraph" in text
    assert "never text" not in text and "Home" not in text  # nav dropped in main-content mode
    full = split(list(read_html(ref(page), NormalizeConfig(html_main_content=False))))[0][0].fields["text"]
    assert "Home" in full and "Main heading" in full
    assert "never text" not in full


def test_html_to_text_canonical_og_url_and_none():
    doc = html_to_text(b'<html><head><meta property="og:url" content="https://og.example/x"></head>'
                       b"<body><p>hi</p></body></html>")
    assert doc.url == "https://og.example/x" and doc.title is None
    assert html_to_text("<p>no head at all</p>").url is None


def test_pathologically_deep_page_falls_back_to_full_text(tmp_path):
    # main-content extraction is superlinear in DOM depth; such pages are extracted in full-text mode
    page = tmp_path / "deep.html"
    page.write_bytes(b"<html><body><p>" + b"word " * 50 + b"</p>" + b"<div>" * 30000 + b"deep text")
    stats = Counter()
    recs, _ = split(list(read_html(ref(page), stats=stats)))
    assert stats["html_deep_fallback"] == 1
    assert "deep text" in recs[0].fields["text"] and "word word" in recs[0].fields["text"]
    shallow = html_to_text(b"<html><body>" + b"<div><p>item</p></div>" * 3000 + b"</body></html>")
    assert not shallow.deep_fallback


def _system_html_pages(limit: int = 8) -> list[Path]:
    pages = []
    for root in ("/usr/share/doc", "/usr/share/doc-base"):
        if os.path.isdir(root):
            for dirpath, _, names in os.walk(root):
                pages += [Path(dirpath, n) for n in sorted(names) if n.endswith((".html", ".htm"))]
    return sorted(pages)[:limit]


@pytest.mark.skipif(not _system_html_pages(), reason="needs HTML pages under /usr/share/doc (any package's "
                    "documentation, e.g. apt-get install bzip2-doc; a slim image's dpkg path-exclude drops them)")
def test_read_html_real_documentation_pages():
    pages = _system_html_pages()
    texts = 0
    for p in pages:
        recs, rejs = split(list(read_html(ref(p), NormalizeConfig(html_main_content=False))))
        assert len(recs) + len(rejs) == 1
        if recs:
            text = recs[0].fields["text"]
            assert "<html" not in text.lower() and "</p>" not in text.lower()
            texts += bool(text.strip())
    assert texts >= len(pages) // 2


# ------------------------------------------------------------------------------------------------ warc


def warc_record(i: int, body: bytes, ctype: str = "text/html; charset=utf-8", wtype: str = "response",
                extra_http: str = "") -> bytes:
    http = (f"HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\n{extra_http}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    if wtype == "request":
        http = b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"
    head = (f"WARC/1.0\r\nWARC-Type: {wtype}\r\nWARC-Target-URI: http://example.com/{i}\r\n"
            f"WARC-Date: 2024-01-01T00:00:00Z\r\nWARC-Record-ID: <urn:uuid:00000000-0000-0000-0000-{i:012d}>\r\n"
            f"Content-Type: application/http; msgtype={wtype}\r\nContent-Length: {len(http)}\r\n\r\n").encode()
    return head + http + b"\r\n\r\n"


def html_page(i: int) -> bytes:
    return (f"<html><head><title>Page {i}</title></head><body><article><p>Content of page {i}. "
            + "Words to make it a paragraph. " * 10 + "</p></article></body></html>").encode()


def sample_warc_records() -> list[bytes]:
    chunked_html = b"<html><body><p>chunked transfer body, " + b"several words " * 5 + b"</p></body></html>"
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in
                       (chunked_html[:20], chunked_html[20:])) + b"0\r\n\r\n"
    return [
        warc_record(0, html_page(0)),
        warc_record(1, b"", wtype="request"),
        warc_record(2, b'{"json": true}', ctype="application/json"),
        warc_record(3, ("<html><body><p>" + "na\xefve caf\xe9 " * 10 + "</p></body></html>").encode("cp1252"),
                    ctype="text/html; charset=windows-1252"),
        warc_record(4, gzip.compress(html_page(4)), extra_http="Content-Encoding: gzip\r\n"),
        warc_record(5, chunked, extra_http="Transfer-Encoding: chunked\r\n"),
        warc_record(6, html_page(6)),
    ]


def test_read_warc_hand_written_gzip_per_record(tmp_path):
    recs_raw = sample_warc_records()
    path = tmp_path / "crawl.warc.gz"
    path.write_bytes(b"".join(gzip.compress(r) for r in recs_raw))
    stats = Counter()
    recs, rejs = split(list(read_warc(ref(path, 0, "crawl/crawl.warc.gz"), stats=stats)))
    assert not rejs, rejs
    assert [r.url for r in recs] == [f"http://example.com/{i}" for i in (0, 3, 4, 5, 6)]
    assert recs[0].source_id == "<urn:uuid:00000000-0000-0000-0000-000000000000>"
    assert recs[0].fields["title"] == "Page 0"
    assert "Content of page 0." in recs[0].fields["text"]
    assert "na\xefve caf\xe9" in recs[1].fields["text"]
    assert "Content of page 4." in recs[2].fields["text"]
    assert "chunked transfer body" in recs[3].fields["text"]
    assert stats["warc_non_html_skipped"] == 1
    offsets = [r.offset for r in recs]
    assert offsets == sorted(offsets) and offsets[0] == 0
    # uncompressed .warc reads the same
    plain = tmp_path / "crawl.warc"
    plain.write_bytes(b"".join(recs_raw))
    assert [r.fields for r in split(list(read_warc(ref(plain))))[0]] == [r.fields for r in recs]


def test_read_warc_written_by_fastwarc(tmp_path):
    from fastwarc.stream_io import GzipWriter
    from fastwarc.warc import WarcRecord, WarcRecordType

    path = tmp_path / "fw.warc.gz"
    w = GzipWriter(str(path))
    for i in range(4):
        r = WarcRecord()
        r.init_headers(record_type=WarcRecordType.response, record_urn=b"uuid:fastwarc-%d" % i)
        r.headers["WARC-Target-URI"] = f"https://fw.example/{i}"
        r.headers["Content-Type"] = "application/http; msgtype=response"
        r.set_bytes_content(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n" + html_page(i))
        r.write(w)
    w.close()
    recs, rejs = split(list(read_warc(ref(path))))
    assert not rejs
    assert [r.source_id for r in recs] == [f"<urn:uuid:fastwarc-{i}>" for i in range(4)]
    assert [r.fields["title"] for r in recs] == [f"Page {i}" for i in range(4)]


def test_read_warc_truncated_keeps_records_before(tmp_path):
    members = [gzip.compress(r) for r in sample_warc_records()]
    data = b"".join(members)
    path = tmp_path / "cut.warc.gz"
    # cut inside the last record's gzip member
    path.write_bytes(data[: len(data) - len(members[-1]) // 2])
    recs, rejs = split(list(read_warc(ref(path))))
    assert [r.url for r in recs] == [f"http://example.com/{i}" for i in (0, 3, 4, 5)]
    assert len(rejs) == 1 and rejs[0].reason == TRUNCATED
    assert rejs[0].offset > recs[-1].offset
    # cut right after a member: the WARC is complete up to there, the gzip stream is not
    path.write_bytes(data[: len(data) - len(members[-1]) + 5])
    recs2, rejs2 = split(list(read_warc(ref(path))))
    assert [r.url for r in recs2] == [r.url for r in recs]
    assert len(rejs2) == 1 and rejs2[0].reason == TRUNCATED


def test_read_warc_zstd(tmp_path):
    path = tmp_path / "crawl.warc.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(b"".join(sample_warc_records())))
    recs, rejs = split(list(read_warc(ref(path))))
    assert not rejs and len(recs) == 5


# ------------------------------------------------------------------------------------------------ misc


def test_is_hidden_and_dispatch(tmp_path):
    assert is_hidden(".git/config") and is_hidden("a/.cache/x.jsonl") and is_hidden(".x.jsonl")
    assert not is_hidden("a/b/x.jsonl") and not is_hidden("./a.jsonl")
    assert is_hidden("_SUCCESS") and is_hidden("out/_tmp/x.jsonl")  # one rule: '.' or '_', like every listing
    path = tmp_path / "one.jsonl"
    path.write_text('{"text": "x"}\n')
    assert len(list(read_file(ref(path), "jsonl"))) == 1
    with pytest.raises(ValueError, match="unknown format"):
        read_file(ref(path), "csv")
