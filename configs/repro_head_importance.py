"""Which heads matter? (Michel et al., NeurIPS 2019; Voita et al., ACL 2019) on the main translation job.

``configs/translation.py`` (Spanish -> English Bible verses, pre-LN, QK-LayerNorm) with 8 heads per layer;
training ends with the usual validation loss and a greedy BLEU on the first ``sentences`` test sentences,
the subset ``studies/specs/head_importance.py`` decodes again under every intervention (``models.Interventions``).

    python -m studies train head_importance               # the report -> docs/results/head_importance/
    python -m studies sweep --config=configs/repro_head_importance.py
    python train.py --config=configs/repro_head_importance.py:seed=1,uniform=true

Arguments: seed, seeds (sweep: seeds 0..seeds-1, then the uniform baseline of seed 0), steps, minutes (training
budget per run), layers, sentences (test sentences decoded at the end), uniform (cross-attention frozen to
uniform, Wiegreffe & Pinter's baseline), quick (tiny sizes, a few steps).
"""
import importlib.util
import os

from engine.config import parse_arg

HEADS = 8


def _parse(arg):
    return parse_arg(arg, seed=0, seeds=3, steps=100_000, minutes=12.0, layers=3, sentences=300, uniform=False,
                     quick=False)


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
    c.model.uniform_attention_groups = ("cross",) if a.uniform else ()
    c.train.checkpoint_every = 0
    e = c.eval
    e.split_examples = a.sentences
    e.heatmap_examples = 0
    # Decoding is most of the study's time: length-sorted batches of ~100 sentences padded to multiples of 16
    # tokens (a few compiled shapes) instead of one 128 x 128 shape.
    e.decode_batch_size = 100
    e.length_bucket = 16
    if a.quick:
        c.train.num_steps = min(a.steps, 4)
        e.split_examples = min(a.sentences, 8)
        e.max_batches = 2
        e.decode_batch_size = 8
        e.max_decode_extra = 8
    c.seed = a.seed
    return c


def sweep(arg=None):
    """Points: seeds 0..seeds-1, then seed 0 with uniform cross-attention."""
    for seed in range(_parse(arg).seeds):
        yield {"seed": seed}
    yield {"seed": 0, "model.uniform_attention_groups": ("cross",)}
