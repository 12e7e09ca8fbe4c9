"""The ``pallas`` backend: a tiled online-softmax (flash) attention kernel written with Pallas.

``flash_attention(q, k, v, mask, ...)`` is also registered as ``attention.attention(...,
implementation="pallas")``. It takes the structured mask (causal, sliding window, separate query and key
segment ids, query and key positions), grouped-query / multi-query attention, ``Tq != Tk``, any lengths and
head dims (padded inside, sliced out), ``Dv != D``, float32 / bfloat16 / float16 inputs with float32
accumulation, and returns the attention statistics computed inside the forward kernel (entropy, max logit,
lse, sink, logit mean / std). Gradients come from
Pallas backward kernels (dq; dk/dv) that recompute probabilities from the saved log-sum-exp.

GPU runs the Triton lowering, TPU its own Mosaic kernel body (``attention.flash.tpu``), CPU the Pallas
interpreter (slow; for tests).
"""
from __future__ import annotations

import functools
import math
from typing import Optional

import jax
import jax.numpy as jnp

from attention.api import Request, default_platform, register_backend
from attention.flash import common, kernel, tpu
from attention.flash.common import FlashConfig, MaskArrays
from attention.mask import Mask
from attention.stats import AttentionStats, finalize_stats

# (block_q, block_k, block_q_bwd, block_k_bwd) per platform.
DEFAULT_BLOCKS = {
    "gpu": (128, 64, 64, 64),
    "tpu": (128, 128, 128, 128),
    "cpu": (64, 64, 64, 64),
}
KERNELS = ("gpu", "tpu")
OPTIONS = ("block_q", "block_k", "block_q_bwd", "block_k_bwd", "num_warps", "num_stages", "interpret", "kernel")
_MAX_GPU_HEAD_DIM = 256


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def _next_pow2(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def _padded_head_dim(dim: int, kernel_name: str) -> int:
    if kernel_name == "gpu":
        return max(16, _next_pow2(dim))
    return _round_up(dim, 64) if dim <= 64 else _round_up(dim, 128)


def _check_block(name: str, value, kernel_name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"pallas attention: backend option {name} must be a positive int; got {value!r}")
    if kernel_name == "gpu" and (value < 16 or value & (value - 1)):
        raise ValueError(
            f"pallas attention: backend option {name}={value} must be a power of two >= 16 for the GPU kernel"
        )
    if kernel_name == "tpu":
        need = 8 if name.startswith("block_q") else 128
        if value % need:
            raise ValueError(f"pallas attention: backend option {name}={value} must be a multiple of {need} "
                             "for the TPU kernel")
    return value


def _fit_block(block: int, length: int, kernel_name: str, is_q: bool) -> int:
    """The block actually used: no larger than the (rounded-up) sequence."""
    if kernel_name == "gpu":
        return min(block, max(16, _next_pow2(length)))
    return min(block, _round_up(length, 8 if is_q else 128))


def _make_config(q, k, v, mask: Mask, scale: float, return_stats: bool, options: dict) -> FlashConfig:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"pallas attention: unknown backend option(s) {unknown}; expected some of {OPTIONS}")
    platform = default_platform()
    kernel_name = options.get("kernel") or ("tpu" if platform == "tpu" else "gpu")
    if kernel_name not in KERNELS:
        raise ValueError(f"pallas attention: backend option kernel={kernel_name!r}; expected one of {KERNELS}")
    interpret = options.get("interpret")
    if interpret is None:
        interpret = platform == "cpu"
    if not isinstance(interpret, bool):
        raise ValueError(f"pallas attention: backend option interpret must be a bool or None; got {interpret!r}")
    defaults = DEFAULT_BLOCKS.get(platform, DEFAULT_BLOCKS["cpu"])
    names = ("block_q", "block_k", "block_q_bwd", "block_k_bwd")
    given = {n: options.get(n) for n in names}
    # Backward blocks follow the forward ones when only those are given.
    if given["block_q_bwd"] is None and given["block_q"] is not None:
        given["block_q_bwd"] = given["block_q"]
    if given["block_k_bwd"] is None and given["block_k"] is not None:
        given["block_k_bwd"] = given["block_k"]
    blocks = {n: _check_block(n, given[n] if given[n] is not None else d, kernel_name) for n, d in zip(names, defaults)}
    for name in ("num_warps", "num_stages"):
        val = options.get(name)
        if val is not None and (not isinstance(val, int) or isinstance(val, bool) or val <= 0):
            raise ValueError(f"pallas attention: backend option {name} must be a positive int or None; got {val!r}")
    B, Tq, H, _ = q.shape
    Tk, Hkv = k.shape[1], k.shape[2]
    bq = _fit_block(blocks["block_q"], Tq, kernel_name, True)
    bk = _fit_block(blocks["block_k"], Tk, kernel_name, False)
    bq_bwd = _fit_block(blocks["block_q_bwd"], Tq, kernel_name, True)
    bk_bwd = _fit_block(blocks["block_k_bwd"], Tk, kernel_name, False)
    left, right = mask.window if mask.window is not None else (None, None)
    return FlashConfig(
        scale=float(scale),
        causal=mask.causal,
        window_left=left,
        window_right=right,
        q_len=Tq,
        kv_len=Tk,
        q_len_padded=_round_up(Tq, math.lcm(bq, bq_bwd)),
        kv_len_padded=_round_up(Tk, math.lcm(bk, bk_bwd)),
        num_heads=H,
        num_kv_heads=Hkv,
        block_q=bq,
        block_k=bk,
        block_q_bwd=bq_bwd,
        block_k_bwd=bk_bwd,
        has_q_segments=mask.q_segment_ids is not None,
        has_kv_segments=mask.kv_segment_ids is not None,
        has_positions=mask.has_positions,
        return_stats=bool(return_stats),
        kernel=kernel_name,
        interpret=interpret,
        num_warps=options.get("num_warps"),
        num_stages=options.get("num_stages"),
        f32_inputs=jnp.dtype(q.dtype) == jnp.dtype(jnp.float32),
    )


def _mask_arrays(mask: Mask, cfg: FlashConfig, batch: int) -> MaskArrays:
    """Pad the mask arrays to the padded lengths: segments with 0 (padding), positions with the edge value."""
    pad_q, pad_k = cfg.q_len_padded - cfg.q_len, cfg.kv_len_padded - cfg.kv_len

    def seg(x, pad):
        return None if x is None else jnp.pad(x.astype(jnp.int32), ((0, 0), (0, pad)))

    q_seg, kv_seg = seg(mask.q_segment_ids, pad_q), seg(mask.kv_segment_ids, pad_k)
    q_pos = kv_pos = None
    if cfg.has_positions:
        q_pos, kv_pos = mask.positions(batch, cfg.q_len, cfg.kv_len)
        q_pos = jnp.pad(q_pos, ((0, 0), (0, pad_q)), mode="edge")
        kv_pos = jnp.pad(kv_pos, ((0, 0), (0, pad_k)), mode="edge")
    col = lambda x: None if x is None else x[:, :, None]  # noqa: E731
    row = lambda x: None if x is None else x[:, None, :]  # noqa: E731
    return MaskArrays(col(q_seg), row(kv_seg), col(q_pos), row(kv_pos))


def _impl(cfg: FlashConfig):
    return tpu if cfg.kernel == "tpu" else kernel


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _flash(q, k, v, masks: MaskArrays, cfg: FlashConfig):
    out, _, stats = _impl(cfg).forward(q, k, v, masks, cfg)
    return out, stats


def _flash_fwd(q, k, v, masks: MaskArrays, cfg: FlashConfig):
    out, lse, stats = _impl(cfg).forward(q, k, v, masks, cfg)
    return (out, stats), (q, k, v, masks, out, lse)


def _flash_bwd(cfg: FlashConfig, residuals, cotangents):
    q, k, v, masks, out, lse = residuals
    d_out, _ = cotangents  # statistics carry no gradient
    delta = jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), axis=-1)  # [B, Tq, H]
    delta = jnp.transpose(delta, (0, 2, 1))[..., None]  # [B, H, Tq, 1]
    dq, dk, dv = _impl(cfg).backward(q, k, v, masks, d_out.astype(q.dtype), lse, delta, cfg)
    return dq, dk, dv, None


_flash.defvjp(_flash_fwd, _flash_bwd)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _run(q, k, v, mask: Mask, cfg: FlashConfig):
    B, Tq, H, D = q.shape
    Dv = v.shape[3]
    Dp, Dvp = _padded_head_dim(D, cfg.kernel), _padded_head_dim(Dv, cfg.kernel)

    def pad(x, length, dim):
        return jnp.pad(x, ((0, 0), (0, length - x.shape[1]), (0, 0), (0, dim - x.shape[3])))

    qp = pad(q, cfg.q_len_padded, Dp)
    kp = pad(k, cfg.kv_len_padded, Dp)
    vp = pad(v, cfg.kv_len_padded, Dvp)
    out, stats = _flash(qp, kp, vp, _mask_arrays(mask, cfg, B), cfg)
    out = out[:, :Tq, :, :Dv]
    if stats is None:
        return out, None
    m, l, ps, sink, logit_mean, logit_std = (jax.lax.stop_gradient(x[:, :, :Tq, 0]) for x in stats)
    entropy, max_logit, lse, valid = finalize_stats(m, l, ps)
    return out, AttentionStats(entropy=entropy, max_logit=max_logit, lse=lse, valid=valid, sink=sink,
                               logit_mean=logit_mean, logit_std=logit_std)


def flash_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: Optional[Mask] = None,
    *,
    scale: Optional[float] = None,
    dropout_rate: float = 0.0,
    dropout_rng: Optional[jax.Array] = None,
    return_stats: bool = False,
    **options,
) -> tuple[jax.Array, Optional[AttentionStats]]:
    """Flash attention with a Pallas kernel.

    q: [B, Tq, H, D], k: [B, Tk, Hkv, D], v: [B, Tk, Hkv, Dv] (H % Hkv == 0); mask: structured ``Mask``.
    Returns (out [B, Tq, H, Dv] in q's dtype, ``AttentionStats`` [B, H, Tq] or None). Rows with no visible key
    give zero output, zero statistics with ``valid=False`` and zero gradients.

    options (``backend_options`` of ``attention.attention``): ``block_q``, ``block_k`` (forward tiles),
    ``block_q_bwd``, ``block_k_bwd`` (backward tiles; default to the forward ones when those are given),
    ``num_warps``, ``num_stages`` (Triton), ``interpret`` (None: only on CPU), ``kernel`` ("gpu" or "tpu"
    body; default by platform, CPU interprets the GPU body).
    """
    if mask is None:
        mask = Mask()
    request = Request(
        batch=q.shape[0], q_len=q.shape[1], kv_len=k.shape[1], num_heads=q.shape[2], num_kv_heads=k.shape[2],
        qk_dim=q.shape[3], v_dim=v.shape[3], dtype=q.dtype, mask=mask, dropout=float(dropout_rate) > 0.0,
        return_stats=return_stats, platform=default_platform(),
    )
    reason = supports(request)
    if reason is not None:
        raise ValueError(f"attention: implementation 'pallas' does not support {reason}")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[3])
    cfg = _make_config(q, k, v, mask, scale, return_stats, options)
    return _run(q, k, v, mask, cfg)


def supports(request: Request) -> Optional[str]:
    """None when the pallas kernel can serve ``request``, else the missing feature."""
    if request.dropout:
        return "dropout (the pallas kernel has no attention dropout; use 'reference' or 'chunked')"
    if request.mask.dense is not None:
        return ("a dense mask (Mask.dense); the pallas kernel takes only the structured parts: causal, window, "
                "segment ids and positions")
    if jnp.dtype(request.dtype) not in (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float32)):
        return f"dtype {jnp.dtype(request.dtype).name} (the pallas kernel takes float16, bfloat16 or float32)"
    if request.platform not in ("gpu", "tpu", "cpu"):
        return f"the {request.platform} platform (the pallas kernel runs on GPU, TPU, or interpreted on CPU)"
    if request.platform == "tpu" and jnp.dtype(request.dtype) == jnp.dtype(jnp.float16):
        return "dtype float16 on TPU (use bfloat16 or float32)"
    if request.platform == "gpu" and max(request.qk_dim, request.v_dim) > _MAX_GPU_HEAD_DIM:
        return f"head dims above {_MAX_GPU_HEAD_DIM} on GPU (got {request.qk_dim}, {request.v_dim})"
    return None


register_backend("pallas", flash_attention, supports)

__all__ = ["flash_attention", "supports", "DEFAULT_BLOCKS", "OPTIONS", "common"]
