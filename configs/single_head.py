"""The single-head follow-up (issue 49): the Table 3 CPU-scale model (d_model 128) at one row, one learning rate
and one budget per sweep, validation every 600 steps; the study ``studies/specs/single_head*.py`` picks the rates.

    python -m studies sweep --config=configs/single_head.py:row=h1,lr=0.003,steps=2400,seeds=1,first_seed=10
    python train.py --config=configs/single_head.py:row=h8,lr=0.0015,steps=7200,seed=3
    python train.py --config=configs/single_head.py:row=h1,lr=0.003,steps=7200,recipe   # the paper's recipe

Rows (ROWS): ``h1 h2 h8 h32`` (Table 3 rows (A): h heads of d_k = d_v = 128 / h, 3+3 layers), ``dk4`` (rows (B)
at 1/4: 8 heads, d_k 4 = 16 / 4, d_v 16), ``h1_L6`` and ``h1_L24`` (Liu, Liu & Han's single-head models 6+6 and
24+24 deep with the 8-head model's attention and feed-forward widths split over the layers: d_k 64 / 16, d_ff 256
/ 64; ``configs/heads_depth.py``). Every row is pre-LN without dropout or QK-LayerNorm, as Table 3's points.

Arguments (``:key=value,...``): row; lr (the peak learning rate; required: the study chooses it per row, 0 =
not chosen yet, which get_config refuses); steps (2,400 or 7,200); seed, seeds and first_seed (the sweep trains
seeds first_seed .. first_seed + seeds - 1); recipe (the paper's recipe: post-LN, dropout 0.1 on the residual
branches and embeddings, RECIPE_WARMUP warmup steps with the peak lowered to lr x sqrt(100 / RECIPE_WARMUP), so
after the warmup the schedule is the row's pre-LN one, as the paper's schedule d^-0.5 min(t^-0.5, t w^-1.5) keeps
its tail whatever the warmup); quick (tiny model, a few steps: for tests).
A diverging point stops (``train.on_non_finite="stop"``) and is recorded: the divergence is its result.
"""
import math

from engine.cli import UsageError
from engine.config import parse_arg, sibling_config

SHALLOW = {"h1": (1, 128, 128), "h2": (2, 64, 64), "h8": (8, 16, 16), "h32": (32, 4, 4), "dk4": (8, 4, 16)}
DEEP = {"h1_L6": 2, "h1_L24": 8}  # single-head rows: layers (and 1 / d_k, 1 / d_ff) as a multiple of the base's
ROWS = tuple(SHALLOW) + tuple(DEEP)
EVAL_EVERY = 600  # validation steps: 600, 1200, ... (4 at 2,400 steps, 12 at 7,200)
RECIPE_WARMUP = 800  # the warmup that trained post-LN 8 heads x 3+3 in docs/results/heads_vs_depth (100 did not)
RECIPE_DROPOUT = 0.1


def parse(arg):
    return parse_arg(arg, row="h8", lr=0.0, steps=2400, seed=0, seeds=1, first_seed=0, recipe=False, quick=False)


def get_config(arg=None):
    a = parse(arg)
    if a.row not in ROWS:
        raise ValueError(f"single_head: row={a.row!r}; expected one of {list(ROWS)}")
    if a.lr < 0 or (a.lr == 0 and not a.quick):
        raise UsageError(f"configs/single_head.py: row={a.row} has lr={a.lr:g}: its learning rate is chosen by the "
                         "learning-rate arm, which has not finished (python -m studies train single_head_lr; its "
                         "records committed); the long arms start after it")
    t3 = sibling_config(__file__, "table3_heads")
    c = t3.base(t3.parse(f"steps={a.steps},minutes=0,test_examples=0,d_model=128,seed={a.seed}"
                         + (",quick" if a.quick else "")))
    d_model, layers, d_ff = c.model.d_model, c.model.num_encoder_layers, c.model.d_ff
    if a.row in SHALLOW:
        heads, qk, v = SHALLOW[a.row]
        scale = d_model / 128  # quick: the tiny model, widths in proportion
        c.model.update(num_heads=heads, qk_dim=max(int(qk * scale), 1), v_dim=max(int(v * scale), 1))
    else:
        m = DEEP[a.row]
        c.model.update(num_heads=1, qk_dim=d_model // m, v_dim=d_model // m, d_ff=d_ff // m,
                       num_encoder_layers=layers * m, num_decoder_layers=layers * m)
    if a.lr > 0:
        c.train.learning_rate = a.lr
    c.train.eval_every = max(c.train.num_steps // 2, 1) if a.quick else EVAL_EVERY
    c.train.on_non_finite = "stop"
    if a.recipe:
        warmup = c.train.warmup_steps if a.quick else RECIPE_WARMUP
        c.train.learning_rate *= math.sqrt(c.train.warmup_steps / warmup)
        c.train.warmup_steps = warmup
        c.model.norm = "post"
        c.model.dropout_rate = RECIPE_DROPOUT
    c.wandb.tags = tuple(c.wandb.tags) + ("single_head",)
    return c


def sweep(arg=None):
    """Points: seed first_seed .. first_seed + seeds - 1 of the row (the learning rate and budget are arguments, so
    each (row, rate, budget) is a sweep of its own)."""
    a = parse(arg)
    if a.row not in ROWS:
        raise ValueError(f"single_head: row={a.row!r}; expected one of {list(ROWS)}")
    if a.seeds < 1 or a.first_seed < 0:
        raise ValueError(f"single_head: seeds={a.seeds}, first_seed={a.first_seed}; expected >= 1 and >= 0")
    for seed in range(a.first_seed, a.first_seed + a.seeds):
        yield {"seed": seed}
