"""``sigmoid``: each key's weight is ``sigmoid(scale * q.k - log n)``, independently of the other keys.

Sigmoid attention (Ramapuram et al. 2024, "Theory, Analysis, and Best Practices for Sigmoid Self-Attention")
with the bias ``-log n``, n here the number of keys the query row sees, so a row's weights sum to about one at
initialization. The weights do not form a distribution, so entropy and log-sum-exp statistics do not exist.
"""
import jax
import jax.numpy as jnp

from attention.api import Kind, KindCall, check_mask, check_qkv, register_kind
from attention.reference import grouped_logits, grouped_values


def sigmoid_kind(q, k, v, mask, call: KindCall):
    """q [B, Tq, H, Dk], k [B, Tk, Hkv, Dk], v [B, Tk, Hkv, Dv] -> ([B, Tq, H, Dv], None)."""
    check_qkv("sigmoid_attention", q, k, v)
    B, Tq, H, _ = q.shape
    Tk = k.shape[1]
    visible = check_mask("sigmoid_attention", mask, B, H, Tq, Tk).materialize(B, H, Tq, Tk)
    s = grouped_logits(q, k, call.scale)  # [B, H, Tq, Tk], float32 (float64 for float64 inputs)
    n = jnp.maximum(jnp.sum(visible, axis=-1, keepdims=True), 1).astype(s.dtype)
    p = jnp.where(visible, jax.nn.sigmoid(s - jnp.log(n)), 0.0)
    return grouped_values(p.astype(v.dtype), v).astype(q.dtype), None


register_kind(Kind(
    name="sigmoid", fn=sigmoid_kind,
    unsupported={"statistics": "sigmoid weights do not sum to one, so entropy and log-sum-exp do not exist",
                 "dropout": "dropout is implemented on the backends of kind 'softmax' only",
                 "weight_override": "overrides recompute the weights with the softmax reference"},
    description="sigmoid(scale * q.k - log n) per key, n the visible keys (Ramapuram et al. 2024)",
))
