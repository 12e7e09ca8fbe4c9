"""Flash attention kernels for TPU (Mosaic lowering).

The TPU pipelines blocks through VMEM, so key blocks are a grid axis here rather than a loop: grid (batch,
heads, query blocks, key blocks) with the key axis "arbitrary" (sequential) and the online-softmax state in
VMEM scratch. Blocks outside the causal/window range are neither computed (``pl.when``) nor fetched (the
index map repeats the last fetched block, and Mosaic skips a copy whose block index did not change).
Segment-id / position checks read per-block summaries from SMEM (scalar prefetch). Arrays are transposed to
``[B, H, T, D]`` so that every block's last two dims are (sequence, head dim).

dk/dv: grid (batch, kv heads, key blocks, group heads x query blocks); the last axis walks the query heads
that share the key/value head, so GQA gradients accumulate in VMEM without copying K/V.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from attention import online
from attention.flash import common
from attention.flash.common import FlashConfig, MaskArrays, Side, Summary

_SUMMARY_FIELDS = 4


def _block_summaries(arr, block: int, segment: bool):
    """[B, T] int32 -> [B, T // block, 2] (min, max) per block; segment ids ignore zeros (padding)."""
    B, T = arr.shape
    blocks = arr.reshape(B, T // block, block)
    if segment:
        nonzero = blocks != 0
        lo = jnp.min(jnp.where(nonzero, blocks, common.NO_SEGMENT), axis=-1)
        hi = jnp.max(jnp.where(nonzero, blocks, -common.NO_SEGMENT), axis=-1)
    else:
        lo, hi = jnp.min(blocks, axis=-1), jnp.max(blocks, axis=-1)
    return jnp.stack([lo, hi], axis=-1)


def _summaries(positions, segments, batch: int, length: int, block: int):
    """Flattened [B * nblocks * 4] int32 for SMEM: (pos_min, pos_max, seg_min, seg_max) per block."""
    parts = []
    for arr, is_seg in ((positions, False), (segments, True)):
        if arr is None:
            parts.append(jnp.zeros((batch, length // block, 2), jnp.int32))
        else:
            parts.append(_block_summaries(arr.reshape(batch, length), block, is_seg))
    return jnp.concatenate(parts, axis=-1).reshape(-1)


def _read_summary(ref, b, blk, nblocks: int) -> Summary:
    base = (b * nblocks + blk) * _SUMMARY_FIELDS
    return Summary(*(ref[base + f] for f in range(_SUMMARY_FIELDS)))


def _clamp(idx, lo, hi, n: int):
    """Block to fetch at step ``idx``: inside [lo, hi) when possible, always inside [0, n)."""
    idx = jnp.minimum(jnp.maximum(idx, lo), jnp.maximum(hi - 1, lo))
    return jnp.minimum(jnp.maximum(idx, 0), n - 1)


def _mask_specs(masks: MaskArrays, block_q: int, block_k: int, q_map, kv_map):
    specs = []
    for name, x in zip(MaskArrays._fields, masks):
        if x is None:
            continue
        if name.startswith("q_"):
            specs.append(pl.BlockSpec((None, block_q, 1), q_map))
        else:
            specs.append(pl.BlockSpec((None, 1, block_k), kv_map))
    return specs


def _sides(mask_refs: MaskArrays, i, j, block_q: int, block_k: int):
    q_index = i * block_q + lax.broadcasted_iota(jnp.int32, (block_q, 1), 0)
    kv_index = j * block_k + lax.broadcasted_iota(jnp.int32, (1, block_k), 1)
    read = lambda r: None if r is None else r[...]  # noqa: E731
    return (
        Side(q_index, read(mask_refs.q_positions), read(mask_refs.q_segments)),
        Side(kv_index, read(mask_refs.kv_positions), read(mask_refs.kv_segments)),
    )


def _params(cfg: FlashConfig):
    return pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel", "arbitrary"))


def _should_run(cfg, q_sum_ref, kv_sum_ref, b, i, j, nq: int, nk: int, lo, hi):
    run = (j >= lo) & (j < hi)
    if cfg.needs_block_check:
        q_sum = _read_summary(q_sum_ref, b, i, nq)
        kv_sum = _read_summary(kv_sum_ref, b, j, nk)
        run = run & common.block_may_be_visible(cfg, q_sum, kv_sum)
    return run


def _to_bhtd(x):
    return jnp.transpose(x, (0, 2, 1, 3))


# ------------------------------------------------------------------------------------------------- forward
def _forward_kernel(q_sum_ref, kv_sum_ref, *refs, cfg: FlashConfig, present):
    n_masks = sum(present)
    q_ref, k_ref, v_ref = refs[:3]
    mask_refs = common.split_mask_refs(refs[3:3 + n_masks], present)
    rest = refs[3 + n_masks:]
    n_out = 2 + common.NUM_ROW_STATS if cfg.return_stats else 2
    out_ref, lse_ref, *stat_refs = rest[:n_out]
    acc_sc, m_sc, l_sc, *stat_sc = rest[n_out:]  # stat_sc: ps, s0, count, mean, m2 scratch with statistics
    bq, bk = cfg.block_q, cfg.block_k
    nq, nk = cfg.q_len_padded // bq, cfg.kv_len_padded // bk
    b, i, j = pl.program_id(0), pl.program_id(2), pl.program_id(3)

    def load():
        extra = [r[...] for r in stat_sc] if stat_sc else [None] * 5
        return common.Carry(acc_sc[...], online.RowState(m_sc[...], l_sc[...], *extra))

    def store(carry):
        acc_sc[...] = carry.acc
        for ref, value in zip([m_sc, l_sc, *stat_sc], carry.rows):
            ref[...] = value

    @pl.when(j == 0)
    def _init():
        store(common.init_carry(bq, acc_sc.shape[-1], cfg.return_stats))

    lo, hi = common.kv_block_range(cfg, i, bq, bk)

    @pl.when(_should_run(cfg, q_sum_ref, kv_sum_ref, b, i, j, nq, nk, lo, hi))
    def _compute():
        q_side, kv_side = _sides(mask_refs, i, j, bq, bk)
        vis = common.tile_visibility(cfg, q_side, kv_side)
        store(common.softmax_step(cfg, load(), q_ref[...], k_ref[...], v_ref[...], vis, j == 0))

    @pl.when(j == nk - 1)
    def _finish():
        carry = load()
        out, lse = common.finish(carry)
        out_ref[...] = out.astype(out_ref.dtype)
        lse_ref[...] = lse
        if cfg.return_stats:
            for ref, value in zip(stat_refs, common.row_outputs(carry, lse)):
                ref[...] = value


def forward(q, k, v, masks: MaskArrays, cfg: FlashConfig):
    """Same contract as ``attention.flash.kernel.forward`` (inputs and outputs in [B, T, H, D])."""
    B, Tq, H, D = q.shape
    Tk, Dv = k.shape[1], v.shape[3]
    bq, bk = cfg.block_q, cfg.block_k
    nq, nk = Tq // bq, Tk // bk
    G = cfg.group
    q_sum = _summaries(masks.q_positions, masks.q_segments, B, Tq, bq)
    kv_sum = _summaries(masks.kv_positions, masks.kv_segments, B, Tk, bk)
    mask_inputs, present = common.mask_inputs(masks)

    def kv_block(b, i, j):
        lo, hi = common.kv_block_range(cfg, i, bq, bk)
        return _clamp(j, lo, hi, nk)

    q_map = lambda b, h, i, j, *_: (b, h, i, 0)  # noqa: E731
    kv_map = lambda b, h, i, j, *_: (b, lax.div(h, G), kv_block(b, i, j), 0)  # noqa: E731
    row_spec = pl.BlockSpec((None, None, bq, 1), q_map)
    row_shape = jax.ShapeDtypeStruct((B, H, Tq, 1), jnp.float32)
    out_specs = [pl.BlockSpec((None, None, bq, Dv), q_map), row_spec]
    out_shape = [jax.ShapeDtypeStruct((B, H, Tq, Dv), q.dtype), row_shape]
    scratch = [pltpu.VMEM((bq, Dv), jnp.float32), pltpu.VMEM((bq, 1), jnp.float32),
               pltpu.VMEM((bq, 1), jnp.float32)]
    if cfg.return_stats:
        out_specs += [row_spec] * common.NUM_ROW_STATS
        out_shape += [row_shape] * common.NUM_ROW_STATS
        scratch += [pltpu.VMEM((bq, 1), jnp.float32) for _ in range(5)]
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=2,
        grid=(B, H, nq, nk),
        in_specs=[
            pl.BlockSpec((None, None, bq, D), q_map),
            pl.BlockSpec((None, None, bk, D), kv_map),
            pl.BlockSpec((None, None, bk, Dv), kv_map),
            *_mask_specs(masks, bq, bk, lambda b, h, i, j, *_: (b, i, 0),
                         lambda b, h, i, j, *_: (b, 0, kv_block(b, i, j))),
        ],
        out_specs=out_specs,
        scratch_shapes=scratch,
    )
    results = pl.pallas_call(
        functools.partial(_forward_kernel, cfg=cfg, present=present),
        grid_spec=grid_spec,
        out_shape=out_shape,
        compiler_params=_params(cfg),
        interpret=cfg.interpret,
        name="attnlab_flash_fwd_tpu",
    )(q_sum, kv_sum, _to_bhtd(q), _to_bhtd(k), _to_bhtd(v), *mask_inputs)
    out, lse, *stats = results
    return _to_bhtd(out), lse, (tuple(stats) if cfg.return_stats else None)


# ------------------------------------------------------------------------------------------------ backward
def _dq_kernel(q_sum_ref, kv_sum_ref, *refs, cfg: FlashConfig, present):
    n_masks = sum(present)
    q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref = refs[:6]
    mask_refs = common.split_mask_refs(refs[6:6 + n_masks], present)
    dq_ref, dq_sc = refs[6 + n_masks:]
    bq, bk = cfg.block_q_bwd, cfg.block_k_bwd
    nq, nk = cfg.q_len_padded // bq, cfg.kv_len_padded // bk
    b, i, j = pl.program_id(0), pl.program_id(2), pl.program_id(3)

    @pl.when(j == 0)
    def _init():
        dq_sc[...] = jnp.zeros(dq_sc.shape, jnp.float32)

    lo, hi = common.kv_block_range(cfg, i, bq, bk)

    @pl.when(_should_run(cfg, q_sum_ref, kv_sum_ref, b, i, j, nq, nk, lo, hi))
    def _compute():
        q_side, kv_side = _sides(mask_refs, i, j, bq, bk)
        vis = common.tile_visibility(cfg, q_side, kv_side)
        dq_sc[...] = common.dq_step(cfg, dq_sc[...], q_ref[...], k_ref[...], v_ref[...], do_ref[...],
                                    lse_ref[...], delta_ref[...], vis)

    @pl.when(j == nk - 1)
    def _finish():
        dq_ref[...] = (dq_sc[...] * cfg.scale).astype(dq_ref.dtype)


def _dkv_kernel(q_sum_ref, kv_sum_ref, *refs, cfg: FlashConfig, present):
    n_masks = sum(present)
    q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref = refs[:6]
    mask_refs = common.split_mask_refs(refs[6:6 + n_masks], present)
    dk_ref, dv_ref, dk_sc, dv_sc = refs[6 + n_masks:]
    bq, bk = cfg.block_q_bwd, cfg.block_k_bwd
    nq, nk = cfg.q_len_padded // bq, cfg.kv_len_padded // bk
    b, j, t = pl.program_id(0), pl.program_id(2), pl.program_id(3)
    i = lax.rem(t, nq)

    @pl.when(t == 0)
    def _init():
        dk_sc[...] = jnp.zeros(dk_sc.shape, jnp.float32)
        dv_sc[...] = jnp.zeros(dv_sc.shape, jnp.float32)

    lo, hi = common.q_block_range(cfg, j, bq, bk)
    run = (i >= lo) & (i < hi)
    if cfg.needs_block_check:
        run = run & common.block_may_be_visible(
            cfg, _read_summary(q_sum_ref, b, i, nq), _read_summary(kv_sum_ref, b, j, nk))

    @pl.when(run)
    def _compute():
        q_side, kv_side = _sides(mask_refs, i, j, bq, bk)
        vis = common.tile_visibility(cfg, q_side, kv_side)
        dk, dv = common.dkv_step(cfg, dk_sc[...], dv_sc[...], q_ref[...], k_ref[...], v_ref[...], do_ref[...],
                                 lse_ref[...], delta_ref[...], vis)
        dk_sc[...], dv_sc[...] = dk, dv

    @pl.when(t == cfg.group * nq - 1)
    def _finish():
        dk_ref[...] = (dk_sc[...] * cfg.scale).astype(dk_ref.dtype)
        dv_ref[...] = dv_sc[...].astype(dv_ref.dtype)


def backward(q, k, v, masks: MaskArrays, do, lse, delta, cfg: FlashConfig):
    """Same contract as ``attention.flash.kernel.backward`` (arrays in [B, T, H, D])."""
    B, Tq, H, D = q.shape
    Tk, Hkv, Dv = k.shape[1], k.shape[2], v.shape[3]
    G = cfg.group
    bq, bk = cfg.block_q_bwd, cfg.block_k_bwd
    nq, nk = Tq // bq, Tk // bk
    q_sum = _summaries(masks.q_positions, masks.q_segments, B, Tq, bq)
    kv_sum = _summaries(masks.kv_positions, masks.kv_segments, B, Tk, bk)
    mask_inputs, present = common.mask_inputs(masks)
    qt, kt, vt, dot = _to_bhtd(q), _to_bhtd(k), _to_bhtd(v), _to_bhtd(do)

    def kv_block(i, j):
        lo, hi = common.kv_block_range(cfg, i, bq, bk)
        return _clamp(j, lo, hi, nk)

    q_map = lambda b, h, i, j, *_: (b, h, i, 0)  # noqa: E731
    kv_map = lambda b, h, i, j, *_: (b, lax.div(h, G), kv_block(i, j), 0)  # noqa: E731
    dq = pl.pallas_call(
        functools.partial(_dq_kernel, cfg=cfg, present=present),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2,
            grid=(B, H, nq, nk),
            in_specs=[
                pl.BlockSpec((None, None, bq, D), q_map),
                pl.BlockSpec((None, None, bk, D), kv_map),
                pl.BlockSpec((None, None, bk, Dv), kv_map),
                pl.BlockSpec((None, None, bq, Dv), q_map),
                pl.BlockSpec((None, None, bq, 1), q_map),
                pl.BlockSpec((None, None, bq, 1), q_map),
                *_mask_specs(masks, bq, bk, lambda b, h, i, j, *_: (b, i, 0),
                             lambda b, h, i, j, *_: (b, 0, kv_block(i, j))),
            ],
            out_specs=pl.BlockSpec((None, None, bq, D), q_map),
            scratch_shapes=[pltpu.VMEM((bq, D), jnp.float32)],
        ),
        out_shape=jax.ShapeDtypeStruct((B, H, Tq, D), q.dtype),
        compiler_params=_params(cfg),
        interpret=cfg.interpret,
        name="attnlab_flash_dq_tpu",
    )(q_sum, kv_sum, qt, kt, vt, dot, lse, delta, *mask_inputs)

    def q_block(j, t):
        lo, hi = common.q_block_range(cfg, j, bq, bk)
        return _clamp(lax.rem(t, nq), lo, hi, nq)

    def q_head(h, t):
        return h * G + lax.div(t, nq)

    qh_map = lambda b, h, j, t, *_: (b, q_head(h, t), q_block(j, t), 0)  # noqa: E731
    k_map = lambda b, h, j, t, *_: (b, h, j, 0)  # noqa: E731
    dk, dv = pl.pallas_call(
        functools.partial(_dkv_kernel, cfg=cfg, present=present),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2,
            grid=(B, Hkv, nk, G * nq),
            in_specs=[
                pl.BlockSpec((None, None, bq, D), qh_map),
                pl.BlockSpec((None, None, bk, D), k_map),
                pl.BlockSpec((None, None, bk, Dv), k_map),
                pl.BlockSpec((None, None, bq, Dv), qh_map),
                pl.BlockSpec((None, None, bq, 1), qh_map),
                pl.BlockSpec((None, None, bq, 1), qh_map),
                *_mask_specs(masks, bq, bk, lambda b, h, j, t, *_: (b, q_block(j, t), 0),
                             lambda b, h, j, t, *_: (b, 0, j)),
            ],
            out_specs=[pl.BlockSpec((None, None, bk, D), k_map), pl.BlockSpec((None, None, bk, Dv), k_map)],
            scratch_shapes=[pltpu.VMEM((bk, D), jnp.float32), pltpu.VMEM((bk, Dv), jnp.float32)],
        ),
        out_shape=[jax.ShapeDtypeStruct((B, Hkv, Tk, D), k.dtype), jax.ShapeDtypeStruct((B, Hkv, Tk, Dv), v.dtype)],
        compiler_params=_params(cfg),
        interpret=cfg.interpret,
        name="attnlab_flash_dkv_tpu",
    )(q_sum, kv_sum, qt, kt, vt, dot, lse, delta, *mask_inputs)
    return _to_bhtd(dq), _to_bhtd(dk), _to_bhtd(dv)
