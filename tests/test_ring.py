"""The ``ring`` backend (context parallelism) on the 8 simulated CPU devices.

Outputs, gradients and every statistic against the float64 NumPy oracle of ``attention_cases`` (the 2x rule
the other backends meet) and against the ``reference`` backend, for causal masks in the zig-zag layout,
packed segments with positions, windows, padding, GQA/MQA and Tq != Tk, with the sequence sharded over 2, 4
and 8 devices; plus the layout helpers, the load balance the zig-zag layout buys, and the error messages.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

import attention
from attention import Mask, ring
from attention_cases import (
    assert_2x,
    check_grads,
    check_stats,
    lengths_to_segments,
    np_attention,
    np_attention_grads,
    np_visible,
    packed_segments,
    random_qkv,
    run_backend,
)


def _mesh(n: int, data: int = 1) -> Mesh:
    devices = np.array(jax.devices()[: n * data]).reshape(data, n)
    return Mesh(devices, ("data", "context"))


@dataclasses.dataclass(frozen=True)
class RingCase:
    name: str
    devices: int
    mask: str
    T: int
    Tk: Optional[int] = None
    B: int = 2
    H: int = 4
    Hkv: int = 2
    D: int = 16
    zigzag: bool = False
    data: int = 1  # devices of a data-parallel batch axis next to the ring
    ambient: bool = False  # take the mesh from jax.set_mesh instead of backend_options

    @property
    def kv_len(self) -> int:
        return self.T if self.Tk is None else self.Tk

    def inputs(self):
        rng = np.random.default_rng(sum(map(ord, self.name)))
        B, Tq, Tk = self.B, self.T, self.kv_len
        q, k, v, d_out = random_qkv(rng, B, Tq, Tk, self.H, self.Hkv, self.D, self.D, np.float32)
        i32 = lambda x: jnp.asarray(x, jnp.int32)  # noqa: E731
        if self.mask == "causal":
            mask = Mask(causal=True)
        elif self.mask == "packed_causal":  # packing, positions restarting per segment, trailing padding
            seg, pos = packed_segments(rng, B, Tq, num=3)
            mask = Mask(causal=True, q_segment_ids=i32(seg), kv_segment_ids=i32(seg), q_positions=i32(pos),
                        kv_positions=i32(pos))
        elif self.mask == "window_kv_padding":
            mask = Mask(window=(5, 2), kv_segment_ids=i32(lengths_to_segments([Tk - 7, Tk][:B], Tk)))
        elif self.mask == "causal_window_padding":  # left window, query and key padding (some rows empty)
            mask = Mask(causal=True, window=(9, None),
                        q_segment_ids=i32(lengths_to_segments([Tq, Tq - 10][:B], Tq)),
                        kv_segment_ids=i32(lengths_to_segments([Tk - 5, Tk][:B], Tk)))
        elif self.mask == "cross_padding":
            mask = Mask(q_segment_ids=i32(lengths_to_segments([Tq - 3, Tq // 2][:B], Tq)),
                        kv_segment_ids=i32(lengths_to_segments([Tk // 3, Tk][:B], Tk)))
        else:
            raise ValueError(self.mask)
        return q, k, v, d_out, mask


CASES = (
    RingCase("causal_zigzag_8dev_gqa2", devices=8, mask="causal", T=64, zigzag=True),
    RingCase("packed_causal_4dev_mqa", devices=4, mask="packed_causal", T=48, Hkv=1),
    RingCase("window_kv_padding_2dev_ambient", devices=2, mask="window_kv_padding", T=40, ambient=True),
    RingCase("causal_window_padding_zigzag_4dev_data2", devices=4, mask="causal_window_padding", T=64,
             zigzag=True, data=2),
    RingCase("cross_padding_tq16_tk32_4dev_gqa4", devices=4, mask="cross_padding", T=16, Tk=32, H=8),
)
BLOCKS = {"block_q": 4, "block_k": 4}  # several tiles per device, so the chunked loops and skips run too


def _ring_options(case: RingCase, mesh: Mesh) -> tuple:
    options = dict(BLOCKS, axis="context")
    if not case.ambient:
        options["mesh"] = mesh
    if case.data > 1:
        options["batch_axis"] = "data"
    return tuple(sorted(options.items()))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_ring_agrees_with_float64_oracle_and_reference(case: RingCase):
    q, k, v, d_out, mask = case.inputs()
    B, Tq, H, D = q.shape
    Tk = k.shape[1]
    n = case.devices
    mesh = _mesh(n, case.data)
    ring_mask, xs = mask, [q, k, v, d_out]
    if case.zigzag:
        ring_mask = ring.zigzag_mask(mask, B, Tq, Tk, n)
        xs = [ring.to_zigzag(jnp.asarray(x), n) for x in xs]
    call = lambda: run_backend(*(jnp.asarray(x) for x in xs[:3]), ring_mask, jnp.asarray(xs[3]),  # noqa: E731
                               implementation="ring", scale=None, options=_ring_options(case, mesh),
                               grad_with_stats=True)
    if case.ambient:
        with jax.set_mesh(mesh):
            res = call()
    else:
        res = call()
    res = jax.tree.map(np.asarray, res)
    if case.zigzag:
        back = lambda x, axis=1: np.asarray(ring.from_zigzag(jnp.asarray(x), n, axis))  # noqa: E731
        res = {key: back(x) for key, x in res.items() if key != "stats"} | {
            "stats": jax.tree.map(lambda x: back(x, 2), res["stats"])}

    scale = 1.0 / math.sqrt(D)
    visible = np_visible(mask, B, H, Tq, Tk)
    ref, plain = np_attention(q, k, v, visible, scale), np_attention(q, k, v, visible, scale, precision=np.float32)
    for key in ("out", "out_stats"):
        assert_2x(key, res[key], ref["out"], plain["out"])
    check_grads(res, np_attention_grads(q, k, v, visible, scale, d_out),
                np_attention_grads(q, k, v, visible, scale, d_out, precision=np.float32), np.float32)
    check_stats(res["stats"], ref, plain)
    invalid = ~ref["valid"]
    assert np.all(res["out"][invalid.transpose(0, 2, 1)] == 0), "rows with no visible key are not zero"

    want = jax.tree.map(np.asarray, run_backend(*(jnp.asarray(x) for x in (q, k, v)), mask, jnp.asarray(d_out),
                                                implementation="reference", scale=None, grad_with_stats=True))
    for key in ("out", "dq", "dk", "dv"):
        np.testing.assert_allclose(res[key], want[key], atol=2e-5, rtol=1e-4, err_msg=key)
    for field in ("entropy", "lse", "sink", "logit_mean", "logit_std"):
        np.testing.assert_allclose(getattr(res["stats"], field), getattr(want["stats"], field), atol=2e-5,
                                   rtol=1e-4, err_msg=field)


def test_inputs_stay_sharded_over_the_ring():
    """The output comes back sharded along the sequence over the context axis, like the inputs."""
    mesh = _mesh(4)
    q, k, v, _ = (jnp.asarray(x) for x in random_qkv(np.random.default_rng(0), 1, 32, 32, 2, 2, 8, 8, np.float32))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(None, "context"))
    q, k, v = (jax.device_put(x, sharding) for x in (q, k, v))
    out = jax.jit(lambda q, k, v: attention.attention(
        q, k, v, Mask(causal=True), implementation="ring", backend_options={"mesh": mesh, **BLOCKS}))(q, k, v)
    assert out.sharding.spec[1] == "context"
    assert {s.data.shape[1] for s in out.addressable_shards} == {8}


def test_without_a_mesh_the_ring_is_chunked():
    q, k, v, _ = (jnp.asarray(x) for x in random_qkv(np.random.default_rng(1), 1, 12, 12, 2, 1, 8, 8, np.float32))
    mask = Mask(causal=True)

    def call(q, k, v):
        return attention.attention(q, k, v, mask, implementation="ring", backend_options=BLOCKS)

    want = attention.attention(q, k, v, mask, implementation="chunked", backend_options=BLOCKS)
    np.testing.assert_array_equal(call(q, k, v), want)
    assert "ppermute" not in str(jax.make_jaxpr(call)(q, k, v))
    with jax.set_mesh(_mesh(2)):  # the ambient mesh has the context axis: a ring of 2
        assert "ppermute" in str(jax.make_jaxpr(call)(q, k, v))
    with jax.set_mesh(Mesh(np.array(jax.devices()[:2]), ("data",))):  # no context axis: one device
        assert "ppermute" not in str(jax.make_jaxpr(call)(q, k, v))


# ----------------------------------------------------------------------------------------------- layout
def test_zigzag_layout_and_round_trip():
    idx = ring.zigzag_indices(16, 4)  # 8 chunks of 2: device r holds chunks r and 7 - r
    np.testing.assert_array_equal(idx.reshape(4, 4), [[0, 1, 14, 15], [2, 3, 12, 13], [4, 5, 10, 11], [6, 7, 8, 9]])
    x = jnp.arange(2 * 16 * 3).reshape(2, 16, 3)
    np.testing.assert_array_equal(ring.from_zigzag(ring.to_zigzag(x, 4), 4), x)
    seg = jnp.asarray(lengths_to_segments([16, 9], 16))
    m = ring.zigzag_mask(Mask(causal=True, kv_segment_ids=seg), 2, 16, 16, 4)
    np.testing.assert_array_equal(m.q_positions[0], idx)
    np.testing.assert_array_equal(m.kv_segment_ids, seg[:, idx])
    assert m.causal and m.q_segment_ids is None
    with pytest.raises(ValueError, match=r"sequence length 12 must be a multiple of 2 x 4 devices"):
        ring.zigzag_indices(12, 4)


def _causal_work(layout: np.ndarray, n: int) -> np.ndarray:
    """Visible (query, key) pairs per (device, ring step) for a causal mask: [n, n]."""
    pos = layout.reshape(n, -1)
    work = np.zeros((n, n), int)
    for r in range(n):
        for t in range(n):
            src = (r - t) % n
            work[r, t] = (pos[src][None, :] <= pos[r][:, None]).sum()
    return work


def test_zigzag_balances_causal_work_per_ring_step():
    """Natural order: in the busiest step one device has a full block of work while another has none; zig-zag:
    every device does the same work in every step after the first."""
    n, T = 8, 256
    natural = _causal_work(np.arange(T), n)
    zigzag = _causal_work(ring.zigzag_indices(T, n), n)
    assert natural.sum() == zigzag.sum() == T * (T + 1) // 2
    assert natural[:, 1:].min() == 0 and natural[:, 1:].max() == (T // n) ** 2
    assert np.ptp(zigzag[:, 1:], axis=0).max() == 0  # every step: equal work on every device
    assert zigzag.max(axis=0).sum() < 0.6 * natural.max(axis=0).sum()  # the lockstep ring's critical path


# ----------------------------------------------------------------------------------------------- errors
def _small(T=12):
    return tuple(jnp.asarray(x) for x in random_qkv(np.random.default_rng(2), 1, T, T, 2, 2, 8, 8, np.float32)[:3])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(backend_options={"mesh": _mesh(8)}), "Tq=12 is not a multiple of the 8 devices on mesh axis 'context'"),
        (dict(backend_options={"mesh": _mesh(2), "axis": "seq"}), "the sequence axis 'seq' is not one of them"),
        (dict(backend_options={"mesh": _mesh(2), "head_axis": "model"}), "head_axis='model' is not a mesh axis"),
        (dict(backend_options={"mesh": "mesh"}), "mesh must be a jax.sharding.Mesh; got str"),
        (dict(mask=Mask(dense=jnp.ones((12, 12), bool))), "implementation 'ring' does not support a dense mask"),
        (dict(dropout_rate=0.1, dropout_rng=jax.random.key(0)), "implementation 'ring' does not support dropout"),
    ],
)
def test_rejects_with_clear_message(kwargs, message):
    q, k, v = _small()
    kwargs = dict(kwargs)
    with pytest.raises(ValueError) as err:
        attention.attention(q, k, v, kwargs.pop("mask", None), implementation="ring", **kwargs)
    assert message in str(err.value)
