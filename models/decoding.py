"""Greedy and beam-search decoding for ``EncoderDecoder`` (and, continuing a prompt, ``DecoderOnly``:
``lm_greedy_decode`` / ``lm_beam_search``) with a KV cache, jit-compiled end to end.

Both return ``tokens [B, max_len]`` int32: the generated target tokens (no BOS), ending with EOS when the
model emitted it, then ``pad_id``. The self-attention cache holds ``max_len`` positions; cross-attention
keys/values are computed once from the encoder output; source padding is masked at every step.
``interventions`` (``models.Interventions``: head masks, attention-weight overrides) apply to the encoder
("encoder_self") and at every step ("decoder_self", "cross"; see ``models.transformer.step_intervention``);
they are a traced argument of the compiled loop, so new mask values reuse the compiled program.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from models.interventions import Interventions, head_shapes
from models.transformer import DecodeCache, DecoderOnly, EncoderDecoder

NEG_INF = -1.0e9


def _check(model, inputs, max_len: int, interventions: Optional[Interventions]) -> None:
    if not isinstance(model, EncoderDecoder):
        raise ValueError(f"decoding needs an EncoderDecoder model; got {type(model).__name__}")
    if interventions is not None:
        if not isinstance(interventions, Interventions):
            raise ValueError(f"interventions must be a models.Interventions or None; got "
                             f"{type(interventions).__name__}")
        interventions.check(head_shapes(model))
    if getattr(inputs, "ndim", None) != 2:
        raise ValueError(f"inputs must be a [batch, length] int array; got shape {getattr(inputs, 'shape', None)}")
    if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len <= 0:
        raise ValueError(f"max_len must be a positive int; got {max_len!r}")


def _source_segmentation(model: EncoderDecoder, inputs, inputs_segmentation):
    if inputs_segmentation is None:
        return (inputs != model.cfg.pad_id).astype(jnp.int32)
    return jnp.asarray(inputs_segmentation).astype(jnp.int32)


def _encode_and_cache(model: EncoderDecoder, inputs, seg, max_len: int, interventions) -> DecodeCache:
    encoded = model.encode(inputs, inputs_segmentation=seg, interventions=interventions)
    return model.init_cache(encoded, seg, max_len)


def greedy_decode(
    model: EncoderDecoder,
    inputs: jax.Array,
    *,
    max_len: int,
    inputs_segmentation: Optional[jax.Array] = None,
    interventions: Optional[Interventions] = None,
) -> jax.Array:
    """Greedy decoding. inputs: [B, S] source ids, one example per row (padding = pad_id, or give
    ``inputs_segmentation`` [B, S] with 0 = padding) -> tokens [B, max_len] int32. Stops early once every row
    has emitted EOS; rows whose source is all padding (batch filler) give only ``pad_id`` and do not hold
    the loop up. ``interventions``: see the module docstring."""
    _check(model, inputs, max_len, interventions)
    seg = _source_segmentation(model, inputs, inputs_segmentation)
    graphdef, state = nnx.split(model)
    return _greedy(graphdef, state, jnp.asarray(inputs), seg, interventions, max_len=max_len)


@functools.partial(jax.jit, static_argnames=("graphdef", "max_len"))
def _greedy(graphdef, state, inputs, seg, interventions, *, max_len: int):
    model = nnx.merge(graphdef, state)
    cache = _encode_and_cache(model, inputs, seg, max_len, interventions)
    bos = jnp.full((inputs.shape[0],), model.cfg.bos_id, jnp.int32)
    # rows with an empty source (batch filler) are done from the start
    return _greedy_loop(model, cache, bos, 0, max_len, ~jnp.any(seg != 0, axis=1), interventions)


def _greedy_loop(model, cache: DecodeCache, last: jax.Array, start: int, steps: int, done: jax.Array,
                 interventions) -> jax.Array:
    """Greedy steps from position ``start`` (``last`` [B]: the tokens there) -> tokens [B, steps] int32."""
    cfg = model.cfg
    B = last.shape[0]

    def cond(carry):
        i, _, _, done, _ = carry
        return (i < steps) & ~jnp.all(done)

    def body(carry):
        i, tokens, last, done, cache = carry
        logits, cache = model.decode_step(last, cache, start + i, interventions)
        nxt = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        nxt = jnp.where(done, cfg.pad_id, nxt)
        tokens = jax.lax.dynamic_update_slice(tokens, nxt[:, None], (jnp.zeros((), jnp.int32), i))
        return i + 1, tokens, nxt, done | (nxt == cfg.eos_id), cache

    init = (jnp.zeros((), jnp.int32), jnp.full((B, steps), cfg.pad_id, jnp.int32), last, done, cache)
    return jax.lax.while_loop(cond, body, init)[1]


def length_penalty_factor(length: jax.Array, alpha) -> jax.Array:
    """GNMT length penalty (Wu et al., 2016): ((5 + length) / 6) ** alpha."""
    return ((5.0 + jnp.asarray(length, jnp.float32)) / 6.0) ** alpha


def beam_search(
    model: EncoderDecoder,
    inputs: jax.Array,
    *,
    beam_size: int,
    max_len: int,
    length_penalty: float = 0.6,
    inputs_segmentation: Optional[jax.Array] = None,
    interventions: Optional[Interventions] = None,
) -> jax.Array:
    """Beam search. inputs: [B, S] -> tokens [B, max_len] int32, the best hypothesis per row.

    Hypotheses are ranked by log-probability / ``length_penalty_factor(length, length_penalty)`` (length counts
    the EOS). A hypothesis finishes when it emits EOS; a row stops when no live hypothesis can beat its worst
    kept finished one. Rows with no finished hypothesis by ``max_len`` return their best live one; rows whose
    source is all padding give only ``pad_id``. With ``beam_size=1`` and ``length_penalty=0`` this is greedy
    decoding. ``interventions``: see the module docstring; a "given" decoder-side override value with a batch
    axis (size B) is repeated for the beams of each row.
    """
    _check(model, inputs, max_len, interventions)
    if not isinstance(beam_size, int) or isinstance(beam_size, bool) or beam_size <= 0:
        raise ValueError(f"beam_size must be a positive int; got {beam_size!r}")
    if not isinstance(length_penalty, (int, float)) or length_penalty < 0:
        raise ValueError(f"length_penalty must be a float >= 0; got {length_penalty!r}")
    seg = _source_segmentation(model, inputs, inputs_segmentation)
    graphdef, state = nnx.split(model)
    return _beam(graphdef, state, jnp.asarray(inputs), seg, jnp.float32(length_penalty), interventions,
                 beam_size=beam_size, max_len=max_len)


def _per_beam(interventions: Optional[Interventions], B: int, K: int) -> Optional[Interventions]:
    """Decoder-side "given" override values [B, ...] repeated to [B*K, ...] (beams of a row adjacent)."""
    if interventions is None:
        return None

    def widen(o):
        value = None if o.value is None else jnp.asarray(o.value)
        if o.group == "encoder_self" or value is None or value.ndim < 4 or value.shape[0] != B or B == 1:
            return o
        return dataclasses.replace(o, value=jnp.repeat(value, K, axis=0))

    return dataclasses.replace(interventions, overrides=tuple(widen(o) for o in interventions.overrides))


def _gather_beams(x: jax.Array, idx: jax.Array) -> jax.Array:
    """x: [B, K, ...], idx: [B, K2] -> [B, K2, ...]."""
    return jnp.take_along_axis(x, idx.reshape(idx.shape + (1,) * (x.ndim - 2)), axis=1)


def _gather_flat(x: jax.Array, idx: jax.Array) -> jax.Array:
    """x: [B*K, ...] (beams of a row adjacent), idx: [B, K] -> [B*K, ...]."""
    B, K = idx.shape
    return _gather_beams(x.reshape((B, K) + x.shape[1:]), idx).reshape(x.shape)


@functools.partial(jax.jit, static_argnames=("graphdef", "beam_size", "max_len"))
def _beam(graphdef, state, inputs, seg, alpha, interventions, *, beam_size: int, max_len: int):
    model = nnx.merge(graphdef, state)
    B, K = inputs.shape[0], beam_size
    cache = _encode_and_cache(model, inputs, seg, max_len, interventions)
    # Beams of a row are adjacent: [B*K, ...].
    cache = jax.tree.map(lambda x: jnp.repeat(x, K, axis=0), cache)
    interventions = _per_beam(interventions, B, K)
    bos = jnp.full((B, K), model.cfg.bos_id, jnp.int32)
    return _beam_loop(model, cache, bos, 0, max_len, alpha, ~jnp.any(seg != 0, axis=1), interventions)


def _beam_loop(model, cache: DecodeCache, last: jax.Array, start: int, steps: int, alpha, empty: jax.Array,
               interventions) -> jax.Array:
    """Beam search from position ``start``: cache rows [B*K, ...], ``last`` [B, K] the tokens there, ``empty``
    [B] rows that give only padding -> the best hypothesis per row [B, steps] int32."""
    cfg = model.cfg
    (B, K), L = last.shape, steps
    max_penalty = length_penalty_factor(L, alpha)

    def cond(carry):
        i, _, live_logp, _, fin_scores, _, _ = carry
        best_possible = live_logp[:, 0] / max_penalty  # live_logp is sorted, best first
        done = (jnp.min(fin_scores, axis=1) >= best_possible) | empty
        return (i < L) & ~jnp.all(done)

    def body(carry):
        i, live_seqs, live_logp, last, fin_scores, fin_seqs, cache = carry
        logits, cache = model.decode_step(last.reshape(B * K), cache, start + i, interventions)
        V = logits.shape[-1]
        logp = jax.nn.log_softmax(logits.astype(jnp.float32)).reshape(B, K, V)
        cand = (live_logp[:, :, None] + logp).reshape(B, K * V)
        cand_logp, flat = jax.lax.top_k(cand, 2 * K)  # [B, 2K]
        beam_idx, tok = flat // V, (flat % V).astype(jnp.int32)
        cand_seqs = _gather_beams(live_seqs, beam_idx)
        cand_seqs = jax.lax.dynamic_update_slice(
            cand_seqs, tok[:, :, None], (jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32), i)
        )
        is_eos = tok == cfg.eos_id
        # Finished: the best K among the kept ones and the candidates that just emitted EOS.
        new_fin = jnp.where(is_eos, cand_logp / length_penalty_factor(i + 1, alpha), NEG_INF)
        all_scores = jnp.concatenate([fin_scores, new_fin], axis=1)
        all_seqs = jnp.concatenate([fin_seqs, cand_seqs], axis=1)
        fin_scores, keep = jax.lax.top_k(all_scores, K)
        fin_seqs = _gather_beams(all_seqs, keep)
        # Live: the best K candidates that did not emit EOS (at most K of the 2K did).
        live_scores = jnp.where(is_eos, NEG_INF, cand_logp)
        live_logp, keep = jax.lax.top_k(live_scores, K)
        live_seqs = _gather_beams(cand_seqs, keep)
        last = _gather_beams(tok, keep)
        src_beam = _gather_beams(beam_idx, keep)
        cache = dataclasses.replace(
            cache,
            self_k=[_gather_flat(x, src_beam) for x in cache.self_k],
            self_v=[_gather_flat(x, src_beam) for x in cache.self_v],
        )
        return i + 1, live_seqs, live_logp, last, fin_scores, fin_seqs, cache

    init = (
        jnp.zeros((), jnp.int32),
        jnp.full((B, K, L), cfg.pad_id, jnp.int32),
        jnp.tile(jnp.array([0.0] + [NEG_INF] * (K - 1), jnp.float32), (B, 1)),
        last,
        jnp.full((B, K), NEG_INF, jnp.float32),
        jnp.full((B, K, L), cfg.pad_id, jnp.int32),
        cache,
    )
    _, live_seqs, _, _, fin_scores, fin_seqs, _ = jax.lax.while_loop(cond, body, init)
    any_finished = fin_scores[:, 0] > NEG_INF / 2
    best = jnp.where(any_finished[:, None], fin_seqs[:, 0], live_seqs[:, 0])
    return jnp.where(empty[:, None], cfg.pad_id, best)


# ---------------------------------------------------------------------------------------- decoder-only models
def _check_lm(model, prompt, max_new_tokens: int, prompt_mask) -> None:
    if not isinstance(model, DecoderOnly):
        raise ValueError(f"lm decoding needs a DecoderOnly model; got {type(model).__name__}")
    if getattr(prompt, "ndim", None) != 2 or prompt.shape[1] < 1:
        raise ValueError(f"prompt must be a [batch, length >= 1] int array; got shape {getattr(prompt, 'shape', None)}")
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens <= 0:
        raise ValueError(f"max_new_tokens must be a positive int; got {max_new_tokens!r}")
    if prompt_mask is None:
        return
    if getattr(prompt_mask, "shape", None) != prompt.shape:
        raise ValueError(f"prompt_mask must have the prompt's shape {tuple(prompt.shape)}; got "
                         f"{getattr(prompt_mask, 'shape', None)}")
    if isinstance(prompt_mask, jax.core.Tracer):
        return
    mask = np.asarray(prompt_mask)
    left_padded = np.all(np.diff(mask.astype(np.int64), axis=1) >= 0, axis=1) & (mask[:, -1] == 1)
    values_ok = np.isin(mask, (0, 1)).all(axis=1)
    bad = np.flatnonzero(~(left_padded & values_ok))
    if bad.size:
        raise ValueError(f"prompt_mask row {int(bad[0])} is {mask[bad[0]].tolist()}; each row must be 0s (left "
                         f"padding) then 1s, ending with a 1")


def _left_padding(prompt_mask) -> Optional[jax.Array]:
    """[B, P] mask (0 = left padding) -> padding slots per row [B] int32, or None without a mask."""
    if prompt_mask is None:
        return None
    mask = jnp.asarray(prompt_mask)
    return mask.shape[1] - jnp.sum(mask != 0, axis=1).astype(jnp.int32)


def _prefill(model: DecoderOnly, prompt: jax.Array, steps: int, left_padding: Optional[jax.Array]) -> DecodeCache:
    """The cache after the prompt's first P-1 tokens (one pass), sized for P - 1 + steps slots."""
    P = prompt.shape[1]
    cache = model.init_cache(prompt.shape[0], P - 1 + steps, left_padding)
    if P > 1:
        _, cache = model.decode_step(prompt[:, :-1], cache, 0)
    return cache


def lm_greedy_decode(model: DecoderOnly, prompt: jax.Array, *, max_new_tokens: int,
                     prompt_mask: Optional[jax.Array] = None) -> jax.Array:
    """Greedy continuation of ``prompt`` [B, P] with a KV cache -> new tokens [B, max_new_tokens] int32,
    ``pad_id`` after a row's EOS. Prompts of different lengths are left-padded: ``prompt_mask`` [B, P] is 0
    on the padding and 1 on the tokens (``transformers``' ``attention_mask`` with ``padding_side="left"``);
    None means every row is P real tokens. Padding is masked and each row's positions start at its first
    token, so a row decodes as it would alone."""
    _check_lm(model, prompt, max_new_tokens, prompt_mask)
    graphdef, state = nnx.split(model)
    return _lm_greedy(graphdef, state, jnp.asarray(prompt, jnp.int32), _left_padding(prompt_mask),
                      steps=max_new_tokens)


@functools.partial(jax.jit, static_argnames=("graphdef", "steps"))
def _lm_greedy(graphdef, state, prompt, left_padding, *, steps: int):
    model = nnx.merge(graphdef, state)
    cache = _prefill(model, prompt, steps, left_padding)
    done = jnp.zeros((prompt.shape[0],), bool)
    return _greedy_loop(model, cache, prompt[:, -1], prompt.shape[1] - 1, steps, done, None)


def lm_beam_search(model: DecoderOnly, prompt: jax.Array, *, beam_size: int, max_new_tokens: int,
                   length_penalty: float = 0.6, prompt_mask: Optional[jax.Array] = None) -> jax.Array:
    """Beam search continuing ``prompt`` [B, P] (left-padded where ``prompt_mask`` [B, P] is 0, as in
    ``lm_greedy_decode``) -> the best new tokens per row [B, max_new_tokens] int32; hypotheses ranked as in
    ``beam_search`` (lengths count new tokens only)."""
    _check_lm(model, prompt, max_new_tokens, prompt_mask)
    if not isinstance(beam_size, int) or isinstance(beam_size, bool) or beam_size <= 0:
        raise ValueError(f"beam_size must be a positive int; got {beam_size!r}")
    graphdef, state = nnx.split(model)
    return _lm_beam(graphdef, state, jnp.asarray(prompt, jnp.int32), _left_padding(prompt_mask),
                    jnp.float32(length_penalty), beam_size=beam_size, steps=max_new_tokens)


@functools.partial(jax.jit, static_argnames=("graphdef", "beam_size", "steps"))
def _lm_beam(graphdef, state, prompt, left_padding, alpha, *, beam_size: int, steps: int):
    model = nnx.merge(graphdef, state)
    B, K = prompt.shape[0], beam_size
    cache = jax.tree.map(lambda x: jnp.repeat(x, K, axis=0), _prefill(model, prompt, steps, left_padding))
    last = jnp.repeat(prompt[:, -1:], K, axis=1)
    return _beam_loop(model, cache, last, prompt.shape[1] - 1, steps, alpha, jnp.zeros((B,), bool), None)
