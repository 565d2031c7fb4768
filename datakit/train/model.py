"""Decoder-only transformer as plain JAX pytrees (no flax): init, forward, loss, FLOP accounting.

Parameters are a nested dict of float32 arrays (initialized on the host with numpy). Per-layer weights are *stacked* along a leading
``n_layers`` axis and the blocks run under ``lax.scan``: compile time stays flat in depth (a 150M
model compiles as fast as a 2-layer one), which matters on CPU test machines.

Architecture: token embedding -> N x [RMSNorm -> GQA attention with RoPE (optional QK-norm) ->
residual -> RMSNorm -> SwiGLU MLP -> residual] -> RMSNorm -> output head (tied to the embedding or
separate). Norms and softmax run in float32 whatever the compute dtype; matmuls run in the compute
dtype (bfloat16 on accelerators), logits are returned in float32.
"""

from __future__ import annotations

import math
import zlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from datakit.train.config import ModelConfig

Params = dict[str, Any]

# Names of parameters that are gains of normalization layers (no weight decay by default).
NORM_PARAM_NAMES = frozenset({"attn_norm", "mlp_norm", "q_norm", "k_norm", "final_norm"})
EMBEDDING_PARAM_NAMES = frozenset({"embed"})


def param_shapes(cfg: ModelConfig, vocab_size: int) -> dict[str, Any]:
    """ShapeDtypeStructs of every parameter (nested like the params), without allocating anything."""
    d, L, hd = cfg.d_model, cfg.n_layers, cfg.head_dim
    q_dim, kv_dim = cfg.n_heads * hd, cfg.n_kv_heads * hd
    layers = {
        "attn_norm": (L, d),
        "wq": (L, d, q_dim),
        "wk": (L, d, kv_dim),
        "wv": (L, d, kv_dim),
        "wo": (L, q_dim, d),
        "mlp_norm": (L, d),
        "w_gate": (L, d, cfg.d_ff),
        "w_up": (L, d, cfg.d_ff),
        "w_down": (L, cfg.d_ff, d),
    }
    if cfg.qk_norm:
        layers["q_norm"] = (L, hd)
        layers["k_norm"] = (L, hd)
    shapes: dict[str, Any] = {"embed": (vocab_size, d), "layers": layers, "final_norm": (d,)}
    if not cfg.tie_embeddings:
        shapes["lm_head"] = (d, vocab_size)

    def struct(tree: dict[str, Any]) -> dict[str, Any]:
        return {
            k: struct(v) if isinstance(v, dict) else jax.ShapeDtypeStruct(v, jnp.float32)
            for k, v in tree.items()
        }

    return struct(shapes)


def init_params(cfg: ModelConfig, vocab_size: int, seed: int) -> Params:
    """Random init as host numpy float32 arrays (callers place them on devices).

    N(0, init_std) matrices; residual-output projections (wo, w_down) scaled by 1/sqrt(2L) (GPT-2)
    so the residual stream's variance does not grow with depth; norm gains 1. Drawn with numpy
    from a per-tensor seed (seed, tensor name): identical on every backend and device count, no
    XLA compilation (JAX's threefry init costs seconds of compile on CPU), and adding a tensor
    does not reshuffle the others.
    """
    cfg.validate()
    out_std = cfg.init_std / math.sqrt(2 * cfg.n_layers)

    def make(name: str, spec: jax.ShapeDtypeStruct) -> np.ndarray:
        shape = spec.shape
        if name in NORM_PARAM_NAMES:
            return np.ones(shape, np.float32)
        std = out_std if name in ("wo", "w_down") else cfg.init_std
        rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, zlib.crc32(name.encode())])
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(std)).astype(np.float32)

    def build(tree: dict[str, Any]) -> dict[str, Any]:
        return {k: build(v) if isinstance(v, dict) else make(k, v) for k, v in tree.items()}

    return build(param_shapes(cfg, vocab_size))


def rms_norm(x: jax.Array, gain: jax.Array, eps: float) -> jax.Array:
    """RMSNorm computed in float32 (bf16 mean-of-squares loses too much), cast back to x's dtype."""
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (y * gain.astype(jnp.float32)).astype(x.dtype)


def rope_tables(seq_len: int, head_dim: int, theta: float) -> tuple[jax.Array, jax.Array]:
    """cos/sin tables (seq_len, head_dim/2) for rotary embeddings, in float32."""
    inv_freq = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
    angles = jnp.arange(seq_len, dtype=jnp.float32)[:, None] * inv_freq[None, :]
    return jnp.cos(angles), jnp.sin(angles)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotate (first half, second half) pairs of x (B, T, heads, hd) by position-dependent angles."""
    half = x.shape[-1] // 2
    x32 = x.astype(jnp.float32)
    x1, x2 = x32[..., :half], x32[..., half:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    out = jnp.concatenate([x1 * c - x2 * s, x1 * s + x2 * c], axis=-1)
    return out.astype(x.dtype)


def _attention(h: jax.Array, p: Params, cfg: ModelConfig, cos: jax.Array, sin: jax.Array) -> jax.Array:
    B, T, _ = h.shape
    H, KV, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    dt = h.dtype
    q = (h @ p["wq"].astype(dt)).reshape(B, T, H, hd)
    k = (h @ p["wk"].astype(dt)).reshape(B, T, KV, hd)
    v = (h @ p["wv"].astype(dt)).reshape(B, T, KV, hd)
    if cfg.qk_norm:
        # Normalizing q and k per head bounds the attention logits; this is what stopped the
        # loss spikes in Marin 32B.
        q = rms_norm(q, p["q_norm"], cfg.norm_eps)
        k = rms_norm(k, p["k_norm"], cfg.norm_eps)
    q = apply_rope(q, cos, sin)
    k = apply_rope(k, cos, sin)
    # Grouped-query causal attention. jax.nn.dot_product_attention takes H query heads over KV
    # kv heads directly (each kv head serves a group of H/KV query heads, never copied in memory by
    # us) and lowers to cuDNN flash attention on GPUs, plain XLA elsewhere; softmax runs in fp32.
    out = jax.nn.dot_product_attention(q, k, v, scale=1.0 / math.sqrt(hd), is_causal=True)
    return out.reshape(B, T, H * hd) @ p["wo"].astype(dt)


def _mlp(h: jax.Array, p: Params) -> jax.Array:
    dt = h.dtype
    gate = h @ p["w_gate"].astype(dt)
    up = h @ p["w_up"].astype(dt)
    return (jax.nn.silu(gate) * up) @ p["w_down"].astype(dt)


def forward(
    params: Params, tokens: jax.Array, cfg: ModelConfig, compute_dtype: Any = jnp.float32
) -> jax.Array:
    """Logits (B, T, vocab) in float32 for int tokens (B, T)."""
    T = tokens.shape[1]
    cos, sin = rope_tables(T, cfg.head_dim, cfg.rope_theta)
    x = params["embed"].astype(compute_dtype)[tokens]

    def block(x, p):
        x = x + _attention(rms_norm(x, p["attn_norm"], cfg.norm_eps), p, cfg, cos, sin)
        x = x + _mlp(rms_norm(x, p["mlp_norm"], cfg.norm_eps), p)
        return x, None

    if cfg.remat:
        # Recompute each block's activations in the backward pass, keeping only matmul outputs
        # that need no batch dims: trades ~1/3 more FLOPs for activation memory flat in depth.
        block = jax.checkpoint(block, policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable)

    x, _ = jax.lax.scan(block, x, params["layers"])
    x = rms_norm(x, params["final_norm"], cfg.norm_eps)
    if cfg.tie_embeddings:
        logits = x @ params["embed"].astype(compute_dtype).T
    else:
        logits = x @ params["lm_head"].astype(compute_dtype)
    return logits.astype(jnp.float32)


def loss_fn(
    params: Params,
    batch: jax.Array,
    cfg: ModelConfig,
    *,
    z_loss: float = 0.0,
    compute_dtype: Any = jnp.float32,
    mask: jax.Array | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Next-token cross-entropy (+ z-loss) over a (B, T+1) token batch.

    z-loss = z_loss * mean(logsumexp(logits)^2): it pulls the softmax normalizer toward 1 so the
    output head's norm cannot drift upward (PaLM; used in deep cooldowns). ``mask`` (B, T) weights
    targets (0 for eval padding rows). Returns (loss, aux) where aux carries the summed NLL and the
    target count so callers can aggregate exactly across batches.
    """
    inputs, targets = batch[:, :-1], batch[:, 1:]
    logits = forward(params, inputs, cfg, compute_dtype)
    lse = jax.nn.logsumexp(logits, axis=-1)
    target_logit = jnp.take_along_axis(logits, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]
    nll = lse - target_logit
    if mask is None:
        mask = jnp.ones(nll.shape, jnp.float32)
    count = jnp.sum(mask)
    nll_sum = jnp.sum(nll * mask)
    ce = nll_sum / jnp.maximum(count, 1.0)
    total = ce
    aux = {"ce": ce, "nll_sum": nll_sum, "count": count}
    if z_loss:
        z = z_loss * jnp.sum(jnp.square(lse) * mask) / jnp.maximum(count, 1.0)
        total = total + z
        aux["z_loss"] = z
    return total, aux


def param_count(params: Params) -> int:
    return int(sum(x.size for x in jax.tree_util.tree_leaves(params)))


def param_count_for(cfg: ModelConfig, vocab_size: int) -> int:
    """Parameter count without allocating (shapes only)."""

    def count(tree) -> int:
        return sum(count(v) if isinstance(v, dict) else math.prod(v.shape) for v in tree.values())

    return int(count(param_shapes(cfg, vocab_size)))


def flops_per_token(cfg: ModelConfig, vocab_size: int, seq_len: int) -> float:
    """Training FLOPs per token (forward + backward), PaLM appendix B accounting.

    6 x (matmul parameters, including the output head but not the embedding lookup) plus
    12 x layers x d_attn x seq_len for attention scores and values. Norm gains are ignored.
    """
    d, hd = cfg.d_model, cfg.head_dim
    q_dim, kv_dim = cfg.n_heads * hd, cfg.n_kv_heads * hd
    per_layer = d * q_dim + 2 * d * kv_dim + q_dim * d + 3 * d * cfg.d_ff
    matmul_params = cfg.n_layers * per_layer + d * vocab_size
    return 6.0 * matmul_params + 12.0 * cfg.n_layers * q_dim * seq_len
