"""Decoder-only synthetic task: copy (or reverse / sort) a sequence of tokens after a separator.

    python train.py --config=configs/lm_copy.py
    python train.py --config=configs/lm_copy.py:task=reverse,heads=4,layers=2

Evaluation: token accuracy and sequence accuracy on the answer positions (``validation/accuracy``,
``validation/sequence_accuracy``) of a fixed held-out set. Arguments: task (copy | reverse | sort), heads,
qk_dim, layers, d_model, steps, runlocal.
"""
from engine.config import parse_arg, sibling_config

synthetic_config = sibling_config(__file__, "_presets").synthetic_config


def get_config(arg=None):
    a = parse_arg(arg, task="copy", heads=4, qk_dim=0, layers=2, d_model=128, steps=2000, runlocal=False)
    if a.task not in ("copy", "reverse", "sort"):
        raise ValueError(f"lm_copy.py: task={a.task!r}; expected copy, reverse or sort")
    c = synthetic_config(a.task, heads=a.heads, qk_dim=a.qk_dim, layers=a.layers, d_model=a.d_model, steps=a.steps,
                         runlocal=a.runlocal)
    c.data.update(vocab_size=32, seq_len=64, min_items=4, max_items=24)
    c.model.max_len = 64
    return c
