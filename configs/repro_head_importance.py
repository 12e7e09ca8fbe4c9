"""Are sixteen heads really better than one? (Michel et al., NeurIPS 2019) on the main translation job.

``configs/translation.py`` (Spanish -> English Bible verses, pre-LN, QK-LayerNorm) with 8 heads per layer;
training ends with the usual validation loss and a BLEU on ``split_examples`` decoded test sentences.
``scripts/repro_head_importance.py`` masks heads of the trained model (``models.Interventions``).

    python scripts/repro_head_importance.py               # the report -> docs/results/head_importance/
    python scripts/sweep.py --config=configs/repro_head_importance.py
    python train.py --config=configs/repro_head_importance.py:seed=1

Arguments: seed, seeds (sweep: seeds 0..seeds-1), steps, minutes (training budget per run), layers,
split_examples (test sentences decoded at the end), quick (tiny sizes, a few steps).
"""
import importlib.util
import os

from engine.config import parse_arg

HEADS = 8


def _parse(arg):
    return parse_arg(arg, seed=0, seeds=3, steps=100_000, minutes=12.0, layers=3, split_examples=500, quick=False)


def _translation(arg: str):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "translation.py")
    spec = importlib.util.spec_from_file_location("_translation_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg)


def get_config(arg=None):
    a = _parse(arg)
    c = _translation(f"heads={HEADS},layers={a.layers},steps={a.steps},minutes={a.minutes}"
                     + (",runlocal" if a.quick else ""))
    c.model.num_heads = HEADS
    c.train.checkpoint_every = 0
    c.eval.split_examples = a.split_examples
    c.eval.heatmap_examples = 0
    if a.quick:
        c.train.num_steps = min(a.steps, 4)
        c.eval.split_examples = min(a.split_examples, 8)
        c.eval.max_batches = 2
    c.seed = a.seed
    return c


def sweep(arg=None):
    """Points: seeds 0..seeds-1."""
    for seed in range(_parse(arg).seeds):
        yield {"seed": seed}
