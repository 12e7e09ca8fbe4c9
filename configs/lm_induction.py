"""Decoder-only synthetic task: induction heads (a random segment repeated later in the sequence).

    python train.py --config=configs/lm_induction.py
    python train.py --config=configs/lm_induction.py:layers=1        # one layer cannot form induction heads
    python train.py --config=configs/lm_induction.py:layout=repeat   # a block tiled (studies/specs/induction.py)

Evaluation: accuracy on the repeated segment's positions (``validation/accuracy``). Arguments: segment,
layout (``segment``: one repeat among random tokens; ``repeat``: a block of segment/2..segment tokens tiled),
seq_len, vocab, heads, layers, d_model, steps, runlocal.
"""
from engine.config import parse_arg, sibling_config

synthetic_config = sibling_config(__file__, "_presets").synthetic_config


def get_config(arg=None):
    a = parse_arg(arg, segment=8, layout="segment", seq_len=64, vocab=64, heads=2, qk_dim=0, layers=2, d_model=64,
                  steps=2000, runlocal=False)
    c = synthetic_config("induction", heads=a.heads, qk_dim=a.qk_dim, layers=a.layers, d_model=a.d_model,
                         steps=a.steps, runlocal=a.runlocal)
    c.data.update(vocab_size=a.vocab, seq_len=a.seq_len, induction_segment_len=a.segment,
                  induction_layout=a.layout)
    c.model.max_len = a.seq_len
    return c
