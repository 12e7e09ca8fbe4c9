"""Benchmark the attention variants as model layers: forward+backward time and memory per step against length.

For each ``model.attention_kind`` (softmax, linear, additive, hard) one causal self-attention layer
(``models.attention.MultiHeadAttention``: Q/K/V/O projections around the variant) on ``[batch, T, d_model]``
inputs, differentiated with respect to its parameters and its input, at each sequence length T:

- time: best of ``--repeats`` calls of the jitted forward+backward after one warm-up call (milliseconds), and
  the same per 1,000 tokens (linear attention should stay flat, the others grow with T);
- memory: ``compiled.memory_analysis()`` temp + output bytes of that function (a compile-time estimate of the
  step's peak; CPU has no device memory statistics; parameters and inputs not counted).

A kind stops at the first length whose memory estimate exceeds ``--mem-cap-gb`` or after a length whose time,
extrapolated quadratically, would exceed ``--time-cap`` seconds at the next one. Softmax runs on
``--softmax-impl`` (default ``auto``: on CPU ``xla`` below 1024 x 1024 scores, ``chunked`` from there).

    python scripts/bench_variants.py                                   # 128 .. 4096, batch 1, 1 head, d_model 128
    python scripts/bench_variants.py --seq-lens 256 1024 --heads 4 --csv bench_variants.csv

Prints a Markdown table with the machine line; a benchmark, never a test.
"""
from __future__ import annotations

import argparse
import math
import sys
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
from flax import nnx

import attention
from attention.benchmark import best_time_ms, memory_bytes
from models.attention import MultiHeadAttention
from studies.report import environment_line, markdown_table, write_csv

KINDS = attention.available_kinds()


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seq-lens", type=int, nargs="+", default=[128, 256, 512, 1024, 2048, 4096])
    p.add_argument("--kinds", nargs="+", default=list(KINDS), help=f"attention kinds, of {KINDS}")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=1)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--softmax-impl", default="auto", help="attention backend of the softmax kind")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--time-cap", type=float, default=10.0, help="seconds per forward+backward call")
    p.add_argument("--mem-cap-gb", type=float, default=4.0, help="largest memory estimate to run")
    p.add_argument("--csv", default=None, help="also write the rows to this CSV file")
    p.add_argument("--markdown", default=None, help="also write the machine line, settings and table to this "
                   "Markdown file (docs/results/mqar_variants/timing.md is the report's timing section)")
    args = p.parse_args(argv)
    for name in ("batch", "heads", "d_model", "repeats"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1; got {getattr(args, name)}")
    if args.d_model % args.heads:
        raise SystemExit(f"--d-model {args.d_model} must be divisible by --heads {args.heads}")
    if min(args.seq_lens) < 1:
        raise SystemExit(f"--seq-lens must all be >= 1; got {args.seq_lens}")
    unknown = sorted(set(args.kinds) - set(KINDS))
    if unknown:
        raise SystemExit(f"--kinds {unknown} are unknown; expected some of {KINDS}")
    if args.softmax_impl != "auto" and args.softmax_impl not in attention.available_backends():
        raise SystemExit(f"--softmax-impl {args.softmax_impl!r}; expected 'auto' or one of "
                         f"{attention.available_backends()}")
    return args


def step_fn(kind: str, args: argparse.Namespace):
    """(jitted forward+backward of (params, x) -> (loss, grads), the layer's parameters)."""
    d = args.d_model
    layer = MultiHeadAttention(d, args.heads, qk_dim=d // args.heads, v_dim=d // args.heads, kind=kind,
                               implementation=args.softmax_impl, rngs=nnx.Rngs(params=0, dropout=1))
    graphdef, params, rest = nnx.split(layer, nnx.Param, ...)  # rest: the hard kind's rng state

    def loss(params, x_BxTxD):
        out = nnx.merge(graphdef, params, rest)(x_BxTxD, mask=attention.Mask(causal=True), deterministic=True)
        return jnp.sum(out.astype(jnp.float32) ** 2)

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1))), params


def measure(kind: str, seq_len: int, args: argparse.Namespace) -> tuple[float, float]:
    """(best forward+backward time in ms, memory estimate in MiB) of ``kind`` at ``seq_len``; the time is NaN
    when the memory estimate is over the cap."""
    fn, state = step_fn(kind, args)
    x = jax.random.normal(jax.random.key(seq_len), (args.batch, seq_len, args.d_model), jnp.float32)
    compiled = fn.lower(state, x).compile()
    mem = memory_bytes(compiled)
    if mem > args.mem_cap_gb * 2**30:
        return math.nan, mem / 2**20
    return best_time_ms(compiled, (state, x), args.repeats), mem / 2**20


def main(argv: Optional[Sequence[str]] = None) -> list[list]:
    args = parse_args(argv)
    lens = sorted(set(args.seq_lens))
    rows = []
    for kind in args.kinds:
        stopped = None
        for T in lens:
            if stopped:
                rows.append([kind, T, None, None, None, stopped])
                continue
            ms, mib = measure(kind, T, args)
            if math.isnan(ms):
                stopped = f"memory cap ({args.mem_cap_gb:g} GB)"
                rows.append([kind, T, None, None, round(mib, 1), f"over the {stopped}"])
                continue
            rows.append([kind, T, round(ms, 1), round(ms / T * 1000, 1), round(mib, 1), "ok"])
            print(f"{kind:9s} T={T:5d}: {ms:9.1f} ms  {mib:8.1f} MiB", file=sys.stderr, flush=True)
            nxt = next((n for n in lens if n > T), None)
            if nxt is not None and ms / 1e3 * (nxt / T) ** 2 > args.time_cap:
                stopped = f"time cap ({args.time_cap:g} s, predicted from T={T})"
    headers = ["kind", "T", "fwd+bwd ms", "ms per 1k tokens", "memory MiB", "status"]
    text = (f"{environment_line()}\n\n`python scripts/bench_variants.py {' '.join(argv if argv is not None else sys.argv[1:])}`"
            f": one causal self-attention layer (`models.attention.MultiHeadAttention`), batch {args.batch}, d_model "
            f"{args.d_model}, {args.heads} head(s) (d_k = d_v = {args.d_model // args.heads}), float32, softmax on "
            f"`{args.softmax_impl}`; forward+backward with respect to the parameters and the input, best of "
            f"{args.repeats} after a warm-up call; memory: the compile-time temp + output estimate of that step "
            f"(parameters and inputs not counted).\n\n{markdown_table(headers, rows)}\n")
    print(text)
    if args.csv:
        write_csv(args.csv, headers, rows)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(text)
    return rows


if __name__ == "__main__":
    from engine import cli

    cli.script(main)
