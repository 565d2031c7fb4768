"""Training-stage benchmark: datakit's loop vs a minimal reference JAX loop, same model, same data.

What it measures, per preset (default ``nano`` and ``small``):

- ``ours``: ``datakit.train.train_model`` on real token caches (BPE tokenizer trained on Python
  stdlib sources, tokenized by the tokenize stage): tokens/s over the timed steps (compilation,
  evaluation and checkpoint time excluded, as the loop reports them), MFU, and the data loader's
  share of the step: ``data_load_fraction`` (time spent building batches with
  ``TrainBatches.batch`` + host->device copy, in the prefetch thread) and ``data_wait_fraction``
  (time the training thread actually waited for a batch).
- ``reference``: the floor of our overhead. A plain loop written here: the same model and loss
  (``datakit.train.model``), ``optax.adamw`` with the same clipping and decay mask, one jit step,
  no sharding annotations, no skip-step guard, no metrics, no prefetch thread, batches built before
  the clock starts and already on the device. ``overhead_pct`` = how much slower ours is
  (negative: ours was faster, i.e. within noise). Each side runs ``--repeats`` times, interleaved so
  background load hits both alike; medians are reported with the individual runs.
- ``loader``: ``TrainBatches.batch`` timed alone, as a fraction of our measured step time
  (target < 5%).

MFU needs a peak. On CPU there is no datasheet number, so the benchmark measures one: the best
float32 matmul throughput JAX reaches here (``peak_matmul_flops``), and reports MFU against it.
On a GPU/TPU the loop's datasheet table is used instead. The device is reported in the JSON.

Setup: nothing beyond the project venv (no peer framework is involved: the reference loop is plain
JAX/optax in this file). Run:

    .venv/bin/python -m benchmarks.train                      # nano + small on the local device
    .venv/bin/python -m benchmarks.train --presets nano --steps 100

CPU use: JAX uses all cores of the machine; on a shared box keep ``--small-steps`` low.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from datakit.shuffle import ExecConfig
from datakit.tokenize.fixtures import license_texts, stdlib_texts, write_source
from datakit.tokenize.reader import TrainBatches
from datakit.tokenize.tokenize_step import tokenize_source
from datakit.tokenize.tokenizer import train_tokenizer
from datakit.train import TrainConfig, train_model
from datakit.train.hardware import compute_dtype_for, peak_flops_per_device
from datakit.train.model import flops_per_token, init_params, loss_fn, param_count_for
from datakit.train.optim import decay_mask, make_schedule


def build_caches(root: str, vocab_size: int, corpus_bytes: int) -> tuple[dict, dict, float]:
    t0 = time.perf_counter()
    corpora = {"code": stdlib_texts(corpus_bytes), "prose": license_texts() or stdlib_texts(200_000, "json")}
    for name, texts in corpora.items():
        write_source(os.path.join(root, "src", name), texts, 4, source=name)
    tok = train_tokenizer([os.path.join(root, "src", n) for n in corpora], os.path.join(root, "tok"),
                          vocab_size=vocab_size, max_bytes=2_000_000)
    train, val = {}, {}
    for name in corpora:
        res = tokenize_source(name, os.path.join(root, "src", name), os.path.join(root, "cache", name),
                              tok["path"], validation_fraction=0.02, exec_config=ExecConfig(backend="inline"))
        train[name], val[name] = res.split_dir("train"), res.split_dir("validation")
    return train, val, time.perf_counter() - t0


def measure_peak_matmul_flops(n: int = 2048, reps: int = 5) -> float:
    """Best observed float32 matmul FLOP/s on the default device (a practical, not datasheet, peak)."""
    a = jnp.ones((n, n), jnp.float32)
    f = jax.jit(lambda x, y: x @ y)
    f(a, a).block_until_ready()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        f(a, a).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n**3 / best


def run_ours(cfg: TrainConfig, train: dict, val: dict, weights: dict, out_dir: str) -> dict:
    res = train_model(cfg, train, weights, val, out_dir)
    return {
        "tokens_per_sec": res.tokens_per_sec,
        "mfu": res.mfu,
        "compile_s": res.compile_s,
        "data_load_fraction": res.data_load_fraction,
        "data_wait_fraction": res.data_wait_fraction,
        "final_loss": res.final_loss,
        "eval_loss": res.eval_loss,
        "bpb": res.bpb,
        "steps": res.steps,
        "num_params": res.num_params,
    }


class Reference:
    """The minimal loop: same model/loss/optimizer math, nothing else. Compiled once, timed per call."""

    def __init__(self, cfg: TrainConfig, batches: list[np.ndarray], vocab: int, peak: float | None):
        self.cfg = cfg
        self.mcfg = mcfg = dataclasses.replace(cfg.model, vocab_size=vocab)
        dev = jax.devices()[0]
        dtype = compute_dtype_for(cfg, dev)  # same numerics as ours: bf16 matmuls on accelerators
        self.peak = peak or peak_flops_per_device(cfg, dev, dtype)
        self.fpt = flops_per_token(mcfg, vocab, cfg.seq_len)
        params = jax.device_put(init_params(mcfg, vocab, cfg.seed))
        tx = optax.chain(
            optax.clip_by_global_norm(cfg.grad_clip),
            optax.adamw(make_schedule(cfg), b1=cfg.beta1, b2=cfg.beta2, eps=cfg.adam_eps,
                        weight_decay=cfg.weight_decay, mask=decay_mask(params)),
        )

        @jax.jit
        def step(params, opt_state, batch):
            (loss, _), grads = jax.value_and_grad(
                lambda p: loss_fn(p, batch, mcfg, z_loss=cfg.z_loss, compute_dtype=dtype), has_aux=True
            )(params)
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss

        self.step = step
        self.batches = [jax.device_put(b) for b in batches]
        self.params, self.opt_state = params, tx.init(params)
        t0 = time.perf_counter()
        self.params, self.opt_state, loss = step(self.params, self.opt_state, self.batches[0])
        loss.block_until_ready()
        self.compile_s = time.perf_counter() - t0

    def timed(self) -> dict:
        t0 = time.perf_counter()
        loss = None
        for b in self.batches[1:]:
            self.params, self.opt_state, loss = self.step(self.params, self.opt_state, b)
        loss.block_until_ready()
        wall = time.perf_counter() - t0
        tps = (len(self.batches) - 1) * self.cfg.batch_size * self.cfg.seq_len / wall
        return {"tokens_per_sec": tps, "mfu": self.fpt * tps / self.peak if self.peak else None}


def _median(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.median(vals)) if vals else None


def bench_preset(name: str, steps: int, repeats: int, train: dict, val: dict, weights: dict, vocab: int,
                 peak: float | None, work: str) -> dict:
    base = TrainConfig.preset(name)
    cfg = TrainConfig.preset(
        name, steps=steps, warmup_steps=max(1, steps // 10), log_every=max(1, steps // 4),
        eval_every=0, checkpoint_every=0, peak_flops_per_device=peak,
        # eval over a bounded prefix so the benchmark spends its time training
        eval_max_tokens=8 * base.seq_len * base.batch_size,
    )
    tb = TrainBatches(train, weights, cfg.seq_len, cfg.batch_size, cfg.data_seed)
    t0 = time.perf_counter()
    batches = [tb.batch(s) for s in range(steps)]
    loader_s = (time.perf_counter() - t0) / steps
    ref = Reference(cfg, batches, vocab, peak)
    ours_runs, ref_runs = [], []
    for r in range(repeats):  # interleaved, so background load hits both sides alike
        ours_runs.append(run_ours(cfg, train, val, weights, os.path.join(work, f"run-{name}-{r}")))
        ref_runs.append(ref.timed())
    ours = dict(ours_runs[0])  # losses/bpb/compile of the first run (later runs reuse the compile)
    for key in ("tokens_per_sec", "mfu", "data_load_fraction", "data_wait_fraction"):
        ours[key] = _median([o[key] for o in ours_runs])
    ours["tokens_per_sec_runs"] = [o["tokens_per_sec"] for o in ours_runs]
    reference = {
        "tokens_per_sec": _median([x["tokens_per_sec"] for x in ref_runs]),
        "mfu": _median([x["mfu"] for x in ref_runs]),
        "tokens_per_sec_runs": [x["tokens_per_sec"] for x in ref_runs],
        "compile_s": ref.compile_s,
    }
    our_step_s = cfg.batch_size * cfg.seq_len / ours["tokens_per_sec"]
    return {
        "config": {"seq_len": cfg.seq_len, "batch_size": cfg.batch_size, "steps": steps, "repeats": repeats,
                   "params": param_count_for(cfg.model, vocab),
                   "flops_per_token": flops_per_token(cfg.model, vocab, cfg.seq_len)},
        "ours": ours,
        "reference": reference,
        "overhead_pct": 100.0 * (reference["tokens_per_sec"] / ours["tokens_per_sec"] - 1.0),
        "loader": {
            "ms_per_batch": 1000 * loader_s,
            "fraction_of_step": loader_s / our_step_s,
            "target_fraction": 0.05,
        },
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--presets", default="nano,small")
    ap.add_argument("--steps", type=int, default=60, help="steps for nano")
    ap.add_argument("--small-steps", type=int, default=6, help="steps for small and larger presets")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved timed runs per side; medians reported")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--corpus-bytes", type=int, default=3_000_000)
    ap.add_argument("--work-dir", default=None)
    args = ap.parse_args(argv)

    work = args.work_dir or tempfile.mkdtemp(prefix="datakit-bench-train-")
    dev = jax.devices()[0]
    train, val, build_s = build_caches(work, args.vocab, args.corpus_bytes)
    peak = measure_peak_matmul_flops() if dev.platform == "cpu" else None
    weights = {"code": 0.8, "prose": 0.2}
    out = {
        "benchmark": "train",
        "device": {"platform": dev.platform, "kind": dev.device_kind, "count": jax.device_count(),
                   "cpu_count": os.cpu_count()},
        "peak_matmul_flops": peak,
        "mfu_basis": "measured fp32 matmul peak" if peak else "datasheet bf16 peak (datakit.train.hardware)",
        "cache_build_s": build_s,
        "loadavg_start": os.getloadavg(),
        "presets": {},
    }
    for name in args.presets.split(","):
        steps = args.steps if name == "nano" else args.small_steps
        out["presets"][name] = bench_preset(name, steps, args.repeats, train, val, weights, args.vocab, peak, work)
    out["loadavg_end"] = os.getloadavg()
    print(json.dumps(out, indent=1, sort_keys=True))
    return out


if __name__ == "__main__":
    main()
