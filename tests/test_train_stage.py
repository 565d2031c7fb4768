"""train_model on real token caches: real BPE tokenizer, real parquet sources, real JAX training.

Corpus: Python standard-library sources and /usr/share/common-licenses texts written as consolidated
sources, tokenized by the tokenize stage. One short training run is shared by several tests.
"""

from __future__ import annotations

import json
import math
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pyarrow.parquet as pq
import pytest

from datakit.core.layout import DocumentsDir, TrainDir
from datakit.shuffle import ExecConfig
from datakit.tokenize.cache import CacheNotReady, open_cache
from datakit.tokenize.fixtures import license_texts, stdlib_texts, write_source
from datakit.tokenize.tokenize_step import is_validation, tokenize_source
from datakit.tokenize.tokenizer import train_tokenizer
from datakit.train import ConfigError, TrainConfig, train_model
from datakit.train.checkpoint import leaf_name
from datakit.train.metrics import read_metrics
from datakit.train.model import init_params, loss_fn

INLINE = ExecConfig(backend="inline")
VAL_FRACTION = 0.1


@pytest.fixture(scope="module")
def caches(tmp_path_factory):
    root = tmp_path_factory.mktemp("train_stage")
    corpora = {
        "code": stdlib_texts(250_000, subdir="json") + stdlib_texts(250_000, subdir="email"),
        "prose": license_texts() or stdlib_texts(120_000, subdir="asyncio"),
    }
    for name, texts in corpora.items():
        write_source(str(root / "src" / name), texts, 2, source=name)
    tok = train_tokenizer([str(root / "src" / n) for n in corpora], str(root / "tok"), vocab_size=512,
                          max_bytes=400_000)
    out = {"root": root, "tok": tok["path"], "train": {}, "validation": {}, "src": {}}
    for name in corpora:
        res = tokenize_source(name, str(root / "src" / name), str(root / "cache" / name), tok["path"],
                              validation_fraction=VAL_FRACTION, exec_config=INLINE)
        out["train"][name] = res.split_dir("train")
        out["validation"][name] = res.split_dir("validation")
        out["src"][name] = str(root / "src" / name)
    return out


def stage_cfg(**over) -> TrainConfig:
    base = dict(
        model={"d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "d_ff": 128, "qk_norm": True},
        seq_len=64, batch_size=8, steps=60, warmup_steps=6, learning_rate=3e-3, log_every=5,
        eval_every=20, z_loss=1e-4,
    )
    base.update(over)
    return TrainConfig.from_dict(base)


WEIGHTS = {"code": 0.7, "prose": 0.3}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> str:
    """The shared run's out_dir: the result names its files relative to it."""
    return str(tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="module")
def trained(caches, run_dir):
    return train_model(stage_cfg(), caches["train"], WEIGHTS, caches["validation"], run_dir)


def test_loss_decreases_on_a_real_corpus(trained, run_dir):
    assert trained.completed and trained.steps == 60 and trained.skipped_steps == 0
    assert (trained.metrics_path, trained.plot_path, trained.result_path) == (
        TrainDir.METRICS, TrainDir.PLOT, TrainDir.RESULT)  # relative to the out_dir
    assert trained.checkpoints[-1] == "checkpoints/step-00000060.npz"
    records = read_metrics(os.path.join(run_dir, trained.metrics_path))
    train = [r for r in records if r["kind"] == "train"]
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["step"] for r in evals] == [20, 40, 60]
    first = train[0]["loss_window_mean"]
    assert first > math.log(512) - 0.5  # starts near uniform over the vocabulary
    assert trained.final_loss < first - 0.8
    assert evals[-1]["loss"] < evals[0]["loss"] - 0.2
    assert trained.eval_loss == pytest.approx(evals[-1]["loss"])
    assert trained.tokens_per_sec and trained.tokens_per_sec > 0
    assert trained.mfu is None  # CPU: no known peak FLOPs, no made-up MFU
    start = records[0]
    assert start["kind"] == "start" and start["tokenizer"]["vocab_size"] == 512
    assert os.path.getsize(os.path.join(run_dir, trained.plot_path)) > 1000
    assert json.load(open(os.path.join(run_dir, trained.result_path)))["steps"] == 60


def _validation_bytes(src_dir: str) -> int:
    total = 0
    main = DocumentsDir(src_dir).main
    for name in sorted(os.listdir(main)):
        t = pq.read_table(os.path.join(main, name))
        for doc_id, text in zip(t.column("id").to_pylist(), t.column("text").to_pylist()):
            if is_validation(doc_id, VAL_FRACTION):
                total += len(text.encode("utf-8"))
    return total


def test_bpb_uses_exactly_the_bytes_of_the_evaluated_documents(trained, run_dir, caches):
    cfg = stage_cfg()
    nll_total, bytes_total = 0.0, 0
    ckpt = np.load(os.path.join(run_dir, trained.checkpoints[-1]))
    template = init_params(cfg.model, 512, 0)
    params = jax.tree_util.tree_map_with_path(lambda p, _: jnp.asarray(ckpt["params/" + leaf_name(p)]), template)
    score = jax.jit(lambda p, b, m: loss_fn(p, b, cfg.model, mask=m)[1])
    for name, split_dir in caches["validation"].items():
        cache = open_cache(split_dir)
        # the bytes the tokenizer saw for these documents, recomputed from the parquet source
        expected_bytes = _validation_bytes(caches["src"][name])
        assert cache.total_bytes == expected_bytes
        src = trained.eval_by_source[name]
        assert src["bytes"] == expected_bytes
        assert src["tokens"] == cache.total_tokens  # every token of every document is a target once
        # independent NLL: the whole stream after one EOS of context, cut into T-token chunks
        T = cfg.seq_len
        stream = np.concatenate([[cache.eos_id], cache.tokens(0, cache.total_tokens)]).astype(np.int32)
        n = len(stream) - 1
        rows = math.ceil(n / T)
        padded = np.zeros(rows * T + 1, np.int32)
        padded[: len(stream)] = stream
        batch = np.stack([padded[i * T : i * T + T + 1] for i in range(rows)])
        mask = (np.arange(rows * T).reshape(rows, T) < n).astype(np.float32)
        aux = score(params, jnp.asarray(batch), jnp.asarray(mask))
        assert float(aux["count"]) == cache.total_tokens
        nll = float(aux["nll_sum"])
        assert src["loss"] == pytest.approx(nll / n, rel=1e-5)
        assert src["bpb"] == pytest.approx(nll / (math.log(2) * expected_bytes), rel=1e-5)
        nll_total += nll
        bytes_total += expected_bytes
    assert trained.bpb == pytest.approx(nll_total / (math.log(2) * bytes_total), rel=1e-5)
    assert 0.5 < trained.bpb < 8.0


def test_eval_max_tokens_takes_whole_shards_and_stays_exact(caches, tmp_path):
    # same trajectory as the shared run (compiled programs are reused); only eval cadence differs
    cfg = stage_cfg(eval_every=0, eval_max_tokens=1)  # 1 token -> the first shard only
    res = train_model(cfg, caches["train"], WEIGHTS, {"code": caches["validation"]["code"]}, str(tmp_path))
    ledger = open_cache(caches["validation"]["code"]).ledger
    first = ledger["shards"][0]
    assert res.eval_by_source["code"]["tokens"] == first["tokens"]
    assert res.eval_by_source["code"]["bytes"] == first["bytes"]
    assert res.bpb == pytest.approx(
        res.eval_loss * first["tokens"] / (math.log(2) * first["bytes"]), rel=1e-9
    )


def test_missing_and_unfinished_caches_are_refused(caches, tmp_path):
    cfg = stage_cfg(steps=2, warmup_steps=1)
    with pytest.raises(CacheNotReady, match=r"train cache for source 'code'.*does not exist"):
        train_model(cfg, {"code": str(tmp_path / "nope")}, {"code": 1.0}, {}, str(tmp_path / "o1"))
    broken = str(tmp_path / "broken")
    shutil.copytree(caches["validation"]["prose"], broken)
    ledger_path = os.path.join(broken, "ledger.json")
    ledger = json.load(open(ledger_path))
    ledger["finished"] = False
    json.dump(ledger, open(ledger_path, "w"))
    with pytest.raises(CacheNotReady, match=r"validation cache for source 'prose'.*unfinished"):
        train_model(cfg, caches["train"], WEIGHTS, {"prose": broken}, str(tmp_path / "o2"))
    assert not os.path.exists(tmp_path / "o1") and not os.path.exists(tmp_path / "o2")


def test_vocab_mismatch_is_refused(caches, tmp_path):
    cfg = stage_cfg(steps=2, warmup_steps=1, model={"d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
                                    "d_ff": 128, "vocab_size": 300})
    with pytest.raises(ConfigError, match=r"vocab mismatch: train cache 'code' .* vocab_size=512 but model.vocab_size=300"):
        train_model(cfg, caches["train"], WEIGHTS, caches["validation"], str(tmp_path))


def test_caches_from_different_tokenizers_are_refused(caches, tmp_path):
    other = train_tokenizer([caches["src"]["prose"]], str(tmp_path / "tok2"), vocab_size=300, max_bytes=50_000)
    res = tokenize_source("prose", caches["src"]["prose"], str(tmp_path / "c2"), other["path"],
                          validation_fraction=VAL_FRACTION, exec_config=INLINE)
    with pytest.raises(ConfigError, match="different tokenizers"):
        train_model(stage_cfg(steps=2, warmup_steps=1), caches["train"], WEIGHTS, {"prose": res.split_dir("validation")},
                    str(tmp_path / "o"))


def test_bad_mixture_weights_are_refused(caches, tmp_path):
    with pytest.raises(ValueError, match=r"weights name source\(s\) \['web'\] that have no cache"):
        train_model(stage_cfg(steps=2, warmup_steps=1), caches["train"], {"code": 1.0, "prose": 1.0, "web": 1.0}, {},
                    str(tmp_path))


def test_resume_from_checkpoint_matches_the_uninterrupted_run(trained, run_dir, caches, tmp_path):
    out = str(tmp_path)
    cfg = stage_cfg(checkpoint_every=10)  # cadence only: same trajectory as the shared run
    part = train_model(cfg, caches["train"], WEIGHTS, caches["validation"], out, stop_at=25)
    assert not part.completed and part.steps == 25
    done = train_model(cfg, caches["train"], WEIGHTS, caches["validation"], out)
    assert done.resumed_from == 25 and done.completed

    def curve(path):
        return {(r["kind"], r["step"]): r["loss"] for r in read_metrics(path) if r["kind"] in ("train", "eval")}

    ref, got = curve(os.path.join(run_dir, trained.metrics_path)), curve(os.path.join(out, done.metrics_path))
    assert sorted(ref) == sorted(got)
    for key, value in ref.items():
        assert got[key] == pytest.approx(value, abs=1e-6), key
    assert done.bpb == pytest.approx(trained.bpb, abs=1e-6)


def test_nan_step_on_real_data_is_skipped_and_training_continues(trained, caches, tmp_path):
    res = train_model(stage_cfg(), caches["train"], WEIGHTS, {}, str(tmp_path), inject_nan_steps=[10, 11])
    assert res.skipped_steps == 2 and res.completed
    bad = [r for r in read_metrics(os.path.join(tmp_path, res.metrics_path)) if r["kind"] == "train" and not r["ok"]]
    assert [r["step"] for r in bad] == [10, 11]
    assert res.final_loss == pytest.approx(trained.final_loss, abs=0.3)  # same data, two updates fewer
    assert res.eval_loss is None and res.bpb is None  # no validation caches given


def test_remote_out_dir_publishes_every_checkpoint_and_resumes_from_it(trained, run_dir, caches, monkeypatch,
                                                                       tmp_path):
    """An fsspec out_dir (here the in-process memory:// store): checkpoints appear remotely as they are
    written (pruned ones removed), a preempted run resumes from the remote checkpoint alone, and the
    finished run's result names its files relative to the remote out_dir, exactly as a local run's
    does. Nothing is left in the local mirror."""
    import tempfile
    import uuid

    import fsspec

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # local mirrors go here: check they are removed
    fs = fsspec.filesystem("memory")
    remote = f"memory://train-{uuid.uuid4().hex[:8]}/run"
    cfg = stage_cfg(checkpoint_every=10, keep_checkpoints=2)
    part = train_model(cfg, caches["train"], WEIGHTS, caches["validation"], remote, stop_at=25)
    assert not part.completed and part.steps == 25
    names = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(f"{remote}/checkpoints", detail=False))
    assert names == ["step-00000020.npz", "step-00000025.npz"]  # step 10 was pruned remotely too
    assert part.checkpoints == [f"checkpoints/{n}" for n in names]
    assert all(fs.exists(f"{remote}/{p}") for p in part.checkpoints)
    assert list(tmp_path.iterdir()) == []

    done = train_model(cfg, caches["train"], WEIGHTS, caches["validation"], remote)
    assert done.resumed_from == 25 and done.completed
    assert done.metrics_path == TrainDir.METRICS and fs.exists(f"{remote}/{done.plot_path}")
    with fsspec.open(f"{remote}/{done.result_path}", "r") as f:
        assert json.load(f)["checkpoints"] == done.checkpoints
    with fsspec.open(f"{remote}/{done.metrics_path}", "r") as f:
        records = [json.loads(line) for line in f if line.strip()]

    def curve(rows):
        return {(r["kind"], r["step"]): r["loss"] for r in rows if r["kind"] in ("train", "eval")}

    ref, got = curve(read_metrics(os.path.join(run_dir, trained.metrics_path))), curve(records)
    assert sorted(ref) == sorted(got)
    for key, value in ref.items():
        assert got[key] == pytest.approx(value, abs=1e-6), key
    assert done.bpb == pytest.approx(trained.bpb, abs=1e-6)
    assert list(tmp_path.iterdir()) == []
    assert not os.path.exists("memory:")  # no stray local directory named after the URL
