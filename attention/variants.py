"""Attention variants researchers compare dot-product attention against. Pure functions, ``[B, T, H, D]``.

- ``additive_attention``: Bahdanau et al. (2015) scores ``v_a^T tanh(W_q q + W_k k + b)`` per head. It builds
  the dense mask and a ``[B, H, Tq, Tk, A]`` intermediate: for small research models only.
- ``linear_attention``: kernelized attention (Katharopoulos et al., 2020),
  ``out_i = phi(q_i)^T sum_j phi(k_j) v_j^T / (phi(q_i)^T sum_j phi(k_j) + eps)``, in time and memory linear
  in the sequence length; never builds ``[Tq, Tk]``.
- ``hard_attention``: one key per query drawn by Gumbel-max over the masked scaled logits, trained through
  the straight-through Gumbel-softmax estimator (Jang et al., 2017).

All take K/V with ``Hkv`` heads shared by groups of ``H / Hkv`` query heads (GQA/MQA) without copying them,
and the same ``attention.Mask``. Query rows with no visible key give zeros and finite gradients.

Each variant is its own computation, not a choice of ``attention.attention`` backend (there is no
``implementation`` argument): ``additive_attention`` and ``hard_attention`` materialize the mask and take every
part of it (causal, window, segment ids, positions, dense); ``linear_attention`` takes ``causal`` and 0/1
padding segment ids and raises ValueError naming ``Mask.window``, ``Mask.dense``, positions or packed segment
ids. ``return_stats`` exists for additive and hard attention (the statistics of their scores, with weights).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np

from attention.api import FLOAT_DTYPES, check_mask, check_qkv
from attention.mask import Mask
from attention.reference import accumulator_dtype, grouped_logits, grouped_values, masked_softmax
from attention.stats import AttentionStats, stats_from_logits

FeatureMap = Union[str, Callable[[jax.Array], jax.Array]]


# --------------------------------------------------------------------------------------------------- checks
def _check_param(fn: str, params: Mapping[str, Any], name: str, expected: tuple[Optional[int], ...], layout: str):
    x = params[name]
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise ValueError(f"{fn}: params['{name}'] must be an array {layout}; got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise ValueError(f"{fn}: params['{name}'] has dtype {x.dtype}; expected a float dtype")
    ok = x.ndim == len(expected) and all(e is None or e == s for e, s in zip(expected, x.shape))
    if not ok:
        shown = ", ".join(f"{part}={e}" if e is not None else part
                          for part, e in zip(layout.strip("[]").split(", "), expected))
        raise ValueError(f"{fn}: params['{name}'] has shape {tuple(x.shape)}; expected [{shown}]")
    return x


# ------------------------------------------------------------------------------------------------- additive
_ADDITIVE_KEYS = ("w_q", "w_k", "v_a")


def init_additive_params(
    key: jax.Array, num_heads: int, qk_dim: int, attn_dim: int, dtype: Any = jnp.float32, use_bias: bool = True
) -> dict[str, jax.Array]:
    """Parameters for ``additive_attention``: ``w_q, w_k [H, D, A]``, ``v_a [H, A]`` and (use_bias) ``b [H, A]``.

    Weights are normal with variance 1/fan_in; the bias starts at zero.
    """
    for name, value in (("num_heads", num_heads), ("qk_dim", qk_dim), ("attn_dim", attn_dim)):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"init_additive_params: {name} must be a positive int; got {value!r}")
    kq, kk, ka = jax.random.split(key, 3)
    shape = (num_heads, qk_dim, attn_dim)
    params = {
        "w_q": (jax.random.normal(kq, shape) / math.sqrt(qk_dim)).astype(dtype),
        "w_k": (jax.random.normal(kk, shape) / math.sqrt(qk_dim)).astype(dtype),
        "v_a": (jax.random.normal(ka, (num_heads, attn_dim)) / math.sqrt(attn_dim)).astype(dtype),
    }
    if use_bias:
        params["b"] = jnp.zeros((num_heads, attn_dim), dtype)
    return params


def additive_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    params: Mapping[str, jax.Array],
    mask: Optional[Mask] = None,
    *,
    return_stats: bool = False,
) -> Union[jax.Array, tuple[jax.Array, AttentionStats]]:
    """Additive (Bahdanau) attention, per head: ``s_ij = v_a^T tanh(W_q q_i + W_k k_j + b)``, softmax over j.

    q: [B, Tq, H, D], k: [B, Tk, Hkv, D], v: [B, Tk, Hkv, Dv] with H % Hkv == 0.
    params: ``w_q [H, D, A]``, ``w_k [H, D, A]`` (one key projection per query head, applied to its K/V
    group's keys), ``v_a [H, A]``, optional ``b [H, A]``; ``init_additive_params`` builds them.
    mask: an ``attention.Mask`` (every part, dense included; it is materialized).
    Scores are computed in float32 (float64 for float64 inputs) and not scaled.

    Returns out: [B, Tq, H, Dv] in q's dtype, or (out, AttentionStats) with the statistics of the additive
    scores (``max_logit``/``lse`` are of ``s``) and the weights.
    """
    fn = "additive_attention"
    check_qkv(fn, q, k, v)
    B, Tq, H, D = q.shape
    Tk, Hkv = k.shape[1], k.shape[2]
    if not isinstance(params, Mapping):
        raise ValueError(f"{fn}: params must be a mapping with keys {_ADDITIVE_KEYS} (+ optional 'b'); "
                         f"got {type(params).__name__}")
    missing = [name for name in _ADDITIVE_KEYS if name not in params]
    unknown = sorted(set(params) - set(_ADDITIVE_KEYS) - {"b"})
    if missing or unknown:
        raise ValueError(f"{fn}: params has keys {sorted(params)}; expected {_ADDITIVE_KEYS} and optionally 'b'")
    w_q = _check_param(fn, params, "w_q", (H, D, None), "[H, D, A]")
    A = w_q.shape[2]
    w_k = _check_param(fn, params, "w_k", (H, D, A), "[H, D, A]")
    v_a = _check_param(fn, params, "v_a", (H, A), "[H, A]")
    bias = _check_param(fn, params, "b", (H, A), "[H, A]") if "b" in params else None
    mask = check_mask(fn, mask, B, H, Tq, Tk)

    acc = accumulator_dtype(q.dtype)
    qp_BxHxTxA = jnp.einsum("bthd,hda->bhta", q.astype(acc), w_q.astype(acc))
    w_k_grouped = w_k.astype(acc).reshape(Hkv, H // Hkv, D, A)
    kp_BxHxSxA = jnp.einsum("bskd,kgda->bkgsa", k.astype(acc), w_k_grouped).reshape(B, H, Tk, A)
    if bias is not None:
        qp_BxHxTxA = qp_BxHxTxA + bias.astype(acc)[None, :, None, :]
    hidden = jnp.tanh(qp_BxHxTxA[:, :, :, None, :] + kp_BxHxSxA[:, :, None, :, :])  # [B, H, Tq, Tk, A]
    s_BxHxTxS = jnp.einsum("bhtsa,ha->bhts", hidden, v_a.astype(acc))
    visible = mask.materialize(B, H, Tq, Tk)
    p = masked_softmax(s_BxHxTxS, visible)
    out = grouped_values(p.astype(v.dtype), v).astype(q.dtype)
    if not return_stats:
        return out
    return out, stats_from_logits(s_BxHxTxS, visible).replace(weights=jax.lax.stop_gradient(p))


# --------------------------------------------------------------------------------------------------- linear
def _elu1(x: jax.Array) -> jax.Array:
    return jax.nn.elu(x) + 1.0


FEATURE_MAPS: dict[str, Callable[[jax.Array], jax.Array]] = {"elu1": _elu1, "relu": jax.nn.relu}


def _apply_feature_map(fn: str, feature_map: FeatureMap, name: str, x: jax.Array) -> jax.Array:
    if isinstance(feature_map, str):
        if feature_map not in FEATURE_MAPS:
            raise ValueError(
                f"{fn}: feature_map {feature_map!r} is unknown; expected one of {sorted(FEATURE_MAPS)} or a callable"
            )
        return FEATURE_MAPS[feature_map](x)
    if not callable(feature_map):
        raise ValueError(f"{fn}: feature_map must be a name or a callable; got {type(feature_map).__name__}")
    y = feature_map(x)
    if not hasattr(y, "shape") or y.ndim != x.ndim or tuple(y.shape[:-1]) != tuple(x.shape[:-1]):
        got = tuple(y.shape) if hasattr(y, "shape") else type(y).__name__
        raise ValueError(
            f"{fn}: feature_map({name}) has shape {got}; expected {tuple(x.shape[:-1]) + ('F',)} "
            f"for {name} of shape {tuple(x.shape)}"
        )
    if y.dtype not in FLOAT_DTYPES:
        raise ValueError(f"{fn}: feature_map({name}) has dtype {y.dtype}; expected a float dtype")
    return y.astype(accumulator_dtype(x.dtype))


def _padding_ids(fn: str, name: str, ids: Optional[jax.Array]) -> tuple[Optional[jax.Array], Optional[jax.Array]]:
    """(valid [B, T] bool, packed [B] bool) for 0/1 padding ids; packed marks rows with ids above 1.

    Concrete ids above 1 (several packed segments) raise; traced ones are reported through ``packed``.
    """
    if ids is None:
        return None, None
    try:
        concrete = np.asarray(ids)
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
        concrete = None
    if concrete is not None and concrete.dtype != np.bool_ and concrete.size and concrete.max() > 1:
        raise ValueError(
            f"{fn}: Mask.{name} holds ids up to {int(concrete.max())}; linear attention takes padding masks "
            "only (ids 0 = padding, 1 = token), not packing with several segments"
        )
    packed = None if concrete is not None or ids.dtype == jnp.bool_ else jnp.any(ids > 1, axis=1)
    return ids != 0, packed


def _linear_noncausal(fq: jax.Array, fk: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array]:
    """fq: [B, Tq, K, G, F], fk: [B, Tk, K, F], v: [B, Tk, K, V] -> (num [B, Tq, K, G, V], den [B, Tq, K, G])."""
    kv_BxKxFxV = jnp.einsum("bskf,bskv->bkfv", fk, v)
    z_BxKxF = jnp.sum(fk, axis=1)
    num = jnp.einsum("btkgf,bkfv->btkgv", fq, kv_BxKxFxV)
    den = jnp.einsum("btkgf,bkf->btkg", fq, z_BxKxF)
    return num, den


def _linear_causal(fq: jax.Array, fk: jax.Array, v: jax.Array, chunk_size: int) -> tuple[jax.Array, jax.Array]:
    """Causal prefix sums, chunkwise: exact within a chunk, running K^T V summaries across chunks.

    fq: [B, T, K, G, F], fk: [B, T, K, F], v: [B, T, K, V] -> (num [B, T, K, G, V], den [B, T, K, G]).
    """
    B, T, K, G, F = fq.shape
    V = v.shape[-1]
    C = min(chunk_size, T)
    N = -(-T // C)
    pad = N * C - T
    if pad:
        fq = jnp.pad(fq, [(0, 0), (0, pad), (0, 0), (0, 0), (0, 0)])
        fk = jnp.pad(fk, [(0, 0), (0, pad), (0, 0), (0, 0)])
        v = jnp.pad(v, [(0, 0), (0, pad), (0, 0), (0, 0)])
    fq = fq.reshape(B, N, C, K, G, F)
    fk = fk.reshape(B, N, C, K, F)
    v = v.reshape(B, N, C, K, V)
    # Within a chunk: the [C, C] lower triangle.
    lower = jnp.tril(jnp.ones((C, C), jnp.bool_))
    a_BxNxKxGxCxC = jnp.where(lower, jnp.einsum("bnckgf,bnskf->bnkgcs", fq, fk), 0.0)
    num = jnp.einsum("bnkgcs,bnskv->bnckgv", a_BxNxKxGxCxC, v)
    den = jnp.moveaxis(jnp.sum(a_BxNxKxGxCxC, axis=-1), -1, 2)  # [B, N, C, K, G]
    # Across chunks: sums over every earlier chunk (an exclusive prefix sum of per-chunk summaries).
    kv_BxNxKxFxV = jnp.einsum("bnskf,bnskv->bnkfv", fk, v)
    z_BxNxKxF = jnp.sum(fk, axis=2)
    kv_prev = jnp.cumsum(kv_BxNxKxFxV, axis=1) - kv_BxNxKxFxV
    z_prev = jnp.cumsum(z_BxNxKxF, axis=1) - z_BxNxKxF
    num = num + jnp.einsum("bnckgf,bnkfv->bnckgv", fq, kv_prev)
    den = den + jnp.einsum("bnckgf,bnkf->bnckg", fq, z_prev)
    return num.reshape(B, N * C, K, G, V)[:, :T], den.reshape(B, N * C, K, G)[:, :T]


def linear_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: Optional[Mask] = None,
    *,
    feature_map: FeatureMap = "elu1",
    eps: float = 1e-6,
    chunk_size: int = 64,
) -> jax.Array:
    """Kernelized linear attention, O(T) time and memory; never builds [Tq, Tk].

    q: [B, Tq, H, D], k: [B, Tk, Hkv, D], v: [B, Tk, Hkv, Dv] with H % Hkv == 0.
    feature_map: "elu1" (``elu(x) + 1``, the paper's), "relu", or a callable ``[..., D] -> [..., F]``
    applied to q and k (in float32, float64 for float64 inputs; the callable may carry its own scale or random features).
    eps: added to the normalizer ``phi(q_i)^T sum_j phi(k_j)``.
    mask: ``causal`` (query i sees keys j <= i, by chunked prefix sums of ``chunk_size`` rows) and padding via
    ``q_segment_ids`` / ``kv_segment_ids`` holding 0 (padding) or 1. A sliding window, a dense mask, custom
    positions or packed segment ids (ids above 1) raise ValueError; packed ids that are only known inside
    ``jit`` cannot raise, so those batch rows come out as NaN instead of silently attending across segments.

    Returns out: [B, Tq, H, Dv] in q's dtype; padding query rows and rows with no visible key are zero.
    """
    fn = "linear_attention"
    check_qkv(fn, q, k, v)
    B, Tq, H, D = q.shape
    Tk, Hkv, Dv = k.shape[1], k.shape[2], v.shape[3]
    mask = check_mask(fn, mask, B, H, Tq, Tk)
    if mask.window is not None:
        raise ValueError(f"{fn}: Mask.window={mask.window} (a sliding window) is not supported by linear attention")
    if mask.dense is not None:
        raise ValueError(f"{fn}: Mask.dense (a dense mask) is not supported by linear attention")
    if mask.has_positions:
        raise ValueError(f"{fn}: Mask.q_positions / kv_positions (custom positions) are not supported by linear "
                         "attention; causal masks use top-left aligned aranges")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or eps <= 0:
        raise ValueError(f"{fn}: eps must be a positive float; got {eps!r}")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size <= 0:
        raise ValueError(f"{fn}: chunk_size must be a positive int; got {chunk_size!r}")
    q_valid, q_packed = _padding_ids(fn, "q_segment_ids", mask.q_segment_ids)
    kv_valid, kv_packed = _padding_ids(fn, "kv_segment_ids", mask.kv_segment_ids)

    acc = accumulator_dtype(q.dtype)
    fq = _apply_feature_map(fn, feature_map, "q", q.astype(acc))
    fk = _apply_feature_map(fn, feature_map, "k", k.astype(acc))
    if fq.shape[-1] != fk.shape[-1]:
        raise ValueError(
            f"{fn}: feature_map gives {fq.shape[-1]} features for q and {fk.shape[-1]} for k; expected the same"
        )
    vf = v.astype(acc)
    if kv_valid is not None:
        fk = jnp.where(kv_valid[:, :, None, None], fk, 0.0)
        vf = jnp.where(kv_valid[:, :, None, None], vf, 0.0)
    fq = fq.reshape(B, Tq, Hkv, H // Hkv, fq.shape[-1])
    if mask.causal:
        # Key j is visible to query i iff j <= i: keys past Tq are never seen; missing keys count as zero.
        if Tk >= Tq:
            fk, vf = fk[:, :Tq], vf[:, :Tq]
        else:
            fk = jnp.pad(fk, [(0, 0), (0, Tq - Tk), (0, 0), (0, 0)])
            vf = jnp.pad(vf, [(0, 0), (0, Tq - Tk), (0, 0), (0, 0)])
        num, den = _linear_causal(fq, fk, vf, chunk_size)
    else:
        num, den = _linear_noncausal(fq, fk, vf)
    out = (num / (den + eps)[..., None]).reshape(B, Tq, H, Dv)
    if q_valid is not None:
        out = jnp.where(q_valid[:, :, None, None], out, 0.0)
    for packed in (q_packed, kv_packed):
        if packed is not None:
            out = jnp.where(packed[:, None, None, None], jnp.nan, out)
    return out.astype(q.dtype)


# ----------------------------------------------------------------------------------------------------- hard
def _one_hot_argmax(y: jax.Array, visible: jax.Array) -> jax.Array:
    """One-hot of the largest visible entry per row; rows with no visible entry are zero. [..., Tk], y's dtype."""
    y = jnp.where(visible, y, -jnp.inf)
    one_hot = jax.nn.one_hot(jnp.argmax(y, axis=-1), y.shape[-1], dtype=y.dtype)
    return jnp.where(jnp.any(visible, axis=-1, keepdims=True), one_hot, 0.0)


@jax.custom_vjp
def _straight_through(y: jax.Array, visible: jax.Array) -> jax.Array:
    return _one_hot_argmax(y, visible)


def _straight_through_fwd(y, visible):
    return _one_hot_argmax(y, visible), masked_softmax(y, visible)


def _straight_through_bwd(p_soft, g):
    # The gradient of the softmax, taken as the gradient of the argmax.
    return p_soft * (g - jnp.sum(g * p_soft, axis=-1, keepdims=True)), None


_straight_through.defvjp(_straight_through_fwd, _straight_through_bwd)


def _check_rng(fn: str, rng: Any) -> None:
    if rng is None or not hasattr(rng, "dtype"):
        raise ValueError(f"{fn}: rng must be a jax.random key; got {type(rng).__name__}")
    if jax.dtypes.issubdtype(rng.dtype, jax.dtypes.prng_key):
        if rng.ndim != 0:
            raise ValueError(f"{fn}: rng has shape {tuple(rng.shape)}; expected a single key, shape ()")
    elif not (rng.dtype == jnp.uint32 and rng.ndim == 1):
        raise ValueError(
            f"{fn}: rng has dtype {rng.dtype} and shape {tuple(rng.shape)}; expected a jax.random key "
            "(jax.random.key or a uint32 raw key)"
        )


def hard_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: Optional[Mask] = None,
    *,
    rng: jax.Array,
    temperature: Union[float, jax.Array] = 1.0,
    scale: Optional[float] = None,
    hard: bool = True,
    return_stats: bool = False,
) -> Union[jax.Array, tuple[jax.Array, AttentionStats]]:
    """Hard attention by straight-through Gumbel-softmax: each query takes the value of one sampled key.

    q: [B, Tq, H, D], k: [B, Tk, Hkv, D], v: [B, Tk, Hkv, Dv] with H % Hkv == 0.
    With ``y = (scale * q.k + g) / temperature`` (g i.i.d. Gumbel noise from ``rng``, masked keys excluded):
    ``hard=True`` uses ``one_hot(argmax y)`` in the forward pass and the gradient of ``softmax(y)`` in the
    backward pass (straight-through estimator; the argmax is a sample from ``softmax(scale * q.k)``);
    ``hard=False`` uses ``softmax(y)`` (the relaxed Gumbel-softmax) in both.
    scale defaults to 1/sqrt(D); temperature > 0 (a float or a scalar array, e.g. annealed in a schedule).
    mask: an ``attention.Mask`` (every part; it is materialized). Rows with no visible key give zeros.

    Returns out: [B, Tq, H, Dv] in q's dtype, or (out, AttentionStats): the statistics of the unperturbed
    logits ``scale * q.k`` and, as ``weights``, the attention weights the forward pass used.
    """
    fn = "hard_attention"
    check_qkv(fn, q, k, v)
    B, Tq, H, D = q.shape
    Tk = k.shape[1]
    mask = check_mask(fn, mask, B, H, Tq, Tk)
    _check_rng(fn, rng)
    if isinstance(temperature, (int, float)) and not isinstance(temperature, bool):
        if temperature <= 0:
            raise ValueError(f"{fn}: temperature must be > 0; got {temperature!r}")
    elif not (hasattr(temperature, "shape") and temperature.ndim == 0 and temperature.dtype in FLOAT_DTYPES):
        got = tuple(temperature.shape) if hasattr(temperature, "shape") else type(temperature).__name__
        raise ValueError(f"{fn}: temperature has shape {got}; expected a positive float or a float scalar array ()")
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    s = grouped_logits(q, k, scale)  # [B, H, Tq, Tk] float32 (float64 for float64 inputs)
    visible = mask.materialize(B, H, Tq, Tk)
    gumbel = jax.random.gumbel(rng, s.shape, s.dtype)
    y = (s + gumbel) / jnp.asarray(temperature, s.dtype)
    p = _straight_through(y, visible) if hard else masked_softmax(y, visible)
    out = grouped_values(p.astype(v.dtype), v).astype(q.dtype)
    if not return_stats:
        return out
    return out, stats_from_logits(s, visible).replace(weights=jax.lax.stop_gradient(p))
