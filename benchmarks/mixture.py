"""Mixture-search benchmark: what a proxy-model search costs, how noisy its proxies are, and whether
its answer holds up against token-proportional mixing (what every peer pipeline trains on) on real
text whose answer is known. Prints JSON.

Corpus (datakit.mix.fixtures.write_known_answer, built here from this machine's files, nothing
downloaded): `prose` (the common licenses), `code` (standard-library sources), `other` (Russian and
Japanese man pages: Debian's manpages-ru and manpages-ja), every eighth document held out. One search
per case, each with its own target drawn from the held-out documents:

    two_of_three   (a) half prose, half code: `other` is irrelevant (the answer: little or none of it)
    proportional   (b) all three at the same rate, like the training data (the answer: proportional)
    one            (c) prose only, the smallest source (the answer: much more prose; a clear win)

Both sides are trained by the same training code, for the same token budget, same model, same seeds,
and measured on the same target in bits per byte: ``proportional`` is proxy 0 under each seed,
``candidate`` is the final fit's choice under the same seeds (mix-verify-sK). The run goes through
`datakit.pipeline.run`; the caches are built once and shared by the three searches.

Figures, per case:
- ``proxy_seconds``: each run's training wall (compile + steps + target evaluation): median, mean and
  sum (the search's cost in proxy-seconds); ``search_wall_s``: everything after the caches;
- ``seed_sd``: the pooled seed standard deviation of target bpb, with its degrees of freedom;
- ``proportional`` and ``candidate``: predicted and measured bpb (the mean of the seeds' runs, each run
  listed); ``gain``: predicted and measured gain over proportional with their 95% intervals;
- ``returned``, ``weights`` and ``reason``: what the search returned and why.

    .venv/bin/python -m benchmarks.mixture --proxy-steps 100                  # nano proxies
    .venv/bin/python -m benchmarks.mixture --proxy-steps 40 --seq-len 64 --d-model 32 --d-ff 64 \
        --vocab-size 512 --refine 2                                             # the tests' proxies
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time

import yaml

from datakit.mix.fixtures import CASES, KNOWN_SOURCES


def _manifest(root: str, case: str, args: argparse.Namespace) -> str:
    proxy = {"preset": "nano", "steps": args.proxy_steps, "warmup": max(1, args.proxy_steps // 10),
             "seq_len": args.seq_len, "batch_size": args.batch_size, "log_every": 50}
    proxy.update({k: v for k, v in (("d_model", args.d_model), ("d_ff", args.d_ff)) if v})
    search = {"proxies": args.proxies, "rounds": args.rounds, "refine": args.refine, "seeds": args.seeds,
              "seed": args.seed, "proxy": proxy, "target": {"jsonl": f"target-{case}.jsonl"}}
    data = {
        "prefix": "out",
        "sources": [{"name": n, "uri": f"{n}.jsonl", "format": "jsonl"} for n in KNOWN_SOURCES],
        "dedup": {"fuzzy": False},
        "tokenize": {"vocab_size": args.vocab_size, "validation_fraction": 0.05},
        "mixture": {"search": search},
    }
    path = os.path.join(root, f"{case}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(data, f, sort_keys=False)
    return path


def _device() -> str:
    import jax

    dev = jax.devices()[0]
    return f"{dev.platform}: {getattr(dev, 'device_kind', '')} ({platform.processor() or platform.machine()}, " \
           f"{os.cpu_count()} cores)"


def _side(m: dict) -> dict:
    return {"weights": m["weights"], "predicted_bpb": m.get("predicted_bpb"), "measured_bpb": m.get("measured_bpb"),
            "runs": m.get("runs")}


def _case(root: str, case: str, args: argparse.Namespace) -> dict:
    from datakit.pipeline import load_manifest, run

    t0 = time.perf_counter()
    summary = run(load_manifest(_manifest(root, case, args)), backend=args.backend, workers=args.workers)
    wall = time.perf_counter() - t0
    assert summary.ok, [s for s in summary.to_dict()["steps"] if s["status"] != "succeeded"]
    res = summary.result("mix-search")
    walls = [w for w in res["proxy_wall_s"] if w]
    return {
        "returned": res["decision"]["returned"], "weights": res["chosen"]["weights"],
        "reason": res["decision"]["reason"],
        "proportional": _side(res["baseline"]), "candidate": _side(res["candidate"]),
        "gain": {k: (None if g is None else {x: g[x] for x in ("value", "lo", "hi", "se", "df")})
                 for k, g in res["gain"].items() if k != "about"},
        "seed_sd": res["noise"]["seed_sd"], "seed_df": res["noise"]["df"],
        "fit": {k: res["fit"][k] for k in ("model", "r2", "loo_rmse", "spread", "accepted")},
        "trust_box": res["trust"]["box"],
        "proxy_seconds": {"runs": len(walls), "median": round(statistics.median(walls), 3),
                          "mean": round(statistics.fmean(walls), 3), "sum": round(sum(walls), 2)},
        "search_wall_s": round(wall, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default=",".join(CASES), help=f"Comma-separated subset of {', '.join(CASES)}.")
    ap.add_argument("--proxies", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--refine", type=int, default=4)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--proxy-steps", type=int, default=100)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--vocab-size", type=int, default=1024)
    ap.add_argument("--d-model", type=int, help="Proxy width (default: the nano preset's, 64).")
    ap.add_argument("--d-ff", type=int, help="Proxy feed-forward width (default: the nano preset's).")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backend", default="inline", choices=["inline", "local"],
                    help="inline: one process, so proxy-seconds exclude worker start-up (default)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--keep", help="Build under this directory and keep it (default: a temporary one).")
    args = ap.parse_args()

    from datakit.mix.fixtures import write_known_answer
    from datakit.pipeline import build_steps, load_manifest, run

    cases = [c for c in args.cases.split(",") if c]
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or tmp
        os.makedirs(root, exist_ok=True)
        write_known_answer(root, tuple(cases))
        m = load_manifest(_manifest(root, cases[0], args))
        t0 = time.perf_counter()
        first = run(m, backend="local", workers=args.workers,
                    steps=[s for s in build_steps(m) if not s.name.startswith("mix-")])
        assert first.ok, first.to_dict()["steps"]
        tokens = {n: first.result(f"tokenize-{n}")["splits"]["train"]["tokens"] for n in KNOWN_SOURCES}
        caches_s = round(time.perf_counter() - t0, 2)
        out = {"device": _device(), "corpus": {"train_tokens": tokens, "caches_wall_s": caches_s},
               "search": {"proxies": args.proxies, "rounds": args.rounds, "refine": args.refine, "seeds": args.seeds,
                          "proxy_steps": args.proxy_steps, "d_model": args.d_model or 64,
                          "proxy_tokens": args.proxy_steps * args.batch_size * args.seq_len, "backend": args.backend},
               "cases": {c: _case(root, c, args) for c in cases}}
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
