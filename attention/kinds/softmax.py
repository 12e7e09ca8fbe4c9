"""``softmax``: scaled dot-product attention through ``attention.attention`` and its backends."""
import attention
from attention.api import Kind, KindCall, register_kind


def softmax_kind(q, k, v, mask, call: KindCall):
    """q [B, Tq, H, Dk], k [B, Tk, Hkv, Dk], v [B, Tk, Hkv, Dv] -> ([B, Tq, H, Dv], stats or None).
    Calls the package's ``attention.attention`` (looked up per call, so a test may substitute it)."""
    result = attention.attention(
        q, k, v, mask, implementation=call.implementation, scale=call.scale, dropout_rate=call.dropout_rate,
        dropout_rng=call.rng if call.dropout_rate > 0 else None, return_stats=call.return_stats,
        backend_options=dict(call.backend_options or {}) or None,
    )
    return result if call.return_stats else (result, None)


register_kind(Kind(name="softmax", fn=softmax_kind, backends=True,
                   description="softmax(scale * q.k) over the visible keys (Vaswani et al. 2017)"))
