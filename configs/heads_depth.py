"""Heads vs depth (Liu, Liu & Han 2021, "Multi-head or single-head? An empirical comparison for Transformer
training"): 8 heads x 3+3 layers against single-head models 6+6, 12+12 and 24+24 layers deep with the same
parameter count, each with and without QK-LayerNorm (pre-LN), and each once more post-LN (Vaswani et al.'s
placement, no stabiliser), where depth is known to make training hard (Liu et al. 2020, Xiong et al. 2020), and
post-LN once more with a long learning-rate warmup (a third of the steps instead of 100), the stabiliser post-LN
Transformers are trained with (Vaswani et al.; Xiong et al. 2020), and post-LN with Admin (Liu et al. 2020's
residual scales, set from one forward pass at initialisation; the 100-step warmup), the stabiliser Liu, Liu & Han
trained their deep single-head models with.

    python -m studies train heads_vs_depth                             # the sweep, records and report
    python -m studies sweep --config=configs/heads_depth.py            # the same points through the runner
    python train.py --config=configs/heads_depth.py:arch=h1_L12,qkln   # one point
    python train.py --config=configs/heads_depth.py:arch=h1_L24,post   # one post-LN point
    python train.py --config=configs/heads_depth.py:arch=h1_L24,post,warmup=800   # post-LN, long warmup
    python train.py --config=configs/heads_depth.py:arch=h1_L24,admin   # post-LN with Admin
    python train.py --config=configs/heads_depth.py:arch=h1_L6,long     # QK-LN off, 3x the steps

The shallow model is the Table 3 CPU-scale translation model (``configs/table3_heads.py``: d_model 128, 8
heads of d_k = d_v = 16, d_ff 512, no QK-LayerNorm, learning rate 3e-3, 2,400 steps, validation loss every
600 steps). The deep models follow Liu et al.'s construction: each multi-head layer is split into m = L / 3
single-head layers that share its attention and feed-forward widths, so a single-head layer has
d_k = d_v = 8 x 16 / m and d_ff = 512 / m (6+6: d_k 64, d_ff 256; 12+12: d_k 32, d_ff 128; 24+24: d_k 16,
d_ff 64, the paper's case: as many heads per stack as the 3+3 model, each as wide). Attention and
feed-forward weights are then equal to the shallow model's at every depth; only LayerNorms and output biases
grow with the number of layers (encoder + decoder parameters 1,389,056 at 3+3, 1,394,816 at 6+6, 1,406,336 at
12+12, 1,429,376 at 24+24: 2.9% more). QK-LayerNorm adds 2 d_k scales per attention sublayer and changes nothing
else; post-LN drops the final LayerNorm of each stack (d_model x 2 x 2 parameters); Admin adds a d_model scale per
sublayer.

Arguments (``:key=value,...``): arch (one of ARCHS), qkln (QK-LayerNorm on), post (post-LN; QK-LayerNorm off),
admin (post-LN with Admin, ``model.norm="admin"``; QK-LayerNorm off), long (pre-LN, QK-LayerNorm off, LONG_BUDGET
times the steps, validation at the same cadence; the long-budget arm trains LONG_ARCHS only), warmup
(learning-rate warmup steps; 0 = the Table 3 model's 100), seed, seeds (the sweep runs seeds 0..seeds-1), steps,
minutes (optional time cap), test_examples (0 = all), quick (tiny model: d_model 64, 4 heads x 1+1 against 1 head
x 2+2 and 4+4).
"""
from engine.config import parse_arg, sibling_config

ARCHS = {"h8_L3": (8, 3), "h1_L6": (1, 6), "h1_L12": (1, 12), "h1_L24": (1, 24)}  # name -> (heads, layers)
QUICK_ARCHS = {"h8_L3": (4, 1), "h1_L6": (1, 2), "h1_L12": (1, 4)}  # the first entry is the shallow reference
LONG_ARCHS = ("h8_L3", "h1_L6")  # the long-budget arm: the shallow reference and the shallowest deep model
LONG_BUDGET = 3  # the long-budget arm's steps, as a multiple of ``steps`` (7,200 of 2,400)


def parse(arg):
    return parse_arg(arg, arch="h8_L3", qkln=False, post=False, admin=False, long=False, warmup=0, seed=0, seeds=3,
                     steps=2400, minutes=0.0, test_examples=0, quick=False)


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


def long_warmup(a) -> int:
    """Warmup steps of the long-warmup arm: a third of the training steps (800 of 2,400), at least 1."""
    return max(_base(a).train.num_steps // 3, 1)


def arch_overrides(a, arch: str, qkln: bool, post: bool = False, warmup: int = 0, admin: bool = False,
                   long: bool = False) -> dict:
    """The model fields of ``arch``: its heads and layers, and the shallow reference's attention and feed-forward
    widths split over ``layers / reference layers`` times as many layers (Liu et al.'s construction); with
    ``post`` the LayerNorms after each sublayer, with ``admin`` those and Admin's residual scales, with ``warmup``
    > 0 that many warmup steps, with ``long`` LONG_BUDGET times the steps (these fields are left out of points
    that keep the default, so earlier points keep their names)."""
    archs = QUICK_ARCHS if a.quick else ARCHS
    if arch not in archs:
        raise ValueError(f"heads_depth: arch={arch!r}; expected one of {sorted(archs)}")
    c = _base(a)
    (_, ref_layers), (heads, layers) = next(iter(archs.values())), archs[arch]
    width = c.model.d_model * ref_layers  # the reference's per-stack attention width, heads x d_k x layers
    if width % (heads * layers) or (c.model.d_ff * ref_layers) % layers:
        raise ValueError(f"heads_depth: arch={arch!r} ({heads} head(s) x {layers} layers) does not divide the "
                         f"reference's attention width {width} and d_ff {c.model.d_ff} x {ref_layers} evenly")
    if warmup < 0:
        raise ValueError(f"heads_depth: warmup={warmup}; expected a number of steps >= 0 (0 = the default 100)")
    if post and qkln:
        raise ValueError(f"heads_depth: arch={arch!r} with both post and qkln; the post-LN arm has QK-LayerNorm off")
    if admin and (post or qkln):
        raise ValueError(f"heads_depth: arch={arch!r} with admin and {'post' if post else 'qkln'}; admin is the "
                         "post-LN arm with Admin's residual scales, QK-LayerNorm off")
    if long and (post or admin or qkln or warmup):
        raise ValueError(f"heads_depth: arch={arch!r} with long and another arm; the long-budget arm is pre-LN, "
                         "QK-LayerNorm off, the default warmup")
    d_k = width // (heads * layers)
    # layers first: sweep points are named by the first fields that tell them apart (num_encoder_layers_24-...)
    fields = {"model.num_encoder_layers": layers, "model.num_decoder_layers": layers, "model.num_heads": heads,
              "model.qk_dim": d_k, "model.v_dim": d_k, "model.d_ff": c.model.d_ff * ref_layers // layers,
              "model.qk_layernorm": qkln}
    fields = {**fields, "model.norm": "admin" if admin else "post"} if post or admin else fields
    if long:
        fields["train.num_steps"] = LONG_BUDGET * c.train.num_steps
    return {**fields, "train.warmup_steps": warmup} if warmup else fields


def get_config(arg=None):
    a = parse(arg)
    c = _base(a)
    for key, value in arch_overrides(a, a.arch, a.qkln, a.post, a.warmup, a.admin, a.long).items():
        group, field = key.split(".", 1)
        c[group][field] = value
    c.wandb.tags = tuple(c.wandb.tags) + ("heads_depth",)
    return c


def sweep(arg=None):
    """Points: seed x (pre-LN with QK-LayerNorm off, on; post-LN) x arch (ARCHS, or QUICK_ARCHS),
    parameter-matched; then seed x arch post-LN with Admin, then seed x LONG_ARCHS with the long budget, then
    seed x arch post-LN with the long warmup (the last three added after the first arms, so they run after them;
    Admin first, the stabiliser of Liu, Liu & Han; the long budget before the long warmup, whose deep pilots did
    not train)."""
    a = parse(arg)
    archs = QUICK_ARCHS if a.quick else ARCHS
    for seed in range(a.seeds):
        for qkln, post in ((False, False), (True, False), (False, True)):
            for arch in archs:
                yield {**arch_overrides(a, arch, qkln, post), "seed": seed}
    for seed in range(a.seeds):
        for arch in archs:
            yield {**arch_overrides(a, arch, False, admin=True), "seed": seed}
    for seed in range(a.seeds):
        for arch in LONG_ARCHS:
            yield {**arch_overrides(a, arch, False, long=True), "seed": seed}
    for seed in range(a.seeds):
        for arch in archs:
            yield {**arch_overrides(a, arch, False, True, long_warmup(a)), "seed": seed}
