"""The ``chunked`` backend: blockwise online-softmax attention (the FlashAttention-2 algorithm) in pure JAX.

Memory is linear in sequence length. Queries are processed in blocks of ``block_q`` rows and, for each,
keys/values in blocks of ``block_k``; only one ``[B, H, block_q, block_k]`` tile of logits exists at a time,
never ``[Tq, Tk]``. A ``jax.custom_vjp`` keeps the output and the row log-sum-exp (plus the inputs) for the
backward pass, which recomputes every tile: an outer loop over key blocks accumulates dK and dV, dQ is
accumulated in place across it.

What it takes: the whole ``attention.Mask`` (causal, window with open sides, query/key segment ids, explicit
positions, and a dense mask, sliced per tile), GQA/MQA (query heads are grouped per key/value head; K and V
are never repeated), ``Dv != D``, ``Tq != Tk``, lengths that are not multiples of the block sizes (padded
inside, sliced out), any scale, dropout, and ``return_stats``: entropy (``lse - sum_j p_j s_j``), max logit,
log-sum-exp and the probability on key 0 (``sink``), accumulated online with the same rescaling as the softmax
denominator, and the unweighted mean / std of the visible logits (``logit_mean`` / ``logit_std``: count, mean
and squared deviations per tile, merged across tiles with Chan et al.'s update).

Each tile is one ``online.update`` (the online-softmax step shared with the Pallas kernels and the ``ring``
backend); ``forward_blocks`` / ``backward_blocks`` are the passes over one set of queries and keys that
``ring`` runs once per ring step. Fully masked tiles are skipped:

- causal and window masks with default positions: the loops visit only the key blocks each query block can
  see (and, backward, the query blocks that see each key block), from the block geometry
  (``online.kv_block_range`` / ``q_block_range``, shared with the Pallas kernels).
- segment ids, explicit positions or a dense mask: every visited tile checks at run time whether any of its
  entries is visible (``lax.cond``) and does no arithmetic when none is.

Dropout: tile (i, j) draws its keep mask from ``fold_in(fold_in(dropout_rng, i), j)`` and the backward pass
draws the same masks again, so which entries drop depends on the block sizes (``dropout_keep_mask`` gives
the equivalent dense mask). Statistics describe the probabilities before dropout.

Precision: q.k and dO.v take the inputs in their own dtype and accumulate in float32; the probabilities, every
other product and every accumulator are float32 (float64 throughout for float64 inputs). The output and the
gradients come back in the input dtype.

Options (``attention(..., backend_options={...})``): ``block_q`` and ``block_k`` (positive ints; blocks
larger than the sequence shrink to it).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from attention.api import Request, register_backend
from attention.mask import Mask, Window
from attention import online
from attention.reference import accumulator_dtype
from attention.stats import AttentionStats

# Defaults chosen with scripts/bench_attention.py on CPU: 256 x 256 tiles were fastest at 4k tokens (causal and
# not) among 128..512; smaller tiles skip more of a causal mask, larger ones loop less.
DEFAULT_BLOCK_Q = 256
DEFAULT_BLOCK_K = 256


@dataclasses.dataclass(frozen=True)
class Plan:
    """Everything static about one call: shapes, block geometry, mask structure, options."""

    scale: float
    q_len: int
    kv_len: int
    block_q: int
    block_k: int
    groups: int  # query heads per key/value head
    causal: bool
    window: Window
    default_positions: bool  # neither q_positions nor kv_positions given
    dropout_rate: float
    return_stats: bool
    acc_dtype: str

    @property
    def num_q_blocks(self) -> int:
        return -(-self.q_len // self.block_q)

    @property
    def num_kv_blocks(self) -> int:
        return -(-self.kv_len // self.block_k)

    @property
    def kv_padded(self) -> bool:
        return self.kv_len % self.block_k != 0


def effective_block(name: str, block, length: int) -> int:
    if not isinstance(block, (int, np.integer)) or isinstance(block, bool) or block < 1:
        raise ValueError(f"chunked attention: {name} must be a positive int; got {block!r}")
    return int(min(int(block), length))


def _kv_range(plan: Plan, i):
    """Key blocks [lo, hi) query block ``i`` can see (``online.kv_block_range``)."""
    left, right = plan.window if plan.window is not None else (None, None)
    return online.kv_block_range(i, block_q=plan.block_q, block_k=plan.block_k, q_len=plan.q_len,
                                 num_kv_blocks=plan.num_kv_blocks, causal=plan.causal, window_left=left,
                                 window_right=right)


def _q_range(plan: Plan, j):
    """Query blocks [lo, hi) that can see key block ``j`` (``online.q_block_range``)."""
    left, right = plan.window if plan.window is not None else (None, None)
    return online.q_block_range(j, block_q=plan.block_q, block_k=plan.block_k, kv_len=plan.kv_len,
                                num_q_blocks=plan.num_q_blocks, causal=plan.causal, window_left=left,
                                window_right=right)


# ------------------------------------------------------------------------------------------------- layouts
def block_rows(x: jax.Array, block: int, groups: int) -> jax.Array:
    """q-like [B, T, H, D] -> [nq, B, Hkv, G, block, D] (T zero-padded to a multiple of block)."""
    B, T, H, D = x.shape
    n = -(-T // block)
    x = jnp.pad(x, ((0, 0), (0, n * block - T), (0, 0), (0, 0)))
    # One axis split per reshape, so that explicitly sharded inputs keep a well-defined sharding.
    x = x.reshape(B, n, block, H, D).reshape(B, n, block, H // groups, groups, D)
    return x.transpose(1, 0, 3, 4, 2, 5)


def unblock_rows(x: jax.Array, length: int) -> jax.Array:
    """[nq, B, Hkv, G, block, D] -> [B, length, H, D]."""
    n, B, Hkv, G, block, D = x.shape
    x = x.transpose(1, 0, 4, 2, 3, 5).reshape(B, n * block, Hkv, G, D).reshape(B, n * block, Hkv * G, D)
    return x[:, :length]


def unblock_row_stat(x: jax.Array, length: int) -> jax.Array:
    """[nq, B, Hkv, G, block] -> [B, H, length]."""
    n, B, Hkv, G, block = x.shape
    return x.transpose(1, 2, 3, 0, 4).reshape(B, Hkv * G, n, block).reshape(B, Hkv * G, n * block)[..., :length]


def block_cols(x: jax.Array, block: int) -> jax.Array:
    """k-like [B, T, Hkv, D] -> [nk, B, Hkv, block, D]."""
    B, T, Hkv, D = x.shape
    n = -(-T // block)
    x = jnp.pad(x, ((0, 0), (0, n * block - T), (0, 0), (0, 0)))
    return x.reshape(B, n, block, Hkv, D).transpose(1, 0, 3, 2, 4)


def block_ids(x: Optional[jax.Array], block: int) -> Optional[jax.Array]:
    """[B, T] ints -> [n, B, block] (zero-padded: padded segment ids read as padding)."""
    if x is None:
        return None
    B, T = x.shape
    n = -(-T // block)
    x = jnp.pad(x.astype(jnp.int32), ((0, 0), (0, n * block - T)))
    return x.reshape(B, n, block).transpose(1, 0, 2)


def _prepare_dense(dense: Optional[jax.Array], plan: Plan, heads: int) -> Optional[jax.Array]:
    """Dense mask broadcastable to [B, H, Tq, Tk] -> [Bd, Hkv|1, G|1, Tq_pad|1, Tk_pad|1] bool."""
    if dense is None:
        return None
    d = dense.reshape((1,) * (4 - dense.ndim) + tuple(dense.shape))
    Bd, Hd, Tqd, Tkd = d.shape
    pad_q = plan.num_q_blocks * plan.block_q - Tqd if Tqd > 1 else 0
    pad_k = plan.num_kv_blocks * plan.block_k - Tkd if Tkd > 1 else 0
    d = jnp.pad(d, ((0, 0), (0, 0), (0, pad_q), (0, pad_k)), constant_values=False)
    if Hd == 1:
        return d[:, :, None]
    return d.reshape(Bd, heads // plan.groups, plan.groups, d.shape[2], d.shape[3])


# ---------------------------------------------------------------------------------------------- one tile
def _tile_visibility(plan: Plan, aux: dict, i, j) -> Optional[jax.Array]:
    """Visible entries of tile (i, j), broadcastable to [B, Hkv, G, bq, bk]; None when all are visible."""
    bq, bk = plan.block_q, plan.block_k
    vis = None
    if plan.causal or plan.window is not None or "q_seg" in aux or "kv_seg" in aux:
        q_pos = aux["q_pos"][i] if "q_pos" in aux else (i * bq + jnp.arange(bq, dtype=jnp.int32))[None]
        kv_pos = aux["kv_pos"][j] if "kv_pos" in aux else (j * bk + jnp.arange(bk, dtype=jnp.int32))[None]
        q_seg = aux["q_seg"][i] if "q_seg" in aux else None
        kv_seg = aux["kv_seg"][j] if "kv_seg" in aux else None
        structure = Mask(causal=plan.causal, window=plan.window)
        vis = structure.structured_block(q_pos, kv_pos, q_seg, kv_seg)[:, None, None]  # [B|1, 1, 1, bq, bk]
    if plan.kv_padded:
        in_range = (j * bk + jnp.arange(bk) < plan.kv_len)[None, None, None, None]
        vis = in_range if vis is None else vis & in_range
    if "dense" in aux:
        d = aux["dense"]
        zero = jnp.zeros((), jnp.int32)
        start = (zero, zero, zero, i * bq if d.shape[3] > 1 else zero, j * bk if d.shape[4] > 1 else zero)
        size = d.shape[:3] + (bq if d.shape[3] > 1 else 1, bk if d.shape[4] > 1 else 1)
        tile = jax.lax.dynamic_slice(d, start, size)
        vis = tile if vis is None else vis & tile
    return vis


def _needs_runtime_skip(aux: dict) -> bool:
    return any(name in aux for name in ("q_seg", "kv_seg", "q_pos", "kv_pos", "dense"))


def _tile_keep(rng: jax.Array, rate: float, i, j, shape) -> jax.Array:
    """Dropout keep mask of tile (i, j): bool ``shape``."""
    return jax.random.bernoulli(jax.random.fold_in(jax.random.fold_in(rng, i), j), 1.0 - rate, shape)


def _logits(plan: Plan, q_blk: jax.Array, k_blk: jax.Array) -> jax.Array:
    """q_blk: [B, Hkv, G, bq, D], k_blk: [B, Hkv, bk, D] -> scaled logits [B, Hkv, G, bq, bk]."""
    s = jnp.einsum("bhgqd,bhkd->bhgqk", q_blk, k_blk, preferred_element_type=plan.acc_dtype)
    return s * jnp.asarray(plan.scale, plan.acc_dtype)


def _skip_or_run(aux: dict, vis: Optional[jax.Array], run, carry):
    """``run(carry)`` unless the tile is known at run time to have no visible entry."""
    if vis is None or not _needs_runtime_skip(aux):
        return run(carry)
    return jax.lax.cond(jnp.any(vis), run, lambda c: c, carry)


# ------------------------------------------------------------------------------------------------- forward
def init_state(plan: Plan, qb: jax.Array, v_dim: int) -> tuple[jax.Array, online.RowState]:
    """State before any key: (o [nq, B, Hkv, G, bq, Dv], rows [nq, B, Hkv, G, bq, 1]) in the accumulation
    dtype, built from qb so that it inherits qb's sharding."""
    row = jnp.zeros_like(qb[..., :1], dtype=plan.acc_dtype)
    return jnp.broadcast_to(row, row.shape[:-1] + (v_dim,)), online.init_rows(row, plan.return_stats)


def _static_range(plan: Plan) -> bool:
    return plan.default_positions and (plan.causal or plan.window is not None)


def forward_blocks(plan: Plan, qb, kb, vb, aux: dict, rng, state, key0_here=True):
    """Fold every key block of kb/vb into ``state`` (from ``init_state``) with ``online.update``.

    qb: [nq, B, Hkv, G, bq, D], kb: [nk, B, Hkv, bk, D], vb: [nk, B, Hkv, bk, Dv]; aux: the blocked mask arrays
    of these queries and keys. ``key0_here`` (scalar bool): key block 0 of kb starts at key 0 (for the sink).
    Returns the new state (unnormalized: see ``finish_state``).
    """
    acc = plan.acc_dtype

    def per_q_block(_, xs):
        i, q_blk, o, rows = xs

        def per_kv_block(j, carry):
            k_blk = jax.lax.dynamic_index_in_dim(kb, j, keepdims=False)
            v_blk = jax.lax.dynamic_index_in_dim(vb, j, keepdims=False)
            vis = _tile_visibility(plan, aux, i, j)

            def run(carry):
                o, rows = carry
                rows, p, alpha = online.update(rows, _logits(plan, q_blk, k_blk), vis, key0_here & (j == 0))
                if plan.dropout_rate > 0.0:
                    keep = _tile_keep(rng, plan.dropout_rate, i, j, p.shape)
                    p = jnp.where(keep, p * jnp.asarray(1.0 / (1.0 - plan.dropout_rate), acc), 0.0)
                pv = jnp.einsum("bhgqk,bhkd->bhgqd", p, v_blk.astype(acc), preferred_element_type=acc)
                return alpha * o + pv, rows

            return _skip_or_run(aux, vis, run, carry)

        lo, hi = _kv_range(plan, i) if _static_range(plan) else (0, kb.shape[0])
        return None, jax.lax.fori_loop(jnp.int32(lo), jnp.int32(hi), per_kv_block, (o, rows))

    nq = qb.shape[0]
    _, state = jax.lax.scan(per_q_block, None, (jnp.arange(nq, dtype=jnp.int32), qb) + tuple(state))
    return state


def finish_state(plan: Plan, state, dtype):
    """-> (ob [nq, B, Hkv, G, bq, Dv] in ``dtype``, lse [nq, B, Hkv, G, bq] (+inf on rows with no visible key),
    stats or None), stats being (entropy, max_logit, lse, valid, sink, logit_mean, logit_std), each
    [nq, B, Hkv, G, bq]."""
    o, rows = state
    inv, lse = online.finish(rows)
    stats = None
    if plan.return_stats:
        stats = tuple(x[..., 0] for x in online.row_statistics(rows))
    return (o * inv).astype(dtype), lse[..., 0], stats


def _forward(plan: Plan, qb, kb, vb, aux, rng):
    state = forward_blocks(plan, qb, kb, vb, aux, rng, init_state(plan, qb, vb.shape[-1]))
    return finish_state(plan, state, qb.dtype)


# ------------------------------------------------------------------------------------------------ backward
def backward_blocks(plan: Plan, qb, kb, vb, aux: dict, rng, lse, delta, dob, dq):
    """Gradient contributions of every tile of these queries and keys, recomputed from the saved ``lse``.

    lse, delta: [nq, B, Hkv, G, bq] (delta = rowsum(dO * O)); dob like the output; dq: the running query
    gradient [nq, B, Hkv, G, bq, D]. Returns (dq + this block's part, dkb, dvb), unscaled (the caller
    multiplies dq and dk by the scale once), in the accumulation dtype.
    """
    acc = plan.acc_dtype
    neg_inf = jnp.asarray(-jnp.inf, acc)
    inv_keep = jnp.asarray(1.0 / (1.0 - plan.dropout_rate), acc)

    def per_kv_block(dq, xs):
        j, k_blk, v_blk = xs

        def per_q_block(i, carry):
            q_blk = jax.lax.dynamic_index_in_dim(qb, i, keepdims=False)
            vis = _tile_visibility(plan, aux, i, j)

            def run(carry):
                dq, dk, dv = carry
                do_blk = jax.lax.dynamic_index_in_dim(dob, i, keepdims=False)
                lse_blk = jax.lax.dynamic_index_in_dim(lse, i, keepdims=False)
                delta_blk = jax.lax.dynamic_index_in_dim(delta, i, keepdims=False)
                s = _logits(plan, q_blk, k_blk) - lse_blk[..., None]
                p = jnp.exp(s if vis is None else jnp.where(vis, s, neg_inf))  # [B, Hkv, G, bq, bk]
                dp = jnp.einsum("bhgqd,bhkd->bhgqk", do_blk, v_blk, preferred_element_type=acc)
                p_used = p
                if plan.dropout_rate > 0.0:
                    keep = _tile_keep(rng, plan.dropout_rate, i, j, p.shape)
                    p_used = jnp.where(keep, p * inv_keep, 0.0)
                    dp = jnp.where(keep, dp * inv_keep, 0.0)
                dv = dv + jnp.einsum("bhgqk,bhgqd->bhkd", p_used, do_blk.astype(acc), preferred_element_type=acc)
                ds = p * (dp - delta_blk[..., None])
                dq_blk = jax.lax.dynamic_index_in_dim(dq, i, keepdims=False)
                dq_blk = dq_blk + jnp.einsum("bhgqk,bhkd->bhgqd", ds, k_blk.astype(acc), preferred_element_type=acc)
                dq = jax.lax.dynamic_update_index_in_dim(dq, dq_blk, i, 0)
                dk = dk + jnp.einsum("bhgqk,bhgqd->bhkd", ds, q_blk.astype(acc), preferred_element_type=acc)
                return dq, dk, dv

            return _skip_or_run(aux, vis, run, carry)

        init = (dq, jnp.zeros_like(k_blk, dtype=acc), jnp.zeros_like(v_blk, dtype=acc))
        lo, hi = _q_range(plan, j) if _static_range(plan) else (0, qb.shape[0])
        dq, dk, dv = jax.lax.fori_loop(jnp.int32(lo), jnp.int32(hi), per_q_block, init)
        return dq, (dk, dv)

    nk = kb.shape[0]
    dq, (dkb, dvb) = jax.lax.scan(per_kv_block, dq, (jnp.arange(nk, dtype=jnp.int32), kb, vb))
    return dq, dkb, dvb


def row_delta(plan: Plan, ob, dob) -> jax.Array:
    """D_i = sum_j P_ij dP_ij = dO_i . O_i (dropout included): [nq, B, Hkv, G, bq]."""
    return jnp.einsum("nbhgqd,nbhgqd->nbhgq", dob, ob, preferred_element_type=plan.acc_dtype)


def _backward(plan: Plan, qb, kb, vb, aux, rng, ob, lse, dob):
    """Gradients (dqb, dkb, dvb) in the blocked layouts of the inputs."""
    dq0 = jnp.zeros_like(qb, dtype=plan.acc_dtype)
    dq, dkb, dvb = backward_blocks(plan, qb, kb, vb, aux, rng, lse, row_delta(plan, ob, dob), dob, dq0)
    scale = jnp.asarray(plan.scale, plan.acc_dtype)
    return (dq * scale).astype(qb.dtype), (dkb * scale).astype(kb.dtype), dvb.astype(vb.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _flash(plan: Plan, qb, kb, vb, aux, rng):
    return _forward(plan, qb, kb, vb, aux, rng)


def _flash_fwd(plan: Plan, qb, kb, vb, aux, rng):
    ob, lse, stats = _forward(plan, qb, kb, vb, aux, rng)
    return (ob, lse, stats), (qb, kb, vb, aux, rng, ob, lse)


def _flash_bwd(plan: Plan, residuals, cotangents):
    qb, kb, vb, aux, rng, ob, lse = residuals
    dob = cotangents[0]  # lse and stats carry no gradient (stop_gradient outside)
    dqb, dkb, dvb = _backward(plan, qb, kb, vb, aux, rng, ob, lse, dob)
    return dqb, dkb, dvb, None, None


_flash.defvjp(_flash_fwd, _flash_bwd)


# ------------------------------------------------------------------------------------------------- backend
def dropout_keep_mask(
    dropout_rng: jax.Array,
    dropout_rate: float,
    *,
    batch: int,
    num_heads: int,
    num_kv_heads: int,
    q_len: int,
    kv_len: int,
    block_q: int = DEFAULT_BLOCK_Q,
    block_k: int = DEFAULT_BLOCK_K,
) -> jax.Array:
    """The dense keep mask [B, H, Tq, Tk] (bool) that the chunked backend draws for these shapes and blocks.

    For checking and debugging: ``attention(..., implementation="chunked", dropout_rng=key)`` equals
    the reference computation with softmax probabilities multiplied by ``mask / (1 - dropout_rate)``.
    """
    bq = effective_block("block_q", block_q, q_len)
    bk = effective_block("block_k", block_k, kv_len)
    nq, nk = -(-q_len // bq), -(-kv_len // bk)
    groups = num_heads // num_kv_heads
    rows = []
    for i in range(nq):
        tiles = [
            _tile_keep(dropout_rng, dropout_rate, i, j, (batch, num_kv_heads, groups, bq, bk)) for j in range(nk)
        ]
        rows.append(jnp.concatenate(tiles, axis=-1))
    keep = jnp.concatenate(rows, axis=-2).reshape(batch, num_heads, nq * bq, nk * bk)
    return keep[:, :, :q_len, :kv_len]


def chunked_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: Mask,
    *,
    scale: float,
    dropout_rate: float = 0.0,
    dropout_rng: Optional[jax.Array] = None,
    return_stats: bool = False,
    block_q: int = DEFAULT_BLOCK_Q,
    block_k: int = DEFAULT_BLOCK_K,
) -> tuple[jax.Array, Optional[AttentionStats]]:
    """q: [B, Tq, H, D], k: [B, Tk, Hkv, D], v: [B, Tk, Hkv, Dv] -> ([B, Tq, H, Dv], stats or None).

    Blockwise attention with memory linear in Tq + Tk; see the module docstring.
    """
    B, Tq, H, _ = q.shape
    Tk, Hkv = k.shape[1], k.shape[2]
    try:
        scale = float(scale)
    except (TypeError, jax.errors.ConcretizationTypeError):
        raise ValueError(f"chunked attention: scale must be a Python number (static); got {scale!r}") from None
    plan = Plan(
        scale=scale,
        q_len=Tq,
        kv_len=Tk,
        block_q=effective_block("block_q", block_q, Tq),
        block_k=effective_block("block_k", block_k, Tk),
        groups=H // Hkv,
        causal=mask.causal,
        window=mask.window,
        default_positions=not mask.has_positions,
        dropout_rate=float(dropout_rate),
        return_stats=bool(return_stats),
        acc_dtype=jnp.dtype(accumulator_dtype(q.dtype)).name,
    )
    aux = {}
    for name, value, block in (
        ("q_seg", mask.q_segment_ids, plan.block_q),
        ("kv_seg", mask.kv_segment_ids, plan.block_k),
        ("q_pos", mask.q_positions, plan.block_q),
        ("kv_pos", mask.kv_positions, plan.block_k),
    ):
        if value is not None:
            aux[name] = block_ids(value, block)
    if mask.dense is not None:
        aux["dense"] = _prepare_dense(mask.dense, plan, H)
    rng = dropout_rng if plan.dropout_rate > 0.0 else None

    qb = block_rows(q, plan.block_q, plan.groups)
    kb = block_cols(k, plan.block_k)
    vb = block_cols(v, plan.block_k)
    ob, _, stats = _flash(plan, qb, kb, vb, aux, rng)
    out = unblock_rows(ob, Tq)
    if not return_stats:
        return out, None
    entropy, max_logit, lse, valid, sink, logit_mean, logit_std = (unblock_row_stat(x, Tq) for x in stats)
    f32 = jnp.float32
    result = AttentionStats(
        entropy=entropy.astype(f32), max_logit=max_logit.astype(f32), lse=lse.astype(f32), valid=valid,
        sink=sink.astype(f32), logit_mean=logit_mean.astype(f32), logit_std=logit_std.astype(f32),
    )
    return out, jax.lax.stop_gradient(result)


def _supports(request: Request) -> Optional[str]:
    """Every feature of ``attention.attention`` is implemented: chunked serves any request."""
    return None


register_backend("chunked", chunked_attention, _supports)
