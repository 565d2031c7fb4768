"""Downloading remote sources: a real HTTP server on loopback, and fsspec's memory:// filesystem."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import threading
import tracemalloc
import uuid
from collections import Counter
from pathlib import Path

import fsspec
import pytest

from datakit.core.layout import FETCHED_FILES_DIR
from datakit.sources.fetch import (
    PROVENANCE_FILE,
    FetchError,
    FetchResult,
    RetryPolicy,
    fetch_source,
    is_remote,
    unconfirmed_copy,
)
from datakit.manifest import SourceSpec
from datakit.pipeline import manifest_from_dict

FAST = RetryPolicy(attempts=4, backoff=0.001, max_backoff=0.01)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def body(name: str, size: int) -> bytes:
    """Deterministic, incompressible-ish content for a file name."""
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(f"{name}:{counter}".encode()).digest()
        counter += 1
    return bytes(out[:size])


class Server:
    """A loopback HTTP server with routes that misbehave in chosen ways; counts GETs per path.

    /files/<name>      200 with the file
    /flaky/<name>      503 twice (with Retry-After: 0), then 200
    /truncated/<name>  first response promises the full length but sends half and closes; then 200
    /down/<name>       always 503
    /missing/<name>    404     /secret/<name>  403     /login/<name>  401
    /unsized/<name>    no length anywhere (HEAD nor GET): the body ends when the connection closes
    /unsized-cut/<name>  the same, closing after half the file on every GET
    /chunked/<name>    chunked transfer encoding, no length;  /chunked-cut/<name>  chunked, cut before the end
    """

    def __init__(self, files: dict[str, bytes]):
        self.files = files
        self.gets: Counter[str] = Counter()
        self.lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_HEAD(self):  # noqa: N802
                self._serve(head=True)

            def do_GET(self):  # noqa: N802
                self._serve(head=False)

            def _status(self, code: int, extra: dict[str, str] | None = None) -> None:
                self.send_response(code)
                for k, v in (extra or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _serve(self, head: bool) -> None:
                parts = self.path.split("/", 2)
                route, name = (parts[1], parts[2]) if len(parts) == 3 else ("", "")
                with server.lock:
                    if not head:
                        server.gets[self.path] += 1
                    n = server.gets[self.path]
                fixed = {"missing": 404, "secret": 403, "login": 401, "down": 503}
                if route in fixed:
                    return self._status(fixed[route])
                if route == "flaky" and not head and n <= 2:
                    return self._status(503, {"Retry-After": "0"})
                data = server.files.get(name)
                if data is None:
                    return self._status(404)
                if route.startswith(("unsized", "chunked")):
                    return self._unframed(route, data, head)
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if head:
                    return
                if route == "truncated" and n == 1:
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                view = memoryview(data)
                for i in range(0, len(data), 65536):
                    self.wfile.write(view[i : i + 65536])

            def _unframed(self, route: str, data: bytes, head: bool) -> None:
                """No Content-Length: the end is the close (unsized) or the last chunk (chunked)."""
                chunked = route.startswith("chunked")
                self.send_response(200)
                self.send_header("Transfer-Encoding" if chunked else "Connection", "chunked" if chunked else "close")
                self.end_headers()
                self.close_connection = True
                if head:
                    return
                sent = data[: len(data) // 2] if route.endswith("-cut") else data
                if not chunked:
                    self.wfile.write(sent)
                    return
                for i in range(0, len(sent), 4096):
                    part = sent[i : i + 4096]
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                if not route.endswith("-cut"):
                    self.wfile.write(b"0\r\n\r\n")

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)

    def url(self, route: str, name: str) -> str:
        return f"{self.base}/{route}/{name}"


@pytest.fixture()
def server():
    files = {f"part-{i}.jsonl": body(f"part-{i}", 5000 + 917 * i) for i in range(6)}
    s = Server(files)
    s.thread.start()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()
    s.thread.join()


@pytest.fixture()
def mem():
    """A private memory:// root, removed afterwards (the memory filesystem is process-global)."""
    root = f"/t{uuid.uuid4().hex[:10]}"
    fs = fsspec.filesystem("memory")
    yield fs, root
    if fs.exists(root):
        fs.rm(root, recursive=True)


def spec(uri, **kw) -> SourceSpec:
    return SourceSpec(name=kw.pop("name", "src"), uri=uri, format=kw.pop("format", "jsonl"), **kw)


def leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob(".*"))


# ----------------------------------------------------------------------------------------------
# http(s)


def test_http_list_downloads_files_with_provenance(server: Server, tmp_path: Path):
    names = sorted(server.files)
    urls = [server.url("files", n) for n in reversed(names)]  # listing order does not matter
    result = fetch_source(spec(urls, revision="v1"), str(tmp_path / "out"), workers=3, retry=FAST)
    out = tmp_path / "out"
    assert [f.name for f in result.files] == names
    for f in result.files:
        data = server.files[f.name]
        assert Path(f.path).read_bytes() == data
        assert f.path == str(out / FETCHED_FILES_DIR / f.name)
        assert (f.size, f.sha256, f.uri) == (len(data), sha(data), server.url("files", f.name))
    assert result.paths == [str(out / FETCHED_FILES_DIR / n) for n in names]
    assert not result.local and result.out_dir == str(out)
    assert result.counters == {"files": 6, "bytes": sum(map(len, server.files.values())),
                               "downloaded_files": 6, "skipped_existing": 0, "retries": 0}
    prov = json.loads((out / PROVENANCE_FILE).read_text())
    assert prov == result.provenance()
    assert prov["uri"] == urls and prov["revision"] == "v1" and prov["source"] == "src"
    assert [(f["name"], f["size"], f["sha256"]) for f in prov["files"]] == [
        (n, len(server.files[n]), sha(server.files[n])) for n in names
    ]
    assert leftovers(out) == []  # no temp files
    assert FetchResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result
    assert result.paths_under(str(out)) == result.paths
    assert result.paths_under("/mirror/step")[0] == f"/mirror/step/{FETCHED_FILES_DIR}/{names[0]}"


def test_single_url_is_one_file(server: Server, tmp_path: Path):
    result = fetch_source(spec(server.url("files", "part-2.jsonl")), str(tmp_path), retry=FAST)
    assert [f.name for f in result.files] == ["part-2.jsonl"]
    assert (tmp_path / FETCHED_FILES_DIR / "part-2.jsonl").read_bytes() == server.files["part-2.jsonl"]


def test_transient_503_is_retried_with_backoff(server: Server, tmp_path: Path):
    delays: list[float] = []
    policy = RetryPolicy(attempts=5, backoff=0.1, max_backoff=10.0)
    url = server.url("flaky", "part-1.jsonl")
    result = fetch_source(spec(url), str(tmp_path), retry=policy, sleep=delays.append)
    assert (tmp_path / FETCHED_FILES_DIR / "part-1.jsonl").read_bytes() == server.files["part-1.jsonl"]
    assert server.gets["/flaky/part-1.jsonl"] == 3
    assert result.counters["retries"] == 2
    # Exponential: the second wait is about twice the first (each has +-25% jitter).
    assert len(delays) == 2
    assert 0.075 <= delays[0] <= 0.125 and 0.15 <= delays[1] <= 0.25


def test_truncated_transfer_is_retried(server: Server, tmp_path: Path):
    result = fetch_source(spec(server.url("truncated", "part-5.jsonl")), str(tmp_path), retry=FAST)
    assert (tmp_path / FETCHED_FILES_DIR / "part-5.jsonl").read_bytes() == server.files["part-5.jsonl"]
    assert server.gets["/truncated/part-5.jsonl"] == 2 and result.counters["retries"] == 1
    assert leftovers(tmp_path) == []


def test_a_download_nothing_vouches_for_fails_naming_the_url_and_the_options(server: Server, tmp_path: Path):
    """No length (HEAD nor GET), no digest, no pin: a body cut by a closed connection reads exactly like
    a whole one, so whole or cut, the download fails (not retried) and nothing is published."""
    for route in ("unsized", "unsized-cut"):
        url = server.url(route, "part-2.jsonl")
        with pytest.raises(FetchError) as info:
            fetch_source(spec(url), str(tmp_path / route), retry=FAST, sleep=lambda s: None)
        received = len(server.files["part-2.jsonl"]) // (2 if route.endswith("-cut") else 1)
        assert str(info.value) == (
            f"{url}: cannot confirm the download is complete ({received:,} bytes received; the server sent no "
            "length or digest, and the source pins no sha256): pin the file's sha256 in the source (sha256:), "
            "or accept it unconfirmed with allow_unsized: true")
        assert "\n" not in str(info.value) and info.value.url == url
        assert server.gets[f"/{route}/part-2.jsonl"] == 1
        assert list((tmp_path / route / FETCHED_FILES_DIR).iterdir()) == [] and leftovers(tmp_path / route) == []


def test_allow_unsized_keeps_the_file_marked_size_unconfirmed(server: Server, tmp_path: Path):
    url = server.url("unsized", "part-2.jsonl")
    result = fetch_source(spec(url, allow_unsized=True), str(tmp_path), retry=FAST)
    got = result.files[0]
    assert (tmp_path / FETCHED_FILES_DIR / "part-2.jsonl").read_bytes() == server.files["part-2.jsonl"]
    assert (got.announced_size, got.size_unconfirmed) == (None, True)
    assert "size_unconfirmed" not in json.loads((tmp_path / PROVENANCE_FILE).read_text())["files"][0]
    # A rerun reuses the kept copy while the source allows it; without allow_unsized it downloads
    # again, and the server still vouches for nothing, so it fails.
    again = fetch_source(spec(url, allow_unsized=True), str(tmp_path), retry=FAST)
    assert again.counters["skipped_existing"] == 1 and again.files[0].size_unconfirmed
    with pytest.raises(FetchError, match="cannot confirm the download is complete"):
        fetch_source(spec(url), str(tmp_path), retry=FAST)
    assert server.gets["/unsized/part-2.jsonl"] == 2


def test_a_pin_confirms_a_download_without_a_length(server: Server, tmp_path: Path):
    data = server.files["part-2.jsonl"]
    ok = fetch_source(spec(server.url("unsized", "part-2.jsonl"), sha256=sha(data)), str(tmp_path / "ok"),
                      retry=FAST)
    assert (ok.files[0].sha256, ok.files[0].size_unconfirmed) == (sha(data), False)
    with pytest.raises(FetchError, match="sha256 mismatch: expected"):
        fetch_source(spec(server.url("unsized-cut", "part-2.jsonl"), sha256=sha(data)), str(tmp_path / "cut"),
                     retry=FAST)


def test_a_chunked_body_vouches_for_itself_and_a_cut_one_is_retried(server: Server, tmp_path: Path):
    """Chunked transfer encoding marks its own end: whole, it is confirmed without a length; cut before
    the last chunk, http.client raises and the transfer is retried, then fails naming the break."""
    url = server.url("chunked", "part-4.jsonl")
    result = fetch_source(spec(url), str(tmp_path / "ok"), retry=FAST)
    assert (tmp_path / "ok" / FETCHED_FILES_DIR / "part-4.jsonl").read_bytes() == server.files["part-4.jsonl"]
    assert (result.files[0].announced_size, result.files[0].size_unconfirmed) == (None, False)
    cut = server.url("chunked-cut", "part-4.jsonl")
    with pytest.raises(FetchError, match=r"failed after 4 attempts: connection broke mid-transfer"):
        fetch_source(spec(cut), str(tmp_path / "cut"), retry=FAST, sleep=lambda s: None)
    assert list((tmp_path / "cut" / FETCHED_FILES_DIR).iterdir()) == []


def test_a_kept_copy_nothing_confirmed_is_outdated_unless_the_source_allows_it():
    """What the download step's recheck reads: a record that says size_unconfirmed, or an older record
    with no announced size (built before such files were refused), is outdated unless the source sets
    allow_unsized or pins the file; a confirmed one never is."""
    url = "https://example.org/web.jsonl"
    old = {"name": "web.jsonl", "uri": url, "size": 10, "sha256": "b" * 64, "announced_size": None}
    unconfirmed = {**old, "size_unconfirmed": True}
    confirmed = {**old, "size_unconfirmed": False}   # chunked, or an MD5
    reason = unconfirmed_copy(spec(url), [unconfirmed])
    assert reason == ("web.jsonl: its size was never confirmed (no length, digest or pin) and the source does not "
                      "set allow_unsized: true")
    assert unconfirmed_copy(spec(url), [old]) == reason
    assert unconfirmed_copy(spec(url), [confirmed]) is None
    assert unconfirmed_copy(spec(url), [{**old, "announced_size": 10}]) is None
    assert unconfirmed_copy(spec(url, allow_unsized=True), [unconfirmed, old]) is None
    assert unconfirmed_copy(spec(url, sha256={"web.jsonl": "b" * 64}), [unconfirmed]) is None


@pytest.mark.parametrize(
    "route,status,text",
    [("missing", 404, "HTTP 404 Not Found"), ("secret", 403, "HTTP 403 Forbidden (access denied)"),
     ("login", 401, "HTTP 401 Unauthorized (authentication required)")],
)
def test_client_errors_fail_fast_naming_url_and_status(server: Server, tmp_path: Path, route, status, text):
    url = server.url(route, "part-0.jsonl")
    delays: list[float] = []
    with pytest.raises(FetchError) as info:
        fetch_source(spec(url), str(tmp_path), retry=FAST, sleep=delays.append)
    assert str(info.value) == f"{url}: {text}"
    assert (info.value.url, info.value.status) == (url, status)
    assert server.gets[f"/{route}/part-0.jsonl"] == 1 and delays == []  # no retries
    assert list((tmp_path / FETCHED_FILES_DIR).iterdir()) == []


def test_retries_run_out(server: Server, tmp_path: Path):
    url = server.url("down", "part-0.jsonl")
    with pytest.raises(FetchError) as info:
        fetch_source(spec(url), str(tmp_path), retry=FAST, sleep=lambda s: None)
    assert str(info.value) == f"{url}: failed after 4 attempts: HTTP 503 Service Unavailable"
    assert server.gets["/down/part-0.jsonl"] == 4


def test_one_bad_file_fails_the_source_and_names_it(server: Server, tmp_path: Path):
    good = [server.url("files", n) for n in sorted(server.files)]
    bad = server.url("missing", "zzz.jsonl")
    with pytest.raises(FetchError, match=f"^{bad}: HTTP 404"):
        fetch_source(spec([*good, bad]), str(tmp_path), workers=2, retry=FAST)
    assert leftovers(tmp_path) == []
    assert not (tmp_path / PROVENANCE_FILE).exists()  # provenance only for a complete source


def test_sha256_pins(server: Server, tmp_path: Path):
    name = "part-3.jsonl"
    url = server.url("files", name)
    data = server.files[name]
    ok = fetch_source(spec(url, sha256=sha(data)), str(tmp_path / "ok"), retry=FAST)
    assert ok.files[0].sha256 == sha(data)

    wrong = "0" * 64
    with pytest.raises(FetchError) as info:
        fetch_source(spec(url, sha256=wrong), str(tmp_path / "bad"), retry=FAST)
    message = str(info.value)
    assert message.startswith(f"{url}: sha256 mismatch: expected {wrong}, got {sha(data)}")
    assert server.gets[f"/files/{name}"] == 2  # mismatch is not retried
    assert list((tmp_path / "bad" / FETCHED_FILES_DIR).iterdir()) == []  # nothing kept, no temp file

    # A dict pins by name; a pin naming no listed file is an error (a file went missing).
    urls = [server.url("files", n) for n in ("part-0.jsonl", "part-1.jsonl")]
    pins = {"part-0.jsonl": sha(server.files["part-0.jsonl"]), urls[1]: sha(server.files["part-1.jsonl"])}
    both = fetch_source(spec(urls, sha256=pins), str(tmp_path / "dict"), retry=FAST)
    assert [f.sha256 for f in both.files] == [pins["part-0.jsonl"], pins[urls[1]]]
    with pytest.raises(FetchError, match="pinned file\\(s\\) not found .*: part-9.jsonl"):
        fetch_source(spec(urls, sha256={**pins, "part-9.jsonl": "1" * 64}), str(tmp_path / "x"), retry=FAST)
    with pytest.raises(FetchError, match="single digest but 2 files"):
        fetch_source(spec(urls, sha256="1" * 64), str(tmp_path / "y"), retry=FAST)


def test_rerun_skips_finished_files_and_reproduces_provenance(server: Server, tmp_path: Path):
    urls = [server.url("files", n) for n in sorted(server.files)]
    out = tmp_path / "out"
    first = fetch_source(spec(urls), str(out), workers=4, retry=FAST)
    before = (out / PROVENANCE_FILE).read_bytes()
    gets = sum(server.gets.values())
    # Lose one file, as if the first run had died before finishing it.
    (out / FETCHED_FILES_DIR / "part-4.jsonl").unlink()
    second = fetch_source(spec(urls), str(out), workers=1, retry=FAST)
    assert sum(server.gets.values()) == gets + 1
    assert second.counters["skipped_existing"] == 5 and second.counters["downloaded_files"] == 1
    assert (out / PROVENANCE_FILE).read_bytes() == before
    assert second.files == first.files


def test_worker_count_does_not_change_outputs(server: Server, tmp_path: Path):
    urls = [server.url("files", n) for n in sorted(server.files)]
    fetch_source(spec(urls), str(tmp_path / "w1"), workers=1, retry=FAST)
    fetch_source(spec(urls), str(tmp_path / "w5"), workers=5, retry=FAST)
    for rel in [PROVENANCE_FILE] + [f"{FETCHED_FILES_DIR}/{n}" for n in server.files]:
        assert (tmp_path / "w1" / rel).read_bytes() == (tmp_path / "w5" / rel).read_bytes()


def test_streaming_never_holds_a_whole_file(tmp_path: Path):
    size = 12 * 2**20
    s = Server({"big.bin": body("big", size)})  # allocated before tracing starts
    s.thread.start()
    try:
        tracemalloc.start()
        try:
            result = fetch_source(spec(s.url("files", "big.bin"), format="text"), str(tmp_path),
                                  chunk_size=64 * 1024, retry=FAST)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    finally:
        s.httpd.shutdown()
        s.httpd.server_close()
        s.thread.join()
    assert result.files[0].size == size
    assert peak < size / 4, f"peak traced memory {peak} bytes for a {size}-byte file"


# ----------------------------------------------------------------------------------------------
# other fsspec protocols (memory://) and local sources


def test_memory_glob_with_nested_names_dotfiles_exclude_and_max_files(mem, tmp_path: Path):
    fs, root = mem
    content = {
        "a/x.jsonl": b'{"text": "1"}\n',
        "a/y.jsonl": b'{"text": "2"}\n',
        "b/x.jsonl": b'{"text": "3"}\n',
        "b/skip.tmp.jsonl": b"junk",
        ".cache/z.jsonl": b"hidden",
        "b/_SUCCESS": b"",
    }
    for rel, data in content.items():
        fs.pipe(f"{root}/{rel}", data)
    uri = f"memory://{root}/**/*.jsonl"
    result = fetch_source(spec(uri, exclude=("*.tmp.jsonl",)), str(tmp_path), retry=FAST)
    assert [f.name for f in result.files] == ["a/x.jsonl", "a/y.jsonl", "b/x.jsonl"]
    for f in result.files:
        assert Path(f.path).read_bytes() == content[f.name]
        assert f.uri == f"memory://{root}/{f.name}" and f.sha256 == sha(content[f.name])
    assert json.loads((tmp_path / PROVENANCE_FILE).read_text())["uri"] == uri

    limited = fetch_source(spec(uri, max_files=2, exclude=("*.tmp.jsonl",)), str(tmp_path / "m"), retry=FAST)
    assert [f.name for f in limited.files] == ["a/x.jsonl", "a/y.jsonl"]

    directory = fetch_source(spec(f"memory://{root}/b"), str(tmp_path / "d"), retry=FAST)
    assert [f.name for f in directory.files] == ["skip.tmp.jsonl", "x.jsonl"]


def test_memory_to_memory_output(mem):
    fs, root = mem
    fs.pipe(f"{root}/in/doc.jsonl", b'{"text": "hello"}\n')
    out = f"memory://{root}/out"
    result = fetch_source(spec(f"memory://{root}/in/doc.jsonl"), out, retry=FAST)
    assert result.files[0].path == f"{out}/{FETCHED_FILES_DIR}/doc.jsonl"
    assert fs.cat(f"{root}/out/{FETCHED_FILES_DIR}/doc.jsonl") == b'{"text": "hello"}\n'
    prov = json.loads(fs.cat(f"{root}/out/{PROVENANCE_FILE}"))
    assert prov["files"] == [{"name": "doc.jsonl", "uri": f"memory://{root}/in/doc.jsonl", "size": 18,
                              "sha256": sha(b'{"text": "hello"}\n')}]
    assert [p for p in fs.find(f"{root}/out") if "/." in p] == []


def test_memory_missing_is_a_clear_error(mem, tmp_path: Path):
    _, root = mem
    with pytest.raises(FetchError, match=f"source 'src': memory://{root}/nope/\\*.jsonl: no files match"):
        fetch_source(spec(f"memory://{root}/nope/*.jsonl"), str(tmp_path), retry=FAST)


def test_local_source_is_read_in_place(tmp_path: Path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.jsonl").write_bytes(b'{"text": "a"}\n')
    (data / "b.jsonl").write_bytes(b'{"text": "bb"}\n')
    out = tmp_path / "out"
    result = fetch_source(spec(str(data / "*.jsonl")), str(out))
    assert result.local and result.out_dir is None
    assert result.paths == [str(data / "a.jsonl"), str(data / "b.jsonl")]
    assert [f.size for f in result.files] == [14, 15] and [f.sha256 for f in result.files] == [None, None]
    assert not out.exists()  # nothing copied, nothing written
    pinned = fetch_source(spec(str(data / "a.jsonl"), sha256=sha(b'{"text": "a"}\n')), str(out))
    assert pinned.files[0].sha256 == sha(b'{"text": "a"}\n')
    with pytest.raises(FetchError, match="sha256 mismatch"):
        fetch_source(spec(str(data / "a.jsonl"), sha256="2" * 64), str(out))


def test_fetch_a_source_from_a_manifest(server: Server, tmp_path: Path):
    m = manifest_from_dict(
        {"sources": [{"name": "web", "uri": [server.url("files", "part-0.jsonl")], "format": "jsonl",
                      "revision": "r1"}]},
        base_dir=str(tmp_path),
    )
    (src,) = m.sources
    assert src.remote
    result = fetch_source(src, str(tmp_path / "dl"), retry=FAST)
    assert result.provenance()["revision"] == "r1" and result.files[0].name == "part-0.jsonl"


def test_is_remote_reexported():
    assert is_remote("https://x/y") and is_remote("memory://x") and not is_remote(os.sep + "x")
