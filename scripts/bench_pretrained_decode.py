"""Decoding speed of a pretrained-format checkpoint: attnlab's KV-cache decoding vs ``transformers``' generate.

    python scripts/bench_pretrained_decode.py                 # opus-mt-es-en and gpt2 (124M) sized, CPU
    python scripts/bench_pretrained_decode.py --small         # a quick run with small models

Random-weight Marian and GPT-2 checkpoints of the real models' sizes are written with ``transformers`` and
loaded by both sides (the same weights, float32). Greedy and beam-4 decoding of exactly ``--new_tokens``
tokens (EOS gets a logit bias of -1e9 on attnlab's side, ``min_new_tokens`` on the reference's: the same
suppression; a run with an EOS in its output is reported), batch 1 and 32, sources / prompts of
``--source_len`` random tokens. attnlab: ``models.greedy_decode`` / ``beam_search`` (Marian) and
``models.lm_greedy_decode`` / ``lm_beam_search`` (GPT-2), each compiled once before timing; transformers:
``model.generate`` under ``torch.inference_mode``, after a short warm-up call. Reports generated tokens per
second (batch * new tokens / seconds, the best of ``--repeats``) by wall time and by the process's CPU time,
as a markdown table with the CPU's name. With one thread each the two agree on an idle machine; on a shared
one the CPU-time column is the steadier comparison (waiting for a core is not counted). ``--threads``
(default 1) sets both libraries' CPU threads. Needs ``pip install '.[pretrained,reference]'``.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import models
from engine import runtime
import pretrained
from pretrained import random_checkpoints

SIZES = {  # the real checkpoints' architectures
    "marian": dict(d_model=512, layers=6, heads=8, d_ff=2048, vocab=58101),  # Helsinki-NLP/opus-mt-es-en
    "gpt2": dict(d_model=768, layers=12, heads=12, d_ff=3072, vocab=50257),  # gpt2
}
SMALL = {"marian": dict(d_model=128, layers=2, heads=4, d_ff=256, vocab=2000),
         "gpt2": dict(d_model=128, layers=2, heads=4, d_ff=256, vocab=2000)}


def best_of(fn, repeats: int, warm_up=None) -> tuple[float, float, np.ndarray]:
    """The best wall time and the best CPU time (seconds) of ``repeats`` calls of ``fn`` after one call of
    ``warm_up`` (default: ``fn``), and the last output."""
    out = np.asarray((warm_up or fn)())  # compile / warm up
    wall = cpu = float("inf")
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        out = np.asarray(fn())
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return wall, cpu, out


def no_eos(model: nnx.Module, eos: int) -> nnx.Module:
    """``model`` with a logit bias of -1e9 on ``eos`` (what ``min_new_tokens`` does in transformers), so both
    sides decode exactly the same number of steps."""
    cfg = model.cfg.replace(final_logits_bias=True)
    out = type(model)(cfg, rngs=nnx.Rngs(0)) if not model.cfg.final_logits_bias else model
    if out is not model:
        nnx.update(out, nnx.state(model))
    out.logits_bias[...] = out.logits_bias[...].at[eos].add(-1e9)
    return out


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
    model = no_eos(p.model, eos)
    cls = transformers.MarianMTModel if family == "marian" else transformers.GPT2LMHeadModel
    ref = cls.from_pretrained(directory, attn_implementation="eager").eval()
    rows = []
    N = args.new_tokens
    for batch in (1, 32):
        src = np.random.default_rng(batch).integers(3, V - 2, (batch, args.source_len)).astype(np.int32)
        for beams in (1, 4):
            if family == "marian":
                ours = (lambda: models.greedy_decode(model, jnp.asarray(src), max_len=N)) if beams == 1 else (
                    lambda: models.beam_search(model, jnp.asarray(src), beam_size=beams, max_len=N))
            else:
                ours = (lambda: models.lm_greedy_decode(model, jnp.asarray(src), max_new_tokens=N)) if beams == 1 else (
                    lambda: models.lm_beam_search(model, jnp.asarray(src), beam_size=beams, max_new_tokens=N))

            def theirs(n=N, beams=beams, src=src):
                with torch.inference_mode():
                    return ref.generate(torch.tensor(src, dtype=torch.long), attention_mask=torch.ones(src.shape, dtype=torch.long),
                                        max_new_tokens=n, min_new_tokens=n, num_beams=beams, do_sample=False,
                                        eos_token_id=eos, pad_token_id=p.cfg.pad_id)
            t_ours, c_ours, out = best_of(ours, args.repeats)
            t_ref, c_ref, _ = best_of(theirs, args.repeats, warm_up=lambda: theirs(2))
            early = int(np.sum(out == eos))
            rows.append(dict(family=family, batch=batch, decoding="greedy" if beams == 1 else f"beam-{beams}",
                             attnlab=batch * N / t_ours, transformers=batch * N / t_ref,
                             attnlab_cpu=batch * N / c_ours, transformers_cpu=batch * N / c_ref, early=early))
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
    ap.add_argument("--threads", type=int, default=1, help="CPU threads for both (torch.set_num_threads; XLA's "
                    "intra-op pool). 0: each library's default. On a shared, loaded machine torch's default spins "
                    "its OpenMP threads and runs tens of times slower, so 1 is the reproducible setting")
    args = ap.parse_args()
    if args.threads == 1:  # before JAX's CPU backend starts (no array has been made yet)
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false "
                                   "intra_op_parallelism_threads=1").strip()
    families = [f for f in args.families.split(",") if f]
    bad = [f for f in families if f not in SIZES]
    if bad:
        ap.error(f"--families: {bad} not in {sorted(SIZES)}")
    import torch
    import transformers

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    sizes = SMALL if args.small else SIZES
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for family in families:
            rows += bench_family(family, sizes[family], args, root)
    print(f"\nCPU: {runtime.cpu_model() or 'unknown CPU'}, {os.cpu_count()} cores visible, load average {os.getloadavg()[0]:.1f}; "
          f"threads: {args.threads or 'library defaults'}; jax {jax.__version__}, torch {torch.__version__}, "
          f"transformers {transformers.__version__}; float32; "
          f"{args.new_tokens} new tokens from {args.source_len}-token sources/prompts, best of {args.repeats}.")
    print("Sizes: " + "; ".join(f"{f} d_model {sizes[f]['d_model']}, {sizes[f]['layers']} layers, vocab "
                                 f"{sizes[f]['vocab']}" for f in families) + "\n")
    print("| model | batch | decoding | attnlab tok/s | transformers tok/s | attnlab / transformers "
          "| attnlab tok/CPU-s | transformers tok/CPU-s | attnlab / transformers (CPU time) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        note = f" ({r['early']} EOS)" if r["early"] else ""
        print(f"| {r['family']} | {r['batch']} | {r['decoding']} | {r['attnlab']:.1f}{note} | {r['transformers']:.1f} | "
              f"{r['attnlab'] / r['transformers']:.2f} | {r['attnlab_cpu']:.1f} | {r['transformers_cpu']:.1f} | "
              f"{r['attnlab_cpu'] / r['transformers_cpu']:.2f} |")


if __name__ == "__main__":
    main()
