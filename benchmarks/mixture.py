"""Mixture-search benchmark: what a proxy-model search costs, and how much target loss it gains over
token-proportional mixing (what every peer pipeline trains on), side by side in one run. Prints JSON.

Corpus (datakit.mix.fixtures, built here, nothing downloaded): `clean` English prose (one document per
paragraph of /usr/share/common-licenses) and `noise` random letter strings, ``--noise-ratio`` times as
many characters. The target is `clean`'s validation split. Both sides are trained by the same training
code, for the same token budget, same model, same seeds, and measured on the same target in bits per
byte: ``proportional`` is proxy 0 (the token-proportional mixture, the prior), ``chosen`` is the
search's choice trained by mix-verify. The run goes through `datakit.pipeline.run` on the local backend:
the proxies train in parallel on ``--workers`` worker processes (mix-proxies dispatches them).

Figures:
- ``search.proxy_seconds``: each proxy's training wall (compile + steps + target evaluation);
  ``proxy_seconds_sum`` is the search's cost in proxy-seconds, ``dispatch_wall_s`` the wall-clock it took
  with the workers in parallel, ``search_wall_s`` everything after the caches (proxies, fit, verify, file).
- ``target``: bits per byte of proportional and chosen, ``gain_bpb`` = proportional - chosen, and
  ``ratio`` = chosen / proportional (below 1: the search wins).

    .venv/bin/python -m benchmarks.mixture --proxies 8 --proxy-steps 100 --workers 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time

import yaml


def _manifest(root: str, args: argparse.Namespace) -> str:
    proxy = {"preset": "nano", "steps": args.proxy_steps, "warmup": max(1, args.proxy_steps // 10),
             "seq_len": args.seq_len, "batch_size": args.batch_size, "log_every": 50}
    data = {
        "prefix": "out",
        "sources": [{"name": n, "uri": f"{n}.jsonl", "format": "jsonl"} for n in ("clean", "noise")],
        "dedup": {"fuzzy": False},
        "tokenize": {"vocab_size": args.vocab_size, "validation_fraction": 0.05},
        "mixture": {"search": {"proxies": args.proxies, "seed": args.seed, "proxy": proxy, "verify": True,
                               "target": {"validation": ["clean"]}}},
    }
    path = os.path.join(root, "sources.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(data, f, sort_keys=False)
    return path


def _device() -> str:
    import jax

    dev = jax.devices()[0]
    return f"{dev.platform}: {getattr(dev, 'device_kind', '')} ({platform.processor() or platform.machine()}, " \
           f"{os.cpu_count()} cores)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--proxies", type=int, default=8)
    ap.add_argument("--proxy-steps", type=int, default=100)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--vocab-size", type=int, default=1024)
    ap.add_argument("--noise-ratio", type=float, default=3.0)
    ap.add_argument("--repeat-clean", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--keep", help="Build under this directory and keep it (default: a temporary one).")
    args = ap.parse_args()

    from datakit.mix.fixtures import write_corpus
    from datakit.pipeline import build_steps, load_manifest, run

    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or tmp
        os.makedirs(root, exist_ok=True)
        write_corpus(root, noise_ratio=args.noise_ratio, repeat_clean=args.repeat_clean)
        m = load_manifest(_manifest(root, args))
        names = [s.name for s in build_steps(m, write_cache=False)]
        caches = [n for n in names if not n.startswith("mix-")]
        t0 = time.perf_counter()
        first = run(m, backend="local", workers=args.workers, steps=[s for s in build_steps(m) if s.name in caches])
        caches_s = time.perf_counter() - t0
        assert first.ok, first.to_dict()["steps"]
        t0 = time.perf_counter()
        summary = run(m, backend="local", workers=args.workers)
        search_s = time.perf_counter() - t0
        assert summary.ok, [s for s in summary.to_dict()["steps"] if s["status"] != "succeeded"]
        walls = {s["name"]: s.get("wall_s") for s in summary.to_dict()["steps"]}
        res = summary.result("mix-search")
        tokens = {n: summary.result(f"tokenize-{n}")["splits"]["train"]["tokens"] for n in ("clean", "noise")}
        proxy_s = [summary.result(f"mix-proxy-{i:02d}")["wall_s"] for i in range(args.proxies)]
        base, chosen = res["baseline"], res["chosen"]
        if not all(tokens.values()):
            raise SystemExit(f"a side processed no tokens: {tokens}")
        out = {
            "device": _device(),
            "corpus": {"train_tokens": tokens, "caches_wall_s": round(caches_s, 2)},
            "search": {"proxies": args.proxies, "proxy_tokens": summary.result("mix-proxy-00")["tokens"],
                       "proxy_seconds": [round(s, 2) for s in proxy_s], "proxy_seconds_sum": round(sum(proxy_s), 2),
                       "dispatch_wall_s": walls.get("mix-proxies"), "workers": args.workers,
                       "fit_wall_s": walls.get("mix-fit"), "verify_wall_s": walls.get("mix-verify"),
                       "search_wall_s": round(search_s, 2), "fit": res["fit"]},
            "target": {"proportional": {"weights": base["weights"], "bpb": base["measured_bpb"]},
                       "chosen": {"weights": chosen["weights"], "bpb": chosen["measured_bpb"],
                                  "predicted_bpb": chosen["predicted_bpb"]},
                       "gain_bpb": round(base["measured_bpb"] - chosen["measured_bpb"], 4),
                       "ratio": round(chosen["measured_bpb"] / base["measured_bpb"], 4)},
        }
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
