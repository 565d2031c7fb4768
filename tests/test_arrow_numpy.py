"""datakit.core.arrow_numpy builds and reads Arrow arrays through their buffers because pyarrow's own
conversions (pa.array, pa.table of Python or numpy values, to_numpy, fill_null with a Python value)
import pandas wherever it is installed: 0.2-0.3 CPU-s in every process that touches one, a fifth of a
one-file edit's whole run. These tests hold the helpers to pyarrow's results on real text, nulls and
slices included, and hold the pipeline's steps (normalize, exact and fuzzy dedup, consolidate, line
dedup, PII, takedown, tokenize) to running a build and an incremental rebuild without importing pandas."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from datakit.core import arrow_numpy as an

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def _lines() -> list[str]:
    """Real lines of text: the standard library's email package and Debian's license texts (ASCII,
    Latin-1 names, blank lines), with a few non-Latin lines added."""
    lines = []
    for path in sorted((STDLIB / "email").glob("*.py"))[:6]:
        lines += path.read_text(errors="replace").splitlines()
    lines += Path("/usr/share/common-licenses/GPL-3").read_text().splitlines()[:400]
    return lines + ["日本語のテキスト", "Ελληνικά", "emoji 🙂 and ünïcödé", ""]


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
def test_strings_equal_pa_array_on_real_text_with_nulls(kind):
    lines = _lines()
    values = [None if i % 7 == 3 else s for i, s in enumerate(lines)]
    for vals in (values, lines, [], [None], [None, None], [""]):
        got = an.strings(vals, kind)
        got.validate(full=True)
        assert got.equals(pa.array(vals, kind)), len(vals)
        assert an.column(vals, kind).equals(got)


def test_strings_reject_a_lone_surrogate_as_pa_array_does():
    """normalize's schema counts and replaces lone surrogates on the UnicodeEncodeError both raise."""
    for build in (lambda v: pa.array(v, pa.string()), an.strings):
        with pytest.raises(UnicodeEncodeError):
            build(["fine", "bad \udc80 text"])


def test_numbers_bools_and_tables_equal_pyarrow():
    rng = np.random.default_rng(7)
    floats = [None if i % 5 == 0 else float(x) for i, x in enumerate(rng.random(101))]
    ints = [None if i % 4 == 1 else int(x) for i, x in enumerate(rng.integers(-2**62, 2**62, 77))]
    assert an.column(floats, pa.float64()).equals(pa.array(floats, pa.float64()))
    assert an.column(ints, pa.int64()).equals(pa.array(ints, pa.int64()))
    mask = rng.random(1003) < 0.3
    assert an.from_bools(mask).equals(pa.array(mask))
    hit = pc.is_in(pa.array(["a", None, "b", "c"] * 9), value_set=pa.array(["b"]))  # a null in, a null out
    assert an.bools(hit).tolist() == pc.fill_null(hit, False).to_pylist()
    assert an.bools(pa.chunked_array([hit, hit.slice(3)])).tolist() == (pc.fill_null(hit, False).to_pylist()
                                                                         + pc.fill_null(hit.slice(3), False).to_pylist())
    schema = pa.schema([("u", pa.int64()), ("h", pa.uint64()), ("j", pa.float64()), ("ok", pa.bool_()),
                        ("r", pa.int32())])
    cols = {"u": rng.integers(0, 1 << 40, 50), "h": rng.integers(0, 1 << 63, 50, dtype=np.uint64),
            "j": rng.random(50), "ok": rng.random(50) < 0.5, "r": rng.integers(0, 1000, 50)}
    table = an.numbers_table(cols, schema)
    assert table.equals(pa.table(cols, schema=schema))
    two = pa.concat_tables([table, table.slice(10, 20)])  # two chunks, the second a slice
    got = an.columns(two, ["u", "h", "j", "r"])
    for name in got:
        assert np.array_equal(got[name], two.column(name).to_numpy()), name
        assert got[name].dtype == two.column(name).to_numpy().dtype


def test_a_build_and_an_edit_import_no_pandas(tmp_path):
    """Every built-in step a takedown and an edit run (inline: in this one process) reads and writes
    its arrays without pyarrow's pandas import."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("Apache-2.0", "GPL-3", "GPL-2", "LGPL-2.1", "MPL-2.0", "BSD"):
        (corpus / f"{name}.txt").write_text(Path(f"/usr/share/common-licenses/{name}").read_text())
    (corpus / "GPL-3-copy.txt").write_text(Path("/usr/share/common-licenses/GPL-3").read_text().replace("free", "libre", 3))
    for path in sorted((STDLIB / "email").glob("*.py"))[:12]:
        (corpus / path.name).write_text(path.read_text())
    code = f"""
import sys
from pathlib import Path
from datakit import pipeline
from datakit.core.documents import content_id
corpus = Path({str(corpus)!r})
takedown = Path({str(tmp_path / 'takedown.txt')!r})
takedown.write_text("id " + content_id((corpus / "BSD.txt").read_text()) + "\\n")
m = {{"prefix": {str(tmp_path / 'prefix')!r}, "backend": "inline",
     "sources": [{{"name": "s", "uri": str(corpus) + "/*", "format": "text"}}],
     "normalize": {{"target_shard_bytes": 30000}}, "dedup": {{"exact": True, "fuzzy": True}},
     "line_dedup": {{}}, "pii": {{}}, "takedown": {{"file": str(takedown)}}, "tokenize": {{"vocab_size": 300}}}}
for change in ("build", "edit"):
    if change == "edit":
        (corpus / "MPL-2.0.txt").write_text((corpus / "MPL-2.0.txt").read_text().replace("Software", "software", 1))
    summary = pipeline.run(pipeline.manifest_from_dict(m))
    assert summary.ok, summary.to_dict()["steps"]
print(sorted(m for m in sys.modules if m.split(".")[0] == "pandas"))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout[-2000:]
