"""What `datakit run` prints, through the CLI: one line for what it builds and reuses (no "never built" on
a first build, no "skipped:" line per reused step), one line per failure cascade, a summary whose
tables fit 100 columns (the full table behind --wide), and training that says it is compiling and
evaluating instead of going silent."""

from __future__ import annotations

import json
import re
import sysconfig
from pathlib import Path

import pytest
from click.testing import CliRunner

from datakit.cli import main

STDLIB = Path(sysconfig.get_paths()["stdlib"])
SUMMARY_WIDTH = 100


def _manifest(tmp_path: Path, *, train: bool, broken: bool = False) -> Path:
    """Two small real sources (stdlib modules as text, as jsonl); ``broken`` adds a third source that
    is all malformed lines, so its normalize step fails (reject fraction) and its dependents cascade."""
    code, docs = tmp_path / "code", tmp_path / "docs"
    code.mkdir()
    docs.mkdir()
    for name in ("heapq.py", "bisect.py", "textwrap.py", "shlex.py"):
        (code / name).write_text((STDLIB / name).read_text())
    rows = [{"text": (STDLIB / n).read_text()} for n in ("glob.py", "fnmatch.py", "colorsys.py", "string.py")]
    (docs / "part-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = f"""\
prefix: {tmp_path / 'out'}
sources:
  - name: code
    uri: {code}/*.py
    format: text
  - name: docs
    uri: {docs}/*.jsonl
    format: jsonl
"""
    if broken:
        (tmp_path / "bad.jsonl").write_text("{not json\n" * 5)
        text += f"  - name: bad\n    uri: {tmp_path / 'bad.jsonl'}\n    format: jsonl\n"
    text += "tokenize:\n  vocab_size: 512\n  validation_fraction: 0.25\n"
    if train:
        text += ("train: {preset: nano, seq_len: 32, batch_size: 4, steps: 4, warmup_steps: 1, eval_every: 2,\n"
                 "        checkpoint_every: 4}\n")
    manifest = tmp_path / "sources.yaml"
    manifest.write_text(text)
    return manifest


def _run(*args: str) -> tuple[int, list[str]]:
    res = CliRunner().invoke(main, ["run", *args])
    return res.exit_code, res.stderr.splitlines()


def _summary(lines: list[str]) -> list[str]:
    """The summary block: from its first line ("datakit run: <status> in ...") to the end."""
    start = next(i for i, x in enumerate(lines) if re.match(r"datakit run: \w+ in ", x))
    return lines[start:]


@pytest.mark.slow
def test_a_first_run_and_a_rerun_say_what_they_build_in_one_line(tmp_path):
    manifest = _manifest(tmp_path, train=True)
    code, lines = _run(str(manifest))
    assert code == 0, "\n".join(lines)
    counts = [x for x in lines if re.search(r"\] \d+ steps to build, \d+ reused$", x)]
    assert len(counts) == 1 and counts[0].endswith(" to build, 0 reused"), counts
    n = int(re.search(r"(\d+) steps to build", counts[0]).group(1))
    assert n == sum(": started: " in x or x.split("] ", 1)[-1].startswith("started: ") for x in lines)
    assert not [x for x in lines if "never built" in x]
    assert not [x for x in lines if "skipped:" in x]
    # training is never silent: it says it compiles, and each evaluation shows its size and its result
    assert any(re.search(r"train: step 0/4: compiling the training step", x) for x in lines), lines
    evaluating = [x for x in lines if re.search(r"train: step \d/4: evaluating on [\d,]+ sequences", x)]
    results = [x for x in lines if re.search(r"train: step \d/4: eval loss \d+\.\d+, \d+\.\d+ bits/byte", x)]
    assert len(evaluating) == len(results) == 2, lines   # at step 2 (eval_every) and at the end
    summary = _summary(lines)
    assert all(len(x) <= SUMMARY_WIDTH for x in summary), [x for x in summary if len(x) > SUMMARY_WIDTH]

    code, again = _run(str(manifest))
    assert code == 0, "\n".join(again)
    assert [x for x in again if re.search(r"steps to build", x)][0].endswith(f"0 steps to build, {n} reused")
    assert not [x for x in again if "skipped:" in x or "started:" in x or "never built" in x]
    rows = [x for x in _summary(again) if x.startswith("normalize-code ")]
    assert len(rows) == 1 and "skipped" in rows[0] and "/" not in rows[0]  # the identity, not the path

    code, wide = _run(str(manifest), "--wide")
    (row,) = [x for x in _summary(wide) if x.startswith("normalize-code ")]
    assert re.search(r"normalize-code-[0-9a-f]{10}$", row), row  # --wide: the output dir, relative
    status = CliRunner().invoke(main, ["status", str(manifest)]).output.splitlines()
    status_wide = CliRunner().invoke(main, ["status", str(manifest), "--wide"]).output.splitlines()
    assert max(map(len, status)) <= SUMMARY_WIDTH and max(map(len, status_wide)) > max(map(len, status))
    assert any(re.search(r"normalize-code-[0-9a-f]{10}$", x) for x in status_wide)


@pytest.mark.slow
def test_a_failure_cascade_is_one_line_and_each_cascaded_step_is_named_once(tmp_path):
    manifest = _manifest(tmp_path, train=False, broken=True)
    code, lines = _run(str(manifest))
    assert code == 1, "\n".join(lines)
    assert any(x.startswith("normalize-bad failed: ") for x in lines), lines
    summary = _summary(lines)
    table = summary[: summary.index("", 3)]
    cascaded = [x.split()[0] for x in table if x.split()[1:2] == ["cascaded"]]
    assert len(cascaded) >= 3 and "exact-dedup" in cascaded, table
    grouped = [x for x in lines if re.fullmatch(r"\d+ steps? not run: dependency failed: normalize-bad", x)]
    assert grouped == [f"{len(cascaded)} steps not run: dependency failed: normalize-bad"], lines
    for name in cascaded:  # its table row only: no event line, no error line of its own
        named = [x for x in lines if re.search(rf"(^|[\s:]){re.escape(name)}(\s|:|$)", x)]
        assert len(named) == 1 and named[0].startswith(name) and "cascaded" in named[0], (name, named)
    assert all(len(x) <= SUMMARY_WIDTH for x in table), table


def test_warnings_and_failures_wrap_to_100_columns_each_starting_its_own_line():
    """A long warning or error continues on indented lines; its first line keeps the greppable start and
    no word (a URL) is broken."""
    from datakit.report.text import format_summary

    url = "http://127.0.0.1:8000/" + "very-long-path/" * 5 + "web.jsonl"
    warning = "source web: size unconfirmed for 1 downloaded file(s) " + "(web.jsonl) " * 12 + "accepted them"
    steps = [{"name": "download-web", "status": "failed", "error": f"ValueError: {url}: cannot confirm the download "
              "is complete " * 3, "wall_s": 0.1, "output": None}]
    text = format_summary({"status": "failed", "wall_s": 1.0, "steps": steps, "data": {"warnings": [warning]}},
                          "/tmp/out")
    lines = text.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("warning: source web: size unconfirmed"))
    block = [lines[start]] + [x for x in lines[start + 1:start + 4] if x.startswith("  ")]
    assert len(block) > 1 and all(len(x) <= SUMMARY_WIDTH for x in block)
    assert " ".join(" ".join(block).split()) == " ".join(f"warning: {warning}".split())
    failed = next(i for i, x in enumerate(lines) if x.startswith("download-web failed: "))
    assert lines[failed + 1].startswith("  ") and any(url in x for x in lines[failed:failed + 3])
