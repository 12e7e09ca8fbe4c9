"""``MultiHeadAttention``: the Q/K/V/O projections around ``attention.attention``.

The layer owns the parameters and the per-head knobs (GQA/MQA, d_k != d_v, scale, QK-LayerNorm, RoPE,
attention dropout, backend); the attention math itself is always ``attention.attention``.
"""
from __future__ import annotations

import math
from typing import Optional, Union

import jax
import jax.numpy as jnp
from flax import nnx

import attention as attn
from attention.reference import accumulator_dtype, grouped_logits, grouped_values, masked_softmax
from attention.stats import stats_from_logits
from models.config import check_head_groups
from models.interventions import LayerIntervention
from models.layers import apply_rope, bias_init, kernel_init

Stats = Optional[attn.AttentionStats]


def check_backend(implementation: str, *, num_heads: int, num_kv_heads: int, qk_dim: int, v_dim: int,
                  dtype, dropout: bool) -> None:
    """Raise ValueError at build time when ``implementation`` cannot serve this layer's calls.

    With "auto" every call picks a backend that supports it (the registry skips backends without dropout
    when a training call asks for attention dropout), so only named backends are checked.
    """
    if implementation == "auto":
        return
    if implementation not in attn.available_backends():
        raise ValueError(
            f"attention_impl={implementation!r} is not a registered backend; expected 'auto' or one of "
            f"{attn.available_backends()}"
        )
    seg = jnp.ones((1, 1), jnp.int32)
    request = attn.Request(
        batch=1, q_len=1, kv_len=1, num_heads=num_heads, num_kv_heads=num_kv_heads, qk_dim=qk_dim, v_dim=v_dim,
        dtype=jnp.dtype(dtype), mask=attn.Mask(causal=True, q_segment_ids=seg, kv_segment_ids=seg),
        dropout=dropout, return_stats=False, platform=attn.api.default_platform(),
    )
    try:
        attn.select_backend(implementation, request)
    except ValueError as e:
        hint = " (attention_dropout_rate > 0; use attention_impl='auto')" if dropout else ""
        raise ValueError(f"attention_impl={implementation!r} cannot serve this model{hint}: {e}") from None


def check_widths(d_model: int, num_heads: int, num_kv_heads: int, qk_dim: int, v_dim: int,
                 rope_base: Optional[float], dropout_rate: float) -> None:
    """ValueError naming the first of a standalone layer's widths, RoPE width or dropout rate that is invalid."""
    for name, value in (("d_model", d_model), ("num_heads", num_heads), ("num_kv_heads", num_kv_heads),
                        ("qk_dim", qk_dim), ("v_dim", v_dim)):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"MultiHeadAttention: {name} must be a positive int; got {value!r}")
    check_head_groups("MultiHeadAttention", num_heads, num_kv_heads)
    if rope_base is not None and qk_dim % 2 != 0:
        raise ValueError(f"MultiHeadAttention: RoPE needs an even qk_dim; got qk_dim={qk_dim}")
    if not 0.0 <= dropout_rate < 1.0:
        raise ValueError(f"MultiHeadAttention: dropout_rate must be in [0, 1); got {dropout_rate!r}")


class MultiHeadAttention(nnx.Module):
    """Multi-head attention with independent head counts and widths.

    Queries: ``num_heads`` heads of ``qk_dim``; keys: ``num_kv_heads`` heads of ``qk_dim``; values:
    ``num_kv_heads`` heads of ``v_dim``; the output projection maps ``num_heads * v_dim`` back to ``d_model``.
    ``scale=None`` is 1/sqrt(qk_dim). ``rope_base`` set: RoPE on queries and keys at the given positions.
    ``qk_layernorm``: LayerNorm (scale only) over each head's qk_dim on queries and keys, before RoPE.
    ``kind``: a registered attention kind (``attention.available_kinds()``: "softmax" runs ``attention.attention``
    with ``implementation``; kinds with an ``init`` keep their per-head parameters under the kind's name; random
    kinds draw from the dropout stream when training); a combination the kind cannot serve is refused here.
    ``uniform``: the weights are frozen to uniform over the visible keys (Wiegreffe & Pinter's baseline); the
    query/key projections then get no gradient.
    ``checked``: the widths, RoPE and dropout rate come from a ``TransformerConfig``, which validated them when
    it was made (the models pass True), so they are not checked again here; the kind and backend still are.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        num_kv_heads: Optional[int] = None,
        qk_dim: int,
        v_dim: int,
        use_bias: bool = True,
        scale: Optional[float] = None,
        qk_layernorm: bool = False,
        rope_base: Optional[float] = None,
        rope_scaling: tuple = (),
        qkv_bias: Optional[bool] = None,
        dropout_rate: float = 0.0,
        implementation: str = "auto",
        backend_options: tuple = (),
        dtype=jnp.float32,
        param_dtype=jnp.float32,
        norm_epsilon: float = 1e-6,
        kind: str = "softmax",
        uniform: bool = False,
        checked: bool = False,
        rngs: nnx.Rngs,
    ):
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if not checked:
            check_widths(d_model, num_heads, num_kv_heads, qk_dim, v_dim, rope_base, dropout_rate)
        try:
            spec = attn.check_kind(kind, *(("dropout",) if dropout_rate > 0 else ()))
        except ValueError as e:
            raise ValueError(f"MultiHeadAttention: {e}") from None
        if spec.backends:
            check_backend(implementation, num_heads=num_heads, num_kv_heads=num_kv_heads, qk_dim=qk_dim,
                          v_dim=v_dim, dtype=dtype, dropout=dropout_rate > 0)
        self.kind = kind
        self.uniform = bool(uniform)
        self.num_heads, self.num_kv_heads, self.qk_dim, self.v_dim = num_heads, num_kv_heads, qk_dim, v_dim
        self.scale = 1.0 / math.sqrt(qk_dim) if scale is None else float(scale)
        self.rope_base = rope_base
        self.rope_scaling = tuple(rope_scaling)
        self.dropout_rate = float(dropout_rate)
        self.implementation = implementation
        self.backend_options = tuple(backend_options)

        qkv_bias = use_bias if qkv_bias is None else qkv_bias

        def proj(heads: int, dim: int) -> nnx.LinearGeneral:
            return nnx.LinearGeneral(d_model, (heads, dim), use_bias=qkv_bias, dtype=dtype, param_dtype=param_dtype,
                                     kernel_init=kernel_init, bias_init=bias_init, rngs=rngs)

        self.query = proj(num_heads, qk_dim)  # kernel [d_model, H, Dk]
        self.key = proj(num_kv_heads, qk_dim)  # kernel [d_model, Hkv, Dk]
        self.value = proj(num_kv_heads, v_dim)  # kernel [d_model, Hkv, Dv]
        self.out = nnx.LinearGeneral((num_heads, v_dim), d_model, axis=(-2, -1), use_bias=use_bias, dtype=dtype,
                                     param_dtype=param_dtype, kernel_init=kernel_init, bias_init=bias_init,
                                     rngs=rngs)  # kernel [H, Dv, d_model]
        if qk_layernorm:
            norm = lambda: nnx.LayerNorm(qk_dim, epsilon=norm_epsilon, use_bias=False, dtype=dtype,  # noqa: E731
                                         param_dtype=param_dtype, rngs=rngs)
            self.query_norm, self.key_norm = norm(), norm()
        else:
            self.query_norm, self.key_norm = nnx.data(None), nnx.data(None)
        if dropout_rate > 0 or spec.random:
            try:
                self.dropout_rngs = rngs["dropout"].fork()
            except KeyError:
                what = f"attention dropout rate {dropout_rate}" if dropout_rate > 0 else f"kind={kind!r}"
                raise ValueError(
                    f"{what} needs a 'dropout' rng stream: build the model with rngs=nnx.Rngs(params=..., dropout=...)"
                ) from None
        else:
            self.dropout_rngs = nnx.data(None)
        if spec.init is not None:  # per-head parameters, stored under the kind's name: [H, ...] each
            if hasattr(self, kind):
                raise ValueError(f"MultiHeadAttention: attention kind {kind!r} has parameters but its name is "
                                 f"already an attribute of the layer; rename the kind")
            init = spec.init(rngs.params(), num_heads, qk_dim, param_dtype, use_bias)
            setattr(self, kind, nnx.Dict({name: nnx.Param(value) for name, value in init.items()}))

    def kind_parameters(self) -> dict[str, nnx.Param]:
        """The attention kind's per-head parameters (name -> ``nnx.Param`` [H, ...]); {} when it has none."""
        params = getattr(self, self.kind, None) if attn.get_kind(self.kind).init is not None else None
        return dict(params.items()) if params is not None else {}

    # ------------------------------------------------------------------------------------------ projections
    def queries(self, x: jax.Array, positions: Optional[jax.Array] = None) -> jax.Array:
        """x: [B, Tq, d_model], positions: [B, Tq] (RoPE only) -> q [B, Tq, H, Dk]."""
        q = self.query(x)
        if self.query_norm is not None:
            q = self.query_norm(q)
        if self.rope_base is not None:
            q = apply_rope(q, positions, self.rope_base, self.rope_scaling)
        return q

    def keys_values(self, x: jax.Array, positions: Optional[jax.Array] = None) -> tuple[jax.Array, jax.Array]:
        """x: [B, Tk, d_model], positions: [B, Tk] (RoPE only) -> (k [B, Tk, Hkv, Dk], v [B, Tk, Hkv, Dv])."""
        k = self.key(x)
        if self.key_norm is not None:
            k = self.key_norm(k)
        if self.rope_base is not None:
            k = apply_rope(k, positions, self.rope_base, self.rope_scaling)
        return k, self.value(x)

    # ------------------------------------------------------------------------------------------------ calls
    def attend(
        self,
        q: jax.Array,
        k: jax.Array,
        v: jax.Array,
        mask: attn.Mask,
        *,
        deterministic: bool = True,
        return_stats: bool = False,
        intervention: Optional[LayerIntervention] = None,
    ) -> tuple[jax.Array, Stats]:
        """Attention over projected heads and the output projection.

        q: [B, Tq, H, Dk], k: [B, Tk, Hkv, Dk], v: [B, Tk, Hkv, Dv] -> ([B, Tq, d_model], stats or None).
        ``intervention``: this layer's head mask (each head's output times ``head_mask[h]`` before the output
        projection) and weight override (see ``models.interventions``).
        """
        override = None if intervention is None else intervention.override
        if self.uniform or override is not None:
            out, stats = self._explicit_weights(q, k, v, mask, override, return_stats)
        else:
            out, stats = self._backend(q, k, v, mask, deterministic, return_stats)
        if intervention is not None and intervention.head_mask is not None:
            out = out * jnp.asarray(intervention.head_mask, out.dtype)[:, None]
        return self.out(out), stats

    def _explicit_weights(self, q, k, v, mask: attn.Mask, override, return_stats: bool):
        """Weights computed here (uniform, or the reference softmax then ``override``) and applied to V:
        -> ([B, Tq, H, Dv], stats or None: the logits' statistics with the weights actually used)."""
        if not self.uniform:
            attn.check_kind(self.kind, "weight_override")
        B, Tq, H, _ = q.shape
        visible = jnp.broadcast_to(mask.materialize(B, H, Tq, k.shape[1]), (B, H, Tq, k.shape[1]))
        if self.uniform:
            s = jnp.zeros((B, H, Tq, k.shape[1]), accumulator_dtype(q.dtype))
        else:
            s = grouped_logits(q, k, self.scale)
        p = masked_softmax(s, visible)
        if override is not None:
            p = override.apply(p, visible)
        out = grouped_values(p.astype(v.dtype), v).astype(q.dtype)
        if not return_stats:
            return out, None
        return out, stats_from_logits(s, visible).replace(weights=jax.lax.stop_gradient(p))

    def _backend(self, q, k, v, mask: attn.Mask, deterministic: bool, return_stats: bool):
        """The layer's attention kind (softmax: on its backend) -> ([B, Tq, H, Dv], stats or None)."""
        draws = not deterministic and self.dropout_rngs is not None
        call = attn.KindCall(
            params={name: p[...] for name, p in self.kind_parameters().items()}, scale=self.scale,
            rng=self.dropout_rngs() if draws else None, dropout_rate=self.dropout_rate if draws else 0.0,
            return_stats=return_stats, implementation=self.implementation,
            backend_options=dict(self.backend_options) or None,
        )
        return attn.get_kind(self.kind).fn(q, k, v, mask, call)

    def __call__(
        self,
        x: jax.Array,
        kv: Optional[jax.Array] = None,
        *,
        mask: attn.Mask,
        positions: Optional[jax.Array] = None,
        kv_positions: Optional[jax.Array] = None,
        deterministic: bool = True,
        return_stats: bool = False,
    ) -> Union[jax.Array, tuple[jax.Array, attn.AttentionStats]]:
        """x: [B, Tq, d_model] attends to kv: [B, Tk, d_model] (None: self-attention) -> [B, Tq, d_model].

        positions / kv_positions ([B, Tq] / [B, Tk]) feed RoPE only; the mask carries the visibility.
        With ``return_stats`` also returns the ``AttentionStats`` of this call.
        """
        if self.rope_base is not None and positions is None:
            raise ValueError("MultiHeadAttention with RoPE needs positions [B, Tq]")
        if kv is None:
            kv, kv_positions = x, positions if kv_positions is None else kv_positions
        q = self.queries(x, positions)
        k, v = self.keys_values(kv, kv_positions)
        out, stats = self.attend(q, k, v, mask, deterministic=deterministic, return_stats=return_stats)
        return (out, stats) if return_stats else out

    def extend_cache(
        self, x: jax.Array, k_cache: jax.Array, v_cache: jax.Array, index: jax.Array, positions: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        """Write the keys/values of new tokens into a self-attention cache (``to_cache_layout``) at ``index``.

        x: [B, t, d_model], k_cache: [B, Hkv, Dk, L], v_cache: [B, Hkv, Dv, L], index: scalar int,
        positions: [B, t] -> (k_cache, v_cache) with slots index..index+t-1 replaced.
        """
        k, v = self.keys_values(x, positions)
        zero = jnp.zeros((), jnp.int32)
        start = (zero, zero, zero, jnp.asarray(index, jnp.int32))
        k_cache = jax.lax.dynamic_update_slice(k_cache, to_cache_layout(k).astype(k_cache.dtype), start)
        v_cache = jax.lax.dynamic_update_slice(v_cache, to_cache_layout(v).astype(v_cache.dtype), start)
        return k_cache, v_cache


def to_cache_layout(x: jax.Array) -> jax.Array:
    """Keys or values [B, T, H, D] -> the decoding cache layout [B, H, D, T]: head-major with the sequence
    last, the layout XLA's CPU dot kernels read without a copy (in [B, T, H, D], every decoding step
    transposed every cached tensor)."""
    return jnp.transpose(x, (0, 2, 3, 1))


def from_cache_layout(x: jax.Array) -> jax.Array:
    """A cached tensor [B, H, D, T] -> keys or values [B, T, H, D] (a view for the attention backends)."""
    return jnp.transpose(x, (0, 3, 1, 2))
