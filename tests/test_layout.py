"""datakit.core.layout: the on-disk contracts between steps, pinned byte for byte.

The literal strings below are the contract itself (what earlier runs wrote and what any reader of a
run directory expects), so they are spelled out here on purpose: a change to the layout module that
would rename an output must fail here first.
"""

from __future__ import annotations

import ast
import uuid
from pathlib import Path

import fsspec
import pytest

import datakit.core.layout as layout_module
from datakit.core.layout import (
    TOKENIZER_FILE,
    AttributesDir,
    DocumentsDir,
    TokenCacheDir,
    TrainDir,
    join,
    parquet_names,
    parse_part_name,
    parse_unit_part_name,
    parse_work_part_name,
    part_name,
    part_names,
    unit_part_name,
    work_part_name,
)


def test_part_name_is_the_existing_convention():
    assert part_name(0, 1) == "part-00000-of-00001.parquet"
    assert part_name(3, 16) == "part-00003-of-00016.parquet"
    assert part_name(123456, 200000) == "part-123456-of-200000.parquet"
    assert part_names(3) == ["part-00000-of-00003.parquet", "part-00001-of-00003.parquet",
                             "part-00002-of-00003.parquet"]
    assert part_names(12) == sorted(part_names(12))  # sorting the names sorts the shards


@pytest.mark.parametrize("index,total", [(0, 1), (7, 8), (99999, 100000), (123456, 200000)])
def test_parse_part_name_round_trips(index, total):
    assert parse_part_name(part_name(index, total)) == (index, total)
    assert parse_part_name(f"s3://bucket/run/outputs/main/{part_name(index, total)}") == (index, total)


@pytest.mark.parametrize("name", ["part-0001-of-00002.parquet", "part-00001-of-00002.parquet.tmp",
                                  ".tmp-abc-part-00001-of-00002.parquet", "part-00001.parquet", "x.parquet"])
def test_parse_part_name_rejects_other_names(name):
    assert parse_part_name(name) is None


def test_part_name_refuses_an_index_outside_the_total():
    with pytest.raises(ValueError):
        part_name(2, 2)
    with pytest.raises(ValueError):
        part_name(-1, 2)


def test_work_part_names():
    assert work_part_name(3) == "part-00003.parquet"
    assert parse_work_part_name("/w/round-001/part-00003.parquet") == 3
    assert parse_work_part_name(part_name(3, 4)) is None
    assert parse_part_name(work_part_name(3)) is None  # the two conventions never match each other


def test_unit_part_names():
    assert unit_part_name("0123456789abcdef") == "unit-0123456789abcdef.parquet"
    assert parse_unit_part_name("s3://b/run/outputs/main/unit-0123456789abcdef.parquet") == "0123456789abcdef"
    for other in (part_name(3, 4), work_part_name(3), "unit-0123.parquet", "unit-0123456789ABCDEF.parquet"):
        assert parse_unit_part_name(other) is None
    assert parse_part_name(unit_part_name("1" * 16)) is None and parse_work_part_name(unit_part_name("1" * 16)) is None
    with pytest.raises(ValueError):
        unit_part_name("xyz")


def test_documents_dir_names():
    assert (DocumentsDir.MAIN, DocumentsDir.DUPS, DocumentsDir.REJECTS, DocumentsDir.REMOVED) == (
        "outputs/main", "outputs/dups", "outputs/rejects", "outputs/removed")
    assert DocumentsDir.UNITS == "units"
    docs = DocumentsDir("/runs/normalize-web-1a2b/")
    assert docs.outputs == "/runs/normalize-web-1a2b/outputs"
    assert docs.main == "/runs/normalize-web-1a2b/outputs/main"
    assert docs.dups == "/runs/normalize-web-1a2b/outputs/dups"
    assert docs.rejects == "/runs/normalize-web-1a2b/outputs/rejects"
    assert docs.removed == "/runs/normalize-web-1a2b/outputs/removed"
    assert docs.dir("removed") == docs.removed
    assert docs.part("rejects", 0, 1) == "/runs/normalize-web-1a2b/outputs/rejects/part-00000-of-00001.parquet"
    name = unit_part_name("00000000000000aa")
    assert DocumentsDir.rel_file("dups", name) == "outputs/dups/unit-00000000000000aa.parquet"
    assert docs.file("main", name) == "/runs/normalize-web-1a2b/outputs/main/unit-00000000000000aa.parquet"
    assert DocumentsDir.rel_unit("rejects", name) == "units/rejects/unit-00000000000000aa.parquet"
    assert docs.unit("main", name) == "/runs/normalize-web-1a2b/units/main/unit-00000000000000aa.parquet"
    assert DocumentsDir.rel_parts("dups", 2) == ["outputs/dups/part-00000-of-00002.parquet",
                                                 "outputs/dups/part-00001-of-00002.parquet"]
    with pytest.raises(ValueError, match="unknown document kind"):
        DocumentsDir.rel_dir("attributes")


def test_dirs_take_urls_and_pathlike_roots(tmp_path):
    assert DocumentsDir("gs://bucket/run/consolidate-web").main == "gs://bucket/run/consolidate-web/outputs/main"
    d = DocumentsDir(tmp_path)
    assert d.root == str(tmp_path) and d.main == f"{tmp_path}/outputs/main"
    assert DocumentsDir(tmp_path) == DocumentsDir(str(tmp_path))  # frozen value objects compare by root
    with pytest.raises(AttributeError):
        d.root = "elsewhere"  # type: ignore[misc]
    assert join("", "a", "b") == "a/b" and join("memory://x/", "a") == "memory://x/a"


def test_parquet_names_lists_the_set_and_its_strays_but_not_temporaries(tmp_path):
    docs = DocumentsDir(tmp_path)
    assert docs.parquet_names("main") == []  # no directory yet
    main = Path(docs.main)
    main.mkdir(parents=True)
    for name in (part_name(1, 2), part_name(0, 2), "stray.parquet", ".tmp-0123-part-00000-of-00002.parquet",
                 "notes.txt"):
        (main / name).write_bytes(b"")
    want = ["part-00000-of-00002.parquet", "part-00001-of-00002.parquet", "stray.parquet"]
    assert docs.parquet_names("main") == want == parquet_names(str(main))
    assert docs.parquet_paths("main") == [f"{docs.main}/{n}" for n in want]


def test_parquet_names_through_fsspec():
    root = f"memory://layout-{uuid.uuid4().hex[:8]}/step"
    fs = fsspec.filesystem("memory")
    docs = DocumentsDir(root)
    for name in (part_name(0, 1), ".tmp-x.parquet"):
        with fs.open(f"{docs.removed}/{name}", "wb") as f:
            f.write(b"")
    assert docs.parquet_names("removed") == ["part-00000-of-00001.parquet"]
    assert DocumentsDir(f"{root}-missing").parquet_names("removed") == []


def test_attributes_dir_is_co_partitioned_with_the_documents(tmp_path):
    assert AttributesDir.META == "attrs.json" and AttributesDir.rel("web") == "attributes/web"
    attrs = AttributesDir.of("/runs/exact-dedup-9f/", "web")
    assert attrs.root == "/runs/exact-dedup-9f/attributes/web"
    assert attrs.meta == "/runs/exact-dedup-9f/attributes/web/attrs.json"
    docs = DocumentsDir("/runs/normalize-web-1a2b")
    main_files = [docs.part("main", i, 2) for i in range(2)]
    # paired by file name: the attribute file of a documents file has its exact base name
    assert attrs.files(main_files) == [f"{attrs.root}/part-0000{i}-of-00002.parquet" for i in range(2)]
    assert attrs.file(part_name(1, 2)) == attrs.file(main_files[1])
    local = AttributesDir.of(tmp_path, "web")
    Path(local.root).mkdir(parents=True)
    (Path(local.root) / part_name(0, 1)).write_bytes(b"")
    Path(local.meta).write_text("{}")
    assert local.parquet_names() == [part_name(0, 1)]


def test_token_cache_dir_names():
    assert TOKENIZER_FILE == "tokenizer.json"
    assert TokenCacheDir.SPLITS == ("train", "validation")
    assert (TokenCacheDir.LEDGER, TokenCacheDir.STATS) == ("ledger.json", ".stats.json")
    cache = TokenCacheDir("/runs/tokenize-web-77")
    assert cache.tokenizer == "/runs/tokenize-web-77/tokenizer.json"
    assert cache.split("validation") == "/runs/tokenize-web-77/validation"
    assert cache.ledger("train") == "/runs/tokenize-web-77/train/ledger.json"
    assert cache.stats("train") == "/runs/tokenize-web-77/train/.stats.json"
    assert TokenCacheDir.split_rel("train") == "train"
    # a split dir names its tokenizer relative to itself, so the cache can be moved whole
    assert TokenCacheDir.TOKENIZER_FROM_SPLIT == "../tokenizer.json"
    assert TokenCacheDir.shard_names(2, 4) == {"tokens": "shard-00002-of-00004.tokens.npy",
                                               "offsets": "shard-00002-of-00004.offsets.npy",
                                               "marker": "shard-00002-of-00004.json"}


def test_train_dir_names():
    run = TrainDir("s3://b/run/train-1")
    assert (run.metrics, run.plot, run.result, run.checkpoints) == (
        "s3://b/run/train-1/metrics.jsonl", "s3://b/run/train-1/loss.png", "s3://b/run/train-1/result.json",
        "s3://b/run/train-1/checkpoints")
    assert TrainDir.rel_checkpoint("/tmp/mirror/checkpoints/step-00000040.npz") == "checkpoints/step-00000040.npz"


def test_layout_is_a_foundation_module():
    """datakit.core may import only the standard library, third-party packages and datakit.core.fsio."""
    tree = ast.parse(Path(layout_module.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m for m in imported if m.startswith("datakit")} == {"datakit.core.fsio"}


def test_fixtures_write_the_layout(tmp_path):
    """The test fixtures of dedup and tokenize write what the layout names (a complete part set)."""
    from datakit.dedup.fixtures import write_normalized_source
    from datakit.tokenize.fixtures import write_source

    write_normalized_source(str(tmp_path / "n"), "n", ["a", "b", "c"], num_files=3)
    paths = write_source(str(tmp_path / "t"), ["a", "b"], 2)
    assert DocumentsDir(tmp_path / "n").parquet_names("main") == part_names(3)
    assert paths == DocumentsDir(tmp_path / "t").parquet_paths("main")


@pytest.mark.parametrize("path", ["/tmp/x", "/tmp/x/", "/", "//", "relative", "relative/dir/", "./rel", "./", ".",
                                  "~", "~/out/", "file:///tmp/y/", "file://rel", "a/../b", "/a//b/", "../up"])
def test_store_url_of_a_local_path_is_what_fsspec_gives(path, tmp_path, monkeypatch):
    """store_url makes a local prefix absolute without importing fsspec (about 0.07 CPU-s of every
    process's start); the names of step dirs and reports must stay what fsspec's local filesystem gave."""
    from datakit.core import fsio

    monkeypatch.chdir(tmp_path)
    _, want = fsspec.core.url_to_fs(path)
    assert fsio.store_url(path) == (want.rstrip("/") or "/")


def test_importing_the_pipeline_does_not_import_fsspec():
    """Nor does a worker's start (the zygote imports the engine): fsspec loads where a remote path or a
    glob pattern first needs it."""
    import subprocess
    import sys

    code = "import sys, datakit.pipeline, datakit.cli.run; print('fsspec' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
