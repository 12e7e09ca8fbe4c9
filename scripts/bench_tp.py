"""Tensor (model-axis) parallelism: train-step throughput and per-device parameter memory for 1/2/4-way
``mesh.model`` on all devices (the rest of the devices form the data axis).

For each model-axis size M the config's model is built on a ``(data = devices / M, model = M)`` mesh with the
engine's sharding rules (attention heads and the MLP hidden dimension split over ``model``), one train step is
compiled, and ``--steps`` steps on a fixed batch of random tokens are timed. Per-device memory is what device 0
holds of the parameters and of the optimizer state. On CPU the devices are simulated
(``--xla_force_host_platform_device_count``, set here when the platform is CPU): the memory column is exact,
the throughput only shows the cost of the extra collectives, not a speed-up.

    python scripts/bench_tp.py                                          # configs/translation.py's model
    python scripts/bench_tp.py --d-model 512 --d-ff 2048 --heads 8 --layers 6 --batch 64
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Optional, Sequence

if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import jax  # noqa: E402
import numpy as np  # noqa: E402

from attention import available_backends  # noqa: E402
from engine import config as config_lib  # noqa: E402
from engine import sharding as sharding_lib  # noqa: E402
from engine import state as state_lib  # noqa: E402
from engine import steps as steps_lib  # noqa: E402
from engine import tasks  # noqa: E402
from studies.inprocess import load  # noqa: E402

MB = 2**20


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="configs/translation.py", help="a translation config (its model section)")
    p.add_argument("--model-axis", type=int, nargs="+", default=[1, 2, 4], help="mesh.model sizes")
    p.add_argument("--d-model", type=int, default=None)
    p.add_argument("--d-ff", type=int, default=None)
    p.add_argument("--heads", type=int, default=None)
    p.add_argument("--layers", type=int, default=None, help="encoder and decoder layers")
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--batch", type=int, default=32, help="global rows per step (a multiple of the device count)")
    p.add_argument("--seq-len", type=int, default=128, help="source and target tokens per row")
    p.add_argument("--steps", type=int, default=5, help="timed steps after the compiling one")
    return p.parse_args(argv)


def random_batch(rows: int, length: int, vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A translation batch of random tokens, one example per row filling it (every position real)."""
    rng = np.random.default_rng(seed)
    tokens = lambda: rng.integers(4, vocab, size=(rows, length), dtype=np.int32)  # noqa: E731
    ones = np.ones((rows, length), np.int32)
    pos = np.broadcast_to(np.arange(length, dtype=np.int32), (rows, length)).copy()
    return {"inputs": tokens(), "targets": tokens(), "inputs_segmentation": ones, "targets_segmentation": ones,
            "inputs_position": pos, "targets_position": pos}


def device0_mb(tree) -> float:
    """MB of ``tree``'s arrays held by the first device."""
    dev = jax.devices()[0]
    return sum(s.data.nbytes for x in jax.tree.leaves(tree) for s in x.addressable_shards if s.device == dev) / MB


def measure(args: argparse.Namespace, model_axis: int) -> dict:
    c = load(args.config)
    for field, value in (("d_model", args.d_model), ("d_ff", args.d_ff), ("num_heads", args.heads),
                         ("num_encoder_layers", args.layers), ("num_decoder_layers", args.layers)):
        if value is not None:
            c.model[field] = value
    c.model.max_len = max(c.model.max_len, args.seq_len)
    c.mesh.update(data=-1, model=model_axis)
    c.data.batch_size = args.batch
    task = tasks.get_task(c)
    model_cfg = config_lib.validate(c, jax.device_count(), available_backends(), task)
    mesh = sharding_lib.make_mesh(c.mesh)
    setup, init = state_lib.build(c, task, mesh, args.vocab, model_cfg)
    state = init()
    params_mb, opt_mb = device0_mb(state["params"]), device0_mb(state["opt_state"])
    n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(state["params"]))
    train_step = steps_lib.make_train_step(setup)
    batch = steps_lib.to_device(random_batch(args.batch, args.seq_len, args.vocab), mesh)
    t0 = time.perf_counter()
    state, metrics = train_step(state, batch)
    jax.block_until_ready(metrics)
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(args.steps):
        state, metrics = train_step(state, batch)
    jax.block_until_ready(metrics)
    dt = time.perf_counter() - t0
    tokens = float(metrics["tokens"]) * args.steps
    return {"mesh": dict(mesh.shape), "params": n_params, "params_mb": params_mb, "opt_mb": opt_mb,
            "tokens_per_s": tokens / dt, "step_ms": 1e3 * dt / args.steps, "compile_s": compile_s,
            "loss": float(metrics["loss_sum"]) / max(float(metrics["weight_sum"]), 1.0)}


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    devices = jax.devices()
    print(f"{len(devices)} x {devices[0].device_kind} ({devices[0].platform}); config {args.config}, batch "
          f"{args.batch} x {args.seq_len} tokens per side, {args.steps} timed steps")
    rows = [(m, measure(args, m)) for m in args.model_axis]
    base = rows[0][1]
    print(f"{'model':>5} {'mesh':>18} {'params':>9} {'param MB/dev':>12} {'opt MB/dev':>10} {'vs 1-way':>8} "
          f"{'tokens/s':>10} {'step ms':>8} {'loss':>7}")
    for m, r in rows:
        mesh = "x".join(f"{k}={v}" for k, v in r["mesh"].items())
        ratio = (r["params_mb"] + r["opt_mb"]) / (base["params_mb"] + base["opt_mb"])
        print(f"{m:>5} {mesh:>18} {r['params'] / 1e6:>8.2f}M {r['params_mb']:>12.2f} {r['opt_mb']:>10.2f} "
              f"{ratio:>8.2f} {r['tokens_per_s']:>10.0f} {r['step_ms']:>8.1f} {r['loss']:>7.4f}")


if __name__ == "__main__":
    from engine import cli

    cli.script(main)
