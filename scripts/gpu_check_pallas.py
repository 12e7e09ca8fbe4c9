"""The GPU check of the ``pallas`` backend: compiled-kernel tests, then the benchmark against cuDNN, XLA and JAX's
own (deprecated) Pallas ``mha``, then a block-size sweep. One command, sized for one device call (~8 minutes).

    PYTHONUNBUFFERED=1 python3 scripts/gpu_check_pallas.py --out OUTDIR 2>&1 | tee OUTDIR/log.txt

Phases, in priority order (``--phases`` picks some; each is skipped when ``--budget`` seconds would run out):

1. ``tests``: ``tests/test_pallas.py`` without the interpreted classes, i.e. the compiled Triton kernel against the
   float64 reference (pytest ``--noconftest``: the project conftest pins JAX to the CPU).
2. ``bench``: ``scripts/bench_attention.py`` (its ``main``, in this process) in bf16 for head dims 64 and 128,
   causal and not, at T = 1k, 4k, 16k with B·T = 16k tokens and 16 heads: ``pallas``, ``cudnn``, ``xla`` and
   ``mha``; forward and forward+backward TFLOP/s.
3. ``stats``: the same grid for ``pallas`` with ``return_stats=True`` (the statistics' cost).
4. ``suite``: the shared cross-backend suite ``tests/test_attention.py -k pallas`` on the compiled kernel.
5. ``sweep``: forward and backward block sizes of ``pallas`` at T = 4k (causal), to choose the GPU defaults.

Writes into ``--out``: ``bench_all.csv`` (every benchmark row, with its configuration), ``sweep.csv``,
``summary.md`` (the tables: TFLOP/s per backend, pallas / cuDNN time ratio, statistics overhead) and the pytest
logs: six files at most, so that all of them come back from a device call. Needs only jax (with CUDA), numpy,
pytest and hypothesis; the repository is put on ``PYTHONPATH``.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import importlib
import importlib.util
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHASES = ("tests", "bench", "stats", "suite", "sweep")
HEADS = 16


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="gpu_check_out", help="folder for logs, CSVs and summary.md")
    p.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES))
    p.add_argument("--budget", type=float, default=480.0, help="seconds for the whole script")
    p.add_argument("--seq-lens", type=int, nargs="+", default=[1024, 4096, 16384])
    p.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    p.add_argument("--tokens", type=int, default=16384, help="batch x sequence length of each benchmark call")
    p.add_argument("--sweep-seq-len", type=int, default=4096)
    p.add_argument("--repeats", type=int, default=10)
    return p.parse_args(argv)


class Clock:
    def __init__(self, budget: float):
        self.start, self.budget = time.monotonic(), budget

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.start)


def log(msg: str) -> None:
    print(f"[gpu_check_pallas {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run_pytest(args_list: list[str], log_path: str, timeout: float) -> int:
    """pytest in a subprocess on the default (GPU) platform; output to the console and ``log_path``."""
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
               XLA_PYTHON_CLIENT_PREALLOCATE="false", WANDB_MODE="disabled")
    env.pop("JAX_PLATFORMS", None)
    cmd = [sys.executable, "-m", "pytest", "--noconftest", "-q", "-rfEs", "-p", "no:cacheprovider", *args_list]
    log("run " + " ".join(cmd))
    with open(log_path, "w") as f:
        try:
            proc = subprocess.run(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, timeout=timeout)
            out, rc = proc.stdout, proc.returncode
        except subprocess.TimeoutExpired as err:
            out = (err.stdout or b"").decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
            out, rc = out + f"\nTIMEOUT after {timeout:.0f} s\n", 124
        f.write(out)
    print(out[-6000:], flush=True)
    log(f"pytest exit code {rc} (log: {log_path})")
    return rc


def load_bench():
    path = os.path.join(REPO, "scripts", "bench_attention.py")
    spec = importlib.util.spec_from_file_location("bench_attention", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def mha_available() -> bool:
    try:
        importlib.import_module("jax.experimental.pallas.ops.gpu.attention")
    except Exception as err:  # not shipped in this jax: compare without it
        log(f"jax.experimental.pallas.ops.gpu.attention unavailable ({err!r}); benchmarking without mha")
        return False
    return True


def bench_grid(bench, opts, tmp_dir: str, clock: Clock, stats: bool, rows: list[dict]) -> None:
    """bench_attention.main over head dims x causal x lengths, appending rows tagged with their configuration."""
    backends = ["pallas"] if stats else ["pallas", "cudnn", "xla"]
    for head_dim in opts.head_dims:
        for causal in (True, False):
            for seq_len in opts.seq_lens:
                if clock.left() < 20:
                    log("budget spent: stopping the benchmark grid")
                    return
                argv = [
                    "--dtype", "bfloat16", "--head-dim", str(head_dim), "--heads", str(HEADS),
                    "--batch", str(max(1, opts.tokens // seq_len)), "--seq-lens", str(seq_len),
                    "--repeats", str(opts.repeats), "--time-cap", "60", "--backends", *backends,
                    "--causal" if causal else "--no-causal", "--out", tmp_dir,
                ]
                if stats:
                    argv.append("--stats")
                elif opts.with_mha:
                    argv.append("--compare-mha")
                log("bench_attention " + " ".join(argv))
                try:
                    result = bench.main(argv)
                except Exception as err:  # keep the other points; the log shows what failed
                    log(f"bench point failed: {err!r}")
                    continue
                for row in result:
                    rows.append(dict(dataclasses.asdict(row), head_dim=head_dim, causal=causal, stats=stats,
                                     batch=max(1, opts.tokens // seq_len), heads=HEADS))


def sweep(clock: Clock, opts) -> list[dict]:
    """Forward and backward tile sizes of the pallas kernel at ``--sweep-seq-len``, causal, bf16."""
    import jax
    import jax.numpy as jnp

    from attention import Mask
    from attention.flash import flash_attention

    T = opts.sweep_seq_len
    B = max(1, opts.tokens // T)
    mask = Mask(causal=True)
    fwd_configs = [dict(block_q=bq, block_k=bk, num_warps=w, num_stages=st) for bq, bk, w, st in
                   ((64, 64, 4, 2), (128, 64, 4, 2), (128, 64, 8, 2), (128, 64, 4, 3), (128, 128, 8, 2),
                    (128, 128, 8, 3), (64, 128, 4, 2), (128, 32, 4, 3))]
    bwd_configs = [dict(block_q_bwd=bq, block_k_bwd=bk) for bq, bk in
                   ((32, 32), (64, 64), (32, 64), (64, 32), (128, 64), (64, 128))]
    rows = []

    def best_ms(fn, *inputs):
        jax.block_until_ready(fn(*inputs))
        times = []
        for _ in range(opts.repeats):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(*inputs))
            times.append(time.perf_counter() - t0)
        return 1e3 * min(times)

    for head_dim in opts.head_dims:
        keys = jax.random.split(jax.random.key(head_dim), 3)
        q, k, v = (jax.random.normal(key, (B, T, HEADS, head_dim), jnp.bfloat16) for key in keys)
        flops_fwd = 2.0 * B * HEADS * T * T * 2 * head_dim / 2
        for kind, configs in (("fwd", fwd_configs), ("fwd+bwd", bwd_configs)):
            for cfg in configs:
                if clock.left() < 10:
                    log("budget spent: stopping the sweep")
                    return rows
                if kind == "fwd":
                    fn = jax.jit(lambda q, k, v, cfg=cfg: flash_attention(q, k, v, mask, **cfg)[0])
                    flops = flops_fwd
                else:
                    def loss(q, k, v, cfg=cfg):
                        return jnp.sum(flash_attention(q, k, v, mask, **cfg)[0].astype(jnp.float32))
                    fn = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
                    flops = 3 * flops_fwd
                try:
                    ms = best_ms(fn, q, k, v)
                    row = dict(kind=kind, head_dim=head_dim, seq_len=T, **cfg, ms=ms, tflops=flops / ms / 1e9)
                except Exception as err:
                    row = dict(kind=kind, head_dim=head_dim, seq_len=T, **cfg, ms=math.nan, tflops=math.nan,
                               error=repr(err)[:200])
                log(f"sweep {row}")
                rows.append(row)
    return rows


def write_csv(rows: list[dict], path: str) -> None:
    fields = list(dict.fromkeys(key for row in rows for key in row))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def summarize(rows: list[dict], sweep_rows: list[dict], test_codes: dict, tokens: int) -> str:
    """Markdown tables: TFLOP/s per backend, pallas / cuDNN time, and the statistics' cost."""
    lines = ["# pallas GPU check", ""]
    lines += [f"- {name}: pytest exit code {code}" for name, code in test_codes.items()]
    lines.append("")
    plain = {(r["head_dim"], r["causal"], r["seq_len"], r["backend"]): r for r in rows if not r["stats"]}
    with_stats = {(r["head_dim"], r["causal"], r["seq_len"]): r
                  for r in rows if r["stats"] and r["backend"] == "pallas"}
    backends = list(dict.fromkeys(r["backend"] for r in rows if not r["stats"]))

    def fmt(x, spec=".1f"):
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)

    for pass_name, field in (("forward", "fwd"), ("forward+backward", "fwdbwd")):
        lines += [f"## {pass_name} TFLOP/s (bf16, {HEADS} heads, {tokens} tokens per call)", ""]
        head = ["D", "causal", "T", *backends, "pallas/cudnn time", "pallas+stats", "stats cost"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for key in sorted({k[:3] for k in plain}):
            cells = [str(key[0]), str(key[1]), str(key[2])]
            for b in backends:
                r = plain.get((*key, b))
                cells.append(fmt(r[f"{field}_tflops"]) if r else "-")
            p, c, s = plain.get((*key, "pallas")), plain.get((*key, "cudnn")), with_stats.get(key)
            ratio = p[f"{field}_ms"] / c[f"{field}_ms"] if p and c else None
            cost = s[f"{field}_ms"] / p[f"{field}_ms"] - 1 if p and s else None
            cells += [fmt(ratio, ".2f"), fmt(s[f"{field}_tflops"]) if s else "-",
                      "-" if cost is None or math.isnan(cost) else f"{100 * cost:+.1f}%"]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    if sweep_rows:
        lines += [f"## block-size sweep (T={sweep_rows[0]['seq_len']}, causal, bf16)", "",
                  "| pass | D | config | ms | TFLOP/s |",
                  "|---|---|---|---|---|"]
        for r in sweep_rows:
            cfg = {k: v for k, v in r.items() if k.startswith(("block", "num_"))}
            lines.append(f"| {r['kind']} | {r['head_dim']} | {cfg} | {fmt(r['ms'], '.3f')} | {fmt(r['tflops'])} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    opts = parse_args(argv)
    clock = Clock(opts.budget)
    os.makedirs(opts.out, exist_ok=True)
    sys.path.insert(0, REPO)
    test_codes = {}
    log(f"python {sys.version.split()[0]}; phases {opts.phases}; budget {opts.budget:.0f} s")
    if shutil.which("nvidia-smi"):
        subprocess.run(["nvidia-smi", "-L"], check=False)
    if "tests" in opts.phases:
        test_codes["tests/test_pallas.py (compiled)"] = run_pytest(
            ["-x", "tests/test_pallas.py", "-k", "not Interpret"], os.path.join(opts.out, "pytest_pallas.txt"),
            timeout=max(30.0, min(180.0, clock.left() - 200)))

    import jax  # after the test subprocesses, so that they find the GPU memory free

    log(f"jax {jax.__version__} on {jax.default_backend()}: {jax.devices()}")
    rows, sweep_rows = [], []
    if {"bench", "stats"} & set(opts.phases):
        bench = load_bench()
        opts.with_mha = mha_available()
        tmp_dir = tempfile.mkdtemp(prefix="bench_attention_")
        if "bench" in opts.phases:
            bench_grid(bench, opts, tmp_dir, clock, False, rows)
        if "stats" in opts.phases:
            bench_grid(bench, opts, tmp_dir, clock, True, rows)
        write_csv(rows, os.path.join(opts.out, "bench_all.csv"))
    if "suite" in opts.phases and clock.left() > 60:
        test_codes["tests/test_attention.py -k pallas (compiled)"] = run_pytest(
            ["tests/test_attention.py", "-k", "pallas"], os.path.join(opts.out, "pytest_suite.txt"),
            timeout=clock.left() - 30)
    if "sweep" in opts.phases and clock.left() > 30:
        sweep_rows = sweep(clock, opts)
        write_csv(sweep_rows, os.path.join(opts.out, "sweep.csv"))
    text = summarize(rows, sweep_rows, test_codes, opts.tokens)
    with open(os.path.join(opts.out, "summary.md"), "w") as f:
        f.write(text)
    print(text, flush=True)
    log(f"done with {clock.left():.0f} s of the budget left")


if __name__ == "__main__":
    main()
