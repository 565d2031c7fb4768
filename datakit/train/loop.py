"""The training loop: jit step, data parallelism, eval/bpb, metrics, checkpoints, resume.

``run_training`` is data-source agnostic: it takes anything with ``batch(step) -> (B, T+1) int32``
(the tokenize reader's ``TrainBatches`` in production, a numpy source in unit tests) and a list of
``EvalSet``s. ``datakit.train.stage.train_model`` wires token caches into it.

Determinism and resume: the batch for step k is a pure function of (data seed, k), parameters are
initialized from ``cfg.seed``, and the learning rate is a function of k, so the state after k steps
is fully described by (params, optimizer moments, skip counter, k). That is exactly what a checkpoint
holds; resuming from step k replays steps k+1.. identically to an uninterrupted run.

Data parallelism: one 1-D mesh axis ``data`` over the local devices. Parameters and optimizer state
are replicated, batches are split along the batch axis; XLA inserts the gradient all-reduce.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

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
from datakit.train.hardware import compute_dtype_for, peak_flops_per_device, select_devices
from datakit.train.model import flops_per_token, init_params, loss_fn, param_count, param_shapes
from datakit.train.optim import guarded_update, make_optimizer, make_schedule
from datakit.train.plot import write_loss_plot

LN2 = math.log(2.0)


class BatchSource(Protocol):
    def batch(self, step: int) -> np.ndarray: ...


@dataclass
class EvalSet:
    """One validation split: a fresh batch iterator per evaluation plus the byte count for bpb.

    ``batches()`` yields (rows, T+1) token arrays, or (tokens, mask) pairs where mask (rows, T) marks
    the targets that count (0 for padding). The set decides its own extent (the loop evaluates all
    it yields). ``bytes_for(targets_evaluated)`` returns the UTF-8 byte count of the text those
    targets encode, or None when it cannot vouch for it (bpb is then omitted, never guessed).
    """

    name: str
    batches: Callable[[], Iterable[np.ndarray]]
    bytes_for: Callable[[int], float | None]


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


def bits_per_byte(nll_sum_nats: float, num_bytes: float | None) -> float | None:
    """Total NLL in nats over some text / (ln 2 x its UTF-8 bytes): tokenizer-independent."""
    if not num_bytes:
        return None
    return float(nll_sum_nats) / (LN2 * float(num_bytes))


# ------------------------------------------------------------------------------------------------
# small I/O helpers


def _atomic_write_text(path: str, text: str) -> None:
    atomic_write_bytes(os.path.abspath(path), text.encode("utf-8"))


def result_json(result: "TrainResult") -> str:
    """result.json's text: canonical JSON of the result, whose paths are relative to the out_dir."""
    return json.dumps(result.to_dict(), sort_keys=True, indent=2) + "\n"


def read_metrics(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a torn last line from a crash; the resume trims past it anyway
    return out


def _trim_metrics(path: str, upto_step: int, drop_eval_at_end: bool) -> None:
    """On resume, drop records past the checkpoint so the file reads as one uninterrupted run.

    ``drop_eval_at_end``: the run is already complete and will re-evaluate at ``upto_step``, so an
    earlier eval record for that step would be a duplicate. The live log is appended line by line
    (so a running job can be watched); this rewrite is the temp + rename kind.
    """
    if not os.path.exists(path):
        return

    def keep(r: dict) -> bool:
        step = int(r.get("step", 0))
        if drop_eval_at_end and r.get("kind") == "eval" and step == upto_step:
            return False
        return step <= upto_step

    kept = [r for r in read_metrics(path) if keep(r)]
    _atomic_write_text(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))


# ------------------------------------------------------------------------------------------------
# jit-compiled functions


def _make_train_step(cfg: TrainConfig, tx, compute_dtype):
    schedule = make_schedule(cfg)
    mcfg = cfg.model

    def train_step(state, batch, step_index, poison):
        def objective(params):
            loss, aux = loss_fn(params, batch, mcfg, z_loss=cfg.z_loss, compute_dtype=compute_dtype)
            # `poison` is 1.0 except at a test-injected fault step, where it is NaN: the whole loss
            # and all gradients become NaN exactly like a real overflow would make them.
            return loss * poison, aux

        (loss, aux), grads = jax.value_and_grad(objective, has_aux=True)(state["params"])
        lr = schedule(step_index)
        params, opt_state, ok, grad_norm = guarded_update(
            tx, state["params"], state["opt_state"], grads, loss, lr
        )
        new_state = {
            "params": params,
            "opt_state": opt_state,
            "skipped": state["skipped"] + jnp.where(ok, 0, 1).astype(jnp.int32),
        }
        metrics = {
            "loss": loss,
            "ce": aux["ce"] * poison,
            "grad_norm": grad_norm,
            "lr": lr,
            "ok": ok,
        }
        if "z_loss" in aux:
            metrics["z_loss"] = aux["z_loss"]
        return new_state, metrics

    return train_step


def _make_eval_step(cfg: TrainConfig, compute_dtype):
    def eval_step(params, batch, mask):
        _, aux = loss_fn(params, batch, cfg.model, compute_dtype=compute_dtype, mask=mask)
        return aux["nll_sum"], aux["count"]

    return eval_step


@dataclass
class _Programs:
    """The jitted functions of one (config, vocab, devices) combination.

    Kept in a small process-wide cache: a resume or a second run with the same shapes in the same
    process (tests, a sweep driver, an eval-only rerun) reuses the compiled executables instead of
    paying XLA compilation again.
    """

    mesh: Mesh
    shapes: Any
    repl: NamedSharding
    data: NamedSharding
    tx: Any
    init: Callable
    opt_init: Callable
    train_step: Callable
    eval_step: Callable
    compiled_train_step: Any = None
    compile_s: float | None = None


@functools.lru_cache(maxsize=4)
def _programs(cfg: TrainConfig, vocab_size: int, devices: tuple, compute_dtype_name: str) -> _Programs:
    compute_dtype = jnp.dtype(compute_dtype_name)
    mesh = Mesh(np.array(devices), ("data",))
    repl = NamedSharding(mesh, P())
    data_sh = NamedSharding(mesh, P("data"))
    model_cfg = cfg.model
    shapes = param_shapes(model_cfg, vocab_size)

    def init(seed: int):
        return jax.device_put(init_params(model_cfg, vocab_size, seed), repl)

    tx = make_optimizer(cfg, shapes)  # the decay mask needs only the tree structure
    return _Programs(
        mesh=mesh,
        shapes=shapes,
        repl=repl,
        data=data_sh,
        tx=tx,
        init=init,
        opt_init=jax.jit(tx.init, out_shardings=repl),
        train_step=jax.jit(
            _make_train_step(cfg, tx, compute_dtype),
            in_shardings=(repl, data_sh, repl, repl),
            out_shardings=(repl, repl),
            donate_argnums=(0,),
        ),
        eval_step=jax.jit(
            _make_eval_step(cfg, compute_dtype),
            in_shardings=(repl, data_sh, data_sh),
            out_shardings=(repl, repl),
        ),
    )


# ------------------------------------------------------------------------------------------------


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
    devices = select_devices(cfg)
    ndev = len(devices)
    compute_dtype = compute_dtype_for(cfg, devices[0])
    fingerprint = cfg.trajectory_fingerprint()
    layout = TrainDir(out_dir)
    ckpt_dir = layout.checkpoints
    latest = latest_checkpoint(ckpt_dir)
    if latest is not None:  # refuse a mismatched resume before paying for any compilation
        meta = read_meta(latest)
        if meta.get("fingerprint") != fingerprint or meta.get("vocab_size") != vocab_size:
            raise CheckpointError(
                f"{latest}: written by a run with a different model/optimizer/data config "
                f"(fingerprint {meta.get('fingerprint')}, vocab {meta.get('vocab_size')}; this run "
                f"{fingerprint}, vocab {vocab_size}). Use a fresh out_dir or the original config."
            )
        if data_fingerprint and meta.get("data_fingerprint") != data_fingerprint:
            raise CheckpointError(
                f"{latest}: written for different training data (data fingerprint "
                f"{meta.get('data_fingerprint')} vs {data_fingerprint}); use a fresh out_dir"
            )
    # cadence fields do not change the compiled programs; normalize them so the cache hits
    program_cfg = dataclasses.replace(
        cfg, **{f: getattr(TrainConfig, f) for f in TrainConfig.CADENCE_FIELDS
                if f in TrainConfig.__dataclass_fields__}
    )
    progs = _programs(program_cfg, vocab_size, tuple(devices), jnp.dtype(compute_dtype).name)
    repl, data_sh = progs.repl, progs.data
    peak = peak_flops_per_device(cfg, devices[0], compute_dtype)
    tokens_per_step = cfg.batch_size * cfg.seq_len
    fpt = flops_per_token(cfg.model, vocab_size, cfg.seq_len)
    inject = frozenset(int(s) for s in inject_nan_steps)

    os.makedirs(out_dir, exist_ok=True)
    metrics_path, plot_path, result_path = layout.metrics, layout.plot, layout.result

    # ---- state: from the latest checkpoint if any, else a fresh init -----------------------------
    start_step = 0
    resumed_from = None
    if latest is not None:
        template = {
            "params": progs.shapes,
            "opt_state": jax.eval_shape(progs.tx.init, progs.shapes),
            "skipped": jax.ShapeDtypeStruct((), jnp.int32),
        }
        host_state, meta = load_checkpoint(latest, template)
        state = jax.device_put(host_state, repl)
        start_step = resumed_from = int(meta["step"])
        _trim_metrics(metrics_path, start_step, drop_eval_at_end=start_step >= cfg.steps and bool(eval_sets))
    else:
        params = progs.init(cfg.seed)
        state = {
            "params": params,
            "opt_state": progs.opt_init(params),
            "skipped": jax.device_put(jnp.zeros((), jnp.int32), repl),
        }
    n_params = param_count(state["params"])

    eval_step = progs.eval_step

    end_step = cfg.steps if stop_at is None else min(cfg.steps, int(stop_at))

    def log(record: dict[str, Any]) -> None:
        with open(metrics_path, "a") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
        if on_log is not None:
            on_log(record)

    log({
        "kind": "start", "step": start_step, "resumed_from": resumed_from, "devices": ndev,
        "platform": devices[0].platform, "device_kind": devices[0].device_kind,
        "compute_dtype": jnp.dtype(compute_dtype).name, "num_params": n_params,
        "fingerprint": fingerprint, "config": cfg.to_dict(), **(run_info or {}),
    })

    checkpoints: list[str] = []

    def checkpoint(step: int) -> None:
        meta = {
            "fingerprint": fingerprint,
            "data_fingerprint": data_fingerprint,
            "vocab_size": vocab_size,
            "data_position": step,  # TrainBatches.batch is a pure function of (seed, step)
            "tokens_seen": step * tokens_per_step,
            "skipped": int(jax.device_get(state["skipped"])),
            "time": time.time(),
        }
        path = save_checkpoint(ckpt_dir, step, state, meta)
        checkpoints.append(path)
        prune_checkpoints(ckpt_dir, cfg.keep_checkpoints)
        if on_checkpoint is not None:
            on_checkpoint([p for _, p in list_checkpoints(ckpt_dir)])

    eval_bs = cfg.eval_batch_size or cfg.batch_size

    def eval_chunk(b: np.ndarray, mask: np.ndarray):
        rows = b.shape[0]
        if rows < eval_bs:  # pad a partial batch; padded rows weigh 0
            b = np.concatenate([b, np.zeros((eval_bs - rows, b.shape[1]), b.dtype)])
            mask = np.concatenate([mask, np.zeros((eval_bs - rows, mask.shape[1]), mask.dtype)])
        # returns device scalars: no host sync per batch, results fetched once per eval set
        return eval_step(
            state["params"],
            jax.device_put(b.astype(np.int32), data_sh),
            jax.device_put(mask.astype(np.float32), data_sh),
        )

    def evaluate(step: int) -> dict[str, Any]:
        per: dict[str, dict[str, float | None]] = {}
        tot_nll, tot_count, tot_bytes, bytes_known = 0.0, 0, 0.0, True
        for es in eval_sets:
            parts = []
            for i, item in enumerate(es.batches()):
                b, mask = item if isinstance(item, tuple) else (item, None)
                b = np.asarray(b)
                if b.ndim != 2 or b.shape[1] != cfg.seq_len + 1:
                    raise ValueError(
                        f"eval set {es.name!r}: batch {i} has shape {b.shape}, expected "
                        f"(rows, {cfg.seq_len + 1})"
                    )
                if mask is None:
                    mask = np.ones((b.shape[0], cfg.seq_len), np.float32)
                elif np.shape(mask) != (b.shape[0], cfg.seq_len):
                    raise ValueError(
                        f"eval set {es.name!r}: batch {i} mask has shape {np.shape(mask)}, expected "
                        f"{(b.shape[0], cfg.seq_len)}"
                    )
                for lo in range(0, b.shape[0], eval_bs):  # device-sized chunks
                    parts.append(eval_chunk(b[lo : lo + eval_bs], np.asarray(mask[lo : lo + eval_bs])))
            fetched = jax.device_get(parts)
            nll = float(sum(np.float64(s) for s, _ in fetched))
            count = int(sum(int(round(float(c))) for _, c in fetched))
            nbytes = es.bytes_for(count) if count else None
            per[es.name] = {
                "loss": _finite_or_none(nll / count) if count else None,
                "bpb": _finite_or_none(bits_per_byte(nll, nbytes)),
                "tokens": count,
                "bytes": nbytes,
            }
            tot_nll += nll
            tot_count += count
            if nbytes is None:
                bytes_known = False
            else:
                tot_bytes += nbytes
        summary = {
            "kind": "eval",
            "step": step,
            "loss": _finite_or_none(tot_nll / tot_count) if tot_count else None,
            "bpb": _finite_or_none(bits_per_byte(tot_nll, tot_bytes)) if bytes_known and tot_count else None,
            "tokens": tot_count,
            "sources": per,
        }
        log(summary)
        return summary

    # ---- the loop -------------------------------------------------------------------------
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="datakit-batches")
    load_time = [0.0]

    def load(step_index: int):
        t0 = time.perf_counter()
        b = np.asarray(batches.batch(step_index))
        if b.shape != (cfg.batch_size, cfg.seq_len + 1):
            raise ValueError(
                f"batch source returned shape {b.shape} for step {step_index}, expected "
                f"({cfg.batch_size}, {cfg.seq_len + 1})"
            )
        out = jax.device_put(b.astype(np.int32, copy=False), data_sh)
        load_time[0] += time.perf_counter() - t0
        return out

    queue: deque = deque()
    next_to_submit = start_step

    def refill() -> None:
        nonlocal next_to_submit
        while len(queue) < cfg.prefetch and next_to_submit < end_step:
            queue.append(pool.submit(load, next_to_submit))
            next_to_submit += 1

    compile_s = None
    compiled = None
    last_eval: dict[str, Any] | None = None
    pending: list[tuple[int, dict]] = []
    final_loss = None
    wait_time = 0.0
    excluded = 0.0  # eval + checkpoint seconds inside the timed span
    tokens_this_run = 0
    t_loop = None
    t_window = None
    window_excluded = 0.0
    window_tokens = 0

    def flush() -> None:
        nonlocal t_window, window_excluded, window_tokens, final_loss
        fetched = jax.device_get([m for _, m in pending])
        now = time.perf_counter()
        dt = now - t_window - window_excluded
        tps = window_tokens / dt if dt > 0 else None
        losses = [float(m["ce"]) for m in fetched if bool(m["ok"])]
        last_step, last = pending[-1][0], fetched[-1]
        for (s, _), m in zip(pending, fetched):
            if s == last_step:
                continue
            if cfg.log_every == 1 or not bool(m["ok"]):
                # per-step records only when asked (log_every=1) or for a skipped step
                log({"kind": "train", "step": s, "loss": _nan_to_none(m["loss"]),
                     "ce": _nan_to_none(m["ce"]), "ok": bool(m["ok"]), "lr": float(m["lr"]),
                     "grad_norm": _nan_to_none(m["grad_norm"])})
        record = {
            "kind": "train",
            "step": last_step,
            "loss": _nan_to_none(last["loss"]),
            "ce": _nan_to_none(last["ce"]),
            "loss_window_mean": float(np.mean(losses)) if losses else None,
            "ok": bool(last["ok"]),
            "lr": float(last["lr"]),
            "grad_norm": _nan_to_none(last["grad_norm"]),
            "skipped_total": int(jax.device_get(state["skipped"])),
            "tokens": last_step * tokens_per_step,
            "tokens_per_sec": tps,
            "mfu": (fpt * tps / (peak * ndev)) if (tps and peak) else None,
        }
        if "z_loss" in last:
            record["z_loss"] = _nan_to_none(last["z_loss"])
        log(record)
        if losses:
            final_loss = float(np.mean(losses))
        pending.clear()
        t_window, window_excluded, window_tokens = time.perf_counter(), 0.0, 0

    try:
        refill()
        for step_index in range(start_step, end_step):
            step = step_index + 1
            tw = time.perf_counter()
            batch = queue.popleft().result()
            refill()
            poison = np.float32(np.nan if step in inject else 1.0)
            args = (state, batch, np.int32(step_index), poison)
            if compiled is None:
                if progs.compiled_train_step is None:
                    tc = time.perf_counter()
                    progs.compiled_train_step = progs.train_step.lower(*args).compile()
                    progs.compile_s = time.perf_counter() - tc
                    compile_s = progs.compile_s
                else:
                    compile_s = 0.0  # reused from an earlier run in this process
                compiled = progs.compiled_train_step
                tw = time.perf_counter()  # waiting for batch 0 overlapped compile; do not count it
                t_loop = t_window = tw
            wait_time += time.perf_counter() - tw
            state, metrics = compiled(*args)
            pending.append((step, metrics))
            tokens_this_run += tokens_per_step
            window_tokens += tokens_per_step
            if step % cfg.log_every == 0 or step == end_step:
                flush()
            te = time.perf_counter()
            if cfg.eval_every and step % cfg.eval_every == 0 and step != cfg.steps and eval_sets:
                last_eval = evaluate(step)
            if cfg.checkpoint_every and step % cfg.checkpoint_every == 0 and step != end_step:
                checkpoint(step)
            spent = time.perf_counter() - te
            excluded += spent
            window_excluded += spent
        jax.block_until_ready(state)
        t_end = time.perf_counter()
    finally:
        for fut in queue:
            fut.cancel()
        pool.shutdown(wait=True)

    train_wall = (t_end - t_loop - excluded) if t_loop is not None else None
    tokens_per_sec = tokens_this_run / train_wall if train_wall and train_wall > 0 else None
    mfu = (fpt * tokens_per_sec / (peak * ndev)) if (tokens_per_sec and peak) else None
    completed = end_step >= cfg.steps

    final_step = max(end_step, start_step)
    if final_step != start_step or not list_checkpoints(ckpt_dir):
        checkpoint(final_step)
    if completed and eval_sets:
        last_eval = evaluate(final_step)

    history = read_metrics(metrics_path)
    # the window mean is the smoother curve; per-step records (log_every=1, skipped steps) lack it
    train_pts = [
        (r["step"], r.get("loss_window_mean", r.get("ce")))
        for r in history
        if r.get("kind") == "train" and r.get("loss_window_mean", r.get("ce")) is not None
    ]
    eval_pts = [(r["step"], r["loss"]) for r in history if r.get("kind") == "eval" and r.get("loss") is not None]
    write_loss_plot(plot_path, train_pts, eval_pts)

    if final_loss is None and train_pts:
        final_loss = float(train_pts[-1][1])
    result = TrainResult(
        final_loss=final_loss,
        eval_loss=(last_eval or {}).get("loss"),
        bpb=(last_eval or {}).get("bpb"),
        tokens_per_sec=tokens_per_sec,
        mfu=mfu,
        steps=final_step,
        skipped_steps=int(jax.device_get(state["skipped"])),
        completed=completed,
        resumed_from=resumed_from,
        num_params=n_params,
        metrics_path=TrainDir.METRICS,
        plot_path=TrainDir.PLOT,
        result_path=TrainDir.RESULT,
        checkpoints=[TrainDir.rel_checkpoint(p) for _, p in list_checkpoints(ckpt_dir)],
        eval_by_source=(last_eval or {}).get("sources", {}),
        compile_s=compile_s,
        data_wait_fraction=(wait_time / train_wall) if train_wall else None,
        data_load_fraction=(load_time[0] / train_wall) if train_wall else None,
    )
    _atomic_write_text(result_path, result_json(result))
    return result


def _finite_or_none(x: float | None) -> float | None:
    """JSON has no NaN/inf: a diverged eval is recorded as null, not as invalid JSON."""
    return x if x is not None and math.isfinite(x) else None


def _nan_to_none(x: Any) -> float | None:
    v = float(np.asarray(x))
    return v if math.isfinite(v) else None
