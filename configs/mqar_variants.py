"""Attention variants on multi-query associative recall (Arora et al. 2023, "Zoology"): softmax, linear
(kernelized, elu+1), additive (Bahdanau) and hard (straight-through Gumbel) attention, over the number of
key-value pairs and the model width.

    python -m studies train mqar_variants                                     # the sweep, records and report
    python -m studies sweep --config=configs/mqar_variants.py                 # the same points through the runner
    python train.py --config=configs/mqar_variants.py:kind=linear,pairs=16,d_model=64   # one point

A 2-layer pre-LN decoder (d_ff = 4 d_model, learned positions, no dropout) with ``heads`` heads (default 1, as
Zoology's attention baseline: d_k = d_v = d_model, so a linear-attention layer's state is d_model x d_model)
on MQAR: N key-value pairs, then the N keys queried once each. The sequence is the shortest the generator
takes, 4 N tokens (2 N context tokens, then N queries at even offsets among N random tokens), and the batch
is ``queries`` / N sequences, so every point trains on the same number of tokens and answers per step
(``queries`` answers, 4 ``queries`` tokens). Vocabulary 256 for every point (125 possible keys, 125 values).
AdamW, warmup (10%) then cosine decay, ``steps`` steps; validation accuracy (exact match of the value at the
answer positions) on ``eval_batches`` held-out batches at the end.

Sizing, from pilot runs of softmax attention (``docs/results/mqar_variants/pilot.csv``): learning MQAR is a
sudden phase change whose step depends on the width and the learning rate. 4 pairs are learned within 500
steps at d_model 64 and 128; 16 pairs at d_model 128 need about 1,500 steps at learning rate 3e-3 (and fail
at 1e-2), at d_model 64 they need 1e-2 (and fail at 3e-3 and 6e-3); 64 pairs stayed at chance for 1,500 steps
(d_model 128, 1 or 2 heads), so the grid stops at 16 pairs (as Zoology's own Figure 2 config does, with 64 pairs
commented out); d_model 32 did not learn 4 pairs in up to 6,000
steps at any learning rate tried. Hence 3,000 steps and a learning rate per width (``LEARNING_RATES``; Zoology
takes the best of a learning-rate sweep per point instead, which does not fit on 2 CPU cores). The full sweep
(4 kinds x 3 pair counts x 3 widths x 3 seeds = 108 points) takes about 4 hours of CPU time, nearly all of it
additive attention (its [B, H, T, T, d_k] scores) and the d_model 128 points.

Arguments (``:key=value,...``): kind, pairs, d_model, seed (the point train.py trains); seeds (the sweep runs
seeds 0..seeds-1); seq_len (0 = 4 * pairs; at least 4 * pairs); heads; steps; lr (0 = the width's entry of
LEARNING_RATES); queries (answers per batch); vocab; eval_batches; quick (a 1-layer d_model 16 model on 2 and
4 pairs, a few steps; the sweep is every kind x pairs {2, 4} at d_model 16, one seed).
"""
import attention
from engine.config import parse_arg, sibling_config

small_decoder_config = sibling_config(__file__, "_presets").small_decoder_config

KINDS = ("softmax", "linear", "additive", "hard")  # the registered kinds the sweep compares (the study's choice)
PAIRS = (4, 8, 16)
WIDTHS = (32, 64, 128)
LEARNING_RATES = {32: 1e-2, 64: 1e-2, 128: 3e-3}  # per width, from pilot runs of softmax (see the docstring)
QUICK_PAIRS = (2, 4)
QUICK_WIDTH = 16
QUICK_VOCAB = 32


def parse(arg):
    return parse_arg(arg, kind="softmax", pairs=4, d_model=64, seed=0, seeds=3, seq_len=0, heads=1, steps=3000,
                     lr=0.0, queries=256, vocab=256, eval_batches=8, quick=False)


def point(kind: str, pairs: int, d_model: int, seed: int, *, seq_len: int = 0, heads: int = 1,
          queries: int = 256, vocab: int = 256, lr: float = 0.0) -> dict:
    """The config fields of one point; ``seq_len`` 0 means 4 * pairs, ``lr`` 0 the width's default. Raises
    ValueError (one line, naming the value) for an impossible combination."""
    if kind not in attention.available_kinds():
        raise ValueError(f"mqar_variants: kind={kind!r}; expected a registered attention kind, one of "
                         f"{attention.available_kinds()}")
    if pairs < 1:
        raise ValueError(f"mqar_variants: pairs={pairs}; expected a positive number of key-value pairs")
    seq_len = seq_len or 4 * pairs
    if seq_len < 4 * pairs:
        raise ValueError(f"mqar_variants: seq_len={seq_len} is too short for pairs={pairs}; MQAR needs at least "
                         f"4 * pairs = {4 * pairs} tokens (2 * pairs context tokens, then each key queried at an "
                         "even offset)")
    if (vocab - 5) // 2 < pairs:
        raise ValueError(f"mqar_variants: vocab={vocab} leaves {(vocab - 5) // 2} distinct keys; pairs={pairs} "
                         f"needs vocab >= {2 * pairs + 5}")
    if d_model <= 0 or heads <= 0 or d_model % heads:
        raise ValueError(f"mqar_variants: heads={heads} must be a positive divisor of d_model={d_model}")
    if queries < pairs or queries % pairs:
        raise ValueError(f"mqar_variants: queries={queries} must be a positive multiple of pairs={pairs} (the "
                         "batch is queries / pairs sequences)")
    return {"model.attention_kind": kind, "data.mqar_num_kv_pairs": pairs, "data.seq_len": seq_len,
            "model.max_len": seq_len, "data.batch_size": queries // pairs, "model.d_model": d_model,
            "model.d_ff": 4 * d_model, "train.learning_rate": learning_rate(lr, d_model), "seed": seed}


def _point(a, kind: str, pairs: int, d_model: int, seed: int) -> dict:
    """``point`` under the parsed arguments ``a`` (quick: vocabulary 32)."""
    return point(kind, pairs, d_model, seed, seq_len=a.seq_len, heads=a.heads, queries=a.queries,
                 vocab=QUICK_VOCAB if a.quick else a.vocab, lr=a.lr)


def learning_rate(lr: float, d_model: int) -> float:
    """``lr`` when given (> 0), else the width's entry of LEARNING_RATES (3e-3 for a width not in it)."""
    if lr < 0:
        raise ValueError(f"mqar_variants: lr={lr}; expected a positive learning rate, or 0 for the per-width default")
    return lr or LEARNING_RATES.get(d_model, 3e-3)


def get_config(arg=None):
    a = parse(arg)
    q = a.quick
    steps = min(a.steps, 6) if q else a.steps
    c = small_decoder_config(
        "mqar", quick=q, d_model=a.d_model, heads=a.heads, layers=1 if q else 2, learning_rate=learning_rate(a.lr, a.d_model), steps=steps,
        batch_size=8, seq_len=16, vocab=QUICK_VOCAB if q else a.vocab, log_every=max(1, steps // 50),
        num_eval_batches=1 if q else a.eval_batches)
    for key, value in _point(a, a.kind, a.pairs, QUICK_WIDTH if q else a.d_model, a.seed).items():
        node = c
        *parents, last = key.split(".")
        for p in parents:
            node = node[p]
        node[last] = value
    c.model.attention_impl = "xla"  # softmax: one backend for every point; the other kinds ignore it
    c.wandb.tags = tuple(c.wandb.tags) + ("mqar_variants",)
    return c


def sweep(arg=None):
    """Points, seed-major: seed x kind in KINDS x pairs in PAIRS x d_model in WIDTHS (quick: every kind x
    pairs in QUICK_PAIRS at d_model 16, seed 0)."""
    a = parse(arg)
    pairs, widths, seeds = (QUICK_PAIRS, (QUICK_WIDTH,), 1) if a.quick else (PAIRS, WIDTHS, a.seeds)
    for seed in range(seeds):
        for kind in KINDS:
            for n in pairs:
                for d in widths:
                    yield _point(a, kind, n, d, seed)
