"""Vaswani et al. (2017) Table 3 rows (B): reducing the query/key width d_k from the base, 8 heads and d_v kept.

    python -m studies sweep --config=configs/table3_dk.py                    # CPU scale, 3 seeds, 2,400 steps
    python -m studies sweep --config=configs/table3_dk.py:d_model=256
    python -m studies sweep --config=configs/table3_dk.py:wmt14,seeds=2      # paper scale, WMT14 EN-DE
    python train.py --config=configs/table3_dk.py:qk_dim=8                   # one point

Arguments as in ``configs/table3_heads.py`` (qk_dim instead of heads). As in the paper, d_k goes down from the
base point's d_model / 8 to 1/2 and 1/4 of it (paper scale: 64 -> 32, 16; d_model 128: 16 -> 8, 4; d_model 256:
32 -> 16, 8) while h = 8 and d_v = d_model / 8 stay; the base point itself is rows (A)'s h = 8 point.
"""
from engine.config import sibling_config

FRACTIONS = (2, 4)  # d_k = base d_k / 2, base d_k / 4


def get_config(arg=None):
    t3 = sibling_config(__file__, "table3_heads")
    a = t3.parse(arg)
    c = t3.base(a)
    qk_dim = a.qk_dim or c.model.d_model // 8
    if qk_dim <= 0:
        raise ValueError(f"table3_dk: qk_dim={qk_dim} must be positive")
    c.model.num_heads = 8
    c.model.qk_dim = qk_dim
    c.model.v_dim = c.model.d_model // 8
    return c


def sweep(arg=None):
    """Points: seed x d_k in (base / 2, base / 4) at 8 heads, base = d_model / 8; d_v = d_model / 8."""
    t3 = sibling_config(__file__, "table3_heads")
    a = t3.parse(arg)
    for flag, what in (("aa", "the A/A control"), ("more_h1", "the single-head extension"),
                       ("h1_base_dk", "the single-head d_k control")):
        if a[flag]:
            raise ValueError(f"table3_dk: {flag} ({what}) is a rows (A) argument; use configs/table3_heads.py")
    base_dk = t3.base(a).model.d_model // 8
    for seed in range(a.seeds):
        for f in FRACTIONS:
            yield {"model.qk_dim": base_dk // f, "seed": seed}
