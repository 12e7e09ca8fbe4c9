"""The ``reference`` backend: plain einsum + softmax, every feature, the full weights. For checking and plots."""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from attention.api import Request, register_backend
from attention.mask import Mask
from attention.stats import AttentionStats, stats_from_logits


def accumulator_dtype(dtype) -> jnp.dtype:
    """The dtype attention accumulates in: float32 for 16/32-bit inputs, float64 for float64 ones."""
    return jnp.promote_types(dtype, jnp.float32)


def grouped_logits(q: jax.Array, k: jax.Array, scale: float) -> jax.Array:
    """Scaled logits with K/V heads shared by groups of query heads, without copying K.

    q: [B, Tq, H, D], k: [B, Tk, Hkv, D] -> [B, H, Tq, Tk] float32 (float64 for float64 inputs).
    """
    B, Tq, H, D = q.shape
    Hkv = k.shape[2]
    qg = q.reshape(B, Tq, Hkv, H // Hkv, D)
    s = jnp.einsum("btkgd,bskd->bkgts", qg, k, preferred_element_type=accumulator_dtype(q.dtype))
    return s.reshape(B, H, Tq, k.shape[1]) * scale


def grouped_values(p: jax.Array, v: jax.Array) -> jax.Array:
    """p: [B, H, Tq, Tk], v: [B, Tk, Hkv, Dv] -> [B, Tq, H, Dv] (accumulated in float32, or float64)."""
    B, H, Tq, Tk = p.shape
    Hkv = v.shape[2]
    pg = p.reshape(B, Hkv, H // Hkv, Tq, Tk)
    out = jnp.einsum("bkgts,bskd->btkgd", pg, v, preferred_element_type=accumulator_dtype(v.dtype))
    return out.reshape(B, Tq, H, v.shape[3])


def masked_softmax(s: jax.Array, visible: jax.Array) -> jax.Array:
    """Softmax over the last axis of float32 logits; rows with no visible entry give all zeros."""
    s = jnp.where(visible, s, -jnp.inf)
    m = jnp.max(s, axis=-1, keepdims=True)
    m = jnp.where(jnp.isfinite(m), m, 0.0)
    e = jnp.where(visible, jnp.exp(s - m), 0.0)
    denom = jnp.sum(e, axis=-1, keepdims=True)
    return e / jnp.where(denom > 0, denom, 1.0)


def reference_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: Mask,
    *,
    scale: float,
    dropout_rate: float = 0.0,
    dropout_rng: Optional[jax.Array] = None,
    return_stats: bool = False,
) -> tuple[jax.Array, Optional[AttentionStats]]:
    """q: [B, Tq, H, D], k: [B, Tk, Hkv, D], v: [B, Tk, Hkv, Dv] -> ([B, Tq, H, Dv], stats with weights)."""
    B, Tq, H, _ = q.shape
    Tk = k.shape[1]
    visible = mask.materialize(B, H, Tq, Tk)
    s = grouped_logits(q, k, scale)
    p = masked_softmax(s, visible)
    p_used = p
    if dropout_rate > 0.0:
        keep = jax.random.bernoulli(dropout_rng, 1.0 - dropout_rate, p.shape)
        p_used = jnp.where(keep, p / (1.0 - dropout_rate), 0.0)
    out = grouped_values(p_used.astype(v.dtype), v).astype(q.dtype)
    if not return_stats:
        return out, None
    stats = stats_from_logits(s, visible).replace(weights=jax.lax.stop_gradient(p))
    return out, stats


def _supports(request: Request) -> Optional[str]:
    return None


register_backend("reference", reference_attention, _supports)
