"""End to end: datakit's pipeline (no training) against datatrove's, on the same real-text corpus, in one run.

The corpus (benchmarks/_pipeline_corpus.py): about --mb MB (default 400) of this machine's real text
(/usr/share/doc texts, man pages with roff stripped, the Python standard library's sources) as jsonl.zst
files, with planted exact copies (5% of the documents) and near-duplicates (10%, 1-3% of the words
substituted/inserted/deleted), each near copy's true word-5-gram Jaccard to its original recorded.
Deterministic for a given --mb, --files and --seed.

A byte-level BPE tokenizer (--vocab, default 8192) is trained once with datakit's trainer on a sample of
the corpus (untimed) and handed to the peer, whose users bring a tokenizer.json.

  datakit    `datakit run MANIFEST --workers 2` (the CLI, local backend): one jsonl source with
             id_field: id -> normalize (with its within-source exact dedup) -> exact -> minhash -> fuzzy
             (word 5-grams, 14 bands x 8 rows, verification at its default threshold) -> consolidate ->
             tokenizer -> tokenize. The tokenizer step trains a BPE of --vocab on the corpus, as a default
             run does; its cost is reported on its own line (``tokenizer_training``) and the ratios are
             given with and without it. --given-tokenizer copies the peer's file instead. No quality
             section (the peer runs no filters; benchmarks/fineweb.py runs them), no train section, no
             benchmarks to decontaminate.
  datatrove  datatrove 0.10, as its users write it (see benchmarks/_pipeline_peer.py): JsonlReader ->
             ExactDedupSignature / ExactFindDedups / ExactDedupFilter -> MinHash in 4 blocks (signature,
             buckets, cluster, filter; word 5-grams, 14 x 8, its default spaCy English words, or
             whitespace-split words with --peer-words whitespace) ->
             DocumentTokenizer, LocalPipelineExecutor with 2 workers; RAYON_NUM_THREADS=1 in its env, so
             HF tokenizers runs one thread per worker process as datakit's tokenize does.

Measured (benchmarks/_pipeline_measure.py): each side runs as one command whose process tree is sampled
every 50 ms; the timeline is cut at each stage's start and end (datakit: the step_started and
step_succeeded events of its events.jsonl; datatrove: each executor block's start and end). Per stage and
in total: wall, CPU-seconds (cores used = CPU / wall), peak PSS of the whole tree and of its largest
process (PSS, not RSS: a forked worker's pages shared with its parent count once, not once per process;
datatrove's forkserver workers are never reaped, so only sampling sees their CPU; ``cpu_s_reaped_rusage``
is the rusage cross-check, right for datakit, near 0 for datatrove). Before each side the corpus is read
once (page cache) and the side's imports are loaded once (warm), and each side runs once, both fresh in
the same invocation: no figure of an earlier run is ever reused (--reuse keeps only the corpus and the
tokenizer, which is trained again when datakit's tokenizer stage version changed: `common.tokenizer_dir`).
Quality: planted exact and near copies caught (a planted pair {original, copy} is caught when either is
removed), near copies by Jaccard bin, planted pairs where both were removed, and documents removed that
were no plant (natural near-duplicates in the real text, shown with how many both sides removed). Projection: core-hours per TB of text = CPU-seconds / MB of text
(uncompressed UTF-8) x 1e6 / 3600, i.e. assuming cost linear in bytes at the measured CPU-seconds per MB.

A side that processes 0 documents is an error, never a figure. One JSON object on stdout.

Setup (the peer has its own venv: datatrove 0.10 pins xxhash<4, spaCy is its word tokenizer, zstandard
reads the .zst files; without zstandard datatrove reads 0 documents; it imports regex and its JsonlReader
needs orjson without requiring either, so the benchmark checks them before either side runs):
    python3 -m venv .venv-bench && .venv-bench/bin/pip install -r benchmarks/peer-requirements.txt
    .venv/bin/python -m benchmarks.pipeline --mb 20                     # a smoke run, a few minutes
    .venv/bin/python -m benchmarks.pipeline --reuse /tmp/dk-pipe        # 400 MB; keeps the corpus and the
                                                                        #   tokenizer, reruns both sides
    .venv/bin/python -m benchmarks.pipeline --reuse /tmp/dk-pipe --peer-words whitespace   # the peer at
                                               # its fastest: whitespace words instead of spaCy's
Wall times swing with the machine's load (recorded in params); CPU-seconds are the steadier ratio.

Measured: the README's benchmark table holds every run (its date, the machine's state, both sides' figures).
The latest, 2026-11-28 (twentieth session, the machine idle, the trained tokenizer's lookahead-free split,
which the peer is handed too): at --mb 100 --peer-words whitespace, three runs, datakit 10.7-10.9 CPU-s,
tokenizer training 1.4-1.5 of it, against datatrove's 53.6-58.4: 4.91-5.45x per CPU-second with training
(median 5.21x), 5.62-6.32x without; at the default 400 MB, two runs, 37.5-37.8 against 192.5-194.5:
5.13-5.14x with training, 5.36x without.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import _pipeline_corpus as corpus_mod
from benchmarks import _pipeline_measure as measure
from benchmarks.common import (PEER_PYTHON, PEER_SETUP, REPO, module_command, peer_import_error, tokenizer_dir,
                               user_env)

NGRAM, BANDS, ROWS = 5, 14, 8
TOKENIZER_STEP = "tokenizer"  # datakit's step that trains (or copies) the tokenizer
# The peer's env: HF tokenizers' Rust pool pinned to one thread per worker process, as datakit's
# tokenize runs one thread per worker (datatrove's DocumentTokenizer would otherwise start a pool of
# every core in each of its worker processes)
PEER_ENV = {"RAYON_NUM_THREADS": "1"}
JACCARD_BINS = [(0.0, 0.6), (0.6, 0.7), (0.7, 0.8), (0.8, 0.9), (0.9, 1.01)]


@dataclass
class Setup:
    """The shared inputs of both sides, under the work dir."""

    work: Path
    corpus_dir: Path
    info: "corpus_mod.CorpusInfo"
    tokenizer: Path
    eos: str
    workers: int
    timeout: float
    peer_words: str


# ------------------------------------------------------------------------------------------------ setup
def prepare(work: Path, mb: float, files: int, seed: int, vocab: int) -> tuple[Path, "corpus_mod.CorpusInfo", Path]:
    """Build (or, when the recorded parameters match, reuse) the corpus and the tokenizer."""
    params = {"mb": mb, "files": files, "seed": seed, "vocab": vocab, "corpus_version": corpus_mod.VERSION}
    stamp, corpus_dir = work / "params.json", work / "corpus"
    if not (stamp.exists() and json.loads(stamp.read_text()) == params and (work / "truth.json").exists()):
        for p in [corpus_dir, *work.glob("tokenizer*")]:  # every kept tokenizer was trained on the old corpus
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
        t = time.perf_counter()
        corpus_mod.build(corpus_dir, mb, files, seed)
        print(f"corpus built in {time.perf_counter() - t:.0f}s", file=sys.stderr)
        stamp.write_text(json.dumps(params))
    info = corpus_mod.CorpusInfo.load(work / "truth.json")
    tok = tokenizer_dir(work, vocab) / "tokenizer.json"
    if not tok.exists():
        from datakit.tokenize.fixtures import write_source
        from datakit.tokenize.tokenizer import train_tokenizer

        sample = work / "tokenizer-sample"
        shutil.rmtree(sample, ignore_errors=True)
        write_source(str(sample), corpus_mod.sample_texts(info, 20_000_000), 2, source="corpus")
        train_tokenizer([str(sample)], str(tok.parent), vocab_size=vocab, max_bytes=20_000_000)
        shutil.rmtree(sample, ignore_errors=True)
    return corpus_dir, info, tok


def warm(python: str, imports: str, corpus_dir: Path) -> None:
    """Page-cache the corpus and the side's modules, so neither side pays a cold start the other skips."""
    for f in sorted(corpus_dir.glob("*.jsonl.zst")):
        f.read_bytes()
    import subprocess

    subprocess.run([python, "-c", imports], check=True, cwd=str(REPO), capture_output=True)


# ------------------------------------------------------------------------------------------------ datakit
def datakit_manifest(s: Setup, prefix: Path, vocab: int | None) -> dict:
    """The datakit side's manifest: with ``vocab`` its tokenizer stage trains a BPE of that size, as a
    default run does; with None it copies the peer's tokenizer.json (``--given-tokenizer``)."""
    return {
        "prefix": str(prefix), "backend": "local", "workers": s.workers,
        "sources": [{"name": "corpus", "uri": str(s.corpus_dir / "*.jsonl.zst"), "format": "jsonl",
                     "text_field": "text", "id_field": "id"}],
        "dedup": {"exact": True, "fuzzy": True, "ngram": NGRAM, "ngram_unit": "word", "num_perms": BANDS * ROWS,
                  "bands": BANDS, "rows": ROWS},
        "tokenize": {"vocab_size": vocab} if vocab else {"tokenizer": str(s.tokenizer)},
    }


def _datakit_removed(prefix: Path, all_ids: set[str]) -> tuple[set[str], int]:
    """Removed = every corpus id not among consolidate's kept documents (their source_id); kept count."""
    import pyarrow.parquet as pq

    kept: set[str] = set()
    for f in sorted(glob.glob(str(prefix / "consolidate-*" / "outputs" / "main" / "*.parquet"))):
        kept.update(pq.read_table(f, columns=["source_id"]).column("source_id").to_pylist())
    return all_ids - kept, len(kept)


def run_datakit(s: Setup, manifest_of, all_ids: set[str]) -> dict:
    """Run ``datakit run`` on the manifest ``manifest_of(prefix)`` builds, sampled; per-stage figures,
    the removed ids and the run's counters (``prefix`` holds its outputs)."""
    prefix = s.work / "datakit-out"
    shutil.rmtree(prefix, ignore_errors=True)
    manifest = s.work / "datakit.yaml"  # JSON is YAML
    manifest.write_text(json.dumps(manifest_of(prefix), indent=1))
    dk = str(Path(sys.executable).with_name("datakit"))
    warm(sys.executable, "import datakit.pipeline, datakit.dedup, datakit.tokenize.tokenize_step", s.corpus_dir)
    tl = measure.run_sampled([dk, "run", str(manifest), "--workers", str(s.workers), "--json"],
                             user_env(), str(REPO), s.timeout)
    if tl.returncode != 0:
        return {"error": f"datakit run exited {tl.returncode}: {tl.stderr[-3000:]}{tl.stdout[-2000:]}"}
    events = [json.loads(x) for x in (prefix / "events.jsonl").read_text().splitlines() if x.strip()]
    started = {e["step"]: e["ts"] for e in events if e["event"] == "step_started"}
    windows = [(e["step"], started[e["step"]], e["ts"]) for e in events
               if e["event"] == "step_succeeded" and e["step"] in started]
    removed, kept = _datakit_removed(prefix, all_ids)
    summary = json.loads(tl.stdout.strip().splitlines()[-1])
    counters = {st["name"]: st.get("counters", {}) for st in summary.get("steps", [])
                if isinstance(st, dict) and "name" in st}
    res = measure.per_stage(tl, windows)
    training = res["stages"].get(TOKENIZER_STEP)
    if training is not None:  # the tokenizer stage trained (or copied) the tokenizer: its cost on its own line
        res["tokenizer_training"] = training
        res["total_without_tokenizer_training"] = {
            k: round(res["total"][k] - training[k], 2) for k in ("wall_s", "cpu_s")}
    tokens = sum(c.get("tokenize/tokens", 0) for c in counters.values())
    res.update({"docs_in": len(all_ids), "docs_kept": kept, "removed_ids": removed, "tokens_with_eos": tokens,
                "counters": counters})
    if kept == 0 or not any(name.startswith("normalize") for name, _, _ in windows):
        res["error"] = "datakit kept 0 documents or ran no normalize step: it processed nothing (see its summary)"
    return res


# ------------------------------------------------------------------------------------------------ datatrove
def run_datatrove(s: Setup, peer_python: str, all_ids: set[str]) -> dict:
    if not Path(peer_python).exists():
        return {"error": f"no peer python at {peer_python}: set up .venv-bench (see this file's docstring)"}
    work = s.work / "peer"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    args = {"corpus": str(s.corpus_dir), "work": str(work), "workers": s.workers, "ngram": NGRAM, "bands": BANDS,
            "rows": ROWS, "files": len(s.info.files), "tokenizer": str(s.tokenizer), "eos": s.eos,
            "words": s.peer_words}
    warm(peer_python, PEER_IMPORTS, s.corpus_dir)
    result = work / "result.json"
    tl = measure.run_sampled(module_command(peer_python, "_pipeline_peer", json.dumps(args), str(result)),
                             user_env(**PEER_ENV), str(REPO), s.timeout)
    if tl.returncode != 0 or not result.exists():
        return {"error": f"datatrove exited {tl.returncode}: {tl.stderr[-3000:]}"}
    r = json.loads(result.read_text())
    res = measure.per_stage(tl, [(b["name"], b["start"], b["end"]) for b in r["stages"]])
    removed = set(r["removed"]["exact"]) | set(r["removed"]["fuzzy"])
    res.update({"docs_in": r["docs_tokenized"] + len(removed), "docs_kept": r["docs_tokenized"],
                "removed_ids": removed, "tokens_with_eos": r["tokens_with_eos"],
                "removed_by": {"exact": len(r["removed"]["exact"]), "fuzzy": len(r["removed"]["fuzzy"])}})
    if r["docs_tokenized"] == 0:
        res["error"] = "datatrove tokenized 0 documents: it read nothing (is zstandard in its venv?)"
    elif res["docs_in"] != len(all_ids):
        res["error"] = f"datatrove accounted for {res['docs_in']} documents, the corpus has {len(all_ids)}"
    return res


# ------------------------------------------------------------------------------------------------ scoring
def quality(removed: set[str], info) -> dict:
    """Planted pairs caught (either member removed), by kind and near copies by Jaccard bin."""
    def caught(plants: dict[str, str]) -> tuple[int, int]:
        hit = sum(1 for c, o in plants.items() if c in removed or o in removed)
        both = sum(1 for c, o in plants.items() if c in removed and o in removed)
        return hit, both

    ex_hit, ex_both = caught(info.exact_plants)
    nr_hit, nr_both = caught(info.near_plants)
    bins = {}
    for lo, hi in JACCARD_BINS:
        members = {c: o for c, o in info.near_plants.items() if lo <= info.near_jaccard[c] < hi}
        name = f"{lo:.1f}-{min(hi, 1.0):.1f}"
        bins[name] = {"planted": len(members), "caught": caught(members)[0]}
        bins[name]["recall"] = round(bins[name]["caught"] / len(members), 4) if members else None
    planted = set(info.exact_plants) | set(info.near_plants) | set(info.exact_plants.values()) \
        | set(info.near_plants.values())
    return {
        "exact": {"planted": len(info.exact_plants), "caught": ex_hit,
                  "recall": round(ex_hit / max(len(info.exact_plants), 1), 4), "both_members_removed": ex_both},
        "near": {"planted": len(info.near_plants), "caught": nr_hit,
                 "recall": round(nr_hit / max(len(info.near_plants), 1), 4), "both_members_removed": nr_both,
                 "by_true_jaccard": bins},
        "removed_total": len(removed),
        "removed_not_planted": len(removed - planted),
    }


def _projection(cpu_s: float, mb: float) -> dict:
    per_mb = cpu_s / mb
    return {"cpu_s_per_mb": round(per_mb, 3), "core_hours_per_tb": round(per_mb * 1e6 / 3600, 1)}


def _rounded_side(res: dict, mb: float) -> dict:
    out = {k: v for k, v in res.items() if k != "removed_ids"}
    if "total" in out:
        out["projection"] = _projection(out["total"]["cpu_s"], mb)
    return out


def ratios(ours: dict, peer: dict) -> dict:
    """Peer over ours (above 1: datakit is faster or smaller), whole runs; where datakit trained its
    tokenizer, also without that training (the peer is handed a ready tokenizer.json)."""
    a, b = ours["total"], peer["total"]
    out = {"wall_peer_over_ours": round(b["wall_s"] / a["wall_s"], 2),
           "cpu_peer_over_ours": round(b["cpu_s"] / a["cpu_s"], 2),
           "peak_pss_tree_peer_over_ours": round(b["peak_pss_tree_mb"] / a["peak_pss_tree_mb"], 2),
           "peak_pss_largest_process_peer_over_ours": round(b["peak_pss_largest_process_mb"]
                                                            / a["peak_pss_largest_process_mb"], 2)}
    if "total_without_tokenizer_training" in ours:
        c = ours["total_without_tokenizer_training"]
        out["wall_peer_over_ours_without_training"] = round(b["wall_s"] / c["wall_s"], 2)
        out["cpu_peer_over_ours_without_training"] = round(b["cpu_s"] / c["cpu_s"], 2)
    return out


def compare(ours: dict, peer: dict, info) -> dict:
    """Ratios (peer / ours: above 1 means datakit is faster) and quality side by side."""
    report: dict = {}
    if "error" not in ours and "error" not in peer:
        report["ratios"] = ratios(ours, peer)
        ro, rp = ours["removed_ids"], peer["removed_ids"]
        planted = set(info.exact_plants) | set(info.near_plants) | set(info.exact_plants.values()) \
            | set(info.near_plants.values())
        report["removed_not_planted_overlap"] = {k: len(v - planted) for k, v in
                                                 {"both": ro & rp, "ours_only": ro - rp, "peer_only": rp - ro}.items()}
    report["quality"] = {side: quality(r["removed_ids"], info) for side, r in (("datakit", ours), ("datatrove", peer))
                         if "removed_ids" in r}
    return report


# ------------------------------------------------------------------------------------------------ main
PEER_IMPORTS = "import datatrove.pipeline.dedup, datatrove.pipeline.tokens, spacy, zstandard, orjson"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=400, help="MB of text in the corpus (default 400)")
    ap.add_argument("--files", type=int, default=None, help="jsonl.zst files (default: one per 50 MB, >= 2)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--reuse", default=None, metavar="WORKDIR",
                    help="keep the corpus and the peer's tokenizer here and reuse them on the next run "
                         "(both sides are always run again)")
    ap.add_argument("--given-tokenizer", action="store_true",
                    help="datakit copies the peer's tokenizer.json instead of training its own")
    ap.add_argument("--peer-python", default=str(PEER_PYTHON))
    ap.add_argument("--peer-words", choices=["spacy", "whitespace"], default="spacy",
                    help="the peer's MinHash word splitter: spacy (its default, as its users run it) or "
                         "whitespace (its fastest)")
    ap.add_argument("--timeout", type=float, default=7200)
    args = ap.parse_args()
    missing = peer_import_error(args.peer_python, PEER_IMPORTS, PEER_SETUP)
    if missing:
        sys.exit(missing)
    files = args.files or max(2, round(args.mb / 50))
    work = Path(args.reuse or tempfile.mkdtemp(prefix="datakit-pipeline-bench-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    corpus_dir, info, tok = prepare(work, args.mb, files, args.seed, args.vocab)
    from datakit.tokenize.tokenizer import EOS_TOKEN

    s = Setup(work, corpus_dir, info, tok, EOS_TOKEN, args.workers, args.timeout, args.peer_words)
    all_ids = {f"b{i:07d}" for i in range(info.base_docs)} | set(info.exact_plants) | set(info.near_plants)
    load0 = os.getloadavg()
    vocab = None if args.given_tokenizer else args.vocab
    ours = run_datakit(s, lambda prefix: datakit_manifest(s, prefix, vocab), all_ids)
    print(f"datakit: {json.dumps(_rounded_side(ours, info.mb))[:2000]}", file=sys.stderr)
    peer = run_datatrove(s, args.peer_python, all_ids)
    print(f"datatrove: {json.dumps(_rounded_side(peer, info.mb))[:2000]}", file=sys.stderr)
    report = {
        "corpus": {"mb_text": info.mb, "docs": info.docs, "files": len(info.files), **info.by_kind,
                   "compressed_mb": round(sum(os.path.getsize(f) for f in info.files) / 1e6, 1)},
        "params": {"ngram": f"word {NGRAM}", "bands": BANDS, "rows": ROWS, "workers": args.workers,
                   "peer_words": args.peer_words, "peer_env": PEER_ENV,
                   "datakit_tokenizer": "given (the peer's)" if args.given_tokenizer else f"trained (vocab {vocab})",
                   "tokenizer_vocab": args.vocab, "cpu_count": os.cpu_count(), "load_avg_at_start": load0,
                   "load_avg_at_end": os.getloadavg(), "work": str(work)},
        "datakit": _rounded_side(ours, info.mb),
        "datatrove": _rounded_side(peer, info.mb),
        **compare(ours, peer, info),
        "projection_assumption": "core-hours per TB = measured CPU-seconds / MB of uncompressed text x 1e6 / "
                                 "3600: cost linear in bytes at this run's rate (same document mix and duplicate "
                                 "rates; fuzzy dedup's candidate work may grow faster than linearly)",
    }
    if not args.reuse:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(report, indent=1))
    if "error" in ours or "error" in peer:
        sys.exit(1)


if __name__ == "__main__":
    main()
