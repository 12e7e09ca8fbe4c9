"""Attention variants on multi-query associative recall (Arora et al. 2023, "Zoology"): softmax, linear
(kernelized, elu+1), additive (Bahdanau) and hard (straight-through Gumbel) attention, over the number of
key-value pairs and the model width.

    python scripts/repro_mqar_variants.py                                     # the sweep, records and report
    python scripts/sweep.py --config=configs/mqar_variants.py                 # the same points through the runner
    python train.py --config=configs/mqar_variants.py:kind=linear,pairs=16,d_model=64   # one point

A 2-layer pre-LN decoder (d_ff = 4 d_model, learned positions, no dropout) with ``heads`` heads (default 1, as
in Zoology's attention baselines: d_k = d_v = d_model, so a linear-attention layer's state is d_model x d_model)
on MQAR: N key-value pairs, then the N keys queried once each. The sequence is the shortest the generator
takes, 4 N tokens (2 N context tokens, then N queries at even offsets among N random tokens), and the batch
is ``queries`` / N sequences, so every point trains on the same number of tokens and answers per step
(``queries`` answers, 4 ``queries`` tokens). Vocabulary 256 for every point (125 possible keys, 125 values).
AdamW, learning rate ``lr``, warmup then cosine decay, ``steps`` steps; validation accuracy (exact match of
the value at the answer positions) on ``eval_batches`` held-out batches at the end.

Arguments (``:key=value,...``): kind, pairs, d_model, seed (the point train.py trains); seeds (the sweep runs
seeds 0..seeds-1); seq_len (0 = 4 * pairs; at least 4 * pairs); heads; steps; lr; queries (answers per batch);
vocab; eval_batches; quick (a 1-layer d_model 16 model on 2 and 4 pairs, a few steps; the sweep is every
kind x pairs {2, 4} x d_model 16, one seed).
"""
from engine.config import parse_arg, small_decoder_config

KINDS = ("softmax", "linear", "additive", "hard")
PAIRS = (4, 16, 64)
WIDTHS = (32, 64, 128)
QUICK_PAIRS = (2, 4)
QUICK_WIDTH = 16


def parse(arg):
    return parse_arg(arg, kind="softmax", pairs=4, d_model=64, seed=0, seeds=3, seq_len=0, heads=1, steps=1500,
                     lr=3e-3, queries=256, vocab=256, eval_batches=8, quick=False)


def point(a, kind: str, pairs: int, d_model: int, seed: int) -> dict:
    """The config fields of one point (kind, pairs, width, seed) under arguments ``a``; raises ValueError for
    an impossible combination."""
    if kind not in KINDS:
        raise ValueError(f"mqar_variants: kind={kind!r}; expected one of {KINDS}")
    if pairs < 1:
        raise ValueError(f"mqar_variants: pairs={pairs}; expected a positive number of key-value pairs")
    seq_len = a.seq_len or 4 * pairs
    if seq_len < 4 * pairs:
        raise ValueError(f"mqar_variants: seq_len={seq_len} is too short for pairs={pairs}; MQAR needs at least "
                         f"4 * pairs = {4 * pairs} tokens (2 * pairs context tokens, then each key queried at an "
                         "even offset)")
    if (a.vocab - 5) // 2 < pairs:
        raise ValueError(f"mqar_variants: vocab={a.vocab} leaves {(a.vocab - 5) // 2} distinct keys; pairs={pairs} "
                         f"needs vocab >= {2 * pairs + 5}")
    if d_model <= 0 or a.heads <= 0 or d_model % a.heads:
        raise ValueError(f"mqar_variants: heads={a.heads} must be a positive divisor of d_model={d_model}")
    if a.queries < pairs or a.queries % pairs:
        raise ValueError(f"mqar_variants: queries={a.queries} must be a positive multiple of pairs={pairs} (the "
                         "batch is queries / pairs sequences)")
    return {"model.attention_kind": kind, "data.mqar_num_kv_pairs": pairs, "data.seq_len": seq_len,
            "model.max_len": seq_len, "data.batch_size": a.queries // pairs, "model.d_model": d_model,
            "model.d_ff": 4 * d_model, "seed": seed}


def get_config(arg=None):
    a = parse(arg)
    q = a.quick
    steps = min(a.steps, 6) if q else a.steps
    c = small_decoder_config(
        "mqar", quick=q, d_model=a.d_model, heads=a.heads, layers=1 if q else 2, learning_rate=a.lr, steps=steps,
        batch_size=8, seq_len=16, vocab=32 if q else a.vocab, log_every=max(1, steps // 50),
        num_eval_batches=1 if q else a.eval_batches)
    if q:
        a.vocab = 32
    for key, value in point(a, a.kind, a.pairs, QUICK_WIDTH if q else a.d_model, a.seed).items():
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
    if a.quick:
        a.vocab = 32
    pairs, widths, seeds = (QUICK_PAIRS, (QUICK_WIDTH,), 1) if a.quick else (PAIRS, WIDTHS, a.seeds)
    for seed in range(seeds):
        for kind in KINDS:
            for n in pairs:
                for d in widths:
                    yield point(a, kind, n, d, seed)
