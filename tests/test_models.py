"""Model tests: causality, padding and packing invariance, backends, Table 3 knobs, stats, loss, config errors."""
import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attention
import models

V = 40


def tiny(**kw) -> models.TransformerConfig:
    fields = dict(vocab_size=V, d_model=32, num_heads=4, d_ff=64, num_encoder_layers=1, num_decoder_layers=1,
                  dropout_rate=0.0, max_len=32)
    fields.update(kw)
    return models.TransformerConfig(**fields)


@functools.lru_cache(maxsize=None)
def build(cfg, cls=models.EncoderDecoder, seed=0):
    """Models are cached per config: building runs many small eager ops, and tests do not modify them."""
    return cls(cfg, rngs=nnx.Rngs(params=seed, dropout=seed + 1))


@functools.partial(nnx.jit, static_argnames=("return_stats", "deterministic"))
def run(model, *args, return_stats=False, deterministic=True, **kwargs):
    """One compiled forward pass per config and shape (eager forward passes compile op by op)."""
    return model(*args, return_stats=return_stats, deterministic=deterministic, **kwargs)


@nnx.jit
def run_encode(model, inputs, segmentation):
    return model.encode(inputs, inputs_segmentation=segmentation)


def random_tokens(key, shape, lengths):
    """Ids in [3, V) with EOS at length-1 and 0-padding after, per row."""
    tok = np.array(jax.random.randint(key, shape, 3, V))
    for b, n in enumerate(lengths):
        tok[b, n - 1] = 1
        tok[b, n:] = 0
    return jnp.asarray(tok, jnp.int32)


# One pair of shapes for most tests, so compiled forward passes are reused.
INPUTS = random_tokens(jax.random.PRNGKey(4), (2, 7), [7, 3])
TARGETS = random_tokens(jax.random.PRNGKey(5), (2, 6), [6, 2])


def pad_to(x, length):
    return jnp.pad(x, ((0, 0), (0, length - x.shape[1])))


# ------------------------------------------------------------------------------------------------- causality
@functools.partial(jax.jit, static_argnames=("graphdef",))
def _decoder_jacobian(graphdef, state, y, seg, pos, encoded, src_seg):
    """d (sum over vocab of logits[b, t]) / d y[b', s] for every b, t, b', s -> [B, T, B, T] (norm over d)."""
    model = nnx.merge(graphdef, state)
    embed = model.embed if isinstance(model, models.DecoderOnly) else model.source_embed

    def summed_logits(y):
        out, _, _ = model.decoder(y, seg, pos, encoded, src_seg)
        return model._logits(out, embed).sum(-1)

    return jnp.abs(jax.jacrev(summed_logits)(y)).sum(-1)


def test_decoder_is_causal_through_gradients():
    """d logits[t] / d decoder input embeddings[s] is exactly zero for every s > t (nanodo's test)."""
    cfg = tiny(norm="post", position="rope", num_decoder_layers=2)
    model = build(cfg)
    B, T = 2, 6
    src_seg = (INPUTS != 0).astype(jnp.int32)
    encoded = run_encode(model, INPUTS, src_seg)
    y = jax.random.normal(jax.random.PRNGKey(1), (B, T, cfg.d_model))
    seg = jnp.ones((B, T), jnp.int32)
    pos = jnp.broadcast_to(jnp.arange(T), (B, T))
    jac = np.asarray(_decoder_jacobian(*nnx.split(model), y, seg, pos, encoded, src_seg))
    for b in range(B):
        for t in range(T):
            assert np.all(jac[b, t, b, t + 1:] == 0.0), f"output {t} depends on later inputs"
            assert np.all(jac[b, t, b, : t + 1] > 0.0)
            assert np.all(jac[b, t, 1 - b] == 0.0)  # rows of a batch do not mix


def test_decoder_only_is_causal_through_gradients():
    cfg = tiny(position="learned", num_kv_heads=2)
    model = build(cfg, models.DecoderOnly)
    B, T = 2, 6
    y = jax.random.normal(jax.random.PRNGKey(1), (B, T, cfg.d_model))
    pos = jnp.broadcast_to(jnp.arange(T), (B, T))
    jac = np.asarray(_decoder_jacobian(*nnx.split(model), y, None, pos, None, None))
    for t in range(T):
        assert np.all(jac[:, t, :, t + 1:] == 0.0)
        assert np.all(jac[0, t, 0, : t + 1] > 0.0)


# -------------------------------------------------------------------------------------- padding and packing
def _pack(a, b, length):
    """Two token lists -> packed row with its segmentation and positions (each [2, length], row 1 = row 0)."""
    tok, seg, pos = (np.zeros((2, length), np.int32) for _ in range(3))
    tok[:, : len(a)], tok[:, len(a): len(a) + len(b)] = a, b
    seg[:, : len(a)], seg[:, len(a): len(a) + len(b)] = 1, 2
    pos[:, : len(a)], pos[:, len(a): len(a) + len(b)] = np.arange(len(a)), np.arange(len(b))
    return jnp.asarray(tok), jnp.asarray(seg), jnp.asarray(pos)


def _alone(a, b, length):
    """The same two examples, one per row, 0-padded to ``length``."""
    return jnp.asarray([list(a) + [0] * (length - len(a)), list(b) + [0] * (length - len(b))], jnp.int32)


def _explicit(inputs, targets):
    """Unpacked batch with the segmentation and position arrays a data pipeline provides (same trace as packed)."""
    in_seg, tg_seg = (np.asarray(inputs) != 0).astype(np.int32), (np.asarray(targets) != 0).astype(np.int32)
    in_pos, tg_pos = (np.broadcast_to(np.arange(x.shape[1], dtype=np.int32), x.shape) for x in (inputs, targets))
    return inputs, targets, in_seg, tg_seg, in_pos, tg_pos


@nnx.jit
def run_batch(model, inputs, targets, in_seg, tg_seg, in_pos, tg_pos):
    return model(inputs, targets, inputs_segmentation=in_seg, targets_segmentation=tg_seg,
                 inputs_position=in_pos, targets_position=tg_pos)


@pytest.mark.parametrize("position", ["sinusoidal", "learned", "rope", "none"])
def test_padding_invariance_and_packing(position):
    """Extra source/target padding changes nothing at real positions; two packed examples = each alone."""
    cfg = tiny(position=position)
    model = build(cfg)
    base = run(model, INPUTS, TARGETS)
    padded = run_batch(model, *_explicit(pad_to(INPUTS, 9), pad_to(TARGETS, 8)))
    real = np.asarray(TARGETS != 0)
    assert np.all(np.isfinite(np.asarray(padded)))
    np.testing.assert_allclose(np.asarray(padded[:, :6])[real], np.asarray(base)[real], atol=1e-5)

    src_a, src_b = [5, 6, 7, 1], [8, 9, 1]
    tgt_a, tgt_b = [10, 11, 1], [12, 13, 14, 1]
    inputs, in_seg, in_pos = _pack(src_a, src_b, 9)
    targets, tg_seg, tg_pos = _pack(tgt_a, tgt_b, 8)
    packed = run_batch(model, inputs, targets, in_seg, tg_seg, in_pos, tg_pos)
    alone = run_batch(model, *_explicit(_alone(src_a, src_b, 9), _alone(tgt_a, tgt_b, 8)))
    np.testing.assert_allclose(packed[0, :3], alone[0, :3], atol=1e-5)
    np.testing.assert_allclose(packed[0, 3:7], alone[1, :4], atol=1e-5)
    if position in ("learned", "none"):
        return
    lm = build(cfg, models.DecoderOnly)
    packed_lm = run(lm, targets, segmentation=tg_seg, position=tg_pos)
    _, alone_tg, _, alone_seg, _, alone_pos = _explicit(INPUTS, _alone(tgt_a, tgt_b, 8))
    alone_lm = run(lm, alone_tg, segmentation=alone_seg, position=alone_pos)
    np.testing.assert_allclose(packed_lm[0, :3], alone_lm[0, :3], atol=1e-5)
    np.testing.assert_allclose(packed_lm[0, 3:7], alone_lm[1, :4], atol=1e-5)


def test_shift_right_and_positions_with_packing():
    targets = jnp.array([[4, 5, 1, 6, 1, 0, 0]])
    seg = jnp.array([[1, 1, 1, 2, 2, 0, 0]])
    np.testing.assert_array_equal(models.shift_right(targets, seg, 2), [[2, 4, 5, 2, 6, 0, 0]])
    np.testing.assert_array_equal(models.shift_right(targets, None, 2), [[2, 4, 5, 1, 6, 1, 0]])
    np.testing.assert_array_equal(models.positions_from_segmentation(seg), [[0, 1, 2, 0, 1, 0, 1]])


# -------------------------------------------------------------------------------------------------- backends
BACKENDS = [b for b in attention.available_backends() if b != "cudnn"]
GQA = dict(num_kv_heads=2, qk_dim=16, v_dim=8, num_decoder_layers=2)


@pytest.mark.parametrize("impl", BACKENDS)
def test_every_backend_gives_the_same_model_output(impl):
    cfg = tiny(**GQA)
    want, want_stats = run(build(cfg.replace(attention_impl="reference")), INPUTS, TARGETS, return_stats=True)
    got, got_stats = run(build(cfg.replace(attention_impl=impl)), INPUTS, TARGETS, return_stats=True)
    real = np.asarray(TARGETS != 0)
    np.testing.assert_allclose(np.asarray(got)[real], np.asarray(want)[real], atol=2e-5, rtol=1e-5)
    for kind in ("encoder_self", "decoder_self", "cross"):
        for s_got, s_want in zip(got_stats[kind], want_stats[kind], strict=True):
            np.testing.assert_array_equal(s_got.valid, s_want.valid)
            np.testing.assert_allclose(s_got.entropy, s_want.entropy, atol=1e-4)


def test_attention_layer_matches_hand_computation():
    """Q/K/V/O projections, GQA, d_k != d_v and a scale override, all through attention.attention."""
    d, H, Hkv, dk, dv = 16, 4, 2, 6, 5
    layer = models.MultiHeadAttention(d, H, num_kv_heads=Hkv, qk_dim=dk, v_dim=dv, scale=0.3, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(0)
    x, kv = rng.normal(size=(2, 3, d)).astype(np.float32), rng.normal(size=(2, 4, d)).astype(np.float32)
    kv_seg = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], np.int32)
    out = nnx.jit(lambda layer, x, kv, seg: layer(x, kv, mask=attention.Mask(kv_segment_ids=seg)))(layer, x, kv, kv_seg)

    w = {name: (np.asarray(p.kernel[...]), np.asarray(p.bias[...]))
         for name, p in (("q", layer.query), ("k", layer.key), ("v", layer.value), ("o", layer.out))}
    q = np.einsum("btd,dhk->bthk", x, w["q"][0]) + w["q"][1]
    k = np.repeat(np.einsum("btd,dhk->bthk", kv, w["k"][0]) + w["k"][1], H // Hkv, axis=2)
    v = np.repeat(np.einsum("btd,dhk->bthk", kv, w["v"][0]) + w["v"][1], H // Hkv, axis=2)
    s = np.where(kv_seg[:, None, None, :] > 0, 0.3 * np.einsum("bqhk,bshk->bhqs", q, k), -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    want = np.einsum("bqhk,hkd->bqd", np.einsum("bhqs,bshk->bqhk", p, v), w["o"][0]) + w["o"][1]
    np.testing.assert_allclose(out, want, atol=1e-5)


def test_attention_scale_reaches_the_layers():
    base_model = build(tiny())
    assert base_model.encoder.layers[0].self_attention.scale == 1 / math.sqrt(8)
    unscaled_model = build(tiny(attention_scale=1.0))
    assert unscaled_model.decoder.layers[0].cross_attention.scale == 1.0
    unscaled, base = run(unscaled_model, INPUTS, TARGETS), run(base_model, INPUTS, TARGETS)
    assert np.max(np.abs(np.asarray(unscaled - base))) > 1e-3


def test_dropout_trains_with_auto_and_attention_dropout_rejects_xla():
    cfg = tiny(attention_dropout_rate=0.5, dropout_rate=0.1)
    # An "rbg" dropout key compiles much faster on CPU than the default threefry; any key type works.
    model = models.EncoderDecoder(cfg, rngs=nnx.Rngs(params=0, dropout=jax.random.key(1, impl="rbg")))
    np.testing.assert_allclose(run(model, INPUTS, TARGETS), run(build(tiny()), INPUTS, TARGETS), atol=1e-6)
    a = run(model, INPUTS, TARGETS, deterministic=False)
    b = run(model, INPUTS, TARGETS, deterministic=False)
    assert np.max(np.abs(np.asarray(a - b))) > 1e-3  # fresh dropout keys per call
    with pytest.raises(ValueError, match="attention_impl='xla'.*attention_dropout_rate"):
        build(cfg.replace(attention_impl="xla"))


# ---------------------------------------------------------------------------------------- stats and outputs
def test_stats_per_layer_with_shapes_and_weights():
    cfg = tiny(attention_impl="reference", **GQA)
    model = build(cfg)
    (B, S), T = INPUTS.shape, TARGETS.shape[1]
    logits, stats = run(model, INPUTS, TARGETS, return_stats=True)
    assert logits.shape == (B, T, V)
    assert [len(stats[k]) for k in ("encoder_self", "decoder_self", "cross")] == [1, 2, 2]
    H = cfg.num_heads
    for s in stats["encoder_self"]:
        assert s.entropy.shape == s.max_logit.shape == s.lse.shape == s.sink.shape == (B, H, S)
        assert s.weights.shape == (B, H, S, S)
    for s in stats["cross"]:
        assert s.entropy.shape == (B, H, T) and s.weights.shape == (B, H, T, S)
        assert np.all(np.asarray(s.weights[1, :, :, 3:]) == 0.0)  # row 1 has 3 real source tokens
    for s in stats["decoder_self"]:
        assert s.weights.shape == (B, H, T, T)
        np.testing.assert_array_equal(s.valid[1, 0], [True, True, False, False, False, False])
    np.testing.assert_allclose(logits, run(model, INPUTS, TARGETS), atol=1e-6)
    _, lm_stats = run(build(cfg, models.DecoderOnly), TARGETS, return_stats=True)
    assert list(lm_stats) == ["decoder_self"] and len(lm_stats["decoder_self"]) == 2
    assert lm_stats["decoder_self"][0].entropy.shape == (B, H, T)


def test_bfloat16_runs_with_float32_params():
    model = build(tiny(dtype="bfloat16"))
    out = run(model, INPUTS, TARGETS)
    assert out.dtype == jnp.bfloat16 and np.all(np.isfinite(np.asarray(out, np.float32)))
    assert model.source_embed.embedding[...].dtype == jnp.float32


# -------------------------------------------------------------------------------------------------- Table 3
@pytest.mark.parametrize("heads,qk_dim,v_dim", [(1, 64, 64), (4, 16, 16), (8, 8, 8), (16, 4, 4), (32, 2, 2),
                                                (8, 16, 8), (8, 32, 8)])
def test_table3_knobs_build_run_and_count(heads, qk_dim, v_dim):
    """Rows (A): h in {1, 4, 8, 16, 32} at qk_dim = v_dim = d_model / h; rows (B): qk_dim in {16, 32} at h = 8.
    One decoder layer (self- and cross-attention) and no encoder layers keep the compile short."""
    cfg = tiny(d_model=64, num_heads=heads, qk_dim=qk_dim, v_dim=v_dim, d_ff=128, num_encoder_layers=0)
    model = build(cfg)
    logits = run(model, INPUTS, TARGETS)
    assert logits.shape == (2, 6, V) and np.all(np.isfinite(np.asarray(logits)))
    assert model.decoder.layers[0].cross_attention.query.kernel[...].shape == (64, heads, qk_dim)
    attn_params = 64 * heads * qk_dim * 2 + 64 * heads * v_dim * 2 + heads * qk_dim * 2 + heads * v_dim + 64
    assert models.params.attention_params(cfg) == attn_params
    assert models.count_params(model) == models.param_count_formula(cfg)


@pytest.mark.parametrize("kw", [dict(num_kv_heads=1), dict(num_kv_heads=2, qk_layernorm=True, use_bias=False),
                                dict(position="learned", share_embeddings=False, tie_output=False,
                                     norm_type="rmsnorm", norm="post"), dict(norm="admin")])
def test_count_matches_formula_for_variants(kw):
    cfg = tiny(**kw)
    assert models.count_params(build(cfg)) == models.param_count_formula(cfg)
    assert models.count_params(build(cfg, models.DecoderOnly)) == models.param_count_formula(cfg, "decoder_only")


@pytest.mark.parametrize("name,kw,paper", [("base", {}, 65e6), ("big", {}, 213e6),
                                           ("base", dict(qk_dim=32, v_dim=64), 60e6),
                                           ("base", dict(qk_dim=16, v_dim=64), 58e6)])
def test_paper_parameter_counts(name, kw, paper):
    """Shared 37k vocabulary: within 5% of Vaswani et al.'s counts (Table 3 base, big, rows (B))."""
    n = models.param_count_formula(getattr(models.TransformerConfig, name)(37000, **kw))
    assert abs(n - paper) / paper < 0.05, (n, paper)


def test_paper_base_model_count_without_allocating():
    cfg = models.TransformerConfig.base(37000, qk_dim=32)
    abstract = nnx.eval_shape(lambda: models.EncoderDecoder(cfg, rngs=nnx.Rngs(params=0, dropout=1)))
    assert models.count_params(abstract) == models.param_count_formula(cfg) == 58_354_688


def test_paper_presets_are_exact():
    base, big = models.TransformerConfig.base(37000), models.TransformerConfig.big(37000)
    assert (base.d_model, base.d_ff, base.num_heads, base.qk_dim, base.v_dim, base.num_encoder_layers,
            base.num_decoder_layers, base.dropout_rate, base.norm) == (512, 2048, 8, 64, 64, 6, 6, 0.1, "post")
    assert (big.d_model, big.d_ff, big.num_heads, big.qk_dim, big.dropout_rate) == (1024, 4096, 16, 64, 0.3)


# ------------------------------------------------------------------------------------------------------ loss
def test_cross_entropy_label_smoothing_and_padding():
    logits = np.random.default_rng(0).normal(size=(2, 3, 7)).astype(np.float32)
    targets = np.array([[1, 2, 0], [3, 0, 0]])
    weights = (targets != 0).astype(np.float32)
    ce = jax.jit(models.cross_entropy, static_argnames="label_smoothing")
    loss, n = ce(logits, targets, weights, label_smoothing=0.1)
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    soft = 0.9 * np.eye(7)[targets] + 0.1 / 7
    np.testing.assert_allclose(loss, np.sum(-np.sum(soft * log_p, -1) * weights), rtol=1e-5)
    assert float(n) == 3.0
    changed = logits.copy()
    changed[0, 2] += 100.0  # a padding position
    np.testing.assert_allclose(ce(changed, targets, weights, label_smoothing=0.1)[0], loss, rtol=1e-6)
    plain, _ = jax.jit(models.cross_entropy)(logits, targets, weights)
    nll = -np.take_along_axis(log_p, targets[..., None], -1)[..., 0]
    np.testing.assert_allclose(plain, np.sum(nll * weights), rtol=1e-5)


# ----------------------------------------------------------------------------------------------- bad configs
@pytest.mark.parametrize("kw,match", [
    (dict(num_heads=8, num_kv_heads=3), "num_heads=8 must be a multiple of num_kv_heads=3"),
    (dict(d_model=0), "d_model must be a positive int; got 0"),
    (dict(qk_dim=-4), "qk_dim must be a positive int or None; got -4"),
    (dict(d_model=30, num_heads=4), "d_model=30 is not divisible by num_heads=4"),
    (dict(position="rope", qk_dim=7), "even qk_dim.*qk_dim=7"),
    (dict(position="alibi"), "position must be one of .*'alibi'"),
    (dict(norm="sandwich"), "norm must be one of .*'sandwich'"),
    (dict(norm_type="batchnorm"), "norm_type must be one of"),
    (dict(dropout_rate=1.0), "dropout_rate must be a float in \\[0, 1\\); got 1.0"),
    (dict(attention_scale=0.0), "attention_scale must be None or a positive float"),
    (dict(eos_id=V), "eos_id must be a token id"),
    (dict(dtype="int8"), "dtype must be one of"),
])
def test_bad_configs_raise_clear_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        tiny(**kw)


def test_bad_builds_raise_clear_errors():
    with pytest.raises(ValueError, match="attention_impl='flashy' is not a registered backend"):
        build(tiny(attention_impl="flashy"))
    with pytest.raises(ValueError, match="'dropout' rng stream"):
        models.EncoderDecoder(tiny(dropout_rate=0.1), rngs=nnx.Rngs(params=0))
    with pytest.raises(ValueError, match="max_len=32"):
        build(tiny(position="learned"))(jnp.ones((1, 40), jnp.int32), TARGETS)


def test_config_from_dict_and_replace():
    cfg = tiny(num_heads=8)
    assert cfg.qk_dim == 4 and cfg.num_kv_heads == 8
    assert models.TransformerConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.replace(num_heads=2).qk_dim == 16  # derived widths follow
    assert tiny(qk_dim=16).replace(num_heads=2).qk_dim == 16  # explicit widths stay
    with pytest.raises(ValueError, match="unknown keys \\['d_k'\\]"):
        models.TransformerConfig.from_dict({**cfg.to_dict(), "d_k": 3})
    assert dataclasses.is_dataclass(cfg) and hash(cfg) == hash(tiny(num_heads=8))


def test_bind_checks_only_what_it_changes(monkeypatch):
    cfg = tiny(num_heads=8)
    post_init = models.TransformerConfig.__post_init__
    monkeypatch.setattr(models.TransformerConfig, "__post_init__", lambda self: pytest.fail("validated again"))
    bound = cfg.bind(vocab_size=3 * V, attention_impl="reference", attention_options={"block": [2, 2]})
    assert (bound.vocab_size, bound.attention_impl, bound.attention_options) == (3 * V, "reference", (("block", (2, 2)),))
    assert cfg.vocab_size == V and bound.qk_dim == 4 and bound.to_dict()["qk_dim"] is None  # derived stays derived
    with pytest.raises(ValueError, match="bos_id must be a token id in \\[0, vocab_size=1\\); got 2"):
        cfg.bind(vocab_size=1)
    with pytest.raises(ValueError, match="vocab_size must be a positive int; got 0"):
        cfg.bind(vocab_size=0)
    with pytest.raises(ValueError, match="attention_options must be a dict"):
        cfg.bind(attention_options=[1])
    monkeypatch.setattr(models.TransformerConfig, "__post_init__", post_init)
    assert models.TransformerConfig.from_dict(bound.to_dict()) == bound


@pytest.mark.parametrize("kind, attention_only", [("additive", False), ("softmax", True), ("hard", True)])
def test_variant_and_attention_only_param_counts_match_the_formula(kind, attention_only):
    cfg = models.TransformerConfig(vocab_size=40, d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1,
                                   num_decoder_layers=2, attention_kind=kind, attention_only=attention_only)
    for model, name in ((models.EncoderDecoder, "encoder_decoder"), (models.DecoderOnly, "decoder_only")):
        m = nnx.eval_shape(lambda: model(cfg, rngs=nnx.Rngs(params=0, dropout=1)))
        assert models.count_params(m) == models.param_count_formula(cfg, name)


def test_classifier_pools_only_real_tokens():
    cfg = models.TransformerConfig(vocab_size=40, d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1,
                                   num_decoder_layers=0, dropout_rate=0.0, attention_impl="reference")
    m = models.EncoderClassifier(cfg, 3, rngs=nnx.Rngs(params=0))
    x = jnp.array([[5, 6, 7, 0, 0], [5, 6, 7, 9, 9]])
    seg = (x != 0).astype(jnp.int32)
    logits, stats = m(x, inputs_segmentation=seg, return_stats=True)
    assert logits.shape == (2, 3)
    w = stats["pool"][0].weights  # [B, 1, 1, S]
    np.testing.assert_array_equal(np.asarray(w[0, 0, 0, 3:]), 0.0)
    assert float(jnp.sum(w[0])) == pytest.approx(1.0, abs=1e-6)
    # Other tokens at the padded positions change nothing.
    other = m(x.at[0, 3:].set(11), inputs_segmentation=seg)
    np.testing.assert_allclose(np.asarray(other), np.asarray(logits), rtol=1e-6, atol=1e-6)
