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
