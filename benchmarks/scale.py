"""Scale: datakit's whole pipeline without training, 100 MB to 4 GB of this machine's real text, per stage.

What runs, at each size of the ladder (--sizes, MB of text; default 100 200 400 800 1000 4000):
`datakit run MANIFEST --workers 2` (the CLI, local backend) on the first size / --file-mb files of the
corpus: one jsonl source -> normalize (with its within-source exact dedup) -> quality (language ID on
the whole text keeping every language, then Gopher repetition, Gopher quality, C4 and FineWeb with each
document's language's settings; annotate_only: every document is measured and kept, see below) -> exact dedup -> MinHash (word 5-grams, 14 x 8) -> fuzzy (LSH
candidates, true-Jaccard verification, the forest of earliest near duplicates) -> consolidate -> tokenizer (a given
file) -> tokenize. No train section.

Why the quality layer only annotates by default (--quality-filters lets it remove; --no-quality leaves it
out): this machine's text is
60% Python sources, and with its rules on, the layer removes 92% of the corpus (measured at 100 MB:
15,419 documents in, 1,275 out; Gopher's alphabetic-words ratio alone 6,686), so every later stage
would be measured on a twelfth of the data. With annotate_only: true the layer computes every measure
of every document (the same work: language ID and every rule group) and keeps them all, so each stage
downstream is measured on the whole corpus: an upper bound of their cost per TB.

--no-quality: the same pipeline minus the quality stage (normalize -> exact -> MinHash -> fuzzy ->
consolidate -> tokenize), every later stage on the same documents as with annotate_only. The quality layer
is ~83% of the whole pipeline's CPU, so this is how to measure the dedup ladder (100 -> 800 MB) in minutes,
not an hour. Its results live apart (runs-no-quality/, report-no-quality.json), so a ladder of one mode
never replaces the other's.

--disjoint-copies: every size is the smallest size's files plus (size / smallest - 1) rotated copies of
them (`_scale_corpus.disjoint_copy`: letters and digits rotated, so a copy has the same bytes, documents,
exact and near copies and Jaccards as its original and shares no word with it or another copy). Why: a
longer prefix of this machine's text completes more of its own near-duplicate families (a package's
sources in several site-packages, man pages of many versions), so on the plain ladder the fuzzy step's
work (documents in a candidate pair) grows faster than the megabytes; on this ladder it grows exactly as
the corpus (in expectation: a copy's shingles hash to other MinHash values), so the fuzzy step's growth per
doubling is the step's own. Results under runs-...-copies/. Tokenize then encodes rotated text its
tokenizer did not learn: its figures in this mode are not the pipeline's.

The corpus (benchmarks/_scale_corpus.py): every distinct document of this machine's text (the pool),
then, once a kind of text is used up, its documents recombined into new ones, with 5% exact and 10%
near copies planted in every file; every size has the same mix of kinds. The report says how much of
each size is unique pool text, recombined text and planted copies. The tokenizer is trained once per
work dir with datakit's trainer (byte-level BPE, --vocab, on the corpus's first 20 MB; its time is
reported on its own line, not in any size's figures) and given to every run, so every size encodes
with the same vocabulary and no run pays for training.

Measured (benchmarks/_pipeline_measure.py): the run's process tree is sampled every 0.05 s (CPU times, and
PSS from /proc/<pid>/smaps_rollup: shared pages charged once, not an RSS sum); the timeline is cut at
each step's step_started and step_succeeded events. Per step: wall, CPU-seconds, cores used, peak PSS
of the tree, of the driver and of the largest worker process, CPU-hours per TB of text (CPU-s / MB x
1e6 / 3600) and a rate next to Marin's datakit testbed (marin PR #7888): exact dedup ~16.9k docs/CPU-s,
MinHash ~1.2k docs/CPU-s, tokenize 0.65-0.77M tokens/CPU-s. The fuzzy step is also cut into its phases
(candidates, components, marks: the wall seconds its artifact.json records, laid end to end from the
step's start) with its counters (candidate and verified pairs, buckets, cc rounds). Across sizes: CPU
and memory per doubling of the fuzzy step and of each phase (the growth exponent: 1 is linear), how its
work grew (documents, documents verification re-reads, candidate pairs, shingle sets shuffled) and its CPU
per unit of each (1.0: the CPU grew as that work did; `_workload`), and the
flatness of peak PSS per worker from 1 GB to 4 GB (target <= 1.2x).

Resumable: everything lives under --work (default /tmp/datakit-scale): the pool, the corpus files
(built once, in order, for the largest size), the tokenizer, and each size's result.json under runs/
(runs-filter/, runs-no-quality/ for the other quality modes; a size with a result is not run again unless
--rerun). A run's outputs are deleted after it is measured (normalize
alone writes a quarter of the text's size as parquet) unless --keep-outputs; its events.jsonl, plan.json and every step's artifact.json
are kept under runs/<MB>/. One progress line per corpus file and per step on stderr; the report as
JSON on stdout and in report.json (report-filter.json, report-no-quality.json).

    .venv/bin/python -m benchmarks.scale --sizes 20                     # a smoke run, a few minutes
    .venv/bin/python -m benchmarks.scale --sizes 100 200 400 800        # the fuzzy ladder
    .venv/bin/python -m benchmarks.scale --sizes 100 200 400 800 --no-quality  # the same, in minutes
    .venv/bin/python -m benchmarks.scale --sizes 100 200 400 800 --no-quality --disjoint-copies  # its own growth
    .venv/bin/python -m benchmarks.scale --work /data/dk-scale          # the whole ladder up to 4 GB
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import _scale_corpus as corpus
from benchmarks import _pipeline_measure as measure
from benchmarks.common import REPO, tokenizer_dir, user_env

NGRAM, BANDS, ROWS = 5, 14, 8
MARIN = {"exact": {"docs_per_cpu_s": 16_900}, "minhash": {"docs_per_cpu_s": 1_200},
         "tokenize": {"tokens_per_cpu_s": [650_000, 770_000]}, "source": "marin PR #7888, its 100B testbed"}
FLAT_TARGET = 1.2


@dataclass
class Setup:
    """What every size's run shares."""

    work: Path
    parts: list[corpus.PartInfo]
    tokenizer: Path
    file_mb: float
    workers: int
    timeout: float
    keep_outputs: bool
    quality: str = "annotate_only"  # annotate_only, filter or off (no quality stage); see the module docstring
    copies_of: float | None = None  # --disjoint-copies: the size whose files every size copies

    @property
    def runs(self) -> Path:
        """Where each size's records and result live: one folder per quality mode (and for disjoint
        copies), so a ladder of one mode never replaces another's results."""
        return self.work / f"runs{self._slug}"

    @property
    def report(self) -> Path:
        return self.work / f"report{self._slug}.json"

    @property
    def _slug(self) -> str:
        mode = "" if self.quality == "annotate_only" else "-" + _mode_slug(self.quality)
        return mode + ("-copies" if self.copies_of else "")


def _mode_slug(mode: str) -> str:
    return "no-quality" if mode == "off" else mode


# ------------------------------------------------------------------------------------------------ setup
def prepare_corpus(work: Path, sizes: list[float], file_mb: float, seed: int) -> tuple[dict, list[corpus.PartInfo]]:
    """The pool and the corpus files the largest size needs (built or resumed)."""
    stamp = work / "params.json"
    params = {"file_mb": file_mb, "seed": seed, "corpus_version": corpus.VERSION}
    if stamp.exists() and json.loads(stamp.read_text()) != params:
        raise SystemExit(f"{work} holds a corpus built with {stamp.read_text()}, not {params}: "
                         "give another --work or the same --file-mb and --seed")
    work.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps(params))
    t = time.perf_counter()
    kinds = corpus.build_pool(work / "pool", corpus.pool_sources())
    n_files = max(files_for(mb, file_mb) for mb in sizes)
    parts = corpus.build_parts(work / "corpus", work / "pool", kinds, n_files, file_mb, seed)
    print(f"corpus ready: {n_files} files, {sum(p.text_bytes for p in parts) / 1e6:.0f} MB "
          f"({time.perf_counter() - t:.0f} s)", file=sys.stderr, flush=True)
    return kinds, parts


def files_for(mb: float, file_mb: float) -> int:
    return max(2, round(mb / file_mb))


def prepare_tokenizer(work: Path, parts: list[corpus.PartInfo], vocab: int) -> tuple[Path, dict]:
    """A byte-level BPE tokenizer trained once on the corpus's first 20 MB; its training cost."""
    import resource

    tok = tokenizer_dir(work, vocab) / "tokenizer.json"
    record = tok.parent / "training.json"
    if tok.exists() and record.exists():
        return tok, json.loads(record.read_text())
    from benchmarks._pipeline_corpus import CorpusInfo, sample_texts
    from datakit.tokenize.fixtures import write_source
    from datakit.tokenize.tokenizer import train_tokenizer

    info = CorpusInfo(files=[str(work / "corpus" / p.name) for p in parts[:2]], docs=0, mb=0, base_docs=0, by_kind={})
    sample = work / "tokenizer-sample"
    shutil.rmtree(sample, ignore_errors=True)
    write_source(str(sample), sample_texts(info, 20_000_000), 2, source="corpus")
    t, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    train_tokenizer([str(sample)], str(tok.parent), vocab_size=vocab, max_bytes=20_000_000)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    shutil.rmtree(sample, ignore_errors=True)
    cost = {"vocab": vocab, "sample_mb": 20, "wall_s": round(time.perf_counter() - t, 1),
            "cpu_s": round(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime, 1)}
    record.write_text(json.dumps(cost))
    print(f"tokenizer trained: vocab {vocab}, {cost['cpu_s']} CPU-s ({cost['wall_s']} s)", file=sys.stderr, flush=True)
    return tok, cost


def manifest(s: Setup, prefix: Path, files: list[str]) -> dict:
    m = {
        "prefix": str(prefix), "backend": "local", "workers": s.workers,
        "sources": [{"name": "corpus", "uri": files, "format": "jsonl", "text_field": "text", "id_field": "id"}],
        "quality": {"langid": {"languages": []}, "annotate_only": s.quality == "annotate_only"},
        "dedup": {"exact": True, "fuzzy": True, "ngram": NGRAM, "ngram_unit": "word", "num_perms": BANDS * ROWS,
                  "bands": BANDS, "rows": ROWS},
        "tokenize": {"tokenizer": str(s.tokenizer)},
    }
    if s.quality == "off":
        del m["quality"]
    return m


# ------------------------------------------------------------------------------------------------ one size
@dataclass
class Progress:
    """Prints a line when a step of the run finishes (called after every sample, from the sampler)."""

    events: Path
    label: str
    offset: int = 0

    def __call__(self, tl: measure.Timeline) -> None:
        if not self.events.exists() or self.events.stat().st_size == self.offset:
            return
        with open(self.events) as f:
            f.seek(self.offset)
            chunk = f.read()
        done = chunk.rpartition("\n")[0]
        self.offset += len(done.encode()) + (1 if done else 0)
        for line in filter(None, done.splitlines()):
            e = json.loads(line)
            if e.get("event") == "step_succeeded":
                w = measure.window(tl, e["ts"] - e.get("wall_s", 0), e["ts"])
                print(f"[{self.label}] {e['step']}: {w['wall_s']} s, {w['cpu_s']} CPU-s ({w['cores_used']} cores), "
                      f"peak PSS worker {w['peak_pss_worker_mb']} MB, tree {w['peak_pss_tree_mb']} MB",
                      file=sys.stderr, flush=True)


def _step_windows(prefix: Path) -> tuple[list[tuple[str, str, float, float]], dict[str, dict]]:
    """(step, stage, start, end) of every step the run built, in order; each step's counters."""
    events = [json.loads(x) for x in (prefix / "events.jsonl").read_text().splitlines() if x.strip()]
    stages = {st["name"]: st["stage"] for st in json.loads((prefix / "plan.json").read_text())["steps"]}
    started = {e["step"]: e["ts"] for e in events if e["event"] == "step_started"}
    done = [e for e in events if e["event"] == "step_succeeded" and e["step"] in started]
    return ([(e["step"], stages.get(e["step"], "?"), started[e["step"]], e["ts"]) for e in done],
            {e["step"]: e.get("counters", {}) for e in done})


def _artifacts(prefix: Path) -> dict[str, dict]:
    """Each step dir's artifact.json, by step name (the dir's name without its identity)."""
    out = {}
    for a in sorted(prefix.glob("*/artifact.json")):
        out[a.parent.name.rsplit("-", 1)[0]] = json.loads(a.read_text())
    return out


def fuzzy_phases(tl: measure.Timeline, start: float, end: float, artifact: dict) -> dict:
    """The fuzzy step cut into its phases: each phase's recorded wall seconds laid end to end from the
    step's start (what precedes the first phase is a few file listings), measured like a step; what
    follows the last phase (writing metadata, removing work files, hashing outputs) is ``rest``."""
    timings = (artifact.get("result") or artifact).get("timings") or {}
    out, t = {}, start
    for phase in ("candidates", "components", "marks"):
        if phase in timings:
            out[phase] = measure.window(tl, t, t + timings[phase])
            t += timings[phase]
    out["rest"] = measure.window(tl, t, end)
    return out


def _copy_records(prefix: Path, dest: Path) -> None:
    """Keep what explains a run (events, plan, each step's artifact.json) before its outputs go."""
    for name in ("events.jsonl", "plan.json"):
        if (prefix / name).exists():
            shutil.copy2(prefix / name, dest / name)
    for a in prefix.glob("*/artifact.json"):
        (dest / "artifacts").mkdir(exist_ok=True)
        shutil.copy2(a, dest / "artifacts" / f"{a.parent.name}.json")


def _makeup(parts: list[corpus.PartInfo]) -> dict:
    text = sum(p.text_bytes for p in parts)
    return {"mb_text": round(text / 1e6, 1), "docs": sum(p.docs for p in parts), "files": len(parts),
            "unique_pool_mb": round(sum(p.unique_bytes for p in parts) / 1e6, 1),
            "recombined_mb": round(sum(p.recombined_bytes for p in parts) / 1e6, 1),
            "planted_copies_mb": round(sum(p.planted_bytes for p in parts) / 1e6, 1),
            "plants": {k: sum(p.plants[k] for p in parts) for k in ("exact", "near")}}


def size_files(s: Setup, mb: float) -> tuple[list[str], dict]:
    """The corpus files of size ``mb`` and their make-up: its first files, or with --disjoint-copies the
    smallest size's files and ``mb / smallest - 1`` rotated copies of them (`corpus.disjoint_copy`)."""
    if not s.copies_of:
        parts = s.parts[:files_for(mb, s.file_mb)]
        return [str(s.work / "corpus" / p.name) for p in parts], _makeup(parts)
    times = round(mb / s.copies_of)
    if times < 1 or abs(times * s.copies_of - mb) > 1e-9:
        raise SystemExit(f"--disjoint-copies: {mb:g} MB is not a whole multiple of the smallest size, "
                         f"{s.copies_of:g} MB")
    parts = s.parts[:files_for(s.copies_of, s.file_mb)]
    files = [str(s.work / "corpus" / p.name) for p in parts]
    files += [str(corpus.disjoint_copy(s.work / "corpus", s.work / "copies", p.name, j))
              for j in range(1, times) for p in parts]
    one = _makeup(parts)
    makeup = {k: (round(v * times, 1) if isinstance(v, float) else v * times) for k, v in one.items()
              if k != "plants"}
    makeup["plants"] = {k: v * times for k, v in one["plants"].items()}
    makeup["disjoint_copies"] = {"of_mb": s.copies_of, "copies": times}
    return files, makeup


def run_size(s: Setup, mb: float) -> dict:
    """Run and measure the pipeline on the corpus files for ``mb`` (`size_files`); save runs/<mb>/result.json."""
    files, makeup = size_files(s, mb)
    dest = s.runs / f"{mb:g}"
    prefix = dest / "prefix"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for f in files:  # page-cache the input, as every size gets it
        Path(f).read_bytes()
    (dest / "manifest.yaml").write_text(json.dumps(manifest(s, prefix, files), indent=1))  # JSON is YAML
    progress = Progress(prefix / "events.jsonl", f"{mb:g} MB")
    dk = str(Path(sys.executable).with_name("datakit"))
    tl = measure.run_sampled([dk, "run", str(dest / "manifest.yaml"), "--workers", str(s.workers), "--json"],
                             user_env(), str(REPO), s.timeout, progress)
    if tl.returncode != 0:
        raise SystemExit(f"datakit run at {mb:g} MB exited {tl.returncode}: {tl.stderr[-3000:]}{tl.stdout[-2000:]}")
    windows, counters = _step_windows(prefix)
    artifacts = _artifacts(prefix)
    steps = {}
    for step, stage, t0, t1 in windows:
        w = measure.window(tl, t0, t1)
        steps[step] = {"stage": stage, **w, "cpu_hours_per_tb": _per_tb(w["cpu_s"], makeup["mb_text"]),
                       "counters": counters.get(step, {})}
    fuzzy = next(((st, t0, t1) for st, stage, t0, t1 in windows if st.startswith("fuzzy")), None)
    total = measure.window(tl, tl.start, tl.end)
    total["cpu_hours_per_tb"] = _per_tb(total["cpu_s"], makeup["mb_text"])
    result = {"mb": mb, "quality_mode": s.quality, "corpus": makeup, "total": total, "steps": steps, "rates": rates(steps),
              "load_avg_at_end": os.getloadavg(), "outside_steps_cpu_s": round(
                  total["cpu_s"] - sum(v["cpu_s"] for v in steps.values()), 2)}
    if fuzzy:
        result["fuzzy_phases"] = fuzzy_phases(tl, fuzzy[1], fuzzy[2], artifacts.get(fuzzy[0], {}))
    _copy_records(prefix, dest)
    if not s.keep_outputs:
        shutil.rmtree(prefix, ignore_errors=True)
    (dest / "result.json").write_text(json.dumps(result, indent=1))
    print(f"[{mb:g} MB] total: {total['wall_s']} s, {total['cpu_s']} CPU-s, {total['cpu_hours_per_tb']} CPU-h/TB, "
          f"peak PSS worker {total['peak_pss_worker_mb']} MB, tree {total['peak_pss_tree_mb']} MB",
          file=sys.stderr, flush=True)
    return result


def _per_tb(cpu_s: float, mb_text: float) -> float:
    return round(cpu_s / mb_text * 1e6 / 3600, 1)


def rates(steps: dict[str, dict]) -> dict:
    """Per-step rates next to Marin's: documents per CPU-s into each document step (its docs_in, or
    the documents the dedup steps read: quality's output, or normalize's without a quality stage), tokens
    per CPU-s for tokenize."""
    def first(kind: str) -> tuple[str, dict] | tuple[None, None]:
        return next(((n, v) for n, v in steps.items() if n.startswith(f"{kind}-")), (None, None))

    _, before = first("quality")
    if before is None:
        _, before = first("normalize")
    deduped = (before or {}).get("counters", {}).get("docs_out")
    out = {}
    for name, v in steps.items():
        c, cpu = v["counters"], max(v["cpu_s"], 1e-9)
        docs = c.get("docs_in") or (deduped if v["stage"] in ("exact", "fuzzy") else None)
        entry = {"docs_per_cpu_s": round(docs / cpu)} if docs else {}
        if c.get("tokenize/tokens"):
            entry["tokens_per_cpu_s"] = round(c["tokenize/tokens"] / cpu)
        if entry:
            out[name] = entry
    for kind in ("exact", "minhash", "tokenize"):
        name, _ = first(kind)
        if name in out:
            out[name]["marin"] = MARIN[kind]
    return out


# ------------------------------------------------------------------------------------------------ across sizes
def _growth(small: dict, large: dict, size_ratio: float) -> dict:
    """How a figure grew between two sizes: the ratio and its exponent (1: linear, 2: quadratic)."""
    out = {}
    for key in ("cpu_s", "wall_s", "peak_pss_tree_mb", "peak_pss_worker_mb", "peak_pss_driver_mb"):
        a, b = small.get(key), large.get(key)
        if a and b:
            out[key] = {"ratio": round(b / a, 2), "exponent": round(math.log(b / a) / math.log(size_ratio), 2)}
    return out


# What the fuzzy step's work is made of: documents bucketed, documents whose text verification re-reads
# and re-shingles (those in some candidate pair), candidate pairs (each one Jaccard), shingle sets shuffled
# to the verification reducers (a document's set once per reducer holding one of its pairs).
FUZZY_WORKLOAD = ("docs", "verify_texts_read", "candidate_pairs", "verify_sets_sent")


def _workload(small: dict, large: dict, cpu_ratio: float | None) -> dict:
    """How each part of the fuzzy step's work grew, and its CPU per unit of that work (1.0: the CPU grew
    exactly as that work did). Tells a corpus whose near-duplicates grow faster than its megabytes from
    a stage whose cost per unit of work grows."""
    out = {}
    for key in FUZZY_WORKLOAD:
        a, b = small["counters"].get(key), large["counters"].get(key)
        if a and b:
            out[key] = {"ratio": round(b / a, 2)}
            if cpu_ratio:
                out[key]["cpu_per_unit_ratio"] = round(cpu_ratio / (b / a), 2)
    return out


def fuzzy_ladder(results: list[dict]) -> list[dict]:
    """CPU and memory of the fuzzy step and of each of its phases, per step up the ladder; the phase
    whose CPU grows fastest; how its work grew (`_workload`) and the counters that explain it."""
    out = []
    for small, large in zip(results, results[1:]):
        fs = next((v for n, v in small["steps"].items() if n.startswith("fuzzy")), None)
        fl = next((v for n, v in large["steps"].items() if n.startswith("fuzzy")), None)
        if not (fs and fl):
            continue
        ratio = large["corpus"]["mb_text"] / small["corpus"]["mb_text"]
        phases = {p: _growth(small["fuzzy_phases"][p], large["fuzzy_phases"][p], ratio)
                  for p in large.get("fuzzy_phases", {}) if p in small.get("fuzzy_phases", {})}
        counters = {k: [fs["counters"].get(k), fl["counters"].get(k)] for k in sorted(fl["counters"]) if "/" not in k}
        fastest = max(phases, key=lambda p: phases[p].get("cpu_s", {}).get("exponent", 0), default=None)
        growth = _growth(fs, fl, ratio)
        out.append({"mb": [small["mb"], large["mb"]], "size_ratio": round(ratio, 2), "fuzzy": growth,
                    "workload": _workload(fs, fl, growth.get("cpu_s", {}).get("ratio")),
                    "phases": phases, "fastest_growing_phase": fastest, "counters": counters})
    return out


def flatness(results: list[dict], small_mb: float = 1000, large_mb: float = 4000) -> dict | None:
    """Peak PSS per worker (and of the driver and the tree) from ``small_mb`` to ``large_mb``: the whole
    run and each step, against the FLAT_TARGET ratio."""
    by_mb = {r["mb"]: r for r in results}
    if small_mb not in by_mb or large_mb not in by_mb:
        return None
    a, b = by_mb[small_mb], by_mb[large_mb]

    def ratio(x: dict, y: dict, key: str) -> float | None:
        return round(y[key] / x[key], 2) if x.get(key) and y.get(key) else None

    out = {"target": FLAT_TARGET, "mb": [small_mb, large_mb]}
    for key in ("peak_pss_worker_mb", "peak_pss_driver_mb", "peak_pss_tree_mb"):
        out[key] = {"whole_run": [a["total"][key], b["total"][key], ratio(a["total"], b["total"], key)],
                    "per_step": {n: [a["steps"][n][key], b["steps"][n][key], ratio(a["steps"][n], b["steps"][n], key)]
                                 for n in b["steps"] if n in a["steps"]}}
    out["worker_flat"] = (out["peak_pss_worker_mb"]["whole_run"][2] or 99) <= FLAT_TARGET
    return out


def cost_model_args(result: dict) -> dict | None:
    """The figures ``scripts/cost_model.py`` takes, from one size: CPU-s per MB of every step but the
    quality layer, the quality layer's documents per CPU-s, and the mean document size (None: a run
    without a quality stage cannot give them all)."""
    steps = result["steps"]
    quality = [v for v in steps.values() if v["stage"] == "quality"]
    if not quality:
        return None
    q_cpu = sum(v["cpu_s"] for v in quality)
    q_docs = sum(v["counters"].get("docs_in", 0) for v in quality)
    mb = result["corpus"]["mb_text"]
    per_mb = (sum(v["cpu_s"] for v in steps.values()) - q_cpu) / mb
    doc_bytes = round(mb * 1e6 / result["corpus"]["docs"])
    args = {"cpu_s_per_mb": round(per_mb, 3), "quality_docs_per_cpu_s": round(q_docs / q_cpu) if q_cpu else None,
            "doc_bytes": doc_bytes}
    args["command"] = (f"python scripts/cost_model.py --cpu-s-per-mb {args['cpu_s_per_mb']} "
                       f"--quality-docs-per-cpu-s {args['quality_docs_per_cpu_s']} --doc-bytes {doc_bytes}")
    return args


# ------------------------------------------------------------------------------------------------ main
def _same_mode(result: dict, s: Setup) -> bool:
    """Whether a saved result was measured as this run would measure it: the same quality mode and, for
    disjoint copies, copies of the same smallest size."""
    copies = (result.get("corpus") or {}).get("disjoint_copies") or {}
    return result.get("quality_mode") == s.quality and copies.get("of_mb") == s.copies_of


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=float, nargs="+", default=[100, 200, 400, 800, 1000, 4000],
                    help="MB of text per run (default 100 200 400 800 1000 4000)")
    ap.add_argument("--work", default="/tmp/datakit-scale", help="where the corpus, tokenizer and results live")
    ap.add_argument("--file-mb", type=float, default=25, help="MB of text per corpus file (default 25)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--rerun", action="store_true", help="measure sizes that already have a result again")
    ap.add_argument("--keep-outputs", action="store_true", help="keep each run's prefix")
    ap.add_argument("--timeout", type=float, default=6 * 3600, help="seconds per run")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quality-filters", action="store_true",
                      help="let the quality layer remove documents (default: annotate_only, every stage sees the "
                           "whole corpus)")
    mode.add_argument("--no-quality", action="store_true",
                      help="the same pipeline minus the quality stage: the dedup ladder in minutes "
                           "(results under runs-no-quality/)")
    ap.add_argument("--disjoint-copies", action="store_true",
                    help="every size is the smallest size's files plus rotated copies of them, so the fuzzy "
                         "step's work grows exactly as the corpus (results under runs-...-copies/)")
    args = ap.parse_args()
    work = Path(args.work).resolve()
    sizes = sorted(set(args.sizes))
    kinds, parts = prepare_corpus(work, sizes[:1] if args.disjoint_copies else sizes, args.file_mb, args.seed)
    tok, training = prepare_tokenizer(work, parts, args.vocab)
    quality = "off" if args.no_quality else "filter" if args.quality_filters else "annotate_only"
    s = Setup(work, parts, tok, args.file_mb, args.workers, args.timeout, args.keep_outputs, quality,
              sizes[0] if args.disjoint_copies else None)
    results = []
    for mb in sizes:
        saved = s.runs / f"{mb:g}" / "result.json"
        if saved.exists() and not args.rerun and _same_mode(json.loads(saved.read_text()), s):
            print(f"[{mb:g} MB] measured before: {saved}", file=sys.stderr, flush=True)
            results.append(json.loads(saved.read_text()))
        else:
            results.append(run_size(s, mb))
    report = {
        "params": {"sizes_mb": sizes, "workers": args.workers, "file_mb": args.file_mb, "seed": args.seed,
                   "ngram": f"word {NGRAM}", "bands": BANDS, "rows": ROWS, "cpu_count": os.cpu_count(),
                   "work": str(work), "langid_languages": "any" if s.quality != "off" else None, "quality": s.quality,
                   "disjoint_copies_of_mb": s.copies_of},
        "pool": {"kinds": kinds, "mb": round(sum(v["bytes"] for v in kinds.values()) / 1e6, 1)},
        "tokenizer": {"given": str(tok), "training_once": training},
        "marin": MARIN,
        "sizes": results,
        "fuzzy_ladder": fuzzy_ladder(results),
        "flatness_1gb_to_4gb": flatness(results),
        "cost_model": cost_model_args(results[-1]),
    }
    s.report.write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
