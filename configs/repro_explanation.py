"""Is attention explanation? (Jain & Wallace 2019; Wiegreffe & Pinter 2019) on the classification task.

The classification model of ``configs/classification.py`` (a 2-layer encoder with an attention-pooling
classifier, verses labelled by testament) on the ``reference`` attention backend, so the pooling weights
exist for the analysis; ``uniform=true`` freezes the pooling attention to uniform over the verse's tokens
(``model.uniform_attention_groups=("pool",)``), Wiegreffe & Pinter's baseline, trained from scratch.

    python -m studies train explanation                    # the report -> docs/results/explanation/
    python -m studies sweep --config=configs/repro_explanation.py
    python train.py --config=configs/repro_explanation.py:uniform=true

Arguments: seed, seeds (sweep: seeds 0..seeds-1), steps, label, uniform, quick (tiny sizes, a few steps).
"""
from engine.config import parse_arg, sibling_config


def _parse(arg):
    return parse_arg(arg, seed=0, seeds=3, steps=2000, label="testament", uniform=False, quick=False)


def get_config(arg=None):
    a = _parse(arg)
    c = sibling_config(__file__, "classification").get_config(f"label={a.label},steps={a.steps}"
                                                              + (",quick" if a.quick else ""))
    c.model.attention_impl = "reference"
    c.model.uniform_attention_groups = ("pool",) if a.uniform else ()
    c.train.eval_every = 0
    c.train.checkpoint_every = 0
    c.seed = a.seed
    return c


def sweep(arg=None):
    """Points: seeds 0..seeds-1, each with learned and with uniform pooling attention."""
    a = _parse(arg)
    for seed in range(a.seeds):
        for uniform in (False, True):
            yield {"seed": seed, "model.uniform_attention_groups": ("pool",) if uniform else ()}
