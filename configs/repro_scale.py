"""Reproduction 2, training part: the logit scale 1, 1/sqrt(d_k) or 1/d_k on a small decoder that learns MQAR.

A 2-layer pre-LN decoder (d_model 64, two heads of d_k = d_v = 32, d_ff 256) on multi-query associative recall
(4 key-value pairs in 16 tokens, vocabulary 256, 64 sequences per batch), AdamW lr 3e-3, 10% warmup then
cosine decay, 1,500 steps; only ``model.attention_scale`` changes. Pilots: with one head of d_k 64 the
baseline learned in seed 0 only (seeds 1 and 2 stall near accuracy 0.56 at lr 3e-3 and 1e-2); with two heads
it learned in seeds 1, 2 and 3 (training loss below 0.1 by steps 750, 1,110 and 930), so the budget is one in
which the baseline learns. The
initialization part of the reproduction needs no training (``studies/specs/scale.py``).

    python -m studies train scale                                    # points, records and report -> docs/results/scale/
    python train.py --config=configs/repro_scale.py:scale=1,seed=2   # one point
    python -m studies sweep --config=configs/repro_scale.py

Arguments: scale ("1", "sqrt" or "dk"), seed (the point train.py trains), seeds (the sweep runs seeds
0..seeds-1), steps, lr, quick (tiny sizes, a few steps, one seed).
"""
from engine.config import parse_arg, sibling_config

small_decoder_config = sibling_config(__file__, "_presets").small_decoder_config

SCALES = {"1": lambda d_k: 1.0, "sqrt": lambda d_k: d_k ** -0.5, "dk": lambda d_k: 1.0 / d_k}


def _parse(arg):
    return parse_arg(arg, scale="sqrt", seed=0, seeds=3, steps=1500, lr=3e-3, quick=False)


def get_config(arg=None):
    a = _parse(arg)
    if a.scale not in SCALES:
        raise ValueError(f"repro_scale: scale={a.scale!r}; expected one of {tuple(SCALES)}")
    if a.seeds < 1 or a.steps < 1:
        raise ValueError(f"repro_scale: seeds={a.seeds}, steps={a.steps}; expected positive integers")
    q = a.quick
    steps = min(a.steps, 6) if q else a.steps
    d_model, heads = (16, 1) if q else (64, 2)
    c = small_decoder_config(
        "mqar", quick=q, d_model=d_model, heads=heads, layers=1 if q else 2, learning_rate=a.lr, steps=steps,
        batch_size=8 if q else 64, seq_len=16, vocab=32 if q else 256, log_every=max(1, steps // 50),
        num_eval_batches=1 if q else 8, qk_dim=d_model // heads, v_dim=d_model // heads)
    c.data.mqar_num_kv_pairs = 2 if q else 4
    c.model.attention_scale = SCALES[a.scale](d_model // heads)
    c.seed = a.seed
    c.wandb.tags = tuple(c.wandb.tags) + ("repro_scale",)
    return c


def sweep(arg=None):
    """Points, seed-major: seed x the three scales (as model.attention_scale values); quick: seed 0 only."""
    a = _parse(arg)
    d_k = get_config(arg).model.qk_dim
    for seed in range(1 if a.quick else a.seeds):
        for fn in SCALES.values():
            yield {"model.attention_scale": fn(d_k), "seed": seed}
