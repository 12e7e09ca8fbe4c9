"""Vaswani et al. (2017) Table 3 rows (A): the number of heads at constant compute, d_k = d_v = d_model / h.

    python -m studies sweep --config=configs/table3_heads.py                 # CPU scale, 3 seeds, 2,400 steps
    python -m studies sweep --config=configs/table3_heads.py:d_model=256     # wider: h = 16 still has d_k 16
    python -m studies sweep --config=configs/table3_heads.py:wmt14,seeds=2   # paper scale, WMT14 EN-DE
    python train.py --config=configs/table3_heads.py:heads=16,seed=1          # one point

Arguments (``:key=value,...``): heads and seed (the point train.py trains), seeds (the sweep runs seeds
0..seeds-1), wmt14 (paper scale: ``configs/translation_wmt14.py``, d_model 512, h in {1, 2, 4, 8, 16, 32}), d_model
(CPU scale: 128, or 256 with d_ff 1024; 512 with d_ff 2048 on an accelerator, ``scripts/gpu_sweeps.py``), steps
(CPU scale: training steps per point, default 2,400 = the main job's budget; a step budget, not a time budget, so
every point sees the same data whatever the machine load), minutes (CPU scale: an optional time cap, 0 = none),
test_examples (CPU scale: test sentences decoded per point, 0 = all), quick (CPU scale, tiny model and a few
steps), aa (the A/A control: the sweep yields only the base point h = 8, with the seeds after the main ones, seeds
.. 2 * seeds - 1), more_h1 (the single-head extension: h = 1 only, at the same later seeds, so h = 1 and h = 8 both
have 2 * seeds), h1_base_dk (the single-head d_k control: h = 1 with the base's d_k = d_model / 8 and d_v =
d_model, seeds 0 .. seeds - 1).
With qk_dim > 0 a single point keeps d_v = d_model / h and takes that d_k.
At CPU scale the base is ``configs/translation.py`` (d_model 128: d_k = 128, 64, 32, 16, 8, 4) without
QK-LayerNorm (the paper's attention) at learning rate ``learning_rate(d_model)`` (3e-3 at d_model 128), with the
validation loss (whole validation split, no decoding) every 600 steps (a fourth of the budget) for learning curves.
"""
from engine.config import parse_arg, sibling_config

HEADS = (1, 2, 4, 8, 16, 32)


def learning_rate(d_model: int) -> float:
    """The peak learning rate at width ``d_model``: 3e-3 x 128 / d_model (3e-3 at 128, 1.5e-3 at 256, 7.5e-4 at
    512). Fixed on 2026-12-03, before any point at d_model 256 or 512 ran, from 300-step pilots of the base point
    at 3e-3 x (128 / d_model)^k, k = 0, 1/2, 1 (``docs/results/table3_d512/pilot_lr.csv``): k = 1 had the lowest
    validation NLL at both widths, and at 3e-3 the largest attention logit reached 120 at 256 and 700 at 512 by
    step 300 (20 at 128)."""
    return 3e-3 * 128 / d_model


def parse(arg):
    """The arguments of the Table 3 configs (shared with ``configs/table3_dk.py``)."""
    return parse_arg(arg, heads=8, qk_dim=0, seed=0, seeds=3, wmt14=False, d_model=128, steps=2400, minutes=0.0,
                     test_examples=0, quick=False, aa=False, more_h1=False, h1_base_dk=False)


def base(a):
    """The translation config a Table 3 point starts from, with its W&B tags."""
    if a.wmt14:
        c = sibling_config(__file__, "translation_wmt14").get_config(None)
    else:
        c = sibling_config(__file__, "translation").get_config(
            f"minutes={a.minutes:g},steps={a.steps},d_model={a.d_model},d_ff={4 * a.d_model}"
            + (",runlocal" if a.quick else ""))
        c.eval.heatmap_examples = 0  # sweeps compare numbers; heatmaps come from the per-point entropy stats
        c.train.eval_every = max(c.train.num_steps // (2 if a.quick else 4), 1)  # valid loss: every 600 of 2,400
        c.eval.bleu_examples = 0  # ... without decoding during training
        c.eval.split_examples = a.test_examples
        c.model.qk_layernorm = False  # the paper's attention: d_k must matter through the logit scale
        c.train.learning_rate = learning_rate(a.d_model)
    c.seed = a.seed
    c.wandb.tags = tuple(c.wandb.tags) + ("table3",)
    return c


def get_config(arg=None):
    a = parse(arg)
    c = base(a)
    d_model = c.model.d_model
    if a.heads <= 0 or d_model % a.heads:
        raise ValueError(f"table3_heads: heads={a.heads} must be a positive divisor of d_model={d_model}")
    if a.qk_dim < 0:
        raise ValueError(f"table3_heads: qk_dim={a.qk_dim}; expected a positive width (0 = d_model / heads)")
    c.model.num_heads = a.heads
    c.model.qk_dim = a.qk_dim or d_model // a.heads
    c.model.v_dim = d_model // a.heads
    return c


def sweep(arg=None):
    """Points: seed x h in HEADS (those dividing d_model; quick: h 1 and 8, one seed), with qk_dim = v_dim =
    d_model / h; with ``aa``, the
    base point h = 8 only, at seeds seeds .. 2 * seeds - 1 (the A/A control against seeds 0 .. seeds - 1); with
    ``more_h1``, h = 1 only at those seeds; with ``h1_base_dk``, h = 1 with d_k = d_model / 8 and d_v = d_model at
    seeds 0 .. seeds - 1."""
    a = parse(arg)
    d_model = base(a).model.d_model
    if a.aa + a.more_h1 + a.h1_base_dk > 1:
        raise ValueError("table3_heads: at most one of aa, more_h1, h1_base_dk; each is a sweep of its own")
    if a.h1_base_dk:
        for seed in range(a.seeds):
            yield {"model.num_heads": 1, "model.qk_dim": d_model // 8, "model.v_dim": d_model, "seed": seed}
        return
    if a.aa or a.more_h1:
        h = 8 if a.aa else 1
        for seed in range(a.seeds, 2 * a.seeds):
            yield {"model.num_heads": h, "model.qk_dim": d_model // h, "model.v_dim": d_model // h, "seed": seed}
        return
    for seed in range(1 if a.quick else a.seeds):
        for h in (1, 8) if a.quick else HEADS:  # quick: the single head against the base, one seed (2 points)
            if d_model % h == 0:
                yield {"model.num_heads": h, "model.qk_dim": d_model // h, "model.v_dim": d_model // h,
                       "seed": seed}
