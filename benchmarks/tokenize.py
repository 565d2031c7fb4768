"""Tokenize benchmark: end-to-end parquet -> token cache throughput against the raw encoder limits and
datatrove's DocumentTokenizer on the same files, plus training-reader throughput. Prints JSON.

What is measured (each pipeline in its own fresh subprocess, same tokenizer, same thread count):

- ``raw_limit``: ``Tokenizer.encode_batch_fast`` (no offsets) over the very same texts, already in
  memory, cut at whitespace exactly as datakit cuts them (``to_pieces``: the pieces both engines and the
  pipeline encode), in batches of about the size datakit uses: the HF engine's limit here.
- ``raw_limit_tiktoken``: the same pieces through the tiktoken engine (``datakit.tokenize.engine``, the
  encoding converted from the same tokenizer.json) with all threads (the first slice on the calling
  thread, the others on kept threads, as the engine runs them), and ``raw_limit_tiktoken_1_thread`` with
  one: tiktoken's limit, and which thread count gives the most tokens per CPU-second.
- ``datakit``: ``tokenize_source`` on the parquet parts -> train/validation caches (read parquet,
  split long texts, encode, EOS, split by id hash, write .npy + ledger), local engine backend, with
  ``engine="auto"`` (tiktoken, checked against HF on a sample of every chunk); ``datakit_engine_hf`` is
  the same step with ``engine="hf"``, and ``step_engine_speedup`` compares the two (wall and CPU).
  ``cache_bytes_identical_auto_vs_hf`` compares the two caches file by file, byte for byte (tokens,
  offsets, markers, stats, ledgers, tokenizer copy), in every repeat.
- ``step_vs_hf_raw_cpu`` (and ``_wall``, and ``step_vs_hf_raw`` with each repeat's pair): the issue's
  target figure, the whole ``datakit`` step's tokens per CPU-second (per second) over ``raw_limit``'s:
  the step with every overhead (interpreters, imports, worker, parquet, HF check, EOS, .npy, ledger)
  against HF's encoder alone on the same pieces, already in memory.
  ``per_cpu_s_excluding_fixed_cost`` subtracts the step's fixed cost (its one-document run, below) from
  its CPU first: the rate a corpus much larger than this benchmark's ~40 MB approaches.
- ``datatrove``: ``ParquetReader -> DocumentTokenizer`` under ``LocalPipelineExecutor`` (its
  fastest setting: ``shuffle_documents=False``), given our tokenizer.json path and EOS token.
- ``reader``: ``TrainBatches`` (Feistel + 2-source block mixture) served tokens/s.

Throughput counts document tokens without EOS for every contender, so numbers compare like for like.
Peak memory is PSS, sampled every 50 ms over the whole process tree (driver + engine workers), summed
(benchmarks/_pipeline_measure.py: a page shared by N processes counts 1/N in each).
Besides wall-clock tokens/s (what the issue's target is stated in), every contender reports tokens per
CPU-second (``cpu_efficiency_vs_raw``): for datakit and datatrove the CPU of the whole process tree from
start to exit (interpreter start, imports, worker processes included), for the raw limit only its encode
calls. On a machine shared with other jobs wall time swings with their load, CPU time much less, so
that ratio is the steadier (and stricter) measure of overhead. The same datakit pipeline is also run on a
one-document source to measure its fixed cost (interpreter, imports, tokenizer load and conversion, the
HF check of its one piece); a source that small runs in the driver (``small_job_config``), so the
worker's own start (~0.35 CPU-s of interpreter and imports) and its first chunk's broader HF check are
not in it. ``cpu_efficiency_vs_raw_excluding_fixed_cost`` is the per-token efficiency a large corpus
approaches.

Corpus: the Python standard library's .py sources plus /usr/share/common-licenses (always present,
nothing downloaded; about 40 MB), topped up for a bigger ``--mb`` with /usr/share/doc, man pages and the
Debian Reference (cut into documents as benchmarks/filters.py does), written as a consolidated source of
``--parts`` parquet files. The step's fixed cost (two interpreters and their imports, tokenizer loads,
each process's broad first HF check: about 1 CPU-s in all) is about a quarter of the step at 40 MB, so
the issue's target is read at ``--mb 200`` too.

Measured (2-core machine, 1 worker x 2 threads, vocab 16k, one run each, 2026-11-26): at the default
40 MB (2,814 documents, 10.8M tokens, machine lightly loaded) the step 3.01M tokens per CPU-second
against raw tiktoken's 3.50M (2 threads) and 4.59M (1 thread): 86% (99.7% without the 0.50 CPU-s fixed
cost), 2.82x raw HF, 4.87x datatrove's DocumentTokenizer (0.62M); before the worker stopped importing
pandas and encoding on a new thread per shard, the same run gave 2.30M (66%). At ``--mb 200
--skip-datatrove`` (17,985 documents, 43.1M tokens, machine heavily loaded): 3.63M against 3.43M and
3.82M: 106% of raw tiktoken (2 threads), 95% of 1 thread, 5.05x raw HF; caches byte-identical.

Setup:
    .venv/bin/pip install -e .                 # datakit's own env (already has tokenizers, pyarrow)
    python3 -m venv .venv-bench && .venv-bench/bin/pip install -r benchmarks/peer-requirements.txt
                                               # the peers' env, separate: datatrove 0.10 wants xxhash<4
    .venv/bin/python -m benchmarks.tokenize --mb 40 --threads 2 --workers 1
Without .venv-bench the datatrove row is reported as skipped; without zstandard in it, datatrove 0.10
reads 0 documents (check the datatrove row's ``docs``).
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import PEER_PYTHON, PEER_SETUP, module_command, peer_import_error, tokenizer_dir
from datakit.core.layout import TOKENIZER_FILE, DocumentsDir


# ------------------------------------------------------------------------------------------------ children


def _child_raw(args: dict) -> dict:
    """The encoder alone on datakit's pieces, in memory: HF ``encode_batch_fast`` or the tiktoken engine."""
    import pyarrow.parquet as pq

    from datakit.tokenize.encode import to_pieces
    from datakit.tokenize.engine import choose, tiktoken_ids
    from datakit.tokenize.tokenizer import load_tokenizer

    tok, _ = load_tokenizer(args["tokenizer"])
    texts = []
    for p in sorted(os.listdir(args["parts"])):
        texts.extend(pq.read_table(os.path.join(args["parts"], p), columns=["text"]).column(0).to_pylist())
    batches, cur, size = [], [], 0
    for t in texts:
        cur.append(t)
        size += len(t)
        if size >= args["batch_bytes"]:
            batches.append(cur)
            cur, size = [], 0
    if cur:
        batches.append(cur)
    batches = [to_pieces(b)[0] for b in batches]  # the very pieces tokenize_source encodes
    if args["engine"] == "tiktoken":  # the engine's encoder alone, without the step's sampled HF check
        enc, threads = choose(tok, "tiktoken").encoding, args["tiktoken_threads"]

        def encode(pieces: list[str]) -> list:
            return tiktoken_ids(enc, pieces, threads)
    else:
        def encode(pieces: list[str]) -> list:
            return tok.encode_batch_fast(pieces, add_special_tokens=False)
    encode(["warm up the thread pool"] * 64)
    t0, c0 = time.perf_counter(), time.process_time()
    n = 0
    for b in batches:
        n += sum(len(e) for e in encode(b))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"tokens": n, "docs": len(texts), "pieces": sum(map(len, batches)), "wall_s": wall, "cpu_s": cpu}


def _child_datakit(args: dict) -> dict:
    from datakit.shuffle import ExecConfig
    from datakit.tokenize.tokenize_step import tokenize_source

    cfg = ExecConfig(backend="local", max_workers=args["workers"])
    t0 = time.perf_counter()
    res = tokenize_source("bench", args["source"], args["out"], args["tokenizer"], validation_fraction=0.01,
                          exec_config=cfg, threads=args["threads_per_worker"], batch_bytes=args["batch_bytes"],
                          engine=args.get("engine", "auto"))
    wall = time.perf_counter() - t0
    docs = sum(s["docs"] for s in res.splits.values())
    tokens = sum(s["tokens"] for s in res.splits.values())
    return {"tokens": tokens - docs, "tokens_with_eos": tokens, "docs": docs, "wall_s": wall,
            "engine": res.engine, "engine_checked_pieces": res.engine_checked_pieces,
            "engine_mismatches": res.engine_mismatches,
            "train_dir": res.split_dir("train"), "validation_dir": res.split_dir("validation")}


# what the peer's side imports (ParquetReader needs pyarrow, which datatrove does not require)
PEER_IMPORTS = "import datatrove.pipeline.readers, datatrove.pipeline.tokens, pyarrow"

_DATATROVE = r"""
import json, os, sys, time
args = json.loads(sys.argv[1])
from datatrove.executor.local import LocalPipelineExecutor
from datatrove.pipeline.readers import ParquetReader
from datatrove.pipeline.tokens import DocumentTokenizer
ex = LocalPipelineExecutor(
    pipeline=[
        ParquetReader(args["parts"], glob_pattern="*.parquet", text_key="text", id_key="id"),
        DocumentTokenizer(args["out"], tokenizer_name_or_path=args["tokenizer"], eos_token=args["eos"],
                          shuffle_documents=False),
    ],
    tasks=args["tasks"], workers=args["workers"], logging_dir=args["logs"], skip_completed=False,
)
t0 = time.perf_counter()
ex.run()
wall = time.perf_counter() - t0
tokens = 0
docs = 0
for name in os.listdir(args["out"]):
    p = os.path.join(args["out"], name)
    if name.endswith(".ds"):
        tokens += os.path.getsize(p) // 2
    elif name.endswith(".ds.index"):
        docs += os.path.getsize(p) // 8
print("RESULT " + json.dumps({"tokens": tokens - docs, "tokens_with_eos": tokens, "docs": docs, "wall_s": wall}))
"""


# ------------------------------------------------------------------------------------------------ driver


def _measure(cmd: list[str], env: dict) -> tuple[dict, int, int, float]:
    """Run a child; return (its RESULT json, peak summed PSS of its tree, peak single-process PSS, CPU
    seconds of the whole tree), sampled by benchmarks/_pipeline_measure.py every 50 ms. CPU is the larger
    of the sampled total (every process at its last sample) and the reaped children's rusage."""
    from benchmarks import _pipeline_measure as measure

    tl = measure.run_sampled(cmd, env, os.getcwd(), timeout=24 * 3600)
    if tl.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} failed ({tl.returncode}):\n{tl.stderr[-4000:]}")
    cpu = max(tl.reaped_cpu_s, tl.samples[-1].cpu_s if tl.samples else 0.0)
    line = [ln for ln in tl.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    peak_sum = max((x.pss for x in tl.samples), default=0)
    peak_one = max((x.largest for x in tl.samples), default=0)
    return json.loads(line[len("RESULT "):]), peak_sum, peak_one, cpu


def _run_child(mode: str, args: dict, env: dict) -> dict:
    cmd = module_command(sys.executable, "tokenize", "--child", mode, json.dumps(args))
    res, peak_sum, peak_one, cpu = _measure(cmd, env)
    if mode != "raw":  # e2e contenders: the whole process tree, start to exit; raw: encode calls only
        res["cpu_s"] = cpu
    res["peak_pss_mb"] = round(peak_sum / 2**20, 1)
    res["peak_pss_one_process_mb"] = round(peak_one / 2**20, 1)
    _rates(res)
    return res


def _same_bytes(a: str, b: str) -> dict:
    """Whether two cache trees hold the same relative file names with the same bytes (every file: token
    and offset .npy, shard markers, stats, ledgers, the tokenizer copy)."""
    def files(root: str) -> set[str]:
        return {os.path.relpath(os.path.join(d, n), root) for d, _, names in os.walk(root) for n in names}

    fa, fb = files(a), files(b)
    differ = sorted(fa ^ fb) + sorted(f for f in fa & fb
                                      if not filecmp.cmp(os.path.join(a, f), os.path.join(b, f), shallow=False))
    return {"identical": not differ and bool(fa), "files": len(fa),
            "bytes": sum(os.path.getsize(os.path.join(a, f)) for f in fa), "differing": differ[:10]}


def _rates(res: dict) -> None:
    res["tokens_per_s"] = round(res["tokens"] / res["wall_s"])
    res["tokens_per_cpu_s"] = round(res["tokens"] / res["cpu_s"])


def _prepare(work: str, mb: int, parts: int, vocab: int) -> tuple[str, str]:
    from datakit.tokenize.fixtures import license_texts, stdlib_texts, write_source
    from datakit.tokenize.tokenizer import train_tokenizer

    source = os.path.join(work, f"source-{mb}mb-{parts}p")
    if not os.path.isdir(source):
        texts = stdlib_texts(mb * 1_000_000) + license_texts()
        texts += _more_real_text(work, mb * 1_000_000 - sum(len(t.encode("utf-8", "surrogatepass")) for t in texts))
        write_source(source + ".tmp", texts, parts, source="stdlib")
        os.replace(source + ".tmp", source)
    tok_file = str(tokenizer_dir(work, vocab) / TOKENIZER_FILE)
    if not os.path.exists(tok_file):
        train_tokenizer([source], os.path.dirname(tok_file), vocab_size=vocab, max_bytes=10_000_000)
    return source, tok_file


def _more_real_text(work: str, short_bytes: int) -> list[str]:
    """What the stdlib and licenses (~40 MB) lack of a bigger --mb: real text from /usr/share/doc, man
    pages and the Debian Reference, cut into documents as benchmarks/filters.py builds its corpus."""
    if short_bytes <= 1_000_000:
        return []
    from benchmarks import filters

    path = os.path.join(work, "more-text.jsonl")
    filters.build_corpus(Path(path), short_bytes / 1e6)
    with open(path, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    os.remove(path)
    return texts


def _reader_bench(train_dir: str, val_dir: str, seq_len: int, batch_size: int, steps: int) -> dict:
    from datakit.tokenize.reader import TrainBatches

    tb = TrainBatches({"a": train_dir, "b": val_dir}, {"a": 0.8, "b": 0.2}, seq_len=seq_len,
                      batch_size=batch_size, seed=0)
    tb.batch(0)
    t0 = time.perf_counter()
    for s in range(1, steps + 1):
        tb.batch(s)
    wall = time.perf_counter() - t0
    return {
        "seq_len": seq_len, "batch_size": batch_size, "steps": steps,
        "train_batches_per_s": round(steps / wall, 1),
        "train_tokens_per_s": round(steps * tb.tokens_per_batch / wall),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=40, help="corpus size in MB of text (default 40)")
    ap.add_argument("--parts", type=int, default=8, help="parquet parts = engine tasks (default 8)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="total tokenizer threads")
    ap.add_argument("--workers", type=int, default=1, help="engine worker processes (threads split among them)")
    ap.add_argument("--vocab", type=int, default=16384)
    ap.add_argument("--batch-bytes", type=int, default=None, help="datakit's default when omitted")
    ap.add_argument("--repeats", type=int, default=1, help="runs per contender; the best is reported")
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "datakit-bench-tokenize"))
    ap.add_argument("--skip-datatrove", action="store_true")
    ap.add_argument("--reader-steps", type=int, default=200)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.child:
        mode, payload = a.child
        fn = {"raw": _child_raw, "datakit": _child_datakit}[mode]
        print("RESULT " + json.dumps(fn(json.loads(payload))), flush=True)
        return

    if not a.skip_datatrove:  # before any side runs: a venv that lacks a module fails now, in one line
        missing = peer_import_error(PEER_PYTHON, PEER_IMPORTS, PEER_SETUP)
        if missing:
            raise SystemExit(missing)
    os.makedirs(a.work, exist_ok=True)
    t0 = time.perf_counter()
    source, tokenizer = _prepare(a.work, a.mb, a.parts, a.vocab)
    parts_dir = DocumentsDir(source).main
    corpus_bytes = sum(os.path.getsize(os.path.join(parts_dir, p)) for p in os.listdir(parts_dir))
    per_worker = max(1, a.threads // a.workers)
    env = dict(os.environ, RAYON_NUM_THREADS=str(per_worker), TOKENIZERS_PARALLELISM="true")
    raw_env = dict(os.environ, RAYON_NUM_THREADS=str(per_worker * a.workers), TOKENIZERS_PARALLELISM="true")
    result: dict = {
        "benchmark": "tokenize", "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "corpus": {"mb_text_requested": a.mb, "parts": a.parts, "parquet_bytes": corpus_bytes, "vocab": a.vocab},
        "threads_total": per_worker * a.workers, "workers": a.workers, "threads_per_worker": per_worker,
        "prepare_s": round(time.perf_counter() - t0, 1),
    }

    # the raw limit encodes batches of the size datakit picks by default for this thread count
    raw_batch = a.batch_bytes or max(1 << 20, min(8 << 20, per_worker * (512 << 10)))
    raw_args = {"tokenizer": tokenizer, "parts": parts_dir, "batch_bytes": raw_batch, "engine": "hf"}
    tt_args = {**raw_args, "engine": "tiktoken", "tiktoken_threads": per_worker * a.workers}
    run_datatrove = not a.skip_datatrove and os.path.exists(PEER_PYTHON)
    raw_runs, dk_runs, dt_runs, fixed_runs, tt_runs, tt1_runs, dkhf_runs = [], [], [], [], [], [], []
    same_bytes: list[dict] = []
    tiny = os.path.join(a.work, "source-tiny")
    if not os.path.isdir(tiny):
        from datakit.tokenize.fixtures import write_source

        write_source(tiny, ["a single short document"], 1)
    # Interleaved repeats, best of each: on a shared machine load drifts, and interleaving exposes every
    # contender to the same drift.
    for _ in range(a.repeats):
        raw_runs.append(_run_child("raw", raw_args, raw_env))
        tt_runs.append(_run_child("raw", tt_args, raw_env))
        tt1_runs.append(_run_child("raw", {**tt_args, "tiktoken_threads": 1}, raw_env))
        for engine, runs in (("auto", dk_runs), ("hf", dkhf_runs)):
            out = os.path.join(a.work, f"cache-datakit-{engine}")
            shutil.rmtree(out, ignore_errors=True)
            runs.append(_run_child("datakit", {
                "source": source, "out": out, "tokenizer": tokenizer, "workers": a.workers,
                "threads_per_worker": per_worker, "batch_bytes": a.batch_bytes, "engine": engine}, env))
        same_bytes.append(_same_bytes(os.path.join(a.work, "cache-datakit-hf"),
                                      os.path.join(a.work, "cache-datakit-auto")))
        # the same pipeline on a one-document source: its fixed cost (interpreters, imports, worker
        # start, tokenizer loads), which a bigger corpus amortises
        out = os.path.join(a.work, "cache-tiny")
        shutil.rmtree(out, ignore_errors=True)
        fixed_runs.append(_run_child("datakit", {
            "source": tiny, "out": out, "tokenizer": tokenizer, "workers": a.workers,
            "threads_per_worker": per_worker, "batch_bytes": a.batch_bytes}, env))
        if run_datatrove:
            out = os.path.join(a.work, "cache-datatrove")
            logs = os.path.join(a.work, "logs-datatrove")
            shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(logs, ignore_errors=True)
            args = {"parts": parts_dir, "out": out, "logs": logs, "tokenizer": tokenizer, "eos": "<|endoftext|>",
                    "tasks": a.parts, "workers": a.workers}
            r, peak_sum, peak_one, cpu = _measure([str(PEER_PYTHON), "-c", _DATATROVE, json.dumps(args)], env)
            r.update(cpu_s=cpu, peak_pss_mb=round(peak_sum / 2**20, 1),
                     peak_pss_one_process_mb=round(peak_one / 2**20, 1))
            _rates(r)
            dt_runs.append(r)

    def best(runs: list[dict]) -> dict:
        b = dict(max(runs, key=lambda r: r["tokens_per_s"]))
        b["all_tokens_per_s"] = [r["tokens_per_s"] for r in runs]
        b["best_tokens_per_cpu_s"] = max(r["tokens_per_cpu_s"] for r in runs)
        return b

    raw = result["raw_limit"] = best(raw_runs)
    tt = result["raw_limit_tiktoken"] = best(tt_runs)
    result["raw_limit_tiktoken_1_thread"] = best(tt1_runs)
    for entry in (tt, result["raw_limit_tiktoken_1_thread"]):
        entry["vs_raw_limit_hf"] = {"wall": round(entry["tokens_per_s"] / raw["tokens_per_s"], 2),
                                    "per_cpu_s": round(entry["best_tokens_per_cpu_s"] / raw["best_tokens_per_cpu_s"], 2)}
    dk = result["datakit"] = best(dk_runs)
    dkhf = result["datakit_engine_hf"] = best(dkhf_runs)

    def compare(entry: dict, runs: list[dict], limit: dict, limit_runs: list[dict]) -> None:
        """Against the raw limit of the engine that ran (HF's for HF-based contenders)."""
        entry["fraction_of_raw_limit"] = round(entry["tokens_per_s"] / limit["tokens_per_s"], 3)
        # each repeat ran right after its raw run: the paired ratios see similar machine load
        paired = sorted(r["tokens_per_s"] / q["tokens_per_s"] for r, q in zip(runs, limit_runs))
        entry["paired_fractions_of_raw"] = [round(x, 3) for x in paired]
        entry["median_paired_fraction_of_raw"] = round(paired[len(paired) // 2], 3)
        entry["cpu_efficiency_vs_raw"] = round(entry["best_tokens_per_cpu_s"] / limit["best_tokens_per_cpu_s"], 3)

    compare(dk, dk_runs, tt, tt_runs)
    compare(dkhf, dkhf_runs, raw, raw_runs)
    result["step_engine_speedup"] = {
        "engine": dk["engine"], "wall_s": {"hf": round(dkhf["wall_s"], 2), "tiktoken": round(dk["wall_s"], 2)},
        "cpu_s": {"hf": round(dkhf["cpu_s"], 2), "tiktoken": round(dk["cpu_s"], 2)},
        "wall": round(dk["tokens_per_s"] / dkhf["tokens_per_s"], 2),
        "per_cpu_s": round(dk["best_tokens_per_cpu_s"] / dkhf["best_tokens_per_cpu_s"], 2),
        "same_tokens": dk["tokens"] == dkhf["tokens"],
    }
    # The issue's target: the whole step (engine auto) against raw HF encode_batch_fast on the same pieces
    paired_cpu = sorted(d["tokens_per_cpu_s"] / r["tokens_per_cpu_s"] for d, r in zip(dk_runs, raw_runs))
    paired_wall = sorted(d["tokens_per_s"] / r["tokens_per_s"] for d, r in zip(dk_runs, raw_runs))
    result["step_vs_hf_raw_cpu"] = round(dk["best_tokens_per_cpu_s"] / raw["best_tokens_per_cpu_s"], 2)
    result["step_vs_hf_raw_wall"] = round(dk["tokens_per_s"] / raw["tokens_per_s"], 2)
    result["step_vs_hf_raw"] = {
        "what": "datakit tokenize_source (engine auto, whole process tree) tokens per CPU-second (and per "
                "second) over raw HF encode_batch_fast on the same pieces (encode calls only); best of "
                "each, and each repeat's pair",
        "per_cpu_s": result["step_vs_hf_raw_cpu"], "wall": result["step_vs_hf_raw_wall"],
        "paired_per_cpu_s": [round(x, 2) for x in paired_cpu], "paired_wall": [round(x, 2) for x in paired_wall],
    }
    result["cache_bytes_identical_auto_vs_hf"] = all(c["identical"] for c in same_bytes)
    result["cache_compare"] = same_bytes[-1] if result["cache_bytes_identical_auto_vs_hf"] else same_bytes
    fixed_cpu = min(r["cpu_s"] for r in fixed_runs)
    fixed_wall = min(r["wall_s"] for r in fixed_runs)
    dk["fixed_cost"] = {"cpu_s": round(fixed_cpu, 2), "wall_s": round(fixed_wall, 2)}
    for entry, runs, limit in ((dk, dk_runs, tt), (dkhf, dkhf_runs, raw)):
        per_token = max(r["tokens"] / max(1e-9, r["cpu_s"] - fixed_cpu) for r in runs)
        entry["cpu_efficiency_vs_raw_excluding_fixed_cost"] = round(per_token / limit["best_tokens_per_cpu_s"], 3)
        if entry is dk:
            # the step's marginal rate (what a corpus much larger than this one sees) over raw HF's
            result["step_vs_hf_raw"]["per_cpu_s_excluding_fixed_cost"] = round(
                per_token / raw["best_tokens_per_cpu_s"], 2)
    if run_datatrove:
        dt = result["datatrove"] = best(dt_runs)
        compare(dt, dt_runs, raw, raw_runs)
        dt["same_token_count_as_datakit"] = dt["tokens"] == dk["tokens"]
        dt["datakit_vs_datatrove"] = {"wall": round(dk["tokens_per_s"] / dt["tokens_per_s"], 2),
                                      "per_cpu_s": round(dk["best_tokens_per_cpu_s"] / dt["best_tokens_per_cpu_s"], 2)}
    else:
        result["datatrove"] = {"skipped": "--skip-datatrove" if a.skip_datatrove else "no .venv-bench (see docstring)"}

    result["reader"] = [
        _reader_bench(dk["train_dir"], dk["validation_dir"], 2048, 32, a.reader_steps),
        _reader_bench(dk["train_dir"], dk["validation_dir"], 512, 128, a.reader_steps),
    ]
    result["targets"] = {
        "step_vs_hf_raw_cpu>=3": result["step_vs_hf_raw_cpu"] >= 3,
        "cache_bytes_identical_auto_vs_hf": result["cache_bytes_identical_auto_vs_hf"],
        "fraction_of_raw_limit>=0.9": dk["fraction_of_raw_limit"] >= 0.9,
        "tiktoken_step_faster_than_hf_step": result["step_engine_speedup"]["per_cpu_s"] > 1,
        "peak_pss<1GB": dk["peak_pss_mb"] < 1024,
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
