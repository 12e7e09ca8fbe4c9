"""Flash attention kernels for GPU (Triton lowering), also run by the Pallas interpreter on CPU.

Arrays keep the ``[B, T, H, D]`` layout. Forward and dq: grid (batch, heads, query blocks); each program holds
one query block and loops over the key blocks its mask can see. dk/dv: grid (batch, kv heads, key blocks);
each program loops over the query heads sharing its key/value head and over the query blocks that can see it.
Grouped-query attention indexes the shared K/V head in the ``BlockSpec`` index map; nothing is repeated.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

from attention.flash import common
from attention.flash.common import FlashConfig, MaskArrays, Side


def _kv_head(cfg: FlashConfig, h):
    return h if cfg.group == 1 else lax.div(h, jnp.int32(cfg.group))


def _compiler_params(cfg: FlashConfig, head_dim: int):
    if cfg.interpret:
        return None
    warps = cfg.num_warps if cfg.num_warps is not None else (4 if head_dim <= 64 else 8)
    stages = cfg.num_stages if cfg.num_stages is not None else 2
    return pltriton.CompilerParams(num_warps=warps, num_stages=stages)


def _mask_specs(masks: MaskArrays, q_spec: pl.BlockSpec, kv_spec: pl.BlockSpec) -> list:
    """One spec per present mask array: ``q_spec`` for the query side, ``kv_spec`` for the key side."""
    return [q_spec if name.startswith("q_") else kv_spec
            for name, x in zip(MaskArrays._fields, masks) if x is not None]


def _q_side(mask_refs: MaskArrays, first, block_q: int, rows=None) -> Side:
    """Query side [bq, 1] of a tile starting at row ``first``; ``rows`` slices full-length refs."""
    index = first + lax.broadcasted_iota(jnp.int32, (block_q, 1), 0)

    def read(ref):
        if ref is None:
            return None
        return ref[...] if rows is None else ref[rows, :]

    return Side(index, read(mask_refs.q_positions), read(mask_refs.q_segments))


def _kv_side(mask_refs: MaskArrays, first, block_k: int, cols=None) -> Side:
    """Key side [1, bk] of a tile starting at key ``first``; ``cols`` slices full-length refs."""
    index = first + lax.broadcasted_iota(jnp.int32, (1, block_k), 1)

    def read(ref):
        if ref is None:
            return None
        return ref[...] if cols is None else ref[:, cols]

    return Side(index, read(mask_refs.kv_positions), read(mask_refs.kv_segments))


def _summary(side: Side) -> common.Summary:
    return common.summarize(side.position, side.segment)


# ------------------------------------------------------------------------------------------------- forward
def _forward_kernel(*refs, cfg: FlashConfig, present):
    n_masks = sum(present)
    q_ref, k_ref, v_ref = refs[:3]
    mask_refs = common.split_mask_refs(refs[3:3 + n_masks], present)
    out_ref, lse_ref, *stat_refs = refs[3 + n_masks:]
    bq, bk = cfg.block_q, cfg.block_k
    i = pl.program_id(2)
    q = q_ref[...]
    q_side = _q_side(mask_refs, i * bq, bq)
    q_sum = _summary(q_side)

    def step(j, carry):
        start = pl.multiple_of(j * bk, bk)
        cols = pl.ds(start, bk)
        kv_side = _kv_side(mask_refs, start, bk, cols)
        vis = common.tile_visibility(cfg, q_side, kv_side)
        return common.softmax_step(cfg, carry, q, k_ref[cols, :], v_ref[cols, :], vis, j == 0)

    def body(j, carry):
        if not cfg.needs_block_check:
            return step(j, carry)
        start = j * bk
        kv_sum = _summary(_kv_side(mask_refs, start, bk, pl.ds(start, bk)))
        return lax.cond(common.block_may_be_visible(cfg, q_sum, kv_sum), step, lambda _, c: c, j, carry)

    lo, hi = common.kv_block_range(cfg, i, bq, bk)
    carry = lax.fori_loop(lo, hi, body, common.init_carry(bq, v_ref.shape[-1], cfg.return_stats))
    out, lse = common.finish(carry)
    out_ref[...] = out.astype(out_ref.dtype)
    lse_ref[...] = lse
    if cfg.return_stats:
        for ref, value in zip(stat_refs, common.row_outputs(carry, lse)):
            ref[...] = value


def forward(q, k, v, masks: MaskArrays, cfg: FlashConfig):
    """q [B, Tq_pad, H, D_pad], k [B, Tk_pad, Hkv, D_pad], v [B, Tk_pad, Hkv, Dv_pad] (padded).

    Returns (out [B, Tq_pad, H, Dv_pad], lse [B, H, Tq_pad, 1], and with ``cfg.return_stats`` the row
    statistics (m, l, ps, sink, logit_mean, logit_std) each [B, H, Tq_pad, 1] float32, else None).
    """
    B, Tq, H, D = q.shape
    Tk, Dv = k.shape[1], v.shape[3]
    bq = cfg.block_q
    grid = (B, H, Tq // bq)
    mask_inputs, present = common.mask_inputs(masks)
    in_specs = [
        pl.BlockSpec((None, bq, None, D), lambda b, h, i: (b, i, h, 0)),
        pl.BlockSpec((None, Tk, None, D), lambda b, h, i: (b, 0, _kv_head(cfg, h), 0)),
        pl.BlockSpec((None, Tk, None, Dv), lambda b, h, i: (b, 0, _kv_head(cfg, h), 0)),
        *_mask_specs(
            masks,
            pl.BlockSpec((None, bq, 1), lambda b, h, i: (b, i, 0)),
            pl.BlockSpec((None, 1, Tk), lambda b, h, i: (b, 0, 0)),
        ),
    ]
    row_spec = pl.BlockSpec((None, None, bq, 1), lambda b, h, i: (b, h, i, 0))
    row_shape = jax.ShapeDtypeStruct((B, H, Tq, 1), jnp.float32)
    out_specs = [pl.BlockSpec((None, bq, None, Dv), lambda b, h, i: (b, i, h, 0)), row_spec]
    out_shape = [jax.ShapeDtypeStruct((B, Tq, H, Dv), q.dtype), row_shape]
    if cfg.return_stats:
        out_specs += [row_spec] * common.NUM_ROW_STATS
        out_shape += [row_shape] * common.NUM_ROW_STATS
    results = pl.pallas_call(
        functools.partial(_forward_kernel, cfg=cfg, present=present),
        grid=grid,
        in_specs=in_specs,
        out_specs=out_specs,
        out_shape=out_shape,
        compiler_params=_compiler_params(cfg, max(D, Dv)),
        interpret=cfg.interpret,
        name="attnlab_flash_fwd",
    )(q, k, v, *mask_inputs)
    out, lse, *stats = results
    return out, lse, (tuple(stats) if cfg.return_stats else None)


# ------------------------------------------------------------------------------------------------ backward
def _dq_kernel(*refs, cfg: FlashConfig, present):
    n_masks = sum(present)
    q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref = refs[:6]
    mask_refs = common.split_mask_refs(refs[6:6 + n_masks], present)
    (dq_ref,) = refs[6 + n_masks:]
    bq, bk = cfg.block_q_bwd, cfg.block_k_bwd
    i = pl.program_id(2)
    q, do, lse, delta = q_ref[...], do_ref[...], lse_ref[...], delta_ref[...]
    q_side = _q_side(mask_refs, i * bq, bq)
    q_sum = _summary(q_side)

    def step(j, dq):
        start = pl.multiple_of(j * bk, bk)
        cols = pl.ds(start, bk)
        vis = common.tile_visibility(cfg, q_side, _kv_side(mask_refs, start, bk, cols))
        return common.dq_step(cfg, dq, q, k_ref[cols, :], v_ref[cols, :], do, lse, delta, vis)

    def body(j, dq):
        if not cfg.needs_block_check:
            return step(j, dq)
        start = j * bk
        kv_sum = _summary(_kv_side(mask_refs, start, bk, pl.ds(start, bk)))
        return lax.cond(common.block_may_be_visible(cfg, q_sum, kv_sum), step, lambda _, c: c, j, dq)

    lo, hi = common.kv_block_range(cfg, i, bq, bk)
    dq = lax.fori_loop(lo, hi, body, jnp.zeros(q.shape, jnp.float32))
    dq_ref[...] = (dq * cfg.scale).astype(dq_ref.dtype)


def _dkv_kernel(*refs, cfg: FlashConfig, present):
    n_masks = sum(present)
    q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref = refs[:6]
    mask_refs = common.split_mask_refs(refs[6:6 + n_masks], present)
    dk_ref, dv_ref = refs[6 + n_masks:]
    bq, bk = cfg.block_q_bwd, cfg.block_k_bwd
    j = pl.program_id(2)
    k, v = k_ref[...], v_ref[...]
    kv_side = _kv_side(mask_refs, j * bk, bk)
    kv_sum = _summary(kv_side)

    def step(i, carry, g):
        start = pl.multiple_of(i * bq, bq)
        rows = pl.ds(start, bq)
        vis = common.tile_visibility(cfg, _q_side(mask_refs, start, bq, rows), kv_side)
        return common.dkv_step(
            cfg, *carry, q_ref[rows, g, :], k, v, do_ref[rows, g, :], lse_ref[g, rows, :], delta_ref[g, rows, :],
            vis,
        )

    def body(i, carry, g):
        if not cfg.needs_block_check:
            return step(i, carry, g)
        start = i * bq
        q_sum = _summary(_q_side(mask_refs, start, bq, pl.ds(start, bq)))
        return lax.cond(
            common.block_may_be_visible(cfg, q_sum, kv_sum), functools.partial(step, g=g), lambda _, c: c, i, carry
        )

    lo, hi = common.q_block_range(cfg, j, bq, bk)

    def head(g, carry):
        return lax.fori_loop(lo, hi, functools.partial(body, g=g), carry)

    init = (jnp.zeros(k.shape, jnp.float32), jnp.zeros(v.shape, jnp.float32))
    dk, dv = lax.fori_loop(0, cfg.group, head, init)
    dk_ref[...] = (dk * cfg.scale).astype(dk_ref.dtype)
    dv_ref[...] = dv.astype(dv_ref.dtype)


def backward(q, k, v, masks: MaskArrays, do, lse, delta, cfg: FlashConfig):
    """Gradients of the padded inputs. do [B, Tq_pad, H, Dv_pad]; lse, delta [B, H, Tq_pad, 1] float32.

    Returns (dq, dk, dv) shaped like (q, k, v).
    """
    B, Tq, H, D = q.shape
    Tk, Hkv, Dv = k.shape[1], k.shape[2], v.shape[3]
    G = cfg.group
    bq, bk = cfg.block_q_bwd, cfg.block_k_bwd
    mask_inputs, present = common.mask_inputs(masks)
    params = _compiler_params(cfg, max(D, Dv))

    dq = pl.pallas_call(
        functools.partial(_dq_kernel, cfg=cfg, present=present),
        grid=(B, H, Tq // bq),
        in_specs=[
            pl.BlockSpec((None, bq, None, D), lambda b, h, i: (b, i, h, 0)),
            pl.BlockSpec((None, Tk, None, D), lambda b, h, i: (b, 0, _kv_head(cfg, h), 0)),
            pl.BlockSpec((None, Tk, None, Dv), lambda b, h, i: (b, 0, _kv_head(cfg, h), 0)),
            pl.BlockSpec((None, bq, None, Dv), lambda b, h, i: (b, i, h, 0)),
            pl.BlockSpec((None, None, bq, 1), lambda b, h, i: (b, h, i, 0)),
            pl.BlockSpec((None, None, bq, 1), lambda b, h, i: (b, h, i, 0)),
            *_mask_specs(
                masks,
                pl.BlockSpec((None, bq, 1), lambda b, h, i: (b, i, 0)),
                pl.BlockSpec((None, 1, Tk), lambda b, h, i: (b, 0, 0)),
            ),
        ],
        out_specs=pl.BlockSpec((None, bq, None, D), lambda b, h, i: (b, i, h, 0)),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        compiler_params=params,
        interpret=cfg.interpret,
        name="attnlab_flash_dq",
    )(q, k, v, do, lse, delta, *mask_inputs)

    dk, dv = pl.pallas_call(
        functools.partial(_dkv_kernel, cfg=cfg, present=present),
        grid=(B, Hkv, Tk // bk),
        in_specs=[
            pl.BlockSpec((None, Tq, G, D), lambda b, h, j: (b, 0, h, 0)),
            pl.BlockSpec((None, bk, None, D), lambda b, h, j: (b, j, h, 0)),
            pl.BlockSpec((None, bk, None, Dv), lambda b, h, j: (b, j, h, 0)),
            pl.BlockSpec((None, Tq, G, Dv), lambda b, h, j: (b, 0, h, 0)),
            pl.BlockSpec((None, G, Tq, 1), lambda b, h, j: (b, h, 0, 0)),
            pl.BlockSpec((None, G, Tq, 1), lambda b, h, j: (b, h, 0, 0)),
            *_mask_specs(
                masks,
                pl.BlockSpec((None, Tq, 1), lambda b, h, j: (b, 0, 0)),
                pl.BlockSpec((None, 1, bk), lambda b, h, j: (b, 0, j)),
            ),
        ],
        out_specs=[
            pl.BlockSpec((None, bk, None, D), lambda b, h, j: (b, j, h, 0)),
            pl.BlockSpec((None, bk, None, Dv), lambda b, h, j: (b, j, h, 0)),
        ],
        out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)],
        compiler_params=params,
        interpret=cfg.interpret,
        name="attnlab_flash_dkv",
    )(q, k, v, do, lse, delta, *mask_inputs)
    return dq, dk, dv
