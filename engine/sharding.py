"""Device mesh and shardings from ``config.mesh``.

The mesh has the axes ``data`` (batch parallelism; ``config.mesh.data = -1`` takes every device not used by
the other axes), ``context`` when ``config.mesh.context > 1`` (context parallelism: the sequence dimension of
every batch array is split over it and the ``ring`` attention backend passes K/V blocks around it) and
``model`` (``config.mesh.model``, default 1: tensor parallelism that shards attention heads and the MLP hidden
dimension). Batches are split along ``data`` (and ``context``); parameters and optimizer state follow
``config.mesh.rules`` — ``(regex, spec)`` pairs matched against the ``/``-joined parameter path, the first
match wins, ``spec`` naming a mesh axis (or None) per array dimension. Parameters no rule matches are
replicated. With several hosts, every host builds the same global mesh and feeds its own slice of the batch
(whole sequences: the context and model axes stay within a host).

``config.mesh.context_layout = "zigzag"`` feeds the sequence to the context axis in the zig-zag layout
(``zigzag_batch``: device r holds chunks r and 2N-1-r of 2N), so every device of a causal ring has the same
work in every ring step; the permutation happens on the host, before the batch is sharded.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

import jax
import ml_collections
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from attention.ring import zigzag_indices
DATA, CONTEXT, MODEL = "data", "context", "model"
CONTEXT_LAYOUTS = ("natural", "zigzag")  # config.mesh.context_layout: how a sequence splits over ``context``


def make_mesh(mesh_cfg: ml_collections.ConfigDict, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A ``(data, model)`` mesh, or ``(data, context, model)`` when ``mesh_cfg.context > 1``, over ``devices``
    (default: all devices of all hosts, in process order).

    On one host, an explicit ``data * context * model`` smaller than the device count uses the first devices
    only. With several hosts, ``context * model`` must divide each host's device count, so every host holds
    whole sequences of its rows.
    """
    devices = list(jax.devices() if devices is None else devices)
    model, context = int(mesh_cfg.model), int(mesh_cfg.get("context", 1))
    inner = model * context
    if mesh_cfg.data != -1 and jax.process_count() == 1 and 0 < mesh_cfg.data * inner < len(devices):
        devices = devices[: mesh_cfg.data * inner]
    if model < 1 or context < 1 or len(devices) % inner:
        raise ValueError(f"config.mesh context={context} x model={model} does not divide the {len(devices)} "
                         "available devices")
    if jax.process_count() > 1 and jax.local_device_count() % inner:
        raise ValueError(f"config.mesh context={context} x model={model} does not divide the "
                         f"{jax.local_device_count()} devices of each host; the context and model axes must stay "
                         "within a host")
    data = len(devices) // inner if mesh_cfg.data == -1 else int(mesh_cfg.data)
    if data * inner != len(devices):
        raise ValueError(f"config.mesh data={mesh_cfg.data} x context={context} x model={model} != {len(devices)} "
                         "available devices")
    if context == 1:
        return Mesh(np.asarray(devices).reshape(data, model), (DATA, MODEL))
    return Mesh(np.asarray(devices).reshape(data, context, model), (DATA, CONTEXT, MODEL))


def context_size(mesh: Mesh) -> int:
    """Devices on the ``context`` (sequence) axis; 1 when the mesh has none."""
    return int(dict(mesh.shape).get(CONTEXT, 1))


def batch_sharding(mesh: Mesh, ndim: int = 1) -> NamedSharding:
    """Leading (batch) dimension split over ``data``; with a context axis, the second (sequence) dimension of
    arrays with ``ndim >= 2`` split over ``context``."""
    if ndim >= 2 and context_size(mesh) > 1:
        return NamedSharding(mesh, P(DATA, CONTEXT))
    return NamedSharding(mesh, P(DATA))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def segment_positions(segmentation: np.ndarray) -> np.ndarray:
    """Each token's position within its run of equal segment ids, padding runs too (the host-side twin of
    ``models.positions_from_segmentation``): [B, T] ints -> [B, T] int32 (0 at every segment start)."""
    B, T = segmentation.shape
    idx = np.broadcast_to(np.arange(T, dtype=np.int32), (B, T))
    prev = np.pad(segmentation[:, :-1], ((0, 0), (1, 0)), constant_values=-1)
    return idx - np.maximum.accumulate(np.where(segmentation != prev, idx, 0), axis=1)


def zigzag_batch(batch: Mapping[str, np.ndarray], num_devices: int) -> dict[str, np.ndarray]:
    """A decoder-only batch in the zig-zag layout over ``num_devices``: every [B, T] array permuted along T
    (``attention.zigzag_indices``), with ``position`` (the natural positions, within segments when packed)
    added first when missing, so the model attends as in natural order. T must be a multiple of 2 N."""
    out = {k: np.asarray(v) for k, v in batch.items()}
    tokens = out["inputs"]
    if "position" not in out:
        seg = out.get("segmentation")
        out["position"] = (segment_positions(seg) if seg is not None else
                           np.broadcast_to(np.arange(tokens.shape[1], dtype=np.int32), tokens.shape).copy())
    idx = zigzag_indices(tokens.shape[1], num_devices)
    return {k: v[:, idx] if v.ndim >= 2 else v for k, v in out.items()}


def shard_batch(batch: Mapping[str, np.ndarray], mesh: Mesh, layout: str = "natural") -> dict[str, jax.Array]:
    """This host's part of the batch -> global arrays split over ``data`` (and the sequence over ``context``,
    in the zig-zag layout with ``layout="zigzag"`` and a context axis).

    Raises ValueError when the local batch does not split evenly over this host's data-parallel devices, or a
    sequence over the context axis.
    """
    local_data = mesh.devices.shape[0] // jax.process_count() or 1
    context = context_size(mesh)
    if layout not in CONTEXT_LAYOUTS:
        raise ValueError(f"layout={layout!r}; expected one of {CONTEXT_LAYOUTS}")
    if layout == "zigzag" and context > 1:
        batch = zigzag_batch(batch, context)
    out = {}
    for k, v in batch.items():
        v = np.asarray(v)
        if v.shape[0] % local_data:
            raise ValueError(
                f"batch[{k!r}] has {v.shape[0]} rows, not divisible by the {local_data} data-parallel devices "
                "of this host; make the batch size (or token budget buckets) a multiple of it"
            )
        if v.ndim >= 2 and v.shape[1] % context:
            raise ValueError(f"batch[{k!r}] has sequence length {v.shape[1]}, not divisible by the {context} "
                             "devices of the context axis (config.mesh.context)")
        out[k] = jax.make_array_from_process_local_data(batch_sharding(mesh, v.ndim), v)
    return out


def path_str(path: tuple) -> str:
    """A pytree key path as ``a/b/0/kernel``."""
    parts = []
    for k in path:
        for attr in ("key", "name", "idx"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    return "/".join(parts)


def spec_for(path: str, shape: tuple[int, ...], mesh: Mesh, rules: Sequence[tuple[str, Sequence[Any]]]) -> P:
    """The PartitionSpec for one array: first matching rule whose axes divide the shape, else replicated."""
    for pattern, spec in rules:
        if re.search(pattern, path):
            spec = tuple(spec)
            if len(spec) != len(shape):
                continue
            if all(ax is None or shape[i] % mesh.shape[ax] == 0 for i, ax in enumerate(spec)):
                return P(*spec)
            raise ValueError(
                f"parameter {path} with shape {shape} cannot be sharded as {spec} over mesh {dict(mesh.shape)}"
            )
    return P()


def tree_shardings(tree: Any, mesh: Mesh, rules: Sequence[tuple[str, Sequence[Any]]]) -> Any:
    """NamedShardings for every array leaf of ``tree`` (params or optimizer state, which mirrors them)."""
    active = rules if dict(mesh.shape).get(MODEL, 1) > 1 else ()

    def one(path, leaf):
        shape = tuple(getattr(leaf, "shape", ()))
        return NamedSharding(mesh, spec_for(path_str(path), shape, mesh, active) if shape else P())

    return jax.tree_util.tree_map_with_path(one, tree)
