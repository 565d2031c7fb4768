"""The stage contract: the registry's order, user stages from the manifest and the API, the version lock
on the real registry, and input fingerprints by content (touch rebuilds nothing, a changed byte is named)."""

from __future__ import annotations

import importlib
import json
import re
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import datakit
from datakit import pipeline
from datakit.stages import KINDS, code_fingerprint, contract, lock
from datakit.stages.registry import STAGES, sections

REPO = Path(__file__).resolve().parents[1]
STDLIB = Path(sysconfig.get_paths()["stdlib"])


# ------------------------------------------------------------------ the registry
def test_every_stage_reads_only_what_an_earlier_stage_produced():
    produced: set[str] = set()
    for stage in STAGES:
        missing = set(stage.consumes) - produced - {contract.FILES}  # local sources need no download
        assert not missing, f"{stage.name} consumes {missing} before any stage produces it"
        produced |= set(stage.produces)
    assert produced == set(KINDS)
    assert len({s.name for s in STAGES}) == len(STAGES)


def test_each_stage_declares_code_and_checks_that_exist():
    for stage in STAGES:
        assert stage.code and code_fingerprint.module_fingerprint(stage.code)
        assert f"datakit.stages.{stage.name}" in stage.code or "datakit.stages.user" in stage.code
        module, _, attr = stage.ferry_check.partition(":")
        assert callable(getattr(importlib.import_module(module), attr)), stage.name
    assert [s.key for s in sections()] == ["normalize", "quality", "dedup", "decontaminate", "line_dedup", "pii", "takedown",
                                           "quality_classifier", "tokenize", "export", "mixture", "train"]


def test_the_manifest_formats_are_the_readers():
    from datakit.manifest import FORMATS
    from datakit.sources.readers import READERS

    assert FORMATS == tuple(READERS)


def test_stages_never_import_the_ferry_or_the_cli():
    for path in (REPO / "datakit" / "stages").glob("*.py"):
        text = path.read_text()
        assert "import datakit.ferry" not in text and "from datakit.ferry" not in text, path
        assert "datakit.cli" not in text, path
    for path in (REPO / "datakit" / "shuffle").glob("*.py"):
        for line in path.read_text().splitlines():
            if line.startswith(("from datakit", "import datakit")):
                assert line.startswith(("from datakit.core", "import datakit.core")), (path, line)


# ------------------------------------------------------------------ the version lock
def test_the_checked_in_lock_matches_every_stage():
    problems = lock.check(STAGES, lock.load_lock(lock.LOCK_PATH))
    assert problems == [], "\n".join(problems)


def _copy_package(tmp_path: Path) -> Path:
    root = tmp_path / "copy"
    shutil.copytree(REPO / "datakit", root / "datakit", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _lock_cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, "-m", "datakit.stages.lock", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


def test_an_unbumped_change_to_a_stage_fails_the_lock(tmp_path):
    """In a copy of the package: a code change in normalize's room fails the check, naming the stage and
    both ways out; a comment-only change does not; bumping the version and recording passes again."""
    root = _copy_package(tmp_path)
    clean = root / "datakit" / "normalize" / "clean.py"
    assert _lock_cli(root, "check").returncode == 0
    clean.write_text(clean.read_text() + "\n# a comment changes nothing\n")
    assert _lock_cli(root, "check").returncode == 0
    clean.write_text(clean.read_text() + "\nMAX_EXTRA = 1  # a code change\n")
    r = _lock_cli(root, "check")
    assert r.returncode == 1
    version = int(importlib.import_module("datakit.stages.normalize").VERSION)
    assert f"stage normalize: code changed since version {version}" in r.stdout + r.stderr
    assert "--output-preserving normalize" in r.stdout + r.stderr
    assert _lock_cli(root, "record").returncode == 1  # re-recording an unbumped change is refused
    stage_file = root / "datakit" / "stages" / "normalize.py"
    bumped = stage_file.read_text().replace(f'VERSION = "{version}"', f'VERSION = "{version + 1}"')
    stage_file.write_text(bumped)
    r = _lock_cli(root, "check")
    assert r.returncode == 1 and f"version {version + 1} is not recorded" in r.stdout + r.stderr
    assert _lock_cli(root, "record").returncode == 0
    assert _lock_cli(root, "check").returncode == 0
    recorded = json.loads((root / "datakit" / "stages" / "versions.lock.json").read_text())
    assert {str(version), str(version + 1)} <= set(recorded["normalize"])


# ------------------------------------------------------------------ user stages and content fingerprints
FILTER = '''
def drop_short(doc, config):
    """Keep documents of at least min_chars characters."""
    return len(doc["text"]) >= config["min_chars"] or "too_short"
'''


def _corpus(tmp_path: Path) -> Path:
    """Real text: the json and email packages of the standard library, as plain text documents."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for pkg in ("json", "email"):
        for f in sorted((STDLIB / pkg).glob("*.py")):
            shutil.copy(f, docs / f"{pkg}_{f.name}")
    for i, f in enumerate(sorted(docs.iterdir())):  # mtimes safely in the past: cached hashes are reused
        os.utime(f, (1_700_000_000 + i, 1_700_000_000 + i))
    return docs


def _manifest(tmp_path: Path, *, train: bool) -> Path:
    (tmp_path / "toyfilters.py").write_text(FILTER)
    train_section = textwrap.dedent("""
        train: {steps: 2, seq_len: 32, batch_size: 2, warmup: 0, eval_every: 0, checkpoint_every: 0,
                d_model: 32, n_heads: 2, n_kv_heads: 1, d_ff: 64, log_every: 1}
        """) if train else ""
    path = tmp_path / "sources.yaml"
    path.write_text(textwrap.dedent("""
        prefix: out
        backend: inline
        sources:
          - {name: code, uri: docs/*.py, format: text}
        stages:
          - name: drop-short
            call: toyfilters:drop_short
            kind: filter
            place: after_normalize
            config: {min_chars: 2000}
        tokenize: {vocab_size: 300, validation_fraction: 0.1}
        """) + train_section)
    return path


def _by_name(summary) -> dict[str, dict]:
    return {s["name"]: s for s in summary.steps}


@pytest.mark.slow
def test_a_user_filter_from_the_manifest_feeds_dedup_tokenize_and_train(tmp_path):
    docs = _corpus(tmp_path)
    m = pipeline.load_manifest(_manifest(tmp_path, train=True))
    steps = {s.name: s for s in pipeline.build_steps(m)}
    assert [d.name for d in steps["drop-short-code"].deps] == ["normalize-code"]
    assert "drop-short-code" in [d.name for d in steps["exact-dedup"].deps]
    assert "drop-short-code" in [d.name for d in steps["consolidate-code"].deps]
    summary = pipeline.run(m)
    assert summary.ok, summary.to_dict()
    steps = _by_name(summary)
    c = steps["drop-short-code"]["counters"]
    short = sum(len(f.read_text()) < 2000 for f in docs.iterdir())
    assert short > 0 and c["removed"] == short and c["docs_in"] == c["docs_out"] + short
    assert c["docs_in"] == steps["normalize-code"]["counters"]["records_out"]
    out = Path(steps["drop-short-code"]["output"])
    removed = pq.read_table(out / "outputs" / "removed").to_pylist()
    assert len(removed) == short and {(r["reason"], r["detail"]) for r in removed} == {("drop-short", "too_short")}
    kept = pq.read_table(out / "outputs" / "main")
    assert all(len(t) >= 2000 for t in kept.column("text").to_pylist())
    assert steps["consolidate-code"]["counters"]["docs_in"] == c["docs_out"]
    tokenized = summary.result("tokenize-code")["splits"]
    assert sum(s["docs"] for s in tokenized.values()) == steps["consolidate-code"]["counters"]["docs_out"]
    assert steps["train"]["status"] == "succeeded"

    # Editing the filter's code rebuilds it and everything downstream, never serving the old output.
    (tmp_path / "toyfilters.py").write_text(FILTER.replace('config["min_chars"]', 'config["min_chars"] * 2'))
    dry = _by_name(pipeline.run(pipeline.load_manifest(tmp_path / "sources.yaml"), dry_run=True))
    assert dry["normalize-code"]["status"] == "would_skip"
    for name in ("drop-short-code", "exact-dedup", "minhash-code", "fuzzy-dups", "consolidate-code", "tokenizer",
                 "tokenize-code", "train"):
        assert dry[name]["status"] == "would_run", name
    assert "config changed: code" in dry["drop-short-code"]["reason"]
    again = pipeline.run(pipeline.load_manifest(tmp_path / "sources.yaml"))
    assert again.ok
    longer = sum(len(f.read_text()) < 4000 for f in docs.iterdir())
    assert _by_name(again)["drop-short-code"]["counters"]["removed"] == longer > short


def test_a_user_stage_from_the_api_takes_the_function_itself(tmp_path):
    """From code, `call` may be the function: a map that rewrites text gets the new text's content id."""
    _corpus(tmp_path)
    from user_stage_fixtures import shout

    m = datakit.manifest_from_dict({
        "prefix": str(tmp_path / "out"), "backend": "inline",
        "sources": [{"name": "code", "uri": str(tmp_path / "docs" / "json_*.py"), "format": "text"}],
        "stages": [{"name": "shout", "call": shout, "kind": "map", "place": "after_consolidate"}],
        "tokenize": {"vocab_size": 300},
    })
    summary = pipeline.run(m)
    assert summary.ok, summary.to_dict()
    step = _by_name(summary)["shout-code"]
    assert step["counters"]["changed"] == step["counters"]["docs_in"] > 0
    rows = pq.read_table(Path(step["output"]) / "outputs" / "main").to_pylist()
    from datakit.core.documents import content_id

    assert all(r["text"].isupper() or not r["text"].strip() for r in rows)
    assert all(r["id"] == content_id(r["text"]) for r in rows)
    assert [r["id"] for r in rows] == sorted(r["id"] for r in rows)
    assert summary.records["tokenize-code"].result["splits"]["train"]["docs"] > 0


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "datakit.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.slow
def test_touch_rebuilds_nothing_and_a_changed_byte_is_named(tmp_path):
    docs = _corpus(tmp_path)
    manifest = _manifest(tmp_path, train=False)
    r = _cli("run", str(manifest), "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for f in docs.iterdir():
        f.touch()
    r = _cli("run", str(manifest), "--dry-run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "would_run" not in r.stdout and "nothing to rebuild" in r.stdout, r.stdout
    target = docs / "json_decoder.py"
    data = bytearray(target.read_bytes())
    data[100] = ord("X") if data[100] != ord("X") else ord("Y")
    target.write_bytes(bytes(data))
    r = _cli("run", str(manifest), "--dry-run", "--json", cwd=tmp_path)
    plan = {s["name"]: s for s in json.loads(r.stdout.strip().splitlines()[-1])["steps"]}
    assert plan["normalize-code"]["status"] == "would_run"
    assert re.fullmatch(r"input files changed \(incremental: 0 new, 1 changed, 0 removed of \d+\): "
                        r"json_decoder\.py \(changed\)", plan["normalize-code"]["reason"])
    assert plan["tokenize-code"]["status"] == "would_run"
    r = _cli("run", str(manifest), "--dry-run", cwd=tmp_path)
    assert re.search(r"input files changed \(incremental: 0 new, 1 changed, 0 removed of \d+\): json_decoder\.py",
                     " ".join(r.stdout.split()))


def test_a_new_fuzzy_version_keeps_every_source_s_signatures(tmp_path, monkeypatch):
    """The MinHash signatures are a stage of their own (stages/minhash.py), versioned apart from fuzzy
    dedup's keep rule and marks: a new fuzzy version rebuilds fuzzy-dups, never a source's minhash step
    (reading and shingling every document again)."""
    from datakit.stages import fuzzy

    _corpus(tmp_path)
    m = pipeline.manifest_from_dict({
        "prefix": str(tmp_path / "out"), "backend": "inline", "dedup": {"fuzzy": True},
        "sources": [{"name": "code", "uri": str(tmp_path / "docs" / "*.py"), "format": "text"}],
        "tokenize": {"vocab_size": 300}})
    only = [s.name for s in pipeline.build_steps(m) if s.name.startswith(("normalize-", "minhash-", "fuzzy-dups"))]
    assert pipeline.run(m, only=only).ok
    monkeypatch.setattr(fuzzy, "VERSION", "999")
    dry = _by_name(pipeline.run(m, dry_run=True, only=only))
    assert dry["minhash-code"]["status"] == "would_skip"
    assert dry["fuzzy-dups"]["status"] == "would_run" and f"stage version {fuzzy.STAGE.version} -> 999" in \
        dry["fuzzy-dups"]["reason"], dry["fuzzy-dups"]
    # and the plan says the earlier build gives it nothing (every reuse key holds the version)
    assert dry["fuzzy-dups"]["plan"]["mode"] == "full" and dry["fuzzy-dups"]["plan"]["earlier_version"] == \
        fuzzy.STAGE.version
    from datakit.cli.run import _plan_line

    assert _plan_line(dry["fuzzy-dups"]["plan"]).startswith(f"full build ({dry['fuzzy-dups']['plan']['earlier']} is "
                                                            f"of stage version {fuzzy.STAGE.version}: nothing of it")
