"""Vaswani et al. (2017) Table 3 rows (B): shrinking the query/key width d_k at 8 heads, d_v kept.

    python scripts/sweep.py --config=configs/table3_dk.py                    # CPU scale, embedded corpus
    python scripts/sweep.py --config=configs/table3_dk.py:wmt14,seeds=2      # paper scale, WMT14 EN-DE
    python train.py --config=configs/table3_dk.py:qk_dim=16                  # one point

Arguments as in ``configs/table3_heads.py`` (qk_dim instead of heads). d_k in {16, 32, 64}; d_v stays at
d_model / 8 (64 at paper scale, where d_k 64 is the base model; 16 at CPU scale).
"""
import importlib.util
import os

QK_DIMS = (16, 32, 64)


def _table3():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "table3_heads.py")
    spec = importlib.util.spec_from_file_location("attnlab_config_table3_heads", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def get_config(arg=None):
    t3 = _table3()
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
    """Points: seed x d_k in QK_DIMS at 8 heads; d_v = d_model / 8 for every point."""
    a = _table3().parse(arg)
    for seed in range(a.seeds):
        for dk in QK_DIMS:
            yield {"model.qk_dim": dk, "seed": seed}
