"""Reproduction 4: entropy collapse before divergence (Zhai et al. 2023), seen by the health monitor.

A 2-layer pre-LN decoder (d_model 64, 4 heads, no QK-LayerNorm) on MQAR (4 pairs, 32 tokens) at a stable, a
too-high and a far too high constant learning rate (short warmup), with attention statistics and the health
monitor at every step; a non-finite loss ends the run and is reported (``train.on_non_finite="stop"``).

    python scripts/repro_entropy_collapse.py        # the report -> docs/results/entropy_collapse/
    python scripts/sweep.py --config=configs/repro_entropy_collapse.py

Arguments: lr, seed, steps, quick (tiny sizes, a few steps).
"""
from engine.config import parse_arg, small_decoder_config

LEARNING_RATES = (("stable", 1e-3), ("high", 1e-1), ("very high", 1.0))


def _parse(arg):
    return parse_arg(arg, lr=1e-3, seed=0, steps=250, quick=False)


def get_config(arg=None):
    a = _parse(arg)
    q = a.quick
    steps = min(a.steps, 6) if q else a.steps
    c = small_decoder_config(
        "mqar", quick=q, d_model=16 if q else 64, heads=4, layers=1 if q else 2, learning_rate=a.lr, steps=steps,
        batch_size=8 if q else 16, seq_len=16 if q else 32, vocab=32 if q else 64, log_every=1,
        num_eval_batches=1 if q else 8, schedule="constant", warmup_steps=max(1, steps // 40))
    c.data.mqar_num_kv_pairs = 2 if q else 4
    c.train.on_non_finite = "stop"
    c.seed = a.seed
    return c


def sweep(arg=None):
    """Points: the three learning rates of LEARNING_RATES."""
    for _, lr in LEARNING_RATES:
        yield {"train.learning_rate": lr}
