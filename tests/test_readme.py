"""The README's Python example runs as written."""

from __future__ import annotations

import re
import runpy
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
