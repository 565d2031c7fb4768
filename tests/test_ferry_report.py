"""History records, the amber "slow run" rule, and the static HTML report (rendered in headless Chromium)."""

from __future__ import annotations

import json
import re
import statistics
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from datakit.cli.ferry import ferry
from datakit.ferry.history import append_history, flag_slow_runs, read_history, slow_baseline
from datakit.ferry.report import render_report, write_report
from system_packages import needs, program

STEPS = ("normalize-code", "exact-dedup", "fuzzy-dups", "consolidate-code", "tokenize-code", "train")


def _record(i: int, status: str = "succeeded", wall: float = 100.0, failing: dict | None = None) -> dict:
    """A history record shaped like the ones `ferry run` appends."""
    steps = [{"name": n, "status": "succeeded", "wall_s": wall * (0.6 if n == "train" else 0.08),
              "counters": {"docs": 10}} for n in STEPS]
    if status == "failed" and failing:
        for s in steps:
            if s["name"] == failing["stage"]:
                s["status"] = "failed"
    loss = [[10, 8.0 - 0.01 * i], [20, 7.5], [30, 7.1], [40, 6.9]]
    return {
        "run_id": f"2026010{i // 10}T0{i % 10}3000Z-{i:02d}", "status": status, "wall_s": wall,
        "started": f"2026-01-{i + 1:02d}T06:30:00Z", "failing": failing, "steps": steps,
        "validation": {"counts": {"ok": 70 if not failing else 69, "failed": 0 if not failing else 1, "skipped": 0},
                       "checks": [{"stage": "train", "check": "loss", "status": "ok", "message": "decreased"}]
                       + ([{**failing, "status": "failed"}] if failing else [])},
        "summary": {
            "sources": {"code": {"records_in": 200, "normalized": 190, "removed_exact": 1, "removed_fuzzy": 12,
                                 "removed_decontaminate": 2, "docs_out": 175, "tokens": 123456}},
            "totals": {"records_in": 200, "docs_out": 175, "removed_exact": 1, "removed_fuzzy": 12,
                       "removed_decontaminate": 2, "tokens": 123456},
            "planted": {"items": 3, "found": ["bench:0", "bench:1"], "left": 0},
            "loss": {"points": loss, "first": loss[0][1], "last": loss[-1][1], "eval": [[40, 7.0]]},
        },
    }


def test_slow_rule_uses_previous_seven_successes_only() -> None:
    prev = [_record(i, wall=w) for i, w in enumerate([100, 102, 98, 101, 99, 100, 100])]
    base = slow_baseline(prev)
    assert base is not None and base[2] == 7
    assert base[0] == pytest.approx(100.0) and base[1] == pytest.approx(statistics.pstdev([100, 102, 98, 101, 99,
                                                                                          100, 100]))
    failed = _record(9, "failed", wall=500.0, failing={"stage": "train", "check": "loss", "message": "x"})
    recs = prev + [_record(7, wall=101.0), _record(8, wall=110.0), failed]
    flags = flag_slow_runs(recs)
    assert [f["slow"] for f in flags] == [False] * 8 + [True, False]  # failed runs are red, never amber
    # The next success is judged against the 7 most recent successes: the failed run is not among them,
    # the two oldest successes have left the window.
    nxt = flag_slow_runs(recs + [_record(10, wall=102.5)])[-1]
    window = [98, 101, 99, 100, 100, 101, 110]
    assert nxt["baseline_n"] == 7
    assert nxt["threshold"] == pytest.approx(statistics.fmean(window) + statistics.pstdev(window))
    assert nxt["slow"] is False
    # Fewer than two successes: no baseline, nothing is amber.
    assert flag_slow_runs([_record(0, wall=1), _record(1, wall=1000)])[1]["slow"] is False


def test_history_append_and_unreadable_lines(tmp_path: Path) -> None:
    append_history(str(tmp_path), _record(0))
    with open(tmp_path / "history.jsonl", "a") as f:
        f.write('{"torn": \n')  # a broken line (e.g. an editor accident) must not hide the others
    append_history(str(tmp_path), _record(1))
    h = read_history(str(tmp_path))
    assert [r["run_id"] for r in h.records] == [_record(0)["run_id"], _record(1)["run_id"]]
    assert h.bad_lines == [2]
    page = render_report(h.records, bad_lines=h.bad_lines)
    assert "1 unreadable history line(s) skipped (line 2)" in page


def _history(prefix: Path) -> list[dict]:
    walls = [100, 102, 98, 101, 99, 100, 100, 130]
    recs = [_record(i, wall=w) for i, w in enumerate(walls)]
    recs.append(_record(len(walls), "failed", wall=40.0,
                        failing={"stage": "consolidate-code", "check": "no_contamination",
                                 "message": "benchmark item bench:1 is still in x.parquet (doc abc)"}))
    for r in recs:
        append_history(str(prefix), r)
    return recs


def test_report_content(tmp_path: Path) -> None:
    recs = _history(tmp_path)
    out = CliRunner().invoke(ferry, ["report", "--prefix", str(tmp_path)])
    assert out.exit_code == 0, out.output
    page = (tmp_path / "report.html").read_text()
    assert out.output.strip() == str(tmp_path / "report.html")
    assert "<script" not in page and "http://" not in page and "https://" not in page  # no external assets
    rows = re.findall(r'<tr class="run-row (\w+)" data-run-id="([^"]+)"', page)
    assert [rid for _, rid in rows] == [r["run_id"] for r in reversed(recs)]  # latest first
    states = dict((rid, st) for st, rid in rows)
    assert states[recs[-1]["run_id"]] == "failed"
    assert states[recs[-2]["run_id"]] == "slow"  # 130s > mean + 1 sigma of the 7 before it
    assert all(states[r["run_id"]] == "succeeded" for r in recs[:-2])
    assert 'id="latest" class="card" data-status="failed"' in page
    assert "consolidate-code: no_contamination" in page
    assert page.count('class="step-bar"') == len(STEPS)
    assert page.count('class="run-bar"') == len(recs)
    assert 'class="loss-line"' in page
    assert re.search(r'id="sources".*<td class=l>code</td><td>200</td>', page)


def test_report_limit_and_empty_history(tmp_path: Path) -> None:
    recs = _history(tmp_path)
    page = Path(write_report(str(tmp_path), str(tmp_path / "r.html"), limit=3)).read_text()
    assert len(re.findall(r'class="run-row', page)) == 3
    assert f"{len(recs)} run(s) in history, last 3 shown" in page
    empty = tmp_path / "empty"
    empty.mkdir()
    page = Path(write_report(str(empty))).read_text()
    assert 'id="empty"' in page
    r = CliRunner().invoke(ferry, ["report", "--prefix", str(tmp_path / "nope")])
    assert r.exit_code == 2


def test_report_escapes_untrusted_text() -> None:
    rec = _record(0, "failed", failing={"stage": "normalize-x", "check": "built",
                                        "message": "<img src=x onerror=alert(1)> & friends"})
    page = render_report([rec])
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt; &amp; friends" in page


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _png_pixels(data: bytes) -> bytes:
    """Decompressed (still filtered) image data: enough to compare two screenshots' content."""
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    return zlib.decompress(idat)


@needs("chromium")
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    recs = _history(tmp_path)
    page = Path(write_report(str(tmp_path)))
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>")
    exe = program("chromium")
    common = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
              f"--user-data-dir={tmp_path / 'chromium-profile'}", "--window-size=1280,2400"]

    def shot(html: Path, png: Path) -> bytes:
        r = subprocess.run([*common, f"--screenshot={png}", html.as_uri()], capture_output=True, text=True,
                           timeout=180)
        assert png.exists(), f"chromium wrote no screenshot (rc {r.returncode}): {r.stderr[-2000:]}"
        return png.read_bytes()

    report_png = shot(page, tmp_path / "report.png")  # kept in the test's tmp dir as the artifact
    blank_png = shot(blank, tmp_path / "blank.png")
    assert _png_size(report_png) == (1280, 2400)
    # A rendered page (tables, bars, curve) compresses far worse than an empty one.
    assert len(report_png) > 3 * len(blank_png), (len(report_png), len(blank_png))
    assert _png_pixels(report_png) != _png_pixels(blank_png)

    dom = subprocess.run([*common, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=180).stdout
    rows = re.findall(r'<tr class="run-row (\w+)" data-run-id="([^"]+)"', dom)
    assert [rid for _, rid in rows] == [r["run_id"] for r in reversed(recs)]
    assert rows[0][0] == "failed" and rows[1][0] == "slow"
    assert dom.count("<svg") >= 3 and 'class="loss-line"' in dom
    (tmp_path / "report.dom.html").write_text(dom)
    json.dumps(recs)  # records stay JSON-serializable (what history.jsonl requires)
