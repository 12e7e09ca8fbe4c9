"""Interventions on attention: head masks, weight overrides, and the uniform-attention config field."""
import functools
import math
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attention
import engine
import models
from models.interventions import LayerIntervention, permute_visible

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))

from _runs import load  # noqa: E402

V = 30
INPUTS = jnp.array([[5, 6, 7, 8, 0, 0], [9, 10, 11, 12, 13, 14]])  # row 0 has two padding positions
TARGETS = jnp.array([[5, 6, 7, 0], [8, 9, 10, 11]])


def tiny(**kw) -> models.TransformerConfig:
    fields = dict(vocab_size=V, d_model=16, num_heads=4, d_ff=32, num_encoder_layers=2, num_decoder_layers=2,
                  dropout_rate=0.0, max_len=16, attention_impl="reference")
    fields.update(kw)
    return models.TransformerConfig(**fields)


@functools.lru_cache(maxsize=None)
def build(cfg, cls=models.EncoderDecoder):
    if cls is models.EncoderClassifier:
        return cls(cfg, 3, rngs=nnx.Rngs(0))
    return cls(cfg, rngs=nnx.Rngs(0))


def translate(model, interventions=None, inputs=INPUTS):
    return model(inputs, TARGETS, interventions=interventions)


def identity(p, visible):
    return p


@pytest.mark.parametrize("group,layer", [("encoder_self", 0), ("decoder_self", 1), ("cross", 1)])
def test_identity_interventions_change_nothing(group, layer):
    m = build(tiny())
    base = translate(m)
    ones = models.Interventions(head_mask=models.unit_head_mask(m))
    np.testing.assert_array_equal(translate(m, ones), base)
    same = models.Interventions(overrides=(models.WeightOverride(group, layer, "function", fn=identity),))
    np.testing.assert_allclose(translate(m, same), base, atol=1e-6)
    # a permutation of a one-key row is the identity, and so is a permutation applied to no head
    no_heads = models.Interventions(overrides=(models.WeightOverride(group, layer, "uniform", heads=()),))
    np.testing.assert_allclose(translate(m, no_heads), base, atol=1e-6)


def test_identity_on_the_classifier_pool():
    m = build(tiny(num_decoder_layers=0), models.EncoderClassifier)
    base = m(INPUTS)
    iv = models.Interventions(head_mask=models.unit_head_mask(m),
                              overrides=(models.WeightOverride("pool", 0, "function", fn=identity),))
    np.testing.assert_allclose(m(INPUTS, interventions=iv), base, atol=1e-6)
    assert set(models.unit_head_mask(m)) == {"encoder_self", "pool"}


def test_uniform_override_is_mean_of_values_over_visible_keys():
    mha = models.MultiHeadAttention(16, 4, qk_dim=4, v_dim=4, rngs=nnx.Rngs(0), implementation="reference")
    x = jax.random.normal(jax.random.key(1), (2, 6, 16))
    seg = (INPUTS != 0).astype(jnp.int32)
    mask = attention.Mask(q_segment_ids=seg, kv_segment_ids=seg)
    q = mha.queries(x)
    k, v = mha.keys_values(x)
    override = models.WeightOverride("encoder_self", 0, "uniform")
    out, stats = mha.attend(q, k, v, mask, return_stats=True, intervention=LayerIntervention(override=override))
    visible = (seg > 0).astype(jnp.float32)  # [B, Tk]
    mean_v = jnp.einsum("bk,bkhd->bhd", visible, v) / visible.sum(-1)[:, None, None]  # [B, H, Dv]
    expected = mha.out(jnp.broadcast_to(mean_v[:, None], v.shape))
    real = seg[:, :, None] > 0
    np.testing.assert_allclose(jnp.where(real, out, 0), jnp.where(real, expected, 0), atol=1e-5)
    w = np.asarray(stats.weights)  # [B, H, Tq, Tk]
    np.testing.assert_allclose(w[0, :, :4, :4], 0.25, atol=1e-6)
    assert np.all(w[0, :, :, 4:] == 0)


@pytest.mark.parametrize("backend", ["reference", "xla"])
@pytest.mark.parametrize("group,layer,head", [("encoder_self", 1, 2), ("decoder_self", 0, 1), ("cross", 1, 3)])
def test_zero_head_mask_equals_zeroed_output_projection_rows(backend, group, layer, head):
    cfg = tiny(attention_impl=backend)
    m = build(cfg)
    mask = models.unit_head_mask(m)
    mask[group] = mask[group].at[layer, head].set(0.0)
    masked = translate(m, models.Interventions(head_mask=mask))
    graphdef, state = nnx.split(m)
    edited = nnx.merge(graphdef, jax.tree.map(lambda x: x, state))
    stack = {"encoder_self": edited.encoder.layers, "decoder_self": edited.decoder.layers,
             "cross": edited.decoder.layers}[group]
    mha = stack[layer].cross_attention if group == "cross" else stack[layer].self_attention
    mha.out.kernel[...] = mha.out.kernel[...].at[head].set(0.0)  # kernel [H, Dv, d_model]
    np.testing.assert_allclose(masked, translate(edited), atol=1e-5)
    assert float(jnp.abs(masked - translate(m)).max()) > 1e-4  # the head did contribute


def test_head_mask_gradient_exists_and_is_finite():
    m = build(tiny())
    unit = models.unit_head_mask(m)

    def loss(mask):
        logits = translate(m, models.Interventions(head_mask=mask))
        return models.cross_entropy(logits, TARGETS, (TARGETS != 0).astype(jnp.float32))[0]

    grads = jax.grad(loss)(unit)
    assert set(grads) == {"encoder_self", "decoder_self", "cross"}
    for g in grads.values():
        assert g.shape == (2, 4) and np.all(np.isfinite(g)) and np.any(np.abs(g) > 0)


def test_overrides_respect_padding():
    m = build(tiny())
    other_pad = INPUTS.at[0, 4:].set(3)  # different token ids at the padding positions of row 0
    seg = (INPUTS != 0).astype(jnp.int32)
    key = jax.random.key(0)
    for override in (models.WeightOverride("cross", 0, "permute", key=key),
                     models.WeightOverride("encoder_self", 1, "uniform"),
                     models.WeightOverride("cross", 1, "given", value=jnp.ones((1, 1, 1, 6)))):
        iv = models.Interventions(overrides=(override,))
        a = m(INPUTS, TARGETS, inputs_segmentation=seg, interventions=iv)
        b = m(other_pad, TARGETS, inputs_segmentation=seg, interventions=iv)
        np.testing.assert_allclose(a[0, :3], b[0, :3], atol=1e-5, err_msg=override.kind)
        _, stats = m(INPUTS, TARGETS, inputs_segmentation=seg, interventions=iv, return_stats=True)
        w = np.asarray(stats[override.group][override.layer].weights)
        assert np.all(w[0, :, :, 4:] == 0), override.kind


def test_permutation_shuffles_each_row_among_visible_keys():
    p = jax.nn.softmax(jax.random.normal(jax.random.key(0), (3, 2, 4, 7)), axis=-1)
    visible = jnp.arange(7)[None, None, None, :] < jnp.array([7, 5, 1])[:, None, None, None]
    visible = jnp.broadcast_to(visible, p.shape)
    p = jnp.where(visible, p, 0.0)
    out = permute_visible(p, visible, jax.random.key(1))
    np.testing.assert_allclose(np.sort(out, axis=-1), np.sort(p, axis=-1), atol=0)
    assert np.all(np.asarray(out)[~np.asarray(visible)] == 0)
    assert not np.allclose(out[0], p[0])  # a 7-key row is almost surely moved
    np.testing.assert_array_equal(out[2], p[2])  # a one-key row cannot move


def test_bad_interventions_raise_one_clear_error():
    m = build(tiny())
    with pytest.raises(ValueError, match="group 'decoder'"):
        models.WeightOverride("decoder", 0, "uniform")
    with pytest.raises(ValueError, match="layer 5 out of range"):
        translate(m, models.Interventions(overrides=(models.WeightOverride("cross", 5, "uniform"),)))
    with pytest.raises(ValueError, match=r"expected \[layers, heads\]"):
        translate(m, models.Interventions(head_mask={"cross": jnp.ones((2, 3))}))
    with pytest.raises(ValueError, match="no 'cross' attention"):
        lm = build(tiny(num_encoder_layers=0), models.DecoderOnly)
        lm(TARGETS, interventions=models.Interventions(head_mask={"cross": jnp.ones((2, 4))}))
    with pytest.raises(ValueError, match="needs key"):
        models.WeightOverride("cross", 0, "permute")
    with pytest.raises(ValueError, match="uniform_attention_groups"):
        tiny(uniform_attention_groups=("pooling",))


def test_uniform_attention_groups_freeze_weights():
    m = build(tiny(num_decoder_layers=0, uniform_attention_groups=("encoder_self", "pool")), models.EncoderClassifier)
    _, stats = m(INPUTS, return_stats=True)
    pool = np.asarray(stats["pool"][0].weights)  # [B, 1, 1, S]
    np.testing.assert_allclose(pool[0, 0, 0, :4], 0.25, atol=1e-6)
    np.testing.assert_allclose(pool[1, 0, 0], 1 / 6, atol=1e-6)
    enc = np.asarray(stats["encoder_self"][1].weights)
    np.testing.assert_allclose(enc[1], 1 / 6, atol=1e-6)


def test_uniform_attention_trains_through_the_engine():
    c = load(os.path.join(REPO, "configs", "classification.py") + ":quick")
    c.train.num_steps = 3
    c.model.uniform_attention_groups = ("pool",)
    r = engine.run(c)
    assert r["step"] == 3 and math.isfinite(r["train/loss"])
    pool = [rec["pool"] for _, rec in r["attention"]]
    assert pool and all(np.allclose(np.asarray(p["norm_entropy"]), 1.0, atol=1e-5) for p in pool)
