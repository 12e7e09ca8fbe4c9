"""Label-smoothed cross entropy with padding excluded."""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp


def cross_entropy(
    logits: jax.Array,
    targets: jax.Array,
    weights: Optional[jax.Array],
    label_smoothing: float = 0.0,
) -> tuple[jax.Array, jax.Array]:
    """Summed cross entropy against label-smoothed targets, and the summed weights.

    logits: [B, T, V] (any float dtype; computed in float32), targets: [B, T] ints, weights: [B, T] (0 drops a
    position, e.g. padding; None weighs every position 1). The smoothed target puts ``1 - label_smoothing`` on
    the true token and spreads ``label_smoothing`` uniformly over all V tokens (Szegedy et al., 2016).
    Returns ``(loss_sum, weight_sum)``, both float32 scalars; the mean loss is their ratio. With
    ``label_smoothing=0`` the ratio is the token-level negative log-likelihood (log perplexity).
    """
    if logits.ndim != targets.ndim + 1 or logits.shape[:-1] != targets.shape:
        raise ValueError(
            f"cross_entropy: logits {tuple(logits.shape)} must be targets {tuple(targets.shape)} plus a vocab axis"
        )
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1); got {label_smoothing!r}")
    logits = logits.astype(jnp.float32)
    lse = jax.nn.logsumexp(logits, axis=-1)
    true_logit = jnp.take_along_axis(logits, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]
    loss = lse - (1.0 - label_smoothing) * true_logit
    if label_smoothing > 0.0:
        loss = loss - label_smoothing * jnp.mean(logits, axis=-1)
    if weights is None:
        weights = jnp.ones(targets.shape, jnp.float32)
    else:
        if tuple(weights.shape) != tuple(targets.shape):
            raise ValueError(f"cross_entropy: weights {tuple(weights.shape)} must match targets {tuple(targets.shape)}")
        weights = weights.astype(jnp.float32)
    return jnp.sum(loss * weights), jnp.sum(weights)
