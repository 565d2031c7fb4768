"""The `datakit` command line end to end: validate, dry-run, run, rerun, status, cache inspect."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import tracemalloc
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from datakit.cli import main

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def _tree(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def _corpus(tmp_path: Path) -> Path:
    """A small real corpus: stdlib modules as text, license-like jsonl with planted duplicates."""
    code = tmp_path / "code"
    code.mkdir()
    for name in ("heapq.py", "bisect.py", "textwrap.py", "shlex.py", "fnmatch.py", "colorsys.py"):
        (code / name).write_text((STDLIB / name).read_text())
    docs = tmp_path / "docs"
    docs.mkdir()
    base = (STDLIB / "string.py").read_text()[:4000]
    rows = [{"text": base + f"\nvariant {i}", "doc": f"d{i}"} for i in range(6)]
    rows.append({"text": base + "\nvariant 0", "doc": "exact-copy"})
    rows.append({"text": (STDLIB / "glob.py").read_text(), "doc": "glob"})
    (docs / "part-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    bench = tmp_path / "bench.jsonl"
    bench.write_text(json.dumps({"question": "Heaps are arrays for which a[k] <= a[2*k+1] and a[k] <= a[2*k+2] for "
                                             "all k, counting elements from 0."}) + "\n")
    manifest = tmp_path / "sources.yaml"
    manifest.write_text(f"""\
prefix: out
sources:
  - name: code
    uri: {code}/*.py
    format: text
  - name: docs
    uri: {docs}/*.jsonl
    format: jsonl
    id_field: doc
decontaminate:
  benchmarks:
    - name: heap-bench
      path: bench.jsonl
      text_fields: [question]
tokenize:
  vocab_size: 512
  validation_fraction: 0.2
train:
  preset: nano
  seq_len: 32
  batch_size: 4
  steps: 3
  warmup_steps: 1
  eval_every: 3
  checkpoint_every: 3
""")
    return manifest


def test_validate_reports_every_error_with_line_and_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("sources:\n  - name: a\n    uri: /nonexistent/*.jsonl\n    format: jsnl\n  - name: a\n    uri: x\n"
                   "    format: text\n    colour: red\n")
    res = CliRunner().invoke(main, ["validate", str(bad)])
    assert res.exit_code == 2
    assert "bad.yaml:4:5: sources[0].format: 'jsnl' is not one of jsonl, parquet, text, html, warc" in res.output
    assert "sources[1].colour" in res.output and "sources[1].name" in res.output
    res = CliRunner().invoke(main, ["run", str(bad), "--prefix", str(tmp_path / "never")])
    assert res.exit_code == 2
    assert not (tmp_path / "never").exists()


def test_validate_locates_unknown_sources_in_the_classifier_section(tmp_path):
    """A source name the run would refuse (positives, negative_sources, apply_to) is a located error at
    validate time, with the closest name; a switched-off section names what it likes."""
    web = tmp_path / "web.jsonl"
    web.write_text(json.dumps({"text": "hello"}) + "\n")
    manifest = tmp_path / "m.yaml"
    manifest.write_text(f"sources:\n  - {{name: web, uri: {web}, format: jsonl}}\n"
                        f"  - {{name: reference, uri: {web}, format: jsonl}}\n"
                        "quality_classifier:\n  positives: [refrence]\n  negative_sources: [web, nope]\n"
                        "  apply_to: [webb]\n")
    res = CliRunner().invoke(main, ["validate", str(manifest)])
    assert res.exit_code == 2, res.output
    assert (f"{manifest}:5:15: quality_classifier.positives[0]: no source named 'refrence' "
            "(did you mean 'reference'?); sources: reference, web") in res.output
    assert f"{manifest}:6:27: quality_classifier.negative_sources[1]: no source named 'nope';" in res.output
    assert f"{manifest}:7:14: quality_classifier.apply_to[0]: no source named 'webb' (did you mean 'web'?)" in res.output
    manifest.write_text(manifest.read_text() + "  enabled: false\n")
    res = CliRunner().invoke(main, ["validate", str(manifest)])
    assert res.exit_code == 0, res.output


def test_validate_says_what_a_stage_would_refuse(tmp_path):
    """A manifest the schema accepts but a stage refuses before the run touches the prefix (here sources
    that keep duplicate ids beside corpus-level dedup) fails validate in one line, as run would."""
    web = tmp_path / "web.jsonl"
    web.write_text(json.dumps({"text": "hello"}) + "\n")
    manifest = tmp_path / "m.yaml"
    manifest.write_text(f"sources:\n  - {{name: web, uri: {web}, format: jsonl, dedup: none}}\n")
    res = CliRunner().invoke(main, ["validate", str(manifest)])
    assert res.exit_code == 2, res.output
    assert "sources[0].dedup: 'none' keeps duplicate ids in 'web'" in res.output
    assert "ok (" not in res.output
    manifest.write_text(manifest.read_text() + "dedup: {exact: false, fuzzy: false}\n")
    res = CliRunner().invoke(main, ["validate", str(manifest)])
    assert res.exit_code == 0 and "ok (1 sources)" in res.output, res.output


def test_validate_locates_unknown_language_codes_with_a_hint(tmp_path):
    """An unknown langid code (section and per-source override) is a located error naming the code meant."""
    web = tmp_path / "web.jsonl"
    web.write_text(json.dumps({"text": "hello"}) + "\n")
    manifest = tmp_path / "m.yaml"
    manifest.write_text(f"sources:\n  - {{name: web, uri: {web}, format: jsonl}}\n"
                        "quality:\n  langid: {languages: [en, polish]}\n"
                        "  sources:\n    web: {langid: {languages: [EN, xx-none]}}\n")
    res = CliRunner().invoke(main, ["validate", str(manifest)])
    assert res.exit_code == 2, res.output
    assert (f"{manifest}:4:12: quality.langid.languages: unknown language code 'polish': did you mean 'pl'?"
            in res.output)
    assert (f"{manifest}:6:20: quality.sources.web.langid.languages: unknown language code 'EN': did you mean "
            "'en'?; 'xx-none'" in res.output)
    manifest.write_text(manifest.read_text().replace("polish", "pl").replace("EN, xx-none", "de"))
    res = CliRunner().invoke(main, ["validate", str(manifest)])
    assert res.exit_code == 0, res.output


def test_validate_refuses_a_yaml_alias_bomb_fast_with_one_located_line(tmp_path):
    """Nine levels of nine aliases (9**9 values if expanded, gigabytes): validate refuses after copying
    a bounded number of values, in one located line, and traced memory stays small."""
    lines = ["x-a0: &a0 [" + ", ".join(['"lol"'] * 9) + "]"]
    lines += [f"x-a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\nsources:\n  - name: web\n    uri: x.jsonl\n    format: jsonl\n")
    CliRunner().invoke(main, ["validate", str(tmp_path / "absent.yaml")])  # imports done before tracing
    tracemalloc.start()
    try:
        res = CliRunner().invoke(main, ["validate", str(bomb)])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert res.exit_code == 2, res.output
    assert res.output.splitlines() == [
        f"{bomb}:6:1: x-a5[0]: YAML aliases would copy more than 100,000 values (an alias bomb?); refused: "
        "write the values out or share fewer anchors",
        f"1 error(s) in {bomb}; nothing was run."]
    assert peak < 150 * 2**20, f"peak {peak / 2**20:.0f} MiB"


def test_a_symlink_out_of_the_source_is_skipped_and_said_and_a_loop_is_one_line(tmp_path):
    """`in/leak.txt -> <a file outside>` is not read unless the source says follow_symlinks: true, and a
    folder link back up is named in one line, never a traceback."""
    src = tmp_path / "in"
    (src / "sub").mkdir(parents=True)
    for name in ("heapq.py", "bisect.py"):
        (src / name).write_text((STDLIB / name).read_text())
    (tmp_path / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (src / "leak.txt").symlink_to(tmp_path / "passwd")
    (src / "sub" / "up").symlink_to("..", target_is_directory=True)
    for follow, docs, secret in ((False, 2, False), (True, 3, True)):
        manifest = tmp_path / f"follow-{follow}.yaml"
        manifest.write_text(f"prefix: out-{follow}\nsources:\n  - name: code\n    uri: in\n    format: text\n"
                            f"    follow_symlinks: {str(follow).lower()}\n")
        res = CliRunner().invoke(main, ["run", str(manifest), "--only", "normalize-code", "--json"])
        assert res.exit_code == 0 and "Traceback" not in res.output, res.output
        summary = json.loads(res.output.strip().splitlines()[-1])
        counters = summary["steps"][0]["counters"]
        assert counters["docs_out"] == docs and counters["symlink_loops_skipped"] == 1
        assert counters["symlinks_outside_skipped"] == (0 if follow else 1)
        said = [w for w in summary["data"]["warnings"] if w.startswith("source code:")]
        assert len(said) == 1 and f"1 symlink loop skipped ({src / 'sub' / 'up'})" in said[0]
        assert ("1 symlink outside the source skipped (follow_symlinks: true follows them)" in said[0]) is not follow
        texts = "".join(pq.read_table(Path(summary["steps"][0]["output"]) / "outputs" / "main").column("text")
                        .to_pylist())
        assert ("root:x:0:0" in texts) is secret
    text = CliRunner().invoke(main, ["run", str(tmp_path / "follow-False.yaml"), "--only", "normalize-code"])
    assert "warning: source code: 1 symlink outside the source skipped" in text.output


def test_impossible_train_config_fails_before_any_work(tmp_path):
    manifest = _corpus(tmp_path)
    manifest.write_text(manifest.read_text().replace("warmup_steps: 1", "warmup_steps: 50"))
    res = CliRunner().invoke(main, ["run", str(manifest)])
    assert res.exit_code == 2
    assert "warmup_steps=50 exceeds train.steps=3" in res.output
    assert not (tmp_path / "out").exists()


def test_dry_run_touches_nothing(tmp_path):
    manifest = _corpus(tmp_path)
    before = _tree(tmp_path)
    res = CliRunner().invoke(main, ["run", str(manifest), "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output.strip().splitlines()[-1])
    names = [s["name"] for s in summary["steps"]]
    assert names[:2] == ["normalize-code", "normalize-docs"] and names[-1] == "train"
    assert {s["status"] for s in summary["steps"]} == {"would_run"}
    assert _tree(tmp_path) == before


@pytest.mark.slow
def test_run_end_to_end_then_rerun_skips_everything(tmp_path):
    manifest = _corpus(tmp_path)
    res = CliRunner().invoke(main, ["run", str(manifest), "--json", "--workers", "2"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output.strip().splitlines()[-1])
    assert summary["status"] == "succeeded"
    by = {s["name"]: s for s in summary["steps"]}
    assert all(s["status"] == "succeeded" for s in summary["steps"])
    assert by["normalize-docs"]["counters"]["dups"] == 1  # the planted exact copy
    assert by["decontaminate"]["counters"]["contaminated/code"] == 1  # heapq.py holds the benchmark item
    assert by["decontaminate"]["counters"].get("contaminated/docs", 0) == 0
    consolidated = by["consolidate-docs"]["counters"]
    assert consolidated["removed_fuzzy"] >= 4  # six near-identical variants collapse to one
    assert consolidated["docs_out"] == consolidated["docs_in"] - consolidated["removed_fuzzy"] - \
        consolidated["removed_exact"] - consolidated["removed_decontaminate"]
    train_out = Path(by["train"]["output"])
    assert (train_out / "loss.png").exists() and (train_out / "metrics.jsonl").exists()

    out = tmp_path / "out"
    before = _tree(out)
    again = CliRunner().invoke(main, ["run", str(manifest), "--json"])
    assert again.exit_code == 0, again.output
    summary2 = json.loads(again.output.strip().splitlines()[-1])
    assert {s["status"] for s in summary2["steps"]} == {"skipped"}
    after = _tree(out)
    # Nothing but the event log and the input-hash cache (files hashed within seconds of being written
    # are hashed again, see datakit.steps.fingerprint) may change on a rerun that skips every step.
    def kept(tree: dict) -> dict:
        return {k: v for k, v in tree.items() if not k.endswith("events.jsonl") and not k.startswith(".datakit/")}

    assert kept(after) == kept(before)

    status = CliRunner().invoke(main, ["status", str(manifest), "--json"])
    assert status.exit_code == 0
    assert {r["state"] for r in json.loads(status.output)} == {"succeeded"}

    cache_dir = by["tokenize-code"]["output"]
    inspect = CliRunner().invoke(main, ["cache", "inspect", cache_dir, "--json"])
    assert inspect.exit_code == 0, inspect.output
    info = json.loads(inspect.output)
    assert json.dumps(info)  # totals, per-source counts and a sample are reported


def _digests(root: Path) -> dict[str, str]:
    """Content hashes of every data file under a run's step dirs (markers and timings excluded, and the
    input-hash cache under .datakit/: whether a file is cached depends on how long ago it was written,
    see datakit.steps.fingerprint, and a cache is no output)."""
    import hashlib

    out = {}
    for p in sorted(root.rglob("*")):
        if not p.is_file() or p.name in ("artifact.json", ".status", "events.jsonl", "error.txt") \
                or p.name.startswith(".lease") or p.relative_to(root).parts[0] == ".datakit":
            continue
        rel = p.relative_to(root).parts
        out["/".join((rel[0].rsplit("-", 1)[0],) + rel[1:])] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.mark.slow
def test_run_on_ray_equals_local_run_byte_for_byte(tmp_path, ray_cluster):
    manifest = _corpus(tmp_path)
    text = manifest.read_text()
    manifest.write_text(text[: text.index("train:")])  # the data pipeline only; training is covered above
    local = CliRunner().invoke(main, ["run", str(manifest), "--prefix", str(tmp_path / "local"), "--json"])
    assert local.exit_code == 0, local.output
    on_ray = CliRunner().invoke(main, ["run", str(manifest), "--prefix", str(tmp_path / "ray"), "--json",
                                       "--backend", "ray"])
    assert on_ray.exit_code == 0, on_ray.output
    a, b = _digests(tmp_path / "local"), _digests(tmp_path / "ray")
    assert any(k.startswith("consolidate-code/outputs/main/") for k in a)
    assert any(k.startswith("tokenize-code/") for k in a)
    assert a == b


def test_dedup_none_with_corpus_dedup_is_refused_before_any_work(tmp_path):
    manifest = _corpus(tmp_path)
    manifest.write_text(manifest.read_text().replace("    id_field: doc\n", "    id_field: doc\n    dedup: none\n"))
    res = CliRunner().invoke(main, ["run", str(manifest)])
    assert res.exit_code == 2
    assert "sources[1].dedup: 'none' keeps duplicate ids" in res.output
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_ray_runs_keep_shuffle_files_under_the_prefix_and_clean_them(tmp_path, ray_cluster):
    """On Ray, map outputs must be readable from every node: a run puts them under <prefix>/.shuffle
    (stage checkpoints for a rerun) and leaves no shuffle file behind once its steps succeed."""
    from datakit.pipeline import exec_config

    assert exec_config("gs://b/out/", "ray").work_dir == "gs://b/out/.shuffle"
    assert exec_config("gs://b/out", "local").work_dir is None  # local runs shuffle on this machine's disk
    manifest = _corpus(tmp_path)
    text = manifest.read_text()
    manifest.write_text(text[: text.index("train:")])
    res = CliRunner().invoke(main, ["run", str(manifest), "--prefix", str(tmp_path / "out"), "--json",
                                    "--backend", "ray", "--only", "normalize-code"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "out" / ".shuffle").is_dir()  # the engine worked there ...
    assert [p for p in (tmp_path / "out" / ".shuffle").rglob("*") if p.is_file()] == []  # ... and cleaned up


def test_run_imports_no_jax_ferry_or_quality_rules_it_does_not_run(tmp_path):
    """A run's fixed cost is mostly imports: planning (even of a train step) imports no JAX, the ferry's
    checks (duckdb) or the quality rules' compiled expressions; the steps that use them import them."""
    import subprocess
    import sys

    manifest = _corpus(tmp_path)
    res = subprocess.run([sys.executable, "-X", "importtime", "-m", "datakit.cli", "run", str(manifest), "--dry-run"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")}
    assert "datakit.pipeline" in imported  # the probe sees the run's imports
    assert not {"jax", "duckdb", "datakit.ferry", "datakit.quality.text"} & imported


_COMMAND = """
import json, os, sys
from datakit.cli import entry
from datakit.shuffle import backends

try:
    entry()
except SystemExit as e:
    code = e.code
zygote = backends._ZYGOTE[0].proc.pid if backends._ZYGOTE else None
with open(f"/proc/{zygote}/cmdline", "rb") as a, open("/proc/self/cmdline", "rb") as b:
    forked = a.read() == b.read()
print(json.dumps({"code": code, "forked": forked}))
"""


def test_the_datakit_command_forks_its_workers_zygote_from_itself(tmp_path):
    """The `datakit` command (`entry`, what the console script and `python -m datakit.cli` call) owns its
    process, so the local backend forks the workers' zygote from the driver, stage modules imported, while
    the run's and the step's heartbeats run (core/fork_safety.py). A new thread in the runner that nobody
    registered would silently turn this off: this test says so."""
    manifest = _corpus(tmp_path)
    text = manifest.read_text()
    manifest.write_text(text[: text.index("train:")] + "normalize:\n  inline_bytes: 0\n")  # a pool starts
    res = subprocess.run([sys.executable, "-c", _COMMAND, "run", str(manifest), "--prefix", str(tmp_path / "out"),
                          "--json"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.splitlines()[-1])
    assert out == {"code": 0, "forked": True}
