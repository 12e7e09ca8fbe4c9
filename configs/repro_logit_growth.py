"""Reproduction 3: attention logit growth and learning-rate sensitivity across widths (Wortsman et al. 2023 proxies).

A 2-layer pre-LN decoder (two heads, d_k = d_model / 2, d_ff = 4 d_model) on multi-query associative recall (4
key-value pairs in 16 tokens, vocabulary 256, 64 sequences per batch) over a learning-rate grid at two widths,
with and without QK-LayerNorm (``model.qk_layernorm``); AdamW (0.9, 0.95), no weight decay or clipping, 10%
warmup then cosine decay, 1,500 steps (the set-up of ``configs/repro_scale.py``); a non-finite loss ends the
run (``train.on_non_finite="stop"``) and counts as its result.

    python -m studies train logit_growth                                          # points, records, report
    python train.py --config=configs/repro_logit_growth.py:d_model=128,lr=0.03    # one point
    python -m studies sweep --config=configs/repro_logit_growth.py

Arguments: lr, d_model, qk_layernorm, seed (the point train.py trains); seeds (the sweep runs seeds
0..seeds-1); steps; quick (tiny sizes, a few steps; the sweep is 2 learning rates x QK-LayerNorm off/on at
d_model 16, one seed).
"""
from engine.config import parse_arg, sibling_config

small_decoder_config = sibling_config(__file__, "_presets").small_decoder_config

LEARNING_RATES = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1)
WIDTHS = (64, 128)
QUICK_LEARNING_RATES = (1e-2, 1.0)


def _parse(arg):
    return parse_arg(arg, lr=1e-2, d_model=64, qk_layernorm=False, seed=0, seeds=3, steps=1500, quick=False)


def get_config(arg=None):
    a = _parse(arg)
    if a.seeds < 1 or a.steps < 1 or a.d_model < 1 or a.lr <= 0:
        raise ValueError(f"repro_logit_growth: seeds={a.seeds}, steps={a.steps}, d_model={a.d_model}, lr={a.lr}; "
                         "expected positive values")
    q = a.quick
    steps = min(a.steps, 6) if q else a.steps
    d_model = 16 if q else a.d_model
    c = small_decoder_config(
        "mqar", quick=q, d_model=d_model, heads=1 if q else 2, layers=1 if q else 2, learning_rate=a.lr,
        steps=steps,
        batch_size=8 if q else 64, seq_len=16, vocab=32 if q else 256, log_every=max(1, steps // 100),
        num_eval_batches=1 if q else 8)
    c.data.mqar_num_kv_pairs = 2 if q else 4
    c.model.qk_layernorm = a.qk_layernorm
    c.train.on_non_finite = "stop"
    c.seed = a.seed
    c.wandb.tags = tuple(c.wandb.tags) + ("repro_logit_growth",)
    return c


def sweep(arg=None):
    """Points, seed-major: seed x QK-LayerNorm off/on x d_model in WIDTHS x LEARNING_RATES (so a partial sweep
    has the width comparison without QK-LayerNorm first)."""
    a = _parse(arg)
    widths, lrs, seeds = ((16,), QUICK_LEARNING_RATES, 1) if a.quick else (WIDTHS, LEARNING_RATES, a.seeds)
    for seed in range(seeds):
        for qk_ln in (False, True):
            for d in widths:
                for lr in lrs:
                    yield {"model.d_model": d, "model.d_ff": 4 * d, "model.qk_layernorm": qk_ln,
                           "train.learning_rate": lr, "seed": seed}
