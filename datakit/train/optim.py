"""Optimizer: optax AdamW with decoupled, masked weight decay; clipping; WSD/cosine schedules; skip-step.

The learning rate is applied *outside* the optax chain, as a pure function of the global step. That
way the schedule follows the data position (the step number) even across skipped steps and resumes,
and the optax state holds only moment estimates.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from datakit.train.config import TrainConfig
from datakit.train.model import EMBEDDING_PARAM_NAMES, NORM_PARAM_NAMES, Params


def make_schedule(cfg: TrainConfig) -> Callable[[jax.Array], jax.Array]:
    """lr(step) for 0-based step index; jit-friendly (step may be a traced int array).

    - wsd (warmup-stable-decay): linear warmup, flat at the peak, then a linear decay to
      ``min_lr_ratio * lr`` over the last ``decay_fraction`` of the steps. The stable phase makes a
      run extendable and any prefix a useful checkpoint; the short decay recovers the cosine loss.
    - cosine: linear warmup then half-cosine to ``min_lr_ratio * lr`` at the last step.
    - constant: linear warmup then flat.
    """
    peak = float(cfg.learning_rate)
    floor = peak * float(cfg.min_lr_ratio)
    total = int(cfg.steps)
    warm = int(cfg.warmup_steps)
    decay_steps = int(round(cfg.decay_fraction * total))
    decay_start = max(warm, total - decay_steps)
    kind = cfg.schedule

    def lr(step: jax.Array) -> jax.Array:
        s = jnp.asarray(step, jnp.float32)
        warmup = peak * (s + 1.0) / max(warm, 1)
        if kind == "constant":
            main = jnp.full_like(s, peak)
        elif kind == "cosine":
            span = max(total - warm - 1, 1)
            frac = jnp.clip((s - warm) / span, 0.0, 1.0)
            main = floor + (peak - floor) * 0.5 * (1.0 + jnp.cos(math.pi * frac))
        else:  # wsd
            # reaches the floor exactly at the last step (total - 1); 0 inside the stable phase
            span = max(total - decay_start, 1)
            frac = jnp.clip((s - decay_start + 1.0) / span, 0.0, 1.0)
            frac = jnp.where(s >= decay_start, frac, 0.0)
            main = peak + (floor - peak) * frac
        return jnp.where(s < warm, warmup, main)

    return lr


def decay_mask(params: Params, decay_norms_and_embeddings: bool = False) -> Any:
    """True where weight decay applies: weight matrices, not norm gains or embeddings (by default).

    Decaying norm gains pulls them toward zero (i.e. toward a dead layer) and decaying embeddings
    penalizes rare tokens that get few gradient updates, so both are off unless asked for.
    """

    def leaf_mask(path, _leaf):
        name = _last_key(path)
        if decay_norms_and_embeddings:
            return True
        return name not in NORM_PARAM_NAMES and name not in EMBEDDING_PARAM_NAMES

    return jax.tree_util.tree_map_with_path(leaf_mask, params)


def _last_key(path) -> str:
    last = path[-1]
    return str(getattr(last, "key", getattr(last, "name", last)))


def make_optimizer(cfg: TrainConfig, params: Params) -> optax.GradientTransformation:
    """Clip -> Adam moments -> decoupled weight decay (masked). The lr multiply happens in apply."""
    parts = []
    if cfg.grad_clip is not None:
        parts.append(optax.clip_by_global_norm(cfg.grad_clip))
    parts.append(optax.scale_by_adam(b1=cfg.beta1, b2=cfg.beta2, eps=cfg.adam_eps))
    if cfg.weight_decay:
        parts.append(
            optax.add_decayed_weights(
                cfg.weight_decay, mask=decay_mask(params, cfg.decay_norms_and_embeddings)
            )
        )
    return optax.chain(*parts)


def guarded_update(
    tx: optax.GradientTransformation,
    params: Params,
    opt_state: Any,
    grads: Params,
    loss: jax.Array,
    lr: jax.Array,
) -> tuple[Params, Any, jax.Array, jax.Array]:
    """One AdamW step that is a no-op when the loss or any gradient is non-finite.

    Returns (params, opt_state, ok, grad_norm). A single bad batch (or a transient overflow) then
    costs one step instead of poisoning the moments with NaN forever; the caller counts skips.
    ``jnp.where`` (not ``lax.cond``) keeps both branches in one fused program with no host sync.
    """
    grad_norm = optax.tree.norm(grads)
    ok = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    updates, new_state = tx.update(grads, opt_state, params)
    new_params = jax.tree_util.tree_map(lambda p, u: p - lr * u.astype(p.dtype), params, updates)
    pick = lambda new, old: jnp.where(ok, new, old)  # noqa: E731
    new_params = jax.tree_util.tree_map(pick, new_params, params)
    new_state = jax.tree_util.tree_map(pick, new_state, opt_state)
    return new_params, new_state, ok, grad_norm
