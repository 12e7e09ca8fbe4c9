"""Tests for the Pallas flash attention kernel (``attention.flash``, backend ``pallas``).

jax's tests/pallas pattern: one class per kernel body; its subclass with ``INTERPRET = True`` reruns the same
tests through the Pallas interpreter, which is what runs on CPU. The compiled classes run only on their
platform (``scripts/gpu_check_pallas.sh`` runs them on a GPU). The interpreted kernels are tiny but their XLA
compile dominates the runtime, so the jitted test functions compile at XLA optimization level 0.

Agreement: outputs, statistics and gradients against the float64 NumPy reference of ``attention_cases``,
within 2x the error of a plain implementation in the input dtype, over head dims 32/64/72/128, block shapes,
causal x segment ids, Tq != Tk, lengths that are not multiples of the block, GQA/MQA and Dv != D.
"""
from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention
from attention import Mask, flash
from attention_cases import (
    assert_2x,
    lengths_to_segments,
    np_attention,
    np_attention_grads,
    np_visible,
    packed_segments,
    random_qkv,
)

_FAST_COMPILE = {"xla_backend_optimization_level": 0}
_STATS = ("entropy", "max_logit", "lse", "sink", "logit_mean", "logit_std")


@dataclasses.dataclass(frozen=True)
class KernelCase:
    name: str
    mask: str
    D: int
    Tq: int
    Tk: int
    H: int = 4
    Hkv: int = 2
    Dv: int | None = None
    B: int = 2
    dtype: str = "float32"
    blocks: tuple = ()  # extra backend options as (name, value) pairs

    def inputs(self, seed: int = 0):
        rng = np.random.default_rng([seed, sum(map(ord, self.name))])
        dv = self.D if self.Dv is None else self.Dv
        q, k, v, d_out = random_qkv(rng, self.B, self.Tq, self.Tk, self.H, self.Hkv, self.D, dv, self.dtype)
        return q, k, v, d_out, _make_mask(self.mask, rng, self.B, self.Tq, self.Tk)


def _i32(x):
    return jnp.asarray(x, jnp.int32)


def _make_mask(kind: str, rng, B: int, Tq: int, Tk: int) -> Mask:
    if kind == "none":
        return Mask()
    if kind == "causal":
        return Mask(causal=True)
    if kind == "window":
        return Mask(window=(9, 4))
    if kind == "causal_packed":  # packing with trailing padding; positions follow the array index
        seg, _ = packed_segments(rng, B, Tq, num=3)
        return Mask(causal=True, q_segment_ids=_i32(seg), kv_segment_ids=_i32(seg))
    if kind == "cross_padding":  # encoder-decoder: separate query and key padding
        return Mask(q_segment_ids=_i32(lengths_to_segments([Tq - 5, Tq // 2][:B], Tq)),
                    kv_segment_ids=_i32(lengths_to_segments([Tk, Tk // 3][:B], Tk)))
    if kind == "packed_positions":  # packing with positions restarting per segment, causal + left window
        seg, pos = packed_segments(rng, B, Tq, num=2)
        return Mask(causal=True, window=(6, None), q_segment_ids=_i32(seg), kv_segment_ids=_i32(seg),
                    q_positions=_i32(pos), kv_positions=_i32(pos))
    if kind == "masked_rows":  # query padding, key padding, and a window that leaves the last rows empty
        return Mask(window=(3, 3), q_segment_ids=_i32(lengths_to_segments([Tq - 4, Tq][:B], Tq)),
                    kv_segment_ids=_i32(lengths_to_segments([Tk, Tk - 6][:B], Tk)))
    raise ValueError(f"unknown mask kind {kind!r}")


AGREEMENT_CASES = (
    KernelCase("d32_causal_packed_gqa", "causal_packed", D=32, Tq=48, Tk=48,
               blocks=(("block_q", 16), ("block_k", 16))),
    KernelCase("d64_cross_padding_mqa_dv40", "cross_padding", D=64, Dv=40, Tq=24, Tk=72, Hkv=1,
               blocks=(("block_q", 16), ("block_k", 32), ("block_q_bwd", 32), ("block_k_bwd", 16))),
    KernelCase("d72_window_t50", "window", D=72, Tq=50, Tk=50, H=2, Hkv=2,
               blocks=(("block_q", 16), ("block_k", 16))),
    # The statistics test: random inputs with partly and fully masked rows (query padding, key padding and
    # rows the window leaves empty).
    KernelCase("stats_masked_rows_tq40_tk24", "masked_rows", D=32, Tq=40, Tk=24, H=2, Hkv=1,
               blocks=(("block_q", 16), ("block_k", 16))),
    KernelCase("d128_bf16_causal_tq40_tk24", "causal", D=128, Tq=40, Tk=24, H=2, Hkv=1, dtype="bfloat16"),
    KernelCase("d32_f16_packed_positions_gqa", "packed_positions", D=32, Tq=40, Tk=40, dtype="float16",
               blocks=(("block_q", 16), ("block_k", 16))),
)
# The TPU body wants key blocks in multiples of 128 lanes; two cases cover its masks, GQA, padding and masked
# rows (cross_padding has fully masked padding queries and partly masked rows).
TPU_CASES = (
    KernelCase("tpu_d32_causal_packed_gqa", "causal_packed", D=32, Tq=40, Tk=40,
               blocks=(("block_q", 16), ("block_k", 128))),
    KernelCase("tpu_d72_cross_padding_mqa", "cross_padding", D=72, Dv=40, Tq=24, Tk=150, Hkv=1, B=2,
               blocks=(("block_q", 8), ("block_k", 128))),
)


def pytest_generate_tests(metafunc):
    """Each class names its agreement cases in ``CASES``."""
    if "case" in metafunc.fixturenames:
        cases = metafunc.cls.CASES
        metafunc.parametrize("case", cases, ids=[c.name for c in cases])


def _check(res, q, k, v, d_out, mask, scale, dtype):
    """2x rule for outputs, statistics and gradients; exact zeros and finite gradients on masked rows."""
    B, Tq, H, _ = q.shape
    visible = np_visible(mask, B, H, Tq, k.shape[1])
    ref, plain = np_attention(q, k, v, visible, scale), np_attention(q, k, v, visible, scale, precision=dtype)
    gref = np_attention_grads(q, k, v, visible, scale, d_out)
    gplain = np_attention_grads(q, k, v, visible, scale, d_out, precision=dtype)
    for key in ("out", "out_no_stats"):
        assert res[key].dtype == jnp.dtype(dtype)
        assert_2x(key, res[key], ref["out"], plain["out"])
    for key in ("dq", "dk", "dv"):
        assert res[key].dtype == jnp.dtype(dtype)
        assert_2x(key, res[key], gref[key], gplain[key])
    stats = res["stats"]
    np.testing.assert_array_equal(stats.valid, ref["valid"], err_msg="stats.valid")
    for field in _STATS:
        assert getattr(stats, field).dtype == np.float32
        assert_2x(f"stats.{field}", getattr(stats, field), ref[field], plain[field])
    invalid = ~ref["valid"]
    rows = invalid.transpose(0, 2, 1)
    for key in ("dq", "dk", "dv"):
        assert np.all(np.isfinite(res[key])), f"{key} not finite"
    assert np.all(res["out"][rows] == 0) and np.all(res["out_no_stats"][rows] == 0), "masked rows not zero"
    assert np.all(res["dq"][rows] == 0), "masked rows got a query gradient"
    for field in _STATS:
        assert np.all(getattr(stats, field)[invalid] == 0), f"stats.{field} not zero on masked rows"


class TestFlashKernel:
    """The GPU (Triton) kernel body, compiled; runs on a GPU only."""

    INTERPRET = False
    KERNEL = "gpu"
    PLATFORM = "gpu"
    CASES = AGREEMENT_CASES
    SKIP_BLOCK = 16  # query and key block of the skipping test

    @pytest.fixture(autouse=True)
    def _platform(self):
        if not self.INTERPRET and jax.default_backend() != self.PLATFORM:
            pytest.skip(f"compiled {self.KERNEL} kernel needs a {self.PLATFORM}; the interpreted class covers CPU")

    def _options(self, extra=()) -> dict:
        return dict(extra, interpret=self.INTERPRET, kernel=self.KERNEL)

    def _forward_backward(self, scale: float, options: dict):
        """jit: (q, k, v, d_out, mask) -> out with and without stats, stats, and gradients of sum(out*d_out)."""

        def run(q, k, v, d_out, mask):
            def f(q, k, v):
                return flash.flash_attention(q, k, v, mask, scale=scale, return_stats=True, **options)

            out, vjp, stats = jax.vjp(f, q, k, v, has_aux=True)
            dq, dk, dv = vjp(d_out)
            out_no_stats, none = flash.flash_attention(q, k, v, mask, scale=scale, **options)
            assert none is None
            return {"out": out, "out_no_stats": out_no_stats, "stats": stats, "dq": dq, "dk": dk, "dv": dv}

        return jax.jit(run, compiler_options=_FAST_COMPILE)

    def test_agrees_with_float64_reference(self, case: KernelCase):
        q, k, v, d_out, mask = case.inputs()
        if case.mask in ("masked_rows", "cross_padding"):
            counts = np_visible(mask, case.B, case.H, case.Tq, case.Tk).sum(-1)
            assert np.any(counts == 0) and np.any((counts > 0) & (counts < case.Tk)), "case lacks masked rows"
        scale = 1.0 / math.sqrt(case.D)
        fn = self._forward_backward(scale, self._options(case.blocks))
        res = jax.tree.map(np.asarray, fn(*(jnp.asarray(x) for x in (q, k, v, d_out)), mask))
        _check(res, q, k, v, d_out, mask, scale, case.dtype)

    def test_masked_blocks_are_skipped(self):
        """NaN planted in blocks that are fully masked for some query / key blocks must not reach them.

        A computed block multiplies its values by zero probabilities, and 0 * NaN = NaN; a skipped block
        leaves the rows finite. With blocks of b, T = 4b, causal, a left window of b/2 and two segments
        (halves), query block r can see key blocks [r - 1, r] by causal/window (loop bounds) and no key block
        of the other segment (per-block check). Checks the forward, dq and dk/dv kernels.
        """
        b = self.SKIP_BLOCK
        T, B, H, D = 4 * b, 1, 2, 32
        rng = np.random.default_rng(3)
        q, k, v, d_out = (jnp.asarray(x) for x in random_qkv(rng, B, T, T, H, 1, D, D, "float32"))
        seg = _i32(np.repeat([1, 2], T // 2)[None])
        mask = Mask(causal=True, window=(b // 2, None), q_segment_ids=seg, kv_segment_ids=seg)
        fn = self._forward_backward(1.0 / math.sqrt(D), self._options((("block_q", b), ("block_k", b))))
        block = lambda i: slice(i * b, (i + 1) * b)  # noqa: E731

        # NaN values in key block 1: query block 0 (causal bound), 2 (segment check), 3 (window bound) skip it.
        res = fn(q, k, v.at[:, block(1)].set(jnp.nan), d_out, mask)
        for r in (0, 2, 3):
            assert np.all(np.isfinite(res["out"][:, block(r)])), f"forward: query block {r} computed key block 1"
            assert np.all(np.isfinite(res["dq"][:, block(r)])), f"dq: query block {r} computed key block 1"
        assert not np.all(np.isfinite(res["out"][:, block(1)])), "query block 1 must see the NaN: test is vacuous"

        # NaN queries in blocks 0 and 2: key block 1 skips query block 2 (segment check) and key block 3 skips
        # both (causal bound; query block 0 is also outside the window).
        res = fn(q.at[:, block(0)].set(jnp.nan).at[:, block(2)].set(jnp.nan), k, v, d_out, mask)
        for c in (1, 3):
            for key in ("dk", "dv"):
                assert np.all(np.isfinite(res[key][:, block(c)])), f"{key}: key block {c} computed a NaN query block"
        assert not np.all(np.isfinite(res["dk"][:, block(2)])), "key block 2 must see the NaN: test is vacuous"


class TestFlashKernelInterpret(TestFlashKernel):
    INTERPRET = True


class TestTpuKernel(TestFlashKernel):
    """The TPU (Mosaic) kernel body, compiled; runs on a TPU only."""

    KERNEL = "tpu"
    PLATFORM = "tpu"
    CASES = TPU_CASES
    SKIP_BLOCK = 128


class TestTpuKernelInterpret(TestTpuKernel):
    INTERPRET = True


# ------------------------------------------------------------------------------------- the registered backend
def _small(dtype=jnp.float32, B=1, T=8, H=2, D=16):
    rng = np.random.default_rng(0)
    return tuple(jnp.asarray(x) for x in random_qkv(rng, B, T, T, H, H, D, D, dtype)[:3])


def test_registered_and_takes_backend_options():
    """Registration and option plumbing through ``attention.attention`` (traced only; the classes run it)."""
    assert "pallas" in attention.available_backends()
    q, k, v = _small()
    out = jax.eval_shape(lambda q, k, v: attention.attention(
        q, k, v, Mask(causal=True), implementation="pallas", return_stats=True,
        backend_options={"block_q": 16, "block_k": 16, "num_warps": 4}), q, k, v)
    assert out[0].shape == q.shape and out[1].entropy.shape == (1, 2, 8)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(dropout_rate=0.1, dropout_rng=jax.random.key(0)), "'pallas' does not support dropout"),
        (dict(mask=Mask(dense=jnp.ones((8, 8), bool))), "'pallas' does not support a dense mask"),
        (dict(backend_options={"block_q": 24}), "block_q=24 must be a power of two"),
        (dict(backend_options={"block_k": 100, "kernel": "tpu"}), "block_k=100 must be a multiple of 128"),
        (dict(backend_options={"blockq": 16}), "unknown backend option(s) ['blockq']"),
        (dict(backend_options={"kernel": "cuda"}), "kernel='cuda'"),
    ],
)
def test_rejects_with_clear_message(kwargs, message):
    q, k, v = _small()
    kwargs = dict(kwargs)
    mask = kwargs.pop("mask", None)
    with pytest.raises(ValueError) as err:
        attention.attention(q, k, v, mask, implementation="pallas", **kwargs)
    assert message in str(err.value)

