"""Reproduction 4: entropy collapse and loss instability (Zhai et al. 2023), seen by the health monitor, with
QK-LayerNorm as the remedy.

A 2-layer pre-LN decoder (d_model 64, two heads of d_k 32, d_ff 256) on multi-query associative recall (4
key-value pairs in 16 tokens, vocabulary 256, 64 sequences per batch), AdamW with 10% warmup then cosine
decay, 1,500 steps (the set-up of ``configs/repro_scale.py``, which learns at lr 3e-3), at the stable
learning rate 3e-3, at 1e-2 (where QK-LayerNorm learns) and two higher ones, with and without QK-LayerNorm
(``model.qk_layernorm``); attention statistics and the health monitor every 5 steps; a non-finite loss ends
the run and is its result (``train.on_non_finite="stop"``).

    python -m studies train entropy_collapse                                        # points, records, report
    python train.py --config=configs/repro_entropy_collapse.py:lr=0.1,qk_layernorm  # one point
    python -m studies sweep --config=configs/repro_entropy_collapse.py

Arguments: lr, qk_layernorm, seed (the point train.py trains); seeds and first_seed (the sweep runs seeds
first_seed .. first_seed + seeds - 1; ``python -m studies train health_calibration`` trains seeds 3-5 as fresh runs for the
health monitor's calibration); steps; quick (tiny sizes, a few steps, one seed).
"""
from engine.config import parse_arg, sibling_config

small_decoder_config = sibling_config(__file__, "_presets").small_decoder_config

# 1e-2: the lowest rate at which QK-LayerNorm learned in 1,500 steps in the pilots (seed 0, accuracy 0.994; at
# 3e-3 it reached 0.72), so the remedy has a learning baseline of its own.
LEARNING_RATES = (("stable", 3e-3), ("stable with QK-LayerNorm", 1e-2), ("high", 3e-2), ("very high", 1e-1))


def _parse(arg):
    return parse_arg(arg, lr=3e-3, qk_layernorm=False, seed=0, seeds=3, first_seed=0, steps=1500,
                     quick=False)


def get_config(arg=None):
    a = _parse(arg)
    if a.seeds < 1 or a.steps < 1 or a.lr <= 0 or a.first_seed < 0:
        raise ValueError(f"repro_entropy_collapse: seeds={a.seeds}, first_seed={a.first_seed}, steps={a.steps}, "
                         f"lr={a.lr}; expected positive seeds, steps and lr and first_seed >= 0")
    q = a.quick
    steps = min(a.steps, 8) if q else a.steps
    c = small_decoder_config(
        "mqar", quick=q, d_model=16 if q else 64, heads=1 if q else 2, layers=1 if q else 2, learning_rate=a.lr,
        steps=steps,
        batch_size=8 if q else 64, seq_len=16, vocab=32 if q else 256, log_every=1 if q else 5,
        num_eval_batches=1 if q else 8)
    c.data.mqar_num_kv_pairs = 2 if q else 4
    c.model.qk_layernorm = a.qk_layernorm
    c.train.on_non_finite = "stop"
    c.seed = a.seed
    c.wandb.tags = tuple(c.wandb.tags) + ("repro_entropy_collapse",)
    return c


def sweep(arg=None):
    """Points, seed-major: seed x QK-LayerNorm off/on x the learning rates of LEARNING_RATES."""
    a = _parse(arg)
    lrs = (LEARNING_RATES[0][1], 1.0) if a.quick else tuple(lr for _, lr in LEARNING_RATES)
    for seed in range(a.first_seed, a.first_seed + (1 if a.quick else a.seeds)):
        for qk_ln in (False, True):
            for lr in lrs:
                yield {"model.qk_layernorm": qk_ln, "train.learning_rate": lr, "seed": seed}
