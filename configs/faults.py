"""The fault library: short runs that plant each failure the attention health monitor claims to see, and
healthy runs that are hard for it, to calibrate and test the monitor (``studies/specs/health_calibration.py``).

Tasks: ``mqar`` (multi-query associative recall, a 2-layer pre-LN decoder: the entropy-collapse and logit-growth
studies' set-up), ``induction`` (an LM induction task) and ``translation`` (the main job's Bible es->en, 2+2
layers). Faults (``fault=``):

- ``healthy``: the task's working set-up;
- ``scale_missing``: no 1/sqrt(d_k) logit scale (``model.attention_scale=1``);
- ``scale_dk``: 1/d_k instead of 1/sqrt(d_k);
- ``temperature_x10``: 10/sqrt(d_k) (softmax temperature a tenth);
- ``no_padding_mask``: the forward pass drops the padding mask (``model.fault``; translation, where rows pad);
- ``causal_leak``: decoder self-attention also sees the next token (``model.fault``);
- ``lr_high`` / ``lr_high_nowarmup``: the learning rate 30x the task's, with / without warmup;
- ``post_ln_deep``: post-LN at 6+6 (translation) or 8 (LM) layers without warmup;
- ``logit_growth``: the logit-growth study's unstable setting (learning rate 0.3, no QK-LayerNorm).

    python train.py --config=configs/faults.py:task=mqar,fault=scale_missing       # one run
    python -m studies train health_calibration                                     # the library, then the report

Arguments: task, fault, d_model, heads, steps, seed, norm ("" keeps the task's; "pre" / "post": pre- or post-LN
at the task's depth, any fault), quick (tiny sizes, a few steps: tests).
``library()`` lists the library (point names and config arguments): every fault on each task where it applies, at two widths and several head counts,
plus the hard healthy runs (16 and 32 heads, longer training); ``heldout()`` the calibration's held-out runs (a new
width and head counts, trained after the monitor's rules were committed); ``heldout2()`` a second held-out split
(two more new widths and head counts, trained after the ``attention_collapse`` rule was committed).
"""
import math

from engine.config import parse_arg, sibling_config

small_decoder_config = sibling_config(__file__, "_presets").small_decoder_config

TASKS = ("mqar", "induction", "translation")
FAULTS = ("healthy", "scale_missing", "scale_dk", "temperature_x10", "no_padding_mask", "causal_leak", "lr_high",
          "lr_high_nowarmup", "post_ln_deep", "logit_growth")
PADDED_TASKS = ("translation",)  # tasks whose rows carry padding (no_padding_mask applies)
LR = {"mqar": 3e-3, "induction": 3e-3, "translation": 2e-3}
LR_HIGH_FACTOR = 30.0
LOGIT_GROWTH_LR = 0.3  # docs/results/logit_growth/: unstable without QK-LayerNorm at both widths
NORMS = ("", "pre", "post")
WIDTHS = (64, 128)
HEADS = {64: (2, 4), 128: (4, 8)}


def _parse(arg):
    return parse_arg(arg, task="mqar", fault="healthy", d_model=64, heads=2, steps=100, seed=0, norm="",
                     quick=False)


def _base(task: str, d_model: int, heads: int, steps: int, quick: bool):
    if task == "translation":
        c = sibling_config(__file__, "translation").get_config(
            f"d_model={d_model},d_ff={4 * d_model},heads={heads},layers=2,steps={steps},minutes=0")
        c.model.qk_layernorm = False
        c.data.max_source_len = c.data.max_target_len = c.model.max_len = 64
        c.train.update(learning_rate=LR[task], warmup_steps=max(1, steps // 10), log_every=5,
                       stats_every=10, checkpoint_every=0)
        c.eval.bleu_examples = 0
        c.eval.heatmap_examples = 0
        if quick:
            c.data.batch_size = 8  # a multiple of the 8 simulated devices of the tests
            c.train.log_every = c.train.stats_every = 1
        return c
    c = small_decoder_config(
        task, quick=quick, d_model=d_model, heads=heads, layers=2, learning_rate=LR[task], steps=steps,
        batch_size=8 if quick else 64, seq_len=16 if task == "mqar" else 32, vocab=32 if quick else 128,
        log_every=1 if quick else 5, num_eval_batches=1 if quick else 8)
    if task == "mqar":
        c.data.mqar_num_kv_pairs = 2 if quick else 4
    else:
        c.data.induction_segment_len = 4 if quick else 8
    c.train.stats_every = 1 if quick else 10
    return c


def get_config(arg=None):
    a = _parse(arg)
    if a.task not in TASKS:
        raise ValueError(f"configs/faults.py: task={a.task!r}; expected one of {TASKS}")
    if a.fault not in FAULTS:
        raise ValueError(f"configs/faults.py: fault={a.fault!r}; expected one of {FAULTS}")
    if a.fault == "no_padding_mask" and a.task not in PADDED_TASKS:
        raise ValueError(f"configs/faults.py: fault=no_padding_mask needs a task with padding {PADDED_TASKS}; "
                         f"got task={a.task!r}")
    if a.d_model < 1 or a.heads < 1 or a.d_model % a.heads or a.steps < 1:
        raise ValueError(f"configs/faults.py: d_model={a.d_model}, heads={a.heads}, steps={a.steps}; expected "
                         f"positive values with heads dividing d_model")
    if a.norm not in NORMS:
        raise ValueError(f"configs/faults.py: norm={a.norm!r}; expected one of {NORMS}")
    q = a.quick
    # Quick sizes: d_model 16, except deep post-LN at 64 (at 16 its attention collapses only after ~16 steps).
    d_model, heads = ((64 if a.fault == "post_ln_deep" else 16), min(a.heads, 2)) if q else (a.d_model, a.heads)
    steps = min(a.steps, 12) if q else a.steps
    c = _base(a.task, d_model, heads, steps, q)
    d_k = d_model // heads
    m, t = c.model, c.train
    if a.norm:
        m.norm = a.norm
    f = a.fault
    if f == "scale_missing":
        m.attention_scale = 1.0
    elif f == "scale_dk":
        m.attention_scale = 1.0 / d_k
    elif f == "temperature_x10":
        m.attention_scale = 10.0 / math.sqrt(d_k)
    elif f in ("no_padding_mask", "causal_leak"):
        m.fault = f
        if q and f == "causal_leak" and a.task == "mqar":
            # Rows of 8 keys: one leaked key lifts the normalized entropy well past 1 at every quick check (at
            # 16 it hovers at 0.98-1.04 around mask_leak_ratio).
            c.data.seq_len = 8
    elif f == "lr_high":
        t.learning_rate = LR[a.task] * LR_HIGH_FACTOR
    elif f == "lr_high_nowarmup":
        t.learning_rate = LR[a.task] * LR_HIGH_FACTOR
        t.update(schedule="constant", warmup_steps=0)
    elif f == "post_ln_deep":
        m.norm = "post"
        if a.task == "translation":
            m.update(num_encoder_layers=6, num_decoder_layers=6)
        else:
            m.num_decoder_layers = 8
        t.update(schedule="constant", warmup_steps=0)
    elif f == "logit_growth":
        t.learning_rate = LOGIT_GROWTH_LR
    t.on_non_finite = "stop"
    c.seed = a.seed
    c.wandb.tags = tuple(c.wandb.tags) + ("faults", f)
    return c


def library(arg=None) -> list[tuple[str, str]]:
    """The library as (point name, config argument) pairs: each fault on each task it applies to, at both widths
    and two head counts per width (induction: one), then the hard healthy runs (16/32 heads, 4x longer
    training). ``quick``: each fault once at tiny sizes."""
    a = _parse(arg)
    out = []
    if a.quick:
        for f in FAULTS:
            task = "translation" if f in ("no_padding_mask", "post_ln_deep") else "mqar"
            out.append((f"{task}-{f}", f"task={task},fault={f},quick"))
        return out
    full = []
    for task in ("mqar", "translation", "induction"):
        for width in WIDTHS:
            for i, heads in enumerate(HEADS[width]):
                if task == "induction" and i:
                    continue
                for f in FAULTS:
                    if f == "no_padding_mask" and task not in PADDED_TASKS:
                        continue
                    full.append((f"{task}-{f}-d{width}-h{heads}",
                                 f"task={task},fault={f},d_model={width},heads={heads},steps={a.steps}"))
    for task in ("mqar", "translation"):
        for heads in (16, 32):
            full.append((f"{task}-healthy-d128-h{heads}", f"task={task},fault=healthy,d_model=128,heads={heads},"
                                                          f"steps={a.steps}"))
        full.append((f"{task}-healthy-d64-h2-long", f"task={task},fault=healthy,d_model=64,heads=2,"
                                                    f"steps={4 * a.steps}"))
    # Training order: every fault once first (MQAR at d_model 64 with 2 heads, translation at 64 with 4), so a
    # partly trained library covers each kind; then the rest.
    first = [n for n, _ in full if n.startswith(("mqar-", "translation-")) and n.endswith(("-d64-h2", "-d64-h4"))
             and not (n.startswith("mqar") and n.endswith("h4")) and not (n.startswith("translation")
                                                                          and n.endswith("h2"))]
    out = [x for x in full if x[0] in first] + [x for x in full if x[0] not in first]
    return out


HELDOUT_WIDTH = 96  # a width, and head counts, no calibration run used
HELDOUT_HEADS = {"mqar": 3, "translation": 6}


def heldout(arg=None) -> list[tuple[str, str]]:
    """The held-out runs, trained after the monitor's rules were committed: every fault on MQAR and translation at
    d_model 96 (3 and 6 heads), then hard healthy runs: 16 and 32 heads at d_model 128, 4x longer training, and
    translation at d_model 128 with 8 heads trained 4x longer (sharp cross-attention)."""
    a = _parse(arg)
    out = []
    for task, heads in HELDOUT_HEADS.items():
        for f in FAULTS:
            if f == "no_padding_mask" and task not in PADDED_TASKS:
                continue
            out.append((f"{task}-{f}-d{HELDOUT_WIDTH}-h{heads}",
                        f"task={task},fault={f},d_model={HELDOUT_WIDTH},heads={heads},steps={a.steps}"))
    for task, heads in HELDOUT_HEADS.items():
        for h in (16, 32):
            out.append((f"{task}-healthy-d128-h{h}", f"task={task},fault=healthy,d_model=128,heads={h},steps={a.steps}"))
        out.append((f"{task}-healthy-d{HELDOUT_WIDTH}-h{heads}-long",
                    f"task={task},fault=healthy,d_model={HELDOUT_WIDTH},heads={heads},steps={4 * a.steps}"))
    out.append(("translation-healthy-d128-h8-long", f"task=translation,fault=healthy,d_model=128,heads=8,"
                                                    f"steps={4 * a.steps}"))
    return out


# held out 2: widths and head counts no earlier run used
HELDOUT2 = {80: {"mqar": 5, "translation": 4}, 112: {"mqar": 7, "translation": 7}}


def heldout2(arg=None) -> list[tuple[str, str]]:
    """The second held-out split, trained after the ``attention_collapse`` rule was committed: at d_model 80 (MQAR
    5 heads, translation 4) deep post-LN without warmup (seeds 0 and 1), learning rate 30x without warmup,
    healthy, healthy post-LN at the task's depth with warmup (the new rule's hard case); the same at d_model 112
    (7 heads) with one deep post-LN seed; healthy runs trained 4x longer at d_model 80."""
    a = _parse(arg)
    out = []
    for width, per_task in HELDOUT2.items():
        for task, heads in per_task.items():
            where, name = f"d_model={width},heads={heads},steps={a.steps}", f"d{width}-h{heads}"
            out += [(f"{task}-post_ln_deep-{name}-seed{s}", f"task={task},fault=post_ln_deep,{where},seed={s}")
                    for s in ((0, 1) if width == 80 else (0,))]
            out += [(f"{task}-{f}-{name}", f"task={task},fault={f},{where}") for f in ("lr_high_nowarmup", "healthy")]
            out.append((f"{task}-healthy-post_ln-{name}", f"task={task},fault=healthy,{where},norm=post"))
    for task, heads in HELDOUT2[80].items():
        out.append((f"{task}-healthy-d80-h{heads}-long",
                    f"task={task},fault=healthy,d_model=80,heads={heads},steps={4 * a.steps}"))
    return out
