"""The stage version lock: fingerprints ignore comments and docstrings, and an unbumped code change fails.

Every test builds its own throwaway package under tmp_path, so none depends on the real registry.
"""

from __future__ import annotations

import importlib
import itertools
import json
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from datakit.stages import code_fingerprint as fp
from datakit.stages import lock as vlock

_COUNTER = itertools.count()

STAGE_SOURCE = '''\
"""A fake stage."""

VERSION = "1"


def transform(text):
    """Lowercases."""
    return text.lower()
'''

HELPER_SOURCE = '''\
def helper(x):
    return x + 1
'''


@dataclass(frozen=True)
class FakeStage:
    name: str
    version: str
    code: tuple[str, ...]


@pytest.fixture
def pkg(tmp_path, monkeypatch):
    """A fresh importable package `<name>` with a module `stage` and a subpackage `sub` holding `helper`."""
    name = f"dk_lock_fake_{next(_COUNTER)}_{tmp_path.name.replace('-', '_')}"
    root = tmp_path / "src" / name
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "stage.py").write_text(STAGE_SOURCE)
    (root / "sub" / "__init__.py").write_text("")
    (root / "sub" / "helper.py").write_text(HELPER_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    importlib.invalidate_caches()
    yield name, root
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    importlib.invalidate_caches()


# ---------------------------------------------------------------------------------------------------
# Fingerprints


def test_fingerprint_ignores_comments_docstrings_and_formatting(pkg):
    name, root = pkg
    before = fp.module_fingerprint([f"{name}.stage"])
    assert len(before) >= 16 and int(before, 16) >= 0
    (root / "stage.py").write_text(textwrap.dedent('''\
        # a new comment
        """A fake stage, now with a longer docstring."""
        VERSION = (
            "1"
        )
        def transform(text):  # trailing comment
            """Lowercases the text, documented differently."""

            return text.lower(  )
        '''))
    assert fp.module_fingerprint([f"{name}.stage"]) == before


def test_fingerprint_changes_on_code_edit(pkg):
    name, root = pkg
    before = fp.module_fingerprint([f"{name}.stage"])
    _edit(root / "stage.py", "text.lower()", "text.upper()")
    assert fp.module_fingerprint([f"{name}.stage"]) != before


def test_package_fingerprint_covers_submodules_recursively(pkg):
    name, root = pkg
    assert set(fp.module_files(name)) == {name, f"{name}.stage", f"{name}.sub", f"{name}.sub.helper"}
    before = fp.module_fingerprint([name])
    _edit(root / "sub" / "helper.py", "x + 1", "x + 2")
    assert fp.module_fingerprint([name]) != before


def test_fingerprint_does_not_import_the_modules(pkg):
    name, root = pkg
    (root / "__init__.py").write_text("raise RuntimeError('imported')\n")
    fp.module_fingerprint([f"{name}.sub.helper", name])
    assert name not in sys.modules


def test_fingerprint_of_a_missing_module_raises(pkg):
    name, _ = pkg
    with pytest.raises(ModuleNotFoundError):
        fp.module_fingerprint([f"{name}.nope"])


def test_normalized_source_omits_empty_fields():
    """Fields newer Pythons add empty (type_params in 3.12) must not reach the hash."""
    normalized = fp.normalized_source("def f(x):\n    return x\n")
    assert "type_params" not in normalized and "decorator_list" not in normalized
    assert "Return(value=Name(id='x'" in normalized


def test_callable_fingerprint_changes_when_function_body_changes(pkg):
    name, root = pkg
    module = importlib.import_module(f"{name}.stage")
    before = fp.callable_fingerprint(module.transform)
    _edit(root / "stage.py", '"""Lowercases."""', '"""Lowercases, documented again."""')
    assert fp.callable_fingerprint(module.transform) == before
    _edit(root / "stage.py", "text.lower()", "text.strip().lower()")
    assert fp.callable_fingerprint(module.transform) != before


def test_callable_fingerprint_distinguishes_functions_of_one_module(pkg):
    name, root = pkg
    _edit(root / "stage.py", "def transform", "def other(text):\n    return text\n\n\ndef transform")
    module = importlib.import_module(f"{name}.stage")
    assert fp.callable_fingerprint(module.transform) != fp.callable_fingerprint(module.other)


def test_callable_fingerprint_rejects_builtins():
    with pytest.raises(ValueError, match="no source file"):
        fp.callable_fingerprint(len)


# ---------------------------------------------------------------------------------------------------
# check / record


def test_check_and_record_lifecycle(pkg):
    name, root = pkg
    stage = FakeStage("fake", "1", (f"{name}.stage", f"{name}.sub"))
    lock = vlock.record([stage], {}, set())
    assert vlock.check([stage], lock) == []

    _edit(root / "stage.py", "text.lower()", "text.upper()")
    problems = vlock.check([stage], lock)
    assert len(problems) == 1
    assert problems[0].startswith("stage fake: code changed since version 1 was recorded")
    assert "bump its version" in problems[0]
    assert "`python -m datakit.stages.lock record`" in problems[0]
    assert "`python -m datakit.stages.lock record --output-preserving fake`" in problems[0]

    bumped = FakeStage("fake", "2", stage.code)
    assert vlock.check([bumped], lock) == [
        "stage fake: version 2 is not recorded; run `python -m datakit.stages.lock record`"]
    new = vlock.record([bumped], lock, set())
    assert vlock.check([bumped], new) == []
    assert new["fake"]["1"] == lock["fake"]["1"] and new["fake"]["2"] != new["fake"]["1"]


def test_record_refuses_unbumped_change_unless_output_preserving(pkg):
    name, root = pkg
    stage = FakeStage("fake", "1", (f"{name}.stage",))
    lock = vlock.record([stage], {}, set())
    _edit(root / "stage.py", "text.lower()", "str.lower(text)")
    with pytest.raises(ValueError, match="stage fake: code changed since version 1"):
        vlock.record([stage], lock, set())
    new = vlock.record([stage], lock, {"fake"})
    assert vlock.check([stage], new) == []
    assert set(new["fake"]) == {"1"}


def test_reverting_to_an_old_version_number_with_new_code_fails(pkg):
    """History is kept so a version number can never be reused for different code."""
    name, root = pkg
    v1 = FakeStage("fake", "1", (f"{name}.stage",))
    lock = vlock.record([v1], {}, set())
    _edit(root / "stage.py", "text.lower()", "text.upper()")
    lock = vlock.record([FakeStage("fake", "2", v1.code)], lock, set())
    assert "code changed since version 1" in vlock.check([v1], lock)[0]


def test_check_flags_stages_missing_from_the_registry_and_forget_drops_them(pkg):
    name, _ = pkg
    keep, gone = FakeStage("keep", "1", (f"{name}.stage",)), FakeStage("gone", "1", (f"{name}.sub",))
    lock = vlock.record([keep, gone], {}, set())
    problems = vlock.check([keep], lock)
    assert problems == ["stage gone: recorded in the lock but not in the registry; if it was removed or "
                        "renamed, run `python -m datakit.stages.lock record --forget gone`"]
    assert "gone" in vlock.record([keep], lock, set())
    assert vlock.check([keep], vlock.record([keep], lock, set(), forget={"gone"})) == []
    with pytest.raises(ValueError, match="still in the registry"):
        vlock.record([keep], lock, set(), forget={"keep"})


def test_record_rejects_unknown_output_preserving_names(pkg):
    name, _ = pkg
    with pytest.raises(ValueError, match="unknown stages: typo"):
        vlock.record([FakeStage("fake", "1", (f"{name}.stage",))], {}, {"typo"})


def test_check_reports_an_unfingerprintable_stage(pkg):
    name, _ = pkg
    problems = vlock.check([FakeStage("fake", "1", (f"{name}.missing",))], {})
    assert len(problems) == 1 and problems[0].startswith("stage fake: cannot fingerprint its code")


def test_version_location_uses_stage_hint():
    @dataclass(frozen=True)
    class Hinted(FakeStage):
        version_source: str = "datakit/stages/registry.py: Stage('x', version=...)"

    message = vlock.changed_message(Hinted("x", "3", ()), "a" * 16, "b" * 16)
    assert "(datakit/stages/registry.py: Stage('x', version=...))" in message
    assert "(datakit/stages/x.py: VERSION)" in vlock.changed_message(FakeStage("x", "3", ()), "a", "b")


# ---------------------------------------------------------------------------------------------------
# CLI


def test_main_record_then_check_then_fail(pkg, tmp_path, capsys):
    name, root = pkg
    lock_path = tmp_path / "versions.lock.json"
    stages = [FakeStage("fake", "1", (f"{name}.stage",))]
    assert vlock.main(["check"], stages=stages, lock_path=lock_path) == 1
    assert "version 1 is not recorded" in capsys.readouterr().err

    assert vlock.main(["record"], stages=stages, lock_path=lock_path) == 0
    text = lock_path.read_text()
    assert text.endswith("}\n") and json.loads(text) == {"fake": {"1": fp.module_fingerprint(stages[0].code)}}
    assert text == vlock.dump_lock(json.loads(text))
    assert vlock.main([], stages=stages, lock_path=lock_path) == 0

    _edit(root / "stage.py", "text.lower()", "text.upper()")
    capsys.readouterr()
    assert vlock.main(["check"], stages=stages, lock_path=lock_path) == 1
    assert "stage fake: code changed since version 1" in capsys.readouterr().err
    assert vlock.main(["record"], stages=stages, lock_path=lock_path) == 1
    assert lock_path.read_text() == text, "a refused record must leave the lock untouched"

    assert vlock.main(["record", "--output-preserving", "fake"], stages=stages, lock_path=lock_path) == 0
    assert vlock.main(["check"], stages=stages, lock_path=lock_path) == 0
