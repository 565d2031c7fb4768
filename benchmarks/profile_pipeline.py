"""Where the pipeline's CPU goes: py-spy over the whole process tree of `datakit run`, on the pipeline
benchmark's corpus, summarized by datakit module and by leaf function.

The run is benchmarks/pipeline.py's datakit side (same corpus, tokenizer and manifest: normalize -> exact
-> minhash 14x8 -> fuzzy -> consolidate -> tokenize, 2 workers), under
``py-spy record --subprocesses --format raw`` (samples of every Python process of the tree: driver,
engine workers, spawned helpers; native frames are not followed, so time inside a C extension is charged
to the Python line that called it). Samples are grouped two ways:

  by_module   the innermost datakit frame of each stack (``datakit/dedup/minhash.py`` ...): which of our
              modules, including what it calls into (numpy, pyarrow, zstandard, tiktoken), holds the CPU;
              a stack inside an import is charged to "imports" instead, whoever imports
  by_leaf     the innermost frame, whatever its file: the hottest lines' functions

Idle samples (a process waiting on a pipe, a lock or sleep) are left out (py-spy's default without
--idle). One JSON object on stdout; the raw stacks stay in the work dir for a flame graph.

    .venv/bin/pip install py-spy            # a profiling tool, not a datakit dependency
    .venv/bin/python -m benchmarks.profile_pipeline --mb 100 --work /tmp/dk-pipe-100
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

from benchmarks import pipeline as pb
from benchmarks.common import REPO

_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def _frames(stack: str) -> list[tuple[str, str]]:
    """(function, file) per frame, outermost first; process header frames dropped."""
    out = []
    for frame in stack.split(";"):
        m = _FRAME.match(frame)
        if m and not frame.startswith("process "):
            out.append((m["func"], m["file"]))
    return out


def _module(file: str) -> str | None:
    i = file.find("datakit/")
    return file[i:] if i >= 0 and "/benchmarks/" not in file else None


def summarize(raw: Path, top: int) -> dict:
    """Sample counts by innermost datakit module and by leaf function."""
    by_module: Counter = Counter()
    by_leaf: Counter = Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n, frames = int(count), _frames(stack)
        if not frames:
            continue
        total += n
        mods = [_module(f) for _, f in frames]
        if any(f.startswith("<frozen importlib") for _, f in frames):
            inner = "(imports)"
        else:
            inner = next((m for m in reversed(mods) if m), "(outside datakit: interpreter start, runpy)")
        by_module[inner] += n
        func, file = frames[-1]
        by_leaf[f"{func} ({file.rsplit('site-packages/', 1)[-1]})"] += n

    def share(c: Counter) -> list[dict]:
        return [{"where": k, "samples": v, "share": round(v / total, 4)} for k, v in c.most_common(top)]

    return {"samples": total, "by_module": share(by_module), "by_leaf": share(by_leaf)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=100)
    ap.add_argument("--work", required=True,
                    help="work dir (corpus and tokenizer reused, as benchmarks.pipeline --reuse)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rate", type=int, default=100, help="samples per second per process")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if not spy:
        sys.exit("py-spy is not installed: .venv/bin/pip install py-spy")
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    corpus_dir, info, tok = pb.prepare(work, args.mb, max(2, round(args.mb / 50)), 0, 8192)
    from datakit.tokenize.tokenizer import EOS_TOKEN

    s = pb.Setup(work, corpus_dir, info, tok, EOS_TOKEN, args.workers, 7200, "spacy")
    prefix = work / "profile-out"
    shutil.rmtree(prefix, ignore_errors=True)
    manifest = work / "profile.yaml"
    manifest.write_text(pb.datakit_manifest(s, prefix))
    pb.warm(sys.executable, "import datakit.pipeline, datakit.dedup, datakit.tokenize.tokenize_step", corpus_dir)
    raw = work / "profile.raw.txt"
    dk = str(Path(sys.executable).with_name("datakit"))
    cmd = [spy, "record", "--subprocesses", "--format", "raw", "--rate", str(args.rate),
           "--output", str(raw), "--", dk, "run", str(manifest), "--workers", str(args.workers)]
    proc = subprocess.run(cmd, cwd=str(REPO), capture_output=True, text=True, env=dict(os.environ))
    if proc.returncode != 0 or not raw.exists():
        sys.exit(f"py-spy / datakit run failed ({proc.returncode}): {proc.stderr[-3000:]}")
    report = {"corpus_mb": info.mb, "docs": info.docs, "workers": args.workers, "rate_hz": args.rate,
              "raw_stacks": str(raw), **summarize(raw, args.top)}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
