"""``hard``: one sampled key per query, trained through the straight-through Gumbel-softmax."""
import jax

from attention.api import Kind, KindCall, register_kind
from attention.variants import hard_attention


def hard_kind(q, k, v, mask, call: KindCall):
    """q [B, Tq, H, Dk], k [B, Tk, Hkv, Dk], v [B, Tk, Hkv, Dv] -> ([B, Tq, H, Dv], stats or None).
    Deterministic calls (``rng`` None) draw with a fixed key."""
    rng = jax.random.key(0) if call.rng is None else call.rng
    result = hard_attention(q, k, v, mask, rng=rng, scale=call.scale, return_stats=call.return_stats)
    return result if call.return_stats else (result, None)


register_kind(Kind(
    name="hard", fn=hard_kind, random=True,
    unsupported={"dropout": "dropout is implemented on the backends of kind 'softmax' only",
                 "weight_override": "overrides recompute the weights with the softmax reference"},
    description="straight-through Gumbel: the value of one key sampled from softmax(scale * q.k)",
))
