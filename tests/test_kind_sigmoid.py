"""The ``sigmoid`` attention kind against a NumPy oracle (the shared checks are in
tests/test_attention_kinds.py)."""
import jax.numpy as jnp
import numpy as np

import attention as attn


def test_sigmoid_weights_match_numpy_per_row_bias():
    r = np.random.default_rng(0)
    B, T, H, Hkv, D = 2, 5, 4, 2, 8
    q, k, v = (r.normal(size=(B, T, h, D)) for h in (H, Hkv, Hkv))
    seg = np.array([[1, 1, 1, 0, 0], [1] * T])
    mask = attn.Mask(causal=True, q_segment_ids=jnp.asarray(seg), kv_segment_ids=jnp.asarray(seg))
    call = attn.KindCall(params={}, scale=D ** -0.5)
    out, stats = attn.get_kind("sigmoid").fn(*(jnp.asarray(x, jnp.float32) for x in (q, k, v)), mask, call)
    assert stats is None
    kv = np.arange(H) // (H // Hkv)
    s = np.einsum("bthd,bshd->bhts", q, k[:, :, kv]) * D ** -0.5
    visible = (np.arange(T)[None, :] <= np.arange(T)[:, None])[None, None] & (seg[:, None, :, None] > 0) & (
        seg[:, None, None, :] > 0)
    n = np.maximum(visible.sum(-1, keepdims=True), 1)
    p = np.where(visible, 1 / (1 + np.exp(-(s - np.log(n)))), 0.0)
    np.testing.assert_allclose(np.asarray(out), np.einsum("bhts,bshd->bthd", p, v[:, :, kv]), atol=1e-5)
