"""Building blocks: initializers, norms, the feed-forward block, position encodings (sinusoidal, learned, RoPE)."""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
from flax import nnx

from models.config import TransformerConfig

# Glorot/Xavier uniform over (fan_in, fan_out); LinearGeneral flattens multi-axis kernels before calling it.
kernel_init = nnx.initializers.xavier_uniform()
bias_init = nnx.initializers.zeros_init()

_ACTIVATIONS = {"relu": jax.nn.relu, "gelu": jax.nn.gelu, "gelu_exact": lambda x: jax.nn.gelu(x, approximate=False),
                "silu": jax.nn.silu}


def make_norm(cfg: TransformerConfig, features: int, *, rngs: nnx.Rngs) -> nnx.Module:
    """LayerNorm (scale and bias) or RMSNorm (scale) over the last axis, as ``cfg.norm_type`` says."""
    kwargs = dict(epsilon=cfg.norm_epsilon, dtype=cfg.jnp_dtype, param_dtype=cfg.jnp_param_dtype, rngs=rngs)
    if cfg.norm_type == "rmsnorm":
        return nnx.RMSNorm(features, **kwargs)
    return nnx.LayerNorm(features, **kwargs)


def make_dropout(rate: float, rngs: nnx.Rngs) -> nnx.Dropout:
    """``nnx.Dropout`` with its own fork of the "dropout" stream (no stream is needed when ``rate == 0``)."""
    if rate == 0.0:
        return nnx.Dropout(0.0)
    try:
        stream = rngs["dropout"]
    except KeyError:
        raise ValueError(
            f"dropout rate {rate} needs a 'dropout' rng stream: build the model with "
            "rngs=nnx.Rngs(params=..., dropout=...)"
        ) from None
    return nnx.Dropout(rate, rngs=stream)


def activation(name: str):
    """The activation function ``name`` (one of ``models.config.ACTIVATIONS``)."""
    return _ACTIVATIONS[name]


class MLP(nnx.Module):
    """Position-wise feed-forward block: ``act(x W1 + b1) W2 + b2``, or with ``cfg.gated_mlp``
    ``(act(x W1 + b1) * (x Wg + bg)) W2 + b2`` (SwiGLU / GeGLU). x: [..., d_model] -> [..., d_model]."""

    def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs):
        kwargs = dict(use_bias=cfg.use_bias, dtype=cfg.jnp_dtype, param_dtype=cfg.jnp_param_dtype,
                      kernel_init=kernel_init, bias_init=bias_init, rngs=rngs)
        self.wi = nnx.Linear(cfg.d_model, cfg.d_ff, **kwargs)
        self.wg = nnx.Linear(cfg.d_model, cfg.d_ff, **kwargs) if cfg.gated_mlp else nnx.data(None)
        self.wo = nnx.Linear(cfg.d_ff, cfg.d_model, **kwargs)
        self.activation = cfg.activation

    def __call__(self, x: jax.Array) -> jax.Array:
        h = _ACTIVATIONS[self.activation](self.wi(x))
        if self.wg is not None:
            h = h * self.wg(x)
        return self.wo(h)


def sinusoidal_encoding(positions: jax.Array, features: int, max_timescale: float = 10000.0) -> jax.Array:
    """Vaswani et al.'s sinusoids at the given positions: [B, T] ints -> [B, T, features] float32.

    Channel ``i < features/2`` is ``sin(pos / max_timescale^(2i/features))`` and channel ``features/2 + i`` the
    matching cosine (the paper interleaves them; the order of channels is immaterial).
    """
    half = (features + 1) // 2
    inv_freq = max_timescale ** (-jnp.arange(half, dtype=jnp.float32) * 2.0 / features)
    angles = positions.astype(jnp.float32)[..., None] * inv_freq
    return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)[..., :features]


def rope_frequencies(d: int, base: float = 10000.0, scaling: tuple = ()) -> jax.Array:
    """RoPE's inverse frequencies [d/2] float32, rescaled by ``scaling`` (``TransformerConfig.rope_scaling``
    items: "linear" divides every frequency by ``factor``; "llama3" divides the low frequencies by ``factor``,
    keeps the high ones and interpolates between, as Llama 3.1 does)."""
    inv_freq = 1.0 / (base ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))
    s = dict(scaling)
    if not s:
        return inv_freq
    factor = float(s["factor"])
    if s["rope_type"] == "linear":
        return inv_freq / factor
    old_len = float(s["original_max_position_embeddings"])
    low, high = float(s["low_freq_factor"]), float(s["high_freq_factor"])
    wavelen = 2 * jnp.pi / inv_freq
    scaled = jnp.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old_len / high) & ~(wavelen > old_len / low)
    return jnp.where(medium, smoothed, scaled)


def apply_rope(x: jax.Array, positions: jax.Array, base: float = 10000.0, scaling: tuple = ()) -> jax.Array:
    """Rotary position embedding (Su et al.) on the last axis, rotate-half layout; ``scaling``: see
    ``rope_frequencies``.

    x: [B, T, H, D] with D even; positions: [B, T] ints -> [B, T, H, D] in x's dtype.
    """
    d = x.shape[-1]
    if d % 2 != 0:
        raise ValueError(f"apply_rope: head dim must be even; got {d}")
    inv_freq = rope_frequencies(d, base, scaling)  # [D/2]
    angles = positions.astype(jnp.float32)[:, :, None, None] * inv_freq  # [B, T, 1, D/2]
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return rotated.astype(x.dtype)


class PositionEncoding(nnx.Module):
    """Adds the configured absolute position signal to embeddings ("sinusoidal" or "learned"; identity for
    "rope" and "none"), then the embedding norm when ``cfg.embed_norm``.
    x: [B, T, d_model], positions: [B, T] -> [B, T, d_model]."""

    def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs):
        self.norm = make_norm(cfg, cfg.d_model, rngs=rngs) if cfg.embed_norm else nnx.data(None)
        self.kind = cfg.position
        self.d_model = cfg.d_model
        self.table: Optional[nnx.Embed]
        if cfg.position == "learned":
            self.table = nnx.Embed(
                cfg.max_len, cfg.d_model, dtype=cfg.jnp_dtype, param_dtype=cfg.jnp_param_dtype,
                embedding_init=nnx.initializers.normal(stddev=0.02), rngs=rngs,
            )
        else:
            self.table = nnx.data(None)

    def __call__(self, x: jax.Array, positions: jax.Array) -> jax.Array:
        if self.kind == "sinusoidal":
            x = x + sinusoidal_encoding(positions, self.d_model).astype(x.dtype)
        elif self.kind == "learned":
            x = x + self.table(positions)
        return x if self.norm is None else self.norm(x)


def positions_from_segmentation(segmentation: jax.Array) -> jax.Array:
    """Position of each token within its segment: [B, T] ints -> [B, T] int32 (0 at every segment start)."""
    B, T = segmentation.shape
    idx = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    prev = jnp.pad(segmentation[:, :-1], ((0, 0), (1, 0)), constant_values=-1)
    starts = jnp.where(segmentation != prev, idx, 0)
    return idx - jax.lax.cummax(starts, axis=1)
