"""Reproduction 3: attention logit growth and learning-rate sensitivity (Wortsman et al. 2023 proxies).

The same small decoder (2 layers, d_model 64, 4 heads) on MQAR (4 pairs, 32 tokens) over a learning-rate
grid, with and without QK-LayerNorm (``model.qk_layernorm``); AdamW, warmup then cosine decay; a non-finite
loss ends the run (``train.on_non_finite="stop"``).

    python scripts/repro_logit_growth.py        # the report -> docs/results/logit_growth/
    python scripts/sweep.py --config=configs/repro_logit_growth.py

Arguments: lr, qk_layernorm, seed, steps, quick (tiny sizes, one learning rate).
"""
from engine.config import parse_arg, small_decoder_config

LEARNING_RATES = (1e-3, 1e-2, 1e-1, 3e-1)


def _parse(arg):
    return parse_arg(arg, lr=1e-2, qk_layernorm=False, seed=0, steps=200, quick=False)


def get_config(arg=None):
    a = _parse(arg)
    q = a.quick
    steps = min(a.steps, 5) if q else a.steps
    c = small_decoder_config(
        "mqar", quick=q, d_model=16 if q else 64, heads=4, layers=1 if q else 2, learning_rate=a.lr, steps=steps,
        batch_size=8 if q else 16, seq_len=16 if q else 32, vocab=32 if q else 64, log_every=max(1, steps // 40),
        num_eval_batches=1 if q else 8)
    c.data.mqar_num_kv_pairs = 2 if q else 4
    c.model.qk_layernorm = a.qk_layernorm
    c.train.on_non_finite = "stop"
    c.seed = a.seed
    return c


def sweep(arg=None):
    """Points: QK-LayerNorm off/on x the learning rates (one, 3e-2, in quick mode)."""
    lrs = (3e-2,) if _parse(arg).quick else LEARNING_RATES
    for qk_ln in (False, True):
        for lr in lrs:
            yield {"model.qk_layernorm": qk_ln, "train.learning_rate": lr}
