"""What the GPU and TPU flash kernels share: the static call configuration, the tile mask and the math.

Inside a kernel every query-side array is a column ``[bq, 1]`` and every key-side array a row ``[1, bk]``,
so that the same code broadcasts to a ``[bq, bk]`` tile under Triton, Mosaic TPU and the interpreter.
Row statistics (running max, denominator, ...) are ``[bq, 1]`` float32.
"""
from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
from jax import lax

from attention import online
from attention.stats import finish_moments

# Sentinel for "no non-zero segment id in this block" in the block summaries (fits int32).
NO_SEGMENT = 2**30
# Contract the last dims of both operands: a @ b.T without materializing the transpose.
_NT = (((1,), (1,)), ((), ()))
# The plain matrix product a @ b.
_NN = (((1,), (0,)), ((), ()))
# Row statistics a forward kernel writes with return_stats: m, l, ps, sink, logit_mean, logit_std.
NUM_ROW_STATS = 6


@dataclasses.dataclass(frozen=True)
class FlashConfig:
    """Everything static about one call; hashable, so it can key the custom_vjp and jit caches.

    Lengths ``q_len``/``kv_len`` are the true ones; the ``*_padded`` lengths are multiples of every block
    size used for that axis. ``window_left``/``window_right`` are None when that side is open.
    """

    scale: float
    causal: bool
    window_left: Optional[int]
    window_right: Optional[int]
    q_len: int
    kv_len: int
    q_len_padded: int
    kv_len_padded: int
    num_heads: int
    num_kv_heads: int
    block_q: int
    block_k: int
    block_q_bwd: int
    block_k_bwd: int
    has_q_segments: bool
    has_kv_segments: bool
    has_positions: bool
    return_stats: bool
    kernel: str  # "gpu" (Triton body, also interpreted on CPU) or "tpu" (Mosaic TPU body)
    interpret: bool
    num_warps: Optional[int]
    num_stages: Optional[int]
    f32_inputs: bool

    @property
    def group(self) -> int:
        """Query heads per key/value head (1: multi-head, num_heads: multi-query)."""
        return self.num_heads // self.num_kv_heads

    @property
    def precision(self):
        """Exact float32 matmuls for float32 inputs (no TF32); the default for 16-bit inputs."""
        return lax.Precision.HIGHEST if self.f32_inputs else None

    @property
    def needs_block_check(self) -> bool:
        """Whether blocks inside the loop range can still be fully masked (segments or explicit positions)."""
        return self.has_q_segments or self.has_kv_segments or self.has_positions

    @property
    def keys_padded(self) -> bool:
        return self.kv_len_padded != self.kv_len


class MaskArrays(NamedTuple):
    """The array parts of a mask, padded: query side ``[B, Tq_pad, 1]``, key side ``[B, 1, Tk_pad]`` int32.

    An entry is None when the mask lacks that part; positions are both present or both None.
    """

    q_segments: Optional[jax.Array]
    kv_segments: Optional[jax.Array]
    q_positions: Optional[jax.Array]
    kv_positions: Optional[jax.Array]


def mask_inputs(masks: MaskArrays) -> tuple[list, tuple[bool, ...]]:
    """The present mask arrays (pallas_call inputs) and whether each MaskArrays field is present."""
    return [x for x in masks if x is not None], tuple(x is not None for x in masks)


def split_mask_refs(refs, present: tuple[bool, ...]) -> MaskArrays:
    """The kernel's mask refs back into a MaskArrays (None for absent fields)."""
    refs = list(refs)
    return MaskArrays(*(refs.pop(0) if p else None for p in present))


class Side(NamedTuple):
    """One side of a tile: absolute indices, and positions / segment ids when the mask has them."""

    index: jax.Array
    position: Optional[jax.Array]
    segment: Optional[jax.Array]


class Summary(NamedTuple):
    """Scalars bounding one block: position range and the range of its non-zero segment ids."""

    pos_min: Any
    pos_max: Any
    seg_min: Any
    seg_max: Any


def tile_visibility(cfg: FlashConfig, q: Side, kv: Side) -> Optional[jax.Array]:
    """Which keys each query of a tile sees, following ``Mask.structured_block``; None when all do.

    q fields: [bq, 1]; kv fields: [1, bk] -> bool [bq, bk] (or None).
    """
    vis = None

    def both(a, b):
        return b if a is None else a & b

    if cfg.keys_padded:
        vis = both(vis, kv.index < cfg.kv_len)
    qp = q.index if q.position is None else q.position
    kp = kv.index if kv.position is None else kv.position
    if cfg.causal:
        vis = both(vis, kp <= qp)
    if cfg.window_left is not None:
        vis = both(vis, kp >= qp - cfg.window_left)
    if cfg.window_right is not None:
        vis = both(vis, kp <= qp + cfg.window_right)
    if q.segment is not None and kv.segment is not None:
        vis = both(vis, (q.segment == kv.segment) & (q.segment != 0))
    elif q.segment is not None:
        vis = both(vis, q.segment != 0)
    elif kv.segment is not None:
        vis = both(vis, kv.segment != 0)
    if vis is not None and vis.shape != (q.index.shape[0], kv.index.shape[1]):
        vis = jnp.broadcast_to(vis, (q.index.shape[0], kv.index.shape[1]))
    return vis


def summarize(position: Optional[jax.Array], segment: Optional[jax.Array]) -> Summary:
    """Bounds of one block's positions and non-zero segment ids (scalars; None for absent parts)."""
    pos_min = pos_max = seg_min = seg_max = None
    if position is not None:
        pos_min, pos_max = jnp.min(position), jnp.max(position)
    if segment is not None:
        nonzero = segment != 0
        seg_min = jnp.min(jnp.where(nonzero, segment, NO_SEGMENT))
        seg_max = jnp.max(jnp.where(nonzero, segment, -NO_SEGMENT))
    return Summary(pos_min, pos_max, seg_min, seg_max)


def block_may_be_visible(cfg: FlashConfig, q: Summary, kv: Summary):
    """False only when no query of the q block can see any key of the kv block (scalar bool).

    Covers what loop bounds cannot: segment ids, and causal/window on explicit positions.
    """
    ok = True

    def both(a, b):
        return b if a is True else a & b

    if cfg.has_positions:
        if cfg.causal:
            ok = both(ok, kv.pos_min <= q.pos_max)
        if cfg.window_left is not None:
            ok = both(ok, kv.pos_max >= q.pos_min - cfg.window_left)
        if cfg.window_right is not None:
            ok = both(ok, kv.pos_min <= q.pos_max + cfg.window_right)
    if cfg.has_q_segments and cfg.has_kv_segments:
        ok = both(ok, (kv.seg_min <= q.seg_max) & (kv.seg_max >= q.seg_min))
    elif cfg.has_q_segments:
        ok = both(ok, q.seg_min <= q.seg_max)
    elif cfg.has_kv_segments:
        ok = both(ok, kv.seg_min <= kv.seg_max)
    return ok


def kv_block_range(cfg: FlashConfig, q_block, block_q: int, block_k: int):
    """Key blocks [lo, hi) that query block ``q_block`` can see under causal/window with default positions.

    With explicit positions every block is in range and the per-block check decides.
    """
    if cfg.has_positions:
        return 0, cfg.kv_len_padded // block_k
    return online.kv_block_range(q_block, block_q=block_q, block_k=block_k, q_len=cfg.q_len,
                                 num_kv_blocks=cfg.kv_len_padded // block_k, causal=cfg.causal,
                                 window_left=cfg.window_left, window_right=cfg.window_right)


def q_block_range(cfg: FlashConfig, kv_block, block_q: int, block_k: int):
    """Query blocks [lo, hi) that can see key block ``kv_block`` under causal/window with default positions."""
    if cfg.has_positions:
        return 0, cfg.q_len_padded // block_q
    return online.q_block_range(kv_block, block_q=block_q, block_k=block_k, kv_len=cfg.kv_len,
                                num_q_blocks=cfg.q_len_padded // block_q, causal=cfg.causal,
                                window_left=cfg.window_left, window_right=cfg.window_right)


# ------------------------------------------------------------------------------------------------ tile math
class Carry(NamedTuple):
    """Online-softmax state of a query block: acc [bq, Dv] float32 and the ``online.RowState`` rows [bq, 1]."""

    acc: jax.Array
    rows: online.RowState


def init_carry(block_q: int, v_dim: int, return_stats: bool) -> Carry:
    return Carry(jnp.zeros((block_q, v_dim), jnp.float32),
                 online.init_rows(jnp.zeros((block_q, 1), jnp.float32), return_stats))


def logits(cfg: FlashConfig, q: jax.Array, k: jax.Array) -> jax.Array:
    """q [bq, D], k [bk, D] -> scaled logits [bq, bk] float32."""
    s = lax.dot_general(q, k, _NT, preferred_element_type=jnp.float32, precision=cfg.precision)
    return s * cfg.scale


def softmax_step(cfg: FlashConfig, carry: Carry, q, k, v, vis: Optional[jax.Array], first_block) -> Carry:
    """Fold one key block into the running softmax (``online.update``). q [bq, D], k [bk, D], v [bk, Dv],
    vis [bq, bk] | None; ``first_block`` (scalar bool) says the block starts at key 0."""
    rows, p, alpha = online.update(carry.rows, logits(cfg, q, k), vis, first_block)
    pv = lax.dot_general(p.astype(v.dtype), v, _NN, preferred_element_type=jnp.float32, precision=cfg.precision)
    return Carry(alpha * carry.acc + pv, rows)


def finish(carry: Carry):
    """-> (out [bq, Dv] float32, lse [bq, 1]): zero output and lse = +inf on rows with no visible key."""
    inv, lse = online.finish(carry.rows)
    return carry.acc * inv, lse


def row_outputs(carry: Carry, lse: jax.Array) -> tuple[jax.Array, ...]:
    """The row statistics a forward kernel writes (``NUM_ROW_STATS`` of them, [bq, 1] each):
    m, l, ps, sink, logit_mean, logit_std."""
    rows = carry.rows
    return (rows.m, rows.l, rows.ps, online.sink(rows, lse)) + finish_moments(*rows.moments)


def probabilities(cfg: FlashConfig, q, k, lse, vis: Optional[jax.Array]):
    """Recomputed attention probabilities of a tile from the saved lse: -> [bq, bk] float32."""
    s = logits(cfg, q, k)
    p = jnp.exp(s - lse)
    if vis is not None:
        p = jnp.where(vis, p, 0.0)
    return p


def dq_step(cfg: FlashConfig, dq, q, k, v, do, lse, delta, vis):
    """dq [bq, D] += dS @ K for one key block (dS unscaled; the caller multiplies by the scale once)."""
    p = probabilities(cfg, q, k, lse, vis)
    dp = lax.dot_general(do, v, _NT, preferred_element_type=jnp.float32, precision=cfg.precision)
    ds = p * (dp - delta)
    return dq + lax.dot_general(ds.astype(k.dtype), k, _NN, preferred_element_type=jnp.float32,
                                precision=cfg.precision)


def dkv_step(cfg: FlashConfig, dk, dv, q, k, v, do, lse, delta, vis):
    """dk [bk, D] += dS^T @ Q, dv [bk, Dv] += P^T @ dO for one query block (dk unscaled)."""
    p = probabilities(cfg, q, k, lse, vis)
    dv = dv + lax.dot_general(p.T.astype(do.dtype), do, _NN, preferred_element_type=jnp.float32,
                              precision=cfg.precision)
    dp = lax.dot_general(do, v, _NT, preferred_element_type=jnp.float32, precision=cfg.precision)
    ds = p * (dp - delta)
    dk = dk + lax.dot_general(ds.T.astype(q.dtype), q, _NN, preferred_element_type=jnp.float32,
                              precision=cfg.precision)
    return dk, dv
