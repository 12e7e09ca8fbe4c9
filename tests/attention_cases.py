"""Shared helpers for attention tests: a float64 NumPy reference, the 2x tolerance rule and the case list.

Everything here is independent of ``attention/reference.py``: masks are rebuilt from their documented
semantics and the forward/backward passes are written in NumPy.

- ``np_visible(mask, B, H, Tq, Tk)``: the boolean visibility [B, H, Tq, Tk] a ``Mask`` stands for.
- ``np_attention(q, k, v, visible, scale, precision)``: outputs and statistics; ``np_attention_grads``: the
  gradients wrt q, k, v for a given output cotangent. ``precision=float64`` is the reference; ``float32``,
  ``bfloat16`` and ``float16`` are the "plain implementation" in that dtype (products accumulated in float32,
  every stored intermediate rounded to the dtype, float32 softmax) whose error sets the tolerance.
- ``assert_2x(name, got, ref, plain)``: the tolerance rule: ``|got - ref|_max <= 2 |plain - ref|_max + floor``;
  ``check_grads`` / ``check_stats`` apply it to gradients and ``AttentionStats``.
- ``CASES`` / ``backend_case_params()``: the agreement cases, with a reduced (``core``) list for slow backends.
- ``run_backend``: one jitted call giving a backend's outputs, statistics and gradients; ``fast_jit``: ``jax.jit``
  with XLA:CPU's slow backend passes off (tests spend most of their time compiling).
- ``cpu_backends()`` / ``unsupported_reason``: which backends to test, and why one turns a call down.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention
from attention import Mask

GPU_ONLY_BACKENDS = frozenset({"cudnn"})
# Backends that need a device mesh and sequence lengths divisible by it: tests/test_ring.py runs them against
# the same oracle on cases of their own.
MESH_BACKENDS = frozenset({"ring"})
# Backends too slow on CPU for every case (Pallas runs in interpret mode): they get the ``core`` cases only.
SLOW_BACKENDS = frozenset({"pallas"})
# Absolute error floor, in float32 epsilons of max(1, magnitude of the quantity); see ``assert_2x``.
FLOOR_ULPS = 8.0

STAT_FIELDS = ("entropy", "max_logit", "lse", "sink", "logit_mean", "logit_std")


def cpu_backends() -> list[str]:
    """Every registered backend that runs on CPU without a mesh (``chunked`` and ``pallas`` join once registered)."""
    return [name for name in attention.available_backends() if name not in GPU_ONLY_BACKENDS | MESH_BACKENDS]


# ------------------------------------------------------------------------------------------ NumPy reference
def np_visible(mask: Optional[Mask], B: int, H: int, Tq: int, Tk: int) -> np.ndarray:
    """bool [B, H, Tq, Tk] from the documented semantics of each ``Mask`` field (composed by AND)."""
    vis = np.ones((B, 1, Tq, Tk), dtype=bool)
    if mask is None:
        return np.broadcast_to(vis, (B, H, Tq, Tk))
    q_pos = np.broadcast_to(np.arange(Tq), (B, Tq)) if mask.q_positions is None else np.asarray(mask.q_positions)
    kv_pos = np.broadcast_to(np.arange(Tk), (B, Tk)) if mask.kv_positions is None else np.asarray(mask.kv_positions)
    qp = q_pos.astype(np.int64)[:, None, :, None]
    kp = kv_pos.astype(np.int64)[:, None, None, :]
    if mask.causal:
        vis = vis & (kp <= qp)
    if mask.window is not None:
        left, right = mask.window
        if left is not None:
            vis = vis & (kp >= qp - left)
        if right is not None:
            vis = vis & (kp <= qp + right)
    if mask.q_segment_ids is not None:
        qs = np.asarray(mask.q_segment_ids).astype(np.int64)[:, None, :, None]
        vis = vis & (qs != 0)
    if mask.kv_segment_ids is not None:
        ks = np.asarray(mask.kv_segment_ids).astype(np.int64)[:, None, None, :]
        vis = vis & (ks != 0)
    if mask.q_segment_ids is not None and mask.kv_segment_ids is not None:
        vis = vis & (qs == ks)
    if mask.dense is not None:
        vis = vis & np.asarray(mask.dense)
    return np.broadcast_to(vis, (B, H, Tq, Tk))


def _precision(precision) -> tuple[type, Callable[[np.ndarray], np.ndarray]]:
    """(working dtype, rounding to the storage dtype) for a plain implementation in ``precision``."""
    precision = np.dtype(precision)
    if precision == np.float64:
        return np.float64, lambda x: np.asarray(x, np.float64)
    if precision == np.float32:
        return np.float32, lambda x: np.asarray(x, np.float32)
    return np.float32, lambda x: np.asarray(x, np.float32).astype(precision).astype(np.float32)


def _heads_first(x: np.ndarray, H: int, work) -> np.ndarray:
    """[B, T, Hx, D] -> [B, H, T, D] in ``work``, repeating each K/V head for its group of query heads."""
    x = np.asarray(x).astype(work)
    return np.repeat(x, H // x.shape[2], axis=2).transpose(0, 2, 1, 3)


def _mm(a: np.ndarray, b: np.ndarray, transpose_b: bool = False) -> np.ndarray:
    """Batched a @ b (or a @ b^T) over the leading dims, accumulated in the operands' dtype.

    ``np.einsum`` rather than ``@``: OpenBLAS threads spin on tiny matrices and cost far more than the product.
    """
    return np.einsum("...ij,...kj->...ik" if transpose_b else "...ij,...jk->...ik", a, b)


def np_attention(q, k, v, visible: np.ndarray, scale: float, precision=np.float64) -> dict:
    """Attention and its statistics in NumPy.

    q: [B, Tq, H, D], k: [B, Tk, Hkv, D], v: [B, Tk, Hkv, Dv], visible: bool [B, H, Tq, Tk].
    Returns out [B, Tq, H, Dv]; entropy, max_logit, lse, sink, logit_mean, logit_std (unweighted mean and
    population std of the scaled logits over the visible keys), valid [B, H, Tq]; p [B, H, Tq, Tk]
    (invalid rows: zeros everywhere, valid False).
    """
    work, rnd = _precision(precision)
    H = q.shape[2]
    qh, kh, vh = _heads_first(q, H, work), _heads_first(k, H, work), _heads_first(v, H, work)
    s = rnd(_mm(qh, kh, transpose_b=True)) * work(scale)  # [B, H, Tq, Tk]
    valid = visible.any(-1)
    m = np.where(valid, np.where(visible, s, -np.inf).max(-1, initial=-np.inf), 0.0).astype(work)
    e = np.exp(np.where(visible, s - m[..., None], -np.inf))
    l = e.sum(-1)
    l_safe = np.where(valid, l, 1.0).astype(work)
    p = e / l_safe[..., None]
    lse = np.where(valid, m + np.log(l_safe), 0.0).astype(work)
    entropy = lse - np.where(visible, p * s, 0.0).sum(-1)  # -sum p log p, written as the documented identity
    out = rnd(_mm(rnd(p), vh)).transpose(0, 2, 1, 3)
    n = np.maximum(visible.sum(-1), 1).astype(work)
    logit_mean = np.where(visible, s, 0.0).sum(-1) / n
    logit_var = np.where(visible, (s - logit_mean[..., None]) ** 2, 0.0).sum(-1) / n
    return {
        "out": out, "p": p, "valid": valid, "entropy": np.where(valid, entropy, 0.0),
        "max_logit": m, "lse": lse, "sink": p[..., 0],
        "logit_mean": logit_mean.astype(work), "logit_std": np.sqrt(logit_var).astype(work),
    }


def np_attention_grads(q, k, v, visible: np.ndarray, scale: float, d_out, precision=np.float64) -> dict:
    """Gradients of ``sum(out * d_out)`` wrt q, k, v (d_out: [B, Tq, H, Dv]) in NumPy -> {dq, dk, dv}."""
    work, rnd = _precision(precision)
    B, Tq, H, D = q.shape
    Tk, Hkv, Dv = k.shape[1], k.shape[2], v.shape[3]
    G = H // Hkv
    p = np_attention(q, k, v, visible, scale, precision)["p"].astype(work)
    qh, kh, vh = _heads_first(q, H, work), _heads_first(k, H, work), _heads_first(v, H, work)
    do = _heads_first(d_out, H, work)
    dp = rnd(_mm(do, vh, transpose_b=True))  # [B, H, Tq, Tk]
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    ds = rnd(ds * work(scale))
    dq = rnd(_mm(ds, kh)).transpose(0, 2, 1, 3)
    dk = _mm(np.swapaxes(ds, -1, -2), qh).reshape(B, Hkv, G, Tk, D).sum(2)
    dv = _mm(np.swapaxes(rnd(p), -1, -2), do).reshape(B, Hkv, G, Tk, Dv).sum(2)
    return {"dq": dq, "dk": rnd(dk).transpose(0, 2, 1, 3), "dv": rnd(dv).transpose(0, 2, 1, 3)}


# ------------------------------------------------------------------------------------------ tolerance rule
def max_err(a, b) -> float:
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b), initial=0.0))


def assert_2x(name: str, got, ref, plain, extra: float = 0.0, magnitude: Optional[float] = None) -> None:
    """The tolerance rule: error vs the float64 reference at most 2x the plain implementation's, plus a floor.

    The floor is ``FLOOR_ULPS`` float32 ulps of ``max(1, magnitude)``; ``magnitude`` defaults to ``max|ref|``.
    ``extra`` widens the bound by an error the quantity inherits from one already checked (see ``check_stats``).
    """
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    assert got.shape == ref.shape, f"{name}: shape {got.shape}, expected {ref.shape}"
    assert np.all(np.isfinite(got)), f"{name}: non-finite values"
    err = max_err(got, ref)
    base = max_err(plain, ref)
    if magnitude is None:
        magnitude = float(np.max(np.abs(ref), initial=0.0))
    floor = FLOOR_ULPS * float(np.finfo(np.float32).eps) * max(1.0, magnitude)
    assert err <= 2.0 * base + floor + extra, (
        f"{name}: max error {err:.3g} vs float64 reference exceeds 2 x plain-implementation error "
        f"{base:.3g} + floor {floor:.3g}" + (f" + inherited {extra:.3g}" if extra else "")
    )


def check_grads(res: dict, gref: dict, gplain: dict, dtype) -> None:
    """dq, dk, dv under the 2x rule. Their floor uses the largest of the three: a gradient that is exactly
    zero in float64 (dk with a single visible key) is a cancellation of terms of that size."""
    magnitude = max(float(np.max(np.abs(gref[key]), initial=0.0)) for key in ("dq", "dk", "dv"))
    for key in ("dq", "dk", "dv"):
        assert res[key].dtype == jnp.dtype(dtype), f"{key} dtype {res[key].dtype}, expected {dtype}"
        assert_2x(key, res[key], gref[key], gplain[key], magnitude=magnitude)


def check_stats(stats, ref: dict, plain: dict) -> None:
    """``AttentionStats`` fields against the reference under the 2x rule; ``valid`` exactly.

    A backend that returns no ``sink`` gets it from ``exp(s_0 - lse)`` with its own lse, so the sink inherits
    the lse error (already held to the rule) as a relative error: the bound grows by ``max(sink) * 2 lse_err``.
    """
    np.testing.assert_array_equal(stats.valid, ref["valid"], err_msg="stats.valid")
    lse_err = max(max_err(stats.lse, ref["lse"]), max_err(plain["lse"], ref["lse"]))
    for field in STAT_FIELDS:
        value = np.asarray(getattr(stats, field))
        assert value.dtype == np.float32, f"stats.{field} dtype {value.dtype}"
        extra = 2.0 * lse_err * float(np.max(ref["sink"], initial=0.0)) if field == "sink" else 0.0
        assert_2x(f"stats.{field}", value, ref[field], plain[field], extra)


# ---------------------------------------------------------------------------------------------- inputs
def random_qkv(rng: np.random.Generator, B, Tq, Tk, H, Hkv, D, Dv, dtype) -> tuple[np.ndarray, ...]:
    """Unit-normal q, k, v and an output cotangent, rounded to ``dtype`` (returned as NumPy arrays)."""
    dt = jnp.dtype(dtype)
    draw = lambda *shape: rng.standard_normal(shape, dtype=np.float32).astype(dt)  # noqa: E731
    return draw(B, Tq, H, D), draw(B, Tk, Hkv, D), draw(B, Tk, Hkv, Dv), draw(B, Tq, H, Dv)


def lengths_to_segments(lengths, T: int) -> np.ndarray:
    """[B] lengths -> [B, T] int32 segment ids (1 inside the length, 0 after)."""
    return (np.arange(T)[None, :] < np.asarray(lengths)[:, None]).astype(np.int32)


def packed_segments(rng: np.random.Generator, B: int, T: int, num: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Random packing of ``num`` segments plus trailing padding -> (segment ids [B, T], positions [B, T])."""
    seg = np.zeros((B, T), np.int32)
    pos = np.zeros((B, T), np.int32)
    for b in range(B):
        cuts = np.sort(rng.choice(np.arange(1, T), size=min(num, T - 1), replace=False)) if T > 1 else [1]
        start = 0
        for i, end in enumerate(cuts):
            seg[b, start:end] = i + 1
            pos[b, start:end] = np.arange(end - start)
            start = end
    return seg, pos


def _dense(rng, shape, hide_cols=(3, 11)) -> np.ndarray:
    d = rng.random(shape) < 0.7
    Tk = shape[-1]
    for c in hide_cols:
        if c < Tk and Tk > 1:
            d[..., c] = False
    return d


def make_mask(kind: str, rng: np.random.Generator, B: int, H: int, Tq: int, Tk: int) -> Optional[Mask]:
    """The named mask kind for these shapes (deterministic given ``rng``)."""
    i32 = lambda x: np.asarray(x, np.int32)  # noqa: E731
    if kind == "none":
        return None
    if kind == "causal":
        return Mask(causal=True)
    if kind == "window":
        return Mask(window=3)
    if kind == "window_left":
        return Mask(window=(4, None))
    if kind == "window_right":
        return Mask(window=(None, 2))
    if kind == "causal_window":
        return Mask(causal=True, window=(5, None))
    if kind == "q_padding":
        return Mask(q_segment_ids=i32(lengths_to_segments([Tq, max(1, Tq // 2)][:B], Tq)))
    if kind == "kv_padding":
        return Mask(kv_segment_ids=i32(lengths_to_segments([max(1, Tk // 3), Tk][:B], Tk)))
    if kind == "cross_padding":  # encoder-decoder: separate query and key padding
        return Mask(  # batch 1 has no key at all
            q_segment_ids=i32(lengths_to_segments([max(1, Tq - 3), max(1, Tq // 2)][:B], Tq)),
            kv_segment_ids=i32(lengths_to_segments([max(1, Tk // 3), 0][:B], Tk)),
        )
    if kind in ("packed", "packed_causal"):  # packed sequences (Tq == Tk), positions restart per segment
        seg, pos = packed_segments(rng, B, Tq)
        if kind == "packed":
            return Mask(q_segment_ids=i32(seg), kv_segment_ids=i32(seg))
        return Mask(causal=True, q_segment_ids=i32(seg), kv_segment_ids=i32(seg), q_positions=i32(pos),
                    kv_positions=i32(pos))
    if kind == "decode":  # KV-cache decoding: Tq new tokens at the end of a cache filled to a per-row length
        lengths = np.array([Tk, max(Tq, Tk - 9)][:B])
        q_pos = lengths[:, None] - Tq + np.arange(Tq)[None, :]
        return Mask(causal=True, q_positions=i32(q_pos), kv_segment_ids=i32(lengths_to_segments(lengths, Tk)))
    if kind == "dense":
        return Mask(dense=_dense(rng, (B, 1, Tq, Tk)))
    if kind == "dense_heads":
        return Mask(dense=_dense(rng, (B, H, Tq, Tk)))
    if kind == "dense_2d":
        return Mask(dense=_dense(rng, (Tq, Tk)))
    if kind == "combo":  # every part at once, dense included
        seg_q = lengths_to_segments([Tq, max(1, Tq - 5)][:B], Tq)
        seg_k = lengths_to_segments([max(1, Tk - 2), Tk][:B], Tk)
        return Mask(causal=True, window=(8, None), q_segment_ids=i32(seg_q), kv_segment_ids=i32(seg_k),
                    dense=_dense(rng, (B, 1, Tq, Tk)))
    if kind == "combo_structured":  # packing + causal + window + positions, no dense part
        seg, pos = packed_segments(rng, B, Tq, num=2)
        return Mask(causal=True, window=(6, 1), q_segment_ids=i32(seg), kv_segment_ids=i32(seg),
                    q_positions=i32(pos), kv_positions=i32(pos))
    raise ValueError(f"unknown mask kind {kind!r}")


MASK_KINDS = (
    "none", "causal", "window", "window_left", "window_right", "causal_window", "q_padding", "kv_padding",
    "cross_padding", "packed", "packed_causal", "decode", "dense", "dense_heads", "dense_2d", "combo",
    "combo_structured",
)


# ------------------------------------------------------------------------------------------------ cases
@dataclasses.dataclass(frozen=True)
class Case:
    """One agreement case. ``core`` cases also run for slow backends; they cover every mask kind (dense_2d is
    the dense kind again, broadcast from [Tq, Tk])."""

    name: str
    mask: str = "none"
    B: int = 2
    Tq: int = 17
    Tk: int = 17
    H: int = 4
    Hkv: int = 4
    D: int = 32
    Dv: Optional[int] = None
    scale: Optional[float] = None
    dtype: str = "float32"
    core: bool = False
    grad_with_stats: bool = False  # take gradients through the return_stats=True path

    @property
    def dv(self) -> int:
        return self.D if self.Dv is None else self.Dv

    def inputs(self, seed: int = 0):
        """(q, k, v, d_out as NumPy arrays in the case dtype, mask, scale used)."""
        rng = np.random.default_rng([seed, len(self.name), sum(map(ord, self.name))])
        q, k, v, d_out = random_qkv(rng, self.B, self.Tq, self.Tk, self.H, self.Hkv, self.D, self.dv, self.dtype)
        mask = make_mask(self.mask, rng, self.B, self.H, self.Tq, self.Tk)
        scale = 1.0 / math.sqrt(self.D) if self.scale is None else self.scale
        return q, k, v, d_out, mask, scale


CASES = (
    # head dims 32 / 64 / 72 / 128; lengths 1 / 17 / 100 / 130; Tq != Tk both ways; H / Hkv = 1, 2, 4, H (MQA)
    Case("d32_t17", core=True),
    Case("d64_tq100_tk130_kv_padding_gqa2", mask="kv_padding", D=64, Tq=100, Tk=130, Hkv=2, core=True),
    Case("d72_causal_t100_mqa", mask="causal", D=72, Tq=100, Tk=100, Hkv=1, core=True),
    Case("d128_causal_tq130_tk100_gqa2", mask="causal", D=128, Tq=130, Tk=100, Hkv=2, B=1),
    Case("decode_tq1_tk130_mqa", mask="decode", D=64, Tq=1, Tk=130, Hkv=1, core=True),
    Case("tq17_tk1", Tq=17, Tk=1),
    Case("window_t130_d64_mqa", mask="window", D=64, Tq=130, Tk=130, Hkv=1, core=True),
    Case("window_empty_rows_tq130_tk100", mask="window", Tq=130, Tk=100, B=1),
    Case("window_left", mask="window_left", core=True),
    Case("window_right_tq17_tk100", mask="window_right", Tq=17, Tk=100, core=True),
    Case("causal_window_t130_gqa2", mask="causal_window", Tq=130, Tk=130, Hkv=2, core=True),
    Case("q_padding_d32_dv72", mask="q_padding", Dv=72, core=True),
    Case("cross_padding_tq100_tk17_d64_dv32", mask="cross_padding", D=64, Dv=32, Tq=100, Tk=17, Hkv=2, core=True),
    Case("packed_t100_scale_custom", mask="packed", Tq=100, Tk=100, scale=0.37, core=True),
    Case("packed_causal_h8_gqa4", mask="packed_causal", H=8, Hkv=2, core=True),
    Case("decode_tq3_tk17_gqa2", mask="decode", Tq=3, Tk=17, Hkv=2),
    Case("dense", mask="dense", core=True),
    Case("dense_heads_tk100_gqa2", mask="dense_heads", Hkv=2, Tq=17, Tk=100, core=True),
    Case("dense_2d_tq100_tk17", mask="dense_2d", Tq=100, Tk=17),
    Case("combo_t100_gqa2", mask="combo", Tq=100, Tk=100, Hkv=2, core=True),
    Case("combo_structured_t130_mqa", mask="combo_structured", Tq=130, Tk=130, Hkv=1, core=True),
    Case("scale_1_causal_b13_t13_d64", mask="causal", B=13, Tq=13, Tk=13, H=2, Hkv=1, D=64, scale=1.0, core=True),
    Case("packed_causal_b13_t13", mask="packed_causal", B=13, Tq=13, Tk=13, H=2, Hkv=1, D=16, core=True),
    # low precision
    Case("bf16_causal_tq17_tk130_d64", mask="causal", D=64, Tq=17, Tk=130, dtype="bfloat16", core=True),
    Case("bf16_combo_structured_t130_gqa2", mask="combo_structured", Hkv=2, Tq=130, Tk=130, dtype="bfloat16"),
    Case("bf16_decode_tq3_tk100_d128_mqa", mask="decode", Hkv=1, Tq=3, Tk=100, D=128, dtype="bfloat16"),
    Case("f16_window_t100", mask="window", Tq=100, Tk=100, dtype="float16"),
)

# Every other case takes its gradients through the return_stats=True path.
CASES = tuple(dataclasses.replace(c, grad_with_stats=bool(i % 2)) for i, c in enumerate(CASES))

assert {c.mask for c in CASES} == set(MASK_KINDS), "every mask kind needs an agreement case"
assert {c.mask for c in CASES if c.core} >= set(MASK_KINDS) - {"dense_2d"}

# Test-time options per backend: small blocks so that the short test sequences span several blocks.
BACKEND_OPTIONS = {"chunked": {"block_q": 16, "block_k": 16}}


def options_for(backend: str) -> tuple:
    """Hashable backend options (a static jit argument)."""
    return tuple(sorted(BACKEND_OPTIONS.get(backend, {}).items()))


def backend_case_params() -> list:
    """pytest params (backend, case): every case for fast backends, the core cases for slow ones."""
    return [
        pytest.param(backend, case, id=f"{backend}-{case.name}")
        for backend in cpu_backends()
        for case in CASES
        if case.core or backend not in SLOW_BACKENDS
    ]


# ---------------------------------------------------------------------------------------------- running
# XLA:CPU spends most of these tests' time compiling; its backend optimizations buy nothing at test sizes.
def _known_options(options: dict) -> dict:
    """The compile options this jaxlib's XLA knows (jaxlib 0.11 no longer has xla_cpu_use_fusion_emitters)."""
    known = {}
    for name, value in options.items():
        try:
            jax.jit(lambda x: x + 1, compiler_options={name: value}).lower(1.0).compile()
        except jax.errors.JaxRuntimeError:
            continue
        known[name] = value
    return known


_FAST_COMPILE = _known_options({
    "xla_backend_optimization_level": 0,
    "xla_llvm_disable_expensive_passes": True,
    "xla_cpu_use_fusion_emitters": False,
})


def fast_jit(fn: Callable, **kw) -> Callable:
    """``jax.jit`` with XLA's backend optimizations off: tests compile far more than they run."""
    return jax.jit(fn, compiler_options=_FAST_COMPILE, **kw)


@functools.partial(jax.jit, static_argnames=("implementation", "scale", "options", "grad_with_stats"),
                   compiler_options=_FAST_COMPILE)
def run_backend(q, k, v, mask, d_out, *, implementation: str, scale: Optional[float], options: tuple = (),
                grad_with_stats: bool = False):
    """Both paths of one backend: ``out`` (return_stats=False) and ``out_stats``, ``stats`` (return_stats=True).

    The gradients dq, dk, dv of ``sum(out * d_out)`` come from the return_stats=False path, or from the
    return_stats=True path when ``grad_with_stats`` (cases alternate, so both backward paths are checked).
    """
    call = functools.partial(attention.attention, mask=mask, implementation=implementation, scale=scale,
                             backend_options=dict(options))
    if grad_with_stats:
        out_s, vjp, stats = jax.vjp(lambda q, k, v: call(q, k, v, return_stats=True), q, k, v, has_aux=True)
        out = call(q, k, v)
    else:
        out, vjp = jax.vjp(lambda q, k, v: call(q, k, v), q, k, v)
        out_s, stats = call(q, k, v, return_stats=True)
    dq, dk, dv = vjp(d_out)
    return {"out": out, "dq": dq, "dk": dk, "dv": dv, "out_stats": out_s, "stats": stats}


def request_for(q, k, v, mask: Optional[Mask], *, dropout: bool = False, return_stats: bool = False):
    """The ``attention.Request`` that ``attention.attention(q, k, v, mask, ...)`` builds for these inputs."""
    return attention.Request(
        batch=q.shape[0], q_len=q.shape[1], kv_len=k.shape[1], num_heads=q.shape[2], num_kv_heads=k.shape[2],
        qk_dim=q.shape[3], v_dim=v.shape[3], dtype=jnp.dtype(q.dtype), mask=Mask() if mask is None else mask,
        dropout=dropout, return_stats=return_stats, platform=jax.default_backend(),
    )


def unsupported_reason(backend: str, q, k, v, mask, *, dropout: bool = False, return_stats: bool = True):
    """None when ``backend`` serves this call, else the ValueError message ``attention`` raises."""
    try:
        attention.select_backend(backend, request_for(q, k, v, mask, dropout=dropout, return_stats=return_stats))
    except ValueError as e:
        return str(e)
    return None
