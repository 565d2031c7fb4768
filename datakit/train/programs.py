"""The jit-compiled functions of a training run: the train step (loss, gradients, guarded AdamW update)
and the eval step (masked NLL sum and target count), with their shardings.

Data parallelism: one 1-D mesh axis ``data`` over the local devices. Parameters and optimizer state
are replicated, batches are split along the batch axis; XLA inserts the gradient all-reduce.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from datakit.train.config import TrainConfig
from datakit.train.model import init_params, loss_fn, param_shapes
from datakit.train.optim import guarded_update, make_optimizer, make_schedule


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
class Programs:
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


def programs_for(cfg: TrainConfig, vocab_size: int, devices: list, compute_dtype: Any) -> Programs:
    """The (cached) programs for this run. Cadence fields and the seeds do not change the compiled
    programs (``init`` takes the seed as an argument; data order is host-side), so they are normalized
    to their defaults before the cache lookup: a resume with another checkpoint interval, or the same
    run under another seed (the mixture search's seed repeats), reuses the executables."""
    program_cfg = dataclasses.replace(
        cfg, seed=0, data_seed=0, **{f: getattr(TrainConfig, f) for f in TrainConfig.CADENCE_FIELDS
                                    if f in TrainConfig.__dataclass_fields__}
    )
    return _programs(program_cfg, vocab_size, tuple(devices), jnp.dtype(compute_dtype).name)


@functools.lru_cache(maxsize=4)
def _programs(cfg: TrainConfig, vocab_size: int, devices: tuple, compute_dtype_name: str) -> Programs:
    compute_dtype = jnp.dtype(compute_dtype_name)
    mesh = Mesh(np.array(devices), ("data",))
    repl = NamedSharding(mesh, P())
    data_sh = NamedSharding(mesh, P("data"))
    model_cfg = cfg.model
    shapes = param_shapes(model_cfg, vocab_size)

    def init(seed: int):
        return jax.device_put(init_params(model_cfg, vocab_size, seed), repl)

    tx = make_optimizer(cfg, shapes)  # the decay mask needs only the tree structure
    return Programs(
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
