"""Decoding speed of a pretrained-format checkpoint: attnlab's KV-cache decoding vs ``transformers``' generate.

    python scripts/bench_pretrained_decode.py                 # opus-mt-es-en and gpt2 (124M) sized, CPU
    python scripts/bench_pretrained_decode.py --small         # a quick run with small models

Random-weight Marian and GPT-2 checkpoints of the real models' sizes are written with ``transformers`` and
loaded by both sides (the same weights, float32). Greedy and beam-4 decoding of exactly ``--new_tokens``
tokens (EOS is an id the sources never hold, the reference is held to ``min_new_tokens``; a run whose rows end
early is reported), batch 1 and 32, sources / prompts of ``--source_len`` random tokens. attnlab: ``models.
greedy_decode`` / ``beam_search`` (Marian) and ``models.lm_greedy_decode`` / ``lm_beam_search`` (GPT-2), each
compiled once before timing; transformers: ``model.generate`` under ``torch.inference_mode``, after a warm-up
call. Reports generated tokens per second (batch * new tokens / seconds, the best of ``--repeats``) as a
markdown table with the CPU's name. Needs ``pip install '.[pretrained,reference]'``.
"""
from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

import models
import pretrained
from pretrained import random_checkpoints

SIZES = {  # the real checkpoints' architectures
    "marian": dict(d_model=512, layers=6, heads=8, d_ff=2048, vocab=58101),  # Helsinki-NLP/opus-mt-es-en
    "gpt2": dict(d_model=768, layers=12, heads=12, d_ff=3072, vocab=50257),  # gpt2
}
SMALL = {"marian": dict(d_model=128, layers=2, heads=4, d_ff=256, vocab=2000),
         "gpt2": dict(d_model=128, layers=2, heads=4, d_ff=256, vocab=2000)}


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def best_of(fn, repeats: int) -> tuple[float, np.ndarray]:
    out = np.asarray(fn())  # compile / warm up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = np.asarray(fn())
        best = min(best, time.perf_counter() - t0)
    return best, out


def bench_family(family: str, size: dict, args, root: str) -> list[dict]:
    import torch
    import transformers

    V = size["vocab"]
    eos = V - 2  # never in the sources / prompts (drawn from [3, V - 2))
    overrides = {"eos_token_id": eos} if family == "marian" else {"eos_token_id": eos, "bos_token_id": eos}
    directory = random_checkpoints.make(family, os.path.join(root, family), tokenizer=False, weight_scale=0,
                                        config_overrides=dict(overrides, n_positions=args.source_len + args.new_tokens + 8)
                                        if family == "gpt2" else overrides, **size)
    p = pretrained.load(directory)
    cls = transformers.MarianMTModel if family == "marian" else transformers.GPT2LMHeadModel
    ref = cls.from_pretrained(directory, attn_implementation="eager").eval()
    rows = []
    N = args.new_tokens
    for batch in (1, 32):
        src = np.random.default_rng(batch).integers(3, V - 2, (batch, args.source_len)).astype(np.int32)
        for beams in (1, 4):
            if family == "marian":
                ours = (lambda: models.greedy_decode(p.model, jnp.asarray(src), max_len=N)) if beams == 1 else (
                    lambda: models.beam_search(p.model, jnp.asarray(src), beam_size=beams, max_len=N))
            else:
                ours = (lambda: models.lm_greedy_decode(p.model, jnp.asarray(src), max_new_tokens=N)) if beams == 1 else (
                    lambda: models.lm_beam_search(p.model, jnp.asarray(src), beam_size=beams, max_new_tokens=N))

            def theirs():
                with torch.inference_mode():
                    return ref.generate(torch.tensor(src, dtype=torch.long), attention_mask=torch.ones(src.shape, dtype=torch.long),
                                        max_new_tokens=N, min_new_tokens=N, num_beams=beams, do_sample=False,
                                        eos_token_id=eos, pad_token_id=p.cfg.pad_id)
            t_ours, out = best_of(ours, args.repeats)
            t_ref, _ = best_of(theirs, args.repeats)
            early = int(np.sum(out == eos))
            rows.append(dict(family=family, batch=batch, decoding="greedy" if beams == 1 else f"beam-{beams}",
                             attnlab=batch * N / t_ours, transformers=batch * N / t_ref, early=early))
            print(f"{family} batch {batch} beams {beams}: attnlab {rows[-1]['attnlab']:.1f} tok/s, transformers "
                  f"{rows[-1]['transformers']:.1f} tok/s{f', {early} EOS' if early else ''}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="small models (a quick check), not the real sizes")
    ap.add_argument("--new_tokens", type=int, default=32)
    ap.add_argument("--source_len", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--families", default="marian,gpt2")
    args = ap.parse_args()
    families = [f for f in args.families.split(",") if f]
    bad = [f for f in families if f not in SIZES]
    if bad:
        ap.error(f"--families: {bad} not in {sorted(SIZES)}")
    import torch
    import transformers

    sizes = SMALL if args.small else SIZES
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for family in families:
            rows += bench_family(family, sizes[family], args, root)
    print(f"\nCPU: {cpu_name()}, {os.cpu_count()} cores visible; jax {jax.__version__}, torch {torch.__version__} "
          f"({torch.get_num_threads()} threads), transformers {transformers.__version__}; float32; "
          f"{args.new_tokens} new tokens from {args.source_len}-token sources/prompts, best of {args.repeats}.")
    print("Sizes: " + "; ".join(f"{f} d_model {sizes[f]['d_model']}, {sizes[f]['layers']} layers, vocab "
                                 f"{sizes[f]['vocab']}" for f in families) + "\n")
    print("| model | batch | decoding | attnlab tok/s | transformers tok/s | attnlab / transformers |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        note = f" ({r['early']} EOS)" if r["early"] else ""
        print(f"| {r['family']} | {r['batch']} | {r['decoding']} | {r['attnlab']:.1f}{note} | {r['transformers']:.1f} | "
              f"{r['attnlab'] / r['transformers']:.2f} |")


if __name__ == "__main__":
    main()
