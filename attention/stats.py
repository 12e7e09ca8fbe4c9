"""Per-row attention statistics and the reductions researchers log.

Every backend returns the same ``AttentionStats`` when asked (``return_stats=True``). All fields are
``[B, H, Tq]`` float32 except ``valid`` (bool) and ``weights`` (only from the ``reference`` backend).
Rows with no visible key (padding queries) have ``valid=False`` and zeros in every other field; the
reductions here exclude them. Statistics carry no gradient.

- ``entropy``: ``-sum_j p_j log p_j`` in nats, over the visible keys.
- ``max_logit``: the largest scaled logit ``scale * q.k`` among the visible keys.
- ``lse``: ``log sum_j exp(scale * q.k_j)`` over the visible keys.
- ``sink``: the attention probability on key 0 (0 where key 0 is not visible).
- ``logit_mean`` / ``logit_std``: mean and (population) standard deviation of the scaled logits
  ``scale * q.k`` over the visible keys, unweighted (every visible key counts once, whatever its probability).
  Healthy scaled attention has a std near 1; a missing ``1/sqrt(d_k)`` shows as std ~ sqrt(d_k).

Backends that stream over key blocks keep, per row, the count of visible keys, their mean and the sum of
squared deviations from that mean (``m2``), and merge blocks with Chan et al.'s pairwise update
(``merge_moments``): no sum of squares of raw logits is ever formed, so there is no cancellation however
large the logits' common offset.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class AttentionStats:
    entropy: jax.Array  # [B, H, Tq]
    max_logit: jax.Array  # [B, H, Tq]
    lse: jax.Array  # [B, H, Tq]
    valid: jax.Array  # [B, H, Tq] bool
    sink: Optional[jax.Array] = None  # [B, H, Tq]
    weights: Optional[jax.Array] = None  # [B, H, Tq, Tk], reference backend only
    logit_mean: Optional[jax.Array] = None  # [B, H, Tq]
    logit_std: Optional[jax.Array] = None  # [B, H, Tq]

    def replace(self, **changes) -> "AttentionStats":
        return dataclasses.replace(self, **changes)


jax.tree_util.register_dataclass(
    AttentionStats,
    data_fields=["entropy", "max_logit", "lse", "valid", "sink", "weights", "logit_mean", "logit_std"],
    meta_fields=[],
)


def finalize_stats(
    m: jax.Array, l: jax.Array, ps: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Statistics from the online-softmax accumulators of one row.

    m: running max logit; l: sum_j exp(s_j - m); ps: sum_j exp(s_j - m) * s_j (all [..., Tq], float32,
    over visible keys only; rows with no visible key have l == 0).
    Returns (entropy, max_logit, lse, valid) with zeros on invalid rows.
    """
    valid = l > 0
    l_safe = jnp.where(valid, l, 1.0)
    m_safe = jnp.where(valid, m, 0.0)
    lse = m_safe + jnp.log(l_safe)
    entropy = lse - ps / l_safe
    entropy = jnp.maximum(entropy, 0.0)
    zero = jnp.zeros_like(lse)
    return (
        jnp.where(valid, entropy, zero),
        jnp.where(valid, m_safe, zero),
        jnp.where(valid, lse, zero),
        valid,
    )


def tile_moments(s: jax.Array, visible: Optional[jax.Array]) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(count, mean, m2) of ``s`` over its last axis, visible entries only (kept dims: [..., 1]).

    s: [..., n] float; visible: bool broadcastable to s, or None (all visible). m2 is the sum of squared
    deviations from the mean. Rows with no visible entry give (0, 0, 0).
    """
    if visible is None:
        count = jnp.full(s.shape[:-1] + (1,), s.shape[-1], s.dtype)
        mean = jnp.sum(s, axis=-1, keepdims=True) / count
        return count, mean, jnp.sum(jnp.square(s - mean), axis=-1, keepdims=True)
    zero = jnp.zeros((), s.dtype)
    count = jnp.sum(jnp.where(visible, jnp.ones((), s.dtype), zero), axis=-1, keepdims=True)
    mean = jnp.sum(jnp.where(visible, s, zero), axis=-1, keepdims=True) / jnp.maximum(count, 1)
    m2 = jnp.sum(jnp.where(visible, jnp.square(s - mean), zero), axis=-1, keepdims=True)
    return count, mean, m2


def merge_moments(a: tuple, b: tuple) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Chan et al.'s pairwise update: the (count, mean, m2) of the union of two disjoint sets of entries."""
    na, mean_a, m2a = a
    nb, mean_b, m2b = b
    n = na + nb
    frac = nb / jnp.maximum(n, 1)
    delta = mean_b - mean_a
    return n, mean_a + delta * frac, m2a + m2b + jnp.square(delta) * na * frac


def finish_moments(count: jax.Array, mean: jax.Array, m2: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(logit_mean, logit_std) from the moments; (0, 0) where count == 0."""
    valid = count > 0
    std = jnp.sqrt(jnp.maximum(m2, 0) / jnp.maximum(count, 1))
    zero = jnp.zeros((), mean.dtype)
    return jnp.where(valid, mean, zero), jnp.where(valid, std, zero)


def stats_from_logits(logits: jax.Array, visible: jax.Array) -> AttentionStats:
    """Statistics from dense scaled logits [B, H, Tq, Tk] and visibility (broadcastable bool)."""
    s = logits.astype(jnp.float32)
    visible = jnp.broadcast_to(visible, s.shape)
    s_masked = jnp.where(visible, s, -jnp.inf)
    m = jnp.max(s_masked, axis=-1)
    m_safe = jnp.where(jnp.isfinite(m), m, 0.0)
    e = jnp.where(visible, jnp.exp(s_masked - m_safe[..., None]), 0.0)
    l = jnp.sum(e, axis=-1)
    ps = jnp.sum(jnp.where(visible, e * s, 0.0), axis=-1)
    entropy, max_logit, lse, valid = finalize_stats(m_safe, l, ps)
    sink = jnp.where(valid, e[..., 0] / jnp.where(valid, l, 1.0), 0.0)
    logit_mean, logit_std = finish_moments(*(x[..., 0] for x in tile_moments(s, visible)))
    return jax.lax.stop_gradient(
        AttentionStats(entropy=entropy, max_logit=max_logit, lse=lse, valid=valid, sink=sink,
                       logit_mean=logit_mean, logit_std=logit_std)
    )


# ------------------------------------------------------------------------------------------------- reductions
def _masked_mean(x: jax.Array, valid: jax.Array, axis) -> jax.Array:
    w = valid.astype(jnp.float32)
    return jnp.sum(jnp.where(valid, x, 0.0), axis=axis) / jnp.maximum(jnp.sum(w, axis=axis), 1.0)


def mean_entropy_per_head(stats: AttentionStats) -> jax.Array:
    """Mean entropy over valid rows: [B, H, Tq] -> [H]."""
    return _masked_mean(stats.entropy, stats.valid, axis=(0, 2))


def max_logit_per_head(stats: AttentionStats) -> jax.Array:
    """Largest logit over valid rows: [B, H, Tq] -> [H]."""
    return jnp.max(jnp.where(stats.valid, stats.max_logit, -jnp.inf), axis=(0, 2))


def sink_mass_per_head(stats: AttentionStats) -> jax.Array:
    """Mean attention probability on key 0 over valid rows: [B, H, Tq] -> [H]."""
    return _masked_mean(_require(stats, "sink"), stats.valid, axis=(0, 2))


def _require(stats: AttentionStats, field: str) -> jax.Array:
    value = getattr(stats, field)
    if value is None:
        raise ValueError(f"AttentionStats.{field} is None; stats from attention.attention always carry it")
    return value


def logit_mean_per_head(stats: AttentionStats) -> jax.Array:
    """Mean over valid rows of each row's mean scaled logit: [B, H, Tq] -> [H]."""
    return _masked_mean(_require(stats, "logit_mean"), stats.valid, axis=(0, 2))


def logit_std_per_head(stats: AttentionStats) -> jax.Array:
    """Mean over valid rows of each row's logit standard deviation (the spread one query sees): -> [H]."""
    return _masked_mean(_require(stats, "logit_std"), stats.valid, axis=(0, 2))


def normalized_entropy_per_head(stats: AttentionStats, num_visible: jax.Array) -> jax.Array:
    """Mean of entropy / log(num visible keys) over valid rows with more than one visible key: -> [H].

    num_visible: [B, H, Tq] or broadcastable (e.g. [B, 1, 1] for padding-only masks). 1.0 is uniform.
    """
    n = jnp.broadcast_to(jnp.asarray(num_visible, jnp.float32), stats.entropy.shape)
    ok = stats.valid & (n > 1)
    ratio = stats.entropy / jnp.log(jnp.maximum(n, 2.0))
    return _masked_mean(ratio, ok, axis=(0, 2))


def collapsed_fraction(stats: AttentionStats, threshold: float = 0.1) -> jax.Array:
    """Fraction of heads whose mean entropy (nats) is below ``threshold``: near one-hot attention. -> []."""
    return jnp.mean((mean_entropy_per_head(stats) < threshold).astype(jnp.float32))


def uniform_entropy(num_keys: int) -> float:
    """Entropy of uniform attention over ``num_keys`` keys, in nats."""
    return math.log(num_keys)
