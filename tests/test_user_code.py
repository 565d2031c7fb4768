"""Which commands run a manifest's code, and commands on a read-only prefix (issue 29, items 8 and 9c).

A user stage's module writes a mark when it is imported: validate, run --dry-run, status, verify, gc
--dry-run and report never leave it, a run that applies the stage does. The stage is keyed by its
module's source read without importing, with the same fingerprint an imported function gets, so step
identities are what they were. On a real read-only tmpfs (chmod does not stop root, and these tests run
as root), the read-only commands work and the writing ones fail in one line naming the path.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from datakit import pipeline
from datakit.manifest.calls import CallNotFound, locate_call
from datakit.stages.code_fingerprint import call_fingerprint, callable_fingerprint

STAGE = '''
"""A user stage whose import leaves a mark beside it."""
import pathlib

pathlib.Path(__file__).with_name("IMPORTED").open("a").write("imported\\n")


def keep_long(doc, config):
    # keep documents of at least min_chars characters
    return len(doc["text"]) >= config["min_chars"]
'''

MANIFEST = """
prefix: out
backend: inline
sources:
  - {name: docs, uri: data/*.jsonl, format: jsonl}
stages:
  - name: keep-long
    call: marked_stage:keep_long
    config: {min_chars: 40}
tokenize: {vocab_size: VOCAB}
"""


def _project(root: Path, vocab: int = 300, call: str = "marked_stage:keep_long") -> Path:
    """A manifest, its user stage module and a small real corpus under ``root``; returns the manifest."""
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    for f in range(2):
        lines = []
        for i in range(40):
            words = " ".join(hashlib.sha256(f"{f}:{i}:{k}".encode()).hexdigest()[:6] for k in range(4 + i % 25))
            lines.append(json.dumps({"text": f"doc {f}.{i}: {words}"}))
        (data / f"part-{f}.jsonl").write_text("\n".join(lines) + "\n")
    (root / "marked_stage.py").write_text(STAGE)
    path = root / f"m{vocab}.yaml"
    path.write_text(MANIFEST.replace("VOCAB", str(vocab)).replace("marked_stage:keep_long", call))
    return path


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "datakit.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def _identities(manifest: Path) -> dict[str, str]:
    r = _cli("run", str(manifest), "--dry-run", "--json", cwd=manifest.parent)
    assert r.returncode == 0, r.stderr
    return {s["name"]: Path(s["output"]).name for s in json.loads(r.stdout.splitlines()[-1])["steps"]}


READ_ONLY = (("validate",), ("run", "--dry-run"), ("status",), ("verify",), ("gc", "--dry-run"))


@pytest.mark.slow
def test_only_a_run_that_applies_the_stage_imports_its_module(tmp_path):
    manifest = _project(tmp_path / "project")  # run from outside it: found beside the manifest, not in the cwd
    mark = manifest.parent / "IMPORTED"
    for args in READ_ONLY:
        r = _cli(args[0], str(manifest), *args[1:], cwd=tmp_path)
        assert r.returncode == 0, (args, r.stderr)
        assert not mark.exists(), f"`datakit {' '.join(args)}` imported the user stage's module"
    r = _cli("run", str(manifest), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert mark.exists(), "the run applied the stage without importing it?"
    mark.unlink()
    for args in (*READ_ONLY, ("verify", "--deep"), ("report",), ("run",)):  # the rerun skips every step
        r = _cli(args[0], str(manifest), *args[1:], cwd=tmp_path)
        assert r.returncode == 0, (args, r.stderr)
        assert not mark.exists(), f"`datakit {' '.join(args)}` imported the user stage's module on a built prefix"


def test_a_stage_is_keyed_by_its_source_as_when_its_function_was_imported(tmp_path, monkeypatch):
    manifest = _project(tmp_path)
    before = _identities(manifest)
    steps = pipeline.build_steps(pipeline.load_manifest(manifest), write_cache=False)
    step = next(s for s in steps if s.name == "keep-long-docs")
    assert not (tmp_path / "IMPORTED").exists()
    monkeypatch.syspath_prepend(str(tmp_path))  # the fingerprint an imported function gets (the old way)
    monkeypatch.delitem(sys.modules, "marked_stage", raising=False)
    from marked_stage import keep_long  # noqa: PLC0415 - imported on purpose, to compare

    assert step.config["code"] == f"code:{callable_fingerprint(keep_long)}"

    source = tmp_path / "marked_stage.py"
    source.write_text(STAGE.replace("# keep documents", "# keeps documents").replace("leaves a mark", "marks"))
    assert _identities(manifest) == before, "a comment or docstring edit changed an identity"
    source.write_text(STAGE.replace('>= config["min_chars"]', '> config["min_chars"]'))
    after = _identities(manifest)
    assert after["normalize-docs"] == before["normalize-docs"]
    for name in ("keep-long-docs", "exact-dedup", "consolidate-docs", "tokenize-docs"):
        assert after[name] != before[name], name


def test_validate_locates_a_missing_function_module_or_shadowed_module(tmp_path):
    project = tmp_path / "project"  # run from outside it: `python -m` puts the working directory first on sys.path
    manifest = _project(project, call="marked_stage:keep_short")
    r = _cli("validate", str(manifest), cwd=tmp_path)
    assert r.returncode == 2
    assert re.search(rf"{re.escape(str(manifest))}:8:5: stages\[0\]\.call: module marked_stage "
                     rf"\({re.escape(str(project / 'marked_stage.py'))}\) defines no 'keep_short'", r.stderr), r.stderr
    assert not (project / "IMPORTED").exists()

    manifest.write_text(manifest.read_text().replace("marked_stage:keep_short", "no_such_filters:keep"))
    r = _cli("validate", str(manifest), cwd=tmp_path)
    assert r.returncode == 2 and ":8:5: stages[0].call: no module named 'no_such_filters'" in r.stderr, r.stderr

    # A module beside the manifest never shadows the standard library: the one on sys.path is used.
    (project / "json.py").write_text("def keep(doc, config):\n    return True\n")
    manifest.write_text(manifest.read_text().replace("no_such_filters:keep", "json:keep"))
    r = _cli("validate", str(manifest), cwd=tmp_path)
    assert r.returncode == 2 and "defines no 'keep'" in r.stderr, r.stderr
    assert f"{project / 'json.py'} is not used" in r.stderr and "another name" in r.stderr

    manifest.write_text(manifest.read_text().replace("json:keep", "broken_stage:keep"))
    (project / "broken_stage.py").write_text("def keep(doc, config)\n    return True\n")
    r = _cli("validate", str(manifest), cwd=tmp_path)
    assert r.returncode == 2 and f"{project / 'broken_stage.py'}:1: cannot parse it" in r.stderr, r.stderr


# ------------------------------------------------------------------ every way a module may bind the function
PACKAGE = {
    "__init__.py": "from .impl import exported\nfrom .stars import *\n",
    "helpers.py": "def helper_fn(doc, config):\n    return True\n",
    "stars.py": "def starred(doc, config):\n    return True\n",
    "impl.py": textwrap.dedent('''
        """Every binding form the resolver follows."""
        import functools

        from . import helpers
        from .helpers import helper_fn as imported


        def plain(doc, config):
            return True


        class Filters:
            def method(self, doc, config):
                return True

            @staticmethod
            def static(doc, config):
                return True

            @classmethod
            def klass(cls, doc, config):
                return True

            class Inner:
                @staticmethod
                def deep(doc, config):
                    return True


        class Keep:
            def __call__(self, doc, config):
                return True


        def _wrap(fn):
            @functools.wraps(fn)
            def inner(*args):
                return fn(*args)
            return inner


        @_wrap
        def decorated(doc, config):
            return True


        instance = Keep()
        alias = plain
        exported = alias
        bound = functools.partial(plain, config=None)
        lam = lambda doc, config: True  # noqa: E731
        via_module = helpers.helper_fn
        if True:
            def conditional(doc, config):
                return True
        '''),
}
CALLS = ["impl:plain", "impl:Filters.method", "impl:Filters.static", "impl:Filters.klass", "impl:Filters.Inner.deep",
         "impl:instance", "impl:alias", "impl:bound", "impl:lam", "impl:decorated", "impl:imported",
         "impl:via_module", "impl:conditional", ":exported", ":starred", ":helpers.helper_fn"]


def test_reading_the_source_gives_the_fingerprint_importing_gave(tmp_path, monkeypatch):
    pkg = tmp_path / "ucfp_pkg"
    pkg.mkdir()
    for name, text in PACKAGE.items():
        (pkg / name).write_text(text)
    calls = [f"ucfp_pkg.{c}" if not c.startswith(":") else f"ucfp_pkg{c}" for c in CALLS]
    read = {c: call_fingerprint(c, str(tmp_path)) for c in calls}
    assert not [m for m in sys.modules if m.startswith("ucfp_pkg")], "reading the source imported the package"
    assert locate_call("ucfp_pkg:helpers.helper_fn", str(tmp_path)).path == str(pkg / "helpers.py")

    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    for call in calls:
        module, _, attr = call.partition(":")
        obj = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        assert read[call] == callable_fingerprint(obj), call
    for name in [m for m in sys.modules if m.startswith("ucfp_pkg")]:
        monkeypatch.delitem(sys.modules, name)
    for missing in ("ucfp_pkg.impl:nope", "ucfp_pkg.nomod:plain", "ucfp_pkg:nope"):
        with pytest.raises(CallNotFound):
            locate_call(missing, str(tmp_path))


# ------------------------------------------------------------------ a read-only prefix
@pytest.fixture()
def tmpfs(tmp_path: Path):
    """A real tmpfs that the test remounts read-only (chmod does not stop root); skipped where this
    machine cannot mount one."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def _one_line(r: subprocess.CompletedProcess) -> str:
    lines = [x for x in (r.stdout + r.stderr).splitlines() if x.strip()]
    assert r.returncode == 2 and len(lines) == 1, (r.returncode, lines)
    return lines[0]


@pytest.mark.slow
def test_a_read_only_prefix_is_read_and_never_a_traceback(tmp_path, tmpfs):
    built, changed = _project(tmp_path, vocab=300), _project(tmp_path, vocab=310)
    prefix = tmpfs / "out"
    assert _cli("run", str(built), "--prefix", str(prefix), cwd=tmp_path).returncode == 0
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)

    for args in (("status",), ("verify",), ("verify", "--deep"), ("gc", "--dry-run"), ("run", "--dry-run")):
        r = _cli(args[0], str(built), "--prefix", str(prefix), *args[1:], cwd=tmp_path)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (args, r.stderr)
    r = _cli("gc", str(changed), "--prefix", str(prefix), "--dry-run", cwd=tmp_path)
    assert r.returncode == 0 and "would remove tokenizer-" in r.stdout, r.stdout + r.stderr
    page = tmp_path / "report.html"
    assert _cli("report", str(prefix), "--out", str(page), cwd=tmp_path).returncode == 0 and page.stat().st_size

    for args in (("report", str(prefix)), ("report", str(built), "--prefix", str(prefix))):
        line = _one_line(_cli(*args, cwd=tmp_path))
        assert f"cannot write {prefix / 'report.html'}: read-only file system" in line, line
        assert "--out" in line
    line = _one_line(_cli("gc", str(changed), "--prefix", str(prefix), cwd=tmp_path))
    assert f"cannot remove step outputs under {prefix}: read-only file system" in line and "--dry-run" in line
    line = _one_line(_cli("run", str(changed), "--prefix", str(prefix), cwd=tmp_path))
    assert "read-only file system" in line and str(prefix) in line

    # Every other command that writes: one line naming the path and what to do.
    assert _cli("mix", "show", str(built), "--prefix", str(prefix), cwd=tmp_path).returncode == 0
    for args, path, remedy in ((("mix", "search", str(changed), "--prefix", str(prefix), "--target", "docs"), prefix,
                                "--prefix"),
                               (("ferry", "report", "--prefix", str(prefix)), prefix / "report.html", "--out"),
                               (("ferry", "run", "--prefix", str(tmpfs / "ferry")), tmpfs / "ferry", "--prefix"),
                               (("demo", "--out", str(tmpfs / "demo")), tmpfs / "demo", "--out")):
        line = _one_line(_cli(*args, cwd=tmp_path))
        assert f"cannot write {path}: read-only file system" in line and remedy in line, (args, line)
