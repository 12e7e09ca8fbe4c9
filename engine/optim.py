"""Optimizers and learning-rate schedules (optax), built from ``config.train``.

- ``schedule="rsqrt"``: Vaswani et al.'s warmup then inverse square root,
  ``lr(step) = learning_rate * min(step / warmup, sqrt(warmup / step))`` — ``learning_rate`` is the peak,
  reached at ``warmup_steps``. The paper's ``d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)`` is this
  with ``learning_rate = (d_model * warmup_steps)**-0.5`` (7.0e-4 for the base model, warmup 4000).
- ``schedule="cosine"``: linear warmup to ``learning_rate`` then cosine decay to
  ``learning_rate * final_lr_fraction`` at ``num_steps``.
- ``schedule="constant"``: linear warmup then constant.

``optimizer="adam"`` uses (b1, b2, eps) from the config (paper: 0.9, 0.98, 1e-9); ``"adamw"`` adds decoupled
weight decay ``weight_decay`` on every parameter with more than one dimension. ``grad_clip_norm > 0`` clips
by global norm first.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import optax


def make_schedule(t: ml_collections.ConfigDict) -> optax.Schedule:
    """The learning-rate schedule of ``config.train``: step (int) -> lr (float32)."""
    peak = float(t.learning_rate)
    warmup = int(t.warmup_steps)
    if t.schedule == "rsqrt":

        def rsqrt(step):
            s = jnp.maximum(jnp.asarray(step, jnp.float32), 1.0)
            return peak * jnp.minimum(s / warmup, jnp.sqrt(warmup / s))

        return rsqrt
    if t.schedule == "cosine":
        decay = max(int(t.num_steps), warmup + 1)
        return optax.warmup_cosine_decay_schedule(
            init_value=0.0, peak_value=peak, warmup_steps=warmup, decay_steps=decay,
            end_value=peak * float(t.final_lr_fraction),
        )
    if t.schedule == "constant":
        if warmup == 0:
            return optax.constant_schedule(peak)
        return optax.join_schedules(
            [optax.linear_schedule(0.0, peak, warmup), optax.constant_schedule(peak)], [warmup]
        )
    raise ValueError(f"config.train.schedule={t.schedule!r}; expected one of ('rsqrt', 'cosine', 'constant')")


def _decay_mask(params):
    return jax.tree.map(lambda p: jnp.ndim(p) > 1, params)


def make_optimizer(t: ml_collections.ConfigDict) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """(optax transformation, schedule) for ``config.train``."""
    schedule = make_schedule(t)
    parts = []
    if t.grad_clip_norm > 0:
        parts.append(optax.clip_by_global_norm(float(t.grad_clip_norm)))
    if t.optimizer == "adam":
        parts.append(optax.adam(schedule, b1=float(t.b1), b2=float(t.b2), eps=float(t.eps)))
    elif t.optimizer == "adamw":
        parts.append(
            optax.adamw(
                schedule, b1=float(t.b1), b2=float(t.b2), eps=float(t.eps),
                weight_decay=float(t.weight_decay), mask=_decay_mask,
            )
        )
    else:
        raise ValueError(f"config.train.optimizer={t.optimizer!r}; expected 'adam' or 'adamw'")
    return optax.chain(*parts), schedule
