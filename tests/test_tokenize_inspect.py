"""`datakit cache inspect`: totals, per-source counts, a decoded sample; unfinished caches shown, not hidden."""

import json
import os

import pytest

from datakit.shuffle import ExecConfig
from datakit.tokenize.fixtures import stdlib_texts, write_source
from datakit.tokenize.inspection import format_inspect, inspect_cache
from datakit.tokenize.tokenize_step import tokenize_source
from datakit.tokenize.tokenizer import train_tokenizer


@pytest.fixture(scope="module")
def run_prefix(tmp_path_factory):
    root = tmp_path_factory.mktemp("inspect")
    texts = {"json": stdlib_texts(120_000, subdir="json"), "email": stdlib_texts(120_000, subdir="email")}
    for name, t in texts.items():
        write_source(str(root / "src" / name), t, 2, source=name)
    tok = train_tokenizer([str(root / "src" / n) for n in texts], str(root / "tok"), vocab_size=500, max_bytes=150_000)
    results = {}
    for name in texts:
        results[name] = tokenize_source(name, str(root / "src" / name), str(root / "run" / f"tokenize-{name}-abc123"),
                                        tok["path"], validation_fraction=0.2, exec_config=ExecConfig(backend="inline"))
    return root / "run", results, texts


def test_inspect_a_run_prefix_with_several_caches(run_prefix):
    prefix, results, texts = run_prefix
    info = inspect_cache(str(prefix))
    assert len(info["caches"]) == 4  # 2 sources x 2 splits
    assert set(info["sources"]) == {"json", "email"}
    for name, res in results.items():
        for split in ("train", "validation"):
            got = info["sources"][name][split]
            assert got == {"total_docs": res.splits[split]["docs"], "total_tokens": res.splits[split]["tokens"],
                           "total_bytes": res.splits[split]["bytes"]}
    assert info["totals"]["train"]["total_tokens"] == sum(r.splits["train"]["tokens"] for r in results.values())
    train_json = next(c for c in info["caches"] if c["name"] == "json" and c["split"] == "train")
    assert train_json["finished"] and train_json["dtype"] == "uint16" and train_json["vocab_size"] == 500
    # the sample is the real decoded text of the cache's first document
    assert train_json["sample"] and any(t.startswith(train_json["sample"].removesuffix("...")) for t in texts["json"])
    text = format_inspect(info)
    assert "json" in text and "email" in text and "sample (doc 0)" in text
    assert f"{info['totals']['train']['total_tokens']:,}" in text


def test_inspect_a_single_split_dir(run_prefix):
    _, results, _ = run_prefix
    info = inspect_cache(results["email"].split_dir("validation"))
    assert [c["split"] for c in info["caches"]] == ["validation"]
    assert info["totals"] == {"validation": {"total_docs": results["email"].splits["validation"]["docs"],
                                             "total_tokens": results["email"].splits["validation"]["tokens"],
                                             "total_bytes": results["email"].splits["validation"]["bytes"]}}


def test_unfinished_cache_is_reported_not_hidden(run_prefix, tmp_path):
    import shutil

    _, results, _ = run_prefix
    d = str(tmp_path / "c")
    shutil.copytree(results["json"].out_dir, d)
    ledger_path = os.path.join(d, "train", "ledger.json")
    ledger = json.load(open(ledger_path))
    ledger["finished"] = False
    json.dump(ledger, open(ledger_path, "w"))
    info = inspect_cache(d)
    states = {c["split"]: c["finished"] for c in info["caches"]}
    assert states == {"train": False, "validation": True}
    assert "train" not in info["totals"]
    assert "[UNFINISHED]" in format_inspect(info)


def test_inspect_nothing_there(tmp_path):
    with pytest.raises(FileNotFoundError):
        inspect_cache(str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="no token cache"):
        inspect_cache(str(tmp_path))
