"""Export benchmark: tokens per CPU-second and peak memory of each `datakit export` format on a built
run's token caches, against the floor of writing the same token bytes with numpy (each shard's tokens
read from the cache and `tofile`d into one flat file). Prints JSON.

Each contender runs in its own fresh child process (`--child FORMAT`) on the inline backend, so its
CPU time (user + system, the child's own) and peak RSS (ru_maxrss) cover exactly one export; imports
and interpreter start are outside the timed region. Tokens are the exported splits' tokens (EOS
included), the same count for every contender.

Usage:
    python -m benchmarks.export --prefix PREFIX        # a run's output prefix (the caches its plan.json names)
    python -m benchmarks.export                        # builds a small stdlib run first (a few MB)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time

from benchmarks.common import module_command

FORMATS = ("megatron", "hf", "hf:2048", "mds", "nanogpt")  # hf:2048: rows packed to seq_len 2048


def _request(fmt: str, prefix: str, dest: str, seq_len: int | None = None):
    """The export of the plan published under ``prefix`` (its components, weights and tokenizer)."""
    from datakit.stages.export import request_from_plan
    from datakit.stages.plan import read_plan

    plan = read_plan(prefix)
    assert plan is not None, f"no plan.json under {prefix}: run `datakit run` there first"
    return request_from_plan(plan, prefix, fmt, dest, ("train", "validation"), seq_len)


def _numpy_floor(prefix: str, dest: str) -> int:
    """Every split's tokens, shard by shard, written with ndarray.tofile: the bytes-out floor."""
    from datakit.export.inputs import load_shard, shard_refs

    total, comps = 0, _request("nanogpt", prefix, dest).components
    os.makedirs(dest, exist_ok=True)
    for split in ("train", "validation"):
        with open(os.path.join(dest, f"{split}.bin"), "wb") as f:
            for c in comps:
                for ref in shard_refs(c, split):
                    tokens, _ = load_shard(ref)
                    tokens.tofile(f)
                    total += len(tokens)
    return total


def _child(fmt: str, prefix: str, dest: str) -> dict:
    from datakit.export import export
    from datakit.shuffle import ExecConfig

    start, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    if fmt == "numpy_floor":
        tokens = _numpy_floor(prefix, dest)
    else:
        name, _, seq_len = fmt.partition(":")
        req = _request(name, prefix, dest, int(seq_len) if seq_len else None)
        tokens = export(req, ExecConfig(backend="inline"))["counters"]["export/tokens"]
    end = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (end.ru_utime - start.ru_utime) + (end.ru_stime - start.ru_stime)
    return {"tokens": tokens, "cpu_s": round(cpu, 3), "wall_s": round(time.perf_counter() - wall, 3),
            "tokens_per_cpu_s": round(tokens / cpu) if cpu > 0 else None, "peak_rss_mb": round(end.ru_maxrss / 1024, 1)}


def _small_run(root: str) -> str:
    """A small real run: two stdlib sources tokenized (vocab 4096), no training."""
    import datakit

    stdlib = sysconfig.get_paths()["stdlib"]
    prefix = os.path.join(root, "run")
    m = datakit.manifest_from_dict({"prefix": prefix, "tokenize": {"vocab_size": 4096},
                                    "sources": [{"name": "stdlib", "uri": f"{stdlib}/*.py", "format": "text"},
                                                {"name": "email", "uri": f"{stdlib}/email/*.py", "format": "text"}]})
    assert datakit.run(m, backend="local").ok
    return prefix


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefix")
    ap.add_argument("--child")
    ap.add_argument("--dest")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.prefix, args.dest)))
        return
    root = tempfile.mkdtemp(prefix="bench-export-")
    try:
        prefix = args.prefix or _small_run(root)
        rows = {}
        for fmt in ("numpy_floor", *FORMATS):
            cmd = module_command(sys.executable, "export", "--child", fmt, "--prefix", prefix,
                                 "--dest", os.path.join(root, fmt.replace(":", "-")))
            rows[fmt] = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
        floor = rows["numpy_floor"]["tokens_per_cpu_s"]
        for fmt in FORMATS:
            rows[fmt]["vs_numpy_floor"] = round(rows[fmt]["tokens_per_cpu_s"] / floor, 3) if floor else None
        print(json.dumps({"prefix": prefix, "results": rows}, indent=1))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
