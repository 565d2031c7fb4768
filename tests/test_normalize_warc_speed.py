"""WARC/HTML reading with per-page bounded extraction (datakit.sources.extract).

A page extracted in the forked, time-limited child must give exactly what inline extraction gives
(records, rejects with their offsets and details, counters) on every input; the C depth check must
agree with a walk of the tree; and a page whose extraction runs too long must become one reject with
its file and record offset while the reading goes on.
"""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

import pytest
import zstandard

from datakit.manifest import SourceSpec
from datakit.normalize import NormalizeConfig, normalize_source
from datakit.shuffle import ExecConfig, list_files
from datakit.sources import extract as X
from datakit.sources import readers
from datakit.sources.readers import FileRef, RawRecord, Reject

from test_readers import html_page, sample_warc_records, warc_record

# Resiliparse's main-content pass on many sibling chains just under the depth fallback (990 < 1000):
# ~1 MB, ~2 s of native code that neither SIGALRM nor resiliparse's time_guard can interrupt.
SLOW_PAGE = ("<html><body>" + ("<div>" * 990 + "hello world " + "</div>" * 990) * 100 + "</body></html>").encode()


def _ref(path: Path, index: int = 0) -> FileRef:
    return FileRef(index, str(path), path.name, path.stat().st_size)


def _both(path: Path, monkeypatch, fmt: str = "warc", cfg: NormalizeConfig = NormalizeConfig()):
    """Read ``path`` with every page extracted inline, then with every page in the forked child."""
    sa, sb = Counter(), Counter()
    with monkeypatch.context() as m:
        m.setattr(X, "GUARD_TAGS", 10**12)
        m.setattr(X, "GUARD_CHARS", 10**12)
        a = list(readers.read_file(_ref(path), fmt, cfg, sa))
    with monkeypatch.context() as m:
        m.setattr(X, "GUARD_TAGS", -1)
        b = list(readers.read_file(_ref(path), fmt, cfg, sb))
    return a, b, sa, sb


def _deeper_than(root, limit: int) -> bool:
    """The reference: a Python walk of the element tree (what the C depth check replaced)."""
    stack = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        child = node.first_child
        while child is not None:
            if child.type == 1:  # element
                stack.append((child, depth + 1))
            child = child.next
    return False


def _deep(n: int) -> str:
    return "<html><body>" + "<div>" * n + "deep text" + "</div>" * n + "</body></html>"


def _pages() -> list[bytes]:
    big = ("<html><head><title>Big</title><link rel=canonical href='https://c.example/big'></head><body>"
           + "<nav>" + "<a href=/x>menu</a>" * 3000 + "</nav><article>"
           + "".join(f"<p>paragraph {i} with some words in it</p>" for i in range(3000))
           + "</article></body></html>").encode()
    return [html_page(0), big, _deep(1200).encode(), _deep(990).encode(), _deep(3000).encode(),
            ("<svg>" + "<g>" * 1500 + "</svg>").encode(), ("<table>" + "<tr><td><table>" * 2000).encode(),
            b"<html><body><p>caf\xe9 cr\xe8me " * 200 + b"</p></body></html>"]


@pytest.fixture
def warc_dir(tmp_path) -> Path:
    d = tmp_path / "crawl"
    d.mkdir()
    recs = sample_warc_records() + [warc_record(100 + i, p, ctype="text/html")
                                    for i, p in enumerate(_pages())]
    (d / "a.warc.gz").write_bytes(b"".join(gzip.compress(r) for r in recs))
    (d / "b.warc.zst").write_bytes(zstandard.ZstdCompressor().compress(b"".join(recs)))
    (d / "c.warc").write_bytes(b"".join(recs))
    data = b"".join(gzip.compress(r) for r in recs)
    (d / "d.warc.gz").write_bytes(data[: len(data) - 3000])  # cut inside a record
    (d / "e.warc.gz").write_bytes(data[:200] + b"\x00garbage" + data[200:])  # corrupt
    return d


def test_forked_extraction_gives_the_same_records_rejects_and_counters_as_inline(warc_dir, monkeypatch):
    for path in sorted(warc_dir.iterdir()):
        a, b, sa, sb = _both(path, monkeypatch)
        assert a == b, path.name
        assert sa == sb, path.name
        assert any(type(r) is RawRecord for r in a) or path.name.startswith("e.")
        assert any(type(r) is Reject for r in a) == (path.name[0] in "de")
    # the deep pages took the fallback, through the C depth check
    a, b, sa, sb = _both(warc_dir / "a.warc.gz", monkeypatch)
    assert sa["html_deep_fallback"] == sb["html_deep_fallback"] == 2  # those with > 5,000 tags


@pytest.mark.parametrize("depth", [5, 997, 998, 999, 1000, 1001, 1500, 20000])
def test_c_depth_check_agrees_with_the_tree_walk(depth):
    from resiliparse.parse.html import HTMLTree

    for html in (_deep(depth), "<svg>" + "<g>" * depth, "<template>" + "<div>" * depth,
                 "<table>" + "<tr><td><table>" * (depth // 3 + 1), "<ul>" + "<li><ul>" * (depth // 2)):
        tree = HTMLTree.parse(html)
        assert X.deeper_than_limit(tree) == _deeper_than(tree.document, X.MAX_MAIN_CONTENT_DEPTH)


def test_html_files_read_the_same(tmp_path, monkeypatch):
    for i, page in enumerate(_pages()):
        p = tmp_path / f"p{i}.html"
        p.write_bytes(page)
        a, b, sa, sb = _both(p, monkeypatch, "html")
        assert a == b and sa == sb


def test_slow_page_is_a_reject_with_its_offset_and_reading_goes_on(tmp_path, monkeypatch):
    monkeypatch.setattr(X, "EXTRACT_TIMEOUT_S", 0.3)
    recs = [warc_record(0, html_page(0)), warc_record(1, SLOW_PAGE), warc_record(2, html_page(2))]
    path = tmp_path / "slow.warc.gz"
    path.write_bytes(b"".join(gzip.compress(r) for r in recs))
    # the EXTRACT_TIMEOUT reject (not a wall-clock figure, which a loaded machine makes noisy) proves the bound
    out = list(readers.read_warc(_ref(path), NormalizeConfig(), Counter()))
    assert [type(r) for r in out] == [RawRecord, Reject, RawRecord]
    rej = out[1]
    assert rej.reason == readers.EXTRACT_TIMEOUT and rej.file == "slow.warc.gz"
    assert rej.offset == rej.pos == len(recs[0])  # the record's start in the decompressed stream
    assert "http://example.com/1" in rej.detail and "0.3 s" in rej.detail
    assert [r.url for r in out if type(r) is RawRecord] == ["http://example.com/0", "http://example.com/2"]
    # with time enough, the same page is extracted in the child as it is inline
    monkeypatch.setattr(X, "EXTRACT_TIMEOUT_S", 120.0)
    forked = list(readers.read_warc(_ref(path)))
    monkeypatch.setattr(X, "GUARD_TAGS", 10**12)
    assert forked == list(readers.read_warc(_ref(path)))


def test_normalize_step_records_the_timeout_and_keeps_going(tmp_path, monkeypatch):
    monkeypatch.setattr(X, "EXTRACT_TIMEOUT_S", 0.3)
    d = tmp_path / "crawl"
    d.mkdir()
    recs = [warc_record(i, html_page(i)) for i in range(200)] + [warc_record(999, SLOW_PAGE)]
    (d / "x.warc.gz").write_bytes(b"".join(gzip.compress(r) for r in recs))
    out = tmp_path / "out"
    # in-process engine: the monkeypatched timeout applies in the worker
    res = normalize_source(SourceSpec(name="cc", uri="in", format="warc"), files=list_files(str(d)), out_dir=str(out),
                           cfg=NormalizeConfig(), exec_config=ExecConfig(backend="inline"))
    assert res.counters["records_out"] == 200
    assert res.rejects_by_reason == {readers.EXTRACT_TIMEOUT: 1}
    import pyarrow.parquet as pq

    (row,) = pq.read_table(out / res.rejects_files[0]).to_pylist()
    assert row["file"] == "x.warc.gz" and row["reason"] == readers.EXTRACT_TIMEOUT
    assert row["offset"] == sum(len(r) for r in recs[:200])
