"""The GPU check of the ``pallas`` backend: compiled-kernel tests, a bf16 train-step benchmark of the WMT base
config, the attention benchmark against cuDNN, XLA and JAX's own (deprecated) Pallas ``mha``, then a block-size
sweep. One command, sized for one device call (at most 9 minutes), on the accelerator image's jax 0.11 without pip:

    mkdir -p $OUT && PYTHONPATH=. PYTHONUNBUFFERED=1 timeout 540 python3 scripts/gpu_check_pallas.py --out $OUT \
        2>&1 | tee $OUT/log.txt
    python3 scripts/gpu_check_pallas.py --dry-run --out /tmp/gpu_check   # CPU: tiny train step, same reports

Phases, in priority order (``--phases`` picks some; each is skipped when ``--budget`` seconds would run out):

1. ``tests``: ``tests/test_pallas.py`` without the interpreted classes, i.e. the compiled Triton kernel against the
   float64 reference (pytest ``--noconftest``: the project conftest pins JAX to the CPU).
2. ``train``: the whole jitted train step of ``configs/translation_wmt14.py`` (Transformer base, bf16 compute,
   float32 params, batch 128 x 256 packed tokens per side) on synthetic packed batches of the config's shapes, with
   ``attention_impl`` = pallas, cudnn and xla: tokens/s (real source + target tokens) and MFU against the H200's
   dense bf16 peak (``--peak-tflops``, 989 TFLOP/s). Model FLOPs: 3 x XLA's count of the forward pass with
   ``attention_impl="xla"`` (the kernels' custom calls carry no FLOP count), the same for all three.
3. ``bench``: ``attention.benchmark.main`` (``scripts/bench_attention.py``, in this process) in bf16 for head
   dims 64 and 128, causal and not, at T = 1k, 4k, 16k with B·T = 16k tokens and 16 heads: ``pallas``,
   ``cudnn``, ``xla`` and ``mha``; forward and forward+backward TFLOP/s.
4. ``stats``: the same grid for ``pallas`` with ``return_stats=True`` (the statistics' cost).
5. ``suite``: the shared cross-backend suite ``tests/test_attention.py -k pallas`` on the compiled kernel.
6. ``sweep``: forward and backward block sizes of ``pallas`` at T = 4k (causal), to choose the GPU defaults.

Writes into ``--out``: ``train_bench.csv`` (tokens/s, MFU, step time per backend), ``bench_all.csv`` (every
attention benchmark row, with its configuration), ``sweep.csv``, ``summary.md`` (the tables: train step per
backend, TFLOP/s per backend, pallas / cuDNN time ratio, statistics overhead) and the pytest logs: seven files at
most, so that all of them come back from a device call. Needs jax (with CUDA), numpy, pytest and hypothesis, and
for the train phase flax, optax, orbax-checkpoint and ml_collections (the data pipeline's grain and
sentencepiece are not needed: the batches are synthetic); the repository is put on ``PYTHONPATH``.
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
PHASES = ("tests", "train", "bench", "stats", "suite", "sweep")
HEADS = 16
H200_BF16_DENSE_TFLOPS = 989.0  # NVIDIA H200 SXM datasheet: 1,979 TFLOP/s bf16 with 2:4 sparsity, half dense
TRAIN_IMPLS = ("pallas", "cudnn", "xla")


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
    p.add_argument("--train-impls", nargs="+", choices=TRAIN_IMPLS, default=list(TRAIN_IMPLS))
    p.add_argument("--train-steps", type=int, default=20, help="timed train steps per backend (after 2 warm-up)")
    p.add_argument("--train-budget", type=float, default=240.0, help="seconds for the whole train phase")
    p.add_argument("--peak-tflops", type=float, default=H200_BF16_DENSE_TFLOPS,
                   help="device peak for MFU (default: H200 dense bf16)")
    p.add_argument("--dry-run", action="store_true",
                   help="CPU check of this script: the train phase only, on the runlocal-sized WMT config (rows of "
                        "32 tokens) with attention_impl=xla for 2 steps; writes the same report files")
    opts = p.parse_args(argv)
    if opts.dry_run:
        opts.phases, opts.train_impls, opts.train_steps = ["train"], ["xla"], 2
    for name in ("train_steps", "repeats"):
        if getattr(opts, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1; got {getattr(opts, name)}")
    return opts


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


def mha_available() -> bool:
    try:
        importlib.import_module("jax.experimental.pallas.ops.gpu.attention")
    except Exception as err:  # not shipped in this jax: compare without it
        log(f"jax.experimental.pallas.ops.gpu.attention unavailable ({err!r}); benchmarking without mha")
        return False
    return True


def bench_grid(bench, opts, tmp_dir: str, clock: Clock, stats: bool, rows: list[dict]) -> None:
    """``attention.benchmark.main`` over head dims x causal x lengths, appending rows tagged with their configuration."""
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
    from attention.benchmark import best_time_ms
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
                    ms = best_time_ms(fn, (q, k, v), opts.repeats)
                    row = dict(kind=kind, head_dim=head_dim, seq_len=T, **cfg, ms=ms, tflops=flops / ms / 1e9)
                except Exception as err:
                    row = dict(kind=kind, head_dim=head_dim, seq_len=T, **cfg, ms=math.nan, tflops=math.nan,
                               error=repr(err)[:200])
                log(f"sweep {row}")
                rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------------ train step
def load_wmt_config(runlocal: bool):
    """configs/translation_wmt14.py (base, or its runlocal size). Without grain/sentencepiece (not needed for
    synthetic batches) the config's ``import data`` gets a stand-in that provides the empty data section."""
    import types

    import ml_collections

    try:
        import data  # noqa: F401
    except ImportError as err:
        log(f"data pipeline unavailable ({err!r}); using a stand-in data section for the config")
        sys.modules["data"] = types.SimpleNamespace(default_translation_config=ml_collections.ConfigDict)
    path = os.path.join(REPO, "configs", "translation_wmt14.py")
    spec = importlib.util.spec_from_file_location("translation_wmt14", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config("runlocal" if runlocal else None)
    config.model.dtype = "bfloat16"
    if runlocal:  # CPU-sized: a few seconds of compile
        config.data.update(max_source_len=32, max_target_len=32, vocab_size=512)
        config.model.max_len = 32
    return config


def synthetic_batch(batch_size: int, source_len: int, target_len: int, vocab_size: int, seed: int = 0,
                    mean_len: int = 28, fill: float = 0.94) -> dict:
    """Packed translation rows like the pipeline's: sentences of random length (mean ``mean_len``) packed until
    about ``fill`` of each row holds tokens; the rest is padding (segment 0). Keys and dtypes of a real batch:
    inputs/targets [B, L] int32 token ids (>= 4), *_segmentation (1, 2, ... per sentence), *_position (restarting
    at 0 in each sentence)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = {}
    for side, length in (("inputs", source_len), ("targets", target_len)):
        tokens = rng.integers(4, vocab_size, size=(batch_size, length), dtype=np.int64).astype(np.int32)
        seg = np.zeros((batch_size, length), np.int32)
        pos = np.zeros((batch_size, length), np.int32)
        budget = max(1, int(round(fill * length)))
        for row in range(batch_size):
            start, segment = 0, 1
            while start < budget:
                n = int(min(budget - start, max(2, rng.poisson(mean_len))))
                seg[row, start:start + n] = segment
                pos[row, start:start + n] = np.arange(n)
                start, segment = start + n, segment + 1
        out[side] = np.where(seg > 0, tokens, 0).astype(np.int32)
        out[f"{side}_segmentation"] = seg
        out[f"{side}_position"] = pos
    return out


def engine_train_step(config, batch: dict):
    """The engine's jitted train step for ``config`` on all devices: (step(state, batch) -> (state, metrics),
    initial state, the batch on the devices, model FLOPs of one step from the forward with the xla backend).
    The only code of this script that knows the engine's layout."""
    import jax

    from engine import metrics, sharding, state, steps, tasks

    mesh = sharding.make_mesh(config.mesh)
    vocab = int(config.data.vocab_size)
    task = tasks.get_task(config)
    setup, init = state.build(config, task, mesh, vocab)
    device_batch = steps.to_device(batch, mesh)
    params = jax.eval_shape(init)["params"]
    abstract_batch = {k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in batch.items()}
    flops = 3.0 * metrics.forward_flops(state.flops_forward(setup), params, abstract_batch)
    return steps.make_train_step(setup), init(), device_batch, flops


def train_bench(opts, clock: Clock) -> list[dict]:
    """Train-step time, tokens/s and MFU per attention backend on the WMT base config in bf16."""
    import jax
    import numpy as np

    config = load_wmt_config(runlocal=opts.dry_run)
    d = config.data
    batch = synthetic_batch(int(d.batch_size), int(d.max_source_len), int(d.max_target_len), int(d.vocab_size))
    tokens = int(np.sum(batch["inputs_segmentation"] > 0) + np.sum(batch["targets_segmentation"] > 0))
    peak = opts.peak_tflops * 1e12 * jax.device_count()
    rows = []
    phase_end = min(clock.left(), opts.train_budget)
    phase_clock = Clock(phase_end)
    for i, impl in enumerate(opts.train_impls):
        if phase_clock.left() < 20:
            log(f"train budget spent: skipping {opts.train_impls[i:]}")
            break
        row = dict(config="translation_wmt14" + (":runlocal" if opts.dry_run else ""), attention_impl=impl,
                   dtype=config.model.dtype, batch=f"{d.batch_size}x{d.max_source_len}+{d.max_target_len}",
                   tokens_per_step=tokens, devices=jax.device_count(), device_kind=jax.devices()[0].device_kind)
        try:
            cfg = config.copy_and_resolve_references()
            cfg.model.attention_impl = impl
            t0 = time.perf_counter()
            step, state, device_batch, flops = engine_train_step(cfg, batch)
            for _ in range(2):  # compile + one more warm-up
                state, metrics = step(state, device_batch)
            jax.block_until_ready(metrics)
            row["compile_s"] = time.perf_counter() - t0
            times = []
            for _ in range(opts.train_steps):
                if phase_clock.left() < 5:
                    break
                t1 = time.perf_counter()
                state, metrics = step(state, device_batch)
                jax.block_until_ready(metrics)
                times.append(time.perf_counter() - t1)
            step_s = float(np.median(times))
            loss = float(metrics["loss_sum"]) / max(float(metrics["weight_sum"]), 1.0)
            row.update(steps=len(times), step_ms=1e3 * step_s, tokens_per_s=tokens / step_s, model_tflops=flops / 1e12,
                       tflops_per_s=flops / step_s / 1e12, mfu=flops / step_s / peak, loss=loss,
                       status="ok" if np.isfinite(loss) else "non-finite loss")
            del state, device_batch
        except Exception as err:  # keep the other backends; the log and the CSV show what failed
            row["status"] = f"error: {err!r}"[:300]
        log(f"train {row}")
        rows.append(row)
    return rows


def write_csv(rows: list[dict], path: str) -> None:
    fields = list(dict.fromkeys(key for row in rows for key in row))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def summarize(rows: list[dict], sweep_rows: list[dict], test_codes: dict, tokens: int,
              train_rows: list[dict] = (), peak_tflops: float = H200_BF16_DENSE_TFLOPS) -> str:
    """Markdown tables: train step per backend, TFLOP/s per backend, pallas / cuDNN time, and the statistics'
    cost."""
    lines = ["# pallas GPU check", ""]
    lines += [f"- {name}: pytest exit code {code}" for name, code in test_codes.items()]
    lines.append("")
    if train_rows:
        first = train_rows[0]
        lines += [f"## train step: {first['config']}, {first['dtype']}, batch {first['batch']} "
                  f"({first['tokens_per_step']} real tokens), {first['devices']} x {first['device_kind']}", "",
                  f"MFU against {peak_tflops:g} TFLOP/s per device.", "",
                  "| attention_impl | step ms | tokens/s | TFLOP/s | MFU | compile s | loss | status |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in train_rows:
            get = lambda key, spec: format(r[key], spec) if key in r else "-"  # noqa: E731
            lines.append(f"| {r['attention_impl']} | {get('step_ms', '.1f')} | {get('tokens_per_s', ',.0f')} | "
                         f"{get('tflops_per_s', '.1f')} | {get('mfu', '.1%')} | {get('compile_s', '.0f')} | "
                         f"{get('loss', '.3f')} | {r['status']} |")
        lines.append("")
    plain = {(r["head_dim"], r["causal"], r["seq_len"], r["backend"]): r for r in rows if not r["stats"]}
    with_stats = {(r["head_dim"], r["causal"], r["seq_len"]): r
                  for r in rows if r["stats"] and r["backend"] == "pallas"}
    backends = list(dict.fromkeys(r["backend"] for r in rows if not r["stats"]))

    def fmt(x, spec=".1f"):
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)

    for pass_name, field in (("forward", "fwd"), ("forward+backward", "fwdbwd")) if rows else ():
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
    test_codes = {}
    log(f"python {sys.version.split()[0]}; phases {opts.phases}; budget {opts.budget:.0f} s")
    if shutil.which("nvidia-smi"):
        subprocess.run(["nvidia-smi", "-L"], check=False)
    if "tests" in opts.phases:
        test_codes["tests/test_pallas.py (compiled)"] = run_pytest(
            ["-x", "tests/test_pallas.py", "-k", "not Interpret"], os.path.join(opts.out, "pytest_pallas.txt"),
            timeout=max(30.0, min(150.0, clock.left() - 300)))

    import jax  # after the test subprocesses, so that they find the GPU memory free

    log(f"jax {jax.__version__} on {jax.default_backend()}: {jax.devices()}")
    rows, sweep_rows, train_rows = [], [], []
    if "train" in opts.phases:
        train_rows = train_bench(opts, clock)
        write_csv(train_rows, os.path.join(opts.out, "train_bench.csv"))
    if {"bench", "stats"} & set(opts.phases):
        from attention import benchmark as bench

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
    text = summarize(rows, sweep_rows, test_codes, opts.tokens, train_rows, opts.peak_tflops)
    with open(os.path.join(opts.out, "summary.md"), "w") as f:
        f.write(text)
    print(text, flush=True)
    log(f"done with {clock.left():.0f} s of the budget left")


if __name__ == "__main__":
    main()
