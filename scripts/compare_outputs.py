"""Compare two `datakit run` prefixes file by file, matching steps by NAME (identities may differ).

    python scripts/compare_outputs.py OLD_PREFIX NEW_PREFIX [--json]

Why: a refactor may re-key step identities (new config layout, new versions), but it must not change
one byte of what the stages write. This walks every step dir present in both prefixes and compares the
sha256 of every data file. Files that record *when* and *how long* rather than *what* are skipped, and
listed: markers (.status, .lease.*), artifact.json (timestamps, identities), events.jsonl, and the train
step's timing records (metrics.jsonl, result.json, loss.png: wall-clock and tokens/s). Checkpoints
(.npz) are compared array by array, parameters and optimizer state bit for bit, and their metadata
record without its wall-clock "time". Exit 0 when every compared file is identical.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys

_STEP_DIR = re.compile(r"^(?P<name>.+)-(?P<identity>[0-9a-f]{10})$")
_SKIP_NAMES = {".status", "artifact.json", "error.txt", "events.jsonl", "metrics.jsonl", "result.json", "loss.png",
               "outputs.manifest.json",  # the step's record of its outputs (sizes, hashes), not data
               "reuse.json"}  # per-file reuse keys (steps/reuse.py): bookkeeping, not data
_SKIP_DIR = "reuse"  # content-addressed units kept for the next build (segment keys, n-gram hits, pairs)


def step_dirs(prefix: str) -> dict[str, str]:
    """Step name -> its dir (the newest by mtime if a name has several identities)."""
    out: dict[str, tuple[float, str]] = {}
    for entry in os.scandir(prefix):
        m = _STEP_DIR.match(entry.name)
        if entry.is_dir() and m and os.path.exists(os.path.join(entry.path, ".status")):
            t = os.stat(os.path.join(entry.path, ".status")).st_mtime
            if m["name"] not in out or t > out[m["name"]][0]:
                out[m["name"]] = (t, entry.path)
    return {k: v[1] for k, v in out.items()}


def data_files(step_dir: str) -> tuple[dict[str, str], list[str]]:
    """(relative path -> sha256 of every compared file, skipped relative paths)."""
    files, skipped = {}, []
    for root, _, names in os.walk(step_dir):
        for n in names:
            rel = os.path.relpath(os.path.join(root, n), step_dir)
            if n in _SKIP_NAMES or n.startswith(".lease") or rel.split(os.sep, 1)[0] == _SKIP_DIR:
                skipped.append(rel)
                continue
            files[rel] = _digest(os.path.join(root, n))
    return files, sorted(skipped)


def _digest(path: str) -> str:
    h = hashlib.sha256()
    if path.endswith(".npz"):
        import numpy as np

        with np.load(path, allow_pickle=False) as z:
            for key in sorted(z.files):
                value = z[key]
                if key == "__meta__":
                    meta = json.loads(bytes(value).decode())
                    meta.pop("time", None)
                    value = json.dumps(meta, sort_keys=True).encode()
                else:
                    value = f"{value.dtype}{value.shape}".encode() + value.tobytes()
                h.update(key.encode() + b"\0" + value)
        return h.hexdigest()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def compare(old: str, new: str) -> dict:
    a, b = step_dirs(old), step_dirs(new)
    report = {"steps": {}, "only_old": sorted(set(a) - set(b)), "only_new": sorted(set(b) - set(a))}
    for name in sorted(set(a) & set(b)):
        fa, skipped = data_files(a[name])
        fb, _ = data_files(b[name])
        report["steps"][name] = {
            "files": len(fa), "identical": sum(fa[k] == fb.get(k) for k in fa),
            "differ": sorted(k for k in fa if k in fb and fa[k] != fb[k]),
            "only_old": sorted(set(fa) - set(fb)), "only_new": sorted(set(fb) - set(fa)), "skipped": skipped,
        }
    report["ok"] = not report["only_old"] and not report["only_new"] and all(
        not s["differ"] and not s["only_old"] and not s["only_new"] for s in report["steps"].values())
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    report = compare(args.old, args.new)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        for name, s in report["steps"].items():
            bad = s["differ"] + s["only_old"] + s["only_new"]
            print(f"{'same' if not bad else 'DIFF':<5} {name:<32} {s['identical']}/{s['files']} files identical"
                  + (f"; differ: {', '.join(bad[:5])}" if bad else ""))
        for k in ("only_old", "only_new"):
            if report[k]:
                print(f"steps {k}: {', '.join(report[k])}")
        print("identical" if report["ok"] else "DIFFERENT")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
