"""The one attention entry point, the backend registry and the attention-kind registry."""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Callable, Optional, Union

import jax
import jax.numpy as jnp

from attention.mask import Mask
from attention.stats import AttentionStats

FLOAT_DTYPES = (jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64)


@dataclasses.dataclass(frozen=True)
class Request:
    """What a call asks of a backend; backends decide from it whether they can serve the call."""

    batch: int
    q_len: int
    kv_len: int
    num_heads: int
    num_kv_heads: int
    qk_dim: int
    v_dim: int
    dtype: Any
    mask: Mask
    dropout: bool
    return_stats: bool
    platform: str


# A backend: fn(q, k, v, mask, *, scale, dropout_rate, dropout_rng, return_stats, **options)
#   -> (out [B, Tq, H, Dv], AttentionStats | None). ``supports(request)`` returns None when the backend can
#   serve the request and otherwise the name of the missing feature.
BackendFn = Callable[..., tuple[jax.Array, Optional[AttentionStats]]]


@dataclasses.dataclass(frozen=True)
class Backend:
    name: str
    fn: BackendFn
    supports: Callable[[Request], Optional[str]]


_BACKENDS: dict[str, Backend] = {}

# Preference order for implementation="auto", per platform. On CPU, long sequences go to `chunked` first: from
# about 512 tokens it is faster than `xla` there, and its memory is linear in sequence length.
AUTO_ORDER = {
    "gpu": ("pallas", "cudnn", "xla", "chunked", "reference"),
    "tpu": ("pallas", "xla", "chunked", "reference"),
    "cpu": ("xla", "chunked", "reference"),
    "cpu_long": ("chunked", "xla", "reference"),
}
CPU_LONG_SEQUENCE = 1024 * 1024  # Tq * Tk from which CPU prefers `chunked`


def auto_order(request: Request) -> tuple[str, ...]:
    """The backends ``implementation="auto"`` tries for ``request``, in order."""
    if request.platform == "cpu" and request.q_len * request.kv_len >= CPU_LONG_SEQUENCE:
        return AUTO_ORDER["cpu_long"]
    return AUTO_ORDER.get(request.platform, AUTO_ORDER["cpu"])


def register_backend(name: str, fn: BackendFn, supports: Callable[[Request], Optional[str]]) -> None:
    """Make ``implementation=name`` available. Re-registering a name replaces it."""
    _BACKENDS[name] = Backend(name=name, fn=fn, supports=supports)


def available_backends() -> tuple[str, ...]:
    """Names of the registered backends, in registration order."""
    return tuple(_BACKENDS)


def default_platform() -> str:
    return jax.default_backend()


_LAYOUT = {"q": "[B, Tq, H, D]", "k": "[B, Tk, Hkv, D]", "v": "[B, Tk, Hkv, Dv]"}


def check_qkv(fn: str, q: Any, k: Any, v: Any) -> None:
    """Raise one ValueError, prefixed ``fn:``, naming the first of q, k, v that is not a valid attention input.

    q: [B, Tq, H, D], k: [B, Tk, Hkv, D], v: [B, Tk, Hkv, Dv], one float dtype, H a multiple of Hkv.
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not hasattr(x, "shape") or not hasattr(x, "dtype"):
            raise ValueError(f"{fn}: {name} must be an array {_LAYOUT[name]}; got {type(x).__name__}")
        if x.ndim != 4:
            raise ValueError(f"{fn}: {name} has shape {tuple(x.shape)}; expected 4 dims {_LAYOUT[name]}")
        if x.dtype not in FLOAT_DTYPES:
            raise ValueError(f"{fn}: {name} has dtype {x.dtype}; expected one of float16, bfloat16, float32, float64")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"{fn}: q, k, v must share a dtype; got q {q.dtype}, k {k.dtype}, v {v.dtype}")
    B, Tq, H, D = q.shape
    if k.shape[0] != B or k.shape[3] != D:
        raise ValueError(f"{fn}: k has shape {tuple(k.shape)}; expected [B={B}, Tk, Hkv, D={D}] to match q "
                         f"{tuple(q.shape)}")
    Tk, Hkv = k.shape[1], k.shape[2]
    if tuple(v.shape[:3]) != (B, Tk, Hkv):
        raise ValueError(f"{fn}: v has shape {tuple(v.shape)}; expected [B={B}, Tk={Tk}, Hkv={Hkv}, Dv] to match k "
                         f"{tuple(k.shape)}")
    if Hkv == 0 or H % Hkv != 0:
        raise ValueError(
            f"{fn}: k has shape {tuple(k.shape)}: q has {H} heads and k/v have {Hkv} (Hkv={Hkv}); the number of "
            "query heads must be a multiple of the number of key/value heads"
        )
    if min(q.shape) == 0 or min(k.shape) == 0 or v.shape[3] == 0:
        raise ValueError(f"{fn}: empty input; q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")


def check_mask(fn: str, mask: Any, batch: int, heads: int, q_len: int, kv_len: int) -> Mask:
    """``mask`` (None: ``Mask()``) after checking its type and its array shapes against the attention shapes."""
    if mask is None:
        return Mask()
    if not isinstance(mask, Mask):
        raise ValueError(f"{fn}: mask must be an attention.Mask or None; got {type(mask).__name__}")
    mask.validate(batch, heads, q_len, kv_len)
    return mask


def sink_probability(q, k, mask: Mask, scale: float, stats: AttentionStats) -> jax.Array:
    """Attention probability on key 0 from q, k[:, 0] and the row log-sum-exp: -> [B, H, Tq] float32."""
    B, Tq, H, D = q.shape
    Hkv = k.shape[2]
    qg = q.reshape(B, Tq, Hkv, H // Hkv, D).astype(jnp.float32)
    k0 = k[:, 0].astype(jnp.float32)  # [B, Hkv, D]
    s0 = jnp.einsum("btkgd,bkd->bkgt", qg, k0).reshape(B, H, Tq) * scale
    q_pos, kv_pos = mask.positions(B, Tq, k.shape[1])
    kv_seg = None if mask.kv_segment_ids is None else mask.kv_segment_ids[:, :1]
    vis0 = mask.structured_block(q_pos, kv_pos[:, :1], mask.q_segment_ids, kv_seg)[:, None, :, 0]  # [B,1,Tq]
    if mask.dense is not None:
        d = mask.dense.reshape((1,) * (4 - mask.dense.ndim) + tuple(mask.dense.shape))
        vis0 = vis0 & jnp.broadcast_to(d, (d.shape[0], d.shape[1], Tq, d.shape[3]))[..., 0]
    p0 = jnp.exp(s0 - stats.lse)
    return jax.lax.stop_gradient(jnp.where(stats.valid & vis0, p0, 0.0))


def attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: Optional[Mask] = None,
    *,
    implementation: str = "auto",
    scale: Optional[float] = None,
    dropout_rate: float = 0.0,
    dropout_rng: Optional[jax.Array] = None,
    return_stats: bool = False,
    backend_options: Optional[dict] = None,
) -> Union[jax.Array, tuple[jax.Array, AttentionStats]]:
    """Scaled dot-product attention.

    q: [B, Tq, H, D], k: [B, Tk, Hkv, D], v: [B, Tk, Hkv, Dv] with H % Hkv == 0 (GQA/MQA).
    mask: an ``attention.Mask`` (None: every key visible).
    implementation: "auto", or a registered backend name ("reference", "xla", "cudnn", "chunked", "pallas").
    scale: logit scale, default 1/sqrt(D); any float is accepted (1.0 is unscaled attention).
    dropout_rate / dropout_rng: dropout on the attention probabilities (backends that support it).
    return_stats: also return ``AttentionStats`` ([B, H, Tq] per field; no gradient).
    backend_options: extra keyword arguments for the chosen backend (e.g. block sizes).

    Returns out: [B, Tq, H, Dv] in q's dtype, or (out, stats). Query rows with no visible key give zeros.
    """
    check_qkv("attention", q, k, v)
    B, Tq, H, D = q.shape
    Tk, Hkv, Dv = k.shape[1], k.shape[2], v.shape[3]
    mask = check_mask("attention", mask, B, H, Tq, Tk)
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    if not isinstance(dropout_rate, (int, float)) or not 0.0 <= float(dropout_rate) < 1.0:
        raise ValueError(f"attention: dropout_rate must be a float in [0, 1); got {dropout_rate!r}")
    dropout = float(dropout_rate) > 0.0
    if dropout and dropout_rng is None:
        raise ValueError(f"attention: dropout_rate={dropout_rate} needs a dropout_rng key; got None")
    if not isinstance(implementation, str):
        raise ValueError(f"attention: implementation must be a backend name (str); got {implementation!r}")
    if backend_options is not None and not isinstance(backend_options, Mapping):
        raise ValueError(f"attention: backend_options must be a dict or None; got {type(backend_options).__name__}")
    request = Request(
        batch=B, q_len=Tq, kv_len=Tk, num_heads=H, num_kv_heads=Hkv, qk_dim=D, v_dim=Dv,
        dtype=q.dtype, mask=mask, dropout=dropout, return_stats=bool(return_stats), platform=default_platform(),
    )
    backend = select_backend(implementation, request)
    out, stats = backend.fn(
        q, k, v, mask,
        scale=scale, dropout_rate=float(dropout_rate), dropout_rng=dropout_rng,
        return_stats=bool(return_stats), **(backend_options or {}),
    )
    if not return_stats:
        return out
    if stats.sink is None:
        stats = stats.replace(sink=sink_probability(q, k, mask, scale, stats))
    return out, stats


def select_backend(implementation: str, request: Request) -> Backend:
    """The backend that will serve ``request``; raises ValueError naming the backend and missing feature."""
    if implementation == "auto":
        reasons = []
        for name in auto_order(request):
            backend = _BACKENDS.get(name)
            if backend is None:
                continue
            reason = backend.supports(request)
            if reason is None:
                return backend
            reasons.append(f"{name}: {reason}")
        raise ValueError(f"attention: no backend on {request.platform} can serve this call ({'; '.join(reasons)})")
    backend = _BACKENDS.get(implementation)
    if backend is None:
        raise ValueError(
            f"attention: unknown implementation {implementation!r}; expected 'auto' or one of {available_backends()}"
        )
    reason = backend.supports(request)
    if reason is not None:
        raise ValueError(f"attention: implementation {implementation!r} does not support {reason}")
    return backend


# ------------------------------------------------------------------------------------------ attention kinds
# What a kind may be unable to do; a kind lists the ones it cannot, each with its reason.
FEATURES = {
    "statistics": "attention statistics (entropy, max logit, weights)",
    "kv_cache": "KV-cache decoding",
    "dropout": "attention dropout",
    "weight_override": "attention-weight overrides",
    "window": "sliding-window masks",
    "dense_mask": "dense masks",
    "positions": "mask positions (KV-cache offsets, zig-zag layouts)",
    "packing": "packed sequences (segment ids above 1)",
}


@dataclasses.dataclass(frozen=True)
class KindCall:
    """Everything a kind's function gets besides q, k, v and the mask.

    params: the layer's parameters from the kind's ``init`` ({} when it has none), each [H, ...].
    rng: a fresh key in training for kinds that draw (``random``) or apply dropout; None when deterministic.
    dropout_rate: 0.0 when deterministic. implementation / backend_options: the ``attention.attention``
    backend (kinds with ``backends`` only).
    """

    params: Mapping[str, jax.Array]
    scale: float
    rng: Optional[jax.Array] = None
    dropout_rate: float = 0.0
    return_stats: bool = False
    implementation: str = "auto"
    backend_options: Optional[Mapping[str, Any]] = None


# A kind: fn(q [B, Tq, H, Dk], k [B, Tk, Hkv, Dk], v [B, Tk, Hkv, Dv], mask, call: KindCall)
#   -> (out [B, Tq, H, Dv], AttentionStats or None (always None without "statistics")).
# init(key, num_heads, qk_dim, param_dtype, use_bias) -> {name: array [num_heads, ...]}: per-head parameters.
KindFn = Callable[..., tuple[jax.Array, Optional[AttentionStats]]]
KindInit = Callable[[jax.Array, int, int, Any, bool], dict]


@dataclasses.dataclass(frozen=True)
class Kind:
    """An attention kind: how queries and keys become weights over values.

    ``unsupported``: feature of ``FEATURES`` -> why this kind cannot do it. ``random``: the kind draws from the
    layer's dropout stream when training (and gets ``rng=None`` when deterministic). ``backends``: calls go
    through ``attention.attention``, so ``attention_impl`` picks among the backends.
    """

    name: str
    fn: KindFn
    init: Optional[KindInit] = None
    unsupported: Mapping[str, str] = dataclasses.field(default_factory=dict)
    random: bool = False
    backends: bool = False
    description: str = ""


_KINDS: dict[str, Kind] = {}


def register_kind(kind: Kind) -> None:
    """Make ``attention_kind=kind.name`` available. Re-registering a name replaces it."""
    unknown = sorted(set(kind.unsupported) - set(FEATURES))
    if unknown:
        raise ValueError(f"register_kind: kind {kind.name!r} lists unknown features {unknown}; expected some of "
                         f"{tuple(FEATURES)}")
    _KINDS[kind.name] = kind


def available_kinds() -> tuple[str, ...]:
    """Names of the registered attention kinds, in registration order."""
    return tuple(_KINDS)


def get_kind(name: str) -> Kind:
    """The registered kind ``name``; ValueError naming the registered ones otherwise."""
    kind = _KINDS.get(name)
    if kind is None:
        raise ValueError(f"attention kind {name!r} is not registered; expected one of {available_kinds()}")
    return kind


def kind_refusal(name: str, *features: str) -> Optional[str]:
    """Why kind ``name`` cannot serve ``features`` (one line naming the kind, the feature and the reason), or
    None when it can. Unknown names and features are refusals too."""
    if name not in _KINDS:
        return f"attention kind {name!r} is not registered; expected one of {available_kinds()}"
    for feature in features:
        if feature not in FEATURES:
            return f"attention kind feature {feature!r} is unknown; expected one of {tuple(FEATURES)}"
        reason = _KINDS[name].unsupported.get(feature)
        if reason is not None:
            return f"attention kind {name!r} does not support {FEATURES[feature]}: {reason}"
    return None


def check_kind(name: str, *features: str) -> Kind:
    """The kind ``name`` after checking it serves ``features``; ValueError (``kind_refusal``) otherwise."""
    refusal = kind_refusal(name, *features)
    if refusal is not None:
        raise ValueError(refusal)
    return _KINDS[name]
