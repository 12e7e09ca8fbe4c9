"""Reproduction 5: multi-query associative recall (Arora et al. 2023, Zoology) over num_heads x qk_dim.

A 2-layer decoder (d_model 64, v_dim = d_model / heads so the attention output width stays d_model) on MQAR
with 4 key-value pairs in 32 tokens, AdamW lr 3e-3, warmup then cosine decay. ``studies/specs/mqar.py``
runs this grid in-process and writes docs/results/mqar/; ``python -m studies sweep`` runs it as resumable
train.py points with W&B.

    python -m studies train mqar                                          # the report
    python -m studies sweep --config=configs/mqar_grid.py:seeds=5,steps=5000
    python train.py --config=configs/mqar_grid.py:heads=4,qk_dim=8        # one point

Arguments: heads, qk_dim, seed (the point train.py trains), seeds (the sweep runs seeds 0..seeds-1), steps,
pairs, quick (tiny sizes: a 1-layer d_model 16 model on 2 pairs, a few steps, the grid cut to 2 x 1).
"""
from engine.config import parse_arg, sibling_config

small_decoder_config = sibling_config(__file__, "_presets").small_decoder_config

HEADS = (1, 2, 4)
QK_DIMS = (2, 8, 32)


def _parse(arg):
    return parse_arg(arg, heads=2, qk_dim=8, seed=0, seeds=3, steps=3000, pairs=4, quick=False)


def get_config(arg=None):
    a = _parse(arg)
    q = a.quick
    steps = min(a.steps, 5) if q else a.steps
    d_model = 16 if q else 64
    if a.heads <= 0 or d_model % a.heads:
        raise ValueError(f"mqar_grid: heads={a.heads} must be a positive divisor of d_model={d_model}")
    c = small_decoder_config(
        "mqar", quick=q, d_model=d_model, heads=a.heads, layers=1 if q else 2, learning_rate=3e-3, steps=steps,
        batch_size=8 if q else 32, seq_len=16 if q else 32, vocab=32 if q else 64, log_every=max(1, steps // 40),
        num_eval_batches=1 if q else 8, qk_dim=a.qk_dim, v_dim=d_model // a.heads)
    c.data.mqar_num_kv_pairs = 2 if q else a.pairs
    c.seed = a.seed
    c.wandb.tags = tuple(c.wandb.tags) + ("mqar_grid",)
    return c


def sweep(arg=None):
    """Points: seed x num_heads in HEADS x qk_dim in QK_DIMS, v_dim = d_model / num_heads."""
    a = _parse(arg)
    d_model = get_config(arg).model.d_model
    heads, qk_dims = (HEADS[:2], (8,)) if a.quick else (HEADS, QK_DIMS)
    for seed in range(1 if a.quick else a.seeds):
        for h in heads:
            for dk in qk_dims:
                yield {"model.num_heads": h, "model.qk_dim": dk, "model.v_dim": d_model // h, "seed": seed}
