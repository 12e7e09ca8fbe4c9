"""split/merge_heads, multi_head_attention and the attention variants against NumPy float64 references."""
import re

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

import attention
from attention import Mask

RTOL = ATOL = 2e-5


def _key(seed):
    """An RBG key: compiling threefry sampling costs ~2 s of CPU per program, RBG ~0.2 s."""
    return jax.random.key(seed, impl="rbg")


def _normal(seed, shape, dtype=jnp.float32):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape, np.float32), dtype)


def _qkv(B=2, Tq=5, Tk=7, H=4, Hkv=2, D=8, Dv=6, seed=0):
    return _normal(seed, (B, Tq, H, D)), _normal(seed + 1, (B, Tk, Hkv, D)), _normal(seed + 2, (B, Tk, Hkv, Dv))


def np_visible(B, Tq, Tk, *, causal=False, q_lengths=None, kv_lengths=None):
    """[B, Tq, Tk] bool, top-left aligned positions."""
    vis = np.ones((B, Tq, Tk), bool)
    if causal:
        vis &= np.arange(Tk)[None, None, :] <= np.arange(Tq)[None, :, None]
    if q_lengths is not None:
        vis &= (np.arange(Tq)[None, :] < np.asarray(q_lengths)[:, None])[:, :, None]
    if kv_lengths is not None:
        vis &= (np.arange(Tk)[None, :] < np.asarray(kv_lengths)[:, None])[:, None, :]
    return vis


def np_softmax_attend(s, vis, v):
    """s: [B, H, Tq, Tk] float64, vis: [B, Tq, Tk], v: [B, Tk, Hkv, Dv] -> ([B, Tq, H, Dv], p)."""
    B, H = s.shape[:2]
    Hkv = v.shape[2]
    vis = vis[:, None]
    s = np.where(vis, s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.where(vis, np.exp(s - m), 0.0)
    denom = e.sum(-1, keepdims=True)
    p = e / np.where(denom > 0, denom, 1.0)
    v_full = np.repeat(np.asarray(v, np.float64), H // Hkv, axis=2)  # [B, Tk, H, Dv]
    return np.einsum("bhts,bshd->bthd", p, v_full), p


def _f64(x):
    return np.asarray(x, np.float64)


# ------------------------------------------------------------------------------------------- split / merge
def test_split_merge_round_trip():
    x = _normal(0, (2, 3, 12))
    y = attention.split_heads(x, 4)
    assert y.shape == (2, 3, 4, 3)
    np.testing.assert_array_equal(y[:, :, 1], x[:, :, 3:6])
    np.testing.assert_array_equal(attention.merge_heads(y), x)


@pytest.mark.parametrize(
    "call, pattern",
    [
        (lambda: attention.split_heads(jnp.zeros((2, 3, 10)), 4),
         r"split_heads: x has shape \(2, 3, 10\).*num_heads=4"),
        (lambda: attention.split_heads(jnp.zeros((2, 12)), 4), r"split_heads: x has shape \(2, 12\).*\[B, T, H\*D\]"),
        (lambda: attention.split_heads(jnp.zeros((2, 3, 12)), 0), r"split_heads: num_heads.*0"),
        (lambda: attention.merge_heads(jnp.zeros((2, 3, 12))),
         r"merge_heads: x has shape \(2, 3, 12\).*\[B, T, H, D\]"),
    ],
)
def test_split_merge_errors(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()


# ----------------------------------------------------------------------------------------- multi-head
def np_mha(x_q, x_kv, params, vis, scale):
    p = {k: _f64(v) for k, v in params.items()}
    q = np.einsum("btm,mhd->bthd", _f64(x_q), p["wq"]) + p.get("bq", 0.0)
    k = np.einsum("bsm,mkd->bskd", _f64(x_kv), p["wk"]) + p.get("bk", 0.0)
    v = np.einsum("bsm,mkd->bskd", _f64(x_kv), p["wv"]) + p.get("bv", 0.0)
    H, Hkv = q.shape[2], k.shape[2]
    s = np.einsum("bthd,bshd->bhts", q, np.repeat(k, H // Hkv, axis=2)) * scale
    o, _ = np_softmax_attend(s, vis, v)
    return np.einsum("bthv,hvm->btm", o, p["wo"]) + p.get("bo", 0.0)


def _mha_params(Hkv=2, use_bias=True, Dm=16, Dkv=12, H=4, Dk=8, Dv=6):
    """Random weights (and non-zero biases) in multi_head_attention's layout."""
    shapes = {"wq": (Dm, H, Dk), "wk": (Dkv, Hkv, Dk), "wv": (Dkv, Hkv, Dv), "wo": (H, Dv, Dm)}
    if use_bias:
        shapes.update(bq=(H, Dk), bk=(Hkv, Dk), bv=(Hkv, Dv), bo=(Dm,))
    return {name: 0.3 * _normal(i, shape) for i, (name, shape) in enumerate(shapes.items())}


def test_init_mha_params_layout():
    params = attention.init_mha_params(_key(1), 16, 4, 8, 6, num_kv_heads=2, d_kv=12, use_bias=True)
    assert {k: v.shape for k, v in params.items()} == {k: v.shape for k, v in _mha_params(2).items()}
    np.testing.assert_array_equal(params["bo"], 0.0)
    assert 0.5 < float(jnp.std(params["wq"])) * 4 < 2.0  # variance 1/fan_in = 1/16
    assert attention.init_mha_params(_key(1), 16, 4, 8, 6, dtype=jnp.bfloat16)["wo"].dtype == jnp.bfloat16


@pytest.mark.parametrize("implementation, Hkv", [("reference", 2), ("xla", 2), ("xla", 1), ("xla", 4)])
def test_mha_matches_numpy(implementation, Hkv):
    B, Tq, Tk = 2, 5, 7
    x_q, x_kv = _normal(0, (B, Tq, 16)), _normal(1, (B, Tk, 12))
    params = _mha_params(Hkv)
    mask = Mask.from_lengths(jnp.array([5, 3]), jnp.array([7, 4]), Tq, Tk, causal=True)
    mha = jax.jit(lambda x_q, x_kv, params: attention.multi_head_attention(
        x_q, x_kv, params, mask, num_heads=4, implementation=implementation))
    out = mha(x_q, x_kv, params)
    want = np_mha(x_q, x_kv, params, np_visible(B, Tq, Tk, causal=True, q_lengths=[5, 3], kv_lengths=[7, 4]), 8**-0.5)
    assert out.shape == (B, Tq, 16) and out.dtype == jnp.float32
    np.testing.assert_allclose(out, want, rtol=RTOL, atol=ATOL)


def test_mha_backends_agree_with_stats_and_grads():
    x = _normal(0, (2, 6, 16))
    params = attention.init_mha_params(_key(1), 16, 4, 8, 8, num_kv_heads=2)
    mask = Mask.from_lengths(None, jnp.array([6, 4]), 6, 6, causal=True)

    def loss(params, impl):
        out, stats = attention.multi_head_attention(x, None, params, mask, implementation=impl, scale=0.5,
                                                    return_stats=True)
        return jnp.sum(out**2), (out, stats)

    grad = jax.jit(jax.value_and_grad(loss, has_aux=True), static_argnums=1)
    (_, (o_ref, st_ref)), g_ref = grad(params, "reference")
    (_, (o_xla, st_xla)), g_xla = grad(params, "xla")
    np.testing.assert_allclose(o_ref, o_xla, rtol=RTOL, atol=ATOL)
    for name in ("entropy", "max_logit", "lse", "sink"):
        np.testing.assert_allclose(getattr(st_ref, name), getattr(st_xla, name), rtol=RTOL, atol=ATOL)
    for name in params:
        np.testing.assert_allclose(g_ref[name], g_xla[name], rtol=1e-4, atol=1e-5)
    # The stats are those of attention.attention on the projected heads.
    q = jnp.einsum("btm,mhd->bthd", x, params["wq"])
    k = jnp.einsum("btm,mhd->bthd", x, params["wk"])
    v = jnp.einsum("btm,mhd->bthd", x, params["wv"])
    _, st = jax.jit(lambda q, k, v: attention.attention(q, k, v, mask, implementation="reference", scale=0.5,
                                                        return_stats=True))(q, k, v)
    assert st_ref.entropy.shape == (2, 4, 6)
    np.testing.assert_allclose(st_ref.entropy, st.entropy, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(st_ref.valid, st.valid)


def test_mha_jit_bf16_and_dropout():
    x = _normal(0, (2, 4, 16), jnp.bfloat16)
    params = _mha_params(4, use_bias=False, Dkv=16)  # float32 weights, bf16 compute
    out = jax.jit(lambda x, p: attention.multi_head_attention(x, x, p))(x, params)
    assert out.dtype == jnp.bfloat16 and out.shape == (2, 4, 16)
    want = np_mha(x, x, params, np_visible(2, 4, 4), 8**-0.5)
    np.testing.assert_allclose(np.asarray(out, np.float32), want, atol=0.05)
    assert np.max(np.abs(want)) > 0.5
    dropped = jax.jit(lambda x, p, rng: attention.multi_head_attention(
        x, x, p, implementation="reference", dropout_rate=0.5, dropout_rng=rng))
    a = dropped(x, params, _key(2))
    b = dropped(x, params, _key(2))
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(np.asarray(a, np.float32), np.asarray(out, np.float32), atol=0.05)


def test_mha_errors_name_the_argument():
    x, xkv = _normal(0, (2, 5, 16)), _normal(1, (2, 7, 12))
    params = _mha_params(2, use_bias=True)
    mha = attention.multi_head_attention
    with pytest.raises(ValueError, match=r"x_q has shape \(2, 5\).*\[B, Tq, Dm\]"):
        mha(x[..., 0], xkv, params)
    with pytest.raises(ValueError, match=r"x_kv has shape \(3, 7, 12\).*B=2"):
        mha(x, _normal(1, (3, 7, 12)), params)
    with pytest.raises(ValueError, match=r"x_kv has dtype bfloat16"):
        mha(x, xkv.astype(jnp.bfloat16), params)
    with pytest.raises(ValueError, match=r"x_q has dtype int32"):
        mha(x.astype(jnp.int32), xkv, params)
    with pytest.raises(ValueError, match=r"params\['wk'\] has shape \(16, 2, 8\).*Dm_kv=12"):
        mha(x, xkv, {**params, "wk": jnp.zeros((16, 2, 8))})
    with pytest.raises(ValueError, match=r"params\['wo'\] has shape \(4, 6, 12\).*\(4, 6, 16\)"):
        mha(x, xkv, {**params, "wo": jnp.zeros((4, 6, 12))})
    with pytest.raises(ValueError, match=r"params\['bk'\] has shape \(4, 8\).*\(2, 8\)"):
        mha(x, xkv, {**params, "bk": jnp.zeros((4, 8))})
    with pytest.raises(ValueError, match=r"3 query heads .* 2 key/value heads"):
        mha(x, xkv, {**params, "wq": jnp.zeros((16, 3, 8)), "bq": jnp.zeros((3, 8)), "wo": jnp.zeros((3, 6, 16))})
    with pytest.raises(ValueError, match=r"unknown keys \['b_q'\]"):
        mha(x, xkv, {**params, "b_q": jnp.zeros((4, 8))})
    with pytest.raises(ValueError, match=r"missing \['wv'\]"):
        mha(x, xkv, {k: w for k, w in params.items() if k != "wv"})
    with pytest.raises(ValueError, match=r"num_heads=8 but params\['wq'\] has 4 heads"):
        mha(x, xkv, params, num_heads=8)
    with pytest.raises(ValueError, match=r"num_kv_heads=4 but params\['wk'\] has 2 heads"):
        mha(x, xkv, params, num_kv_heads=4)
    with pytest.raises(ValueError, match=r"init_mha_params: num_heads=4 must be a multiple of num_kv_heads=3"):
        attention.init_mha_params(_key(0), 16, 4, 8, 8, num_kv_heads=3)


# -------------------------------------------------------------------------------------------- additive
def np_additive_scores(q, k, params):
    p = {n: _f64(w) for n, w in params.items()}
    H, Hkv = q.shape[2], k.shape[2]
    qp = np.einsum("bthd,hda->bhta", _f64(q), p["w_q"]) + p.get("b", np.zeros_like(p["v_a"]))[None, :, None]
    kp = np.einsum("bshd,hda->bhsa", np.repeat(_f64(k), H // Hkv, axis=2), p["w_k"])
    return np.einsum("bhtsa,ha->bhts", np.tanh(qp[:, :, :, None] + kp[:, :, None]), p["v_a"])


@pytest.mark.parametrize("Hkv", [4, 1])
def test_additive_matches_numpy_with_masks(Hkv):
    B, Tq, Tk, H = 2, 5, 7, 4
    q, k, v = _qkv(B, Tq, Tk, H, Hkv)
    params = {"w_q": 0.3 * _normal(5, (H, 8, 10)), "w_k": 0.3 * _normal(6, (H, 8, 10)),
              "v_a": _normal(7, (H, 10)), "b": 0.3 * _normal(8, (H, 10))}
    mask = Mask.from_lengths(jnp.array([5, 2]), jnp.array([7, 3]), Tq, Tk, causal=True)
    out, stats = jax.jit(lambda q, k, v, params: attention.additive_attention(
        q, k, v, params, mask, return_stats=True))(q, k, v, params)
    vis = np_visible(B, Tq, Tk, causal=True, q_lengths=[5, 2], kv_lengths=[7, 3])
    s = np_additive_scores(q, k, params)
    want, p = np_softmax_attend(s, vis, v)
    np.testing.assert_allclose(out, want, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(out[1, 2:], 0.0)  # padding query rows
    np.testing.assert_allclose(stats.weights, p, rtol=RTOL, atol=ATOL)
    ent = -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=-1)
    np.testing.assert_allclose(stats.entropy, ent, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(stats.valid, np.broadcast_to(vis.any(-1)[:, None], (B, H, Tq)))
    # Dense masks compose too.
    dense = jnp.asarray(np.random.default_rng(0).random((B, 1, Tq, Tk)) < 0.6)
    out_d = jax.jit(lambda q, k, v, params, dense: attention.additive_attention(
        q, k, v, params, Mask(dense=dense)))(q, k, v, params, dense)
    want_d, _ = np_softmax_attend(s, np.asarray(dense)[:, 0], v)
    np.testing.assert_allclose(out_d, want_d, rtol=RTOL, atol=ATOL)


def test_additive_planted_key_and_grads():
    q, k, v = _qkv(1, 3, 4, 2, 2)
    v = v.at[0, 3].set(300.0)  # masked key carries a huge value
    params = attention.init_additive_params(_key(1), 2, 8, 4, use_bias=False)
    assert sorted(params) == ["v_a", "w_k", "w_q"] and params["w_k"].shape == (2, 8, 4)
    mask = Mask.from_lengths(jnp.array([2]), jnp.array([3]), 3, 4)

    def loss(q, k, v):
        return jnp.sum(attention.additive_attention(q, k, v, params, mask) ** 2)

    out = jax.jit(lambda q, k, v: attention.additive_attention(q, k, v, params, mask))(q, k, v)
    assert float(jnp.max(jnp.abs(out))) < 10.0
    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v)
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in grads)
    np.testing.assert_array_equal(grads[1][0, 3], 0.0)
    np.testing.assert_array_equal(grads[2][0, 3], 0.0)
    np.testing.assert_array_equal(grads[0][0, 2], 0.0)  # padding query


def test_additive_errors():
    q, k, v = _qkv()
    params = {"w_q": jnp.zeros((4, 8, 10)), "w_k": jnp.zeros((4, 8, 10)), "v_a": jnp.zeros((4, 10))}
    with pytest.raises(ValueError, match=r"params\['w_k'\] has shape \(4, 8, 9\); expected \[H=4, D=8, A=10\]"):
        attention.additive_attention(q, k, v, {**params, "w_k": jnp.zeros((4, 8, 9))})
    with pytest.raises(ValueError, match=r"params\['v_a'\] has shape \(2, 10\); expected \[H=4, A=10\]"):
        attention.additive_attention(q, k, v, {**params, "v_a": jnp.zeros((2, 10))})
    with pytest.raises(ValueError, match=r"params has keys .*expected \('w_q', 'w_k', 'v_a'\)"):
        attention.additive_attention(q, k, v, {"w_q": params["w_q"]})
    with pytest.raises(ValueError, match=r"additive_attention: v has shape \(2, 6, 2, 6\).*Tk=7"):
        attention.additive_attention(q, k, v[:, :6], params)
    with pytest.raises(ValueError, match=r"Mask.kv_segment_ids has shape \(2, 5\)"):
        attention.additive_attention(q, k, v, params, Mask(kv_segment_ids=jnp.ones((2, 5), jnp.int32)))


# ---------------------------------------------------------------------------------------------- linear
def np_linear(q, k, v, vis, phi=lambda x: np.where(x > 0, x + 1.0, np.exp(x)), eps=1e-6):
    """The same kernelized formula, quadratically: A = phi(q) phi(k)^T on visible pairs."""
    H, Hkv = q.shape[2], k.shape[2]
    fq, fk = phi(_f64(q)), phi(np.repeat(_f64(k), H // Hkv, axis=2))
    a = np.einsum("bthf,bshf->bhts", fq, fk) * vis[:, None]
    num = np.einsum("bhts,bshd->bthd", a, np.repeat(_f64(v), H // Hkv, axis=2))
    return num / (np.moveaxis(a.sum(-1), 1, 2)[..., None] + eps)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("Tq, Tk, Hkv, chunk", [(7, 7, 2, 3), (5, 9, 1, 2), (9, 5, 4, 4)])
def test_linear_matches_quadratic(causal, Tq, Tk, Hkv, chunk):
    B = 2
    q, k, v = _qkv(B, Tq, Tk, 4, Hkv)
    q_len, kv_len = [Tq, Tq - 2], [Tk - 1, 3]
    mask = Mask.from_lengths(jnp.array(q_len), jnp.array(kv_len), Tq, Tk, causal=causal)
    out = jax.jit(lambda q, k, v, mask: attention.linear_attention(q, k, v, mask, chunk_size=chunk))(q, k, v, mask)
    want = np_linear(q, k, v, np_visible(B, Tq, Tk, causal=causal, q_lengths=q_len, kv_lengths=kv_len))
    assert out.shape == (B, Tq, 4, 6)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(out[1, Tq - 2:], 0.0)


def test_linear_feature_maps_jit_and_grads():
    q, k, v = _qkv(1, 6, 6, 2, 2)
    relu = jax.jit(lambda q, k, v: attention.linear_attention(q, k, v, Mask(causal=True), feature_map="relu"))(q, k, v)
    want = np_linear(q, k, v, np_visible(1, 6, 6, causal=True), phi=lambda x: np.maximum(x, 0))
    np.testing.assert_allclose(relu, want, rtol=1e-4, atol=1e-5)
    custom = jax.jit(lambda q, k, v: attention.linear_attention(q, k, v, feature_map=lambda x: jnp.exp(x / 4)))(q, k, v)
    np.testing.assert_allclose(custom, np_linear(q, k, v, np_visible(1, 6, 6), phi=lambda x: np.exp(x / 4)),
                               rtol=1e-4, atol=1e-5)
    # Padding keys get zero gradient; rows with no visible key (query 0 under causal with key 0 padded) stay finite.
    mask = Mask(causal=True, kv_segment_ids=jnp.array([[0, 1, 1, 1, 0, 1]]))
    grads = jax.jit(jax.grad(lambda q, k, v: jnp.sum(attention.linear_attention(q, k, v, mask, chunk_size=4) ** 2),
                             argnums=(0, 1, 2)))(q, k, v)
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in grads)
    np.testing.assert_array_equal(grads[1][0, 4], 0.0)
    np.testing.assert_array_equal(grads[2][0, 0], 0.0)
    out = jax.jit(lambda q, k, v: attention.linear_attention(q, k, v, mask, chunk_size=4))(q, k, v)
    np.testing.assert_array_equal(out[0, 0], 0.0)


def _max_intermediate(fn, *args):
    """Largest number of elements of any value in fn's jaxpr, sub-jaxprs included."""
    biggest = 0

    def walk(jaxpr):
        nonlocal biggest
        for eqn in jaxpr.eqns:
            for var in eqn.outvars:
                biggest = max(biggest, int(np.prod(var.aval.shape)))
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                walk(sub)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return biggest


@pytest.mark.parametrize("causal", [False, True])
def test_linear_builds_nothing_quadratic(causal):
    T = 4096
    spec = jax.ShapeDtypeStruct((1, T, 1, 16), jnp.float32)
    mask = Mask(causal=causal, q_segment_ids=jnp.ones((1, T), jnp.int32), kv_segment_ids=jnp.ones((1, T), jnp.int32))

    def linear(q, k, v):
        return jax.grad(lambda q: jnp.sum(attention.linear_attention(q, k, v, mask)))(q)

    assert _max_intermediate(linear, spec, spec, spec) < T * T // 16
    # The detector does see an n x n matrix where one is built.
    quadratic = jax.grad(lambda q, k, v: jnp.sum(attention.attention(q, k, v, mask, implementation="reference")))
    assert _max_intermediate(quadratic, spec, spec, spec) >= T * T


@pytest.mark.parametrize(
    "mask, pattern",
    [
        (Mask(window=2), r"Mask.window=\(2, 2\) \(a sliding window\)"),
        (Mask(dense=jnp.ones((1, 1, 5, 7), bool)), r"Mask.dense \(a dense mask\)"),
        (Mask(q_positions=jnp.zeros((2, 5), jnp.int32)), r"custom positions"),
        (Mask(kv_segment_ids=jnp.array([[1] * 4 + [2] * 3] * 2)), r"Mask.kv_segment_ids holds ids up to 2.*packing"),
    ],
)
def test_linear_rejects_unsupported_masks(mask, pattern):
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=pattern):
        attention.linear_attention(q, k, v, mask)


def test_linear_packed_ids_under_jit_are_nan_not_wrong():
    q, k, v = _qkv(2, 4, 4, 2, 2)
    seg = jnp.array([[1, 1, 2, 2], [1, 1, 1, 0]])
    out = jax.jit(lambda seg: attention.linear_attention(q, k, v, Mask(q_segment_ids=seg, kv_segment_ids=seg)))(seg)
    assert bool(jnp.all(jnp.isnan(out[0])))
    assert bool(jnp.all(jnp.isfinite(out[1])))


def test_linear_errors():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"feature_map 'softmax' is unknown"):
        attention.linear_attention(q, k, v, feature_map="softmax")
    with pytest.raises(ValueError, match=r"feature_map\(q\) has shape \(2, 5, 4\); expected \(2, 5, 4, 'F'\)"):
        attention.linear_attention(q, k, v, feature_map=lambda x: x.sum(-1))
    with pytest.raises(ValueError, match=r"linear_attention: k has shape \(2, 7, 3, 8\).*Hkv=3"):
        attention.linear_attention(q, jnp.zeros((2, 7, 3, 8)), jnp.zeros((2, 7, 3, 6)))
    with pytest.raises(ValueError, match=r"linear_attention: q, k, v must share a dtype"):
        attention.linear_attention(q.astype(jnp.bfloat16), k, v)
    with pytest.raises(ValueError, match=r"eps must be a positive float; got 0"):
        attention.linear_attention(q, k, v, eps=0)


# ------------------------------------------------------------------------------------------------ hard
def test_hard_forward_is_one_visible_value_row():
    B, Tq, Tk, H, Hkv = 2, 6, 5, 4, 2
    q, k, v = _qkv(B, Tq, Tk, H, Hkv)
    # A masked key with a huge logit and a huge value: must never be chosen.
    k = k.at[:, 4].set(50.0 * q[:, 0, :Hkv])
    v = v.at[:, 4].set(300.0)
    mask = Mask.from_lengths(jnp.array([6, 3]), jnp.array([4, 4]), Tq, Tk, causal=True)
    vis = np_visible(B, Tq, Tk, causal=True, q_lengths=[6, 3], kv_lengths=[4, 4])
    hard = jax.jit(lambda q, k, v, rng: attention.hard_attention(q, k, v, mask, rng=rng, return_stats=True))
    v_np = np.asarray(v)
    for seed in range(3):
        out, stats = hard(q, k, v, _key(seed))
        out, w = np.asarray(out), np.asarray(stats.weights)  # w: [B, H, Tq, Tk]
        assert set(np.unique(w)) <= {0.0, 1.0}
        np.testing.assert_array_equal(w.sum(-1), np.broadcast_to(vis.any(-1)[:, None], (B, H, Tq)).astype(float))
        assert not np.any(w[~np.broadcast_to(vis[:, None], w.shape)])
        chosen = w.argmax(-1)  # [B, H, Tq]
        for b in range(B):
            for h in range(H):
                for t in range(Tq):
                    want = v_np[b, chosen[b, h, t], h // (H // Hkv)] if vis[b, t].any() else 0.0
                    np.testing.assert_array_equal(out[b, t, h], want)


def test_hard_samples_follow_softmax():
    """Gumbel-max: the chosen key is a sample from softmax(scale * q.k) over the visible keys."""
    n = 4000
    q = jnp.broadcast_to(jnp.array([1.0, 0.0]), (1, n, 1, 2))
    k = jnp.array([[[[0.0, 0.0]], [[1.0, 0.0]], [[2.0, 0.0]], [[9.0, 0.0]]]])  # [1, 4, 1, 2]
    v = jnp.eye(4)[None, :, None, :]
    mask = Mask(kv_segment_ids=jnp.array([[1, 1, 1, 0]]))
    out = jax.jit(lambda q, k, v: attention.hard_attention(q, k, v, mask, rng=jax.random.key(0), scale=1.0))(q, k, v)
    freq = np.asarray(out[0, :, 0]).mean(0)
    want = np.exp([0.0, 1.0, 2.0]) / np.exp([0.0, 1.0, 2.0]).sum()
    np.testing.assert_allclose(freq[:3], want, atol=0.03)
    assert freq[3] == 0.0


def test_hard_gradients_are_the_soft_gumbel_gradients():
    q, k, v = _qkv(2, 5, 6, 4, 2)
    mask = Mask.from_lengths(jnp.array([5, 3]), jnp.array([6, 4]), 5, 6, causal=True)
    w_out = _normal(9, (2, 5, 4, 6))
    rng = _key(7)

    def loss(q, k, v, hard):
        out = attention.hard_attention(q, k, v, mask, rng=rng, temperature=0.7, hard=hard)
        return jnp.sum(out * w_out)  # linear in the weights: dL/dp is the same for hard and soft

    grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2)), static_argnums=3)
    g_hard = grad(q, k, v, True)
    g_soft = grad(q, k, v, False)
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in g_hard)
    assert float(jnp.max(jnp.abs(g_hard[0]))) > 1e-3
    np.testing.assert_allclose(g_hard[0], g_soft[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g_hard[1], g_soft[1], rtol=1e-5, atol=1e-6)
    # v's gradient goes through the one-hot weights the forward pass used.
    _, stats = jax.jit(lambda q, k, v: attention.hard_attention(q, k, v, mask, rng=rng, temperature=0.7,
                                                                return_stats=True))(q, k, v)
    p = np.asarray(stats.weights).reshape(2, 2, 2, 5, 6)  # [B, Hkv, G, Tq, Tk]
    g_v = np.einsum("bkgts,btkgd->bskd", p, np.asarray(w_out).reshape(2, 5, 2, 2, 6))
    np.testing.assert_allclose(g_hard[2], g_v, rtol=1e-5, atol=1e-6)
    # Padding queries and padding keys get no gradient.
    np.testing.assert_array_equal(g_hard[0][1, 3:], 0.0)
    np.testing.assert_array_equal(g_hard[1][1, 4:], 0.0)


def test_hard_soft_and_temperature_array_under_jit():
    q, k, v = _qkv(1, 3, 4, 2, 2)
    rng = _key(3)
    soft = jax.jit(lambda t: attention.hard_attention(q, k, v, rng=rng, temperature=t, hard=False))(jnp.float32(0.5))
    s = np.einsum("bthd,bshd->bhts", _f64(q), _f64(k)) * 8**-0.5
    g = _f64(jax.random.gumbel(rng, (1, 2, 3, 4), jnp.float32))
    want, _ = np_softmax_attend((s + g) / 0.5, np_visible(1, 3, 4), v)
    np.testing.assert_allclose(soft, want, rtol=1e-5, atol=1e-6)


def test_hard_errors():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"hard_attention: rng must be a jax.random key; got NoneType"):
        attention.hard_attention(q, k, v, rng=None)
    with pytest.raises(ValueError, match=r"rng has shape \(2,\); expected a single key"):
        attention.hard_attention(q, k, v, rng=jax.random.split(_key(0)))
    with pytest.raises(ValueError, match=r"temperature must be > 0; got 0.0"):
        attention.hard_attention(q, k, v, rng=_key(0), temperature=0.0)
    with pytest.raises(ValueError, match=r"temperature has shape \(3,\)"):
        attention.hard_attention(q, k, v, rng=_key(0), temperature=jnp.ones(3))
    message = "hard_attention: q has shape (2, 5, 32); expected 4 dims [B, Tq, H, D]"
    with pytest.raises(ValueError, match=re.escape(message)):
        attention.hard_attention(q.reshape(2, 5, 32), k, v, rng=_key(0))


def test_variants_keep_bf16_inputs_close_to_float32():
    q, k, v = _qkv(1, 4, 4, 2, 1)
    params = {"w_q": 0.3 * _normal(5, (2, 8, 3)), "w_k": 0.3 * _normal(6, (2, 8, 3)), "v_a": _normal(7, (2, 3))}
    mask = Mask(causal=True)
    calls = {
        "additive": lambda q, k, v: attention.additive_attention(q, k, v, params, mask),
        "linear": lambda q, k, v: attention.linear_attention(q, k, v, mask),
        "hard": lambda q, k, v: attention.hard_attention(q, k, v, mask, rng=_key(0), hard=False),
    }
    for name, call in calls.items():
        both = jax.jit(lambda q, k, v: (call(q, k, v), call(*(x.astype(jnp.bfloat16) for x in (q, k, v)))))
        want, got = both(q, k, v)
        assert got.dtype == jnp.bfloat16, name
        np.testing.assert_allclose(np.asarray(got, np.float32), want, atol=0.05, err_msg=name)
