"""No silent data loss (issue 18): each failure an operator reproduced, on real parts, fixed.

Truncated downloads (a loopback HTTP server that cuts the connection), files that vanish between
planning and reading, binary garbage posing as text, full and read-only disks (a real tmpfs where this
machine can mount one), damaged built outputs (real parquet parts, real token shards), and the events
that say what happened (a lease wait, a worker killed and retried).
"""

from __future__ import annotations

import hashlib
import itertools
import http.server
import json
import os
import random
import re
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import datakit
import datakit.pipeline
from datakit.cli import main
from datakit.report.events import event_lines
from datakit.core.layout import FETCHED_FILES_DIR
from datakit.sources.fetch import FetchError, RetryPolicy, fetch_source
from datakit.manifest import SourceSpec
from datakit.steps import Step, run_steps
from datakit.steps.lease import Lease
from datakit.steps.markers import OUTPUTS_FILE, read_status
from datakit.steps.verify import QUICK_HASH_BYTES, verify_steps

FAST = RetryPolicy(attempts=3, backoff=0.001, max_backoff=0.01)


def jsonl_records(n: int, seed: str) -> bytes:
    """n distinct JSONL documents of varied, incompressible-ish text."""
    lines = []
    for i in range(n):
        words = " ".join(hashlib.sha256(f"{seed}:{i}:{k}".encode()).hexdigest()[:8] for k in range(30 + i % 50))
        lines.append(json.dumps({"text": f"doc {i}: {words}"}))
    return ("\n".join(lines) + "\n").encode()


def leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if ".tmp-" in p.name)


# ------------------------------------------------------------------------------------------ 1. downloads


class CutServer:
    """Serves one file. HEAD announces its full length. GET sends no Content-Length and closes the
    connection after ``cut`` bytes while ``cuts`` lasts (then the whole file); with ``ranges`` it
    honours ``Range: bytes=N-`` with a 206."""

    def __init__(self, data: bytes, *, cut: int, cuts: int, ranges: bool, head_length: bool = True):
        self.data, self.cut, self.cuts, self.ranges = data, cut, cuts, ranges
        self.head_length = head_length  # False: the server never says how long the file is
        self.requests: list[str] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_HEAD(self):  # noqa: N802
                self.send_response(200)
                if server.head_length:
                    self.send_header("Content-Length", str(len(server.data)))
                else:
                    self.send_header("Connection", "close")
                self.send_header("Accept-Ranges", "bytes" if server.ranges else "none")
                self.end_headers()

            def do_GET(self):  # noqa: N802
                rng = self.headers.get("Range")
                server.requests.append(rng or "full")
                start = int(rng.split("=")[1].rstrip("-")) if rng and server.ranges else 0
                body = server.data[start:]
                self.send_response(206 if start else 200)
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(server.data) - 1}/{len(server.data)}")
                self.send_header("Connection", "close")  # no Content-Length: the end is the close
                self.end_headers()
                if server.cuts > 0:
                    server.cuts -= 1
                    body = body[: server.cut]
                self.wfile.write(body)
                self.wfile.flush()
                self.close_connection = True

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/data/web.jsonl"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture()
def corpus() -> bytes:
    return jsonl_records(300, "web")


@pytest.mark.slow  # the download stage's own retry policy backs off for ~15 s before giving up
def test_truncated_download_fails_clearly_then_a_rerun_gets_every_record(corpus: bytes, tmp_path: Path):
    """The server closes mid-file with no Content-Length (HEAD announced the full length): the
    download fails naming the truncation, nothing is published, nothing downstream runs. Once the
    server is fixed, a plain rerun (no --force) downloads it whole and all 300 records arrive."""
    server = CutServer(corpus, cut=len(corpus) // 2 + 17, cuts=10**6, ranges=False)
    try:
        m = datakit.manifest_from_dict({"prefix": str(tmp_path / "out"), "sources": [
            {"name": "web", "uri": [server.url], "format": "jsonl"}]}, check_uris=False)
        steps = ["download-web", "normalize-web"]
        first = datakit.run(m, only=steps, workers=1)
        by = {s["name"]: s for s in first.steps}
        assert by["download-web"]["status"] == "failed"
        assert f"truncated transfer: got {len(corpus) // 2 + 17} of {len(corpus)} bytes" in by["download-web"]["error"]
        assert by["normalize-web"]["status"] == "cascaded"
        dl_dir = Path(by["download-web"]["output"])
        assert not (dl_dir / FETCHED_FILES_DIR / "web.jsonl").exists() and leftovers(dl_dir) == []

        server.cuts = 0  # the server is fixed
        second = datakit.run(m, only=steps, workers=1)
        assert second.ok, second.to_dict()
        c = second.records["normalize-web"].counters
        assert (c["records_in"], c["records_out"], c["rejects"]) == (300, 300, 0)
        assert (dl_dir / FETCHED_FILES_DIR / "web.jsonl").read_bytes() == corpus
    finally:
        server.close()


def _line_cut(corpus: bytes, where: str) -> int:
    """Where the server closes: right after the 151st line, or 17 bytes into the 152nd."""
    boundary = sum(len(line) + 1 for line in corpus.split(b"\n")[:151])
    return boundary if where == "line boundary" else boundary + 17


def _step_artifact(prefix: Path, step: str) -> dict:
    return json.loads(next(prefix.glob(f"{step}-*/artifact.json")).read_text())


@pytest.mark.parametrize("where", ["line boundary", "mid-line"])
def test_an_unsized_download_cut_early_fails_by_default_and_allow_unsized_warns(corpus: bytes, tmp_path: Path,
                                                                                where: str):
    """A server that never says a length (HEAD nor GET) and closes early, through the CLI: the cut copy
    cannot be told from a whole file, so by default the download fails with one line naming the URL and
    both ways out, and nothing downstream runs. With ``allow_unsized: true`` the run goes on and the
    summary and the artifact say "size unconfirmed"."""
    server = CutServer(corpus, cut=_line_cut(corpus, where), cuts=10**6, ranges=False, head_length=False)
    manifest, prefix = tmp_path / "m.yaml", tmp_path / "out"
    head = f"prefix: {prefix}\nsources:\n  - name: web\n    uri: [{server.url}]\n    format: jsonl\n"
    args = ["run", str(manifest), "--only", "download-web", "--only", "normalize-web", "--workers", "1"]
    try:
        manifest.write_text(head)
        refused = CliRunner().invoke(main, args)
        published = list(prefix.glob(f"download-web-*/{FETCHED_FILES_DIR}/*"))
        manifest.write_text(head + "    allow_unsized: true\n")
        allowed = CliRunner().invoke(main, args)
    finally:
        server.close()
    assert refused.exit_code == 1, refused.output
    failure = _messages(refused.output, "download-web failed:")
    assert len(failure) == 1 and server.url in failure[0] and "cannot confirm the download is complete" in failure[0]
    assert "sha256:" in failure[0] and "allow_unsized: true" in failure[0] and "Traceback" not in refused.output
    assert re.search(r"^normalize-web +cascaded ", refused.output, re.M) and published == []
    assert "1 step not run: dependency failed: download-web" in refused.output.splitlines()

    assert allowed.exit_code == 0, allowed.output
    assert ("warning: source web: size unconfirmed for 1 downloaded file(s) (web.jsonl): the server sent no length "
            "or digest and allow_unsized: true accepted them") in " ".join(allowed.output.split())
    files = _step_artifact(prefix, "download-web")["result"]["files"]
    assert [(f["announced_size"], f["size_unconfirmed"]) for f in files] == [(None, True)]
    c = _step_artifact(prefix, "normalize-web")["counters"]
    expected = (151, 151, 0) if where == "line boundary" else (152, 151, 1)  # the cut line: malformed_json
    assert (c["records_in"], c["records_out"], c["rejects"]) == expected


def _messages(output: str, start: str) -> list[str]:
    """Each message of the summary that begins with ``start``, its wrapped lines (indented continuations)
    joined and its whitespace collapsed: the summary wraps at 100 columns, the words stay the same."""
    lines = output.splitlines()
    out = []
    for i, line in enumerate(lines):
        if line.startswith(start):
            rest = itertools.takewhile(lambda x: x.startswith("  "), lines[i + 1:])
            out.append(" ".join(" ".join([line, *rest]).split()))
    return out


def test_allow_unsized_turned_off_refetches_the_kept_copy(corpus: bytes, tmp_path: Path):
    """``allow_unsized`` is not in the download's identity; a copy it accepted is rebuilt (and refused)
    once the source stops allowing it, never silently reused."""
    server = CutServer(corpus, cut=len(corpus), cuts=0, ranges=False, head_length=False)
    src = {"name": "web", "uri": [server.url], "format": "jsonl"}
    try:
        allowed = datakit.manifest_from_dict({"prefix": str(tmp_path / "out"), "sources": [
            {**src, "allow_unsized": True}]}, check_uris=False)
        assert datakit.run(allowed, only=["download-web"], workers=1).ok
        strict = datakit.manifest_from_dict({"prefix": str(tmp_path / "out"), "sources": [src]}, check_uris=False)
        entry = datakit.run(strict, only=["download-web"], workers=1).steps[0]
    finally:
        server.close()
    assert entry["reason"] == ("output damaged: outdated: web.jsonl: its size was never confirmed (no length, "
                               "digest or pin) and the source does not set allow_unsized: true")
    assert entry["status"] == "failed" and "cannot confirm the download is complete" in entry["error"]
    assert server.requests == ["full", "full"]


def test_a_download_the_server_never_sized_is_refetched_when_the_server_answers_differently(corpus: bytes,
                                                                                            tmp_path: Path):
    """A server that never says a length and closes mid-line, accepted with ``allow_unsized: true``: the
    truncated copy cannot be told from a whole file, so the download succeeds (size unconfirmed) and
    normalize fails on the cut line. Once the server is fixed (it now announces the length), a plain
    rerun (no --force) sees the answer changed, downloads the file again and rebuilds what follows: all
    300 records arrive."""
    server = CutServer(corpus, cut=len(corpus) // 2 + 17, cuts=1, ranges=False, head_length=False)
    try:
        m = datakit.manifest_from_dict({"prefix": str(tmp_path / "out"), "sources": [
            {"name": "web", "uri": [server.url], "format": "jsonl", "allow_unsized": True}],
            "normalize": {"reject_fraction": 0}}, check_uris=False)
        steps = ["download-web", "normalize-web"]
        run = datakit.run(m, only=steps, workers=1)
        first = {s["name"]: s for s in run.steps}
        assert first["download-web"]["status"] == "succeeded" and first["normalize-web"]["status"] == "failed"
        assert run.records["download-web"].result["files"][0]["size_unconfirmed"] is True
        unchanged = {s["name"]: s for s in datakit.run(m, only=steps, workers=1).steps}
        assert unchanged["download-web"]["status"] == "skipped"  # the server still says nothing new
        server.head_length = True  # the server is fixed
        second = datakit.run(m, only=steps, workers=1)
        assert second.ok, second.to_dict()
        by = {s["name"]: s for s in second.steps}
        assert by["download-web"]["status"] == "succeeded"
        assert f"the server now announces {len(corpus):,} bytes; {len(corpus) // 2 + 17:,} were downloaded" in \
            by["download-web"]["reason"]
        assert second.records["download-web"].result["files"][0]["size_unconfirmed"] is False
        c = second.records["normalize-web"].counters
        assert (c["records_in"], c["records_out"], c["rejects"]) == (300, 300, 0)
    finally:
        server.close()


def test_broken_transfer_resumes_with_a_range_request(corpus: bytes, tmp_path: Path):
    server = CutServer(corpus, cut=4000, cuts=2, ranges=True)
    try:
        spec = SourceSpec(name="web", uri=server.url, format="jsonl")
        result = fetch_source(spec, str(tmp_path), retry=FAST, sleep=lambda s: None)
    finally:
        server.close()
    assert server.requests == ["full", "bytes=4000-", "bytes=8000-"]
    assert (tmp_path / FETCHED_FILES_DIR / "web.jsonl").read_bytes() == corpus
    assert result.files[0].sha256 == hashlib.sha256(corpus).hexdigest()
    assert result.files[0].announced_size == len(corpus) and result.counters["retries"] == 2


def test_a_download_that_stays_short_is_never_published(corpus: bytes, tmp_path: Path):
    server = CutServer(corpus, cut=1000, cuts=10**6, ranges=True)
    try:
        with pytest.raises(FetchError, match=r"failed after 3 attempts: truncated transfer"):
            fetch_source(SourceSpec(name="web", uri=server.url, format="jsonl"), str(tmp_path), retry=FAST,
                         sleep=lambda s: None)
    finally:
        server.close()
    assert list((tmp_path / FETCHED_FILES_DIR).iterdir()) == []


# ------------------------------------------------------------------------- 2. planned inputs


def test_a_file_deleted_after_planning_fails_the_step_and_restoring_it_recovers(tmp_path: Path):
    data = tmp_path / "data"
    data.mkdir()
    files = {f"part-{i}.jsonl": jsonl_records(25, f"p{i}") for i in range(4)}
    for name, body in files.items():
        (data / name).write_bytes(body)
    m = datakit.manifest_from_dict({"prefix": str(tmp_path / "out"), "sources": [
        {"name": "local", "uri": str(data / "*.jsonl"), "format": "jsonl"}]})
    steps = datakit.pipeline.build_steps(m)          # planning: names, sizes, content hashes
    (data / "part-2.jsonl").unlink()                 # ... then the file goes away before reading
    first = datakit.pipeline.run(m, steps=steps, only=["normalize-local"], workers=1)
    entry = first.steps[0]
    assert entry["status"] == "failed"
    assert "planned input part-2.jsonl is missing" in entry["error"] and "restore it" in entry["error"]

    (data / "part-2.jsonl").write_bytes(files["part-2.jsonl"])  # restored: the same plan, rebuilt
    second = datakit.run(m, only=["normalize-local"], workers=1)
    assert second.steps[0]["status"] == "succeeded" and second.steps[0]["identity"] == entry["identity"]
    assert second.records["normalize-local"].counters["records_in"] == 100


def test_a_file_rewritten_with_the_same_size_after_planning_fails_naming_it(tmp_path: Path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.jsonl").write_bytes(jsonl_records(10, "a"))
    (data / "b.jsonl").write_bytes(jsonl_records(10, "b"))
    m = datakit.manifest_from_dict({"prefix": str(tmp_path / "out"), "sources": [
        {"name": "local", "uri": str(data / "*.jsonl"), "format": "jsonl"}]})
    steps = datakit.pipeline.build_steps(m)
    body = bytearray((data / "b.jsonl").read_bytes())
    body[20:24] = b"XXXX"
    (data / "b.jsonl").write_bytes(bytes(body))      # same size, other bytes
    s = datakit.pipeline.run(m, steps=steps, only=["normalize-local"], workers=1)
    assert s.steps[0]["status"] == "failed"
    assert "b.jsonl: content changed after planning" in s.steps[0]["error"]


# ------------------------------------------------------------------------------ 3. garbage


def _pages(root: Path) -> None:
    root.mkdir()
    for i in range(3):
        (root / f"page-{i}.html").write_text(
            f"<html><head><title>page {i}</title></head><body><p>Real prose number {i}. " + "Words. " * 40
            + "</p></body></html>")
    (root / "blob.html").write_bytes(random.Random(7).randbytes(50_000))


def test_binary_garbage_is_rejected_as_binary_and_strict_fails(tmp_path: Path):
    _pages(tmp_path / "web")
    base = {"sources": [{"name": "web", "uri": str(tmp_path / "web" / "*.html"), "format": "html"}]}
    m = datakit.manifest_from_dict({**base, "prefix": str(tmp_path / "out"), "normalize": {"reject_fraction": 0.5}})
    s = datakit.run(m, only=["normalize-web"], workers=1)
    assert s.ok, s.to_dict()
    res = s.result("normalize-web")
    assert res["rejects_by_reason"] == {"binary": 1} and s.records["normalize-web"].counters["records_out"] == 3
    rejects = pq.read_table(Path(s.records["normalize-web"].output) / res["rejects_files"][0]).to_pylist()
    assert [(r["file"], r["reason"]) for r in rejects] == [("blob.html", "binary")]
    main = pq.read_table(Path(s.records["normalize-web"].output) / "outputs" / "main").to_pylist()
    assert all("\ufffd" not in r["text"] for r in main)

    strict = datakit.manifest_from_dict({**base, "prefix": str(tmp_path / "strict"), "normalize": {"strict": True}})
    s = datakit.run(strict, only=["normalize-web"], workers=1)
    assert s.steps[0]["status"] == "failed" and "binary: 1" in s.steps[0]["error"]


@pytest.mark.parametrize("mode,kept", [("keep", "a NUL\x00in text"), ("strip", "a NULin text")])
def test_escaped_nul_is_counted_and_kept_or_stripped(tmp_path: Path, mode: str, kept: str):
    (tmp_path / "d.jsonl").write_text('{"text": "a NUL\\u0000in text"}\n{"text": "clean"}\n')
    m = datakit.manifest_from_dict({"prefix": str(tmp_path / "out"), "normalize": {"control_chars": mode},
                                    "sources": [{"name": "j", "uri": str(tmp_path / "d.jsonl"), "format": "jsonl"}]})
    s = datakit.run(m, only=["normalize-j"], workers=1)
    c = s.records["normalize-j"].counters
    assert (c["nul_chars"], c["control_chars"], c["control_chars_stripped"]) == (1, 1, 1 if mode == "strip" else 0)
    texts = sorted(r["text"] for r in pq.read_table(Path(s.records["normalize-j"].output) / "outputs" / "main")
                   .to_pylist())
    assert texts == sorted([kept, "clean"])


# ------------------------------------------------------------------------ 4. full and read-only disks


@pytest.fixture()
def tiny_tmpfs(tmp_path: Path):
    """A 1 MiB tmpfs (root only); skipped where mounts are unavailable."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def _manifest_file(tmp_path: Path, prefix: Path, n_files: int) -> Path:
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    for i in range(n_files):
        (data / f"part-{i}.jsonl").write_bytes(jsonl_records(400, f"big{i}"))
    path = tmp_path / "m.yaml"
    path.write_text(f"prefix: {prefix}\nsources:\n  - name: big\n    uri: {data}/*.jsonl\n    format: jsonl\n")
    return path


@pytest.mark.slow
def test_full_disk_mid_step_fails_cleanly_with_one_line_and_no_leftovers(tmp_path: Path, tiny_tmpfs: Path):
    manifest = _manifest_file(tmp_path, tiny_tmpfs / "out", 24)  # ~5 MB of text into 1 MiB
    r = CliRunner().invoke(main, ["run", str(manifest), "--only", "normalize-big", "--workers", "1"])
    assert r.exit_code == 1, r.output
    assert "no space left on device" in r.output and "Traceback" not in r.output
    step_dir = next((tiny_tmpfs / "out").glob("normalize-big-*"))
    assert read_status(str(step_dir))["status"] == "FAILED"
    assert leftovers(tiny_tmpfs) == []


def test_read_only_prefix_is_one_line_and_exit_2(tmp_path: Path, tiny_tmpfs: Path):
    manifest = _manifest_file(tmp_path, tiny_tmpfs / "out", 1)
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_tmpfs)], check=True)
    r = subprocess.run([str(Path(sys.executable).with_name("datakit")), "run", str(manifest)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    lines = [x for x in (r.stdout + r.stderr).splitlines() if x.strip()]
    assert len(lines) == 1 and "read-only file system" in lines[0] and str(tiny_tmpfs) in lines[0], lines


# ------------------------------------------------------------------------ 5. self-verifying steps


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, object]:
    """A small pipeline through tokenize (no train), built once."""
    root = tmp_path_factory.mktemp("built")
    data = root / "data"
    data.mkdir()
    for i in range(3):  # 100 records each: a normalize part over QUICK_HASH_BYTES, which --fast only sizes
        (data / f"part-{i}.jsonl").write_bytes(jsonl_records(100, f"t{i}"))
    spec = {"prefix": str(root / "out"), "tokenize": {"vocab_size": 300},
            "sources": [{"name": "docs", "uri": str(data / "*.jsonl"), "format": "jsonl"}]}
    m = datakit.manifest_from_dict(spec)
    (root / "sources.yaml").write_text(json.dumps(spec))  # the same manifest for the CLI (JSON is YAML)
    s = datakit.run(m, workers=2)
    assert s.ok, s.to_dict()
    return root / "out", m


def _copy_prefix(built, tmp_path: Path):
    import shutil

    out, m = built
    dst = tmp_path / "out"
    shutil.copytree(out, dst)
    return dst, m


def _rerun(m, prefix: Path) -> dict[str, dict]:
    s = datakit.run(m, prefix=str(prefix), workers=2)
    assert s.ok, s.to_dict()
    return {e["name"]: e for e in s.steps}


@pytest.mark.slow
def test_truncated_parquet_part_is_rebuilt_with_everything_downstream(built, tmp_path: Path):
    prefix, m = _copy_prefix(built, tmp_path)
    part = max(prefix.glob("normalize-docs-*/outputs/main/unit-*.parquet"), key=lambda p: (p.stat().st_size, p.name))
    size = part.stat().st_size
    part.write_bytes(part.read_bytes()[: size // 2])
    rel = part.relative_to(next(prefix.glob("normalize-docs-*")))
    assert [r["state"] for r in verify_steps(datakit.pipeline.build_steps(m, str(prefix)), str(prefix))
            if r["name"] == "normalize-docs"] == ["DAMAGED"]
    steps = _rerun(m, prefix)
    assert steps["normalize-docs"]["status"] == "succeeded"
    assert steps["normalize-docs"]["reason"] == f"output damaged: {rel} size {size // 2} != {size} recorded"
    downstream = [n for n, e in steps.items() if n != "normalize-docs" and e["status"] == "succeeded"]
    assert "tokenize-docs" in downstream and "consolidate-docs" in downstream
    assert all("damaged" in steps[n]["reason"] for n in downstream)
    assert part.stat().st_size == size  # rebuilt to the same bytes: nothing lost


@pytest.mark.slow
def test_deleted_token_shard_and_edited_stats_are_rebuilt(built, tmp_path: Path):
    prefix, m = _copy_prefix(built, tmp_path)
    tok = next(prefix.glob("tokenize-docs-*"))
    shard = next((tok / "train").glob("shard-*.tokens.npy"))
    original = shard.read_bytes()
    shard.unlink()
    stats = tok / "train" / ".stats.json"
    d = json.loads(stats.read_text())
    d["total_docs"] += 1  # same width, so same size: only the hash can tell
    stats.write_text(json.dumps(d, sort_keys=True, indent=1, ensure_ascii=False) + "\n")
    steps = _rerun(m, prefix)
    assert steps["tokenize-docs"]["status"] == "succeeded"
    assert steps["tokenize-docs"]["reason"].startswith("output damaged: ")
    assert shard.read_bytes() == original
    assert json.loads(stats.read_text())["total_docs"] == d["total_docs"] - 1


@pytest.mark.slow
def test_token_overwritten_with_another_valid_id_is_caught_by_verify_and_ferry_checks(built, tmp_path: Path):
    prefix, m = _copy_prefix(built, tmp_path)
    tok = next(prefix.glob("tokenize-docs-*"))
    shard = next((tok / "train").glob("shard-*.tokens.npy"))
    arr = np.load(shard, mmap_mode="r+")
    arr[5] = (int(arr[5]) + 1) % 300
    arr.flush()
    del arr
    rows = {x["name"]: x for x in verify_steps(datakit.pipeline.build_steps(m, str(prefix)), str(prefix))}
    assert rows["tokenize-docs"]["state"] == "DAMAGED" and shard.name in rows["tokenize-docs"]["detail"]
    assert {x["state"] for n, x in rows.items() if n != "tokenize-docs"} == {"OK"}
    from datakit.tokenize.cache import verify_checksums

    assert verify_checksums(str(tok / "train")) == [f"{shard.name} does not match its ledger checksum (content changed)"]


def _data_digests(prefix: Path) -> dict[str, str]:
    """sha256 of every file a run wrote under its step dirs, except the records of when and by whom
    (artifact.json, .status, leases), the event log, the input-hash cache and the published plan (it
    names the manifest file the run was given, which the two builds keep in different places)."""
    return {str(p.relative_to(prefix)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(prefix.rglob("*")) if p.is_file() and p.name not in ("artifact.json", ".status")
            and not p.name.startswith(".lease") and p.name not in ("events.jsonl", "plan.json")
            and ".datakit" not in p.parts}


def _cli(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.output


def _cli_run(built, prefix: Path, *extra: str) -> dict[str, dict]:
    code, out = _cli("run", str(built[0].parent / "sources.yaml"), "--prefix", str(prefix), "--workers", "2",
                     "--json", *extra)
    assert code == 0, out
    return {s["name"]: s for s in json.loads(out.strip().splitlines()[-1])["steps"]}


def _same_size_damage_survives_fast_then_is_rebuilt(built, prefix: Path, damaged: Path, step: str) -> dict:
    """The CLI round of a same-size edit: ``--fast`` keeps the old size-only behaviour (verify ok, run
    skips all), plain ``verify`` fails naming the file, plain ``run`` rebuilds the step (and what
    depends on it) and the prefix then equals the clean build, file for file."""
    manifest = str(built[0].parent / "sources.yaml")
    code, out = _cli("verify", manifest, "--prefix", str(prefix), "--fast")
    assert code == 0 and "ok: every built step matches its output manifest (sizes)" in out, out
    assert {s["status"] for s in _cli_run(built, prefix, "--fast").values()} == {"skipped"}
    code, out = _cli("verify", manifest, "--prefix", str(prefix))
    assert code == 1, out
    line = next(x for x in out.splitlines() if x.startswith("DAMAGED"))
    assert step in line and f"{damaged.name} content changed" in line, out
    assert sum(x.startswith("DAMAGED") for x in out.splitlines()) == 1
    steps = _cli_run(built, prefix)
    assert steps[step]["status"] == "succeeded" and damaged.name in steps[step]["reason"]
    assert steps[step]["reason"].startswith("output damaged: ") and "content changed" in steps[step]["reason"]
    assert _data_digests(prefix) == _data_digests(built[0])
    code, out = _cli("verify", manifest, "--prefix", str(prefix))
    assert code == 0 and "ok: every built step matches its output manifest (content)" in out, out
    return steps


@pytest.mark.slow
def test_token_id_overwritten_same_size_is_found_by_verify_and_rebuilt_by_run(built, tmp_path: Path):
    prefix, _ = _copy_prefix(built, tmp_path)
    tok = next(prefix.glob("tokenize-docs-*"))
    shard = next((tok / "train").glob("shard-*.tokens.npy"))
    size = shard.stat().st_size
    arr = np.load(shard, mmap_mode="r+")
    arr[5] = (int(arr[5]) + 1) % 300  # another valid id of the 300-token vocabulary
    arr.flush()
    del arr
    assert shard.stat().st_size == size > QUICK_HASH_BYTES
    steps = _same_size_damage_survives_fast_then_is_rebuilt(built, prefix, shard, "tokenize-docs")
    assert {n for n, e in steps.items() if e["status"] == "succeeded"} == {"tokenize-docs"}


@pytest.mark.slow
def test_parquet_byte_flipped_same_size_is_found_by_verify_and_rebuilt_with_downstream(built, tmp_path: Path):
    prefix, _ = _copy_prefix(built, tmp_path)
    part = max(prefix.glob("normalize-docs-*/outputs/main/unit-*.parquet"), key=lambda p: (p.stat().st_size, p.name))
    data = bytearray(part.read_bytes())
    assert len(data) > QUICK_HASH_BYTES  # a file --fast checks by size only
    data[len(data) // 2] ^= 0x20
    part.write_bytes(bytes(data))
    steps = _same_size_damage_survives_fast_then_is_rebuilt(built, prefix, part, "normalize-docs")
    assert all(e["status"] == "succeeded" for e in steps.values())  # everything downstream was rebuilt
    assert steps["tokenize-docs"]["reason"].startswith("dependency rebuilt because its output was damaged")


def test_every_built_step_writes_a_manifest_of_its_outputs(tmp_path: Path):
    def write(ctx):
        os.makedirs(ctx.path("outputs"), exist_ok=True)
        Path(ctx.path("outputs", "a.txt")).write_text("hello\n")
        return {"counters": {"rows": 1}}

    step = Step("writer", write, {"k": 1})
    run_steps([step], str(tmp_path))
    record = json.loads((tmp_path / step.dirname / OUTPUTS_FILE).read_text())
    assert [(f["path"], f["size"]) for f in record["files"]] == [("outputs/a.txt", 6)]
    (tmp_path / step.dirname / "outputs" / "a.txt").write_text("hellO\n")  # same size
    s = run_steps([step], str(tmp_path))
    assert s.steps[0]["status"] == "succeeded" and "content changed" in s.steps[0]["reason"]


# ------------------------------------------------------------------------------- 6. say what happened


def test_waiting_on_another_runs_lease_is_said(tmp_path: Path):
    step = Step("slow", lambda ctx: {"counters": {}}, {"x": 1})
    d = tmp_path / step.dirname
    d.mkdir(parents=True)
    other = Lease(str(d), timeout_s=30)
    other.acquire()
    events: list[dict] = []
    timer = threading.Timer(0.5, other.release)
    timer.start()
    s = run_steps([step], str(tmp_path), on_event=events.append)
    timer.join()
    kinds = [e["event"] for e in events]
    assert "step_waiting" in kinds and s.steps[0]["status"] == "succeeded"
    assert "after waiting" in s.steps[0]["reason"] and "for its lease" in s.steps[0]["reason"]


def _die_once(flag: str):
    def fn(row):
        if row == 3 and not os.path.exists(flag):
            Path(flag).write_text("died")
            os._exit(9)
        return row
    return fn


def test_a_worker_killed_and_retried_is_reported(tmp_path: Path):
    from datakit.shuffle import Dataset

    flag = str(tmp_path / "died")

    def step_fn(ctx):
        rows = Dataset.from_items(list(range(8)), num_shards=4).map(_die_once(flag)).collect(ctx.exec_config)
        return {"rows": sorted(rows)}

    from datakit.shuffle import ExecConfig

    events: list[dict] = []
    s = run_steps([Step("killer", step_fn, {})], str(tmp_path / "out"), on_event=events.append,
                  exec_config=ExecConfig(backend="local", max_workers=2))
    assert s.ok and s.result("killer")["rows"] == list(range(8))
    retried = [e for e in events if e["event"] == "step_worker_retried"]
    assert retried and retried[0]["cause"] == "worker died"
    (line,) = event_lines(retried[0], {})
    assert "retried: killer" in line and "worker died" in line


def test_rejects_are_shown_in_the_event_lines():
    ev = {"event": "step_succeeded", "step": "normalize-web",
          "counters": {"records_in": 300, "rejects": 2, "rejects/binary": 2}}
    (line,) = [x for x in event_lines(ev, {}) if "rejected:" in x]
    assert "rejected: normalize-web: 2 of 300 records (binary 2)" in line
    assert [x for x in event_lines({**ev, "counters": {"records_in": 5, "rejects": 0}}, {}) if "rejected:" in x] == []


def test_counters_name_every_reject_reason(tmp_path: Path):
    (tmp_path / "d.jsonl").write_text('{"text": "ok"}\nnot json\n{"text": 5}\n')
    m = datakit.manifest_from_dict({"prefix": str(tmp_path / "out"), "normalize": {"reject_fraction": 1},
                                    "sources": [{"name": "j", "uri": str(tmp_path / "d.jsonl"), "format": "jsonl"}]})
    s = datakit.run(m, only=["normalize-j"], workers=1)
    c = Counter(s.records["normalize-j"].counters)
    assert (c["rejects"], c["rejects/malformed_json"], c["rejects/wrong_type"]) == (2, 1, 1)
