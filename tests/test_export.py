"""`datakit export` and the `export:` step: every format is read back with the trainer's own reader
(megatron-core's IndexedDataset, datasets.load_from_disk, streaming.StreamingDataset, np.memmap as
nanoGPT's train.py does) and compared with the token cache's documents, token for token.

One small real pipeline run per module (two stdlib sources, a trained tokenizer, both splits), with all
four formats as steps. The readers come from the `export` extra; a test whose reader is missing skips
saying which extra to install. MosaicML streaming cannot live in datakit's environment (it pins numpy<2.2
and xxhash<4), so its test runs it in a separate venv: ``.venv-streaming`` at the repository root or
``$DATAKIT_STREAMING_PYTHON`` (python3 -m venv .venv-streaming && .venv-streaming/bin/pip install
torch==2.14.1 torchvision==0.29.1 mosaicml-streaming).
"""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

import datakit
from datakit.cli import main
from datakit.pipeline import build_steps, load_manifest
from datakit.tokenize.cache import open_cache

pytestmark = pytest.mark.slow
FORMATS = ["megatron", "hf", "mds", "nanogpt"]
EXTRA = "install the export extra: pip install -e '.[export]' (torch: the CPU build, pip install torch==2.13.0)"
STREAMING_PYTHON = os.environ.get("DATAKIT_STREAMING_PYTHON",
                                  str(Path(__file__).resolve().parent.parent / ".venv-streaming" / "bin" / "python"))


def _manifest_file(root: Path, prefix: str, validation_fraction: float = 0.2) -> str:
    stdlib = sysconfig.get_paths()["stdlib"]
    path = root / f"sources-{validation_fraction}.yaml"
    path.write_text(yaml.safe_dump({
        "prefix": prefix,
        "sources": [{"name": "json-code", "uri": f"{stdlib}/json/*.py", "format": "text", "weight": 2.0},
                    {"name": "email-code", "uri": f"{stdlib}/email/*.py", "format": "text", "weight": 1.0}],
        "tokenize": {"vocab_size": 512, "validation_fraction": validation_fraction},
        "export": {"formats": FORMATS},
    }))
    return str(path)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    prefix = str(root / "out")
    summary = datakit.run(load_manifest(_manifest_file(root, prefix)), backend="local", workers=2)
    assert summary.ok, summary.to_dict()
    return prefix, summary


def _docs(cache_dir: str, split: str) -> list[np.ndarray]:
    c = open_cache(f"{cache_dir}/{split}")
    return [np.asarray(c.doc_tokens(i)) for i in range(c.total_docs)]


def _caches(summary) -> dict[str, str]:
    return {n.removeprefix("tokenize-"): r.output for n, r in summary.records.items() if n.startswith("tokenize-")}


def _export_dir(summary, fmt: str) -> str:
    return summary.records[f"export-{fmt}"].output


@pytest.mark.parametrize("split", ["train", "validation"])
def test_megatron_reads_back_with_megatron_core(run, split):
    pytest.importorskip("megatron.core", reason=EXTRA)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets.indexed_dataset import IndexedDataset
    _, summary = run
    out = _export_dir(summary, "megatron")
    for name, cache in _caches(summary).items():
        docs = _docs(cache, split)
        assert docs, f"{name} has no {split} documents: the fixture should give both splits some"
        ds = IndexedDataset(f"{out}/{split}/{name}")
        assert len(ds) == len(docs)
        assert list(ds.document_indices) == list(range(len(docs) + 1))
        for i, doc in enumerate(docs):
            assert ds[i].dtype == np.uint16 and np.array_equal(ds[i], doc), (name, i)
    data_path = summary.records["export-megatron"].result["splits"][split]["data_path"].split()
    assert data_path == [f"{2 / 3:.6g}", f"{out}/{split}/json-code", f"{1 / 3:.6g}", f"{out}/{split}/email-code"] \
        or data_path == [f"{1 / 3:.6g}", f"{out}/{split}/email-code", f"{2 / 3:.6g}", f"{out}/{split}/json-code"]


@pytest.mark.parametrize("split", ["train", "validation"])
def test_hf_loads_with_datasets(run, split):
    datasets = pytest.importorskip("datasets", reason=EXTRA)
    _, summary = run
    for name, cache in _caches(summary).items():
        ds = datasets.load_from_disk(f"{_export_dir(summary, 'hf')}/{split}/{name}")
        docs = _docs(cache, split)
        assert ds.column_names == ["input_ids"] and len(ds) == len(docs)
        for row, doc in zip(ds.with_format("numpy"), docs):
            assert np.array_equal(row["input_ids"], doc), name


def test_mds_iterates_with_streaming_dataset(run):
    if not os.path.exists(STREAMING_PYTHON):
        pytest.skip(f"no Python with mosaicml-streaming at {STREAMING_PYTHON}: see this module's docstring")
    _, summary = run
    caches = _caches(summary)
    dirs = [f"{_export_dir(summary, 'mds')}/{s}/{n}" for n in caches for s in ("train", "validation")]
    reader = ("import json, sys, numpy as np\nfrom streaming import StreamingDataset\n"
              "print(json.dumps({d: [np.asarray(s['tokens']).tolist() for s in StreamingDataset("
              "local=d, shuffle=False, batch_size=1)] for d in sys.argv[1:]}))")
    done = subprocess.run([STREAMING_PYTHON, "-c", reader, *dirs], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    read = json.loads(done.stdout.strip().splitlines()[-1])
    for n, cache in caches.items():
        for s in ("train", "validation"):
            got, docs = read[f"{_export_dir(summary, 'mds')}/{s}/{n}"], _docs(cache, s)
            assert len(got) == len(docs) and all(g == d.tolist() for g, d in zip(got, docs)), (n, s)


def test_nanogpt_memmap_as_train_py_reads(run):
    _, summary = run
    caches = _caches(summary)
    out = _export_dir(summary, "nanogpt")
    for split, file in (("train", "train.bin"), ("validation", "val.bin")):
        data = np.memmap(os.path.join(out, file), dtype=np.uint16, mode="r")  # nanoGPT's train.py
        want = np.concatenate([d for n in sorted(caches) for d in _docs(caches[n], split)])
        assert np.array_equal(data, want)
        eos = json.load(open(os.path.join(out, "export.json")))["tokenizer"]["eos_id"]
        assert int(data[-1]) == eos  # every document ends with EOS: the separator nanoGPT's prepare.py adds


@pytest.mark.parametrize("fmt", FORMATS)
def test_provenance_and_tokenizer_beside_every_export(run, fmt):
    _, summary = run
    out = _export_dir(summary, fmt)
    record = json.load(open(os.path.join(out, "export.json")))
    tok = summary.records["tokenizer"]
    assert open(os.path.join(out, "tokenizer.json"), "rb").read() == open(tok.path("tokenizer.json"), "rb").read()
    assert record["tokenizer"]["sha256"] == summary.records["tokenize-json-code"].result["tokenizer"]["sha256"]
    assert record["weights"] == pytest.approx({"json-code": 2 / 3, "email-code": 1 / 3})
    deps = {n: r.identity for n, r in summary.records.items() if n.startswith("tokenize") or n == "tokenizer"}
    assert record["steps"] == deps
    assert record["components"]["json-code"]["step"] == summary.records["tokenize-json-code"].output.rsplit("/")[-1]


def _export_identities(path: str, prefix: str) -> dict[str, str]:
    return {s.name: s.identity for s in build_steps(load_manifest(path), prefix) if s.name.startswith("export-")}


def test_export_step_identity_follows_its_caches(run, tmp_path):
    prefix, summary = run
    same = _export_identities(_manifest_file(tmp_path, prefix), prefix)
    assert same == {f"export-{f}": summary.records[f"export-{f}"].identity for f in FORMATS}
    other = _export_identities(_manifest_file(tmp_path, prefix, 0.3), prefix)
    assert all(other[n] != same[n] for n in same)  # new caches, new exports; same caches, the built ones


def test_cli_exports_a_prefix_like_the_step(run, tmp_path):
    prefix, summary = run
    res = CliRunner().invoke(main, ["export", prefix, "--format", "nanogpt", "--split", "train",
                                    "--to", str(tmp_path / "nano"), "--backend", "inline"])
    assert res.exit_code == 0, res.output
    got = (tmp_path / "nano" / "train.bin").read_bytes()
    assert got == Path(_export_dir(summary, "nanogpt"), "train.bin").read_bytes()
    assert not (tmp_path / "nano" / "val.bin").exists()
    res = CliRunner().invoke(main, ["export", str(tmp_path / "empty"), "--format", "hf", "--to", str(tmp_path / "x")])
    assert res.exit_code == 2 and "no finished token cache" in res.output


def test_ferry_check_passes_on_every_export(run):
    from datakit.ferry.validate import validate_run

    prefix, _ = run
    manifest = str(Path(prefix).parent / "sources-0.2.yaml")
    checks = [c for c in validate_run(prefix, manifest=manifest).checks if c.stage.startswith("export-")]
    assert {c.stage for c in checks} == {f"export-{f}" for f in FORMATS}
    assert all(c.status == "ok" for c in checks), [c for c in checks if c.status != "ok"]
    assert {c.check for c in checks} >= {"provenance", "totals"}


def test_cli_exports_a_manifest_with_its_weights(run, tmp_path):
    prefix, summary = run
    manifest = str(Path(prefix).parent / "sources-0.2.yaml")
    res = CliRunner().invoke(main, ["export", manifest, "--format", "megatron", "--split", "validation",
                                    "--to", str(tmp_path / "meg"), "--backend", "inline"])
    assert res.exit_code == 0, res.output
    record = json.loads((tmp_path / "meg" / "export.json").read_text())
    assert record["weights"] == pytest.approx({"json-code": 2 / 3, "email-code": 1 / 3})
    assert record["components"]["json-code"]["step"] == Path(summary.records["tokenize-json-code"].output).name
    assert f"validation --data-path {record['splits']['validation']['data_path']}" in res.output
    for name in ("json-code", "email-code"):
        for ext in (".bin", ".idx"):
            got = (tmp_path / "meg" / "validation" / f"{name}{ext}").read_bytes()
            assert got == Path(_export_dir(summary, "megatron"), "validation", f"{name}{ext}").read_bytes()
