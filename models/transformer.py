"""Encoder, decoder, the encoder-decoder Transformer and a decoder-only variant, with KV-cache decoding steps.

Batches follow the Flax-WMT convention: ``*_segmentation`` ([B, T] ints, 0 = padding, packed examples 1, 2,
...) and ``*_position`` (position inside its own example). Masks are ``attention.Mask`` values built from them.
"""
from __future__ import annotations

import contextvars
import dataclasses
import math
from collections.abc import Callable
from typing import Optional, Union

import jax
import jax.numpy as jnp
from flax import nnx

import attention as attn
from models.attention import MultiHeadAttention, from_cache_layout, to_cache_layout
from models.config import TransformerConfig
from models.interventions import Interventions, LayerIntervention, at, head_shapes
from models.layers import MLP, PositionEncoding, activation, make_dropout, make_norm, positions_from_segmentation

StatsList = list[attn.AttentionStats]


def shift_right(targets: jax.Array, segmentation: Optional[jax.Array], bos_id: int, pad_id: int = 0) -> jax.Array:
    """Decoder inputs from targets: BOS at each segment start, tokens shifted right within segments.

    targets: [B, T] ints; segmentation: [B, T] (0 = padding) or None (each row is one example)
    -> [B, T] int32 with ``pad_id`` at padding positions.
    """
    targets = jnp.asarray(targets)
    B = targets.shape[0]
    shifted = jnp.concatenate([jnp.full((B, 1), bos_id, targets.dtype), targets[:, :-1]], axis=1)
    if segmentation is None:
        return shifted.astype(jnp.int32)
    segmentation = jnp.asarray(segmentation)
    prev = jnp.pad(segmentation[:, :-1], ((0, 0), (1, 0)), constant_values=-1)
    shifted = jnp.where(segmentation != prev, bos_id, shifted)
    return jnp.where(segmentation == 0, pad_id, shifted).astype(jnp.int32)


def _check_ids(name: str, x: jax.Array) -> None:
    if getattr(x, "ndim", None) != 2:
        raise ValueError(f"{name} must be a [batch, length] int array; got shape {getattr(x, 'shape', None)}")


def _check_len(cfg: TransformerConfig, name: str, length: int) -> None:
    if cfg.position == "learned" and length > cfg.max_len:
        raise ValueError(
            f"{name} has length {length} but position='learned' has max_len={cfg.max_len} rows; raise max_len"
        )


def _segments_and_positions(
    tokens: jax.Array, segmentation: Optional[jax.Array], positions: Optional[jax.Array], pad_id: Optional[int]
) -> tuple[Optional[jax.Array], jax.Array]:
    """Segment ids (from ``tokens != pad_id`` when not given and pad_id is set) and per-segment positions."""
    if segmentation is None and pad_id is not None:
        segmentation = (tokens != pad_id).astype(jnp.int32)
    if positions is None:
        if segmentation is None:
            B, T = tokens.shape
            positions = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
        else:
            positions = positions_from_segmentation(segmentation)
    return segmentation, positions


def _self_attention(cfg: TransformerConfig, rngs: nnx.Rngs, group: str) -> MultiHeadAttention:
    return _attention(cfg, rngs, rope=cfg.position == "rope", group=group)


def _attention(cfg: TransformerConfig, rngs: nnx.Rngs, *, rope: bool, group: str) -> MultiHeadAttention:
    return MultiHeadAttention(
        cfg.d_model, cfg.num_heads, num_kv_heads=cfg.num_kv_heads, qk_dim=cfg.qk_dim, v_dim=cfg.v_dim,
        use_bias=cfg.use_bias, scale=cfg.attention_scale, qk_layernorm=cfg.qk_layernorm,
        rope_base=cfg.rope_base if rope else None, rope_scaling=cfg.rope_scaling if rope else (),
        qkv_bias=cfg.attention_qkv_bias, dropout_rate=cfg.attention_dropout_rate,
        implementation=cfg.attention_impl, backend_options=cfg.attention_options, dtype=cfg.jnp_dtype,
        param_dtype=cfg.jnp_param_dtype, norm_epsilon=cfg.norm_epsilon, kind=cfg.attention_kind,
        uniform=group in cfg.uniform_attention_groups, checked=True, rngs=rngs,
    )


def _feed_forward_sublayer(layer: nnx.Module, cfg: TransformerConfig, rngs: nnx.Rngs) -> None:
    """Sets ``layer.mlp`` / ``layer.mlp_block``: the feed-forward sublayer, or None in an attention-only
    model (``cfg.attention_only``)."""
    if cfg.attention_only:
        layer.mlp, layer.mlp_block = nnx.data(None), nnx.data(None)
    else:
        layer.mlp, layer.mlp_block = MLP(cfg, rngs=rngs), _Sublayer(cfg, rngs=rngs)


def _feed_forward(layer: nnx.Module, x: jax.Array, deterministic: bool) -> jax.Array:
    if layer.mlp is None:
        return x
    return layer.mlp_block.residual(x, layer.mlp(layer.mlp_block.inputs(x)), deterministic)


class _AdminProfile:
    """State of an Admin profiling pass: the output scale of the residual stream so far in the current stack."""

    def __init__(self):
        self.ratio: Union[float, jax.Array] = 1.0


_ADMIN_PROFILE: contextvars.ContextVar[Optional[_AdminProfile]] = contextvars.ContextVar("admin_profile",
                                                                                         default=None)


def _admin_stack_start() -> None:
    """An encoder or decoder stack begins: Admin's running scale restarts at 1 (each stack has its own)."""
    profile = _ADMIN_PROFILE.get()
    if profile is not None:
        profile.ratio = 1.0


def admin_initialize(model: nnx.Module, forward: Callable[[nnx.Module], object]) -> None:
    """Sets every Admin residual scale ``omega`` of ``model`` (``norm="admin"``) from one forward pass.

    ``forward(model)`` runs the model once (deterministic, on a training batch). Within each stack the
    sublayers take, in order, ``omega_i = r_i`` (every channel) with ``r_1 = 1`` and
    ``r_{i+1} = sqrt(Var(omega_i * x_i) + Var(f_i(x_i)))`` over all positions of the batch: the scale of the
    residual branch grows with the variance the earlier sublayers added (Liu et al. 2020, Admin). Works eagerly
    and under ``jax.jit`` (then ``omega`` holds traced values until the model is split).
    """
    token = _ADMIN_PROFILE.set(_AdminProfile())
    try:
        forward(model)
    finally:
        _ADMIN_PROFILE.reset(token)


class _Sublayer(nnx.Module):
    """Residual wrapper: pre-LN ``x + drop(f(norm(x)))``, post-LN ``norm(x + drop(f(x)))`` or Admin
    ``norm(omega * x + drop(f(x)))`` (omega [d_model], see ``admin_initialize``)."""

    def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs):
        self.pre = cfg.norm == "pre"
        self.norm = make_norm(cfg, cfg.d_model, rngs=rngs)
        self.dropout = make_dropout(cfg.dropout_rate, rngs)
        self.omega = (nnx.Param(jnp.ones((cfg.d_model,), cfg.jnp_param_dtype)) if cfg.norm == "admin"
                      else nnx.data(None))

    def inputs(self, x: jax.Array) -> jax.Array:
        return self.norm(x) if self.pre else x

    def residual(self, x: jax.Array, y: jax.Array, deterministic: bool) -> jax.Array:
        y = self.dropout(y, deterministic=deterministic)
        if self.omega is not None:
            profile = _ADMIN_PROFILE.get()
            if profile is not None:
                self.omega[...] = jnp.full_like(self.omega[...], profile.ratio)
            x = x * self.omega[...].astype(x.dtype)
            if profile is not None:
                profile.ratio = jnp.sqrt(jnp.var(x.astype(jnp.float32)) + jnp.var(y.astype(jnp.float32)))
        x = x + y
        return x if self.pre else self.norm(x)


class EncoderLayer(nnx.Module):
    """Self-attention and feed-forward sublayers. x: [B, S, d_model] -> [B, S, d_model]."""

    def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs):
        self.self_attention = _self_attention(cfg, rngs, "encoder_self")
        self.attention_block = _Sublayer(cfg, rngs=rngs)
        _feed_forward_sublayer(self, cfg, rngs)

    def __call__(self, x, mask: attn.Mask, positions, *, deterministic: bool, return_stats: bool,
                 intervention: Optional[LayerIntervention] = None):
        h = self.attention_block.inputs(x)
        a, stats = self.self_attention.attend(
            self.self_attention.queries(h, positions), *self.self_attention.keys_values(h, positions), mask,
            deterministic=deterministic, return_stats=return_stats, intervention=intervention,
        )
        x = self.attention_block.residual(x, a, deterministic)
        return _feed_forward(self, x, deterministic), stats


def step_intervention(intervention: Optional[LayerIntervention], index: jax.Array,
                      kv_len: int) -> Optional[LayerIntervention]:
    """A layer's intervention for one decoding step whose query sits at position ``index`` (scalar int) over
    ``kv_len`` keys (the cache length for decoder self-attention, the source length for cross-attention).

    Head masks and "uniform" / "function" overrides apply unchanged (the visible keys are the source tokens
    for cross-attention and the cache positions <= index for self-attention). A "given" value [B, H, Tq, Tk]
    (or broadcastable) gives its row ``index`` (when Tq > 1), its key axis cut or zero-padded to ``kv_len``
    (when Tk > 1): the row the teacher-forced call would use. A "permute" override draws with
    ``fold_in(key, index)``, so each step shuffles anew (not the teacher-forced call's permutation).
    """
    if intervention is None or intervention.override is None:
        return intervention
    o = intervention.override
    if o.kind == "given":
        value = jnp.asarray(o.value)
        if value.ndim >= 2 and value.shape[-2] > 1:
            value = jax.lax.dynamic_index_in_dim(value, index, axis=value.ndim - 2, keepdims=True)
        if value.ndim >= 1 and value.shape[-1] not in (1, kv_len):
            keys = value.shape[-1]
            pad = [(0, 0)] * (value.ndim - 1) + [(0, max(kv_len - keys, 0))]
            value = jnp.pad(value, pad)[..., :kv_len]
        o = dataclasses.replace(o, value=value)
    elif o.kind == "permute":
        o = dataclasses.replace(o, key=jax.random.fold_in(o.key, index))
    return dataclasses.replace(intervention, override=o)


class DecoderLayer(nnx.Module):
    """Causal self-attention, optional cross-attention, feed-forward. y: [B, T, d_model] -> [B, T, d_model]."""

    def __init__(self, cfg: TransformerConfig, *, cross_attention: bool, rngs: nnx.Rngs):
        self.self_attention = _self_attention(cfg, rngs, "decoder_self")
        self.self_block = _Sublayer(cfg, rngs=rngs)
        if cross_attention:
            self.cross_attention = _attention(cfg, rngs, rope=False, group="cross")
            self.cross_block = _Sublayer(cfg, rngs=rngs)
        else:
            self.cross_attention, self.cross_block = nnx.data(None), nnx.data(None)
        _feed_forward_sublayer(self, cfg, rngs)

    def _cross_and_mlp(self, y, cross_kv, cross_mask, deterministic, return_stats, intervention=None):
        cross_stats = None
        if self.cross_attention is not None:
            h = self.cross_block.inputs(y)
            a, cross_stats = self.cross_attention.attend(
                self.cross_attention.queries(h), *cross_kv, cross_mask,
                deterministic=deterministic, return_stats=return_stats, intervention=intervention,
            )
            y = self.cross_block.residual(y, a, deterministic)
        return _feed_forward(self, y, deterministic), cross_stats

    def __call__(self, y, self_mask, positions, encoded, cross_mask, *, deterministic: bool, return_stats: bool,
                 self_intervention: Optional[LayerIntervention] = None,
                 cross_intervention: Optional[LayerIntervention] = None):
        """encoded: [B, S, d_model] or None (decoder-only). Returns (y, self stats, cross stats)."""
        h = self.self_block.inputs(y)
        sa = self.self_attention
        a, self_stats = sa.attend(sa.queries(h, positions), *sa.keys_values(h, positions), self_mask,
                                  deterministic=deterministic, return_stats=return_stats,
                                  intervention=self_intervention)
        y = self.self_block.residual(y, a, deterministic)
        cross_kv = None if self.cross_attention is None else self.cross_attention.keys_values(encoded)
        y, cross_stats = self._cross_and_mlp(y, cross_kv, cross_mask, deterministic, return_stats,
                                             cross_intervention)
        return y, self_stats, cross_stats

    def step(self, y, k_cache, v_cache, index, positions, self_mask: attn.Mask, cross_kv, cross_mask, *,
             self_intervention: Optional[LayerIntervention] = None,
             cross_intervention: Optional[LayerIntervention] = None):
        """One decoding step. y: [B, t, d_model]; caches in the cache layout [B, Hkv, D*, L] (``DecodeCache``);
        index: scalar slot of y's first token; positions: [B, t] (position encoding); self_mask: visibility of
        the L cache slots; cross_kv: (k, v) of the encoder output ([B, S, Hkv, D*]) or None; interventions of
        this layer (see ``step_intervention``). Returns (y, k_cache, v_cache)."""
        h = self.self_block.inputs(y)
        sa = self.self_attention
        k_cache, v_cache = sa.extend_cache(h, k_cache, v_cache, index, positions)
        k, v = from_cache_layout(k_cache), from_cache_layout(v_cache)
        a, _ = sa.attend(sa.queries(h, positions), k, v, self_mask,
                         intervention=step_intervention(self_intervention, index, k.shape[1]))
        y = self.self_block.residual(y, a, True)
        if cross_kv is not None:
            cross_intervention = step_intervention(cross_intervention, index, cross_kv[0].shape[1])
        y, _ = self._cross_and_mlp(y, cross_kv, cross_mask, True, False, cross_intervention)
        return y, k_cache, v_cache


class Encoder(nnx.Module):
    """Position encoding, dropout, the encoder layers and (pre-LN) a final norm.

    x: token embeddings [B, S, d_model] -> ([B, S, d_model], [AttentionStats per layer] or []).
    """

    def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs):
        self.positions = PositionEncoding(cfg, rngs=rngs)
        self.dropout = make_dropout(cfg.dropout_rate, rngs)
        self.layers = nnx.List([EncoderLayer(cfg, rngs=rngs) for _ in range(cfg.num_encoder_layers)])
        self.final_norm = make_norm(cfg, cfg.d_model, rngs=rngs) if cfg.norm == "pre" else nnx.data(None)
        self.fault = cfg.fault

    def __call__(self, x, segmentation, positions, *, deterministic: bool = True, return_stats: bool = False,
                 interventions: Optional[Interventions] = None):
        _admin_stack_start()
        x = self.dropout(self.positions(x, positions), deterministic=deterministic)
        mask = attn.Mask(q_segment_ids=segmentation, kv_segment_ids=segmentation)
        if self.fault == "no_padding_mask":
            mask = attn.Mask()
        stats = []
        for i, layer in enumerate(self.layers):
            x, s = layer(x, mask, positions, deterministic=deterministic, return_stats=return_stats,
                         intervention=at(interventions, "encoder_self", i))
            stats.append(s)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x, (stats if return_stats else [])


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class DecodeCache:
    """State of incremental decoding. Every cached tensor is in ``models.attention.to_cache_layout``:
    self-attention caches [B, Hkv, D*, L] per layer; cross-attention keys/values [B, Hkv, D*, S] per layer and
    the source segmentation [B, S], computed once. ``left_padding`` [B] (decoder-only, or None): the number of
    padding slots before row b's prompt; those slots are masked and positions count from the first real token."""

    self_k: list
    self_v: list
    cross_k: list
    cross_v: list
    source_segmentation: Optional[jax.Array]
    left_padding: Optional[jax.Array] = None


class Decoder(nnx.Module):
    """Position encoding, dropout, the decoder layers and (pre-LN) a final norm.

    y: token embeddings [B, T, d_model] -> ([B, T, d_model], self stats, cross stats).
    """

    def __init__(self, cfg: TransformerConfig, *, cross_attention: bool, rngs: nnx.Rngs):
        self.positions = PositionEncoding(cfg, rngs=rngs)
        self.dropout = make_dropout(cfg.dropout_rate, rngs)
        self.layers = nnx.List(
            [DecoderLayer(cfg, cross_attention=cross_attention, rngs=rngs) for _ in range(cfg.num_decoder_layers)]
        )
        self.final_norm = make_norm(cfg, cfg.d_model, rngs=rngs) if cfg.norm == "pre" else nnx.data(None)
        self.fault = cfg.fault

    def __call__(self, y, segmentation, positions, encoded=None, encoder_segmentation=None, *,
                 deterministic: bool = True, return_stats: bool = False,
                 interventions: Optional[Interventions] = None, causal_positions: Optional[jax.Array] = None):
        """causal_positions: [B, T] positions that decide causal visibility (default: the token index)."""
        _admin_stack_start()
        y = self.dropout(self.positions(y, positions), deterministic=deterministic)
        self_mask = attn.Mask(causal=True, q_segment_ids=segmentation, kv_segment_ids=segmentation,
                              q_positions=causal_positions, kv_positions=causal_positions)
        cross_mask = attn.Mask(q_segment_ids=segmentation, kv_segment_ids=encoder_segmentation)
        if self.fault == "no_padding_mask":
            self_mask, cross_mask = attn.Mask(causal=True, q_positions=causal_positions,
                                              kv_positions=causal_positions), attn.Mask()
        elif self.fault == "causal_leak":  # each query also sees the key one step ahead of it
            kv = causal_positions if causal_positions is not None else jnp.broadcast_to(
                jnp.arange(y.shape[1])[None], y.shape[:2])
            self_mask = dataclasses.replace(self_mask, q_positions=kv + 1, kv_positions=kv)
        self_stats, cross_stats = [], []
        for i, layer in enumerate(self.layers):
            y, s, c = layer(y, self_mask, positions, encoded, cross_mask,
                            deterministic=deterministic, return_stats=return_stats,
                            self_intervention=at(interventions, "decoder_self", i),
                            cross_intervention=at(interventions, "cross", i))
            self_stats.append(s)
            cross_stats.append(c)
        if self.final_norm is not None:
            y = self.final_norm(y)
        if not return_stats:
            return y, [], []
        return y, self_stats, (cross_stats if encoded is not None else [])

    def step(self, y, cache: DecodeCache, index,
             interventions: Optional[Interventions] = None) -> tuple[jax.Array, DecodeCache]:
        """y: embeddings of the newest tokens [B, t, d_model] at cache slots ``index`` .. ``index + t - 1``
        (their positions, less the row's ``cache.left_padding``) -> ([B, t, d_model], cache); t > 1 fills the
        cache with a prompt in one pass.
        ``interventions``: the "decoder_self" and "cross" parts apply at this step."""
        B, L = cache.self_k[0].shape[0], cache.self_k[0].shape[-1]
        slots = jnp.broadcast_to(index + jnp.arange(y.shape[1], dtype=jnp.int32), (B, y.shape[1]))
        cache_slots = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), (B, L))
        if cache.left_padding is None:
            positions, self_mask = slots, attn.Mask(causal=True, q_positions=slots, kv_positions=cache_slots)
        else:  # padding slots form segment 0: real tokens never see them, padding queries see only padding
            pad = jnp.asarray(cache.left_padding, jnp.int32)[:, None]
            positions = jnp.maximum(slots - pad, 0)
            self_mask = attn.Mask(causal=True, q_positions=slots, kv_positions=cache_slots,
                                  q_segment_ids=(slots >= pad).astype(jnp.int32),
                                  kv_segment_ids=(cache_slots >= pad).astype(jnp.int32))
        y = self.positions(y, positions)
        cross_mask = attn.Mask(kv_segment_ids=cache.source_segmentation)
        new_k, new_v = [], []
        for i, layer in enumerate(self.layers):
            cross_kv = ((from_cache_layout(cache.cross_k[i]), from_cache_layout(cache.cross_v[i]))
                        if cache.cross_k else None)
            y, k, v = layer.step(y, cache.self_k[i], cache.self_v[i], index, positions, self_mask, cross_kv,
                                 cross_mask, self_intervention=at(interventions, "decoder_self", i),
                                 cross_intervention=at(interventions, "cross", i))
            new_k.append(k)
            new_v.append(v)
        if self.final_norm is not None:
            y = self.final_norm(y)
        return y, dataclasses.replace(cache, self_k=new_k, self_v=new_v)

    def empty_self_cache(self, batch: int, max_len: int, dtype) -> tuple[list, list]:
        """Zero self-attention caches: ([B, Hkv, Dk, L] per layer, [B, Hkv, Dv, L] per layer)."""
        ks, vs = [], []
        for layer in self.layers:
            sa = layer.self_attention
            ks.append(jnp.zeros((batch, sa.num_kv_heads, sa.qk_dim, max_len), dtype))
            vs.append(jnp.zeros((batch, sa.num_kv_heads, sa.v_dim, max_len), dtype))
        return ks, vs


def _embed(cfg: TransformerConfig, rngs: nnx.Rngs) -> nnx.Embed:
    # N(0, d^-1/2): with the sqrt(d_model) input scale, embeddings enter at unit scale and tied logits stay O(1).
    return nnx.Embed(cfg.vocab_size, cfg.d_model, dtype=cfg.jnp_dtype, param_dtype=cfg.jnp_param_dtype,
                     embedding_init=nnx.initializers.normal(stddev=cfg.d_model ** -0.5), rngs=rngs)


def _tied_logits(y: jax.Array, embed: nnx.Embed) -> jax.Array:
    """y [..., d_model] times the token table [V, d_model], contracted on d_model -> [..., V]. Same as
    ``embed.attend`` but as one dot_general on the table as stored: ``attend``'s ``table.T`` made XLA (CPU)
    copy the transposed [d_model, V] table at every decoding step."""
    y, table = embed.promote_dtype((y, embed.embedding[...]), dtype=embed.dtype)
    return jax.lax.dot_general(y, table, (((y.ndim - 1,), (1,)), ((), ())))


class _LanguageModelHead(nnx.Module):
    """Token embedding in, logits out (tied to the embedding or a separate projection)."""

    def _init_output(self, cfg: TransformerConfig, rngs: nnx.Rngs) -> None:
        self.embed_scale = math.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0
        if cfg.tie_output:
            self.output = nnx.data(None)
        else:
            self.output = nnx.Linear(cfg.d_model, cfg.vocab_size, use_bias=False, dtype=cfg.jnp_dtype,
                                     param_dtype=cfg.jnp_param_dtype,
                                     kernel_init=nnx.initializers.xavier_uniform(), rngs=rngs)
        self.logits_bias = (nnx.Param(jnp.zeros((cfg.vocab_size,), cfg.jnp_param_dtype)) if cfg.final_logits_bias
                            else nnx.data(None))

    def _logits(self, y: jax.Array, embed: nnx.Embed) -> jax.Array:
        logits = _tied_logits(y, embed) if self.output is None else self.output(y)
        if self.logits_bias is not None:
            logits = logits + self.logits_bias[...].astype(logits.dtype)
        return logits


class EncoderDecoder(_LanguageModelHead):
    """The encoder-decoder Transformer (Vaswani et al., 2017) with every ``TransformerConfig`` knob.

    ``model(inputs, targets, ...)``: inputs [B, S], targets [B, T] token ids -> logits [B, T, V] for predicting
    ``targets`` (decoder inputs are ``shift_right(targets)``), or ``(logits, stats)`` with
    ``stats = {"encoder_self": [...], "decoder_self": [...], "cross": [...]}``, one ``AttentionStats`` per layer.
    Segmentations default to ``tokens != pad_id``; positions default to positions within each segment.
    """

    def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs):
        if not isinstance(cfg, TransformerConfig):
            raise ValueError(f"EncoderDecoder expects a TransformerConfig; got {type(cfg).__name__}")
        self.cfg = cfg
        self.source_embed = _embed(cfg, rngs)
        self.target_embed = nnx.data(None) if cfg.share_embeddings else _embed(cfg, rngs)
        self.encoder = Encoder(cfg, rngs=rngs)
        self.decoder = Decoder(cfg, cross_attention=True, rngs=rngs)
        self._init_output(cfg, rngs)

    def _target_embed(self) -> nnx.Embed:
        return self.source_embed if self.target_embed is None else self.target_embed

    def encode(
        self,
        inputs: jax.Array,
        *,
        inputs_segmentation: Optional[jax.Array] = None,
        inputs_position: Optional[jax.Array] = None,
        deterministic: bool = True,
        return_stats: bool = False,
        interventions: Optional[Interventions] = None,
    ) -> Union[jax.Array, tuple[jax.Array, StatsList]]:
        """inputs: [B, S] -> encoded [B, S, d_model] (or (encoded, encoder self-attention stats))."""
        _check_ids("inputs", inputs)
        _check_len(self.cfg, "inputs", inputs.shape[1])
        seg, pos = _segments_and_positions(inputs, inputs_segmentation, inputs_position, self.cfg.pad_id)
        x = self.source_embed(inputs) * jnp.asarray(self.embed_scale, self.cfg.jnp_dtype)
        encoded, stats = self.encoder(x, seg, pos, deterministic=deterministic, return_stats=return_stats,
                                      interventions=interventions)
        return (encoded, stats) if return_stats else encoded

    def decode(
        self,
        encoded: jax.Array,
        targets: jax.Array,
        *,
        inputs_segmentation: Optional[jax.Array] = None,
        targets_segmentation: Optional[jax.Array] = None,
        targets_position: Optional[jax.Array] = None,
        deterministic: bool = True,
        return_stats: bool = False,
        interventions: Optional[Interventions] = None,
    ):
        """Teacher-forced decoder. encoded: [B, S, d_model], targets: [B, T] -> logits [B, T, V]
        (or (logits, decoder self stats, cross stats)). ``inputs_segmentation`` masks the source padding."""
        _check_ids("targets", targets)
        _check_len(self.cfg, "targets", targets.shape[1])
        seg, pos = _segments_and_positions(targets, targets_segmentation, targets_position, self.cfg.pad_id)
        decoder_inputs = shift_right(targets, seg, self.cfg.bos_id, self.cfg.pad_id)
        embed = self._target_embed()
        y = embed(decoder_inputs) * jnp.asarray(self.embed_scale, self.cfg.jnp_dtype)
        y, self_stats, cross_stats = self.decoder(
            y, seg, pos, encoded, inputs_segmentation, deterministic=deterministic, return_stats=return_stats,
            interventions=interventions,
        )
        logits = self._logits(y, embed)
        return (logits, self_stats, cross_stats) if return_stats else logits

    def __call__(
        self,
        inputs: jax.Array,
        targets: jax.Array,
        *,
        inputs_segmentation: Optional[jax.Array] = None,
        targets_segmentation: Optional[jax.Array] = None,
        inputs_position: Optional[jax.Array] = None,
        targets_position: Optional[jax.Array] = None,
        deterministic: bool = True,
        return_stats: bool = False,
        interventions: Optional[Interventions] = None,
    ):
        """inputs: [B, S], targets: [B, T] -> logits [B, T, V] or (logits, stats dict).

        ``interventions``: head masks and attention-weight overrides (``models.interventions``)."""
        _check_ids("inputs", inputs)
        if interventions is not None:
            interventions.check(head_shapes(self))
        if inputs_segmentation is None:
            inputs_segmentation = (inputs != self.cfg.pad_id).astype(jnp.int32)
        enc = self.encode(inputs, inputs_segmentation=inputs_segmentation, inputs_position=inputs_position,
                          deterministic=deterministic, return_stats=return_stats, interventions=interventions)
        encoded, enc_stats = enc if return_stats else (enc, None)
        out = self.decode(encoded, targets, inputs_segmentation=inputs_segmentation,
                          targets_segmentation=targets_segmentation, targets_position=targets_position,
                          deterministic=deterministic, return_stats=return_stats, interventions=interventions)
        if not return_stats:
            return out
        logits, self_stats, cross_stats = out
        return logits, {"encoder_self": enc_stats, "decoder_self": self_stats, "cross": cross_stats}

    # ------------------------------------------------------------------------------------ incremental decoding
    def init_cache(self, encoded: jax.Array, inputs_segmentation: jax.Array, max_len: int) -> DecodeCache:
        """Empty self-attention caches of length ``max_len`` and the cross-attention keys/values.

        encoded: [B, S, d_model], inputs_segmentation: [B, S] (0 = padding)."""
        _check_len(self.cfg, "max_len", max_len)
        B = encoded.shape[0]
        self_k, self_v = self.decoder.empty_self_cache(B, max_len, self.cfg.jnp_dtype)
        cross = [layer.cross_attention.keys_values(encoded) for layer in self.decoder.layers]
        # the barrier keeps XLA from moving the re-layout back into the decoding loop (once per step)
        cross_k, cross_v = jax.lax.optimization_barrier(([to_cache_layout(k) for k, _ in cross],
                                                         [to_cache_layout(v) for _, v in cross]))
        return DecodeCache(self_k=self_k, self_v=self_v, cross_k=cross_k, cross_v=cross_v,
                           source_segmentation=inputs_segmentation)

    def decode_step(self, tokens: jax.Array, cache: DecodeCache, index,
                    interventions: Optional[Interventions] = None) -> tuple[jax.Array, DecodeCache]:
        """tokens: [B] decoder input ids at position ``index`` (BOS at 0) -> (logits [B, V], updated cache).

        ``interventions``: head masks and weight overrides of "decoder_self" and "cross" at this step (pass the
        "encoder_self" part to ``encode``); see ``step_intervention`` for what a step-mode override does."""
        if interventions is not None:
            interventions.check(head_shapes(self))
        embed = self._target_embed()
        y = embed(tokens[:, None]) * jnp.asarray(self.embed_scale, self.cfg.jnp_dtype)
        y, cache = self.decoder.step(y, cache, index, interventions)
        return self._logits(y, embed)[:, 0], cache


class DecoderOnly(_LanguageModelHead):
    """A causal Transformer language model (uses ``num_decoder_layers``; no cross-attention).

    ``model(tokens)``: tokens [B, T] -> logits [B, T, V], or ``(logits, {"decoder_self": [...]})``.
    ``segmentation`` ([B, T], 0 = padding, packed examples 1, 2, ...) restricts attention to each example;
    None means every token of a row is one example. ``position`` defaults to positions within segments; when
    given it also decides causal visibility, so a row whose tokens are permuted together with their positions
    (the zig-zag layout of ring attention, ``attention.to_zigzag``) attends as it would in natural order.
    """

    def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs):
        if not isinstance(cfg, TransformerConfig):
            raise ValueError(f"DecoderOnly expects a TransformerConfig; got {type(cfg).__name__}")
        self.cfg = cfg
        self.embed = _embed(cfg, rngs)
        self.decoder = Decoder(cfg, cross_attention=False, rngs=rngs)
        self._init_output(cfg, rngs)

    def __call__(
        self,
        tokens: jax.Array,
        *,
        segmentation: Optional[jax.Array] = None,
        position: Optional[jax.Array] = None,
        deterministic: bool = True,
        return_stats: bool = False,
        interventions: Optional[Interventions] = None,
    ):
        _check_ids("tokens", tokens)
        if interventions is not None:
            interventions.check(head_shapes(self))
        _check_len(self.cfg, "tokens", tokens.shape[1])
        seg, pos = _segments_and_positions(tokens, segmentation, position, None)
        y = self.embed(tokens) * jnp.asarray(self.embed_scale, self.cfg.jnp_dtype)
        y, self_stats, _ = self.decoder(y, seg, pos, deterministic=deterministic, return_stats=return_stats,
                                        interventions=interventions, causal_positions=position)
        logits = self._logits(y, self.embed)
        return (logits, {"decoder_self": self_stats}) if return_stats else logits


    # ------------------------------------------------------------------------------------ incremental decoding
    def init_cache(self, batch: int, max_len: int, left_padding: Optional[jax.Array] = None) -> DecodeCache:
        """Empty self-attention caches of ``max_len`` slots for ``batch`` rows. ``left_padding`` [batch] ints
        (or None: none): padding slots before each row's first token, masked at every step; a row's positions
        (learned or RoPE) count from its first real token."""
        _check_len(self.cfg, "max_len", max_len)
        self_k, self_v = self.decoder.empty_self_cache(batch, max_len, self.cfg.jnp_dtype)
        return DecodeCache(self_k=self_k, self_v=self_v, cross_k=[], cross_v=[], source_segmentation=None,
                           left_padding=left_padding)

    def decode_step(self, tokens: jax.Array, cache: DecodeCache, index,
                    interventions: Optional[Interventions] = None) -> tuple[jax.Array, DecodeCache]:
        """tokens: [B] ids at cache slot ``index`` -> (logits [B, V] for the next token, updated cache); or
        tokens [B, t] at slots index .. index+t-1 (a prompt, in one pass) -> (logits [B, t, V], cache). A slot
        is the token's position unless the cache has ``left_padding``."""
        if interventions is not None:
            interventions.check(head_shapes(self))
        one = tokens.ndim == 1
        tokens = tokens[:, None] if one else tokens
        y = self.embed(tokens) * jnp.asarray(self.embed_scale, self.cfg.jnp_dtype)
        y, cache = self.decoder.step(y, cache, index, interventions)
        logits = self._logits(y, self.embed)
        return (logits[:, 0] if one else logits), cache


class EncoderOnly(nnx.Module):
    """A Transformer encoder with a masked-LM head and/or a sequence-classification head (BERT-style).

    ``model(inputs)``: inputs [B, S] -> masked-LM logits [B, S, V] (needs ``lm_head``), or ``(logits, stats)``
    with ``stats = {"encoder_self": [...per layer]}``. ``model.classify(inputs)`` -> [B, num_classes] (needs
    ``num_classes > 0``): a pooler (dense + tanh) on the first token, then a linear classifier.
    ``token_types`` [B, S] index the token-type table (``cfg.token_types`` rows; default all 0). The LM head
    is dense + activation + norm, then the (tied or separate) output projection plus a bias [V].
    """

    def __init__(self, cfg: TransformerConfig, *, lm_head: bool = True, num_classes: int = 0, rngs: nnx.Rngs):
        if not isinstance(cfg, TransformerConfig):
            raise ValueError(f"EncoderOnly expects a TransformerConfig; got {type(cfg).__name__}")
        if not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes < 0:
            raise ValueError(f"EncoderOnly: num_classes must be an int >= 0; got {num_classes!r}")
        if not lm_head and not num_classes:
            raise ValueError("EncoderOnly: needs a head: lm_head=True or num_classes > 0")
        self.cfg = cfg
        self.embed = _embed(cfg, rngs)
        self.embed_scale = math.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0
        self.token_type_embed = (nnx.Embed(cfg.token_types, cfg.d_model, dtype=cfg.jnp_dtype,
                                           param_dtype=cfg.jnp_param_dtype, rngs=rngs)
                                 if cfg.token_types else nnx.data(None))
        self.encoder = Encoder(cfg, rngs=rngs)
        dense = lambda n: nnx.Linear(cfg.d_model, n, dtype=cfg.jnp_dtype, param_dtype=cfg.jnp_param_dtype,  # noqa: E731
                                     rngs=rngs)
        if lm_head:
            self.lm_dense, self.lm_norm = dense(cfg.d_model), make_norm(cfg, cfg.d_model, rngs=rngs)
            self.output = nnx.data(None) if cfg.tie_output else nnx.Linear(
                cfg.d_model, cfg.vocab_size, use_bias=False, dtype=cfg.jnp_dtype, param_dtype=cfg.jnp_param_dtype,
                rngs=rngs)
            self.lm_bias = nnx.Param(jnp.zeros((cfg.vocab_size,), cfg.jnp_param_dtype))
        else:
            self.lm_dense, self.lm_norm, self.output, self.lm_bias = (nnx.data(None),) * 4
        self.num_classes = num_classes
        if num_classes:
            self.pooler, self.classifier = dense(cfg.d_model), dense(num_classes)
        else:
            self.pooler, self.classifier = nnx.data(None), nnx.data(None)

    def encode(self, inputs: jax.Array, *, token_types: Optional[jax.Array] = None,
               inputs_segmentation: Optional[jax.Array] = None, inputs_position: Optional[jax.Array] = None,
               deterministic: bool = True, return_stats: bool = False,
               interventions: Optional[Interventions] = None):
        """inputs: [B, S] -> encoded [B, S, d_model] (or (encoded, encoder self-attention stats))."""
        _check_ids("inputs", inputs)
        if interventions is not None:
            interventions.check(head_shapes(self))
        _check_len(self.cfg, "inputs", inputs.shape[1])
        seg, pos = _segments_and_positions(inputs, inputs_segmentation, inputs_position, self.cfg.pad_id)
        x = self.embed(inputs) * jnp.asarray(self.embed_scale, self.cfg.jnp_dtype)
        if self.token_type_embed is not None:
            x = x + self.token_type_embed(jnp.zeros_like(inputs) if token_types is None else token_types)
        encoded, stats = self.encoder(x, seg, pos, deterministic=deterministic, return_stats=return_stats,
                                      interventions=interventions)
        return (encoded, stats) if return_stats else encoded

    def __call__(self, inputs: jax.Array, *, return_stats: bool = False, **kwargs):
        """inputs: [B, S] -> masked-LM logits [B, S, V] (or (logits, {"encoder_self": stats})); keyword
        arguments as ``encode``."""
        if self.lm_dense is None:
            raise ValueError("EncoderOnly was built without an LM head (lm_head=False); call classify()")
        out = self.encode(inputs, return_stats=return_stats, **kwargs)
        encoded, stats = out if return_stats else (out, None)
        h = self.lm_norm(activation(self.cfg.activation)(self.lm_dense(encoded)))
        logits = (self.embed.attend(h) if self.output is None else self.output(h)) + self.lm_bias[...]
        return (logits, {"encoder_self": stats}) if return_stats else logits

    def classify(self, inputs: jax.Array, *, return_stats: bool = False, **kwargs):
        """inputs: [B, S] -> class logits [B, num_classes] from the first token (or (logits, stats dict))."""
        if not self.num_classes:
            raise ValueError("EncoderOnly was built without a classification head (num_classes=0)")
        out = self.encode(inputs, return_stats=return_stats, **kwargs)
        encoded, stats = out if return_stats else (out, None)
        logits = self.classifier(jnp.tanh(self.pooler(encoded[:, 0])))
        return (logits, {"encoder_self": stats}) if return_stats else logits
