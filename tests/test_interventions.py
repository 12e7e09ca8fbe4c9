"""Interventions on attention: head masks, weight overrides, and the uniform-attention config field."""
import functools
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attention
import engine
import models
from models.interventions import LayerIntervention, permute_visible
from studies.inprocess import load

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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

    grads = jax.jit(jax.grad(loss))(unit)
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
    c.train.stats_every = 1
    c.health.uniform_after_checks = 0  # a uniform layer is flagged from the first check on
    r = engine.run(c)
    assert r["step"] == 3 and math.isfinite(r["train/loss"])
    pool = [rec["pool"] for _, rec in r["attention"]]
    assert pool and all(np.allclose(np.asarray(p["norm_entropy"]), 1.0, atol=1e-5) for p in pool)
    # The health monitor does not warn about a group frozen to uniform on purpose; it does check it otherwise.
    assert not [w for w in r["health_warnings"] if w.group == "pool"]
    c.model.uniform_attention_groups = ()
    c.health.uniform_ratio = 0.0  # every head counts as "near uniform": the check itself runs on pool
    assert [w for w in engine.run(c)["health_warnings"] if w.group == "pool" and w.kind == "uniform_attention"]


# ------------------------------------------------------------------------------ interventions in decoding
FORCED = jnp.array([[5, 6, 7, 8], [8, 9, 10, 11]])  # targets without padding: every position is scored


def stepwise_logits(model, iv, targets=FORCED):
    """Logits [B, T, V] of KV-cache decoding (``decode_step``) fed the teacher-forced decoder inputs, with
    ``iv`` at the encoder and at every step."""
    seg = (INPUTS != 0).astype(jnp.int32)
    cache = model.init_cache(model.encode(INPUTS, inputs_segmentation=seg, interventions=iv), seg, targets.shape[1])
    decoder_inputs = models.shift_right(targets, None, model.cfg.bos_id)
    out = []
    for i in range(targets.shape[1]):
        logits, cache = model.decode_step(decoder_inputs[:, i], cache, jnp.int32(i), iv)
        out.append(logits)
    return jnp.stack(out, axis=1)


def masked(model, group, layer, head) -> models.Interventions:
    mask = models.unit_head_mask(model)
    mask[group] = mask[group].at[layer, head].set(0.0)
    return models.Interventions(head_mask=mask)


@pytest.mark.parametrize("backend", ["reference", "xla"])
@pytest.mark.parametrize("group,layer,head", [("encoder_self", 0, 1), ("decoder_self", 1, 2), ("cross", 0, 3)])
def test_decode_steps_with_head_mask_equal_teacher_forced(backend, group, layer, head):
    m = build(tiny(attention_impl=backend))
    iv = masked(m, group, layer, head)
    full = m(INPUTS, FORCED, interventions=iv)
    np.testing.assert_allclose(stepwise_logits(m, iv), full, atol=1e-5)
    assert float(jnp.abs(full - m(INPUTS, FORCED)).max()) > 1e-4  # the mask did something


def _row_softmax(key, shape, visible):
    return jnp.where(visible, jax.nn.softmax(jnp.where(visible, jax.random.normal(key, shape), -1e9), -1), 0.0)


@pytest.mark.parametrize("name", ["cross_uniform", "cross_uniform_heads", "self_uniform", "cross_given",
                                  "self_given", "cross_function"])
def test_decode_step_overrides_equal_teacher_forced(name):
    m = build(tiny())
    B, H, T, S = 2, 4, FORCED.shape[1], INPUTS.shape[1]
    src_visible = (INPUTS != 0)[:, None, None, :]
    causal = jnp.tril(jnp.ones((T, T), bool))
    override = {
        "cross_uniform": models.WeightOverride("cross", 1, "uniform"),
        "cross_uniform_heads": models.WeightOverride("cross", 0, "uniform", heads=(0, 2)),
        "self_uniform": models.WeightOverride("decoder_self", 0, "uniform"),
        "cross_given": models.WeightOverride("cross", 1, "given",
                                             value=_row_softmax(jax.random.key(2), (B, H, T, S), src_visible)),
        "self_given": models.WeightOverride("decoder_self", 1, "given",
                                            value=_row_softmax(jax.random.key(3), (1, 1, T, T), causal)),
        "cross_function": models.WeightOverride("cross", 0, "function", fn=lambda p, visible: p ** 2),
    }[name]
    iv = models.Interventions(overrides=(override,))
    full = m(INPUTS, FORCED, interventions=iv)
    np.testing.assert_allclose(stepwise_logits(m, iv), full, atol=1e-5)
    assert float(jnp.abs(full - m(INPUTS, FORCED)).max()) > 1e-4


def test_decode_step_permutation_shuffles_anew_each_step():
    m = build(tiny())
    iv = models.Interventions(overrides=(models.WeightOverride("cross", 0, "permute", key=jax.random.key(0)),))
    got = stepwise_logits(m, iv)
    assert np.all(np.isfinite(got)) and float(jnp.abs(got - m(INPUTS, FORCED)).max()) > 1e-4


def _greedy_by_full_forward(model, iv, max_len):
    """Greedy decoding without a cache: the whole model (with ``iv``) on the prefix at every step."""
    B = INPUTS.shape[0]
    out = np.zeros((B, max_len), np.int32)
    done = np.zeros(B, bool)
    for i in range(max_len):
        logits = model(INPUTS, jnp.asarray(out), targets_segmentation=jnp.ones((B, max_len), jnp.int32),
                       interventions=iv)
        nxt = np.where(done, model.cfg.pad_id, np.asarray(jnp.argmax(logits[:, i], -1)))
        out[:, i] = nxt
        done |= nxt == model.cfg.eos_id
    return out


def test_greedy_with_identity_interventions_equals_plain_greedy():
    m = build(tiny())
    plain = models.greedy_decode(m, INPUTS, max_len=6)
    iv = models.Interventions(head_mask=models.unit_head_mask(m),
                              overrides=(models.WeightOverride("cross", 1, "function", fn=identity),
                                         models.WeightOverride("decoder_self", 0, "function", fn=identity)))
    np.testing.assert_array_equal(models.greedy_decode(m, INPUTS, max_len=6, interventions=iv), plain)
    np.testing.assert_array_equal(models.beam_search(m, INPUTS, beam_size=2, max_len=6, interventions=iv),
                                  models.beam_search(m, INPUTS, beam_size=2, max_len=6))


@pytest.mark.parametrize("name", ["encoder_mask", "cross_mask", "cross_uniform"])
def test_greedy_and_beam1_with_interventions_equal_uncached_greedy(name):
    m = build(tiny())
    iv = {"encoder_mask": masked(m, "encoder_self", 1, 0), "cross_mask": masked(m, "cross", 1, 1),
          "cross_uniform": models.Interventions(overrides=(models.WeightOverride("cross", 0, "uniform"),))}[name]
    got = models.greedy_decode(m, INPUTS, max_len=6, interventions=iv)
    np.testing.assert_array_equal(got, _greedy_by_full_forward(m, iv, 6))
    beam1 = models.beam_search(m, INPUTS, beam_size=1, max_len=6, length_penalty=0.0, interventions=iv)
    np.testing.assert_array_equal(beam1, got)


def test_decoding_reuses_its_program_for_new_mask_values():
    from models.decoding import _greedy

    m = build(tiny())
    models.greedy_decode(m, INPUTS, max_len=5, interventions=masked(m, "cross", 0, 0))
    size = _greedy._cache_size()
    models.greedy_decode(m, INPUTS, max_len=5, interventions=masked(m, "decoder_self", 1, 3))
    assert _greedy._cache_size() == size


def test_beam_search_repeats_given_values_per_beam():
    m = build(tiny())
    S, L = INPUTS.shape[1], 5
    value = _row_softmax(jax.random.key(4), (2, 4, L, S), (INPUTS != 0)[:, None, None, :])

    def beam(inputs, v):
        iv = models.Interventions(overrides=(models.WeightOverride("cross", 1, "given", value=v),))
        return models.beam_search(m, inputs, beam_size=3, max_len=L, interventions=iv)

    both = beam(INPUTS, value)
    for b in range(2):
        np.testing.assert_array_equal(both[b], beam(INPUTS[b:b + 1], value[b:b + 1])[0])


def test_decoding_rejects_bad_interventions():
    m = build(tiny())
    with pytest.raises(ValueError, match=r"expected \[layers, heads\]"):
        models.greedy_decode(m, INPUTS, max_len=4, interventions=models.Interventions(head_mask={"cross": jnp.ones(4)}))
    with pytest.raises(ValueError, match="must be a models.Interventions"):
        models.greedy_decode(m, INPUTS, max_len=4, interventions={"cross": jnp.ones((2, 4))})


def test_uniform_cross_model_decodes_like_a_uniform_override():
    """``uniform_attention_groups=("cross",)`` (the trained baseline) and a uniform cross override in every
    layer of the same parameters are one computation, teacher forced and in KV-cache decoding."""
    m = build(tiny())
    frozen = nnx.merge(nnx.split(build(tiny(uniform_attention_groups=("cross",))))[0], nnx.split(m)[1])
    iv = models.Interventions(overrides=tuple(models.WeightOverride("cross", l, "uniform") for l in range(2)))
    np.testing.assert_allclose(frozen(INPUTS, FORCED), m(INPUTS, FORCED, interventions=iv), atol=1e-6)
    np.testing.assert_allclose(stepwise_logits(frozen, None), stepwise_logits(m, iv), atol=1e-6)
    np.testing.assert_array_equal(models.greedy_decode(frozen, INPUTS, max_len=6),
                                  models.greedy_decode(m, INPUTS, max_len=6, interventions=iv))
