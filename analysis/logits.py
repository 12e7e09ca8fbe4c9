"""Attention logits at initialization: why dot products are scaled by 1/sqrt(d_k) (Vaswani et al. 2017,
section 3.2.1). Unit-variance random q, k, v stand in for a freshly initialized layer."""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

import attention

SCALES = ("1", "1/sqrt(d_k)", "1/d_k")


def scale_value(name: str, d_k: int) -> float:
    """The logit scale called ``name`` (one of SCALES) for head dim ``d_k``."""
    if name == "1":
        return 1.0
    if name == "1/sqrt(d_k)":
        return 1.0 / math.sqrt(d_k)
    if name == "1/d_k":
        return 1.0 / d_k
    raise ValueError(f"scale_value: unknown scale {name!r}; expected one of {SCALES}")


def scale_name(value: float, d_k: int) -> str:
    """The SCALES name of a ``model.attention_scale`` value at head dim ``d_k``."""
    for name in SCALES:
        if math.isclose(value, scale_value(name, d_k), rel_tol=1e-6):
            return name
    raise ValueError(f"scale_name: attention_scale {value!r} is none of {SCALES} at d_k={d_k}")


def init_statistics(d_k: int, scale: float, *, num_queries: int, num_keys: int, num_heads: int,
                    seed: int) -> dict[str, float]:
    """Attention statistics for unit-variance random q, k, v (``reference`` backend): ``logit_std``,
    ``max_weight`` (mean of each query's largest weight), ``entropy`` (mean, nats), ``keys_with_grad`` (keys
    whose dL/dk_j norm is >= 1% of the query's largest, for L = sum(out * g) with random g),
    ``effective_keys`` (exp of the entropy of the normalized gradient norms), ``q_grad_rms``.

    Every query is its own example (q: [N, 1, H, d_k], k, v: [N, Tk, H, d_k]) so gradients stay per query."""
    for name, v in (("d_k", d_k), ("num_queries", num_queries), ("num_keys", num_keys), ("num_heads", num_heads)):
        if int(v) < 1:
            raise ValueError(f"init_statistics: {name}={v!r}; expected a positive int")
    out = _init_statistics(jax.random.PRNGKey(seed), jnp.float32(scale), num_queries, num_keys, num_heads, d_k)
    return {k: float(v) for k, v in out.items()}


@functools.partial(jax.jit, static_argnums=(2, 3, 4, 5))
def _init_statistics(key, scale, num_queries: int, num_keys: int, num_heads: int, d_k: int) -> dict:
    kq, kk, kv, kg = jax.random.split(key, 4)
    q = jax.random.normal(kq, (num_queries, 1, num_heads, d_k), jnp.float32)
    k = jax.random.normal(kk, (num_queries, num_keys, num_heads, d_k), jnp.float32)
    v = jax.random.normal(kv, (num_queries, num_keys, num_heads, d_k), jnp.float32)
    g = jax.random.normal(kg, (num_queries, 1, num_heads, d_k), jnp.float32)

    _, stats = attention.attention(q, k, v, implementation="reference", scale=scale, return_stats=True)
    logits_NxHxK = jnp.einsum("nqhd,nkhd->nhk", q, k) * scale

    def loss(q_, k_):
        return jnp.sum(attention.attention(q_, k_, v, implementation="reference", scale=scale) * g)

    dq, dk = jax.grad(loss, argnums=(0, 1))(q, k)
    gk_NxKxH = jnp.linalg.norm(dk, axis=-1)
    gk_max = jnp.max(gk_NxKxH, axis=1, keepdims=True)
    receiving = jnp.sum(gk_NxKxH >= 0.01 * gk_max, axis=1)  # [N, H]
    p = gk_NxKxH / jnp.maximum(jnp.sum(gk_NxKxH, axis=1, keepdims=True), 1e-30)
    effective = jnp.exp(-jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0), axis=1))
    return {
        "logit_std": jnp.std(logits_NxHxK),
        "max_weight": jnp.mean(jnp.max(stats.weights, axis=-1)),
        "entropy": jnp.mean(stats.entropy),
        "keys_with_grad": jnp.mean(receiving),
        "effective_keys": jnp.mean(effective),
        "q_grad_rms": jnp.sqrt(jnp.mean(dq ** 2)),
    }
