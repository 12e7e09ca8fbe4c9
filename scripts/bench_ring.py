"""Memory per device of ring attention (the ``ring`` backend) vs sequence length, for 1, 2, 4 and 8 devices.

For each sequence length T and ring size N, a jitted forward + backward pass (the gradients of
``sum(out * d_out)`` wrt q, k, v) with q, k, v sharded over a ``context`` mesh axis of N devices is compiled,
and ``compiled.memory_analysis()`` of the per-device program is read: arguments (the q/k/v/d_out shards),
temporaries, outputs (the gradient shards). Nothing runs, so the table is the same on any host; on CPU the
devices are simulated (``--xla_force_host_platform_device_count``, set here when the platform is CPU).
N = 1 is the ring of one device, i.e. the ``chunked`` backend.

    python scripts/bench_ring.py                                   # 4k .. 32k tokens, 1/2/4/8 devices
    python scripts/bench_ring.py --seq-lens 8192 65536 --heads 16 --no-causal

Prints one row per (T, N): MB per device and the ratio to N = 1 (1/N scaling shows as 0.50, 0.25, 0.125).
With ``--causal`` it then prints the causal load balance of the two sequence layouts
(``config.mesh.context_layout``): the ring steps are synchronous and a device skips the tiles its mask hides
entirely, so a step lasts as long as the busiest device's visible tiles. For each (T, N) and layout it counts,
from the block geometry (nothing runs), the critical path (the sum over ring steps of the busiest device's
visible block x block tiles) against the ideal (all visible tiles / N).
"""
from __future__ import annotations

import argparse
import os
from typing import Optional, Sequence

if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import attention  # noqa: E402

MB = 2**20


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seq-lens", type=int, nargs="+", default=[4096, 8192, 16384, 32768])
    p.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4, 8], help="ring sizes to compile for")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=None, help="key/value heads (GQA); default: --heads")
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True,
                   help="causal mask in the zig-zag layout (positions given), else no mask")
    p.add_argument("--block", type=int, default=512, help="chunked tiles inside a device (block_q = block_k)")
    return p.parse_args(argv)


def per_device_memory(args: argparse.Namespace, T: int, n: int) -> dict:
    """memory_analysis() of the forward + backward program for sequence length T on a ring of n devices."""
    mesh = Mesh(np.array(jax.devices()[:n]), ("context",))
    B, H, D = args.batch, args.heads, args.head_dim
    Hkv = args.kv_heads or H
    x_sharding = NamedSharding(mesh, P(None, "context"))
    q = jax.ShapeDtypeStruct((B, T, H, D), jnp.float32, sharding=x_sharding)
    kv = jax.ShapeDtypeStruct((B, T, Hkv, D), jnp.float32, sharding=x_sharding)
    pos = jax.ShapeDtypeStruct((B, T), jnp.int32, sharding=NamedSharding(mesh, P(None, "context")))
    options = {"mesh": mesh, "axis": "context", "block_q": args.block, "block_k": args.block}

    def loss(q, k, v, d_out, pos):
        mask = attention.Mask(causal=True, q_positions=pos, kv_positions=pos) if args.causal else None
        out = attention.attention(q, k, v, mask, implementation="ring", backend_options=options)
        return jnp.sum(out * d_out)

    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)), out_shardings=(x_sharding,) * 3)
    mem = grads.lower(q, kv, kv, q, pos).compile().memory_analysis()
    return {"args": mem.argument_size_in_bytes / MB, "temp": mem.temp_size_in_bytes / MB,
            "out": mem.output_size_in_bytes / MB}


def visible_tiles(T: int, n: int, block: int, layout: str) -> np.ndarray:
    """Visible (query tile, key tile) pairs of a causal mask per ring step and device: int [n steps, n devices].

    Device r holds the queries of its shard; at step t it holds the keys of device (r - t) mod n's shard.
    """
    order = attention.ring.zigzag_indices(T, n) if layout == "zigzag" else np.arange(T)
    tiles = order.reshape(n, -1, block)  # [device, tile, position]: the positions of each local tile
    first, last = tiles.min(-1), tiles.max(-1)  # [device, tile]
    counts = np.zeros((n, n), np.int64)
    for t in range(n):
        for r in range(n):
            src = (r - t) % n
            counts[t, r] = int(np.sum(last[r][:, None] >= first[src][None, :]))  # some query sees some key
    return counts


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    if max(args.devices) > jax.device_count():
        raise SystemExit(f"--devices {max(args.devices)} needs that many devices; this host has {jax.device_count()}")
    for T in args.seq_lens:
        for n in args.devices:
            if T % (2 * n if args.causal else n):
                raise SystemExit(f"--seq-lens {T} must be a multiple of {2 * n if args.causal else n} for {n} devices")
    print(f"ring attention, forward + backward, float32, B={args.batch} H={args.heads} "
          f"Hkv={args.kv_heads or args.heads} D={args.head_dim}, {'causal (zig-zag positions)' if args.causal else 'no mask'}, block {args.block}; "
          f"platform {jax.default_backend()}")
    print(f"{'T':>7} {'N':>3} {'args MB':>9} {'temp MB':>9} {'out MB':>9} {'total MB':>9} {'vs N=1':>7}")
    for T in args.seq_lens:
        base = None
        for n in args.devices:
            m = per_device_memory(args, T, n)
            total = m["args"] + m["temp"] + m["out"]
            base = total if base is None else base
            print(f"{T:>7} {n:>3} {m['args']:>9.1f} {m['temp']:>9.1f} {m['out']:>9.1f} {total:>9.1f} "
                  f"{total / base:>7.3f}")
    if not args.causal:
        return
    print(f"\ncausal load balance, block {args.block}: critical path = sum over ring steps of the busiest device's "
          "visible tiles; ideal = all visible tiles / N")
    print(f"{'T':>7} {'N':>3} {'ideal':>8} {'natural':>8} {'zigzag':>8} {'natural/ideal':>14} {'zigzag/ideal':>13}")
    for T in args.seq_lens:
        for n in args.devices:
            if n == 1 or (T // (2 * n)) % args.block:
                continue
            nat, zig = (visible_tiles(T, n, args.block, layout) for layout in ("natural", "zigzag"))
            ideal = nat.sum() / n
            crit = [c.max(axis=1).sum() for c in (nat, zig)]
            print(f"{T:>7} {n:>3} {ideal:>8.0f} {crit[0]:>8} {crit[1]:>8} {crit[0] / ideal:>14.2f} "
                  f"{crit[1] / ideal:>13.2f}")


if __name__ == "__main__":
    from engine import cli

    cli.script(main)
