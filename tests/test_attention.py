"""The shared suite for ``attention.attention``, run against every backend that can run on CPU.

Backends come from ``attention.available_backends()`` minus the GPU-only ones, so a newly registered backend
joins every test here. Slow backends (Pallas in interpret mode) get the reduced ``core`` case list, which still
covers every mask kind. A feature a backend rejects is skipped with the backend's own reason, and
``test_rejected_features_raise_naming_backend`` checks that the rejection is a ValueError naming both.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attention
from attention import AttentionStats, Mask
from attention_cases import (
    CASES,
    SLOW_BACKENDS,
    STAT_FIELDS,
    assert_2x,
    backend_case_params,
    check_grads,
    check_stats,
    cpu_backends,
    fast_jit,
    make_mask,
    np_attention,
    np_attention_grads,
    np_visible,
    options_for,
    random_qkv,
    request_for,
    run_backend,
    unsupported_reason,
)

BACKENDS = cpu_backends()


def _run(backend, q, k, v, mask, d_out, scale, grad_with_stats=False):
    """run_backend with the backend's test options, as NumPy arrays."""
    arrays = [jnp.asarray(x) for x in (q, k, v, d_out)]
    res = run_backend(*arrays[:3], mask, arrays[3], implementation=backend, scale=scale, options=options_for(backend),
                      grad_with_stats=grad_with_stats)
    return jax.tree.map(np.asarray, res)


def _skip_if_unsupported(backend, q, k, v, mask, **kw):
    reason = unsupported_reason(backend, q, k, v, mask, **kw)
    if reason is not None:
        pytest.skip(reason)


def _check_against_reference(res, q, k, v, d_out, mask, scale, dtype):
    """Outputs, statistics and gradients within the 2x rule; invalid rows exactly zero."""
    B, Tq, H, _ = q.shape
    visible = np_visible(mask, B, H, Tq, k.shape[1])
    ref = np_attention(q, k, v, visible, scale)
    plain = np_attention(q, k, v, visible, scale, precision=dtype)
    gref = np_attention_grads(q, k, v, visible, scale, d_out)
    gplain = np_attention_grads(q, k, v, visible, scale, d_out, precision=dtype)
    for key in ("out", "out_stats"):
        assert res[key].dtype == jnp.dtype(dtype), f"{key} dtype {res[key].dtype}, expected {dtype}"
        assert_2x(key, res[key], ref["out"], plain["out"])
    check_grads(res, gref, gplain, dtype)
    stats = res["stats"]
    check_stats(stats, ref, plain)
    if stats.weights is not None:
        assert_2x("stats.weights", stats.weights, ref["p"], plain["p"])
    invalid = ~ref["valid"]  # [B, H, Tq]
    rows = invalid.transpose(0, 2, 1)  # [B, Tq, H]
    assert np.all(res["out"][rows] == 0) and np.all(res["out_stats"][rows] == 0), "masked rows not zero"
    assert np.all(res["dq"][rows] == 0), "masked rows got a query gradient"
    for field in STAT_FIELDS:
        assert np.all(getattr(stats, field)[invalid] == 0), f"stats.{field} not zero on masked rows"


# ----------------------------------------------------------------------------------- float64 agreement
@pytest.mark.parametrize("backend,case", backend_case_params())
def test_agrees_with_float64_reference(backend, case):
    q, k, v, d_out, mask, scale = case.inputs()
    _skip_if_unsupported(backend, q, k, v, mask, return_stats=True)
    res = _run(backend, q, k, v, mask, d_out, case.scale, case.grad_with_stats)
    _check_against_reference(res, q, k, v, d_out, mask, scale, case.dtype)


def test_numpy_gradients_match_float64_autodiff():
    """The NumPy backward pass used as the gradient reference equals jax.grad of ``reference`` in float64."""
    rng = np.random.default_rng(1)
    q, k, v, d_out = random_qkv(rng, 2, 9, 12, 4, 2, 8, 5, np.float64)
    mask = make_mask("combo", rng, 2, 4, 9, 12)
    visible = np_visible(mask, 2, 4, 9, 12)
    expected = np_attention_grads(q, k, v, visible, 0.3, d_out)
    with jax.enable_x64(True):
        mask64 = jax.tree.map(jnp.asarray, mask)
        f = lambda q, k, v: attention.attention(q, k, v, mask64, implementation="reference", scale=0.3)  # noqa: E731
        out, grads = fast_jit(lambda q, k, v, d: (f(q, k, v), jax.vjp(f, q, k, v)[1](d)))(q, k, v, d_out)
        assert out.dtype == jnp.float64 and all(g.dtype == jnp.float64 for g in grads)
    np.testing.assert_allclose(out, np_attention(q, k, v, visible, 0.3)["out"], atol=1e-12)
    for name, g in zip(("dq", "dk", "dv"), grads):
        np.testing.assert_allclose(g, expected[name], atol=1e-12, err_msg=name)


# ----------------------------------------------------------------------------------- planted signals
def _one_case_per_mask(exclude=()):
    """The first core case of each mask kind (same shapes as the agreement test: compiled functions are shared)."""
    seen = {}
    for case in CASES:
        if case.core and case.mask not in seen and case.mask not in exclude:
            seen[case.mask] = case
    return list(seen.values())


def _params(cases):
    """(backend, case) pairs; slow backends take the core cases only."""
    return [pytest.param(b, c, id=f"{b}-{c.name}") for b in BACKENDS for c in cases
            if c.core or b not in SLOW_BACKENDS]


@pytest.mark.parametrize("backend,case", _params(_one_case_per_mask(exclude=("none", "q_padding"))))
def test_planted_signal_never_reaches_output(backend, case):
    """Keys hidden from a set of query rows carry v = 1e4 and huge logits; those rows never see them.

    The hidden keys also get exactly zero gradient through k and v from those rows.
    """
    q, k, v, d_out, mask, scale = case.inputs(seed=1)
    _skip_if_unsupported(backend, q, k, v, mask)
    B, Tq, H, _ = q.shape
    visible = np_visible(mask, B, H, Tq, k.shape[1])
    for rows in (np.arange(Tq) < max(1, Tq // 2), np.arange(Tq) >= Tq // 2):  # the query rows we watch
        hidden = ~visible[:, :, rows, :].any(axis=(1, 2))  # [B, Tk]: keys no watched row may see
        if hidden.any():
            break
    assert hidden.any(), f"mask {case.mask} hides nothing from the watched rows"
    direction = np.sign(q[:, rows].astype(np.float32).mean(axis=(1, 2)))  # [B, D]: aligned with the queries
    v[hidden] = 1e4
    k[hidden] = (30.0 * direction[:, None, None, :].repeat(k.shape[1], 1).repeat(k.shape[2], 2))[hidden]
    d_out[:, ~rows] = 0
    res = _run(backend, q, k, v, mask, d_out, case.scale, case.grad_with_stats)
    ref = np_attention(q, k, v, visible, scale)
    plain = np_attention(q, k, v, visible, scale, precision=case.dtype)
    for key in ("out", "out_stats"):
        watched = res[key][:, rows]
        assert np.abs(watched.astype(np.float32)).max() < 10.0, f"{key}: the planted value reached the output"
        assert_2x(key, watched, ref["out"][:, rows], plain["out"][:, rows])
    assert_2x("stats.max_logit", res["stats"].max_logit[:, :, rows], ref["max_logit"][:, :, rows],
              plain["max_logit"][:, :, rows])
    assert np.all(res["dk"][hidden] == 0), "a hidden key got a gradient through k"
    assert np.all(res["dv"][hidden] == 0), "a hidden key got a gradient through v"
    assert np.all(np.isfinite(res["dq"]))


TWO_TOKEN_MASKS = {
    # name: (mask, index of the visible key)
    "kv_padding_first": (lambda: Mask(kv_segment_ids=np.array([[0, 1]])), 1),
    "segment_match": (lambda: Mask(q_segment_ids=np.array([[1]]), kv_segment_ids=np.array([[1, 2]])), 0),
    "window_left_0": (lambda: Mask(window=(0, None), q_positions=np.array([[1]])), 1),
    "dense": (lambda: Mask(dense=np.array([[False, True]])), 1),
}


@pytest.mark.parametrize("name", list(TWO_TOKEN_MASKS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_two_tokens_masked_one_gives_the_other_value(backend, name):
    make, keep = TWO_TOKEN_MASKS[name]
    mask = make()
    rng = np.random.default_rng(3)
    q, k, v, d_out = random_qkv(rng, 1, 1, 2, 2, 1, 8, 8, np.float32)
    _skip_if_unsupported(backend, q, k, v, mask)
    v[:, 1 - keep] = 300.0
    k[:, 1 - keep] = 300.0
    res = _run(backend, q, k, v, mask, d_out, None)
    expected = np.broadcast_to(v[:, keep][:, None], res["out"].shape)
    np.testing.assert_allclose(res["out"], expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(res["out_stats"], expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(res["dv"][:, keep], d_out.sum(axis=2), rtol=1e-6, atol=1e-6)
    assert np.all(res["dv"][:, 1 - keep] == 0) and np.all(res["dk"][:, 1 - keep] == 0)
    np.testing.assert_allclose(res["stats"].entropy, 0.0, atol=1e-6)


# ----------------------------------------------------------------------------------- causality
CAUSALITY_CASES = [c for c in CASES if c.name in ("scale_1_causal_b13_t13_d64", "packed_causal_b13_t13")]


@pytest.mark.parametrize("backend,case", _params(CAUSALITY_CASES))
def test_causality_through_gradients(backend, case):
    """d out[t] / d k[s] == d out[t] / d v[s] == 0 for s > t, and d out[t] / d q[s] == 0 for s != t, exactly.

    Batch element t gets an output cotangent on row t only (B == T), so one backward pass checks every row.
    """
    q, k, v, d_out, mask, _ = case.inputs(seed=3)
    T = case.Tq
    assert case.B == T == case.Tk
    _skip_if_unsupported(backend, q, k, v, mask)
    on_row = np.eye(T, dtype=bool)  # [b, t]: batch b watches row t == b
    d_out[~on_row] = 0
    res = _run(backend, q, k, v, mask, d_out, case.scale, case.grad_with_stats)
    future = np.arange(T)[None, :] > np.arange(T)[:, None]  # [t, s]: s > t
    assert np.all(res["dk"][future] == 0) and np.all(res["dv"][future] == 0), "the future leaks into the past"
    assert np.all(res["dq"][~on_row] == 0), "out[t] depends on another query"
    visible = np_visible(mask, T, case.H, T, T)[np.arange(T), :, np.arange(T)].any(1)  # [t, s]: row t sees s
    assert visible.sum() > T, "the mask leaves too little to check"
    assert np.all(np.abs(res["dv"]).sum(axis=(2, 3))[visible] > 0), "a visible key got no gradient"


# ----------------------------------------------------------------------------------- fully masked rows
def _cases_with_masked_rows():
    """The cases whose mask leaves some query row without any visible key."""
    out = []
    for case in CASES:
        mask = case.inputs()[4]
        if not np_visible(mask, case.B, case.H, case.Tq, case.Tk).any(-1).all():
            out.append(case)
    return out


@pytest.mark.parametrize("backend,case", _params(_cases_with_masked_rows()))
def test_fully_masked_rows_are_zero_with_finite_zero_gradients(backend, case):
    """Rows with no visible key: exactly zero output and query gradient, zero stats, valid False, even with
    large logits; keys no row sees get exactly zero gradient."""
    q, k, v, d_out, mask, _ = case.inputs(seed=2)
    q, k = 20 * q, 20 * k
    _skip_if_unsupported(backend, q, k, v, mask)
    res = _run(backend, q, k, v, mask, d_out, case.scale, case.grad_with_stats)
    visible = np_visible(mask, case.B, case.H, case.Tq, case.Tk)
    invalid = ~visible.any(-1)  # [B, H, Tq]
    rows = invalid.transpose(0, 2, 1)
    for key in ("out", "out_stats", "dq", "dk", "dv"):
        assert np.all(np.isfinite(res[key].astype(np.float32))), f"{key} not finite"
    assert np.all(res["out"][rows] == 0) and np.all(res["out_stats"][rows] == 0)
    assert np.all(res["dq"][rows] == 0)
    unseen = ~visible.any(axis=2).reshape(case.B, case.Hkv, -1, case.Tk).any(2).transpose(0, 2, 1)
    assert np.all(res["dk"][unseen] == 0) and np.all(res["dv"][unseen] == 0), "an unseen key got a gradient"
    stats = res["stats"]
    np.testing.assert_array_equal(stats.valid, ~invalid)
    for field in STAT_FIELDS:
        assert np.all(getattr(stats, field)[invalid] == 0), f"stats.{field} not zero on masked rows"


# ----------------------------------------------------------------------------------- hypothesis
@st.composite
def _problems(draw):
    B = draw(st.integers(1, 2))
    Tq = draw(st.integers(1, 20))
    Tk = draw(st.integers(1, 20))
    Hkv = draw(st.sampled_from([1, 2]))
    H = Hkv * draw(st.sampled_from([1, 2]))
    D = draw(st.sampled_from([8, 16]))
    Dv = draw(st.sampled_from([D, 4]))
    ids = lambda T: draw(st.lists(st.integers(0, 2), min_size=B * T, max_size=B * T))  # noqa: E731
    pos = lambda T: draw(st.lists(st.integers(0, 24), min_size=B * T, max_size=B * T))  # noqa: E731
    side = st.one_of(st.none(), st.integers(0, 6))
    parts = {}
    parts["causal"] = draw(st.booleans())
    parts["window"] = draw(st.one_of(st.none(), st.tuples(side, side)))
    if draw(st.booleans()):
        parts["q_segment_ids"] = np.array(ids(Tq), np.int32).reshape(B, Tq)
    if draw(st.booleans()):
        parts["kv_segment_ids"] = np.array(ids(Tk), np.int32).reshape(B, Tk)
    if draw(st.booleans()):
        parts["q_positions"] = np.array(pos(Tq), np.int32).reshape(B, Tq)
    if draw(st.booleans()):
        parts["kv_positions"] = np.array(pos(Tk), np.int32).reshape(B, Tk)
    if draw(st.integers(0, 3)) == 0:
        dense = draw(st.lists(st.booleans(), min_size=B * Tq * Tk, max_size=B * Tq * Tk))
        parts["dense"] = np.array(dense).reshape(B, 1, Tq, Tk)
    seed = draw(st.integers(0, 2**16))
    return (B, Tq, Tk, H, Hkv, D, Dv), Mask(**parts), seed


@pytest.mark.parametrize("backend", BACKENDS)
def test_hypothesis_masks_and_shapes_match_dense_reference(backend):
    @settings(max_examples=4 if backend in SLOW_BACKENDS else 8, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(_problems())
    def check(problem):
        (B, Tq, Tk, H, Hkv, D, Dv), mask, seed = problem
        q, k, v, d_out = random_qkv(np.random.default_rng(seed), B, Tq, Tk, H, Hkv, D, Dv, np.float32)
        if unsupported_reason(backend, q, k, v, mask) is not None:
            return
        res = _run(backend, q, k, v, mask, d_out, None)
        _check_against_reference(res, q, k, v, d_out, mask, 1 / math.sqrt(D), np.float32)

    check()


# ----------------------------------------------------------------------------------- scaling claim
@pytest.mark.parametrize("backend", BACKENDS)
def test_scaling_claim_logit_std(backend):
    """Unit-variance q, k at d_k = 64: unscaled logits have std ~8 = sqrt(64), 1/sqrt(d_k)-scaled ones ~1."""
    B, T, H, D = 1, 512, 8, 64
    rng = np.random.default_rng(0)
    q, k, v, _ = random_qkv(rng, B, T, T, H, H, D, 8, np.float32)
    mask = Mask(window=(0, 0))  # each query sees its own key only, so lse == max_logit == its one logit
    _skip_if_unsupported(backend, q, k, v, mask)
    f = fast_jit(lambda q, k, v, s: attention.attention(q, k, v, mask, implementation=backend, scale=s,
                                                        return_stats=True)[1], static_argnums=3)
    unscaled = f(q, k, v, 1.0)
    scaled = f(q, k, v, None)
    np.testing.assert_allclose(unscaled.lse, unscaled.max_logit, atol=1e-4)
    assert abs(float(jnp.std(unscaled.max_logit)) - 8.0) < 0.4
    assert abs(float(jnp.std(scaled.max_logit)) - 1.0) < 0.05
    np.testing.assert_allclose(scaled.max_logit, unscaled.max_logit / 8.0, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------------- validation
def _arr(*shape, dtype=np.float32):
    return np.zeros(shape, dtype)


Q, K, V = _arr(2, 5, 4, 8), _arr(2, 7, 2, 8), _arr(2, 7, 2, 6)

INVALID_CALLS = {
    "q_ndim": (lambda: attention.attention(_arr(2, 5, 8), K, V), r"q has shape \(2, 5, 8\); expected 4 dims"),
    "k_ndim": (lambda: attention.attention(Q, _arr(1, 2, 7, 2, 8), V), r"k has shape \(1, 2, 7, 2, 8\)"),
    "k_batch": (lambda: attention.attention(Q, _arr(3, 7, 2, 8), V), r"k has shape \(3, 7, 2, 8\).*B=2"),
    "k_head_dim": (lambda: attention.attention(Q, _arr(2, 7, 2, 4), V), r"k has shape \(2, 7, 2, 4\).*D=8"),
    "v_len": (lambda: attention.attention(Q, K, _arr(2, 6, 2, 6)), r"v has shape \(2, 6, 2, 6\).*Tk=7"),
    "v_heads": (lambda: attention.attention(Q, K, _arr(2, 7, 1, 6)), r"v has shape \(2, 7, 1, 6\).*Hkv=2"),
    "heads_multiple": (lambda: attention.attention(Q, _arr(2, 7, 3, 8), _arr(2, 7, 3, 6)), r"4 heads.*have 3"),
    "dtype_mismatch": (lambda: attention.attention(Q, K.astype(jnp.bfloat16), V), r"share a dtype.*bfloat16"),
    "int_dtype": (lambda: attention.attention(Q.astype(jnp.int32), K, V), r"q has dtype int32"),
    "not_array": (lambda: attention.attention([[1.0]], K, V), r"q must be an array"),
    "empty": (lambda: attention.attention(_arr(2, 0, 4, 8), K, V), r"empty input"),
    "mask_type": (lambda: attention.attention(Q, K, V, np.ones((5, 7), bool)), r"mask must be an attention.Mask"),
    "q_segments_shape": (lambda: attention.attention(Q, K, V, Mask(q_segment_ids=_arr(2, 7, dtype=np.int32))),
                         r"Mask.q_segment_ids has shape \(2, 7\); expected .*\(2, 5\)"),
    "kv_segments_shape": (lambda: attention.attention(Q, K, V, Mask(kv_segment_ids=_arr(2, 5, dtype=np.int32))),
                          r"Mask.kv_segment_ids has shape \(2, 5\); expected .*\(2, 7\)"),
    "q_positions_shape": (lambda: attention.attention(Q, K, V, Mask(q_positions=_arr(1, 5, dtype=np.int32))),
                          r"Mask.q_positions has shape \(1, 5\)"),
    "kv_positions_shape": (lambda: attention.attention(Q, K, V, Mask(kv_positions=_arr(2, 7, 1, dtype=np.int32))),
                           r"Mask.kv_positions has shape \(2, 7, 1\)"),
    "segments_float": (lambda: attention.attention(Q, K, V, Mask(q_segment_ids=_arr(2, 5))),
                       r"Mask.q_segment_ids must be an integer array; got dtype float32"),
    "dense_shape": (lambda: attention.attention(Q, K, V, Mask(dense=np.ones((5, 6), bool))),
                    r"Mask.dense has shape \(5, 6\); expected broadcastable to .*\(2, 4, 5, 7\)"),
    "dense_dtype": (lambda: attention.attention(Q, K, V, Mask(dense=np.ones((5, 7)))), r"Mask.dense must be a boolean"),
    "dense_ndim": (lambda: attention.attention(Q, K, V, Mask(dense=np.ones((1, 2, 4, 5, 7), bool))),
                   r"Mask.dense has shape \(1, 2, 4, 5, 7\); expected at most 4 dims"),
    "window_negative": (lambda: Mask(window=-1), r"Mask.window left side .* got -1"),
    "window_length": (lambda: Mask(window=(1, 2, 3)), r"Mask.window must be .*\(1, 2, 3\)"),
    "window_float": (lambda: Mask(window=(2, 1.5)), r"Mask.window right side .* got 1.5"),
    "causal_not_bool": (lambda: Mask(causal="yes"), r"Mask.causal must be a bool; got 'yes'"),
    "dropout_without_rng": (lambda: attention.attention(Q, K, V, dropout_rate=0.1),
                            r"dropout_rate=0.1 needs a dropout_rng"),
    "dropout_rate_range": (lambda: attention.attention(Q, K, V, dropout_rate=1.0, dropout_rng=jax.random.key(0)),
                           r"dropout_rate must be a float in \[0, 1\); got 1.0"),
    "unknown_implementation": (lambda: attention.attention(Q, K, V, implementation="flash9"),
                               r"unknown implementation 'flash9'; expected 'auto' or one of"),
    "implementation_type": (lambda: attention.attention(Q, K, V, implementation=["xla"]),
                            r"implementation must be a backend name \(str\); got \['xla'\]"),
    "backend_options_type": (lambda: attention.attention(Q, K, V, backend_options=[("block_q", 8)]),
                             r"backend_options must be a dict or None; got list"),
}


@pytest.mark.parametrize("name", list(INVALID_CALLS))
def test_invalid_input_raises_value_error_naming_it(name):
    call, pattern = INVALID_CALLS[name]
    with pytest.raises(ValueError, match=pattern):
        call()


@pytest.mark.parametrize("backend", BACKENDS)
def test_validation_happens_for_every_backend(backend):
    with pytest.raises(ValueError, match=r"k has shape"):
        attention.attention(Q, _arr(2, 7, 2, 4), V, implementation=backend)
    with pytest.raises(ValueError, match=r"Mask.kv_segment_ids has shape"):
        attention.attention(Q, K, V, Mask(kv_segment_ids=_arr(2, 5, dtype=jnp.int32)), implementation=backend)


# ----------------------------------------------------------------------------------- backend selection
FEATURE_CALLS = {
    "dropout": dict(dropout_rate=0.5),
    "dense_mask": dict(mask=Mask(dense=np.tril(np.ones((5, 7), bool)))),
    "return_stats": dict(return_stats=True),
    "value_dim": dict(v=_arr(2, 7, 2, 6)),
    "bfloat16": dict(dtype=jnp.bfloat16),
    "float16": dict(dtype=jnp.float16),
    "positions": dict(mask=Mask(causal=True, q_positions=np.full((2, 5), 6, np.int32))),
}


def _feature_call(feature):
    kw = dict(FEATURE_CALLS[feature])
    dtype = kw.pop("dtype", jnp.float32)
    rng = np.random.default_rng(0)
    q, k, v, _ = (jnp.asarray(x) for x in random_qkv(rng, 2, 5, 7, 4, 2, 8, 8, dtype))
    v = kw.pop("v", v).astype(dtype)
    mask = kw.pop("mask", None)
    if kw.get("dropout_rate"):
        kw["dropout_rng"] = jax.random.key(3)
    return (q, k, v, mask), kw


def _rejected_features():
    """(backend, feature) pairs the backend's ``supports`` turns down; served ones run in the other tests."""
    pairs = []
    for backend in attention.available_backends():
        for feature in FEATURE_CALLS:
            (q, k, v, mask), kw = _feature_call(feature)
            if unsupported_reason(backend, q, k, v, mask, dropout="dropout_rate" in kw,
                                  return_stats=kw.get("return_stats", False)) is not None:
                pairs.append(pytest.param(backend, feature, id=f"{backend}-{feature}"))
    return pairs


@pytest.mark.parametrize("backend,feature", _rejected_features())
def test_rejected_features_raise_naming_backend(backend, feature):
    """A backend that cannot serve a feature raises a ValueError naming itself and the feature."""
    (q, k, v, mask), kw = _feature_call(feature)
    with pytest.raises(ValueError, match=r"implementation '" + backend + r"' does not support \w") as info:
        attention.attention(q, k, v, mask, implementation=backend, **kw)
    words = {"dropout": "dropout", "dense_mask": "dense", "return_stats": "stat", "value_dim": "dim",
             "bfloat16": "bfloat16", "float16": "float16", "positions": "position"}
    if not (backend == "cudnn" and jax.default_backend() != "gpu"):  # cudnn on CPU names the platform
        assert words[feature] in str(info.value).lower(), f"the error does not name {feature}: {info.value}"


def test_xla_rejects_dropout_and_cudnn_rejects_cpu():
    (q, k, v, mask), kw = _feature_call("dropout")
    with pytest.raises(ValueError, match=r"implementation 'xla' does not support dropout"):
        attention.attention(q, k, v, mask, implementation="xla", **kw)
    if jax.default_backend() == "cpu":
        with pytest.raises(ValueError, match=r"implementation 'cudnn' does not support the cpu platform"):
            attention.attention(q, k, v, implementation="cudnn")


@pytest.mark.parametrize("feature", list(FEATURE_CALLS))
def test_auto_picks_a_backend_that_serves_the_request(feature):
    (q, k, v, mask), kw = _feature_call(feature)
    reason = unsupported_reason("auto", q, k, v, mask, dropout="dropout_rate" in kw,
                                return_stats=kw.get("return_stats", False))
    assert reason is None, reason
    request = request_for(q, k, v, mask, dropout="dropout_rate" in kw, return_stats=kw.get("return_stats", False))
    chosen = attention.select_backend("auto", request)
    assert chosen.supports(request) is None
    order = [b for b in attention.AUTO_ORDER[jax.default_backend()] if b in attention.available_backends()]
    servers = [b for b in order if unsupported_reason(b, q, k, v, mask, dropout=request.dropout,
                                                      return_stats=request.return_stats) is None]
    assert chosen.name == servers[0]
    if feature == "dropout":
        assert chosen.name != "xla"
    auto, direct = fast_jit(lambda q, k, v, mask: [
        attention.attention(q, k, v, mask, implementation=name, **kw) for name in ("auto", chosen.name)])(q, k, v, mask)
    jax.tree.map(np.testing.assert_array_equal, auto, direct)


# ----------------------------------------------------------------------------------- statistics
@pytest.mark.parametrize("backend", BACKENDS)
def test_stats_carry_no_gradient(backend):
    rng = np.random.default_rng(2)
    q, k, v, _ = random_qkv(rng, 1, 6, 6, 2, 2, 8, 8, np.float32)
    mask = Mask(causal=True)

    def total(q, k, v):
        stats = attention.attention(q, k, v, mask, implementation=backend, return_stats=True)[1]
        return sum(jnp.sum(getattr(stats, f)) for f in STAT_FIELDS)

    grads = fast_jit(jax.grad(total, argnums=(0, 1, 2)))(q, k, v)
    for g in grads:
        assert np.all(np.asarray(g) == 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_uniform_attention_stats_and_reductions(backend):
    """q = 0 gives uniform attention over the visible keys: entropy log(n), sink 1/n, normalized entropy 1."""
    B, T, H, D = 2, 10, 3, 8
    rng = np.random.default_rng(4)
    _, k, v, _ = random_qkv(rng, B, T, T, H, H, D, D, np.float32)
    q = np.zeros((B, T, H, D), np.float32)
    seg = np.ones((B, T), np.int32)
    seg[1, 7:] = 0  # three padding queries (and keys) in batch 1
    mask = Mask(causal=True, q_segment_ids=jnp.asarray(seg), kv_segment_ids=jnp.asarray(seg))
    _, stats = fast_jit(lambda q, k, v: attention.attention(q, k, v, mask, implementation=backend,
                                                            return_stats=True))(q, k, v)
    n = np.broadcast_to(np.arange(1, T + 1, dtype=np.float32), (B, H, T))
    valid = np.broadcast_to((seg == 1)[:, None, :], (B, H, T))
    np.testing.assert_array_equal(stats.valid, valid)
    np.testing.assert_allclose(stats.entropy, np.where(valid, np.log(n), 0), atol=1e-5)
    np.testing.assert_allclose(stats.sink, np.where(valid, 1 / n, 0), atol=1e-6)
    np.testing.assert_allclose(stats.max_logit, 0, atol=1e-6)
    np.testing.assert_allclose(stats.logit_mean, 0, atol=1e-6)
    np.testing.assert_allclose(stats.logit_std, 0, atol=1e-6)
    expected_mean = np.log(np.r_[np.arange(1, 11), np.arange(1, 8)]).mean()
    np.testing.assert_allclose(attention.mean_entropy_per_head(stats), np.full(H, expected_mean), rtol=1e-5)
    np.testing.assert_allclose(attention.normalized_entropy_per_head(stats, n), np.ones(H), rtol=1e-5)
    expected_sink = (1 / np.r_[np.arange(1, 11), np.arange(1, 8)]).mean()
    np.testing.assert_allclose(attention.sink_mass_per_head(stats), np.full(H, expected_sink), rtol=1e-5)
    assert float(attention.collapsed_fraction(stats)) == 0.0


def test_reductions_exclude_invalid_rows():
    valid = np.array([[[True, True, False], [True, False, False]]])  # [B=1, H=2, Tq=3]
    entropy = np.where(valid, [[[1.0, 3.0, 0.0], [0.05, 0.0, 0.0]]], 0.0)
    max_logit = np.where(valid, [[[-3.0, -1.0, 0.0], [-7.0, 0.0, 0.0]]], 0.0)
    sink = np.where(valid, [[[0.5, 0.25, 0.0], [1.0, 0.0, 0.0]]], 0.0)
    logit_mean = np.where(valid, [[[0.5, -1.5, 0.0], [2.0, 0.0, 0.0]]], 0.0)
    logit_std = np.where(valid, [[[1.0, 3.0, 0.0], [8.0, 0.0, 0.0]]], 0.0)
    f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    stats = AttentionStats(entropy=f32(entropy), max_logit=f32(max_logit), lse=jnp.zeros((1, 2, 3)),
                           valid=jnp.asarray(valid), sink=f32(sink), logit_mean=f32(logit_mean),
                           logit_std=f32(logit_std))
    np.testing.assert_allclose(attention.mean_entropy_per_head(stats), [2.0, 0.05], rtol=1e-6)
    np.testing.assert_allclose(attention.max_logit_per_head(stats), [-1.0, -7.0])
    np.testing.assert_allclose(attention.sink_mass_per_head(stats), [0.375, 1.0])
    np.testing.assert_allclose(attention.logit_mean_per_head(stats), [-0.5, 2.0])
    np.testing.assert_allclose(attention.logit_std_per_head(stats), [2.0, 8.0])
    assert float(attention.collapsed_fraction(stats, threshold=0.1)) == 0.5
    assert float(attention.collapsed_fraction(stats, threshold=0.01)) == 0.0
    num_visible = np.array([[[2.0, 8.0, 5.0], [1.0, 4.0, 4.0]]])  # head 1's only valid row has one key: excluded
    expected = [(1.0 / np.log(2) + 3.0 / np.log(8)) / 2, 0.0]
    np.testing.assert_allclose(attention.normalized_entropy_per_head(stats, num_visible), expected, rtol=1e-6)
    assert attention.uniform_entropy(8) == pytest.approx(math.log(8))
    with pytest.raises(ValueError, match="sink is None"):
        attention.sink_mass_per_head(stats.replace(sink=None))
    with pytest.raises(ValueError, match="logit_std is None"):
        attention.logit_std_per_head(stats.replace(logit_std=None))


# ----------------------------------------------------------------------------------- dropout
def _dropout_backends():
    q, k, v = np.zeros((1, 4, 2, 8), np.float32), np.zeros((1, 4, 2, 8), np.float32), np.zeros((1, 4, 2, 8), np.float32)
    return [b for b in BACKENDS if unsupported_reason(b, q, k, v, None, dropout=True, return_stats=False) is None]


@pytest.mark.parametrize("backend", _dropout_backends())
def test_dropout_is_reproducible_unbiased_and_respects_the_mask(backend):
    B, Tq, Tk, H, Hkv, D = 1, 8, 16, 2, 1, 8
    rng = np.random.default_rng(9)
    q, k, v, _ = random_qkv(rng, B, Tq, Tk, H, Hkv, D, D, np.float32)
    seg_k = np.ones((B, Tk), np.int32)
    seg_k[:, 12:] = 0
    v[:, 12:] = 1e4  # padding keys must stay invisible under dropout too
    mask = Mask(kv_segment_ids=jnp.asarray(seg_k))
    options = dict(options_for(backend))

    def dropped(v, key, rate):
        return attention.attention(q, k, v, mask, implementation=backend, dropout_rate=rate, dropout_rng=key,
                                   backend_options=options)

    @fast_jit
    def run(key):
        keys = jax.random.split(key, 512)
        plain = attention.attention(q, k, v, mask, implementation=backend, backend_options=options)
        samples = jax.vmap(lambda key: dropped(v, key, 0.5))(keys)
        again = dropped(v, keys[0], 0.5)
        rate0 = dropped(v, keys[0], 0.0)
        dv = jax.grad(lambda v: jnp.sum(dropped(v, keys[0], 0.5)))(v)
        return plain, samples, again, rate0, dv

    plain, samples, again, rate0, dv = map(np.asarray, run(jax.random.key(2)))
    np.testing.assert_allclose(samples[0], again, rtol=1e-5, atol=1e-6)  # vmapped or not: the same keep mask
    assert np.abs(samples[0] - samples[1]).max() > 0.1
    np.testing.assert_allclose(rate0, plain, rtol=1e-6, atol=1e-6)
    assert np.abs(samples).max() < 100.0, "a padding key reached the output under dropout"
    mean, se = samples.mean(0), samples.std(0) / math.sqrt(len(samples))
    assert np.all(np.abs(mean - plain) <= 5 * se + 1e-6), "dropout changes the expected output"
    assert np.all(np.isfinite(dv)) and np.all(dv[:, 12:] == 0)


# ----------------------------------------------------------------------------------- mask helpers
def test_mask_builders_and_window_normalization():
    m = Mask.from_lengths(jnp.array([2, 3]), jnp.array([1, 4]), 3, 4, causal=True, window=2)
    np.testing.assert_array_equal(m.q_segment_ids, [[1, 1, 0], [1, 1, 1]])
    np.testing.assert_array_equal(m.kv_segment_ids, [[1, 0, 0, 0], [1, 1, 1, 1]])
    assert m.causal and m.window == (2, 2)
    t = Mask.from_token_ids(jnp.array([[5, 0]]), jnp.array([[7, 7, 0]]), pad_id=0)
    np.testing.assert_array_equal(t.q_segment_ids, [[1, 0]])
    np.testing.assert_array_equal(t.kv_segment_ids, [[1, 1, 0]])
    assert Mask(window=(None, None)).window is None
    assert Mask(window=(3, None)).window == (3, None)
    visible = np.asarray(Mask(causal=True, window=(1, None)).materialize(1, 1, 3, 3))[0, 0]
    np.testing.assert_array_equal(visible, [[1, 0, 0], [1, 1, 0], [0, 1, 1]])


# ----------------------------------------------------------------------------------- logit moments
@pytest.mark.parametrize("backend", BACKENDS)
def test_logit_std_shows_a_missing_scale_and_ignores_an_offset(backend):
    """Scaled unit-normal q, k at d_k = 64 give a logit std near 1 per row, unscaled ones near 8; a large
    common offset of the logits (q.k + 1e3 via an extra dimension) moves the mean, not the std."""
    B, T, H, D = 1, 256, 2, 64
    rng = np.random.default_rng(5)
    q, k, v, _ = random_qkv(rng, B, T, T, H, H, D, 8, np.float32)
    q_off = np.concatenate([q, np.full((B, T, H, 1), 1e3, np.float32)], -1)
    k_off = np.concatenate([k, np.ones((B, T, H, 1), np.float32)], -1)
    mask = Mask(causal=True)
    _skip_if_unsupported(backend, q, k, v, mask)
    f = fast_jit(lambda q, k, s: attention.attention(q, k, v, mask, implementation=backend, scale=s,
                                                     return_stats=True, backend_options=dict(options_for(backend)))[1],
                 static_argnums=2)
    scaled, unscaled, offset = f(q, k, 1 / 8), f(q, k, 1.0), f(q_off, k_off, 1.0)
    rows = slice(64, None)  # rows with enough keys for a sample std
    assert abs(float(jnp.mean(scaled.logit_std[..., rows])) - 1.0) < 0.1
    assert abs(float(jnp.mean(unscaled.logit_std[..., rows])) - 8.0) < 0.8
    np.testing.assert_allclose(offset.logit_std, unscaled.logit_std, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(offset.logit_mean, unscaled.logit_mean + 1e3, rtol=1e-6, atol=2e-3)
