"""Vaswani et al. (2017) Transformer big on WMT14 English -> German, for accelerators.

    python train.py --config=configs/translation_big.py
    python train.py --config=configs/translation_big.py:steps=300000 --config.mesh.model=2

As ``translation_wmt14.py`` with d_model 1024, 16 heads, d_ff 4096, dropout 0.3 (the paper's EN-DE big:
213M parameters with a 37k shared vocabulary), peak learning rate (1024 * 4000)^-0.5 and 300k steps.
Arguments: those of ``translation_wmt14.py``.
"""
from engine.config import sibling_config

_base = sibling_config(__file__, "translation_wmt14")


def get_config(arg=None):
    defaults = "heads=16,d_model=1024,d_ff=4096,dropout=0.3,steps=300000"
    c = _base.get_config(defaults + ("," + arg if arg else ""))
    c.wandb.tags = tuple(c.wandb.tags) + ("big",)
    return c
