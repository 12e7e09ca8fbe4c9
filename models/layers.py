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

_ACTIVATIONS = {"relu": jax.nn.relu, "gelu": jax.nn.gelu, "silu": jax.nn.silu}


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


class MLP(nnx.Module):
    """Position-wise feed-forward block: ``act(x W1 + b1) W2 + b2``. x: [..., d_model] -> [..., d_model]."""

    def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs):
        kwargs = dict(use_bias=cfg.use_bias, dtype=cfg.jnp_dtype, param_dtype=cfg.jnp_param_dtype,
                      kernel_init=kernel_init, bias_init=bias_init, rngs=rngs)
        self.wi = nnx.Linear(cfg.d_model, cfg.d_ff, **kwargs)
        self.wo = nnx.Linear(cfg.d_ff, cfg.d_model, **kwargs)
        self.activation = cfg.activation

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.wo(_ACTIVATIONS[self.activation](self.wi(x)))


def sinusoidal_encoding(positions: jax.Array, features: int, max_timescale: float = 10000.0) -> jax.Array:
    """Vaswani et al.'s sinusoids at the given positions: [B, T] ints -> [B, T, features] float32.

    Channel ``i < features/2`` is ``sin(pos / max_timescale^(2i/features))`` and channel ``features/2 + i`` the
    matching cosine (the paper interleaves them; the order of channels is immaterial).
    """
    half = (features + 1) // 2
    inv_freq = max_timescale ** (-jnp.arange(half, dtype=jnp.float32) * 2.0 / features)
    angles = positions.astype(jnp.float32)[..., None] * inv_freq
    return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)[..., :features]


def apply_rope(x: jax.Array, positions: jax.Array, base: float = 10000.0) -> jax.Array:
    """Rotary position embedding (Su et al.) on the last axis, rotate-half layout.

    x: [B, T, H, D] with D even; positions: [B, T] ints -> [B, T, H, D] in x's dtype.
    """
    d = x.shape[-1]
    if d % 2 != 0:
        raise ValueError(f"apply_rope: head dim must be even; got {d}")
    inv_freq = base ** (-jnp.arange(0, d, 2, dtype=jnp.float32) / d)  # [D/2]
    angles = positions.astype(jnp.float32)[:, :, None, None] * inv_freq  # [B, T, 1, D/2]
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return rotated.astype(x.dtype)


class PositionEncoding(nnx.Module):
    """Adds the configured absolute position signal to embeddings ("sinusoidal" or "learned"; identity for
    "rope" and "none"). x: [B, T, d_model], positions: [B, T] -> [B, T, d_model]."""

    def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs):
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
            return x + sinusoidal_encoding(positions, self.d_model).astype(x.dtype)
        if self.kind == "learned":
            return x + self.table(positions)
        return x


def positions_from_segmentation(segmentation: jax.Array) -> jax.Array:
    """Position of each token within its segment: [B, T] ints -> [B, T] int32 (0 at every segment start)."""
    B, T = segmentation.shape
    idx = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    prev = jnp.pad(segmentation[:, :-1], ((0, 0), (1, 0)), constant_values=-1)
    starts = jnp.where(segmentation != prev, idx, 0)
    return idx - jax.lax.cummax(starts, axis=1)
