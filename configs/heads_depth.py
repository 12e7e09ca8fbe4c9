"""Heads vs depth (Li et al. 2021, "Multi-head or single-head?"): 8 heads x 3+3 layers against 1 head x 6+6
layers at the same parameter count, with and without QK-LayerNorm.

    python scripts/repro_heads_depth.py                               # the sweep, records and report
    python scripts/sweep.py --config=configs/heads_depth.py           # the same points through the runner
    python train.py --config=configs/heads_depth.py:arch=h1_L6,qkln   # one point

The model is the Table 3 CPU-scale translation model (``configs/table3_heads.py``: d_model 128, d_ff 512,
no QK-LayerNorm, learning rate 3e-3, 2,400 steps, validation loss every 600 steps). Attention and
feed-forward weights both grow with the number of layers (4 d^2 per attention sublayer whatever the head
count), so the deep single-head model gets a smaller d_ff, solved from ``models.param_count_breakdown`` so
that its encoder + decoder parameters equal the shallow model's without QK-LayerNorm (d_ff 512 -> 62 at
d_model 128: 1,389,800 against 1,389,056; embeddings are the same). QK-LayerNorm's scales add 2 d_k per
attention sublayer (4,608 parameters in the deep model, 288 in the shallow one) and the same d_ff is kept, so
the QK-LayerNorm contrast changes nothing else. A 12+12 single-head model cannot be matched at d_model 128: its attention alone has more
parameters than the whole 3+3 model.

Arguments (``:key=value,...``): arch (``h8_L3`` or ``h1_L6``), qkln (QK-LayerNorm on), seed, seeds (the
sweep runs seeds 0..seeds-1), steps, minutes (optional time cap), test_examples (0 = all), quick (tiny model:
d_model 64, 4 heads x 1+1 layers against 1 head x 2+2).
"""
from engine.config import parse_arg, sibling_config

ARCHS = {"h8_L3": (8, 3), "h1_L6": (1, 6)}  # name -> (heads, encoder and decoder layers)
QUICK_ARCHS = {"h8_L3": (4, 1), "h1_L6": (1, 2)}


def parse(arg):
    return parse_arg(arg, arch="h8_L3", qkln=False, seed=0, seeds=3, steps=2400, minutes=0.0, test_examples=0,
                     quick=False)


def _base(a):
    t3 = sibling_config(__file__, "table3_heads")
    return t3.base(t3.parse(f"steps={a.steps},minutes={a.minutes:g},test_examples={a.test_examples},seed={a.seed}"
                            + (",quick" if a.quick else "")))


def layer_params(config) -> int:
    """Encoder + decoder parameters (embeddings excluded) of ``config.model``."""
    import models
    from engine.state import model_config

    parts = models.param_count_breakdown(model_config(config, 8000))
    return parts["encoder"] + parts["decoder"]


def arch_overrides(a, arch: str, qkln: bool) -> dict:
    """The model fields of ``arch`` (heads, layers, d_k = d_v = d_model / heads, the matched d_ff)."""
    archs = QUICK_ARCHS if a.quick else ARCHS
    if arch not in archs:
        raise ValueError(f"heads_depth: arch={arch!r}; expected one of {sorted(archs)}")
    c = _base(a)
    d = c.model.d_model
    ref_heads, ref_layers = archs["h8_L3"]
    heads, layers = archs[arch]

    def set_model(cfg, h, n, d_ff):  # matched without QK-LayerNorm, so both QK-LN settings share d_ff
        cfg.model.update(num_heads=h, qk_dim=d // h, v_dim=d // h, num_encoder_layers=n, num_decoder_layers=n,
                         d_ff=d_ff, qk_layernorm=False)
        return cfg

    target = layer_params(set_model(_base(a), ref_heads, ref_layers, c.model.d_ff))
    at1 = layer_params(set_model(_base(a), heads, layers, 1))  # parameters are linear in d_ff
    slope = layer_params(set_model(_base(a), heads, layers, 2)) - at1
    d_ff = max(1, 1 + round((target - at1) / slope))
    return {"model.num_heads": heads, "model.qk_dim": d // heads, "model.v_dim": d // heads,
            "model.num_encoder_layers": layers, "model.num_decoder_layers": layers, "model.d_ff": d_ff,
            "model.qk_layernorm": qkln}


def get_config(arg=None):
    a = parse(arg)
    c = _base(a)
    for key, value in arch_overrides(a, a.arch, a.qkln).items():
        c.model[key.split(".", 1)[1]] = value
    c.wandb.tags = tuple(c.wandb.tags) + ("heads_depth",)
    return c


def sweep(arg=None):
    """Points: seed x QK-LayerNorm (off, on) x arch (h8_L3, h1_L6), parameter-matched."""
    a = parse(arg)
    for seed in range(a.seeds):
        for qkln in (False, True):
            for arch in ARCHS:
                yield {**arch_overrides(a, arch, qkln), "seed": seed}
