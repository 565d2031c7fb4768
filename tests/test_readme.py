"""The README's Python examples run as written, and so do the runbooks: every `datakit` command they show
names a real command and real options, and the blocks they mark `<!-- test: commands -->` run (their
placeholders substituted) on a small corpus."""

from __future__ import annotations

import re
import runpy
import subprocess
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _block(marker: str) -> str:
    text = README.read_text()
    m = re.search(rf"<!-- example: {marker} -->\s*```python\n(.*?)```", text, re.S)
    assert m, f"README has no python block after <!-- example: {marker} -->"
    return m.group(1)


@pytest.mark.slow
def test_python_api_example_runs(tmp_path, monkeypatch, capsys):
    script = tmp_path / "example.py"
    script.write_text(_block("api"))
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert "'chars':" in out
    assert list((tmp_path / "datakit-out" / "api-example").glob("longest-docs-*/artifact.json"))
    # Rerunning skips every step, the custom one included.
    runpy.run_path(str(script), run_name="__main__")


def test_columnar_example_runs(tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "docs").mkdir()
    for i in range(2):
        pq.write_table(pa.table({"source": ["web", "code", "web"], "text": ["ab", "cde", "f" * i],
                                 "id": [1, 2, 3]}), tmp_path / "docs" / f"part-{i}.parquet")
    monkeypatch.chdir(tmp_path)
    scope = runpy.run_path(_write(tmp_path, _block("columnar")), run_name="__main__")
    assert sorted(scope["sizes"], key=lambda r: r["source"]) == [
        {"source": "code", "docs": 2, "chars": 6}, {"source": "web", "docs": 4, "chars": 5}]


def _write(tmp_path: Path, code: str) -> str:
    script = tmp_path / "example_columnar.py"
    script.write_text(code)
    return str(script)


# ------------------------------------------------------------------ runbooks

RUNBOOKS = sorted((README.parent / "runbooks").glob("*.md"))
_MARKED = re.compile(r"<!-- test: commands[^>]*-->\n\n((?:    .*\n|\n)+)")


def _command_lines(text: str) -> list[str]:
    """Every `datakit ...` command a page shows: in indented blocks and in inline code."""
    block = [ln.strip() for ln in text.splitlines() if ln.startswith("    ")]
    inline = re.findall(r"`(datakit [^`]+)`", text)
    lines = [ln.split("  #")[0].strip() for ln in block + inline]
    return [part.strip() for ln in lines if ln.startswith("datakit ") for part in ln.split("&&")
            if part.strip().startswith("datakit ")]


@pytest.mark.parametrize("page", [README, *RUNBOOKS], ids=lambda p: p.name)
def test_every_runbook_command_names_a_real_command_and_options(page):
    """Each `datakit` command the README or a runbook shows exists, with every option it passes."""
    import click

    from datakit.cli import main

    for line in _command_lines(page.read_text()):
        cmd, words = main, line.split()[1:]
        while isinstance(cmd, click.Group) and words and words[0] in cmd.commands:
            cmd, words = cmd.commands[words[0]], words[1:]
        stuck = isinstance(cmd, click.Group) and not (words and words[0].startswith("-"))
        assert not stuck, f"{page.name}: {line!r}: no such command"
        options = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
        unknown = [w for w in words if w.startswith("-") and w.split("=")[0] not in options]
        assert unknown == [], f"{page.name}: {line!r}: {cmd.name} has no option {unknown}"


def _marked_blocks(page: str) -> list[list[str]]:
    """The lines (comments kept, blank lines dropped) of a runbook's blocks marked `<!-- test: commands -->`."""
    text = (README.parent / "runbooks" / page).read_text()
    return [[ln.strip() for ln in b.splitlines() if ln.strip()] for b in _MARKED.findall(text)]


def _shell(tmp_path: Path, line: str, subs: dict[str, str]) -> subprocess.CompletedProcess:
    """One runbook line, placeholders substituted, in bash in ``tmp_path`` with `datakit` on PATH."""
    import os
    import sys

    for old, new in subs.items():
        line = line.replace(old, new)
    bin_dir = tmp_path / "bin"
    if not (bin_dir / "datakit").exists():
        bin_dir.mkdir()
        (bin_dir / "datakit").write_text(f'#!/bin/sh\nexec {sys.executable} -m datakit.cli "$@"\n')
        (bin_dir / "datakit").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(README.parent), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


def _tiny_corpus(root: Path) -> None:
    """sources.yaml (prefix out/): stdlib modules and license texts, a benchmark quoting one module, and
    a source whose one file is blank, so its normalize step fails until the file gets text."""
    import json
    import shutil
    import sysconfig

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    (root / "code").mkdir()
    for name in ("heapq.py", "bisect.py", "textwrap.py", "shlex.py"):
        shutil.copy(stdlib / name, root / "code" / name)
    (root / "notes").mkdir()
    (root / "notes" / "blank.txt").write_text("   \n")
    question = " ".join((stdlib / "heapq.py").read_text().split()[40:70])
    (root / "bench.jsonl").write_text(json.dumps({"question": question}) + "\n")
    (root / "env.yaml").write_text("decontaminate_fraction: [0, 0.5]\nfuzzy_fraction: [0, 0.5]\n"
                                   "normalize_dup_fraction: [0, 1]\n")
    (root / "sources.yaml").write_text("""\
prefix: out
sources:
  - {name: code, uri: code/*.py, format: text}
  - {name: notes, uri: notes/*.txt, format: text}
decontaminate:
  benchmarks:
    - {name: tiny-bench, path: bench.jsonl, text_fields: [question]}
tokenize: {vocab_size: 300, validation_fraction: 0.2}
""")


@pytest.mark.slow
def test_runbook_command_blocks_run(tmp_path):
    """The blocks the runbooks mark as commands run as written (placeholders substituted): recovering a
    failed step on a run whose one source fails, then an ad-hoc ferry and validating a plain run."""
    _tiny_corpus(tmp_path)
    assert _shell(tmp_path, "datakit run sources.yaml", {}).returncode == 1  # normalize-notes fails
    (failed,) = [p.name for p in (tmp_path / "out").glob("normalize-notes-*")]
    (recover,) = _marked_blocks("recovering-a-failed-step.md")
    subs = {"<prefix>/<step>-<identity>": f"out/{failed}"}
    for line in recover:
        if line.startswith("# fix"):  # the runbook's "fix the cause": the blank file gets text
            (tmp_path / "notes" / "blank.txt").write_text(" ".join(["a short note about heaps and queues"] * 40))
        if line.startswith("#"):
            continue
        r = _shell(tmp_path, line, subs)
        assert r.returncode == 0, (line, r.stdout[-2000:], r.stderr[-2000:])
    assert "0 steps to build" in _shell(tmp_path, "datakit run sources.yaml", {}).stderr

    adhoc = _marked_blocks("ad-hoc-ferry-on-your-data.md")
    assert len(adhoc) == 2
    subs = {"my.yaml": "sources.yaml", "my-envelopes.yaml": "env.yaml", "/tmp/my-ferry": "ferry",
            "xdg-open": "test -f"}
    for line in (ln for block in adhoc for ln in block if not ln.startswith("#")):
        r = _shell(tmp_path, line, subs)
        assert r.returncode == 0, (line, r.stdout[-2000:], r.stderr[-2000:])
    assert (tmp_path / "ferry" / "report.html").is_file()
