"""Normalize benchmark: datakit's readers vs datatrove's, on the same files, in one run.

Inputs are generated here, deterministically, from this machine's Python:
  jsonl.zst  documents cut from the stdlib's .py sources (one record per ~4 KB piece), several files
  warc.gz    one HTTP response record per HTML page (gzip member per record, like Common Crawl); the
             pages are pydoc's HTML documentation of stdlib modules, classes and functions, wrapped in a
             site template (nav, header, footer) so main-content extraction has boilerplate to remove

Measured, each single-process (one core); the reader measurements alternate ours and the peer for
--repeat rounds and keep each one's best (shared machines drift; alternating exposes both to it):
  jsonl  ours:  read_jsonl (streaming zstd, line provenance, orjson with json's exact semantics) +
                clean_record (blank drop, whitespace cap, xxh3-128 id)
         peer:  datatrove JsonlReader (orjson)
  warc   ours:  read_warc (FastWARC + Resiliparse main-content extraction) + clean_record
         peers, all datatrove WarcReader (warcio), each in its own process:
                + a Resiliparse extractor (the same library and extract_plain_text options as ours:
                  datatrove 0.10 ships none; this file writes the BaseExtractor subclass a datatrove
                  user writes, as datatrove's main branch has it), run as users run extractors, through
                  BaseExtractor.run's per-document timeout sandbox (a child process per worker, each
                  document sent over a pipe and back)
                + the same extractor without the sandbox (extract() called directly per document:
                  faster, but a page that hangs the extractor hangs the worker)
                + Trafilatura (datatrove's own extractor; another algorithm, an order of magnitude
                  slower: one run)
                and the reader alone, to show where the time goes
and, for context, datakit's whole normalize step end to end (read, clean, exact-dedup shuffle, sorted
zstd parquet) on the local backend with --workers workers.

The parse floor (--mb MB of benchmarks/pipeline.py's corpus, its jsonl.zst files, one per 50 MB; 0
skips it; --floor-only skips everything else): CPU-seconds of normalize_source (local backend, --workers
workers, the process tree: the step's process and its workers) next to the floor, zstd decompression
and JSON parsing of the same files alone (one process), each in a fresh interpreter, measured in the
same run. Normalize is measured twice: "cold", the pool started inside the window as when normalize is
the first step of a `datakit run` (each worker's interpreter start and imports included), then "warm",
the same build again on the started pool. The ratios ours / floor are the figure of issue #32 (target
<= 3 at 400 MB).

Records/s and MB/s (MB of the uncompressed input: JSONL text, WARC bytes) are reported for each, plus
ratios ours/peer. One JSON object on stdout.

The peer runs in its own virtualenv (datatrove 0.10 pins xxhash<4, which ours does not):
    python3 -m venv .venv-bench && .venv-bench/bin/pip install -r benchmarks/peer-requirements.txt
        # (python-magic needs the system libmagic1; without zstandard datatrove reads 0 jsonl.zst documents)
    .venv/bin/python -m benchmarks.normalize                       # defaults: ~40 MB jsonl, 1500 pages
    .venv/bin/python -m benchmarks.normalize --jsonl-mb 200 --pages 5000 --repeat 3   # the README's figures
    .venv/bin/python -m benchmarks.normalize --mb 400 --floor-only        # normalize against its parse floor
Without .venv-bench the peer figures are null, with the reason.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import PEER_PYTHON, PEER_SETUP, module_command, peer_import_error

PIECE_CHARS = 4000

# Modules whose pydoc pages we render: importing them has no side effects.
DOC_MODULES = [
    "json", "re", "string", "textwrap", "collections", "functools", "itertools", "heapq", "bisect", "csv",
    "difflib", "fractions", "decimal", "statistics", "random", "pathlib", "shutil", "tempfile", "glob",
    "fnmatch", "argparse", "logging", "enum", "dataclasses", "typing", "abc", "contextlib", "copy", "pprint",
    "reprlib", "calendar", "datetime", "zipfile", "tarfile", "gzip", "bz2", "lzma", "hashlib", "hmac", "base64",
    "binascii", "struct", "codecs", "unicodedata", "locale", "gettext", "html", "html.parser", "xml.dom.minidom",
    "email.message", "email.parser", "http.client", "urllib.parse", "urllib.request", "socket", "selectors",
    "threading", "queue", "sched", "subprocess", "sqlite3", "pickle", "shelve", "configparser", "tomllib",
    "operator", "inspect", "dis", "ast", "tokenize", "traceback", "warnings", "weakref", "types", "numbers",
    "math", "cmath", "array", "uuid", "ipaddress", "secrets", "timeit", "unittest", "doctest",
]

SITE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title} - Python docs mirror</title>
<link rel="stylesheet" href="/static/site.css"><script>window.dataLayer=[];function gtag(){{}}</script></head>
<body><header class="site-header"><a href="/">Docs mirror</a> <nav><ul><li><a href="/library/">Library</a></li>
<li><a href="/tutorial/">Tutorial</a></li><li><a href="/search/">Search</a></li><li><a href="/about/">About</a></li>
</ul></nav></header>
<div class="sidebar"><h3>Related</h3><ul>{related}</ul></div>
<main><article>{body}</article></main>
<footer><p>Copyright 2001 Python Software Foundation. Mirror generated for testing.</p>
<p><a href="/privacy/">Privacy</a> | <a href="/license/">License</a> | <a href="/contact/">Contact</a></p></footer>
</body></html>"""


# ------------------------------------------------------------------------------------------------ inputs


def make_jsonl(out: Path, target_mb: float, files: int = 8) -> dict:
    """Stdlib sources cut into ~4 KB documents, repeated with a varying suffix until target size."""
    import sysconfig

    import zstandard

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    sources = sorted(p for p in stdlib.rglob("*.py") if "test" not in p.parts and "site-packages" not in p.parts)
    pieces: list[tuple[str, str]] = []
    for p in sources:
        try:
            text = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        rel = str(p.relative_to(stdlib))
        for i in range(0, len(text), PIECE_CHARS):
            pieces.append((f"{rel}#{i // PIECE_CHARS}", text[i : i + PIECE_CHARS]))
    target = int(target_mb * 1e6)
    out.mkdir(parents=True, exist_ok=True)
    writers = []
    for k in range(files):
        f = open(out / f"part-{k:03d}.jsonl.zst", "wb")
        writers.append((f, zstandard.ZstdCompressor(level=3).stream_writer(f)))
    raw = records = 0
    rnd = 0
    while raw < target:
        for name, text in pieces:
            line = json.dumps({"text": text if rnd == 0 else f"{text}\n# copy {rnd}", "id": f"{name}@{rnd}",
                               "path": name, "chars": len(text)}) + "\n"
            data = line.encode()
            writers[records % files][1].write(data)
            raw += len(data)
            records += 1
            if raw >= target:
                break
        rnd += 1
    for f, w in writers:
        w.close()
    disk = sum(p.stat().st_size for p in out.iterdir())
    return {"files": files, "records": records, "raw_bytes": raw, "disk_bytes": disk}


def _doc_pages(limit: int) -> list[tuple[str, str]]:
    import importlib
    import inspect
    import pydoc
    import warnings

    h = pydoc.HTMLDoc()
    pages: list[tuple[str, str]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mods = []
        for name in DOC_MODULES:
            try:
                mods.append((name, importlib.import_module(name)))
            except ImportError:
                continue
        for name, mod in mods:
            try:
                pages.append((name, h.document(mod, name)))
            except Exception:
                pass
        for name, mod in mods:
            for attr in sorted(getattr(mod, "__all__", None) or dir(mod)):
                if attr.startswith("_") or len(pages) >= limit:
                    continue
                obj = getattr(mod, attr, None)
                if inspect.isclass(obj) or inspect.isfunction(obj) or inspect.isbuiltin(obj):
                    try:
                        pages.append((f"{name}.{attr}", h.document(obj, attr)))
                    except Exception:
                        pass
    return pages


def make_warc(out: Path, pages: int, files: int = 4) -> dict:
    docs = _doc_pages(pages)
    while len(docs) < pages:  # small stdlib? repeat with a varying title
        docs += [(f"{n} (copy {len(docs)})", b) for n, b in docs[: pages - len(docs)]]
    docs = docs[:pages]
    out.mkdir(parents=True, exist_ok=True)
    handles = [open(out / f"crawl-{k:03d}.warc.gz", "wb") for k in range(files)]
    raw = 0
    for i, (name, body) in enumerate(docs):
        related = "".join(f'<li><a href="/library/{n}.html">{n}</a></li>' for n, _ in docs[max(0, i - 5) : i])
        html = SITE.format(title=name, related=related, body=body).encode("utf-8")
        http = (b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n"
                b"Content-Length: %d\r\n\r\n" % len(html)) + html
        head = (f"WARC/1.0\r\nWARC-Type: response\r\nWARC-Target-URI: https://docs.example/library/{name}.html\r\n"
                f"WARC-Date: 2024-01-01T00:00:00Z\r\nWARC-Record-ID: <urn:uuid:{i:08d}-0000-0000-0000-000000000000>\r\n"
                f"WARC-Identified-Payload-Type: text/html\r\n"
                f"Content-Type: application/http; msgtype=response\r\nContent-Length: {len(http)}\r\n\r\n").encode()
        rec = head + http + b"\r\n\r\n"
        raw += len(rec)
        handles[i % files].write(gzip.compress(rec, compresslevel=6, mtime=0))
    for h in handles:
        h.close()
    disk = sum(p.stat().st_size for p in out.iterdir())
    return {"files": files, "records": len(docs), "raw_bytes": raw, "disk_bytes": disk}


# ------------------------------------------------------------------------------------------------ ours


def _best(fn, repeat: int) -> tuple[float, int]:
    best, n = float("inf"), 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        n = fn()
        best = min(best, time.perf_counter() - t0)
    return best, n


def ours_reader(dirpath: Path, fmt: str, repeat: int) -> dict:
    from collections import Counter

    from datakit.manifest import SourceSpec
    from datakit.normalize.clean import clean_record
    from datakit.normalize.config import NormalizeConfig
    from datakit.sources.readers import read_file  # what the normalize stage reads with
    from datakit.sources.readers import FileRef, RawRecord

    files = sorted(dirpath.iterdir())
    refs = [FileRef(i, str(p), p.name, p.stat().st_size) for i, p in enumerate(files)]
    spec = SourceSpec(name="bench", uri=str(dirpath), format=fmt)
    cfg = NormalizeConfig(html_main_content=True)

    def run() -> int:
        stats: Counter = Counter()
        n = 0
        for ref in refs:
            for raw in read_file(ref, fmt, cfg, stats):
                if isinstance(raw, RawRecord) and clean_record(raw, spec, cfg, stats) is not None:
                    n += 1
        return n

    cpu0 = _cpu()
    wall, n = _best(run, repeat)
    return {"wall_s": wall, "records": n, "cpu_s": round((_cpu() - cpu0) / repeat, 3)}


def _cpu() -> float:
    """CPU seconds of this process and its reaped children (ours forks for big pages)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def ours_pipeline(dirpath: Path, fmt: str, workers: int) -> dict:
    from datakit.manifest import SourceSpec
    from datakit.normalize import NormalizeConfig, normalize_source
    from datakit.shuffle import ExecConfig, list_files

    out = Path(tempfile.mkdtemp(prefix="dk-norm-bench-"))
    try:
        files = list_files(str(dirpath))
        cfg = NormalizeConfig(target_shard_bytes=16 << 20, input_shard_bytes=8 << 20)
        exec_config = ExecConfig(backend="local", max_workers=workers)
        # warm the worker pool so process start-up is not timed
        normalize_source(SourceSpec(name="warm", uri=str(dirpath), format=fmt), files=files[:1],
                         out_dir=str(out / "warm"), cfg=cfg, exec_config=exec_config)
        t0 = time.perf_counter()
        res = normalize_source(SourceSpec(name="bench", uri=str(dirpath), format=fmt), files=files,
                               out_dir=str(out / "run"), cfg=cfg, exec_config=exec_config)
        wall = time.perf_counter() - t0
        return {"wall_s": wall, "records": res.counters["records_out"] + res.counters["dups"],
                "workers": workers, "shards": res.num_shards}
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _tree_cpu() -> float:
    """CPU seconds of this process and every live descendant (the local backend's pool workers)."""
    import psutil

    me = psutil.Process()
    procs = [me, *me.children(recursive=True)]
    return sum(t.user + t.system for t in (p.cpu_times() for p in procs))


def floor_child(kind: str, dirpath: str, workers: int) -> None:
    """In a fresh interpreter: the parse floor (zstd + JSON of every line) or normalize, cold then warm."""
    files = sorted(Path(dirpath).glob("*.jsonl.zst"))
    if kind == "parse":
        import orjson
        import zstandard

        cpu0, n = _cpu(), 0
        for f in files:
            with open(f, "rb") as fh, zstandard.ZstdDecompressor().stream_reader(fh) as r:
                for line in io.BufferedReader(r, 1 << 20):
                    orjson.loads(line)
                    n += 1
        print(json.dumps({"cpu_s": round(_cpu() - cpu0, 3), "records": n}))
        return
    from datakit.manifest import SourceSpec
    from datakit.normalize import normalize_source
    from datakit.shuffle import ExecConfig, list_files

    spec = SourceSpec(name="corpus", uri=dirpath, format="jsonl", text_field="text", id_field="id")
    listed = list_files(f"{dirpath}/*.jsonl.zst")
    out: dict = {}
    for run in ("cold", "warm"):
        dst = Path(tempfile.mkdtemp(prefix="dk-norm-floor-"))
        try:
            cpu0, t0 = _tree_cpu(), time.perf_counter()
            res = normalize_source(spec, files=listed, out_dir=str(dst),
                                   exec_config=ExecConfig(backend="local", max_workers=workers))
            out[run] = {"cpu_s": round(_tree_cpu() - cpu0, 3), "wall_s": round(time.perf_counter() - t0, 3),
                        "parts": res.num_shards, "records": res.counters["records_in"]}
        finally:
            shutil.rmtree(dst, ignore_errors=True)
    print(json.dumps(out))


def parse_floor(work: Path, mb: float, workers: int) -> dict:
    """Normalize's CPU-seconds against its parse floor on the pipeline benchmark's corpus (see the doc)."""
    from benchmarks import _pipeline_corpus as corpus

    corpus_dir, stamp = work / "floor-corpus", work / "floor-corpus.json"
    params = {"mb": mb, "version": corpus.VERSION}
    if stamp.exists() and json.loads(stamp.read_text()) == params:  # --work-dir: build once, measure often
        info = corpus.CorpusInfo.load(work / "truth.json")
    else:
        info = corpus.build(corpus_dir, mb, max(2, round(mb / 50)))
        stamp.write_text(json.dumps(params))

    def child(kind: str) -> dict:
        cmd = module_command(sys.executable, "normalize", "--floor-child", kind, "--dir", str(corpus_dir),
                             "--workers", str(workers))
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        return json.loads(proc.stdout.strip().splitlines()[-1])

    floor, ours = child("parse"), child("normalize")
    return {"mb": info.mb, "files": len(info.files), "workers": workers, "floor": floor, "normalize": ours,
            "ratio_cold": round(ours["cold"]["cpu_s"] / floor["cpu_s"], 2),
            "ratio_warm": round(ours["warm"]["cpu_s"] / floor["cpu_s"], 2)}


# ------------------------------------------------------------------------------------------------ peer (runs in .venv-bench)


def peer_main(kind: str, dirpath: str) -> None:
    import logging
    from importlib.metadata import version

    from datatrove.utils.logging import logger

    logger.remove()
    logging.disable(logging.WARNING)
    if kind == "jsonl":
        from datatrove.pipeline.readers import JsonlReader

        def run() -> int:
            reader = JsonlReader(dirpath, glob_pattern="*.jsonl.zst", compression="infer")
            return sum(1 for _ in reader.run())
    elif kind == "warc-read":
        from datatrove.pipeline.readers import WarcReader

        def run() -> int:
            return sum(1 for _ in WarcReader(dirpath, glob_pattern="*.warc.gz").run())
    elif kind in ("warc-resiliparse", "warc-resiliparse-nosandbox"):
        from datatrove.pipeline.readers import WarcReader

        extractor = _resiliparse_extractor()
        if kind == "warc-resiliparse":
            def run() -> int:
                reader = WarcReader(dirpath, glob_pattern="*.warc.gz")
                return sum(1 for _ in extractor.run(reader.run()))
        else:
            def run() -> int:
                n = 0
                for doc in WarcReader(dirpath, glob_pattern="*.warc.gz").run():
                    try:
                        doc.text = extractor.extract(doc.text)
                    except Exception:
                        continue
                    n += bool(doc.text)
                return n
    else:
        from datatrove.pipeline.extractors import Trafilatura
        from datatrove.pipeline.readers import WarcReader

        def run() -> int:
            reader = WarcReader(dirpath, glob_pattern="*.warc.gz")
            # generous per-document timeout: a slow shared machine must not turn into dropped pages
            extractor = Trafilatura(favour_precision=True, timeout=10.0)
            return sum(1 for _ in extractor.run(reader.run()))

    cpu0 = _cpu()
    wall, n = _best(run, 1)
    # cpu_s counts the sandbox's child processes too (reaped when the extractor's run ends)
    print(json.dumps({"wall_s": wall, "records": n, "cpu_s": round(_cpu() - cpu0, 3),
                      "version": version("datatrove")}))


def _resiliparse_extractor():
    """datatrove 0.10 has no Resiliparse extractor; this is the subclass a datatrove user writes (and
    datatrove's main branch ships): `extract()` calls `extract_plain_text`, here with the options
    datakit's reader passes (preserve_formatting, main_content, Resiliparse's defaults for the rest),
    so both sides extract the same text from the same pages."""
    from datatrove.pipeline.extractors.base import BaseExtractor

    class Resiliparse(BaseExtractor):
        name = "⛏ Resiliparse"
        _requires_dependencies = ["resiliparse"]

        def __init__(self, main_content: bool = True, preserve_formatting: bool = True, timeout: float = 10.0):
            # timeout: generous, like the Trafilatura run's; the sandbox costs the same whatever its value
            super().__init__(timeout)
            self.main_content = main_content
            self.preserve_formatting = preserve_formatting

        def extract(self, text: str) -> str:
            from resiliparse.extract.html2text import extract_plain_text

            return extract_plain_text(text, preserve_formatting=self.preserve_formatting,
                                      main_content=self.main_content)

    return Resiliparse()


# What the peer's runs import (every --peer kind): checked in its venv before any side runs, so a venv that
# lacks one fails in one line at once (a missing venv is not an error: the peer's figures are then null).
PEER_IMPORTS = ("import datatrove.pipeline.readers, datatrove.pipeline.extractors, datatrove.utils.logging, "
                "resiliparse.extract.html2text, trafilatura, zstandard, orjson")


def run_peer(kind: str, dirpath: Path) -> dict:
    if not PEER_PYTHON.exists():
        return {"error": f"{PEER_PYTHON} not found; see this file's docstring to create .venv-bench"}
    proc = subprocess.run(module_command(PEER_PYTHON, "normalize", "--peer", kind, "--dir", str(dirpath)),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def interleaved(ours, peer_kinds: list[str], dirpath: Path, rounds: int) -> tuple[dict, list[dict]]:
    """Alternate ours and the peers, keeping each one's best round: on a shared machine the load drifts,
    and alternating exposes all of them to the same drift."""
    best_ours: dict | None = None
    best_peers: list[dict | None] = [None] * len(peer_kinds)
    for _ in range(rounds):
        o = ours()
        if best_ours is None or o["wall_s"] < best_ours["wall_s"]:
            best_ours = o
        for i, kind in enumerate(peer_kinds):
            p = run_peer(kind, dirpath)
            if "error" in p:
                best_peers[i] = p
            elif best_peers[i] is None or p["wall_s"] < best_peers[i]["wall_s"]:
                best_peers[i] = p
    return best_ours, best_peers


# ------------------------------------------------------------------------------------------------ report


def _rates(m: dict | None, info: dict) -> dict | None:
    if not m or "wall_s" not in m:
        return m
    m = {k: v for k, v in m.items() if k != "version"}
    return {**m, "records_per_s": round(m["records"] / m["wall_s"], 1),
            "MB_per_s": round(info["raw_bytes"] / 1e6 / m["wall_s"], 2), "wall_s": round(m["wall_s"], 3)}


def _ratio(a: dict | None, b: dict | None) -> float | None:
    if not a or not b or "records_per_s" not in a or "records_per_s" not in b:
        return None
    return round(a["records_per_s"] / b["records_per_s"], 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jsonl-mb", type=float, default=40.0, help="uncompressed JSONL size to generate")
    ap.add_argument("--pages", type=int, default=1500, help="HTML pages in the WARC files")
    ap.add_argument("--repeat", type=int, default=3,
                    help="rounds (ours and peer alternating, best kept) for the reader measurements")
    ap.add_argument("--workers", type=int, default=2, help="workers for the end-to-end normalize run")
    ap.add_argument("--work-dir", default=None, help="where to generate inputs (default: a temp dir)")
    ap.add_argument("--mb", type=float, default=0.0,
                    help="MB of the pipeline corpus for the parse-floor comparison (0: skip; issue #32: 400)")
    ap.add_argument("--floor-only", action="store_true", help="only the parse-floor comparison (with --mb)")
    ap.add_argument("--floor-child", choices=["parse", "normalize"], help=argparse.SUPPRESS)
    ap.add_argument("--peer", choices=["jsonl", "warc-read", "warc-extract", "warc-resiliparse",
                                       "warc-resiliparse-nosandbox"], help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.peer:
        peer_main(args.peer, args.dir)
        return
    if args.floor_child:
        floor_child(args.floor_child, args.dir, args.workers)
        return
    missing = None if args.floor_only else peer_import_error(PEER_PYTHON, PEER_IMPORTS, PEER_SETUP)
    if missing:
        raise SystemExit(missing)
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="dk-norm-bench-in-"))
    try:
        if args.floor_only:
            print(json.dumps({"parse_floor": parse_floor(work, args.mb, args.workers),
                              "load_average_after": os.getloadavg()}, indent=1))
            return
        jinfo = make_jsonl(work / "jsonl", args.jsonl_mb)
        winfo = make_warc(work / "warc", args.pages)
        result: dict = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
                        "inputs": {"jsonl_zst": jinfo, "warc_gz": winfo}}

        ours_j, (peer_j,) = interleaved(lambda: ours_reader(work / "jsonl", "jsonl", 1), ["jsonl"],
                                        work / "jsonl", args.repeat)
        ours_w, (peer_w_res, peer_w_nosb, peer_w_read) = interleaved(
            lambda: ours_reader(work / "warc", "warc", 1),
            ["warc-resiliparse", "warc-resiliparse-nosandbox", "warc-read"], work / "warc", args.repeat)
        peer_w_ext = run_peer("warc-extract", work / "warc")  # 20x+ slower: one run is plenty
        version = (peer_j or {}).get("version")
        ours_j, ours_w = _rates(ours_j, jinfo), _rates(ours_w, winfo)
        peer_j, peer_w_read, peer_w_ext = (_rates(peer_j, jinfo), _rates(peer_w_read, winfo),
                                           _rates(peer_w_ext, winfo))
        peer_w_res, peer_w_nosb = _rates(peer_w_res, winfo), _rates(peer_w_nosb, winfo)
        result["jsonl_zst"] = {
            "ours_read_clean_1proc": ours_j,
            "datatrove_JsonlReader_1proc": peer_j,
            "ratio_ours_over_peer": _ratio(ours_j, peer_j),
            "ours_normalize_end_to_end": _rates(ours_pipeline(work / "jsonl", "jsonl", args.workers), jinfo),
        }
        result["warc_html"] = {
            "ours_read_extract_clean_1proc": ours_w,  # FastWARC + Resiliparse, bounded per page
            "datatrove_WarcReader_Resiliparse_sandbox_1proc": peer_w_res,
            "datatrove_WarcReader_Resiliparse_nosandbox_1proc": peer_w_nosb,
            "datatrove_WarcReader_Trafilatura_1proc": peer_w_ext,
            "datatrove_WarcReader_only_1proc": peer_w_read,
            "ratio_ours_over_resiliparse_sandbox": _ratio(ours_w, peer_w_res),
            "ratio_ours_over_resiliparse_nosandbox": _ratio(ours_w, peer_w_nosb),
            "ratio_ours_over_trafilatura": _ratio(ours_w, peer_w_ext),
            "ours_normalize_end_to_end": _rates(ours_pipeline(work / "warc", "warc", args.workers), winfo),
        }
        if args.mb:
            result["parse_floor"] = parse_floor(work, args.mb, args.workers)
        result["peer_version"] = {"datatrove": version}
        result["load_average_after"] = os.getloadavg()
        print(json.dumps(result, indent=1))
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
