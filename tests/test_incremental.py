"""Incremental runs end to end on real text (the standard library, Debian's license texts and copyright
files): each change applied to a built prefix (a new source, an edited file, a deleted file, a deleted
source, a takedown) gives, step for step, exactly the files a from-scratch build of the final inputs
gives (documents, attributes, token caches), on the local and the inline backend; a run killed with
SIGKILL halfway through an incremental build, then rerun, gives the same; and two different changes run
on two copies of one built prefix each equal their own from-scratch build.

Both sides tokenize with one given tokenizer.json: a prefix pins the tokenizer it trained first, while a
fresh prefix would train on the final data (the one accepted difference, tests/test_tokenizer_pin.py)."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from datakit import pipeline

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import compare_outputs  # noqa: E402

STDLIB = Path(sysconfig.get_paths()["stdlib"])
COPYRIGHTS = sorted(glob.glob("/usr/share/doc/*/copyright"))[:60]


def _corpus(root: Path) -> dict[str, Path]:
    """Three sources of real text, one document per file: licenses, stdlib email, Debian copyrights."""
    dirs = {name: root / "corpus" / name for name in ("licenses", "code", "copyright")}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    for name in ("Apache-2.0", "GPL-3", "GPL-2", "LGPL-2.1", "MPL-2.0", "Artistic", "BSD", "LGPL-3"):
        shutil.copy(f"/usr/share/common-licenses/{name}", dirs["licenses"] / f"{name}.txt")
    for path in sorted((STDLIB / "email").glob("*.py"))[:24]:
        shutil.copy(path, dirs["code"] / path.name)
    for path in COPYRIGHTS:
        shutil.copy(path, dirs["copyright"] / (path.split("/")[-2] + ".txt"))
    return dirs


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> str:
    from datakit.tokenize.fixtures import write_source
    from datakit.tokenize.tokenizer import train_tokenizer

    root = tmp_path_factory.mktemp("tok")
    texts = [Path(p).read_text(errors="replace") for p in sorted((STDLIB / "json").glob("*.py"))]
    texts += [Path(f"/usr/share/common-licenses/{n}").read_text() for n in ("GPL-3", "Apache-2.0")]
    write_source(str(root / "src"), texts, 1)
    train_tokenizer([str(root / "src")], str(root / "tok"), vocab_size=400)
    return str(root / "tok" / "tokenizer.json")


def _manifest(prefix: Path, dirs: dict[str, Path], tokenizer: str, *, backend: str = "local",
              takedown: Path | None = None) -> dict:
    m = {"prefix": str(prefix), "backend": backend, "workers": 2,
         "sources": [{"name": name, "uri": f"{d}/*", "format": "text"} for name, d in dirs.items()],
         "normalize": {"target_shard_bytes": 30_000},
         "dedup": {"exact": True, "fuzzy": True},
         "line_dedup": {}, "pii": {},
         "tokenize": {"tokenizer": tokenizer}}
    if takedown is not None:
        m["takedown"] = {"file": str(takedown)}
    return m


def _run(m: dict) -> dict:
    s = pipeline.run(pipeline.manifest_from_dict(m))
    assert s.ok, [st for st in s.to_dict()["steps"] if st["status"] not in ("succeeded", "skipped")]
    return {st["name"]: st for st in s.to_dict()["steps"]}


def _same_as_fresh(incremental: Path, fresh: Path) -> int:
    """Every data file of every step of the fresh build's plan is in the incremental prefix, byte for byte
    (same step identities: identities hash inputs by content); returns the files compared."""
    plan = json.loads((fresh / "plan.json").read_text())
    steps = plan["plan"]["steps"] if "plan" in plan else plan["steps"]
    compared = 0
    for st in steps:
        d = f"{st['name']}-{st['identity']}"
        if not (fresh / d).exists():
            continue
        assert (incremental / d).exists(), f"{d}: not in the incremental prefix"
        a, _ = compare_outputs.data_files(str(incremental / d))
        b, _ = compare_outputs.data_files(str(fresh / d))
        assert a == b, f"{d}: differs from the fresh build: {sorted(set(a.items()) ^ set(b.items()))[:4]}"
        compared += len(b)
    assert compared > 50
    return compared


def _copy_prefix(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, copy_function=os.link)
    for rel in ("events.jsonl", "plan.json"):
        if (dst / rel).exists():
            (dst / rel).unlink()
            shutil.copy2(src / rel, dst / rel)


def _change(kind: str, root: Path, dirs: dict[str, Path]) -> tuple[dict[str, Path], Path | None]:
    """The final inputs after one change, in a copy of the corpus (the built prefix read the original)."""
    new = {name: root / kind / name for name in dirs}
    for name, d in dirs.items():
        shutil.copytree(d, new[name])
    takedown = None
    if kind == "add":
        more = root / kind / "more"
        more.mkdir()
        for path in sorted((STDLIB / "json").glob("*.py")):
            shutil.copy(path, more / path.name)
        shutil.copy("/usr/share/common-licenses/GPL-3", more / "gpl-copy.txt")  # an exact duplicate
        new["more"] = more
    elif kind == "edit":
        path = new["licenses"] / "Apache-2.0.txt"
        path.write_text(path.read_text().replace("Licensor", "Grantor", 3))
    elif kind == "delete-file":
        (new["code"] / sorted(n for n in os.listdir(new["code"]) if not n.startswith("_"))[3]).unlink()
    elif kind == "delete-source":
        del new["copyright"]
    elif kind == "takedown":
        takedown = root / kind / "takedown.txt"
        ids = [f"id {p.name}" for p in sorted(new["code"].iterdir()) if not p.name.startswith("_")][:2]
        takedown.write_text("\n".join(ids + ["id GPL-3.txt"]) + "\n")
    return new, takedown


@pytest.mark.parametrize("backend", ["local", "inline"])
@pytest.mark.parametrize("kind", ["add", "edit", "delete-file", "delete-source", "takedown"])
def test_each_change_equals_a_fresh_build(tmp_path, tokenizer, kind, backend):
    dirs = _corpus(tmp_path)
    built = tmp_path / "built"
    _run(_manifest(built, dirs, tokenizer, backend=backend))
    final, takedown = _change(kind, tmp_path, dirs)
    steps = _run(_manifest(built, final, tokenizer, backend=backend, takedown=takedown))
    fresh = tmp_path / "fresh"
    _run(_manifest(fresh, final, tokenizer, backend=backend, takedown=takedown))
    _same_as_fresh(built, fresh)
    rebuilt = {n: st for n, st in steps.items() if st["status"] == "succeeded"}
    reused = sum(st["counters"].get("files/reused", 0) for st in rebuilt.values())
    if kind != "delete-source":  # deleting a source leaves the others' steps as they were, whole
        assert reused > 0, sorted(rebuilt)
    if kind == "takedown":
        assert sum(st["counters"].get("removed/takedown", 0) for st in rebuilt.values()) == 3
        assert not any(n.startswith(("normalize", "minhash", "consolidate")) for n in rebuilt), sorted(rebuilt)


def _events(prefix: Path) -> list[dict]:
    path = prefix / "events.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # a line being written
    return out


def test_killed_incremental_run_then_rerun_equals_a_fresh_build(tmp_path, tokenizer):
    dirs = _corpus(tmp_path)
    built = tmp_path / "built"
    _run(_manifest(built, dirs, tokenizer))
    final, _ = _change("add", tmp_path, dirs)
    m = tmp_path / "final.json"
    m.write_text(json.dumps(_manifest(built, final, tokenizer)))
    before = len(_events(built))
    proc = subprocess.Popen([sys.executable, "-m", "datakit.cli", "run", str(m)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            started = [e for e in _events(built)[before:] if e.get("event") == "step_started"]
            if any(e["step"].startswith(("consolidate", "linededup", "tokenize")) for e in started):
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before the kill point"
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    _run(_manifest(built, final, tokenizer))
    fresh = tmp_path / "fresh"
    _run(_manifest(fresh, final, tokenizer))
    _same_as_fresh(built, fresh)


def test_two_changes_on_copies_of_one_prefix_each_equal_their_rebuild(tmp_path, tokenizer):
    dirs = _corpus(tmp_path)
    built = tmp_path / "built"
    _run(_manifest(built, dirs, tokenizer))
    for kind in ("add", "edit"):
        copy = tmp_path / f"copy-{kind}"
        _copy_prefix(built, copy)
        final, _ = _change(kind, tmp_path, dirs)
        _run(_manifest(copy, final, tokenizer))
        fresh = tmp_path / f"fresh-{kind}"
        _run(_manifest(fresh, final, tokenizer))
        _same_as_fresh(copy, fresh)
    # the original prefix is untouched by either: a rerun of its own inputs builds nothing
    steps = _run(_manifest(built, dirs, tokenizer))
    assert all(st["status"] == "skipped" for st in steps.values())
