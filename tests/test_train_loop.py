"""The training loop on a byte-level corpus of real text (Python stdlib sources), no token cache.

These exercise loop mechanics that do not depend on the tokenizer: skip-step on an injected NaN,
resume equivalence, preemption, 1 vs 2 host devices, config/checkpoint mismatch. The cache-backed
entry point (train_model) is tested in test_train_stage.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig

import numpy as np
import pytest

from datakit.train.checkpoint import CheckpointError, list_checkpoints
from datakit.train.config import ConfigError, TrainConfig
from datakit.train.evaluate import EvalSet
from datakit.train.loop import run_training
from datakit.train.metrics import read_metrics

STDLIB = sysconfig.get_paths()["stdlib"]


def corpus_bytes(limit: int = 400_000) -> np.ndarray:
    out, total = [], 0
    for name in sorted(os.listdir(STDLIB)):
        if name.endswith(".py"):
            data = open(os.path.join(STDLIB, name), "rb").read()
            out.append(data)
            total += len(data)
            if total >= limit:
                break
    return np.frombuffer(b"".join(out)[:limit], np.uint8).astype(np.int32)


class ByteBatches:
    """batch(step): random windows of a byte stream; a pure function of (seed, step) like TrainBatches."""

    def __init__(self, data: np.ndarray, batch_size: int, seq_len: int, seed: int = 0):
        self.data, self.bs, self.T, self.seed = data, batch_size, seq_len, seed

    def batch(self, step: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, step])
        starts = rng.integers(0, len(self.data) - self.T - 1, self.bs)
        return np.stack([self.data[s : s + self.T + 1] for s in starts])


def byte_eval_set(data: np.ndarray, seq_len: int, batch_size: int) -> EvalSet:
    """Sequential non-overlapping windows; with byte tokens, bytes evaluated == targets evaluated."""

    def batches():
        n = (len(data) - 1) // seq_len
        rows = [data[i * seq_len : i * seq_len + seq_len + 1] for i in range(n)]
        for i in range(0, n, batch_size):
            yield np.stack(rows[i : i + batch_size])

    return EvalSet("bytes", batches, lambda targets: float(targets))


def tiny_cfg(**over) -> TrainConfig:
    base = dict(
        model={"d_model": 32, "n_layers": 1, "n_heads": 4, "n_kv_heads": 2, "d_ff": 64},
        seq_len=32, batch_size=4, steps=12, warmup_steps=2, learning_rate=3e-3, log_every=1,
    )
    base.update(over)
    return TrainConfig.from_dict(base)


@pytest.fixture(scope="module")
def corpus():
    data = corpus_bytes()
    return data[:-6000], data[-6000:]


def _train_losses(metrics_path: str) -> dict[int, float | None]:
    return {r["step"]: r["ce"] for r in read_metrics(metrics_path) if r["kind"] == "train"}


def test_injected_nan_step_is_skipped_and_counted(tmp_path, corpus):
    train, _ = corpus
    cfg = tiny_cfg()  # every in-process test here shares one config, hence one compilation
    src = ByteBatches(train, 4, 32)
    # state after 2 clean steps ...
    two = run_training(cfg, src, [], str(tmp_path / "two"), 256, stop_at=2)
    # ... must equal the state after steps 1, 2 and a poisoned (skipped) step 3
    out = str(tmp_path / "nan")
    three = run_training(cfg, src, [], out, 256, inject_nan_steps=[3], stop_at=3)
    assert three.skipped_steps == 1
    a, b = np.load(tmp_path / "two" / two.checkpoints[-1]), np.load(os.path.join(out, three.checkpoints[-1]))
    assert [n for n in a.files if n.startswith("params/")]
    for name in a.files:
        if name.startswith(("params/", "opt_state/")):
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    assert int(a["skipped"]) == 0 and int(b["skipped"]) == 1

    res = run_training(cfg, src, [], out, 256, inject_nan_steps=[3])  # resume and finish
    assert res.skipped_steps == 1 and res.steps == 12 and res.completed
    records = {r["step"]: r for r in read_metrics(os.path.join(out, res.metrics_path)) if r["kind"] == "train"}
    assert records[3]["ok"] is False and records[3]["loss"] is None
    assert all(records[s]["ok"] and records[s]["ce"] is not None for s in (1, 2, *range(4, 13)))
    assert records[12]["skipped_total"] == 1
    assert np.isfinite(res.final_loss)


def test_resume_gives_the_same_loss_curve(tmp_path, corpus):
    train, val = corpus
    cfg = tiny_cfg(steps=12, checkpoint_every=4, eval_every=6)
    evs = [byte_eval_set(val, 32, 8)]
    full_dir = str(tmp_path / "full")
    full = run_training(cfg, ByteBatches(train, 4, 32), evs, full_dir, 256)

    out = str(tmp_path / "resumed")
    first = run_training(cfg, ByteBatches(train, 4, 32), evs, out, 256, stop_at=7)  # "preempted"
    assert not first.completed and first.steps == 7
    assert [s for s, _ in list_checkpoints(os.path.join(out, "checkpoints"))] == [4, 7]
    second = run_training(cfg, ByteBatches(train, 4, 32), evs, out, 256)
    assert second.resumed_from == 7 and second.completed and second.steps == 12

    a = _train_losses(os.path.join(full_dir, full.metrics_path))
    b = _train_losses(os.path.join(out, second.metrics_path))
    assert sorted(a) == sorted(b) == list(range(1, 13))  # trimmed + appended = one clean curve
    for s in a:
        assert b[s] == pytest.approx(a[s], abs=1e-6), s
    assert second.eval_loss == pytest.approx(full.eval_loss, abs=1e-6)
    assert second.bpb == pytest.approx(full.bpb, abs=1e-6)
    fa = np.load(os.path.join(full_dir, full.checkpoints[-1]))
    fb = np.load(os.path.join(out, second.checkpoints[-1]))
    for name in fa.files:
        if name != "__meta__":
            np.testing.assert_allclose(fa[name], fb[name], atol=1e-6, err_msg=name)
    # resuming a finished run is a no-op that reports the same result
    again = run_training(cfg, ByteBatches(train, 4, 32), evs, out, 256)
    assert again.steps == 12 and again.resumed_from == 12
    assert again.eval_loss == pytest.approx(full.eval_loss, abs=1e-6)
    evals = [r["step"] for r in read_metrics(os.path.join(out, again.metrics_path)) if r["kind"] == "eval"]
    assert evals == [6, 12]  # the re-evaluation replaced the old final record, no duplicate


def test_eval_bpb_and_partial_batches(tmp_path, corpus):
    train, val = corpus
    # 6000 bytes -> 187 windows of 32: the last eval batch of 8 is partial (187 = 23*8 + 3)
    cfg = tiny_cfg()
    res = run_training(cfg, ByteBatches(train, 4, 32), [byte_eval_set(val, 32, 8)], str(tmp_path), 256)
    src = res.eval_by_source["bytes"]
    assert src["tokens"] == 187 * 32
    # byte-level tokens: bits per byte == loss / ln 2 exactly
    assert res.bpb == pytest.approx(res.eval_loss / np.log(2), rel=1e-9)
    assert 3.0 < res.bpb < 8.0  # 8 bits would be uniform over 256 byte values
    with open(tmp_path / res.result_path) as f:
        assert json.load(f)["bpb"] == pytest.approx(res.bpb)
    assert os.path.getsize(tmp_path / res.plot_path) > 1000


def test_resume_with_a_different_config_is_refused(tmp_path, corpus):
    train, _ = corpus
    out = str(tmp_path)
    run_training(tiny_cfg(), ByteBatches(train, 4, 32), [], out, 256, stop_at=2)
    with pytest.raises(CheckpointError, match="different model/optimizer/data config"):
        run_training(tiny_cfg(learning_rate=1e-4), ByteBatches(train, 4, 32), [], out, 256)
    with pytest.raises(CheckpointError, match="different model/optimizer/data config"):
        run_training(tiny_cfg(steps=20), ByteBatches(train, 4, 32), [], out, 256)
    # cadence changes are fine
    res = run_training(tiny_cfg(log_every=3, checkpoint_every=5), ByteBatches(train, 4, 32), [], out, 256)
    assert res.resumed_from == 2 and res.steps == 12


def test_bad_batch_shape_and_device_count_are_clear(tmp_path, corpus):
    train, _ = corpus
    with pytest.raises(ValueError, match=r"batch source returned shape \(4, 17\) for step 0"):
        run_training(tiny_cfg(), ByteBatches(train, 4, 16), [], str(tmp_path / "a"), 256)
    with pytest.raises(ConfigError, match="num_devices=64 but only"):
        run_training(tiny_cfg(num_devices=64), ByteBatches(train, 4, 32), [], str(tmp_path / "b"), 256)


TWO_DEVICE_SCRIPT = r"""
import json, sys
import jax
assert len(jax.devices()) == 2, jax.devices()
sys.path.insert(0, sys.argv[1])
from test_train_loop import ByteBatches, byte_eval_set, corpus_bytes, tiny_cfg, _train_losses
from datakit.train.loop import run_training
data = corpus_bytes()
train, val = data[:-6000], data[-6000:]
out = {}
for n in (1, 2):
    cfg = tiny_cfg(steps=6, num_devices=n)
    run_dir = sys.argv[2] + f"/d{n}"
    res = run_training(cfg, ByteBatches(train, 4, 32), [byte_eval_set(val, 32, 8)], run_dir, 256)
    out[n] = {"losses": _train_losses(run_dir + "/" + res.metrics_path), "eval": res.eval_loss}
print("RESULT" + json.dumps(out))
"""


@pytest.mark.slow
def test_one_and_two_host_devices_give_the_same_loss(tmp_path):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-c", TWO_DEVICE_SCRIPT, os.path.dirname(__file__), str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=500,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULT"))
    out = json.loads(line[len("RESULT"):])
    one, two = out["1"], out["2"]
    for s, loss in one["losses"].items():
        assert two["losses"][s] == pytest.approx(loss, abs=1e-5), s
    assert two["eval"] == pytest.approx(one["eval"], abs=1e-5)
