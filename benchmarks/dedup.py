"""Fuzzy dedup benchmark: datakit vs datatrove's 4-stage MinHash vs datasketch MinHashLSH, in one run.

The corpus is generated here, deterministically: documents of ~2-4 KB made of words drawn (Zipf-like)
from a vocabulary of lowercase identifiers found in this machine's Python standard library, with known
injected near-duplicates:
  singles          independent documents
  near copies      1-3 copies of an original with 0-10 word edits (substitute/insert/delete) and crops
  far copies       copies with 12-40 edits (Jaccard ~0.5-0.8: the borderline the threshold decides)
  hard negatives   half of an original + a fresh half (Jaccard ~0.3)
Ground truth is exact: every pair of documents that shares rare 5-grams gets its exact word-5-gram
Jaccard (5-grams are packed word ids, so there are no hash collisions); pairs with Jaccard >= 0.8 are
duplicates, their connected components the true clusters. A tool's removed set is scored per cluster:
removing k-1 of a k-document cluster is perfect whichever member it keeps; removing all k costs one
false positive; removing a document outside every cluster is a false positive.

Contenders, all with matched LSH parameters (word 5-grams, 14 bands x 8 rows = 112 permutations):
  datakit                 minhash_source -> fuzzy_dups (verify by true Jaccard >= 0.8) -> consolidate,
                          local backend with --workers processes
  datakit_1core           the same with one engine worker: per-core figures comparable with datasketch
                          (one process) even on a loaded machine, where two workers rarely get two cores
  datakit_noverify        the same without verification (LSH candidates only, like the peers)
  datatrove_spacy         datatrove 0.10 MinhashDedupSignature/Buckets/Cluster/Filter (4 stages) with its
                          default English word tokenizer (spaCy blank model), --workers processes
  datatrove_whitespace    the same with a whitespace word splitter (spaCy is most of its stage-1 time)
  datasketch              MinHash + MinHashLSH(params=(14, 8)), query-then-insert (one process)
Each runs in its own subprocess, once untimed (warm-up: page cache, bytecode, spaCy's files) and then
--repeats times (default 3), the same for every contender; wall and CPU are the medians of the timed runs.
The parent samples the process tree's PSS every 50 ms (benchmarks/_pipeline_measure.py: peak of the sum
over all its processes, and the largest single process) and its CPU time (rusage of reaped processes,
or the per-process sampled CPU times when larger: datatrove's forkserver workers are never reaped by the contender). A contender that
reads fewer documents than the corpus holds (0, say, from a broken environment) is an error, never a
figure. Reported per contender: wall and per-stage seconds, docs/s per core (docs / wall / cores it
was given), docs per CPU-second, peak PSS, precision / recall / F1 of removed documents, and recall of
the planted copies by their true Jaccard to the original (bins of 0.1; below 0.8 they are not
duplicates by this benchmark's truth, so catching them is by design for LSH-only tools and not for
datakit, which verifies at 0.8). `ratios` gives BOTH speed ratios against the best peer (per core of
wall time, and per CPU-second: on a loaded machine two workers rarely get two cores, so the two differ)
for datakit with and without verification, and `ratios.quality` the F1 of every contender.

Setup (the peers' venv: datatrove 0.10 needs spaCy for its English tokenizer and xxhash<4):
    python3 -m venv .venv-bench && .venv-bench/bin/pip install -r benchmarks/peer-requirements.txt
    .venv/bin/python -m benchmarks.dedup                  # quick: 10k docs, all contenders
    .venv/bin/python -m benchmarks.dedup --docs 20000     # the README figures
    .venv/bin/python -m benchmarks.dedup --only datakit,datasketch
Without .venv-bench (or --peer-python) the datatrove entries say why they were skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path

from benchmarks._pipeline_peer import word_tokenizer
from benchmarks.common import PEER_PYTHON, PEER_SETUP, REPO, module_command, peer_import_error

NGRAM, BANDS, ROWS = 5, 14, 8
TRUE_THRESHOLD = 0.8
# what the datatrove contenders import (ParquetReader needs pyarrow, which datatrove does not require)
PEER_IMPORTS = "import datatrove.pipeline.readers, datatrove.pipeline.dedup, datatrove.pipeline.writers, pyarrow"
ALL = ["datakit", "datakit_1core", "datakit_noverify", "datatrove_spacy", "datatrove_whitespace", "datasketch"]


# ====================================================================== corpus + ground truth
def vocabulary(size: int = 4000) -> list[str]:
    """Lowercase words from the stdlib's sources: deterministic, no digits or punctuation (nothing for
    any tool's normalizer to change), < 4096 words so a 5-gram of word ids packs exactly into 60 bits."""
    root = Path(sysconfig.get_paths()["stdlib"])
    words: set[str] = set()
    for path in sorted(root.glob("*.py")):
        words.update(re.findall(r"\b[a-z]{3,12}\b", path.read_text(encoding="utf-8", errors="replace")))
        if len(words) > 3 * size:
            break
    import random

    pool = sorted(words)
    random.Random(0).shuffle(pool)
    return sorted(pool[:size])


def generate(n_docs: int, seed: int):
    """Word-id arrays of n_docs documents with injected near-duplicates; returns (docs, kinds, origin):
    origin[i] is the index of the original a planted copy (near, far, hard negative) was made from, else -1."""
    import numpy as np

    rng = np.random.default_rng(seed)
    vocab_size = 4000
    ranks = rng.permutation(vocab_size)
    weights = 1.0 / (ranks + 30.0) ** 0.9
    weights /= weights.sum()

    def fresh(n: int):
        return rng.choice(vocab_size, size=n, p=weights).astype(np.int64)

    def edit(doc, edits: int):
        d = doc.copy()
        for _ in range(edits):
            op = rng.integers(3)
            pos = int(rng.integers(len(d)))
            if op == 0:
                d[pos] = fresh(1)[0]
            elif op == 1:
                d = np.insert(d, pos, fresh(1)[0])
            elif len(d) > 50:
                d = np.delete(d, pos)
        crop_a, crop_b = int(rng.integers(0, 4)), int(rng.integers(0, 4))
        return d[crop_a : len(d) - crop_b]

    docs, kinds, origin = [], [], []
    while len(docs) < n_docs:
        r = rng.random()
        orig = fresh(int(rng.integers(300, 550)))
        o = len(docs)
        docs.append(orig)
        origin.append(-1)
        if r < 0.55:
            kinds.append("single")
            continue
        kinds.append("original")
        for _ in range(int(rng.integers(1, 4))):
            docs.append(edit(orig, int(rng.integers(0, 11))))
            kinds.append("near_copy")
            origin.append(o)
        if rng.random() < 0.35:
            docs.append(edit(orig, int(rng.integers(12, 41))))
            kinds.append("far_copy")
            origin.append(o)
        if rng.random() < 0.25:
            half = len(orig) // 2
            docs.append(np.concatenate([orig[:half], fresh(len(orig) - half)]))
            kinds.append("hard_negative")
            origin.append(o)
    docs, kinds, origin = docs[:n_docs], kinds[:n_docs], origin[:n_docs]
    order = rng.permutation(len(docs))
    new_index = np.empty(len(order), dtype=np.int64)
    new_index[order] = np.arange(len(order))
    return ([docs[i] for i in order], [kinds[i] for i in order],
            [int(new_index[origin[i]]) if origin[i] >= 0 else -1 for i in order])


def ngram_keys(doc):
    import numpy as np

    n = len(doc) - NGRAM + 1
    if n <= 0:
        return np.unique(np.array([int(sum(int(x) << (12 * i) for i, x in enumerate(doc)))], dtype=np.uint64))
    key = np.zeros(n, dtype=np.uint64)
    for i in range(NGRAM):
        key |= doc[i : i + n].astype(np.uint64) << np.uint64(12 * i)
    return np.unique(key)


def ground_truth(docs) -> dict:
    """Exact Jaccard of every pair sharing rare 5-grams; clusters of pairs >= TRUE_THRESHOLD."""
    import numpy as np

    sets = [ngram_keys(d) for d in docs]
    keys = np.concatenate(sets)
    owner = np.repeat(np.arange(len(docs)), [len(s) for s in sets])
    order = np.argsort(keys, kind="stable")
    keys, owner = keys[order], owner[order]
    starts = np.flatnonzero(np.diff(keys, prepend=keys[:1] - 1) != 0) if len(keys) else np.array([], int)
    sizes = np.diff(np.append(starts, len(keys)))
    pairs = set()
    for s, n in zip(starts[(sizes >= 2) & (sizes <= 20)], sizes[(sizes >= 2) & (sizes <= 20)]):
        members = sorted(set(owner[s : s + n].tolist()))
        for i in range(len(members)):
            for j in range(i + 1, len(members)):
                pairs.add((members[i], members[j]))
    jac = {}
    for a, b in pairs:
        inter = len(np.intersect1d(sets[a], sets[b], assume_unique=True))
        jac[(a, b)] = inter / (len(sets[a]) + len(sets[b]) - inter)
    parent = list(range(len(docs)))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for (a, b), j in jac.items():
        if j >= TRUE_THRESHOLD:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    clusters: dict[int, list[int]] = {}
    for x in range(len(docs)):
        clusters.setdefault(find(x), []).append(x)
    clusters = {k: v for k, v in clusters.items() if len(v) > 1}
    hist = {f"{lo / 10:.1f}-{(lo + 1) / 10:.1f}": 0 for lo in range(10)}
    for j in jac.values():
        hist[f"{min(int(j * 10), 9) / 10:.1f}-{(min(int(j * 10), 9) + 1) / 10:.1f}"] += 1
    return {"clusters": list(clusters.values()), "pair_jaccard_histogram": hist}


JACCARD_BINS = [(0.0, 0.5), (0.5, 0.6), (0.6, 0.7), (0.7, 0.8), (0.8, 0.9), (0.9, 1.0001)]


def planted_pairs(docs, origin) -> list[tuple[int, int, float]]:
    """(original, copy, exact word-5-gram Jaccard) of every planted copy (near, far and hard negative)."""
    import numpy as np

    out = []
    for c, o in enumerate(origin):
        if o >= 0:
            a, b = ngram_keys(docs[o]), ngram_keys(docs[c])
            inter = len(np.intersect1d(a, b, assume_unique=True))
            out.append((o, c, inter / (len(a) + len(b) - inter)))
    return out


def recall_by_bin(removed: set[int], plants: list[tuple[int, int, float]]) -> dict:
    """Per true-Jaccard bin: planted copies caught / planted. A copy is caught when it was removed, or
    when its original was removed and it is the most similar member of the family (the original's
    copies) that was kept: then it is the survivor its original was removed for. Tools report removals
    only, and which member survives is their own tie-break, so this counts every tool the same way.
    Copies below the duplicate threshold (far copies, hard negatives) show what each tool does there
    by design: LSH finds a share of them, verification drops them."""
    family: dict[int, dict[int, float]] = {}
    for o, c, j in plants:
        family.setdefault(o, {})[c] = j
    out = {}
    for lo, hi in JACCARD_BINS:
        sel = [(o, c, j) for o, c, j in plants if lo <= j < hi]
        caught = sum(1 for o, c, j in sel if c in removed or (o in removed and all(
            jo < j for m, jo in family[o].items() if m != c and m not in removed)))
        out[f"{lo:.1f}-{min(hi, 1.0):.1f}"] = {"planted": len(sel), "caught": caught,
                                                "recall": round(caught / len(sel), 4) if sel else None}
    return out


def score(removed: set[int], clusters: list[list[int]]) -> dict:
    in_cluster = {}
    for ci, members in enumerate(clusters):
        for m in members:
            in_cluster[m] = ci
    tp = fp = 0
    removed_per_cluster: dict[int, int] = {}
    for d in removed:
        if d in in_cluster:
            removed_per_cluster[in_cluster[d]] = removed_per_cluster.get(in_cluster[d], 0) + 1
        else:
            fp += 1
    for ci, k in removed_per_cluster.items():
        good = min(k, len(clusters[ci]) - 1)
        tp += good
        fp += k - good
    expected = sum(len(c) - 1 for c in clusters)
    fn = expected - tp
    p = tp / (tp + fp) if tp + fp else 1.0
    r = tp / (tp + fn) if tp + fn else 1.0
    return {"precision": round(p, 5), "recall": round(r, 5), "f1": round(2 * p * r / (p + r) if p + r else 0.0, 5),
            "removed": len(removed), "true_positives": tp, "false_positives": fp, "false_negatives": fn}


def write_corpus(docs, vocab, out: Path, num_files: int) -> dict[str, int]:
    """Write the corpus as a normalized source (normalize's layout); returns id -> doc index."""
    import numpy as np

    from datakit.core.documents import content_id
    from datakit.dedup.fixtures import write_normalized_source

    words = np.array(vocab, dtype=object)
    texts = [" ".join(words[d]) for d in docs]
    ids = {}
    for i, t in enumerate(texts):
        ids.setdefault(content_id(t), i)
    write_normalized_source(str(out), "corpus", texts, num_files, [str(i) for i in range(len(texts))])
    return ids


# ====================================================================== contenders (run in subprocesses)
def role_datakit(src: str, work: str, workers: int, verify: bool) -> dict:
    import psutil
    import pyarrow.parquet as pq

    from datakit.dedup import DedupConfig, consolidate, fuzzy_dups, minhash_source
    from datakit.shuffle import ExecConfig

    ex = ExecConfig(backend="local", max_workers=workers)
    stages, stages_cpu = {}, {}

    def cpu() -> float:  # this process and its engine workers
        total = 0.0
        for p in [psutil.Process()] + psutil.Process().children(recursive=True):
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
        return total

    def timed(name, fn):
        t, c = time.perf_counter(), cpu()
        out = fn()
        stages[name], stages_cpu[name] = time.perf_counter() - t, cpu() - c
        return out

    cfg = DedupConfig(ngram=NGRAM, bands=BANDS, rows=ROWS, num_perms=BANDS * ROWS, verify=verify,
                      verify_threshold=TRUE_THRESHOLD)
    mh = timed("minhash", lambda: minhash_source("corpus", src, f"{work}/mh", cfg, ex))
    fz = timed("fuzzy_dups", lambda: fuzzy_dups([("corpus", src, f"{work}/mh", 0)], f"{work}/fuzzy", cfg, ex))
    for k, v in fz.timings.items():
        stages[f"fuzzy_dups.{k}"] = v
    timed("consolidate", lambda: consolidate("corpus", src, [f"{work}/fuzzy"], f"{work}/final", ex))
    removed = []
    for f in sorted(Path(work, "final/outputs/removed").glob("*.parquet")):
        removed.extend(pq.read_table(f, columns=["id"]).column("id").to_pylist())
    return {"stages": stages, "stages_cpu": {k: round(v, 2) for k, v in stages_cpu.items()},
            "removed_ids": removed, "cores": workers, "docs_read": mh.counters["docs"],
            "counters": {k: v for k, v in fz.counters.items() if "/" not in k}}


def role_datasketch(src: str, work: str) -> dict:
    import pyarrow.parquet as pq
    from datasketch import MinHash, MinHashLSH

    stages = {}
    t = time.perf_counter()
    ids, texts = [], []
    for f in sorted(Path(src, "outputs/main").glob("*.parquet")):
        tb = pq.read_table(f, columns=["id", "text"])
        ids += tb.column("id").to_pylist()
        texts += tb.column("text").to_pylist()
    stages["read"] = time.perf_counter() - t
    t = time.perf_counter()
    sigs = []
    for text in texts:
        words = text.lower().split()
        shingles = {" ".join(words[i : i + NGRAM]).encode() for i in range(max(1, len(words) - NGRAM + 1))}
        m = MinHash(num_perm=BANDS * ROWS, seed=1)
        m.update_batch(list(shingles))
        sigs.append(m)
    stages["minhash"] = time.perf_counter() - t
    t = time.perf_counter()
    lsh = MinHashLSH(num_perm=BANDS * ROWS, params=(BANDS, ROWS))
    removed = []
    for i, m in zip(ids, sigs):
        if lsh.query(m):
            removed.append(i)
        else:
            lsh.insert(i, m)
    stages["lsh_query_insert"] = time.perf_counter() - t
    return {"stages": stages, "removed_ids": removed, "cores": 1, "docs_read": len(ids)}


def role_datatrove(src: str, work: str, workers: int, tokenizer: str) -> dict:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.readers import ParquetReader
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.hashing import HashConfig

    files = len(list(Path(src, "outputs/main").glob("*.parquet")))
    cfg = MinhashConfig(n_grams=NGRAM, num_buckets=BANDS, hashes_per_bucket=ROWS, seed=1,
                        hash_config=HashConfig(precision=64))
    lang = word_tokenizer("whitespace" if tokenizer == "whitespace" else "spacy")
    main = f"{src}/outputs/main"

    def reader():
        return ParquetReader(main, glob_pattern="*.parquet", text_key="text", id_key="id")

    stage_defs = [
        ("signatures", [reader(), MinhashDedupSignature(output_folder=f"{work}/sigs", config=cfg, language=lang)],
         files, workers),
        ("buckets", [MinhashDedupBuckets(input_folder=f"{work}/sigs", output_folder=f"{work}/buckets", config=cfg)],
         BANDS, workers),
        ("cluster", [MinhashDedupCluster(input_folder=f"{work}/buckets", output_folder=f"{work}/remove", config=cfg)],
         1, 1),
        ("filter", [reader(), MinhashDedupFilter(input_folder=f"{work}/remove",
                                                 exclusion_writer=JsonlWriter(f"{work}/removed", compression=None)),
                    JsonlWriter(f"{work}/kept", compression=None)], files, workers),
    ]
    stages = {}
    for name, pipeline, tasks, w in stage_defs:
        t = time.perf_counter()
        LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=w, logging_dir=f"{work}/logs/{name}").run()
        stages[name] = time.perf_counter() - t
    removed = []
    for f in sorted(Path(work, "removed").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            removed.append(json.loads(line)["id"])
    kept = sum(len(f.read_text().splitlines()) for f in Path(work, "kept").glob("*.jsonl"))
    return {"stages": stages, "removed_ids": removed, "cores": workers, "docs_read": kept + len(removed)}


# ====================================================================== parent: run, monitor, score
def _tree_sample(pid: int, cpu_seen: dict) -> tuple[int, int]:
    from benchmarks._pipeline_measure import tree_sample  # psutil: needed by the parent only

    return tree_sample(pid, cpu_seen)


def run_contender(python: str, role_args: list[str], result_file: Path, timeout: float) -> dict:
    cmd = module_command(python, "dedup", *role_args, "--result", str(result_file))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=str(REPO))
    peak = largest = 0
    cpu_seen: dict = {}
    stop = threading.Event()

    def sample():
        nonlocal peak, largest
        while not stop.wait(0.05):
            total, big = _tree_sample(proc.pid, cpu_seen)
            peak, largest = max(peak, total), max(largest, big)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return {"error": f"timed out after {timeout}s"}
    finally:
        stop.set()
        th.join()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        return {"error": f"exit {proc.returncode}: {err.decode(errors='replace')[-3000:]}"}
    res = json.loads(result_file.read_text())
    res["wall_s"] = wall
    # rusage counts every reaped descendant exactly; sampling also sees processes nobody reaps (datatrove's
    # forkserver workers) but misses each one's last 50 ms. Both are lower bounds: take the larger.
    reaped = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    res["cpu_s"] = max(reaped, sum(cpu_seen.values()))
    res["peak_pss_tree_mb"] = round(peak / 2**20, 1)
    res["peak_pss_largest_process_mb"] = round(largest / 2**20, 1)
    return res


def measure(name: str, python: str, src: Path, work: Path, workers: int, repeats: int, warmup: bool,
            timeout: float) -> dict:
    """One warm-up run (discarded: page cache, bytecode, model files) then `repeats` timed runs, the same
    for every contender. Wall and CPU are the medians of the timed runs, peak PSS their maximum, the
    removed set that of the last run (and whether every run removed the same documents)."""
    import statistics

    runs = []
    for i in range(int(warmup) + repeats):
        out = work / name
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        res = run_contender(python, ["--role", name, "--src", str(src), "--out", str(out), "--workers", str(workers)],
                            work / f"{name}.json", timeout)
        shutil.rmtree(out, ignore_errors=True)
        if "error" in res:
            return res
        if i >= int(warmup):
            runs.append(res)
    res = dict(runs[-1])
    res["wall_s"] = statistics.median(r["wall_s"] for r in runs)
    res["cpu_s"] = statistics.median(r["cpu_s"] for r in runs)
    res["wall_s_runs"] = [round(r["wall_s"], 2) for r in runs]
    res["peak_pss_tree_mb"] = max(r["peak_pss_tree_mb"] for r in runs)
    res["peak_pss_largest_process_mb"] = max(r["peak_pss_largest_process_mb"] for r in runs)
    res["same_removals_every_run"] = all(sorted(r["removed_ids"]) == sorted(res["removed_ids"]) for r in runs)
    res["stages"] = {k: statistics.median(r["stages"][k] for r in runs) for k in res["stages"]}
    return res


def summarize(results: dict) -> dict:
    """Both speed ratios (per core of wall time, per CPU-second) and the quality of every contender, with
    and without datakit's verification, side by side: no single flattering figure."""
    ok = {k: v for k, v in results.items() if "docs_per_s_per_core" in v}
    peers = {k: v for k, v in ok.items() if not k.startswith("datakit")}
    out: dict = {"quality": {k: {m: v[m] for m in ("precision", "recall", "f1")} for k, v in ok.items()}}
    if not peers:
        return out
    best = max(peers, key=lambda k: peers[k]["docs_per_s_per_core"])
    best_cpu = max(peers, key=lambda k: peers[k]["docs_per_cpu_s"])
    out.update({"best_peer_docs_per_s_per_core": best, "best_peer_docs_per_cpu_s": best_cpu})
    for ours in ("datakit", "datakit_1core", "datakit_noverify"):
        if ours in ok:
            out[f"{ours}_vs_best_peer_docs_per_s_per_core"] = round(
                ok[ours]["docs_per_s_per_core"] / peers[best]["docs_per_s_per_core"], 2)
            out[f"{ours}_vs_best_peer_docs_per_cpu_s"] = round(
                ok[ours]["docs_per_cpu_s"] / peers[best_cpu]["docs_per_cpu_s"], 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=10_000)
    ap.add_argument("--files", type=int, default=8, help="parquet files in the generated source")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per contender (after one warm-up run)")
    ap.add_argument("--no-warmup", action="store_true", help="skip the discarded warm-up run of each contender")
    ap.add_argument("--only", default=",".join(ALL), help=f"comma list of {ALL}")
    ap.add_argument("--peer-python", default=str(PEER_PYTHON))
    ap.add_argument("--work", default=None, help="work dir (default: a temp dir, removed afterwards)")
    ap.add_argument("--timeout", type=float, default=3600)
    # internal: run one contender
    ap.add_argument("--role", default=None)
    ap.add_argument("--src")
    ap.add_argument("--out")
    ap.add_argument("--result")
    args = ap.parse_args()

    if args.role:
        if args.role == "datakit":
            res = role_datakit(args.src, args.out, args.workers, verify=True)
        elif args.role == "datakit_1core":
            res = role_datakit(args.src, args.out, 1, verify=True)
        elif args.role == "datakit_noverify":
            res = role_datakit(args.src, args.out, args.workers, verify=False)
        elif args.role == "datasketch":
            res = role_datasketch(args.src, args.out)
        elif args.role.startswith("datatrove_"):
            res = role_datatrove(args.src, args.out, args.workers, args.role.split("_", 1)[1])
        else:
            raise SystemExit(f"unknown role {args.role}")
        Path(args.result).write_text(json.dumps(res))
        return

    wanted = [c.strip() for c in args.only.split(",") if c.strip()]
    unknown = set(wanted) - set(ALL)
    if unknown:
        raise SystemExit(f"unknown contenders {sorted(unknown)}; choose from {ALL}")
    if args.repeats < 1:
        raise SystemExit("--repeats must be at least 1")
    if any(c.startswith("datatrove_") for c in wanted):  # before any side runs, in one line
        imports = PEER_IMPORTS + (", spacy" if "datatrove_spacy" in wanted else "")
        missing = peer_import_error(args.peer_python, imports, PEER_SETUP)
        if missing:
            raise SystemExit(missing)
    work = Path(args.work or tempfile.mkdtemp(prefix="datakit-dedup-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    vocab = vocabulary()
    docs, kinds, origin = generate(args.docs, args.seed)
    src = work / "corpus"
    if src.exists():
        shutil.rmtree(src)
    id_to_idx = write_corpus(docs, vocab, src, args.files)
    gen_s = time.perf_counter() - t
    t = time.perf_counter()
    truth = ground_truth(docs)
    plants = planted_pairs(docs, origin)
    truth_s = time.perf_counter() - t
    text_bytes = sum(len(" ".join(vocab[w] for w in d).encode()) for d in docs)
    report = {
        "corpus": {
            "docs": len(docs), "unique_texts": len(id_to_idx), "files": args.files,
            "mb": round(text_bytes / 1e6, 1), "avg_doc_bytes": round(text_bytes / len(docs)),
            "kinds": {k: kinds.count(k) for k in sorted(set(kinds))},
            "true_clusters": len(truth["clusters"]),
            "true_duplicates_to_remove": sum(len(c) - 1 for c in truth["clusters"]),
            "pair_jaccard_histogram": truth["pair_jaccard_histogram"],
            "generate_s": round(gen_s, 1), "ground_truth_s": round(truth_s, 1),
        },
        "params": {"ngram": f"word {NGRAM}", "bands": BANDS, "rows": ROWS, "num_perms": BANDS * ROWS,
                   "true_duplicate_jaccard": TRUE_THRESHOLD, "datakit_verify_threshold": TRUE_THRESHOLD,
                   "workers": args.workers, "repeats": args.repeats, "warmup_runs": 0 if args.no_warmup else 1,
                   "timing": "median of the timed runs", "cpu_count": os.cpu_count(),
                   "load_avg_at_start": os.getloadavg()},
        "results": {},
    }
    for name in wanted:
        python = sys.executable
        if name.startswith("datatrove"):
            python = args.peer_python
            if not Path(python).exists():
                report["results"][name] = {"skipped": f"no peer python at {python} (see the docstring for setup)"}
                continue
        res = measure(name, python, src, work, args.workers, args.repeats, not args.no_warmup, args.timeout)
        if "error" not in res and res.get("docs_read") != len(id_to_idx):
            res = {"error": f"{name} read {res.get('docs_read')} documents, the corpus has {len(id_to_idx)}: "
                            "not a figure (is its environment complete? see the docstring)"}
        if "error" not in res:
            removed = {id_to_idx[i] for i in res.pop("removed_ids")}
            res.update(score(removed, truth["clusters"]))
            res["planted_recall_by_jaccard"] = recall_by_bin(removed, plants)
            res["docs_per_s_per_core"] = round(len(docs) / res["wall_s"] / res["cores"], 1)
            res["docs_per_cpu_s"] = round(len(docs) / res["cpu_s"], 1)
            res["wall_s"] = round(res["wall_s"], 2)
            res["cpu_s"] = round(res["cpu_s"], 2)
            res["stages"] = {k: round(v, 2) for k, v in res["stages"].items()}
        report["results"][name] = res
        print(f"{name}: {json.dumps(res)}", file=sys.stderr)
    report["ratios"] = summarize(report["results"])
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
