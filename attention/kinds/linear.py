"""``linear``: kernelized attention (Katharopoulos et al. 2020), O(T) time and memory."""
from attention.api import Kind, KindCall, register_kind
from attention.variants import linear_attention


def linear_kind(q, k, v, mask, call: KindCall):
    """q [B, Tq, H, Dk], k [B, Tk, Hkv, Dk], v [B, Tk, Hkv, Dv] -> ([B, Tq, H, Dv], None)."""
    return linear_attention(q, k, v, mask), None


_NO_SCORES = "linear attention never forms the [Tq, Tk] scores"
register_kind(Kind(
    name="linear", fn=linear_kind,
    unsupported={
        "statistics": _NO_SCORES,
        "kv_cache": "decoding masks keys by position offsets, which linear attention does not take",
        "dropout": "dropout is implemented on the backends of kind 'softmax' only",
        "weight_override": _NO_SCORES,
        "window": "its causal prefix sums cannot drop keys that leave a window",
        "dense_mask": _NO_SCORES,
        "positions": "causal masks use top-left aligned aranges",
        "packing": "its key/value sums run over the whole row",
    },
    description="phi(q)^T sum_j phi(k_j) v_j / phi(q)^T sum_j phi(k_j), phi = elu + 1",
))
