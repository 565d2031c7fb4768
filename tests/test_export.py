"""`datakit export` and the `export:` step: every format is read back with the trainer's own reader
(megatron-core's IndexedDataset, datasets.load_from_disk, streaming.StreamingDataset, np.memmap as
nanoGPT's train.py does) and compared with the token cache's documents, token for token.

One small real pipeline run per module (two stdlib sources cut into many small shards, a trained
tokenizer, both splits), with all four formats as steps. The readers come from the `export` extra; a
test whose reader is missing skips saying which extra to install. MosaicML streaming cannot live in
datakit's environment (it pins numpy<2.2 and xxhash<4), so its test runs it in a separate venv:
``.venv-streaming`` at the repository root or ``$DATAKIT_STREAMING_PYTHON`` (python3 -m venv
.venv-streaming && .venv-streaming/bin/pip install torch==2.13.0 mosaicml-streaming; .ci/run builds it;
tests/mds_reader.py says why it may enter `streaming.base` directly).
"""

from __future__ import annotations

import json
import os
import re
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
from datakit.stages.plan import read_plan
from datakit.tokenize.cache import open_cache

pytestmark = pytest.mark.slow
FORMATS = ["megatron", "hf", "mds", "nanogpt"]
EXTRA = "install the export extra: pip install -e '.[export]' (torch: the CPU build, pip install torch==2.13.0)"
STREAMING_PYTHON = os.environ.get("DATAKIT_STREAMING_PYTHON",
                                  str(Path(__file__).resolve().parent.parent / ".venv-streaming" / "bin" / "python"))


def _manifest_file(root: Path, prefix: str, validation_fraction: float = 0.2, **export) -> str:
    stdlib = sysconfig.get_paths()["stdlib"]
    path = root / re.sub(r"[^\w.-]", "", f"sources-{validation_fraction}{''.join(f'-{k}{v}' for k, v in export.items())}.yaml")
    path.write_text(yaml.safe_dump({
        "prefix": prefix,
        "sources": [{"name": "json-code", "uri": f"{stdlib}/json/*.py", "format": "text", "weight": 2.0},
                    {"name": "email-code", "uri": f"{stdlib}/email/*.py", "format": "text", "weight": 1.0}],
        "normalize": {"target_shard_bytes": 10_000},  # several cache shards per split: rows cross them
        "tokenize": {"vocab_size": 512, "validation_fraction": validation_fraction},
        "export": {"formats": FORMATS, **export},
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


def _caches(run) -> dict[str, str]:
    """Component -> its token cache's step dir, as the published plan names the caches."""
    prefix, summary = run
    return {n: summary.records[s].output for n, s in read_plan(prefix).tokens.items()}


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
    for name, cache in _caches(run).items():
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
    for name, cache in _caches(run).items():
        ds = datasets.load_from_disk(f"{_export_dir(summary, 'hf')}/{split}/{name}")
        docs = _docs(cache, split)
        assert ds.column_names == ["input_ids"] and len(ds) == len(docs)
        for row, doc in zip(ds.with_format("numpy"), docs):
            assert np.array_equal(row["input_ids"], doc), name


@pytest.mark.parametrize("split", ["train", "validation"])
def test_hf_parquet_loads_with_load_dataset(run, split, tmp_path):
    datasets = pytest.importorskip("datasets", reason=EXTRA)
    _, summary = run
    for name, cache in _caches(run).items():
        files = sorted(str(p) for p in Path(_export_dir(summary, "hf"), split, name, "parquet").glob("*.parquet"))
        ds = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=str(tmp_path / "hf"))
        docs = _docs(cache, split)
        assert len(files) > 1 and ds.column_names == ["input_ids"] and len(ds) == len(docs)
        for row, doc in zip(ds.with_format("numpy"), docs):
            assert np.array_equal(row["input_ids"], doc), name


def _packed_rows(ds) -> np.ndarray:
    return np.stack(list(ds.with_format("numpy")["input_ids"]))


def _check_packed(out: str, caches: dict[str, str], seq_len: int, tmp_path: Path) -> None:
    """Every component's split, read back both ways, is its documents back to back cut into rows of
    exactly ``seq_len`` (the remainder under one row left out), across the cache's shard boundaries."""
    datasets = pytest.importorskip("datasets", reason=EXTRA)
    record = json.loads(Path(out, "export.json").read_text())
    assert record["seq_len"] == seq_len
    for name, cache in caches.items():
        for split in ("train", "validation"):
            stream = np.concatenate(_docs(cache, split))
            rows = len(stream) // seq_len
            assert open_cache(f"{cache}/{split}").num_shards > 1  # so rows do cross shards
            parquet = sorted(str(p) for p in Path(out, split, name, "parquet").glob("*.parquet"))
            for ds in (datasets.load_from_disk(f"{out}/{split}/{name}"),
                       datasets.load_dataset("parquet", data_files=parquet, split="train", cache_dir=str(tmp_path))):
                got = _packed_rows(ds)
                assert got.shape == (rows, seq_len) and np.array_equal(got.ravel(), stream[:rows * seq_len]), name
            info = record["splits"][split]["components"][name]
            assert (info["rows"], info["dropped_tokens"]) == (rows, len(stream) - rows * seq_len)


def test_hf_packs_rows_of_seq_len_as_a_step(run, tmp_path):
    """`export: {seq_len: N}`: only the hf step's identity changes, so a rerun builds only it."""
    prefix, summary = run
    path = _manifest_file(Path(prefix).parent, prefix, seq_len=37)
    again = datakit.run(load_manifest(path), backend="local", workers=2)
    assert again.ok, again.to_dict()
    ran = {s["name"] for s in again.steps if s["status"] == "succeeded"}
    assert ran == {"export-hf"}
    assert again.records["export-megatron"].identity == summary.records["export-megatron"].identity
    _check_packed(again.records["export-hf"].output, _caches(run), 37, tmp_path)


def test_cli_packs_hf_rows_with_seq_len(run, tmp_path):
    prefix, _ = run
    res = CliRunner().invoke(main, ["export", prefix, "--format", "hf", "--seq-len", "64",
                                    "--to", str(tmp_path / "packed"), "--backend", "inline"])
    assert res.exit_code == 0, res.output
    _check_packed(str(tmp_path / "packed"), _caches(run), 64, tmp_path / "cache")


def test_seq_len_without_hf_is_refused(run, tmp_path):
    prefix, _ = run
    path = _manifest_file(tmp_path, prefix, formats=["megatron"], seq_len=64)
    with pytest.raises(ValueError, match="packs the hf export only"):
        build_steps(load_manifest(path), prefix)
    res = CliRunner().invoke(main, ["export", prefix, "--format", "nanogpt", "--seq-len", "64",
                                    "--to", str(tmp_path / "x")])
    assert res.exit_code == 2 and "packing applies to the hf format only" in res.output


def test_mds_iterates_with_streaming_dataset(run):
    if not os.path.exists(STREAMING_PYTHON):
        pytest.skip(f"no Python with mosaicml-streaming at {STREAMING_PYTHON}: see this module's docstring")
    _, summary = run
    caches = _caches(run)
    dirs = [f"{_export_dir(summary, 'mds')}/{s}/{n}" for n in caches for s in ("train", "validation")]
    reader = str(Path(__file__).with_name("mds_reader.py"))
    done = subprocess.run([STREAMING_PYTHON, reader, *dirs], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    read = json.loads(done.stdout.strip().splitlines()[-1])
    for n, cache in caches.items():
        for s in ("train", "validation"):
            got, docs = read[f"{_export_dir(summary, 'mds')}/{s}/{n}"], _docs(cache, s)
            assert len(got) == len(docs) and all(g == d.tolist() for g, d in zip(got, docs)), (n, s)


def test_nanogpt_memmap_as_train_py_reads(run):
    _, summary = run
    caches = _caches(run)
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
    assert res.exit_code == 2 and f"no plan.json under {tmp_path / 'empty'}: run `datakit run` there" in res.output


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


@pytest.fixture()
def s3_store():
    """moto's S3 server on loopback, this process's environment (and so the workers') pointing at it."""
    pytest.importorskip("s3fs", reason="the s3 extra is not installed")
    pytest.importorskip("moto", reason="moto[server] (dev extra) is not installed")
    import fsspec
    from helpers_s3 import S3Server, restore_env, set_env

    srv = S3Server()
    srv.start()
    old = set_env(srv.env())
    fs = fsspec.filesystem("s3", skip_instance_cache=True, use_listings_cache=False)
    fs.mkdir("exports")
    yield fs
    restore_env(old)
    srv.stop()


def test_exports_to_an_object_store_read_back(run, s3_store, tmp_path):
    """`--to s3://...`: every file goes through the store module; fetched back, megatron-core reads the
    caches' documents and nanoGPT's memmap the caches' tokens, byte for byte what a local export holds."""
    prefix, summary = run
    caches = _caches(run)
    for fmt in ("megatron", "nanogpt", "hf"):
        # 3 workers: a process pool started now, so its workers inherit the store's environment
        res = CliRunner().invoke(main, ["export", prefix, "--format", fmt, "--to", f"s3://exports/{fmt}",
                                        "--backend", "local", "--workers", "3"])
        assert res.exit_code == 0, res.output
        local = Path(_export_dir(summary, fmt))
        remote = {p[len(f"exports/{fmt}/"):] for p in s3_store.find(f"exports/{fmt}")}
        markers = {"artifact.json", "outputs.manifest.json"}  # and hidden ones: .status, .lease.*
        assert remote == {str(p.relative_to(local)) for p in local.rglob("*")
                          if p.is_file() and p.name not in markers and not p.name.startswith(".")}
        s3_store.get(f"exports/{fmt}/", str(tmp_path / fmt), recursive=True)
    for split, file in (("train", "train.bin"), ("validation", "val.bin")):
        data = np.memmap(tmp_path / "nanogpt" / file, dtype=np.uint16, mode="r")
        assert np.array_equal(data, np.concatenate([d for n in sorted(caches) for d in _docs(caches[n], split)]))
    pytest.importorskip("megatron.core", reason=EXTRA)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets.indexed_dataset import IndexedDataset
    for name, cache in caches.items():
        for split in ("train", "validation"):
            ds, docs = IndexedDataset(str(tmp_path / "megatron" / split / name)), _docs(cache, split)
            assert len(ds) == len(docs) and all(np.array_equal(ds[i], d) for i, d in enumerate(docs)), name
            for f in (tmp_path / "hf" / split / name).glob("*.arrow"):
                assert f.read_bytes() == Path(_export_dir(summary, "hf"), split, name, f.name).read_bytes()
