"""The ``xla`` and ``cudnn`` backends: ``jax.nn.dot_product_attention`` with our mask and statistics."""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from attention.api import Request, default_platform, register_backend
from attention.mask import Mask
from attention.reference import grouped_logits
from attention.stats import AttentionStats, stats_from_logits


def _pad_last(x: jax.Array, size: int) -> jax.Array:
    return x if x.shape[-1] == size else jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, size - x.shape[-1])])


def _jax_window(window, open_size: int):
    """Our (left, right) window with open sides, as the pair of ints jax expects."""
    if window is None:
        return None
    return tuple(open_size if side is None else side for side in window)


def _dot_product_attention(q, k, v, mask: Mask, *, scale, return_stats, implementation):
    if q.dtype == jnp.float16 and default_platform() == "cpu":
        # XLA:CPU cannot compile the float16 x float16 -> float32 products jax.nn.dot_product_attention emits
        # under jit; float16 is exact in float32, so compute there and round the output back.
        up = [x.astype(jnp.float32) for x in (q, k, v)]
        out, stats = _dot_product_attention(*up, mask, scale=scale, return_stats=return_stats,
                                            implementation=implementation)
        return out.astype(q.dtype), stats
    B, Tq, H, D = q.shape
    Tk, Dv = k.shape[1], v.shape[3]
    # jax.nn.dot_product_attention needs one head dim for q, k and v: zero-pad the smaller side (exact).
    width = max(D, Dv)
    qp, kp, vp = _pad_last(q, width), _pad_last(k, width), _pad_last(v, width)
    simple = not (mask.has_segments or mask.has_positions or mask.dense is not None)
    if simple and Tq <= Tk:
        # Causal and window masks in their closed form; every row sees at least its own position.
        visible = None
        out = jax.nn.dot_product_attention(
            qp, kp, vp, scale=scale, is_causal=mask.causal, local_window_size=_jax_window(mask.window, Tq + Tk),
            implementation=implementation,
        )
    else:
        visible = mask.materialize(B, H, Tq, Tk)
        out = jax.nn.dot_product_attention(qp, kp, vp, mask=visible, scale=scale, implementation=implementation)
        row_valid = jnp.any(visible, axis=-1)  # [B, 1|H, Tq]
        out = jnp.where(jnp.swapaxes(row_valid, 1, 2)[..., None], out, jnp.zeros((), out.dtype))
    out = out[..., :Dv]
    if not return_stats:
        return out, None
    if visible is None:
        visible = mask.materialize(B, H, Tq, Tk)
    return out, stats_from_logits(grouped_logits(q, k, scale), visible)


def xla_attention(
    q: jax.Array, k: jax.Array, v: jax.Array, mask: Mask, *, scale: float, dropout_rate: float = 0.0,
    dropout_rng: Optional[jax.Array] = None, return_stats: bool = False,
) -> tuple[jax.Array, Optional[AttentionStats]]:
    """q: [B, Tq, H, D], k: [B, Tk, Hkv, D], v: [B, Tk, Hkv, Dv] -> [B, Tq, H, Dv] through XLA."""
    return _dot_product_attention(q, k, v, mask, scale=scale, return_stats=return_stats, implementation="xla")


def cudnn_attention(
    q: jax.Array, k: jax.Array, v: jax.Array, mask: Mask, *, scale: float, dropout_rate: float = 0.0,
    dropout_rng: Optional[jax.Array] = None, return_stats: bool = False,
) -> tuple[jax.Array, Optional[AttentionStats]]:
    """q: [B, Tq, H, D], k: [B, Tk, Hkv, D], v: [B, Tk, Hkv, Dv] -> [B, Tq, H, Dv] through cuDNN (GPU only)."""
    return _dot_product_attention(q, k, v, mask, scale=scale, return_stats=return_stats, implementation="cudnn")


def _supports_xla(request: Request) -> Optional[str]:
    if request.dropout:
        return "dropout (jax.nn.dot_product_attention has none); use 'reference' or 'chunked'"
    return None


def _supports_cudnn(request: Request) -> Optional[str]:
    if request.platform != "gpu":
        return f"the {request.platform} platform (cuDNN needs an NVIDIA GPU)"
    if request.dropout:
        return "dropout (jax.nn.dot_product_attention has none)"
    if jnp.dtype(request.dtype) not in (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16)):
        return f"dtype {jnp.dtype(request.dtype).name} (cuDNN attention takes float16 or bfloat16)"
    if request.qk_dim != request.v_dim:
        return "a value head dim different from the query/key head dim"
    if request.qk_dim > 256 or request.qk_dim % 8:
        return (f"head dim {request.qk_dim} (cuDNN flash attention takes multiples of 8 up to 256 on Hopper "
                "and later, up to 128 before)")
    return None


register_backend("xla", xla_attention, _supports_xla)
register_backend("cudnn", cudnn_attention, _supports_cudnn)
