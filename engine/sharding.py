"""Device mesh and shardings from ``config.mesh``.

The mesh has two axes: ``data`` (batch parallelism; ``config.mesh.data = -1`` takes every device not used by
the model axis) and ``model`` (``config.mesh.model``, default 1: tensor parallelism that shards attention
heads and the MLP hidden dimension). Batches are split along ``data``; parameters and optimizer state follow
``config.mesh.rules`` — ``(regex, spec)`` pairs matched against the ``/``-joined parameter path, the first
match wins, ``spec`` naming a mesh axis (or None) per array dimension. Parameters no rule matches are
replicated. With several hosts, every host builds the same global mesh and feeds its own slice of the batch.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

import jax
import ml_collections
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

DATA, MODEL = "data", "model"


def make_mesh(mesh_cfg: ml_collections.ConfigDict, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A ``(data, model)`` mesh over ``devices`` (default: all devices of all hosts).

    On one host, an explicit ``data * model`` smaller than the device count uses the first devices only.
    """
    devices = list(jax.devices() if devices is None else devices)
    model = int(mesh_cfg.model)
    if mesh_cfg.data != -1 and jax.process_count() == 1 and 0 < mesh_cfg.data * model < len(devices):
        devices = devices[: mesh_cfg.data * model]
    if model < 1 or len(devices) % model:
        raise ValueError(f"config.mesh.model={model} does not divide the {len(devices)} available devices")
    data = len(devices) // model if mesh_cfg.data == -1 else int(mesh_cfg.data)
    if data * model != len(devices):
        raise ValueError(f"config.mesh data={mesh_cfg.data} x model={model} != {len(devices)} available devices")
    return Mesh(np.asarray(devices).reshape(data, model), (DATA, MODEL))


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Leading (batch) dimension split over ``data``."""
    return NamedSharding(mesh, P(DATA))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def shard_batch(batch: Mapping[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
    """This host's part of the batch -> global arrays split over ``data``.

    Raises ValueError when the local batch does not split evenly over this host's data-parallel devices.
    """
    sharding = batch_sharding(mesh)
    local_data = mesh.devices.shape[0] // jax.process_count() or 1
    out = {}
    for k, v in batch.items():
        v = np.asarray(v)
        if v.shape[0] % local_data:
            raise ValueError(
                f"batch[{k!r}] has {v.shape[0]} rows, not divisible by the {local_data} data-parallel devices "
                "of this host; make the batch size (or token budget buckets) a multiple of it"
            )
        out[k] = jax.make_array_from_process_local_data(sharding, v)
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
    active = rules if mesh.shape[MODEL] > 1 else ()

    def one(path, leaf):
        shape = tuple(getattr(leaf, "shape", ()))
        return NamedSharding(mesh, spec_for(path_str(path), shape, mesh, active) if shape else P())

    return jax.tree_util.tree_map_with_path(one, tree)
