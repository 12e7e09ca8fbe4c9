"""Model features the pretrained families need (no torch): gated MLP, RoPE scaling, token types, embedding norm,
final logits bias, EncoderOnly heads, DecoderOnly KV-cache decoding."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import models
from models.layers import rope_frequencies


def _cfg(**kw):
    base = dict(vocab_size=40, d_model=32, num_heads=4, d_ff=48, num_encoder_layers=2, num_decoder_layers=2,
                dropout_rate=0.0, attention_impl="reference")
    base.update(kw)
    return models.TransformerConfig(**base)


def test_gated_mlp_is_swiglu():
    cfg = _cfg(gated_mlp=True, activation="silu", use_bias=False)
    mlp = models.MLP(cfg, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(1), (2, 3, 32))
    wi, wg, wo = mlp.wi.kernel[...], mlp.wg.kernel[...], mlp.wo.kernel[...]
    np.testing.assert_allclose(mlp(x), (jax.nn.silu(x @ wi) * (x @ wg)) @ wo, rtol=1e-5, atol=1e-6)


def test_exact_gelu_differs_from_tanh_gelu():
    x = jnp.linspace(-3, 3, 7)
    from models.layers import activation

    np.testing.assert_allclose(activation("gelu_exact")(x), jax.nn.gelu(x, approximate=False))
    assert not np.allclose(activation("gelu")(x), activation("gelu_exact")(x), atol=1e-5)


def test_rope_scaling_frequencies():
    plain = rope_frequencies(64, 10000.0)
    np.testing.assert_allclose(rope_frequencies(64, 10000.0, (("factor", 4.0), ("rope_type", "linear"))), plain / 4)
    l3 = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
              original_max_position_embeddings=64)
    scaled = rope_frequencies(64, 10000.0, tuple(l3.items()))
    wavelen = 2 * np.pi / np.asarray(plain)
    high, low = wavelen < 64 / 4, wavelen > 64
    np.testing.assert_allclose(scaled[high], plain[high])
    np.testing.assert_allclose(scaled[low], plain[low] / 8, rtol=1e-6)
    mid = ~high & ~low
    assert mid.any() and np.all((scaled[mid] < plain[mid]) & (scaled[mid] > plain[mid] / 8))


@pytest.mark.parametrize("bad,match", [
    ({"rope_scaling": {"rope_type": "yarn", "factor": 2.0}}, "rope_type='yarn'"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 2.0}}, "low_freq_factor"),
    ({"token_types": -1}, "token_types"),
    ({"qkv_bias": "yes"}, "qkv_bias"),
    ({"gated_mlp": 1}, "gated_mlp"),
])
def test_config_rejects_bad_family_fields(bad, match):
    with pytest.raises(ValueError, match=match):
        _cfg(**bad)


def test_config_round_trips_new_fields():
    cfg = _cfg(rope_scaling={"rope_type": "linear", "factor": 2.0}, qkv_bias=True, use_bias=False, token_types=2,
               embed_norm=True, final_logits_bias=True, gated_mlp=True)
    assert models.TransformerConfig.from_dict(cfg.to_dict()) == cfg
    m = models.DecoderOnly(cfg.replace(position="rope"), rngs=nnx.Rngs(0))
    sa = m.decoder.layers[0].self_attention
    assert sa.query.bias is not None and sa.out.bias is None and m.decoder.layers[0].mlp.wi.bias is None


def test_final_logits_bias_is_added():
    cfg = _cfg(final_logits_bias=True)
    m = models.EncoderDecoder(cfg, rngs=nnx.Rngs(0))
    x = jnp.array([[5, 6, 7, 1]])
    before = m(x, x)
    m.logits_bias[...] = jnp.arange(40, dtype=jnp.float32)
    np.testing.assert_allclose(m(x, x) - before, jnp.broadcast_to(jnp.arange(40.0), before.shape), atol=1e-4)


@pytest.mark.parametrize("position", ["learned", "rope"])
def test_decoder_only_cache_equals_full_forward(position):
    cfg = _cfg(position=position, norm_type="rmsnorm", gated_mlp=True, activation="silu",
               rope_scaling={"rope_type": "linear", "factor": 2.0} if position == "rope" else {})
    m = models.DecoderOnly(cfg, rngs=nnx.Rngs(0))
    tokens = jax.random.randint(jax.random.key(2), (2, 7), 3, 40)
    full = m(tokens)
    cache = m.init_cache(2, 7)
    prefix, cache = m.decode_step(tokens[:, :4], cache, 0)  # a prompt in one pass
    steps = [prefix]
    for i in range(4, 7):
        logits, cache = m.decode_step(tokens[:, i], cache, i)
        steps.append(logits[:, None])
    np.testing.assert_allclose(jnp.concatenate(steps, 1), full, rtol=1e-4, atol=1e-4)


def test_lm_greedy_and_beam_decode():
    cfg = _cfg(position="learned", eos_id=1)
    m = models.DecoderOnly(cfg, rngs=nnx.Rngs(3))
    prompt = jnp.array([[4, 9, 12], [7, 7, 20]])
    out = np.asarray(models.lm_greedy_decode(m, prompt, max_new_tokens=6))
    seq = np.asarray(prompt)
    for i in range(6):  # naive greedy with full forwards
        nxt = np.argmax(np.asarray(m(jnp.asarray(seq)))[:, -1], -1)
        seq = np.concatenate([seq, nxt[:, None]], 1)
    expect = seq[:, 3:].copy()
    for row in expect:  # pad after the first EOS, as the decoder does
        hit = np.nonzero(row == cfg.eos_id)[0]
        if hit.size:
            row[hit[0] + 1:] = cfg.pad_id
    np.testing.assert_array_equal(out, expect)
    beam1 = models.lm_beam_search(m, prompt, beam_size=1, max_new_tokens=6, length_penalty=0.0)
    np.testing.assert_array_equal(beam1, out)
    assert models.lm_beam_search(m, prompt, beam_size=4, max_new_tokens=6).shape == (2, 6)
    with pytest.raises(ValueError, match="DecoderOnly"):
        models.lm_greedy_decode(models.EncoderDecoder(cfg, rngs=nnx.Rngs(0)), prompt, max_new_tokens=2)


def test_encoder_only_heads_and_padding():
    cfg = _cfg(position="learned", norm="post", token_types=2, embed_norm=True, activation="gelu_exact",
               num_decoder_layers=0)
    m = models.EncoderOnly(cfg, num_classes=3, rngs=nnx.Rngs(0))
    x = jnp.array([[5, 6, 7, 8, 0, 0], [9, 10, 11, 12, 13, 14]])
    types = jnp.array([[0, 0, 1, 1, 0, 0], [0] * 6])
    logits = m(x, token_types=types)
    assert logits.shape == (2, 6, 40) and m.classify(x).shape == (2, 3)
    other = x.at[0, 4:].set(0)  # padding tokens are pad_id; real positions must not see them
    np.testing.assert_allclose(m(other, token_types=types)[0, :4], logits[0, :4], atol=1e-5)
    assert not np.allclose(m(x)[0, :4], logits[0, :4], atol=1e-4)  # token types matter
    _, stats = m(x, return_stats=True)
    assert len(stats["encoder_self"]) == 2 and models.head_shapes(m) == {"encoder_self": (2, 4)}
    with pytest.raises(ValueError, match="needs a head"):
        models.EncoderOnly(cfg, lm_head=False, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="classification head"):
        models.EncoderOnly(cfg, rngs=nnx.Rngs(0)).classify(x)
