"""Decoding tests: KV-cache steps equal the full forward pass; greedy and beam search agree with brute force."""
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import models

V = 12


def tiny(**kw) -> models.TransformerConfig:
    fields = dict(vocab_size=V, d_model=32, num_heads=4, d_ff=64, num_encoder_layers=1, num_decoder_layers=1,
                  dropout_rate=0.0, max_len=16)
    fields.update(kw)
    return models.TransformerConfig(**fields)


def build(cfg, seed=0):
    return models.EncoderDecoder(cfg, rngs=nnx.Rngs(params=seed, dropout=seed + 1))


@functools.partial(nnx.jit, static_argnames=("max_len",))
def start(model, inputs, segmentation, max_len):
    return model.init_cache(model.encode(inputs, inputs_segmentation=segmentation), segmentation, max_len)


@nnx.jit
def step(model, tokens, cache, index):
    return model.decode_step(tokens, cache, index)


@nnx.jit
def forward(model, inputs, targets, targets_segmentation):
    return model(inputs, targets, targets_segmentation=targets_segmentation)


INPUTS = jnp.array([[5, 6, 7, 8, 1, 0, 0], [9, 4, 1, 0, 0, 0, 0], [3, 10, 11, 7, 5, 4, 1]], jnp.int32)


def test_kv_cache_steps_equal_full_forward():
    """Two layers, RoPE, GQA, post-LN, QK-LayerNorm, d_k != d_v; source padding in rows 0 and 1."""
    cfg = tiny(position="rope", num_kv_heads=2, norm="post", qk_dim=12, v_dim=4, qk_layernorm=True,
               num_decoder_layers=2)
    model = build(cfg)
    T = 6
    targets = jax.random.randint(jax.random.PRNGKey(1), (3, T), 3, V)
    seg = jnp.ones((3, T), jnp.int32)
    src_seg = (INPUTS != 0).astype(jnp.int32)
    full = forward(model, INPUTS, targets, seg)
    decoder_inputs = models.shift_right(targets, seg, cfg.bos_id)
    cache = start(model, INPUTS, src_seg, max_len=8)
    for i in range(T):
        logits, cache = step(model, decoder_inputs[:, i], cache, jnp.int32(i))
        np.testing.assert_allclose(logits, full[:, i], atol=1e-5, rtol=0)


def _greedy_by_full_forward(model, inputs, max_len):
    """Greedy decoding without a cache: rerun the whole model on the prefix at every step."""
    B = inputs.shape[0]
    out = np.zeros((B, max_len), np.int32)
    done = np.zeros(B, bool)
    for i in range(max_len):
        logits = forward(model, inputs, jnp.asarray(out), jnp.ones((B, max_len), jnp.int32))
        nxt = np.where(done, 0, np.asarray(jnp.argmax(logits[:, i], -1)))
        out[:, i] = nxt
        done |= nxt == model.cfg.eos_id
    return out


def test_greedy_matches_uncached_decoding_and_beam1():
    model = build(tiny(position="learned"), seed=3)
    got = models.greedy_decode(model, INPUTS, max_len=7)
    np.testing.assert_array_equal(got, _greedy_by_full_forward(model, INPUTS, 7))
    beam1 = models.beam_search(model, INPUTS, beam_size=1, max_len=7, length_penalty=0.0)
    np.testing.assert_array_equal(beam1, got)


def test_greedy_stops_at_eos_and_pads():
    cfg = tiny()
    model = build(cfg)
    # Make EOS the argmax at every step: final-norm outputs near 1 everywhere, a large constant EOS embedding row.
    model.decoder.final_norm.bias[...] = jnp.ones_like(model.decoder.final_norm.bias[...])
    emb = model.source_embed.embedding
    emb[...] = emb[...].at[cfg.eos_id].set(5.0)
    out = np.asarray(models.greedy_decode(model, INPUTS, max_len=7))
    assert np.all(out[:, 0] == cfg.eos_id) and np.all(out[:, 1:] == cfg.pad_id)


def _brute_force_best(model, inputs, max_len, alpha):
    """Best finished hypothesis by length-normalized log-probability over all sequences up to max_len."""
    cfg = model.cfg
    others = [t for t in range(cfg.vocab_size) if t != cfg.eos_id]
    cands = [list(p) + [cfg.eos_id] for n in range(max_len) for p in itertools.product(others, repeat=n)]
    tgt = np.zeros((len(cands), max_len), np.int32)
    seg = np.zeros((len(cands), max_len), np.int32)
    for r, c in enumerate(cands):
        tgt[r, : len(c)], seg[r, : len(c)] = c, 1
    src = jnp.repeat(inputs, len(cands), axis=0)
    logp = jax.nn.log_softmax(forward(model, src, jnp.asarray(tgt), jnp.asarray(seg)))
    tok_logp = np.take_along_axis(np.asarray(logp), tgt[..., None], -1)[..., 0] * seg
    lengths = seg.sum(1)
    scores = tok_logp.sum(1) / np.asarray(models.length_penalty_factor(lengths, alpha))
    return tgt[int(np.argmax(scores))]


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_wide_beam_is_exact_search(alpha):
    """With beam_size >= V^(max_len-1) beam search is exhaustive: it must find the brute-force optimum."""
    cfg = tiny(vocab_size=5)
    model = build(cfg, seed=5)
    inputs = jnp.array([[3, 4, 1, 0]], jnp.int32)
    max_len = 3
    got = models.beam_search(model, inputs, beam_size=25, max_len=max_len, length_penalty=alpha)
    np.testing.assert_array_equal(got[0], _brute_force_best(model, inputs, max_len, alpha))


def test_beam_search_rows_are_independent():
    model = build(tiny(), seed=1)
    both = np.asarray(models.beam_search(model, INPUTS, beam_size=3, max_len=7))
    segmentation = (INPUTS != 0).astype(jnp.int32)
    swapped = np.asarray(models.beam_search(model, INPUTS[::-1], beam_size=3, max_len=7,
                                            inputs_segmentation=segmentation[::-1]))
    np.testing.assert_array_equal(both, swapped[::-1])
    assert both.shape == (3, 7) and both.dtype == np.int32
    for row in both:  # nothing but padding after EOS
        eos = np.flatnonzero(row == model.cfg.eos_id)
        if eos.size:
            assert np.all(row[eos[0] + 1:] == model.cfg.pad_id)


def test_empty_source_rows_give_padding():
    model = build(tiny(position="learned"), seed=3)
    filler = INPUTS.at[1].set(0)
    greedy = np.asarray(models.greedy_decode(model, filler, max_len=7))
    beam = np.asarray(models.beam_search(model, filler, beam_size=1, max_len=7, length_penalty=0.0))
    assert np.all(greedy[1] == 0) and np.all(beam[1] == 0)
    full = np.asarray(models.greedy_decode(model, INPUTS, max_len=7))
    np.testing.assert_array_equal(greedy[[0, 2]], full[[0, 2]])
    np.testing.assert_array_equal(beam, greedy)


def test_decoding_errors():
    model = build(tiny())
    with pytest.raises(ValueError, match="beam_size must be a positive int; got 0"):
        models.beam_search(model, INPUTS, beam_size=0, max_len=4)
    with pytest.raises(ValueError, match="max_len must be a positive int"):
        models.greedy_decode(model, INPUTS, max_len=0)
    lm = models.DecoderOnly(tiny(), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="needs an EncoderDecoder"):
        models.greedy_decode(lm, INPUTS, max_len=4)
