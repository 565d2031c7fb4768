"""The training loop: ``run_training`` reads top to bottom (resume, then per step: batch, update, log,
evaluate, checkpoint; then the last checkpoint, evaluation and result), and a ``Trainer`` holds the
run's state and does each of those things.

``run_training`` is data-source agnostic: it takes anything with ``batch(step) -> (B, T+1) int32``
(the tokenize reader's ``TrainBatches`` in production, a numpy source in unit tests) and a list of
``EvalSet``s. ``datakit.train.stage.train_model`` wires token caches into it.

Determinism and resume: the batch for step k is a pure function of (data seed, k), parameters are
initialized from ``cfg.seed``, and the learning rate is a function of k, so the state after k steps
is fully described by (params, optimizer moments, skip counter, k). That is exactly what a checkpoint
holds; resuming from step k replays steps k+1.. identically to an uninterrupted run.

The compiled programs and the data-parallel layout are in ``programs``, evaluation in ``evaluate``,
metrics.jsonl in ``metrics``, the batch prefetch in ``prefetch``.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from datakit.core.fsio import atomic_write_bytes
from datakit.core.layout import TrainDir
from datakit.train.checkpoint import (
    CheckpointError,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    prune_checkpoints,
    read_meta,
    save_checkpoint,
)
from datakit.train.config import ConfigError, TrainConfig
from datakit.train.evaluate import EvalSet, evaluate
from datakit.train.hardware import compute_dtype_for, peak_flops_per_device, select_devices
from datakit.train.metrics import MetricsLog, loss_points, nan_to_none, read_metrics, step_record, trim_metrics
from datakit.train.model import flops_per_token, param_count
from datakit.train.plot import write_loss_plot
from datakit.train.prefetch import BatchSource, Prefetcher
from datakit.train.programs import programs_for


@dataclass
class TrainResult:
    """What a training run did. ``metrics_path``, ``plot_path``, ``result_path`` and ``checkpoints``
    are relative to the run's out_dir (``TrainDir`` names): the same record then describes a local
    run, its remote mirror and a moved run directory."""

    final_loss: float | None  # mean train cross-entropy over the last log window (finite steps)
    eval_loss: float | None  # token-weighted over all validation sets, nats/token
    bpb: float | None  # bits per UTF-8 byte over all validation sets
    tokens_per_sec: float | None  # this invocation's training throughput (compile/eval excluded)
    mfu: float | None
    steps: int  # steps completed (== data position)
    skipped_steps: int
    completed: bool  # False when stopped early by stop_at (resumable)
    resumed_from: int | None
    num_params: int
    metrics_path: str
    plot_path: str
    result_path: str
    checkpoints: list[str]
    eval_by_source: dict[str, dict[str, float | None]] = field(default_factory=dict)
    compile_s: float | None = None
    data_wait_fraction: float | None = None
    data_load_fraction: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def result_json(result: TrainResult) -> str:
    """result.json's text: canonical JSON of the result, whose paths are relative to the out_dir."""
    return json.dumps(result.to_dict(), sort_keys=True, indent=2) + "\n"


def run_training(
    cfg: TrainConfig,
    batches: BatchSource,
    eval_sets: list[EvalSet],
    out_dir: str,
    vocab_size: int,
    *,
    data_fingerprint: str = "",
    run_info: dict[str, Any] | None = None,
    inject_nan_steps: Iterable[int] = (),
    stop_at: int | None = None,
    on_checkpoint: Callable[[list[str]], None] | None = None,
    on_log: Callable[[dict], None] | None = None,
) -> TrainResult:
    """Train (or resume) into ``out_dir``; see module docstring.

    ``on_checkpoint``: called after every checkpoint is written and old ones pruned, with the paths of
    the checkpoints kept (the remote mirror publishes them from there). ``on_log``: called with every
    metrics record as it is written (live progress: the CLI prints step, loss, tokens/s and ETA).

    ``inject_nan_steps``: test hook, step numbers (1-based, as in metrics.jsonl) whose loss is
    forced to NaN; they must be skipped and counted. ``stop_at``: stop after this step as a
    preemption would (checkpointing it); the next call resumes.
    """
    cfg.validate()
    if cfg.model.vocab_size is not None and cfg.model.vocab_size != vocab_size:
        raise ConfigError(f"model.vocab_size={cfg.model.vocab_size} but run_training got {vocab_size}")
    trainer = Trainer(cfg, vocab_size, out_dir, eval_sets, data_fingerprint=data_fingerprint,
                      on_checkpoint=on_checkpoint, on_log=on_log)
    start_step = trainer.resume()
    end_step = cfg.steps if stop_at is None else min(cfg.steps, int(stop_at))
    trainer.log_start(run_info or {})
    inject = frozenset(int(s) for s in inject_nan_steps)

    with trainer.prefetching(batches, end_step):
        for step_index in range(start_step, end_step):
            step = step_index + 1
            trainer.train_step(poisoned=step in inject)
            if step % cfg.log_every == 0 or step == end_step:
                trainer.log_window()
            with trainer.clock.excluded():  # evaluation and checkpoints are not training time
                if cfg.eval_every and step % cfg.eval_every == 0 and step != cfg.steps and eval_sets:
                    trainer.evaluate()
                if cfg.checkpoint_every and step % cfg.checkpoint_every == 0 and step != end_step:
                    trainer.checkpoint()
        trainer.clock.stop(trainer.state)

    if trainer.step != start_step or not list_checkpoints(trainer.layout.checkpoints):
        trainer.checkpoint()
    completed = end_step >= cfg.steps
    if completed and eval_sets:
        trainer.evaluate()
    return trainer.finish(completed)


@dataclass
class _Clock:
    """Where this invocation's wall time went. Training time runs from the first step's start (after
    compilation) to the last step's end, less evaluation and checkpoints; a log window's throughput
    is measured the same way over the window."""

    compile_s: float | None = None
    wait_s: float = 0.0  # waiting for the next batch
    excluded_s: float = 0.0  # evaluation + checkpoints inside the timed span
    tokens: int = 0
    t_loop: float | None = None
    t_end: float | None = None
    t_window: float = 0.0
    window_excluded_s: float = 0.0
    window_tokens: int = 0

    def start(self, t: float) -> None:
        self.t_loop = self.t_window = t

    def count(self, tokens: int) -> None:
        self.tokens += tokens
        self.window_tokens += tokens

    @contextlib.contextmanager
    def excluded(self) -> Iterator[None]:
        te = time.perf_counter()
        yield
        spent = time.perf_counter() - te
        self.excluded_s += spent
        self.window_excluded_s += spent

    def window_tokens_per_sec(self) -> float | None:
        dt = time.perf_counter() - self.t_window - self.window_excluded_s
        return self.window_tokens / dt if dt > 0 else None

    def new_window(self) -> None:
        self.t_window, self.window_excluded_s, self.window_tokens = time.perf_counter(), 0.0, 0

    def stop(self, state: Any) -> None:
        jax.block_until_ready(state)
        self.t_end = time.perf_counter()

    def train_wall(self) -> float | None:
        return (self.t_end - self.t_loop - self.excluded_s) if self.t_loop is not None else None


class Trainer:
    """One training invocation's state: the training state (params, optimizer moments, skip counter)
    at ``step``, the metrics of the steps not logged yet (fetched from the device once per window),
    the last evaluation, the clock, the prefetcher, and where it all is written (``TrainDir``)."""

    def __init__(self, cfg: TrainConfig, vocab_size: int, out_dir: str, eval_sets: list[EvalSet], *,
                 data_fingerprint: str, on_checkpoint: Callable[[list[str]], None] | None,
                 on_log: Callable[[dict], None] | None) -> None:
        self.cfg, self.vocab_size, self.eval_sets = cfg, vocab_size, eval_sets
        self.data_fingerprint, self.on_checkpoint = data_fingerprint, on_checkpoint
        self.devices = select_devices(cfg)
        self.compute_dtype = compute_dtype_for(cfg, self.devices[0])
        self.fingerprint = cfg.trajectory_fingerprint()
        self.layout = TrainDir(out_dir)
        self.latest = latest_checkpoint(self.layout.checkpoints)
        if self.latest is not None:  # refuse a mismatched resume before paying for any compilation
            self._check_resumable(read_meta(self.latest))
        self.progs = programs_for(cfg, vocab_size, self.devices, self.compute_dtype)
        self.peak = peak_flops_per_device(cfg, self.devices[0], self.compute_dtype)
        self.tokens_per_step = cfg.batch_size * cfg.seq_len
        self.flops_per_token = flops_per_token(cfg.model, vocab_size, cfg.seq_len)
        os.makedirs(out_dir, exist_ok=True)
        self.metrics = MetricsLog(self.layout.metrics, on_log)
        self.state: Any = None
        self.step = 0
        self.resumed_from: int | None = None
        self.num_params = 0
        self.pending: list[tuple[int, dict]] = []
        self.final_loss: float | None = None
        self.last_eval: dict[str, Any] = {}
        self.clock = _Clock()
        self.compiled: Any = None
        self.prefetch: Prefetcher | None = None

    def _check_resumable(self, meta: dict[str, Any]) -> None:
        if meta.get("fingerprint") != self.fingerprint or meta.get("vocab_size") != self.vocab_size:
            raise CheckpointError(
                f"{self.latest}: written by a run with a different model/optimizer/data config "
                f"(fingerprint {meta.get('fingerprint')}, vocab {meta.get('vocab_size')}; this run "
                f"{self.fingerprint}, vocab {self.vocab_size}). Use a fresh out_dir or the original config."
            )
        if self.data_fingerprint and meta.get("data_fingerprint") != self.data_fingerprint:
            raise CheckpointError(
                f"{self.latest}: written for different training data (data fingerprint "
                f"{meta.get('data_fingerprint')} vs {self.data_fingerprint}); use a fresh out_dir"
            )

    def resume(self) -> int:
        """The state from the latest checkpoint (metrics.jsonl trimmed to it), else a fresh init;
        returns the step it is at."""
        progs = self.progs
        if self.latest is None:
            params = progs.init(self.cfg.seed)
            self.state = {
                "params": params,
                "opt_state": progs.opt_init(params),
                "skipped": jax.device_put(jnp.zeros((), jnp.int32), progs.repl),
            }
        else:
            template = {
                "params": progs.shapes,
                "opt_state": jax.eval_shape(progs.tx.init, progs.shapes),
                "skipped": jax.ShapeDtypeStruct((), jnp.int32),
            }
            host_state, meta = load_checkpoint(self.latest, template)
            self.state = jax.device_put(host_state, progs.repl)
            self.step = self.resumed_from = int(meta["step"])
            trim_metrics(self.layout.metrics, self.step,
                         drop_eval_at_end=self.step >= self.cfg.steps and bool(self.eval_sets))
        self.num_params = param_count(self.state["params"])
        return self.step

    def log_start(self, run_info: dict[str, Any]) -> None:
        device = self.devices[0]
        self.metrics.write({
            "kind": "start", "step": self.step, "resumed_from": self.resumed_from, "devices": len(self.devices),
            "platform": device.platform, "device_kind": device.device_kind,
            "compute_dtype": jnp.dtype(self.compute_dtype).name, "num_params": self.num_params,
            "fingerprint": self.fingerprint, "config": self.cfg.to_dict(), **run_info,
        })

    @contextlib.contextmanager
    def prefetching(self, batches: BatchSource, end_step: int) -> Iterator[None]:
        """Batches of steps [step, end_step) are loaded ahead while the block runs."""
        shape = (self.cfg.batch_size, self.cfg.seq_len + 1)
        with Prefetcher(batches, shape, self.cfg.prefetch, self.progs.data, self.step, end_step) as self.prefetch:
            yield

    def train_step(self, poisoned: bool) -> None:
        """One update on the next batch (compiling the step first if this process has not yet);
        ``poisoned`` makes the loss NaN, as the test hook asks."""
        waited_from = time.perf_counter()
        batch = self.prefetch.next()
        poison = np.float32(np.nan if poisoned else 1.0)
        args = (self.state, batch, np.int32(self.step), poison)
        if self.compiled is None:
            self.compiled = self._compile(args)
            waited_from = time.perf_counter()  # waiting for batch 0 overlapped compile; do not count it
            self.clock.start(waited_from)
        self.clock.wait_s += time.perf_counter() - waited_from
        self.state, metrics = self.compiled(*args)
        self.step += 1
        self.pending.append((self.step, metrics))
        self.clock.count(self.tokens_per_step)

    def _compile(self, args: tuple) -> Any:
        progs = self.progs
        if progs.compiled_train_step is None:
            self.metrics.announce({"kind": "compiling", "step": self.step})  # a long silence otherwise
            tc = time.perf_counter()
            progs.compiled_train_step = progs.train_step.lower(*args).compile()
            progs.compile_s = time.perf_counter() - tc
            self.clock.compile_s = progs.compile_s
            self.metrics.announce({"kind": "compiled", "step": self.step, "compile_s": progs.compile_s})
        else:
            self.clock.compile_s = 0.0  # reused from an earlier run in this process
        return progs.compiled_train_step

    def log_window(self) -> None:
        """Log the steps since the last window: one record for the window's last step (with the
        window's mean loss and throughput), and per-step records when log_every=1 or a step was
        skipped. The device is synced here, once per window."""
        fetched = jax.device_get([m for _, m in self.pending])
        tps = self.clock.window_tokens_per_sec()
        losses = [float(m["ce"]) for m in fetched if bool(m["ok"])]
        last_step, last = self.pending[-1][0], fetched[-1]
        for (s, _), m in zip(self.pending, fetched):
            if s != last_step and (self.cfg.log_every == 1 or not bool(m["ok"])):
                self.metrics.write(step_record(s, m))
        record = {
            "kind": "train",
            "step": last_step,
            "loss": nan_to_none(last["loss"]),
            "ce": nan_to_none(last["ce"]),
            "loss_window_mean": float(np.mean(losses)) if losses else None,
            "ok": bool(last["ok"]),
            "lr": float(last["lr"]),
            "grad_norm": nan_to_none(last["grad_norm"]),
            "skipped_total": int(jax.device_get(self.state["skipped"])),
            "tokens": last_step * self.tokens_per_step,
            "tokens_per_sec": tps,
            "mfu": self._mfu(tps),
        }
        if "z_loss" in last:
            record["z_loss"] = nan_to_none(last["z_loss"])
        self.metrics.write(record)
        if losses:
            self.final_loss = float(np.mean(losses))
        self.pending.clear()
        self.clock.new_window()

    def evaluate(self) -> None:
        """Evaluate every set at the current step and log it (announcing it first: it can take a while)."""
        known = [es.sequences for es in self.eval_sets]
        self.metrics.announce({"kind": "evaluating", "step": self.step, "sets": len(self.eval_sets),
                               "sequences": sum(known) if None not in known else None})
        summary = evaluate(self.eval_sets, self.progs.eval_step, self.state["params"], self.progs.data, self.cfg)
        self.last_eval = {"kind": "eval", "step": self.step, **summary}
        self.metrics.write(self.last_eval)

    def checkpoint(self) -> None:
        """Save the state at the current step, prune old checkpoints, tell the hook which are kept."""
        ckpt_dir = self.layout.checkpoints
        meta = {
            "fingerprint": self.fingerprint,
            "data_fingerprint": self.data_fingerprint,
            "vocab_size": self.vocab_size,
            "data_position": self.step,  # TrainBatches.batch is a pure function of (seed, step)
            "tokens_seen": self.step * self.tokens_per_step,
            "skipped": int(jax.device_get(self.state["skipped"])),
            "time": time.time(),
        }
        save_checkpoint(ckpt_dir, self.step, self.state, meta)
        prune_checkpoints(ckpt_dir, self.cfg.keep_checkpoints)
        if self.on_checkpoint is not None:
            self.on_checkpoint([p for _, p in list_checkpoints(ckpt_dir)])

    def finish(self, completed: bool) -> TrainResult:
        """Draw the loss plot from metrics.jsonl and write result.json (the completion record)."""
        train_pts, eval_pts = loss_points(read_metrics(self.layout.metrics))
        write_loss_plot(self.layout.plot, train_pts, eval_pts)
        if self.final_loss is None and train_pts:
            self.final_loss = float(train_pts[-1][1])
        train_wall = self.clock.train_wall()
        tokens_per_sec = self.clock.tokens / train_wall if train_wall and train_wall > 0 else None
        result = TrainResult(
            final_loss=self.final_loss,
            eval_loss=self.last_eval.get("loss"),
            bpb=self.last_eval.get("bpb"),
            tokens_per_sec=tokens_per_sec,
            mfu=self._mfu(tokens_per_sec),
            steps=self.step,
            skipped_steps=int(jax.device_get(self.state["skipped"])),
            completed=completed,
            resumed_from=self.resumed_from,
            num_params=self.num_params,
            metrics_path=TrainDir.METRICS,
            plot_path=TrainDir.PLOT,
            result_path=TrainDir.RESULT,
            checkpoints=[TrainDir.rel_checkpoint(p) for _, p in list_checkpoints(self.layout.checkpoints)],
            eval_by_source=self.last_eval.get("sources", {}),
            compile_s=self.clock.compile_s,
            data_wait_fraction=(self.clock.wait_s / train_wall) if train_wall else None,
            data_load_fraction=(self.prefetch.load_s / train_wall) if train_wall else None,
        )
        atomic_write_bytes(os.path.abspath(self.layout.result), result_json(result).encode("utf-8"))
        return result

    def _mfu(self, tokens_per_sec: float | None) -> float | None:
        if not (tokens_per_sec and self.peak):
            return None
        return self.flops_per_token * tokens_per_sec / (self.peak * len(self.devices))
