"""Tests specific to the ``chunked`` backend: block geometry, block skipping, memory, dropout, online stats.

The cross-backend agreement suite (tests/test_attention.py) covers chunked as well; these tests check what
only a blockwise implementation can get wrong. Exact comparisons run in float64 against a dense jnp
implementation written here from the documented semantics (``Mask.materialize``).
"""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention
from attention import Mask, chunked, online


@pytest.fixture
def x64():
    with jax.enable_x64(True):
        yield


def dense_attention(q, k, v, visible, scale, keep=None, rate=0.0):
    """Float64-friendly dense attention: q [B,Tq,H,D], k/v [B,Tk,Hkv,*], visible/keep [B,H|1,Tq,Tk] -> out."""
    G = q.shape[2] // k.shape[2]
    k, v = jnp.repeat(k, G, axis=2), jnp.repeat(v, G, axis=2)
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) * scale
    s = jnp.where(visible, s, -jnp.inf)
    m = jnp.max(s, axis=-1, keepdims=True)
    e = jnp.where(visible, jnp.exp(s - jnp.where(jnp.isfinite(m), m, 0.0)), 0.0)
    l = jnp.sum(e, axis=-1, keepdims=True)
    p = e / jnp.where(l > 0, l, 1.0)
    if keep is not None:
        p = jnp.where(keep, p / (1.0 - rate), 0.0)
    return jnp.einsum("bhqk,bkhd->bqhd", p, v)


def random_inputs(seed, B, Tq, Tk, H, Hkv, D, Dv, dtype=np.float64):
    rng = np.random.default_rng(seed)
    shapes = ((B, Tq, H, D), (B, Tk, Hkv, D), (B, Tk, Hkv, Dv), (B, Tq, H, Dv))
    return tuple(jnp.asarray(rng.normal(size=s).astype(dtype)) for s in shapes)


@functools.partial(jax.jit, static_argnames=("scale", "block_q", "block_k"))
def chunked_vjp(q, k, v, d_out, mask, scale, block_q, block_k):
    options = dict(block_q=block_q, block_k=block_k)

    def f(q, k, v):
        return attention.attention(q, k, v, mask, implementation="chunked", scale=scale, backend_options=options)

    out, vjp = jax.vjp(f, q, k, v)
    return (out,) + vjp(d_out)


@functools.partial(jax.jit, static_argnames=("scale", "rate"))
def dense_vjp(q, k, v, d_out, mask, scale, keep=None, rate=0.0):
    B, Tq, H, _ = q.shape
    visible = mask.materialize(B, H, Tq, k.shape[1])
    out, vjp = jax.vjp(lambda q, k, v: dense_attention(q, k, v, visible, scale, keep, rate), q, k, v)
    return (out,) + vjp(d_out)


def assert_close(got, want, atol):
    for name, g, w in zip(("out", "dq", "dk", "dv"), got, want):
        assert np.all(np.isfinite(np.asarray(g))), f"{name} not finite"
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=atol, rtol=0, err_msg=name)


def packed_mask(B, T, causal=True):
    """Two packed examples per row plus trailing padding, with per-example positions."""
    seg = np.zeros((B, T), np.int32)
    pos = np.zeros((B, T), np.int32)
    first, second = T // 3, T - T // 3 - 3
    seg[:, :first], seg[:, first:second] = 1, 2
    pos[:, :first], pos[:, first:second] = np.arange(first), np.arange(second - first)
    seg, pos = jnp.asarray(seg), jnp.asarray(pos)
    return Mask(causal=causal, q_segment_ids=seg, kv_segment_ids=seg, q_positions=pos, kv_positions=pos)


# ----------------------------------------------------------------------------------- block geometry
@pytest.mark.parametrize(
    "Tq,Tk,bq,bk,mask_kind",
    [
        (37, 53, 16, 8, "none"),  # lengths not multiples of the blocks, Tq != Tk
        (37, 53, 64, 128, "causal"),  # blocks larger than the sequences
        (53, 53, 16, 16, "window"),  # causal + left window: static skipping on both sides
        (40, 40, 8, 16, "packed"),  # segment ids + positions: run-time skipping, padding rows
        (24, 31, 8, 8, "dense"),  # dense mask sliced per tile, composed with a right-only window
    ],
)
def test_block_sizes_match_dense_float64(x64, Tq, Tk, bq, bk, mask_kind):
    B, H, Hkv, D, Dv = 2, 4, 2, 8, 5
    q, k, v, d_out = random_inputs(1, B, Tq, Tk, H, Hkv, D, Dv)
    if mask_kind == "none":
        mask = Mask()
    elif mask_kind == "causal":
        mask = Mask(causal=True)
    elif mask_kind == "window":
        mask = Mask(causal=True, window=(5, None))
    elif mask_kind == "packed":
        mask = packed_mask(B, Tq)
    else:
        dense = jnp.asarray(np.random.default_rng(2).random((B, H, Tq, Tk)) > 0.4)
        mask = Mask(dense=dense, window=(None, 3))
    got = chunked_vjp(q, k, v, d_out, mask, 0.7, block_q=bq, block_k=bk)
    assert got[0].dtype == jnp.float64
    assert_close(got, dense_vjp(q, k, v, d_out, mask, 0.7), atol=1e-12)


def test_invalid_block_sizes_raise():
    q = jnp.ones((1, 4, 1, 8), jnp.float32)
    for options in ({"block_q": 0}, {"block_k": -3}, {"block_q": 2.5}, {"block_k": True}):
        with pytest.raises(ValueError, match="chunked attention: block_"):
            attention.attention(q, q, q, implementation="chunked", backend_options=options)


def test_scale_must_be_static():
    q = jnp.ones((1, 4, 1, 8), jnp.float32)
    f = jax.jit(lambda s: attention.attention(q, q, q, implementation="chunked", scale=s))
    with pytest.raises(ValueError, match="scale must be a Python number"):
        f(0.5)


# ----------------------------------------------------------------------------------- block skipping
@pytest.mark.parametrize(
    "Tq,Tk,bq,bk,causal,window",
    [(100, 100, 16, 16, True, None), (37, 90, 8, 16, True, (20, None)), (64, 48, 16, 8, False, (3, 5)),
     (50, 50, 16, 16, False, (None, 0)), (30, 80, 8, 8, True, (4, 2))],
)
def test_block_ranges_are_exactly_the_tiles_with_a_visible_entry(Tq, Tk, bq, bk, causal, window):
    visible = np.asarray(Mask(causal=causal, window=window).materialize(1, 1, Tq, Tk))[0, 0]
    nq, nk = -(-Tq // bq), -(-Tk // bk)
    padded = np.zeros((nq * bq, nk * bk), bool)
    padded[:Tq, :Tk] = visible
    expected = padded.reshape(nq, bq, nk, bk).any(axis=(1, 3))
    left, right = window if window is not None else (None, None)
    live = online.live_tiles(Tq, Tk, bq, bk, causal=causal, window_left=left, window_right=right)
    np.testing.assert_array_equal(live, expected)
    assert not live.all(), "the case should skip some tiles"
    by_key = np.zeros_like(live)  # the backward pass walks the query blocks of each key block
    for j in range(nk):
        lo, hi = online.q_block_range(j, block_q=bq, block_k=bk, kv_len=Tk, num_q_blocks=nq, causal=causal,
                                      window_left=left, window_right=right)
        by_key[max(lo, 0):max(hi, 0), j] = True
    np.testing.assert_array_equal(by_key, expected)


def test_skipping_gives_identical_results(x64):
    """Static skipping (default positions), run-time skipping (explicit positions) and one tile agree."""
    B, T, H, D = 1, 96, 2, 8
    q, k, v, d_out = random_inputs(3, B, T, T, H, H, D, D)
    static = Mask(causal=True, window=(20, None))
    pos = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    runtime = static.replace(q_positions=pos, kv_positions=pos)
    blocks = dict(block_q=16, block_k=16)
    a = chunked_vjp(q, k, v, d_out, static, 0.5, **blocks)
    b = chunked_vjp(q, k, v, d_out, runtime, 0.5, **blocks)
    for x, y in zip(a, b):  # a skipped tile contributes exactly nothing, so these are bit-identical
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert_close(a, chunked_vjp(q, k, v, d_out, static, 0.5, block_q=T, block_k=T), atol=1e-12)


# ----------------------------------------------------------------------------------- memory
def test_memory_is_linear_in_sequence_length():
    """Compiled forward+backward temp memory grows ~4x from 1k to 4k tokens (xla, for contrast, ~16x)."""

    def temp_bytes(impl, T, **options):
        spec = jax.ShapeDtypeStruct((1, T, 2, 16), jnp.float32)

        def loss(q, k, v):
            out = attention.attention(q, k, v, Mask(causal=True), implementation=impl, backend_options=options)
            return jnp.sum(out)

        compiled = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(spec, spec, spec).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    small, large = temp_bytes("chunked", 1024, block_q=64, block_k=64), temp_bytes("chunked", 4096, block_q=64, block_k=64)
    assert large / small < 4.5, f"chunked temp memory 1k -> 4k grew {large / small:.1f}x"
    assert large < 8 * 4096 * 2 * 16 * 4 * 4, f"chunked temp memory {large} bytes is not O(T * H * D)"
    xla_small, xla_large = temp_bytes("xla", 1024), temp_bytes("xla", 4096)
    assert xla_large / xla_small > 8, "the memory measurement does not see quadratic growth"


# ----------------------------------------------------------------------------------- dropout
def test_dropout_equals_dense_with_the_same_keep_mask(x64):
    B, Tq, Tk, H, Hkv, D = 2, 21, 27, 4, 2, 8
    q, k, v, d_out = random_inputs(4, B, Tq, Tk, H, Hkv, D, D)
    mask = Mask.from_lengths(jnp.array([21, 15]), jnp.array([27, 20]), Tq, Tk, causal=True)
    # rbg keys: on this XLA CPU, compiling the default (partitionable threefry) PRNG takes ~10 s per program.
    rng, rate, blocks = jax.random.key(7, impl="rbg"), 0.3, dict(block_q=8, block_k=16)

    @jax.jit
    def f(q, k, v, d_out, key):
        out, vjp = jax.vjp(lambda q, k, v: attention.attention(
            q, k, v, mask, implementation="chunked", scale=0.4, dropout_rate=rate, dropout_rng=key,
            backend_options=blocks), q, k, v)
        return (out,) + vjp(d_out)

    got = f(q, k, v, d_out, rng)
    keep = jax.jit(functools.partial(chunked.dropout_keep_mask, dropout_rate=rate, batch=B, num_heads=H,
                                     num_kv_heads=Hkv, q_len=Tq, kv_len=Tk, **blocks))(rng)
    assert keep.shape == (B, H, Tq, Tk) and 0.5 < float(jnp.mean(keep)) < 0.9
    assert_close(got, dense_vjp(q, k, v, d_out, mask, 0.4, keep, rate), atol=1e-12)
    np.testing.assert_array_equal(np.asarray(f(q, k, v, d_out, rng)[0]), np.asarray(got[0]))
    assert not np.allclose(np.asarray(f(q, k, v, d_out, jax.random.key(8, impl="rbg"))[0]), np.asarray(got[0]))


def test_dropout_keep_rate_and_tiles_differ():
    keep = np.asarray(chunked.dropout_keep_mask(jax.random.key(0, impl="rbg"), 0.25, batch=2, num_heads=4, num_kv_heads=4,
                                                q_len=64, kv_len=64, block_q=16, block_k=16))
    n = keep.size
    assert abs(keep.mean() - 0.75) < 4 * math.sqrt(0.75 * 0.25 / n)
    tiles = keep.reshape(2, 4, 4, 16, 4, 16).transpose(2, 4, 0, 1, 3, 5).reshape(16, -1)
    assert len({t.tobytes() for t in tiles}) == 16, "two tiles drew the same dropout mask"


# ----------------------------------------------------------------------------------- online statistics
def test_online_stats_match_reference_with_large_logits_and_empty_rows():
    B, Tq, Tk, H, Hkv, D = 2, 40, 50, 4, 2, 16
    q, k, v, _ = random_inputs(5, B, Tq, Tk, H, Hkv, D, D, np.float32)
    q = q * 4.0  # logits in the tens: the rescaling of the accumulators matters
    mask = Mask.from_lengths(jnp.array([40, 30]), jnp.array([50, 0]), Tq, Tk, causal=True, window=(None, 7))
    chunked_stats = jax.jit(functools.partial(attention.attention, implementation="chunked", return_stats=True,
                                              backend_options=dict(block_q=8, block_k=8)))
    _, got = chunked_stats(q, k, v, mask)
    _, want = jax.jit(functools.partial(attention.attention, implementation="reference", return_stats=True))(q, k, v, mask)
    np.testing.assert_array_equal(np.asarray(got.valid), np.asarray(want.valid))
    assert not np.asarray(got.valid)[1].any() and np.asarray(got.valid)[0].all()
    for field in ("entropy", "max_logit", "lse", "sink"):
        g, w = np.asarray(getattr(got, field)), np.asarray(getattr(want, field))
        assert g.dtype == np.float32 and g.shape == (B, H, Tq)
        np.testing.assert_allclose(g, w, atol=2e-5 * max(1.0, np.abs(w).max()), rtol=0, err_msg=field)
        assert np.all(g[~np.asarray(got.valid)] == 0)
    assert np.asarray(got.entropy).max() > 0.1 and np.asarray(got.entropy).min() >= 0


def test_low_precision_inputs_accumulate_in_float32():
    B, T, H, D = 1, 70, 2, 32
    q, k, v, _ = random_inputs(6, B, T, T, H, H, D, D, np.float32)
    run = jax.jit(functools.partial(attention.attention, mask=Mask(causal=True), implementation="chunked",
                                    backend_options=dict(block_q=16, block_k=16)))
    want = run(q, k, v)
    for dtype, tol in ((jnp.bfloat16, 3e-2), (jnp.float16, 4e-3)):
        got = run(q.astype(dtype), k.astype(dtype), v.astype(dtype))
        assert got.dtype == dtype
        np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want), atol=tol, rtol=0)


def test_batch_sharded_inputs_under_an_explicit_mesh():
    """Batch-sharded q/k/v (8 simulated devices, explicit axis types) give the unsharded result, sharded."""
    B, T, H, D = 8, 24, 2, 8
    q, k, v, _ = random_inputs(7, B, T, T, H, 1, D, D, np.float32)
    seg = jnp.ones((B, T), jnp.int32).at[:, 20:].set(0)
    loss = jax.jit(jax.value_and_grad(lambda q, k, v, seg: jnp.sum(attention.attention(
        q, k, v, Mask(causal=True, q_segment_ids=seg, kv_segment_ids=seg), implementation="chunked",
        backend_options=dict(block_q=8, block_k=8)) ** 2), argnums=(0, 1, 2)))
    want = loss(q, k, v, seg)
    mesh = jax.make_mesh((len(jax.devices()),), ("data",))
    shard = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    got = loss(*(jax.device_put(x, shard) for x in (q, k, v, seg)))
    assert got[1][0].sharding.spec[0] == "data"
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=1e-5, rtol=1e-5)
