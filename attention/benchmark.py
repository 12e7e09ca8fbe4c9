"""The attention backends' benchmark: forward and forward+backward time, peak memory and TFLOP/s per length.

Every registered backend that can serve the call on this platform is measured (``attention.available_backends()``,
so ``pallas`` is included once registered; on CPU only with ``--include-pallas``, since it runs in interpret mode
there). ``--compare-mha`` adds JAX's own (deprecated) Pallas GPU kernel
``jax.experimental.pallas.ops.gpu.attention.mha`` on GPU.

Per backend and sequence length (Tq = Tk = T):

- time: best of ``--repeats`` calls of the jitted function after one warm-up call, in milliseconds;
- memory: ``compiled.memory_analysis()`` temp + output bytes of the jitted function (the arguments are not
  counted). CPU has no device memory statistics, so this compile-time figure is used on every platform;
- TFLOP/s: model FLOPs / time, forward = 2·B·H·T²·(D + Dv), forward+backward = 3 × forward (dP, dV, dQ, dK;
  the recomputation of the logits is not counted), halved for causal masks.

A backend stops at the first length whose memory estimate exceeds ``--mem-cap-gb``, that fails with an
out-of-memory error, or after a length whose forward+backward time, extrapolated quadratically, would exceed
``--time-cap`` seconds at the next length.

``main(argv)`` is the command line (``scripts/bench_attention.py``); ``scripts/gpu_check_pallas.py`` calls it
in-process. ``best_time_ms`` times any jitted function the same way.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import os
import platform
import time
from typing import Callable, Optional, Sequence

import jax
import jax.numpy as jnp

import attention
from attention.api import Request

DTYPES = {"float16": jnp.float16, "bfloat16": jnp.bfloat16, "float32": jnp.float32, "float64": jnp.float64}
MHA = "jax_pallas_mha"  # the name --compare-mha rows get


@dataclasses.dataclass
class Row:
    backend: str
    seq_len: int
    fwd_ms: float = math.nan
    fwd_tflops: float = math.nan
    fwd_mem_mb: float = math.nan
    fwdbwd_ms: float = math.nan
    fwdbwd_tflops: float = math.nan
    fwdbwd_mem_mb: float = math.nan
    status: str = "ok"


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="scripts/bench_attention.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--seq-lens", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096, 8192, 16384],
                   help="sequence lengths to measure (Tq = Tk)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=None, help="key/value heads (GQA/MQA); default: --heads")
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--v-head-dim", type=int, default=None, help="value head dim; default: --head-dim")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    p.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--stats", action="store_true", help="also return attention statistics (return_stats=True)")
    p.add_argument("--backends", nargs="+", default=None, help="only these backends (default: every one that runs)")
    p.add_argument("--include-pallas", action="store_true", help="on CPU, also run pallas (interpret mode: slow)")
    p.add_argument("--compare-mha", action="store_true", help="on GPU, add jax.experimental.pallas.ops.gpu.attention.mha")
    p.add_argument("--block-q", type=int, default=None, help="chunked backend block_q (default: its own)")
    p.add_argument("--block-k", type=int, default=None, help="chunked backend block_k (default: its own)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--time-cap", type=float, default=20.0, help="seconds per forward+backward call")
    p.add_argument("--mem-cap-gb", type=float, default=None,
                   help="largest memory estimate to run (default: 4 on CPU, 90%% of device memory elsewhere)")
    p.add_argument("--out", default="bench_attention_out", help="folder for the CSV and PNG")
    args = p.parse_args(argv)
    for name in ("batch", "heads", "head_dim", "repeats"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1; got {getattr(args, name)}")
    if min(args.seq_lens) < 1:
        raise SystemExit(f"--seq-lens must all be >= 1; got {args.seq_lens}")
    unknown = sorted(set(args.backends or ()) - set(attention.available_backends()))
    if unknown:
        raise SystemExit(f"--backends {unknown} are not registered; expected names from {attention.available_backends()}")
    args.kv_heads = args.kv_heads or args.heads
    args.v_head_dim = args.v_head_dim or args.head_dim
    if args.heads % args.kv_heads:
        raise SystemExit(f"--heads ({args.heads}) must be a multiple of --kv-heads ({args.kv_heads})")
    return args


def default_mem_cap_bytes() -> float:
    device = jax.devices()[0]
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and stats.get("bytes_limit"):
        return 0.9 * stats["bytes_limit"]
    return 4 * 2**30


def flops(args: argparse.Namespace, seq_len: int) -> tuple[float, float]:
    """(forward, forward+backward) model FLOPs at Tq = Tk = seq_len."""
    fwd = 2.0 * args.batch * args.heads * seq_len * seq_len * (args.head_dim + args.v_head_dim)
    if args.causal:
        fwd /= 2
    return fwd, 3 * fwd


def backends_to_run(args: argparse.Namespace) -> list[str]:
    """Registered backends that can serve the benchmark's calls here, plus the mha comparison."""
    platform_name = jax.default_backend()
    request = Request(
        batch=args.batch, q_len=max(args.seq_lens), kv_len=max(args.seq_lens), num_heads=args.heads,
        num_kv_heads=args.kv_heads, qk_dim=args.head_dim, v_dim=args.v_head_dim, dtype=DTYPES[args.dtype],
        mask=attention.Mask(causal=args.causal), dropout=False, return_stats=args.stats, platform=platform_name,
    )
    names = []
    for name in attention.available_backends():
        if args.backends and name not in args.backends:
            continue
        if name == "pallas" and platform_name == "cpu" and not args.include_pallas:
            print("skip pallas: interpret mode on CPU is slow (pass --include-pallas)")
            continue
        if name == "ring" and not args.backends:
            print("skip ring: it needs a device mesh; scripts/bench_ring.py measures it")
            continue
        try:
            attention.select_backend(name, request)
        except ValueError as err:
            print(f"skip {name}: {err}")
            continue
        names.append(name)
    if args.compare_mha:
        if platform_name != "gpu":
            print(f"skip {MHA}: it is a GPU (Triton) kernel and this platform is {platform_name}")
        elif args.stats:
            print(f"skip {MHA}: it returns no attention statistics (--stats)")
        elif args.head_dim != args.v_head_dim:
            print(f"skip {MHA}: it needs the value head dim equal to the query/key head dim")
        else:
            names.append(MHA)
    return names


def loss_fns(name: str, args: argparse.Namespace) -> tuple[Callable, Callable]:
    """(forward, forward+backward) functions of (q, k, v) for backend ``name``."""
    mask = attention.Mask(causal=args.causal)
    scale = 1.0 / math.sqrt(args.head_dim)
    if name == MHA:
        from jax.experimental.pallas.ops.gpu import attention as pallas_gpu_attention

        groups = args.heads // args.kv_heads

        def fwd(q, k, v):
            k, v = jnp.repeat(k, groups, axis=2), jnp.repeat(v, groups, axis=2)  # mha has no GQA
            return pallas_gpu_attention.mha(q, k, v, None, sm_scale=scale, causal=args.causal)
    else:
        options = {}
        if name == "chunked":
            options = {key: val for key, val in (("block_q", args.block_q), ("block_k", args.block_k)) if val}

        def fwd(q, k, v):
            return attention.attention(q, k, v, mask, implementation=name, scale=scale,
                                       return_stats=args.stats, backend_options=options)

    def loss(q, k, v):
        out = fwd(q, k, v)
        out = out[0] if isinstance(out, tuple) else out
        return jnp.sum(out.astype(jnp.float32))

    return fwd, jax.value_and_grad(loss, argnums=(0, 1, 2))


def best_time_ms(fn: Callable, inputs: Sequence = (), repeats: int = 3) -> float:
    """The fastest of ``repeats`` calls ``fn(*inputs)`` (each waited for), after one warm-up call, in ms."""
    jax.block_until_ready(fn(*inputs))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*inputs))
        times.append(time.perf_counter() - start)
    return 1e3 * min(times)


def memory_bytes(compiled) -> float:
    analysis = compiled.memory_analysis()
    if analysis is None:
        return math.nan
    return float(analysis.temp_size_in_bytes + analysis.output_size_in_bytes)


def is_oom(err: Exception) -> bool:
    text = str(err)
    return "RESOURCE_EXHAUSTED" in text or "Out of memory" in text or "out of memory" in text


def measure_backend(name: str, args: argparse.Namespace, mem_cap: float) -> list[Row]:
    rows = []
    dtype = DTYPES[args.dtype]
    fwd, fwdbwd = loss_fns(name, args)
    seq_lens = sorted(args.seq_lens)
    for n, seq_len in enumerate(seq_lens):
        row = Row(name, seq_len)
        rows.append(row)
        kq, kk, kv = jax.random.split(jax.random.key(seq_len), 3)
        inputs = (
            jax.random.normal(kq, (args.batch, seq_len, args.heads, args.head_dim), dtype),
            jax.random.normal(kk, (args.batch, seq_len, args.kv_heads, args.head_dim), dtype),
            jax.random.normal(kv, (args.batch, seq_len, args.kv_heads, args.v_head_dim), dtype),
        )
        try:
            compiled = [jax.jit(f).lower(*inputs).compile() for f in (fwd, fwdbwd)]
            row.fwd_mem_mb, row.fwdbwd_mem_mb = (memory_bytes(c) / 2**20 for c in compiled)
            if max(row.fwd_mem_mb, row.fwdbwd_mem_mb) * 2**20 > mem_cap:
                row.status = f"stopped: memory estimate over {mem_cap / 2**30:.1f} GiB"
                break
            fwd_flops, fwdbwd_flops = flops(args, seq_len)
            row.fwd_ms = best_time_ms(compiled[0], inputs, args.repeats)
            row.fwd_tflops = fwd_flops / (row.fwd_ms * 1e-3) / 1e12
            row.fwdbwd_ms = best_time_ms(compiled[1], inputs, args.repeats)
            row.fwdbwd_tflops = fwdbwd_flops / (row.fwdbwd_ms * 1e-3) / 1e12
        except Exception as err:  # an out-of-memory error ends this backend's run; anything else is a bug
            if not is_oom(err):
                raise
            row.status = "stopped: out of memory"
            break
        finally:
            print(format_row(row), flush=True)
        if n + 1 < len(seq_lens):
            predicted = row.fwdbwd_ms * 1e-3 * (seq_lens[n + 1] / seq_len) ** 2
            if predicted > args.time_cap:
                row.status = f"stopped: next length predicted {predicted:.0f} s > --time-cap {args.time_cap:.0f} s"
                print(f"  {row.status}")
                break
    return rows


HEADER = f"{'backend':<16}{'T':>7}{'fwd ms':>10}{'TFLOP/s':>9}{'fwd MiB':>10}{'fwd+bwd ms':>12}{'TFLOP/s':>9}{'f+b MiB':>10}  status"


def format_row(row: Row) -> str:
    def num(x, fmt):
        return format(x, fmt) if not math.isnan(x) else "-"

    return (
        f"{row.backend:<16}{row.seq_len:>7}{num(row.fwd_ms, '10.1f')}{num(row.fwd_tflops, '9.4f')}"
        f"{num(row.fwd_mem_mb, '10.1f')}{num(row.fwdbwd_ms, '12.1f')}{num(row.fwdbwd_tflops, '9.4f')}"
        f"{num(row.fwdbwd_mem_mb, '10.1f')}  {row.status}"
    )


def write_csv(rows: list[Row], path: str) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[field.name for field in dataclasses.fields(Row)])
        writer.writeheader()
        for row in rows:
            writer.writerow(dataclasses.asdict(row))


def plot(rows: list[Row], title: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("fwd_ms", "forward time (ms)"), ("fwdbwd_ms", "forward+backward time (ms)"),
        ("fwdbwd_mem_mb", "forward+backward memory (MiB, compiled estimate)"), ("fwdbwd_tflops", "forward+backward TFLOP/s"),
    )
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4))
    for ax, (field, label) in zip(axes, panels):
        for backend in dict.fromkeys(r.backend for r in rows):
            pts = [(r.seq_len, getattr(r, field)) for r in rows if r.backend == backend and not math.isnan(getattr(r, field))]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=backend)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length")
        ax.set_title(label, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend()
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def summary(rows: list[Row]) -> list[str]:
    """Lines comparing chunked with xla at 4096 and chunked's memory growth per doubling of length."""
    lines = []
    by = {(r.backend, r.seq_len): r for r in rows}
    if ("chunked", 4096) in by and ("xla", 4096) in by and not math.isnan(by["xla", 4096].fwdbwd_ms):
        c, x = by["chunked", 4096], by["xla", 4096]
        lines.append(f"chunked / xla forward+backward time at T=4096: {c.fwdbwd_ms / x.fwdbwd_ms:.2f}x")
    chunked = [r for r in rows if r.backend == "chunked" and not math.isnan(r.fwdbwd_mem_mb)]
    if len(chunked) >= 3:
        growth = [f"{b.fwdbwd_mem_mb - a.fwdbwd_mem_mb:.1f}" for a, b in zip(chunked, chunked[1:])]
        lines.append("chunked forward+backward memory increments per length step (MiB): " + ", ".join(growth)
                     + "  (linear: doubles as the step doubles)")
    return lines


def main(argv: Optional[Sequence[str]] = None) -> list[Row]:
    """Measure every backend over the lengths of ``argv`` (the options of ``parse_args``), print the table, write
    ``bench_attention.csv`` and ``bench_attention.png`` into ``--out``; the rows."""
    args = parse_args(argv)
    if args.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    mem_cap = args.mem_cap_gb * 2**30 if args.mem_cap_gb else default_mem_cap_bytes()
    title = (
        f"{jax.default_backend()} ({jax.devices()[0].device_kind}, {platform.processor() or platform.machine()}), "
        f"jax {jax.__version__}: B={args.batch} H={args.heads} Hkv={args.kv_heads} D={args.head_dim} "
        f"Dv={args.v_head_dim} {args.dtype} causal={args.causal} stats={args.stats}"
    )
    print(title)
    print("memory = compiled memory_analysis() temp + output bytes (a compile-time estimate: CPU has no device "
          "memory statistics); time = best of", args.repeats, "calls")
    names = backends_to_run(args)
    print(HEADER)
    rows = []
    for name in names:
        rows.extend(measure_backend(name, args, mem_cap))
    lines = summary(rows)
    for line in lines:
        print(line)
    os.makedirs(args.out, exist_ok=True)
    csv_path = os.path.join(args.out, "bench_attention.csv")
    png_path = os.path.join(args.out, "bench_attention.png")
    write_csv(rows, csv_path)
    plot(rows, title, png_path)
    print(f"wrote {csv_path} and {png_path}")
    return rows
