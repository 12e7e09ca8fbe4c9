"""The ``ring`` backend: ring attention (context parallelism) over a sequence-sharded mesh axis.

q, k, v are split along the sequence over the devices of one mesh axis (default ``"context"``). Inside
``jax.shard_map`` each device keeps its queries; the K/V blocks, with their positions and segment ids, travel
around the ring with ``jax.lax.ppermute``, and each of the N steps folds the block in hand into the queries'
online-softmax state with the ``chunked`` backend's pass (``chunked.forward_blocks``: tiles of
``block_q x block_k``, one ``online.update`` each). Per device, memory is linear in the local sequence length
``T / N``: its queries, outputs and gradients, the K/V block in hand and the one arriving, one tile of logits.

The backward pass is a ``jax.custom_vjp`` ring of its own, not autodiff through the forward ring: it saves
only the inputs, the output and the row log-sum-exp, and recomputes the probabilities block by block
(``chunked.backward_blocks``). dQ accumulates on the query's device; dK and dV travel with their K/V block and
after N steps arrive back on the block's own device. Autodiff through the forward ring would save the
probabilities of every tile of every step for the backward pass, i.e. ``T^2 / N`` numbers per device: the
quadratic memory the ring exists to avoid.

Mask: causal, window (open sides too), query/key segment ids and positions, all in the *global* sequence: the
mask arrays are sharded like the sequence and rotate with their keys, so the visibility of every tile is
decided from true positions. A dense mask and dropout are not supported. Statistics: entropy, max logit,
log-sum-exp, sink (key 0 is the first key of device 0's block), logit mean and std, like every backend.

Load balancing for causal attention: with the sequence in natural order, device N-1's queries see every key
block while device 0's see only their own, and each ring step waits for the busiest device. The zig-zag layout
(``to_zigzag``) gives device r the chunks r and 2N-1-r of 2N equal chunks, so every device has the same
amount of visible work in every step. Permute the token sequence once (``to_zigzag``; ``zigzag_mask`` permutes
segment ids and supplies the positions), run the model, and permute outputs back (``from_zigzag``).

Options (``backend_options``, all hashable):

- ``mesh``: a ``jax.sharding.Mesh``; default: the mesh set with ``jax.set_mesh``. With neither, or when that
  mesh lacks ``axis``, or the axis has size 1, the ring has one device and the call is the ``chunked`` one.
- ``axis``: the sequence axis name, default ``"context"``.
- ``batch_axis`` / ``head_axis``: mesh axes (or tuples of them) that shard the batch / the heads as well.
- ``block_q``, ``block_k``: the chunked tiles inside a device (default 256).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Optional, Union

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

from attention import chunked
from attention.api import Request, register_backend
from attention.mask import Mask
from attention.reference import accumulator_dtype
from attention.stats import AttentionStats

DEFAULT_AXIS = "context"
OPTIONS = ("mesh", "axis", "batch_axis", "head_axis", "block_q", "block_k")
_STAT_NAMES = ("entropy", "max_logit", "lse", "valid", "sink", "logit_mean", "logit_std")


# ------------------------------------------------------------------------------------------------ zig-zag
def zigzag_indices(length: int, num_devices: int) -> np.ndarray:
    """The permutation into the zig-zag layout: ``x[:, zigzag_indices(T, N)]`` puts on device r (the r-th of N
    equal shards) the chunks r and 2N-1-r of 2N equal chunks. -> int [T]; T must be a multiple of 2N."""
    if length % (2 * num_devices):
        raise ValueError(f"zigzag layout: sequence length {length} must be a multiple of 2 x {num_devices} devices")
    c = length // (2 * num_devices)
    chunks = np.arange(length).reshape(2 * num_devices, c)
    return np.concatenate([np.concatenate([chunks[r], chunks[2 * num_devices - 1 - r]])
                           for r in range(num_devices)])


def to_zigzag(x: jax.Array, num_devices: int, axis: int = 1) -> jax.Array:
    """x with its sequence ``axis`` permuted into the zig-zag layout (e.g. tokens [B, T] or q [B, T, H, D])."""
    return jnp.take(x, zigzag_indices(x.shape[axis], num_devices), axis=axis)


def from_zigzag(x: jax.Array, num_devices: int, axis: int = 1) -> jax.Array:
    """The inverse of ``to_zigzag``: back to natural order along ``axis``."""
    return jnp.take(x, np.argsort(zigzag_indices(x.shape[axis], num_devices)), axis=axis)


def zigzag_mask(mask: Optional[Mask], batch: int, q_len: int, kv_len: int, num_devices: int) -> Mask:
    """The mask for q/k/v permuted with ``to_zigzag``: segment ids and dense parts permuted, positions given.

    Positions are the original ones (default: the natural token index) permuted with the tokens, so causal and
    window masks keep their meaning.
    """
    mask = Mask() if mask is None else mask
    q_pos, kv_pos = mask.positions(batch, q_len, kv_len)
    perm = lambda x: None if x is None else to_zigzag(x, num_devices)  # noqa: E731
    dense = mask.dense
    if dense is not None:
        if dense.shape[-2] == q_len:
            dense = to_zigzag(dense, num_devices, axis=dense.ndim - 2)
        if dense.shape[-1] == kv_len:
            dense = to_zigzag(dense, num_devices, axis=dense.ndim - 1)
    return mask.replace(q_positions=perm(q_pos), kv_positions=perm(kv_pos), q_segment_ids=perm(mask.q_segment_ids),
                        kv_segment_ids=perm(mask.kv_segment_ids), dense=dense)


# ------------------------------------------------------------------------------------------------ the ring
@dataclasses.dataclass(frozen=True)
class _Ring:
    plan: chunked.Plan  # shapes of one device's shard
    axis: str
    size: int


def _rotate(x, ring: _Ring):
    """Send every device's ``x`` (a pytree) to the next device on the ring."""
    return lax.ppermute(x, ring.axis, [(r, (r + 1) % ring.size) for r in range(ring.size)])


def _forward(ring: _Ring, qb, kb, vb, q_aux: dict, kv_aux: dict):
    plan = ring.plan
    me = lax.axis_index(ring.axis)

    def fold(state, t, kb, vb, kv_aux):
        holds_key0 = lax.rem(me - t + ring.size, ring.size) == 0  # the block came from device 0
        return chunked.forward_blocks(plan, qb, kb, vb, {**q_aux, **kv_aux}, None, state, holds_key0)

    def step(t, carry):
        state, kb, vb, kv_aux = carry
        received = _rotate((kb, vb, kv_aux), ring)  # independent of this step's compute: they can overlap
        return (fold(state, t, kb, vb, kv_aux),) + received

    state = chunked.init_state(plan, qb, vb.shape[-1])
    state, kb, vb, kv_aux = lax.fori_loop(0, ring.size - 1, step, (state, kb, vb, kv_aux))
    state = fold(state, ring.size - 1, kb, vb, kv_aux)
    return chunked.finish_state(plan, state, qb.dtype)


def _backward(ring: _Ring, qb, kb, vb, q_aux: dict, kv_aux: dict, ob, lse, dob):
    plan = ring.plan
    acc = plan.acc_dtype
    delta = chunked.row_delta(plan, ob, dob)

    def grads(dq, kb, vb, kv_aux):
        return chunked.backward_blocks(plan, qb, kb, vb, {**q_aux, **kv_aux}, None, lse, delta, dob, dq)

    def step(_, carry):
        dq, kb, vb, kv_aux, dk, dv = carry
        received = _rotate((kb, vb, kv_aux), ring)
        dq, dk_t, dv_t = grads(dq, kb, vb, kv_aux)
        return (dq,) + received + _rotate((dk + dk_t, dv + dv_t), ring)

    init = (jnp.zeros_like(qb, dtype=acc), kb, vb, kv_aux, jnp.zeros_like(kb, dtype=acc),
            jnp.zeros_like(vb, dtype=acc))
    dq, kb, vb, kv_aux, dk, dv = lax.fori_loop(0, ring.size - 1, step, init)
    dq, dk_t, dv_t = grads(dq, kb, vb, kv_aux)
    dk, dv = _rotate((dk + dk_t, dv + dv_t), ring)  # the N-th hop brings every block's gradient home
    scale = jnp.asarray(plan.scale, acc)
    return (dq * scale).astype(qb.dtype), (dk * scale).astype(kb.dtype), dv.astype(vb.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _ring(ring: _Ring, qb, kb, vb, q_aux, kv_aux):
    ob, _, stats = _forward(ring, qb, kb, vb, q_aux, kv_aux)
    return ob, stats


def _ring_fwd(ring: _Ring, qb, kb, vb, q_aux, kv_aux):
    ob, lse, stats = _forward(ring, qb, kb, vb, q_aux, kv_aux)
    return (ob, stats), (qb, kb, vb, q_aux, kv_aux, ob, lse)


def _ring_bwd(ring: _Ring, residuals, cotangents):
    qb, kb, vb, q_aux, kv_aux, ob, lse = residuals
    dob = cotangents[0]  # statistics carry no gradient
    return _backward(ring, qb, kb, vb, q_aux, kv_aux, ob, lse, dob) + (None, None)


_ring.defvjp(_ring_fwd, _ring_bwd)


def _shard(q, k, v, ids: dict, *, scale: float, causal: bool, window, axis: str, size: int, block_q: int,
           block_k: int, return_stats: bool):
    """One device's part: q [B, Tq/N, H, D] (local shard), ids: the local mask arrays."""
    B, Tq, H, _ = q.shape
    Tk, Hkv = k.shape[1], k.shape[2]
    plan = chunked.Plan(
        scale=scale, q_len=Tq, kv_len=Tk, block_q=block_q, block_k=block_k, groups=H // Hkv,
        causal=causal, window=window, default_positions=False, dropout_rate=0.0, return_stats=return_stats,
        acc_dtype=jnp.dtype(accumulator_dtype(q.dtype)).name,
    )
    blocked = {name: chunked.block_ids(x, plan.block_q if name.startswith("q_") else plan.block_k)
               for name, x in ids.items()}
    q_aux = {name: x for name, x in blocked.items() if name.startswith("q_")}
    kv_aux = {name: x for name, x in blocked.items() if name.startswith("kv_")}
    qb = chunked.block_rows(q, plan.block_q, plan.groups)
    kb, vb = chunked.block_cols(k, plan.block_k), chunked.block_cols(v, plan.block_k)
    ob, stats = _ring(_Ring(plan, axis, size), qb, kb, vb, q_aux, kv_aux)
    out = chunked.unblock_rows(ob, Tq)
    if not return_stats:
        return out
    stats = {name: chunked.unblock_row_stat(x, Tq) for name, x in zip(_STAT_NAMES, stats)}
    return out, {name: x if name == "valid" else x.astype(jnp.float32) for name, x in stats.items()}


# ------------------------------------------------------------------------------------------------ backend
def _mesh(mesh, axis: str):
    """The mesh to run on, or None for a ring of one device (no mesh given and none set that has ``axis``)."""
    if mesh is None:
        mesh = jax.sharding.get_abstract_mesh()
        if mesh is None or mesh.empty or axis not in mesh.axis_names:
            return None
    if not isinstance(mesh, (jax.sharding.Mesh, jax.sharding.AbstractMesh)):
        raise ValueError(f"ring attention: backend option mesh must be a jax.sharding.Mesh; got {type(mesh).__name__}")
    if axis not in mesh.axis_names:
        raise ValueError(f"ring attention: mesh has axes {tuple(mesh.axis_names)}; the sequence axis {axis!r} is "
                         "not one of them (backend option 'axis')")
    return mesh


def _axis_size(mesh, names: Union[None, str, tuple], option: str) -> int:
    if names is None:
        return 1
    names = (names,) if isinstance(names, str) else tuple(names)
    for name in names:
        if name not in mesh.axis_names:
            raise ValueError(f"ring attention: backend option {option}={name!r} is not a mesh axis; "
                             f"mesh has {tuple(mesh.axis_names)}")
    return int(np.prod([mesh.shape[name] for name in names]))


def ring_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: Mask,
    *,
    scale: float,
    dropout_rate: float = 0.0,
    dropout_rng: Optional[jax.Array] = None,
    return_stats: bool = False,
    mesh=None,
    axis: str = DEFAULT_AXIS,
    batch_axis=None,
    head_axis=None,
    block_q: int = chunked.DEFAULT_BLOCK_Q,
    block_k: int = chunked.DEFAULT_BLOCK_K,
) -> tuple[jax.Array, Optional[AttentionStats]]:
    """q: [B, Tq, H, D], k: [B, Tk, Hkv, D], v: [B, Tk, Hkv, Dv] -> ([B, Tq, H, Dv], stats or None).

    Ring attention with the sequence split over mesh axis ``axis``; see the module docstring for the options.
    Tq and Tk must be multiples of the axis size (and B / heads of the batch / head axis sizes).
    """
    if dropout_rate > 0.0 or mask.dense is not None:
        raise ValueError(f"attention: implementation 'ring' does not support {_supports_mask(mask, dropout_rate)}")
    if not isinstance(axis, str):
        raise ValueError(f"ring attention: backend option axis must be a mesh axis name (str); got {axis!r}")
    mesh = _mesh(mesh, axis)
    if mesh is None or mesh.shape[axis] == 1:  # a ring of one device is the chunked computation
        return chunked.chunked_attention(q, k, v, mask, scale=scale, return_stats=return_stats, block_q=block_q,
                                         block_k=block_k)
    n = int(mesh.shape[axis])
    B, Tq, H, _ = q.shape
    Tk, Hkv = k.shape[1], k.shape[2]
    for name, length in (("Tq", Tq), ("Tk", Tk)):
        if length % n:
            raise ValueError(f"ring attention: {name}={length} is not a multiple of the {n} devices on mesh axis "
                             f"{axis!r}")
    n_batch, n_head = _axis_size(mesh, batch_axis, "batch_axis"), _axis_size(mesh, head_axis, "head_axis")
    if B % n_batch:
        raise ValueError(f"ring attention: batch {B} is not a multiple of the {n_batch} devices of batch_axis")
    if H % n_head or Hkv % n_head:
        raise ValueError(f"ring attention: heads H={H}, Hkv={Hkv} are not multiples of the {n_head} devices of "
                         "head_axis")
    block_q = chunked.effective_block("block_q", block_q, Tq // n)
    block_k = chunked.effective_block("block_k", block_k, Tk // n)
    try:
        scale = float(scale)
    except (TypeError, jax.errors.ConcretizationTypeError):
        raise ValueError(f"ring attention: scale must be a Python number (static); got {scale!r}") from None

    q_pos, kv_pos = mask.positions(B, Tq, Tk)
    ids = {"q_pos": q_pos, "kv_pos": kv_pos}
    if mask.q_segment_ids is not None:
        ids["q_seg"] = mask.q_segment_ids.astype(jnp.int32)
    if mask.kv_segment_ids is not None:
        ids["kv_seg"] = mask.kv_segment_ids.astype(jnp.int32)
    x_spec, id_spec = P(batch_axis, axis, head_axis, None), P(batch_axis, axis)
    out_spec = x_spec
    if return_stats:
        out_spec = (x_spec, {name: P(batch_axis, head_axis, axis) for name in _STAT_NAMES})
    local = functools.partial(
        _shard, scale=scale, causal=mask.causal, window=mask.window, axis=axis, size=n, block_q=block_q,
        block_k=block_k, return_stats=bool(return_stats),
    )
    result = jax.shard_map(local, mesh=mesh, in_specs=(x_spec, x_spec, x_spec, {name: id_spec for name in ids}),
                           out_specs=out_spec)(q, k, v, ids)
    if not return_stats:
        return result, None
    out, stats = result
    return out, jax.lax.stop_gradient(AttentionStats(**stats))


def _supports_mask(mask: Mask, dropout_rate: float) -> str:
    if dropout_rate > 0.0:
        return "dropout (use 'chunked' or 'reference')"
    return ("a dense mask (Mask.dense); the ring takes causal, window, segment ids and positions, which travel "
            "with their keys")


def _supports(request: Request) -> Optional[str]:
    if request.dropout or request.mask.dense is not None:
        return _supports_mask(request.mask, 0.5 if request.dropout else 0.0)
    return None


register_backend("ring", ring_attention, _supports)
