"""``additive``: Bahdanau scores ``v_a^T tanh(W_q q + W_k k + b)`` with per-head parameters."""
from attention.api import Kind, KindCall, register_kind
from attention.variants import additive_attention, init_additive_params


def additive_kind(q, k, v, mask, call: KindCall):
    """q [B, Tq, H, Dk], k [B, Tk, Hkv, Dk], v [B, Tk, Hkv, Dv] -> ([B, Tq, H, Dv], stats or None)."""
    result = additive_attention(q, k, v, call.params, mask, return_stats=call.return_stats)
    return result if call.return_stats else (result, None)


def init(key, num_heads: int, qk_dim: int, param_dtype, use_bias: bool) -> dict:
    """``w_q``, ``w_k`` [H, Dk, Dk], ``v_a`` [H, Dk] and (use_bias) ``b`` [H, Dk]."""
    return init_additive_params(key, num_heads, qk_dim, qk_dim, param_dtype, use_bias)


register_kind(Kind(
    name="additive", fn=additive_kind, init=init,
    unsupported={"dropout": "dropout is implemented on the backends of kind 'softmax' only",
                 "weight_override": "overrides recompute the weights with the softmax reference"},
    description="Bahdanau et al. 2015 additive scores, softmax over the visible keys",
))
