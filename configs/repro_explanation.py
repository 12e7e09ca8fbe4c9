"""Is attention explanation? (Jain & Wallace 2019; Wiegreffe & Pinter 2019) on the classification task.

The classification model of ``configs/classification.py`` (a 2-layer encoder with an attention-pooling
classifier, verses labelled by testament) on the ``reference`` attention backend, so the pooling weights
exist for the analysis; ``uniform=true`` freezes the pooling attention to uniform over the verse's tokens
(``model.uniform_attention_groups=("pool",)``), Wiegreffe & Pinter's baseline, trained from scratch.

    python scripts/repro_explanation.py                    # the report -> docs/results/explanation/
    python scripts/sweep.py --config=configs/repro_explanation.py
    python train.py --config=configs/repro_explanation.py:uniform=true

Arguments: seed, seeds (sweep: seeds 0..seeds-1), steps, label, uniform, quick (tiny sizes, a few steps).
"""
import importlib.util
import os

from engine.config import parse_arg


def _parse(arg):
    return parse_arg(arg, seed=0, seeds=3, steps=2000, label="testament", uniform=False, quick=False)


def _classification(arg: str):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "classification.py")
    spec = importlib.util.spec_from_file_location("_classification_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg)


def get_config(arg=None):
    a = _parse(arg)
    c = _classification(f"label={a.label},steps={a.steps}" + (",quick" if a.quick else ""))
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
