"""Head reshaping and multi-head attention as a pure function of its projection weights.

Parameter layout of ``multi_head_attention`` (a mapping; ``init_mha_params`` builds one):

====== ===================== ==================================================
key    shape                 meaning
====== ===================== ==================================================
``wq`` ``[Dm, H, Dk]``       query projection
``wk`` ``[Dm_kv, Hkv, Dk]``  key projection
``wv`` ``[Dm_kv, Hkv, Dv]``  value projection
``wo`` ``[H, Dv, Dm]``       output projection
``bq`` ``[H, Dk]``           optional query bias
``bk`` ``[Hkv, Dk]``         optional key bias
``bv`` ``[Hkv, Dv]``         optional value bias
``bo`` ``[Dm]``              optional output bias
====== ===================== ==================================================

Head counts come from the weights (``H = wq.shape[1]``, ``Hkv = wk.shape[1]``); ``H % Hkv == 0`` gives
grouped-query (``1 < Hkv < H``) and multi-query (``Hkv == 1``) attention. Other keys are rejected.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional, Union

import jax
import jax.numpy as jnp

from attention.api import FLOAT_DTYPES, attention
from attention.mask import Mask
from attention.stats import AttentionStats

_REQUIRED = ("wq", "wk", "wv", "wo")
_OPTIONAL = ("bq", "bk", "bv", "bo")


def _check_array(fn: str, name: str, x: Any, ndim: int, layout: str) -> None:
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise ValueError(f"{fn}: {name} must be an array {layout}; got {type(x).__name__}")
    if x.ndim != ndim:
        raise ValueError(f"{fn}: {name} has shape {tuple(x.shape)}; expected {ndim} dims {layout}")
    if x.dtype not in FLOAT_DTYPES:
        raise ValueError(
            f"{fn}: {name} has dtype {x.dtype}; expected one of float16, bfloat16, float32, float64"
        )


def split_heads(x: jax.Array, num_heads: int) -> jax.Array:
    """x: [B, T, H*D] -> [B, T, H, D]."""
    if not isinstance(num_heads, int) or isinstance(num_heads, bool) or num_heads <= 0:
        raise ValueError(f"split_heads: num_heads must be a positive int; got {num_heads!r}")
    if not hasattr(x, "shape") or x.ndim != 3:
        got = tuple(x.shape) if hasattr(x, "shape") else type(x).__name__
        raise ValueError(f"split_heads: x has shape {got}; expected 3 dims [B, T, H*D]")
    B, T, F = x.shape
    if F % num_heads != 0:
        raise ValueError(
            f"split_heads: x has shape {(B, T, F)}; expected [B, T, H*D] with the last dim a multiple of "
            f"num_heads={num_heads}"
        )
    return x.reshape(B, T, num_heads, F // num_heads)


def merge_heads(x: jax.Array) -> jax.Array:
    """x: [B, T, H, D] -> [B, T, H*D]."""
    if not hasattr(x, "shape") or x.ndim != 4:
        got = tuple(x.shape) if hasattr(x, "shape") else type(x).__name__
        raise ValueError(f"merge_heads: x has shape {got}; expected 4 dims [B, T, H, D]")
    B, T, H, D = x.shape
    return x.reshape(B, T, H * D)


def init_mha_params(
    key: jax.Array,
    d_model: int,
    num_heads: int,
    qk_dim: int,
    v_dim: int,
    num_kv_heads: Optional[int] = None,
    d_kv: Optional[int] = None,
    dtype: Any = jnp.float32,
    use_bias: bool = False,
) -> dict[str, jax.Array]:
    """Parameters for ``multi_head_attention`` in the layout of the module docstring.

    Weights are normal with variance 1/fan_in (LeCun normal); biases (``use_bias=True``) start at zero.
    num_kv_heads defaults to num_heads; d_kv (the width of ``x_kv``) defaults to d_model.
    """
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    d_kv = d_model if d_kv is None else d_kv
    for name, value in (("d_model", d_model), ("num_heads", num_heads), ("qk_dim", qk_dim), ("v_dim", v_dim),
                        ("num_kv_heads", num_kv_heads), ("d_kv", d_kv)):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"init_mha_params: {name} must be a positive int; got {value!r}")
    if num_heads % num_kv_heads != 0:
        raise ValueError(
            f"init_mha_params: num_heads={num_heads} must be a multiple of num_kv_heads={num_kv_heads}"
        )
    kq, kk, kv, ko = jax.random.split(key, 4)

    def normal(k, shape, fan_in):
        return (jax.random.normal(k, shape, jnp.float32) / math.sqrt(fan_in)).astype(dtype)

    params = {
        "wq": normal(kq, (d_model, num_heads, qk_dim), d_model),
        "wk": normal(kk, (d_kv, num_kv_heads, qk_dim), d_kv),
        "wv": normal(kv, (d_kv, num_kv_heads, v_dim), d_kv),
        "wo": normal(ko, (num_heads, v_dim, d_model), num_heads * v_dim),
    }
    if use_bias:
        params.update(
            bq=jnp.zeros((num_heads, qk_dim), dtype),
            bk=jnp.zeros((num_kv_heads, qk_dim), dtype),
            bv=jnp.zeros((num_kv_heads, v_dim), dtype),
            bo=jnp.zeros((d_model,), dtype),
        )
    return params


def _check_params(params: Mapping[str, jax.Array], d_model: int, d_kv: int) -> tuple[int, int, int, int]:
    """Validate the parameter mapping; returns (H, Hkv, Dk, Dv)."""
    fn = "multi_head_attention"
    if not isinstance(params, Mapping):
        raise ValueError(f"{fn}: params must be a mapping with keys {_REQUIRED}; got {type(params).__name__}")
    missing = [k for k in _REQUIRED if k not in params]
    if missing:
        raise ValueError(f"{fn}: params is missing {missing}; expected keys {_REQUIRED} and optionally {_OPTIONAL}")
    unknown = sorted(set(params) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise ValueError(f"{fn}: params has unknown keys {unknown}; expected {_REQUIRED} and optionally {_OPTIONAL}")
    wq, wk, wv, wo = (params[k] for k in _REQUIRED)
    _check_array(fn, "params['wq']", wq, 3, "[Dm, H, Dk]")
    H, Dk = wq.shape[1], wq.shape[2]
    if wq.shape[0] != d_model:
        raise ValueError(f"{fn}: params['wq'] has shape {tuple(wq.shape)}; expected [Dm={d_model}, H, Dk]")
    _check_array(fn, "params['wk']", wk, 3, "[Dm_kv, Hkv, Dk]")
    Hkv = wk.shape[1]
    if wk.shape[0] != d_kv or wk.shape[2] != Dk:
        raise ValueError(
            f"{fn}: params['wk'] has shape {tuple(wk.shape)}; expected [Dm_kv={d_kv}, Hkv, Dk={Dk}]"
        )
    _check_array(fn, "params['wv']", wv, 3, "[Dm_kv, Hkv, Dv]")
    Dv = wv.shape[2]
    if wv.shape[:2] != (d_kv, Hkv):
        raise ValueError(f"{fn}: params['wv'] has shape {tuple(wv.shape)}; expected [Dm_kv={d_kv}, Hkv={Hkv}, Dv]")
    _check_array(fn, "params['wo']", wo, 3, "[H, Dv, Dm]")
    if tuple(wo.shape) != (H, Dv, d_model):
        raise ValueError(f"{fn}: params['wo'] has shape {tuple(wo.shape)}; expected [H, Dv, Dm] = {(H, Dv, d_model)}")
    if min(H, Hkv, Dk, Dv) == 0 or H % Hkv != 0:
        raise ValueError(
            f"{fn}: params give {H} query heads (wq.shape[1]) and {Hkv} key/value heads (wk.shape[1]); "
            "expected positive counts with the query heads a multiple of the key/value heads"
        )
    for name, expected in (("bq", (H, Dk)), ("bk", (Hkv, Dk)), ("bv", (Hkv, Dv)), ("bo", (d_model,))):
        if name in params:
            b = params[name]
            _check_array(fn, f"params['{name}']", b, len(expected), str(list(expected)))
            if tuple(b.shape) != expected:
                raise ValueError(f"{fn}: params['{name}'] has shape {tuple(b.shape)}; expected {expected}")
    return H, Hkv, Dk, Dv


def multi_head_attention(
    x_q: jax.Array,
    x_kv: Optional[jax.Array],
    params: Mapping[str, jax.Array],
    mask: Optional[Mask] = None,
    *,
    num_heads: Optional[int] = None,
    num_kv_heads: Optional[int] = None,
    implementation: str = "auto",
    scale: Optional[float] = None,
    dropout_rate: float = 0.0,
    dropout_rng: Optional[jax.Array] = None,
    return_stats: bool = False,
) -> Union[jax.Array, tuple[jax.Array, AttentionStats]]:
    """Project, attend with ``attention.attention``, merge heads and project back.

    x_q: [B, Tq, Dm]; x_kv: [B, Tk, Dm_kv], or None for self-attention (x_kv = x_q).
    params: the mapping of the module docstring (weights are cast to x_q's dtype, the computation dtype).
    num_heads / num_kv_heads: optional; when given they must equal the counts the weights imply.
    mask, implementation, scale, dropout_rate, dropout_rng, return_stats: as in ``attention.attention``.

    Returns out: [B, Tq, Dm] in x_q's dtype, or (out, AttentionStats) with stats [B, H, Tq].
    """
    fn = "multi_head_attention"
    _check_array(fn, "x_q", x_q, 3, "[B, Tq, Dm]")
    if x_kv is None:
        x_kv = x_q
    _check_array(fn, "x_kv", x_kv, 3, "[B, Tk, Dm_kv]")
    if x_kv.shape[0] != x_q.shape[0]:
        raise ValueError(f"{fn}: x_kv has shape {tuple(x_kv.shape)}; expected [B={x_q.shape[0]}, Tk, Dm_kv]")
    if x_kv.dtype != x_q.dtype:
        raise ValueError(f"{fn}: x_kv has dtype {x_kv.dtype}; expected x_q's dtype {x_q.dtype}")
    H, Hkv, _, _ = _check_params(params, x_q.shape[2], x_kv.shape[2])
    if num_heads is not None and num_heads != H:
        raise ValueError(f"{fn}: num_heads={num_heads} but params['wq'] has {H} heads (shape [Dm, H, Dk])")
    if num_kv_heads is not None and num_kv_heads != Hkv:
        raise ValueError(f"{fn}: num_kv_heads={num_kv_heads} but params['wk'] has {Hkv} heads (shape [Dm_kv, Hkv, Dk])")
    dtype = x_q.dtype
    p = {name: jnp.asarray(w).astype(dtype) for name, w in params.items()}
    q_BxTxHxD = jnp.einsum("btm,mhd->bthd", x_q, p["wq"])
    k_BxSxKxD = jnp.einsum("bsm,mkd->bskd", x_kv, p["wk"])
    v_BxSxKxV = jnp.einsum("bsm,mkv->bskv", x_kv, p["wv"])
    if "bq" in p:
        q_BxTxHxD = q_BxTxHxD + p["bq"]
    if "bk" in p:
        k_BxSxKxD = k_BxSxKxD + p["bk"]
    if "bv" in p:
        v_BxSxKxV = v_BxSxKxV + p["bv"]
    result = attention(
        q_BxTxHxD, k_BxSxKxD, v_BxSxKxV, mask,
        implementation=implementation, scale=scale, dropout_rate=dropout_rate, dropout_rng=dropout_rng,
        return_stats=return_stats,
    )
    o_BxTxHxV, stats = result if return_stats else (result, None)
    out_BxTxM = jnp.einsum("bthv,hvm->btm", o_BxTxHxV, p["wo"])
    if "bo" in p:
        out_BxTxM = out_BxTxM + p["bo"]
    return (out_BxTxM, stats) if return_stats else out_BxTxM
