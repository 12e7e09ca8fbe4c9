"""Attention metrics per layer and head, and model FLOP utilization (MFU).

Attention metrics come from the backends' ``AttentionStats`` (so they work with every backend, chunked and
Pallas included): per group (``encoder_self``, ``decoder_self``, ``cross``), per layer, per head:

- ``entropy``: mean attention entropy in nats over real (non-padding) query rows;
- ``norm_entropy``: entropy / log(number of visible keys), 1.0 = uniform;
- ``max_logit``: the largest scaled logit;
- ``sink``: mean attention probability on the first key;
- ``logit_mean`` / ``logit_std``: mean over query rows of the mean / standard deviation of the scaled logits
  each query sees (about 1 with a working 1/sqrt(d_k) scale; ~sqrt(d_k) without it; far below 1 when queries
  cannot tell keys apart).

MFU = model FLOPs per step / step time / peak FLOP/s, where model FLOPs are 3x the forward pass's FLOPs as
XLA counts them for the global batch shape, and the peak is measured once per device kind with a timed
matmul and cached in ``$ATTNLAB_CACHE_DIR`` (default ``~/.cache/attnlab``)/peak_flops.json.
"""
from __future__ import annotations

import json
import os
import re
import time
from typing import Any, Iterable, Mapping, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from attention import (
    AttentionStats,
    logit_mean_per_head,
    logit_std_per_head,
    max_logit_per_head,
    mean_entropy_per_head,
    normalized_entropy_per_head,
    sink_mass_per_head,
)

FIELDS = ("entropy", "norm_entropy", "max_logit", "sink", "logit_mean", "logit_std")
# Per-head keys of the attention metrics in metrics.jsonl and W&B: attn/<group>/<field>/L<layer>H<head>.
HEAD_KEY = re.compile(r"^attn/(?P<group>[a-z_]+)/(?P<field>[a-z_]+)/L(?P<layer>\d+)H(?P<head>\d+)$")


def head_key(group: str, field: str, layer: int, head: int, prefix: str = "attn") -> str:
    """The metrics key of one head's ``field``: ``attn/<group>/<field>/L<layer>H<head>``."""
    return f"{prefix}/{group}/{field}/L{layer}H{head}"


def head_arrays(values: Mapping[str, float], field: str) -> dict[str, np.ndarray]:
    """group -> [layers, heads] of ``field`` from a flat record's per-head keys (NaN where missing)."""
    cells: dict[str, dict[tuple[int, int], float]] = {}
    for k, v in values.items():
        m = HEAD_KEY.match(k)
        if m and m["field"] == field and isinstance(v, (int, float)) and not isinstance(v, bool):
            cells.setdefault(m["group"], {})[(int(m["layer"]), int(m["head"]))] = float(v)
    out = {}
    for group, c in cells.items():
        arr = np.full((1 + max(l for l, _ in c), 1 + max(h for _, h in c)), np.nan)
        for (l, h), v in c.items():
            arr[l, h] = v
        out[group] = arr
    return out


def logged_summaries(records: Iterable[Mapping[str, Any]], fields: Sequence[str] = FIELDS
                     ) -> list[tuple[int, dict[str, dict[str, np.ndarray]]]]:
    """The attention summaries a run logged (metrics.jsonl records with ``attn/step``), as (the step they
    describe, group -> field -> [L, H]) in step order; a step logged twice (rerun after a resume) keeps its
    last. Values are the logged floats, so the health monitor sees what it saw during training."""
    by_step: dict[int, dict[str, dict[str, np.ndarray]]] = {}
    for r in records:
        if "attn/step" not in r:
            continue
        summary: dict[str, dict[str, np.ndarray]] = {}
        for field in fields:
            for group, arr in head_arrays(r, field).items():
                summary.setdefault(group, {})[field] = arr
        by_step[int(r["attn/step"])] = summary
    return sorted(by_step.items())


def same_segment_count(q_seg: jax.Array, kv_seg: jax.Array) -> jax.Array:
    """Keys sharing each query's (non-zero) segment: q_seg [B, Tq], kv_seg [B, Tk] -> [B, 1, Tq] float32."""
    same = (q_seg[:, :, None] == kv_seg[:, None, :]) & (kv_seg[:, None, :] != 0)
    return jnp.sum(same, axis=-1).astype(jnp.float32)[:, None, :]


def attention_summary(
    stats: Mapping[str, Sequence[AttentionStats]], num_visible: Mapping[str, jax.Array]
) -> dict[str, dict[str, jax.Array]]:
    """Per-group metrics, each [L, H] float32: group -> {entropy, norm_entropy, max_logit, sink, logit_mean,
    logit_std}. Jittable.
    Groups without statistics (empty, or ``None`` layers: linear attention) are left out."""
    out = {}
    for group, layers in stats.items():
        if not layers or any(s is None for s in layers):
            continue
        per = {f: [] for f in FIELDS}
        for s in layers:
            per["entropy"].append(mean_entropy_per_head(s))
            per["norm_entropy"].append(normalized_entropy_per_head(s, num_visible[group]))
            per["max_logit"].append(max_logit_per_head(s))
            per["sink"].append(sink_mass_per_head(s))
            per["logit_mean"].append(logit_mean_per_head(s))
            per["logit_std"].append(logit_std_per_head(s))
        out[group] = {f: jnp.stack(v).astype(jnp.float32) for f, v in per.items()}
    return out


def flatten_summary(summary: Mapping[str, Mapping[str, np.ndarray]], prefix: str = "attn") -> dict[str, float]:
    """W&B/JSONL keys: ``attn/<group>/<field>/L<l>H<h>``, ``attn/<group>/<field>/L<l>`` (mean over heads,
    max for max_logit) and ``attn/<group>/<field>`` (over layers)."""
    flat: dict[str, float] = {}
    for group, fields in summary.items():
        for field, arr in fields.items():
            arr = np.asarray(arr)
            reduce = np.max if field == "max_logit" else np.mean
            for layer in range(arr.shape[0]):
                for head in range(arr.shape[1]):
                    flat[head_key(group, field, layer, head, prefix)] = float(arr[layer, head])
                flat[f"{prefix}/{group}/{field}/L{layer}"] = float(reduce(arr[layer]))
            flat[f"{prefix}/{group}/{field}"] = float(reduce(arr))
    return flat


def format_table(summary: Mapping[str, Mapping[str, np.ndarray]], field: str = "entropy") -> str:
    """A plain-text table of ``field`` per layer (rows) and head (columns), one block per group."""
    lines = []
    order = [g for g in ("encoder_self", "decoder_self", "cross") if g in summary]
    for group in order + [g for g in summary if g not in order]:
        arr = np.asarray(summary[group][field])
        lines.append(f"{group} {field}")
        lines.append("layer " + " ".join(f"{'h' + str(h):>7}" for h in range(arr.shape[1])))
        for layer in range(arr.shape[0]):
            lines.append(f"{layer:>5} " + " ".join(f"{v:7.3f}" for v in arr[layer]))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ MFU
def _cache_path() -> str:
    root = os.environ.get("ATTNLAB_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "attnlab"))
    return os.path.join(root, "peak_flops.json")


def measure_peak_flops(mesh: Mesh, dtype: str = "float32", size: Optional[int] = None, reps: int = 5) -> float:
    """Measured peak matmul FLOP/s of all devices of ``mesh`` together, cached per device kind.

    Each device multiplies two [size, size] matrices (size 1024 on CPU, 8192 on accelerators); the best of
    ``reps`` timed runs counts.
    """
    devices = mesh.devices.reshape(-1)
    platform = devices[0].platform
    key = f"{platform}:{devices[0].device_kind}:{len(devices)}:{dtype}"
    path = _cache_path()
    cache = {}
    if os.path.exists(path):
        try:
            with open(path) as f:
                cache = json.load(f)
        except (OSError, json.JSONDecodeError):
            cache = {}
    if key in cache:
        return float(cache[key])
    n = size or (1024 if platform == "cpu" else 8192)
    flat = Mesh(devices, ("all",))
    sharding = NamedSharding(flat, P("all"))
    a = jax.device_put(jnp.ones((len(devices), n, n), dtype), sharding)
    b = jax.device_put(jnp.ones((len(devices), n, n), dtype) * 0.5, sharding)
    matmul = jax.jit(lambda x, y: jnp.einsum("dij,djk->dik", x, y), out_shardings=sharding)
    matmul(a, b).block_until_ready()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        matmul(a, b).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    peak = 2.0 * n**3 * len(devices) / best
    cache[key] = peak
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(cache, f, indent=1)
    except OSError:
        pass
    return peak


def forward_flops(fn, *abstract_args) -> float:
    """FLOPs of ``fn(*abstract_args)`` as XLA counts them for the unpartitioned program (no compile)."""
    cost = jax.jit(fn).lower(*abstract_args).cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    return float((cost or {}).get("flops", 0.0))
