"""Pure parts of the training stage: config checks, model math, optimizer, checkpoints, PNG plot."""

from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from datakit.train.checkpoint import (
    CheckpointError,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    prune_checkpoints,
    save_checkpoint,
)
from datakit.train.config import ConfigError, ModelConfig, TrainConfig
from datakit.train.model import (
    apply_rope,
    flops_per_token,
    forward,
    init_params,
    loss_fn,
    param_count_for,
    rope_tables,
)
from datakit.train.optim import decay_mask, guarded_update, make_optimizer, make_schedule
from datakit.train.plot import render_loss_plot, write_loss_plot

# jit the entry points: eager op-by-op dispatch is far slower than one compile on a busy CPU
_forward = jax.jit(forward, static_argnums=(2,))
_update = jax.jit(guarded_update, static_argnums=(0,))
_loss = jax.jit(loss_fn, static_argnums=(2,), static_argnames=("z_loss",))

TINY = ModelConfig(d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64)
V = 97


def _tokens(shape, seed=0, vocab=V):
    return jnp.asarray(np.random.default_rng(seed).integers(0, vocab, shape), jnp.int32)


# ---------------------------------------------------------------------------------------------
# config


@pytest.mark.parametrize(
    "model, message",
    [
        (dict(d_model=30, n_heads=4), "n_heads=4 does not divide model.d_model=30"),
        (dict(n_heads=4, n_kv_heads=3), "n_kv_heads=3 does not divide model.n_heads=4"),
        (dict(d_model=12, n_heads=4, n_kv_heads=2), "must be even for rotary"),
        (dict(n_layers=0), "model.n_layers must be a positive integer"),
    ],
)
def test_model_config_that_cannot_fit_names_the_field(model, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig.from_dict({"model": model}).validate()


def test_batch_must_divide_over_devices():
    cfg = TrainConfig(batch_size=6)
    cfg.validate_devices(2)
    cfg.validate_devices(3)
    with pytest.raises(ConfigError, match="batch_size=6 is not divisible by the 4 devices"):
        cfg.validate_devices(4)
    with pytest.raises(ConfigError, match="eval_batch_size=5"):
        dataclasses.replace(cfg, eval_batch_size=5).validate_devices(2)


def test_presets_and_unknown_fields():
    cfg = TrainConfig.from_dict({"preset": "small", "steps": 7, "model": {"qk_norm": True}})
    assert cfg.steps == 7 and cfg.model.d_model == 256 and cfg.model.qk_norm
    with pytest.raises(ConfigError, match="unknown train preset 'huge'"):
        TrainConfig.from_preset("huge")
    with pytest.raises(ConfigError, match="train.stepz"):
        TrainConfig.from_dict({"stepz": 3})
    with pytest.raises(ConfigError, match="model.heads"):
        TrainConfig.from_dict({"preset": "nano", "model": {"heads": 3}})
    with pytest.raises(ConfigError, match="warmup_steps=50 exceeds train.steps=10"):
        TrainConfig(steps=10, warmup_steps=50).validate()


def test_fingerprint_ignores_cadence_but_not_trajectory():
    a = TrainConfig.from_preset("nano")
    assert a.trajectory_fingerprint() == dataclasses.replace(a, checkpoint_every=5, log_every=1).trajectory_fingerprint()
    assert a.trajectory_fingerprint() != dataclasses.replace(a, learning_rate=1e-4).trajectory_fingerprint()
    assert a.trajectory_fingerprint() != dataclasses.replace(a, steps=a.steps + 1).trajectory_fingerprint()


def test_150m_preset_is_about_150m_parameters():
    cfg = TrainConfig.from_preset("150m")
    n = param_count_for(cfg.model, 32768)  # shapes only, nothing allocated
    assert 120e6 < n < 180e6, n
    assert param_count_for(TrainConfig.from_preset("nano").model, 256) < 200_000


# ---------------------------------------------------------------------------------------------
# model


def test_forward_shapes_and_param_layout():
    params = init_params(TINY, V, 0)
    assert params["layers"]["wq"].shape == (2, 32, 32)
    assert params["layers"]["wk"].shape == (2, 32, 16)  # 2 kv heads x head_dim 8
    assert "lm_head" not in params and "q_norm" not in params["layers"]
    untied = init_params(dataclasses.replace(TINY, tie_embeddings=False, qk_norm=True), V, 0)
    assert untied["lm_head"].shape == (32, V)
    assert untied["layers"]["q_norm"].shape == (2, 8)
    logits = _forward(params, _tokens((3, 11)), TINY)
    assert logits.shape == (3, 11, V) and logits.dtype == jnp.float32
    assert bool(jnp.all(jnp.isfinite(logits)))


def test_attention_is_causal():
    params = init_params(TINY, V, 1)
    toks = _tokens((2, 16), seed=3)
    changed = toks.at[:, 10].set((toks[:, 10] + 1) % V)
    a, b = _forward(params, toks, TINY), _forward(params, changed, TINY)
    np.testing.assert_allclose(a[:, :10], b[:, :10], rtol=0, atol=1e-6)
    assert float(jnp.max(jnp.abs(a[:, 10:] - b[:, 10:]))) > 1e-4


def test_grouped_query_attention_equals_mha_with_shared_kv_heads():
    """GQA with 2 kv heads == MHA whose kv heads are copies per query group."""
    gqa_cfg = TINY
    mha_cfg = dataclasses.replace(TINY, n_kv_heads=TINY.n_heads)
    params = init_params(gqa_cfg, V, 2)
    hd, G = gqa_cfg.head_dim, gqa_cfg.n_heads // gqa_cfg.n_kv_heads

    def expand(w):  # (L, d, KV*hd) -> (L, d, H*hd), head h reads kv head h // G
        L, d, _ = w.shape
        return jnp.repeat(w.reshape(L, d, gqa_cfg.n_kv_heads, hd), G, axis=2).reshape(L, d, -1)

    mha = jax.tree_util.tree_map(lambda x: x, params)
    mha["layers"] = dict(params["layers"], wk=expand(params["layers"]["wk"]), wv=expand(params["layers"]["wv"]))
    toks = _tokens((2, 12), seed=5)
    np.testing.assert_allclose(_forward(params, toks, gqa_cfg), _forward(mha, toks, mha_cfg), atol=1e-5)


def test_rope_scores_depend_only_on_relative_position():
    hd = 16
    cos, sin = rope_tables(40, hd, 10_000.0)
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.normal(size=(1, 1, 1, hd)), jnp.float32)
    k = jnp.asarray(rng.normal(size=(1, 1, 1, hd)), jnp.float32)

    def score(i, j):
        qi = apply_rope(jnp.tile(q, (1, 40, 1, 1)), cos, sin)[0, i, 0]
        kj = apply_rope(jnp.tile(k, (1, 40, 1, 1)), cos, sin)[0, j, 0]
        return float(qi @ kj)

    assert score(7, 3) == pytest.approx(score(30, 26), abs=1e-4)
    assert score(7, 3) != pytest.approx(score(7, 5), abs=1e-3)


def test_qk_norm_and_z_loss_change_the_graph_and_the_loss():
    batch = _tokens((2, 9), seed=7)
    base = init_params(TINY, V, 0)
    qk_cfg = dataclasses.replace(TINY, qk_norm=True)
    qk = init_params(qk_cfg, V, 0)
    # give the qk-norm gains non-trivial values so the normalization matters numerically too
    qk["layers"]["q_norm"] = qk["layers"]["q_norm"] * 3.0

    def jaxpr(cfg, p, z):
        return str(jax.make_jaxpr(lambda p_, b: loss_fn(p_, b, cfg, z_loss=z)[0])(p, batch))

    plain, with_qk, with_z = jaxpr(TINY, base, 0.0), jaxpr(qk_cfg, qk, 0.0), jaxpr(TINY, base, 1e-3)
    assert plain != with_qk and plain != with_z
    assert with_qk.count("rsqrt") > plain.count("rsqrt")  # q and k norms add two more per layer
    l_plain, aux = _loss(base, batch, TINY)
    l_qk, _ = _loss(qk, batch, qk_cfg)
    l_z, aux_z = _loss(base, batch, TINY, z_loss=1e-3)
    assert float(l_qk) != pytest.approx(float(l_plain), abs=1e-6)
    # z-loss adds exactly coefficient * mean(logsumexp^2) on top of the same cross-entropy
    logits = _forward(base, batch[:, :-1], TINY)
    expected_z = 1e-3 * float(jnp.mean(jax.nn.logsumexp(logits, -1) ** 2))
    assert float(aux_z["ce"]) == pytest.approx(float(aux["ce"]), rel=1e-6)
    assert float(l_z) == pytest.approx(float(l_plain) + expected_z, rel=1e-5)


def test_loss_mask_and_sums():
    params = init_params(TINY, V, 0)
    batch = _tokens((4, 9), seed=9)
    mask = jnp.ones((4, 8)).at[2:].set(0.0)
    _, full = _loss(params, batch[:2], TINY)
    _, masked = _loss(params, batch, TINY, mask=mask)
    assert float(masked["count"]) == 16
    assert float(masked["nll_sum"]) == pytest.approx(float(full["nll_sum"]), rel=1e-5)


def test_initial_loss_is_near_uniform():
    params = init_params(TINY, V, 0)
    loss, _ = _loss(params, _tokens((4, 17)), TINY)
    assert abs(float(loss) - np.log(V)) < 0.1


def test_flops_per_token_counts_matmuls():
    cfg = ModelConfig(d_model=64, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=128)
    # per layer: 4 d^2 attention + 3 d*ff mlp; plus the d*V head; plus attention scores
    expected = 6 * (2 * (4 * 64 * 64 + 3 * 64 * 128) + 64 * 100) + 12 * 2 * 64 * 50
    assert flops_per_token(cfg, 100, 50) == expected


# ---------------------------------------------------------------------------------------------
# optimizer


def test_wsd_schedule_shape():
    cfg = TrainConfig(steps=100, warmup_steps=10, learning_rate=1.0, min_lr_ratio=0.1, decay_fraction=0.2)
    lr = make_schedule(cfg)
    vals = [float(lr(s)) for s in range(100)]
    assert vals[0] == pytest.approx(0.1) and vals[9] == pytest.approx(1.0)
    assert all(v == pytest.approx(1.0) for v in vals[10:80])  # stable
    assert vals[99] == pytest.approx(0.1)  # floor reached exactly at the last step
    assert all(a > b for a, b in zip(vals[80:], vals[81:]))  # strictly decaying


def test_cosine_schedule_shape():
    cfg = TrainConfig(steps=50, warmup_steps=5, learning_rate=2.0, min_lr_ratio=0.0, schedule="cosine")
    lr = make_schedule(cfg)
    vals = [float(lr(s)) for s in range(50)]
    assert vals[5] == pytest.approx(2.0)
    assert vals[27] == pytest.approx(1.0, abs=0.08)
    assert vals[49] == pytest.approx(0.0, abs=1e-6)
    assert all(a >= b for a, b in zip(vals[5:], vals[6:]))


def test_weight_decay_is_decoupled_and_skips_norms_and_embeddings():
    cfg = TrainConfig(weight_decay=0.5, grad_clip=None)
    params = init_params(dataclasses.replace(TINY, qk_norm=True), V, 0)
    mask = decay_mask(params)
    assert mask["layers"]["wq"] and mask["layers"]["w_down"]
    assert not mask["embed"] and not mask["final_norm"] and not mask["layers"]["q_norm"]
    tx = make_optimizer(cfg, params)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    new, _, ok, _ = _update(tx, params, tx.init(params), zeros, jnp.float32(1.0), jnp.float32(0.1))
    assert bool(ok)
    # zero gradient: Adam's step is 0, only the decoupled decay lr * wd * p remains
    np.testing.assert_allclose(new["layers"]["wq"], params["layers"]["wq"] * (1 - 0.1 * 0.5), rtol=1e-6)
    np.testing.assert_array_equal(new["embed"], params["embed"])
    np.testing.assert_array_equal(new["layers"]["attn_norm"], params["layers"]["attn_norm"])


def test_non_finite_step_is_a_no_op():
    cfg = TrainConfig()
    params = init_params(TINY, V, 0)
    tx = make_optimizer(cfg, params)
    state = tx.init(params)
    grads = jax.tree_util.tree_map(jnp.ones_like, params)
    bad = dict(grads, final_norm=grads["final_norm"].at[0].set(jnp.nan))
    new, new_state, ok, _ = _update(tx, params, state, bad, jnp.float32(1.0), jnp.float32(0.1))
    assert not bool(ok)
    for a, b in zip(jax.tree_util.tree_leaves((new, new_state)), jax.tree_util.tree_leaves((params, state))):
        np.testing.assert_array_equal(a, b)
    _, _, ok_loss, _ = _update(tx, params, state, grads, jnp.float32(jnp.inf), jnp.float32(0.1))
    assert not bool(ok_loss)
    moved, _, ok_good, _ = _update(tx, params, state, grads, jnp.float32(1.0), jnp.float32(0.1))
    assert bool(ok_good) and not np.allclose(moved["embed"], params["embed"])


def test_gradient_clipping_rescales_by_global_norm():
    """Clipped chain on (g1, g2) == unclipped chain on (g1 scaled to norm 1, g2) != unclipped raw."""
    params = {"w": jnp.ones((3,)), "b": jnp.ones((2,))}
    g1 = {"w": jnp.array([300.0, 400.0, 0.0]), "b": jnp.zeros((2,))}  # global norm 500
    g2 = {"w": jnp.array([0.1, -0.2, 0.3]), "b": jnp.array([0.1, 0.0])}  # norm < 1: untouched

    def run(cfg, grads):
        tx = make_optimizer(cfg, params)
        st = tx.init(params)
        for g in grads:
            upd, st = tx.update(g, st, params)
        return upd

    clipped = run(TrainConfig(grad_clip=1.0, weight_decay=0.0), [g1, g2])
    manual = run(TrainConfig(grad_clip=None, weight_decay=0.0), [jax.tree_util.tree_map(lambda x: x / 500.0, g1), g2])
    raw = run(TrainConfig(grad_clip=None, weight_decay=0.0), [g1, g2])
    np.testing.assert_allclose(clipped["w"], manual["w"], rtol=1e-5)
    assert not np.allclose(clipped["w"], raw["w"], rtol=1e-3)


# ---------------------------------------------------------------------------------------------
# checkpoints


def _state(seed=0):
    params = init_params(TINY, V, seed)
    tx = make_optimizer(TrainConfig(), params)
    return {"params": params, "opt_state": tx.init(params), "skipped": jnp.int32(3)}


def test_checkpoint_roundtrip_and_listing(tmp_path):
    d = str(tmp_path / "ckpt")
    st = _state(0)
    p1 = save_checkpoint(d, 5, st, {"fingerprint": "abc"})
    save_checkpoint(d, 10, _state(1), {"fingerprint": "abc"})
    open(os.path.join(d, ".step-00000015.xyz.tmp"), "wb").write(b"torn")  # a crashed writer
    assert [s for s, _ in list_checkpoints(d)] == [5, 10]
    assert latest_checkpoint(d).endswith("step-00000010.npz")
    restored, meta = load_checkpoint(p1, jax.device_get(_state(2)))
    assert meta == {"fingerprint": "abc", "step": 5}
    for a, b in zip(jax.tree_util.tree_leaves(restored), jax.tree_util.tree_leaves(st)):
        np.testing.assert_array_equal(a, b)
    assert jax.tree_util.tree_structure(restored) == jax.tree_util.tree_structure(st)
    removed = prune_checkpoints(d, keep=1)
    assert removed == [p1] and sorted(os.listdir(d)) == ["step-00000010.npz"]


def test_checkpoint_mismatch_names_the_parameter(tmp_path):
    d = str(tmp_path)
    path = save_checkpoint(d, 1, _state(0), {})
    other = init_params(dataclasses.replace(TINY, d_ff=96), V, 0)
    with pytest.raises(CheckpointError, match=r"params/layers/w_down is float32\[2, 64, 32\].*\[2, 96, 32\]"):
        load_checkpoint(path, {"params": other, "opt_state": _state(0)["opt_state"], "skipped": 0})
    qk = init_params(dataclasses.replace(TINY, qk_norm=True), V, 0)
    with pytest.raises(CheckpointError, match="lacks 'params/layers/k_norm'"):
        load_checkpoint(path, jax.device_get(dict(_state(0), params=qk)))
    open(os.path.join(d, "step-00000002.npz"), "wb").write(b"not a zip")
    with pytest.raises(CheckpointError, match="step-00000002.npz: unreadable"):
        load_checkpoint(os.path.join(d, "step-00000002.npz"), jax.device_get(_state(0)))


# ---------------------------------------------------------------------------------------------
# plot


def test_loss_plot_png_is_valid_and_shows_both_series(tmp_path):
    import matplotlib.image

    train = [(s, 5.0 - s / 50) for s in range(1, 101)] + [(101, float("nan"))]
    evals = [(50, 4.2), (100, 3.1)]
    data = render_loss_plot(train, evals)
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and render_loss_plot(train, evals) == data  # same curve, same bytes
    path = write_loss_plot(str(tmp_path / "loss.png"), train, evals)
    assert open(path, "rb").read() == data
    decoded = (matplotlib.image.imread(path)[..., :3] * 255).round().astype(np.uint8)
    colors = {tuple(int(x) for x in c) for c in decoded.reshape(-1, 3)}
    assert (31, 119, 180) in colors and (214, 39, 40) in colors  # train line and eval markers
    assert os.listdir(tmp_path) == ["loss.png"]  # no temp file left behind


def test_remat_and_bf16_compute_keep_the_math():
    batch = _tokens((2, 17), seed=11)
    params = init_params(TINY, V, 0)
    remat_cfg = dataclasses.replace(TINY, remat=True)
    grad = jax.jit(jax.grad(lambda p, b, c: loss_fn(p, b, c)[0]), static_argnums=(2,))
    g_plain, g_remat = grad(params, batch, TINY), grad(params, batch, remat_cfg)
    for a, b in zip(jax.tree_util.tree_leaves(g_plain), jax.tree_util.tree_leaves(g_remat)):
        np.testing.assert_allclose(a, b, atol=1e-6)
    l32, _ = _loss(params, batch, TINY)
    bf16 = jax.jit(lambda p, b: loss_fn(p, b, TINY, compute_dtype=jnp.bfloat16)[0])
    l16 = bf16(params, batch)
    assert l16.dtype == jnp.float32  # logits and loss stay fp32 whatever the matmul dtype
    assert float(l16) == pytest.approx(float(l32), abs=0.05)
    assert float(l16) != float(l32)  # the matmuls really ran in bf16
