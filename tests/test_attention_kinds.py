"""The checks every registered attention kind passes (``attention.available_kinds()``): a new kind module in
``attention/kinds/`` is covered here without editing this file.

For each kind: a masked key carrying value 300 never reaches the output (padding and causal masks); the
output at position t has zero gradient with respect to later keys and values; statistics come back exactly when
the kind supports them; its parameters are per head and permuting the heads permutes the output; calls without
a key are deterministic; each refused feature is refused by one check with the kind's reason; a model with the
kind trains (finite gradients) and, when the kind supports KV-cache decoding, cached steps equal the full
forward pass.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attention as attn
import models
from models.interventions import LayerIntervention

KINDS = attn.available_kinds()
B, T, H, HKV, D = 2, 6, 4, 2, 8


def _inputs(seed=0):
    r = np.random.default_rng(seed)
    q, k, v = (jnp.asarray(r.normal(size=(B, T, h, D)), jnp.float32) for h in (H, HKV, HKV))
    return q, k, v


def _params(kind, seed=0):
    spec = attn.get_kind(kind)
    return {} if spec.init is None else spec.init(jax.random.key(seed), H, D, jnp.float32, True)


def _call(kind, q, k, v, mask, *, params=None, rng=None, return_stats=False):
    call = attn.KindCall(params=_params(kind) if params is None else params, scale=D ** -0.5, rng=rng,
                         return_stats=return_stats)
    return attn.get_kind(kind).fn(q, k, v, mask, call)


def test_the_registry_lists_the_kinds_and_refuses_in_one_place():
    assert {"softmax", "additive", "linear", "hard"} <= set(KINDS) and KINDS[0] == "softmax"
    assert attn.kind_refusal("softmax", *attn.FEATURES) is None
    assert "does not support KV-cache decoding" in attn.kind_refusal("linear", "kv_cache")
    with pytest.raises(ValueError, match=r"attention kind 'sparse' is not registered; expected one of"):
        attn.check_kind("sparse")
    with pytest.raises(ValueError, match=r"lists unknown features \['beam'\]"):
        attn.register_kind(attn.Kind(name="x", fn=lambda *a: a, unsupported={"beam": "no"}))
    with pytest.raises(ValueError, match=r"attention_kind must be one of"):
        models.TransformerConfig(vocab_size=8, d_model=8, num_heads=2, attention_kind="sparse")


@pytest.mark.parametrize("kind", KINDS)
def test_a_masked_key_never_reaches_the_output(kind):
    q, k, v = _inputs()
    v = v.at[:, 4].set(300.0)  # key 4: padding in row 0, and later than queries 0..3 in both rows
    kv_seg = jnp.array([[1, 1, 1, 1, 0, 1], [1] * T], jnp.int32)
    mask = attn.Mask(causal=True, q_segment_ids=jnp.ones((B, T), jnp.int32), kv_segment_ids=kv_seg)
    out, _ = _call(kind, q, k, v, mask)
    out = np.asarray(out)
    assert np.all(np.isfinite(out)) and out.shape == (B, T, H, D)
    assert np.abs(out[0]).max() < 50 and np.abs(out[1, :4]).max() < 50


@pytest.mark.parametrize("kind", KINDS)
def test_no_gradient_flows_from_later_keys(kind):
    q, k, v = _inputs(1)
    t = 2

    def head(k, v):
        out, _ = _call(kind, q, k, v, attn.Mask(causal=True))
        return jnp.sum(out[:, t])

    gk, gv = jax.grad(head, argnums=(0, 1))(k, v)
    assert np.all(np.asarray(gk[:, t + 1:]) == 0) and np.all(np.asarray(gv[:, t + 1:]) == 0)
    assert np.all(np.isfinite(np.asarray(gk))) and np.abs(np.asarray(gv[:, : t + 1])).max() > 0


@pytest.mark.parametrize("kind", KINDS)
def test_statistics_come_back_when_the_kind_has_them(kind):
    q, k, v = _inputs(2)
    out, stats = _call(kind, q, k, v, attn.Mask(causal=True), return_stats=True)
    if attn.kind_refusal(kind, "statistics"):
        assert stats is None
    else:
        assert np.asarray(stats.entropy).shape == (B, H, T)
        assert np.all(np.isfinite(np.asarray(stats.entropy)[np.asarray(stats.valid)]))


@pytest.mark.parametrize("kind", KINDS)
def test_parameters_are_per_head_and_heads_permute(kind):
    params = _params(kind, seed=3)
    assert all(p.shape[0] == H for p in params.values())
    if attn.get_kind(kind).random:  # its noise is drawn per head index: not permutation-equivariant
        return
    q, k, v = _inputs(3)
    perm_kv = np.array([1, 0])
    perm_q = np.array([perm_kv[h // 2] * 2 + (1 - h % 2) for h in range(H)])
    out, _ = _call(kind, q, k, v, attn.Mask(causal=True), params=params)
    p_out, _ = _call(kind, q[:, :, perm_q], k[:, :, perm_kv], v[:, :, perm_kv], attn.Mask(causal=True),
                     params={n: p[perm_q] for n, p in params.items()})
    np.testing.assert_allclose(np.asarray(p_out), np.asarray(out)[:, :, perm_q], atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_calls_without_a_key_are_deterministic_and_random_kinds_use_theirs(kind):
    q, k, v = _inputs(4)
    a, _ = _call(kind, q, k, v, attn.Mask(causal=True))
    b, _ = _call(kind, q, k, v, attn.Mask(causal=True))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    if attn.get_kind(kind).random:
        draws = [np.asarray(_call(kind, q, k, v, attn.Mask(), rng=jax.random.key(s))[0]) for s in (1, 2)]
        assert not np.array_equal(*draws)


def _layer(kind, **kw):
    return models.MultiHeadAttention(16, H, num_kv_heads=HKV, qk_dim=D, v_dim=D, kind=kind,
                                     rngs=nnx.Rngs(params=0, dropout=1), **kw)


@pytest.mark.parametrize("kind", KINDS)
def test_refused_features_are_refused_with_the_kinds_reason(kind):
    refusal = attn.kind_refusal(kind, "dropout")
    if refusal:
        with pytest.raises(ValueError, match=f"MultiHeadAttention: attention kind '{kind}' does not support "
                                             f"attention dropout"):
            _layer(kind, dropout_rate=0.1)
    else:
        _layer(kind, dropout_rate=0.1)
    layer = _layer(kind)
    q, k, v = _inputs(5)
    override = LayerIntervention(override=models.WeightOverride(group="decoder_self", layer=0, kind="uniform"))
    if attn.kind_refusal(kind, "weight_override"):
        with pytest.raises(ValueError, match=f"attention kind '{kind}' does not support attention-weight"):
            layer.attend(q, k, v, attn.Mask(causal=True), intervention=override)
    else:
        out, _ = layer.attend(q, k, v, attn.Mask(causal=True), intervention=override)
        assert np.all(np.isfinite(np.asarray(out)))


def _tiny(kind, **kw):
    return models.TransformerConfig(vocab_size=12, d_model=16, num_heads=H, num_kv_heads=HKV, d_ff=32,
                                    num_encoder_layers=1, num_decoder_layers=1, dropout_rate=0.0, max_len=16,
                                    attention_kind=kind, **kw)


@pytest.mark.parametrize("kind", KINDS)
def test_a_model_with_the_kind_trains_and_decodes(kind):
    cfg = _tiny(kind)
    model = models.DecoderOnly(cfg, rngs=nnx.Rngs(params=0, dropout=1))
    tokens = jax.random.randint(jax.random.key(0), (B, T), 3, 12)

    def loss(model):
        logits = model(tokens, deterministic=False)
        return jnp.mean(jax.nn.logsumexp(logits, -1) - jnp.take_along_axis(logits, tokens[..., None], -1)[..., 0])

    value, grads = nnx.value_and_grad(loss)(model)
    assert np.isfinite(float(value))
    assert all(np.all(np.isfinite(np.asarray(g))) for g in jax.tree.leaves(grads))
    if attn.kind_refusal(kind, "kv_cache"):
        return
    ed = models.EncoderDecoder(cfg, rngs=nnx.Rngs(params=0, dropout=1))
    src = jnp.array([[5, 6, 7, 1, 0, 0], [9, 4, 8, 3, 7, 1]], jnp.int32)
    src_seg = (src != 0).astype(jnp.int32)
    seg = jnp.ones((B, T), jnp.int32)
    full = ed(src, tokens, inputs_segmentation=src_seg, targets_segmentation=seg)
    cache = ed.init_cache(ed.encode(src, inputs_segmentation=src_seg), src_seg, 8)
    dec_in = models.shift_right(tokens, seg, cfg.bos_id)
    for i in range(T):
        logits, cache = ed.decode_step(dec_in[:, i], cache, jnp.int32(i))
        assert np.all(np.isfinite(np.asarray(logits)))
        if not attn.get_kind(kind).random:  # a random kind's noise depends on the call's shape
            np.testing.assert_allclose(np.asarray(logits), np.asarray(full[:, i]), atol=1e-4, rtol=0)
