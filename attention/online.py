"""The online-softmax math every streaming backend shares: ``chunked``, both Pallas kernel bodies and ``ring``.

A query row's state after some key blocks is a ``RowState``; ``update`` folds in one block of scaled logits,
``finish`` gives the normalizer and the log-sum-exp, ``row_statistics`` the ``AttentionStats`` fields. Row
arrays keep a trailing axis of 1 (``[..., bq, 1]``), so they broadcast against a ``[..., bq, bk]`` tile and a
``[..., bq, Dv]`` accumulator alike (``[bq, 1]`` is also the layout Triton and Mosaic want).

Also here: which key blocks a query block can see, and which query blocks see a key block, under causal and
window masks with default positions (``kv_block_range`` / ``q_block_range``).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from attention.stats import finalize_stats, finish_moments, merge_moments, tile_moments


class RowState(NamedTuple):
    """Online-softmax state of query rows, each field ``[..., 1]`` in the accumulation dtype.

    m: running max of the visible logits (-inf before any); l: ``sum_j exp(s_j - m)``. With statistics also
    ps: ``sum_j exp(s_j - m) s_j`` (for the entropy), s0: the logit of key 0 (-inf while unseen or hidden), and
    the moments of the visible logits, count / mean / m2 (``attention.stats.merge_moments``); else None.
    """

    m: jax.Array
    l: jax.Array
    ps: Optional[jax.Array]
    s0: Optional[jax.Array]
    count: Optional[jax.Array]
    mean: Optional[jax.Array]
    m2: Optional[jax.Array]

    @property
    def moments(self) -> tuple:
        return self.count, self.mean, self.m2


def init_rows(like: jax.Array, return_stats: bool) -> RowState:
    """The state before any key: rows shaped and typed like ``like`` (``[..., 1]``)."""
    zero = jnp.zeros_like(like)
    stat = (lambda x: x) if return_stats else (lambda x: None)  # noqa: E731
    return RowState(zero - jnp.inf, zero, stat(zero), stat(zero - jnp.inf), stat(zero), stat(zero), stat(zero))


def update(
    state: RowState, s: jax.Array, vis: Optional[jax.Array], holds_key0
) -> tuple[RowState, jax.Array, jax.Array]:
    """Fold one block of scaled logits into the rows.

    s: [..., bq, bk] logits; vis: bool broadcastable to s, or None (all visible); holds_key0: scalar bool,
    whether column 0 of this block is key 0 (kept for the attention-sink statistic).
    Returns (new state, p [..., bq, bk] = exp(s - m_new) with exact zeros on hidden keys, alpha [..., bq, 1]):
    the caller updates its value accumulator as ``alpha * acc + p @ v``. Rows that have seen no visible key
    keep m = -inf and l = 0.
    """
    s_vis = s if vis is None else jnp.where(vis, s, -jnp.inf)
    m_new = jnp.maximum(state.m, jnp.max(s_vis, axis=-1, keepdims=True))
    m_use = jnp.where(m_new == -jnp.inf, jnp.zeros((), s.dtype), m_new)
    alpha = jnp.exp(state.m - m_use)
    p = jnp.exp(s_vis - m_use)
    l = alpha * state.l + jnp.sum(p, axis=-1, keepdims=True)
    if state.ps is None:
        return RowState(m_new, l, None, None, None, None, None), p, alpha
    ps = alpha * state.ps + jnp.sum(p * s, axis=-1, keepdims=True)
    column = lax.broadcasted_iota(jnp.int32, s_vis.shape, s_vis.ndim - 1)
    s0 = lax.cond(
        holds_key0,
        lambda: jnp.max(jnp.where(column == 0, s_vis, -jnp.inf), axis=-1, keepdims=True),
        lambda: state.s0,
    )
    moments = merge_moments(state.moments, tile_moments(s, vis))
    return RowState(m_new, l, ps, s0, *moments), p, alpha


def finish(state: RowState) -> tuple[jax.Array, jax.Array]:
    """-> (inv_l, lse), both [..., 1]: inv_l = 1/l (0 on rows with no visible key) and lse (+inf there).

    The +inf makes every recomputed probability exp(s - lse) exactly zero in a backward pass.
    """
    valid = state.l > 0
    l_safe = jnp.where(valid, state.l, jnp.ones((), state.l.dtype))
    inv = jnp.where(valid, 1.0 / l_safe, jnp.zeros((), state.l.dtype))
    return inv, jnp.where(valid, state.m + jnp.log(l_safe), jnp.inf)


def sink(state: RowState, lse: jax.Array) -> jax.Array:
    """Probability on key 0 from the same logits as ``lse`` (from ``finish``): 0 when hidden or the row empty."""
    return jnp.exp(state.s0 - lse)


def row_statistics(state: RowState) -> tuple[jax.Array, ...]:
    """(entropy, max_logit, lse, valid, sink, logit_mean, logit_std), each shaped like the rows.

    Zeros (and valid False) on rows with no visible key; needs a state built with statistics.
    """
    _, lse_inf = finish(state)
    entropy, max_logit, lse, valid = finalize_stats(state.m, state.l, state.ps)
    return (entropy, max_logit, lse, valid, sink(state, lse_inf)) + finish_moments(*state.moments)


# ---------------------------------------------------------------------------------------------- block ranges
def _div(a, b: int):
    """Floor division of a non-negative (possibly traced) int by a static int, in ops every lowering has."""
    return a // b if isinstance(a, int) else lax.div(a, jnp.int32(b))


def _max(a, b):
    return max(a, b) if isinstance(a, int) and isinstance(b, int) else jnp.maximum(a, b)


def _min(a, b):
    return min(a, b) if isinstance(a, int) and isinstance(b, int) else jnp.minimum(a, b)


def kv_block_range(q_block, *, block_q: int, block_k: int, q_len: int, num_kv_blocks: int, causal: bool,
                   window_left: Optional[int], window_right: Optional[int]):
    """Key blocks [lo, hi) that query block ``q_block`` (int or traced int32) can see, default positions.

    Query i sees key j only if ``i - window_left <= j <= i + window_right`` and, when causal, ``j <= i``;
    the range covers every block holding such a key (lo >= hi: none).
    """
    lo, hi = 0, num_kv_blocks
    first = q_block * block_q
    last = _min((q_block + 1) * block_q, q_len) - 1
    if causal:
        hi = _min(hi, _div(last, block_k) + 1)
    if window_right is not None:
        hi = _min(hi, _div(last + window_right, block_k) + 1)
    if window_left is not None:
        lo = _div(_max(first - window_left, 0), block_k)
    return lo, hi


def q_block_range(kv_block, *, block_q: int, block_k: int, kv_len: int, num_q_blocks: int, causal: bool,
                  window_left: Optional[int], window_right: Optional[int]):
    """Query blocks [lo, hi) that can see key block ``kv_block`` (int or traced int32), default positions."""
    lo, hi = 0, num_q_blocks
    first = kv_block * block_k
    last = _min((kv_block + 1) * block_k, kv_len) - 1
    if causal:
        lo = _div(first, block_q)
    if window_right is not None:
        lo = _max(lo, _div(_max(first - window_right, 0), block_q))
    if window_left is not None:
        hi = _min(hi, _div(last + window_left, block_q) + 1)
    return lo, hi


def live_tiles(q_len: int, kv_len: int, block_q: int, block_k: int, *, causal: bool,
               window_left: Optional[int], window_right: Optional[int]) -> np.ndarray:
    """bool [num_q_blocks, num_kv_blocks]: the tiles ``kv_block_range`` visits (for tests and plots)."""
    nq, nk = -(-q_len // block_q), -(-kv_len // block_k)
    live = np.zeros((nq, nk), bool)
    for i in range(nq):
        lo, hi = kv_block_range(i, block_q=block_q, block_k=block_k, q_len=q_len, num_kv_blocks=nk,
                                causal=causal, window_left=window_left, window_right=window_right)
        live[i, max(lo, 0):max(hi, 0)] = True
    return live
