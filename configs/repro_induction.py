"""Reproduction 6: induction heads and the in-context-learning phase change (Olsson et al. 2022).

Attention-only decoders (no MLP blocks) with 1 or 2 layers, 4 heads, rotary positions and an untied output,
trained as language models (loss on every token) on sequences made of a block of random distinct tokens
repeated until the sequence is full (``induction_layout="repeat"``, block length uniform in [segment/2,
segment] per row). The held-out loss per position is logged every ``steps // 60`` steps
(``eval.position_loss``); ``studies/specs/induction.py`` turns it into the ICL score, measures each head's
previous-token and prefix-matching scores at the same steps (a hook of its own) and masks heads at the end.

    python train.py --config=configs/repro_induction.py:layers=2          # one run through train.py
    python -m studies sweep --config=configs/repro_induction.py           # layers x seeds, resumable
    python -m studies train induction                                     # the report (in-process runs)

Arguments: layers, seed, seeds (sweep: seeds 0..seeds-1), steps, quick (tiny sizes, seconds).
"""
from engine.config import parse_arg, sibling_config

small_decoder_config = sibling_config(__file__, "_presets").small_decoder_config

LR = 3e-3
HEADS = 4


def _parse(arg):
    return parse_arg(arg, layers=2, seed=0, seeds=3, steps=1500, quick=False)


def get_config(arg=None):
    a = _parse(arg)
    q = a.quick
    steps = min(a.steps, 4) if q else a.steps
    c = small_decoder_config(
        "induction", quick=q, d_model=16 if q else 64, heads=HEADS, layers=a.layers, learning_rate=LR, steps=steps,
        batch_size=8 if q else 32, seq_len=16 if q else 64, vocab=16 if q else 64,
        log_every=max(1, steps // (2 if q else 60)), num_eval_batches=1 if q else 4,
        warmup_steps=min(100, max(1, steps // 10)))
    c.data.update(induction_segment_len=8 if q else 32, induction_layout="repeat")
    c.model.update(position="rope", tie_output=False, attention_only=True)
    c.train.loss_on = "all"
    c.train.eval_every = c.train.log_every
    c.eval.position_loss = True
    c.seed = a.seed
    return c


def sweep(arg=None):
    """Points: layers in (1, 2) x seeds."""
    a = _parse(arg)
    for layers in (1, 2):
        for seed in range(a.seeds if not a.quick else 1):
            yield {"model.num_decoder_layers": layers, "seed": seed}
