"""Reproduction 2, training part: the logit scale 1, 1/sqrt(d_k) or 1/d_k on a small decoder.

A 2-layer pre-LN decoder (d_model 64, 2 heads of d_k = d_v = 64) on MQAR (4 pairs, 32 tokens), AdamW lr 1e-3,
warmup then cosine decay; only ``model.attention_scale`` changes. The initialization part of the
reproduction needs no training (``scripts/repro_scale.py``).

    python scripts/repro_scale.py               # the report -> docs/results/scale/
    python scripts/sweep.py --config=configs/repro_scale.py

Arguments: scale ("1", "sqrt" or "dk"), seed, steps, quick (tiny sizes).
"""
from engine.config import parse_arg, small_decoder_config

SCALES = {"1": lambda d_k: 1.0, "sqrt": lambda d_k: d_k ** -0.5, "dk": lambda d_k: 1.0 / d_k}


def _parse(arg):
    return parse_arg(arg, scale="sqrt", seed=0, steps=300, quick=False)


def get_config(arg=None):
    a = _parse(arg)
    if a.scale not in SCALES:
        raise ValueError(f"repro_scale: scale={a.scale!r}; expected one of {tuple(SCALES)}")
    q = a.quick
    steps = min(a.steps, 5) if q else a.steps
    d_k = 16 if q else 64
    c = small_decoder_config(
        "mqar", quick=q, d_model=16 if q else 64, heads=2, layers=1 if q else 2, learning_rate=1e-3, steps=steps,
        batch_size=8 if q else 16, seq_len=16 if q else 32, vocab=32 if q else 64, log_every=max(1, steps // 20),
        num_eval_batches=1 if q else 8, qk_dim=d_k, v_dim=8 if q else d_k)
    c.data.mqar_num_kv_pairs = 2 if q else 4
    c.model.attention_scale = SCALES[a.scale](d_k)
    c.seed = a.seed
    return c


def sweep(arg=None):
    """Points: the three scales (as model.attention_scale values)."""
    d_k = get_config(arg).model.qk_dim
    for fn in SCALES.values():
        yield {"model.attention_scale": fn(d_k)}
