"""What a run builds once: the model (through its task), the optimizer, the train state and its shardings.

The train state is a dict ``{params, opt_state, step, rng, bad_step, bad_code, bad_leaves}``; the last three
are the NaN guard's record (see ``engine.steps``). ``build`` returns a ``Setup`` and an ``init`` function;
a resumed run skips ``init`` and restores onto ``abstract_state(setup, init)``.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, Callable, Optional

import flax.nnx as nnx
import jax
import jax.numpy as jnp
import ml_collections
import optax
from jax.sharding import Mesh

import models
from engine import optim
from engine import sharding as sharding_lib
from engine.errors import ConfigError

# Sharding of the model axis when config.mesh.model > 1: attention projections split along heads, the MLP
# along its hidden dimension, everything else replicated. Matched against "/"-joined parameter paths.
DEFAULT_RULES = (
    (r"(query|key|value)/kernel$", (None, "model", None)),  # [d_model, H, D]
    (r"(query|key|value)/bias$", ("model", None)),  # [H, D]
    (r"attention/out/kernel$", ("model", None, None)),  # [H, Dv, d_model]
    (r"mlp/wi/kernel$", (None, "model")),  # [d_model, d_ff]
    (r"mlp/wi/bias$", ("model",)),  # [d_ff]
    (r"mlp/wo/kernel$", ("model", None)),  # [d_ff, d_model]
)


def model_config(config: ml_collections.ConfigDict, vocab_size: int,
                 validated: Optional[models.TransformerConfig] = None) -> models.TransformerConfig:
    """``config.model`` plus the vocabulary size from the data, as a ``TransformerConfig``.

    validated: the config ``engine.config.validate`` built from ``config.model``; given, it gets the vocabulary
    size bound (``TransformerConfig.bind``) instead of a second construction and validation."""
    try:
        if validated is not None:
            return validated.bind(vocab_size=int(vocab_size))
        return models.TransformerConfig.from_dict(dict(config.model.to_dict(), vocab_size=int(vocab_size)))
    except ValueError as e:
        raise ConfigError(f"config.model: {e}") from None


def frozen_mask(params: Any, pattern: str) -> Any:
    """A tree of bools like ``params``: True where the "/"-joined parameter path matches ``pattern``."""
    regex = re.compile(pattern)
    return jax.tree_util.tree_map_with_path(
        lambda path, _: bool(regex.search(sharding_lib.path_str(path))), params)


def make_optimizer(t: ml_collections.ConfigDict, abstract_params: Any) -> tuple[optax.GradientTransformation,
                                                                                 optax.Schedule]:
    """``engine.optim.make_optimizer`` with the parameters matching ``train.freeze`` (a regex) left unchanged
    (zero updates, no optimizer state, no weight decay)."""
    tx, schedule = optim.make_optimizer(t)
    if t.freeze:
        mask = frozen_mask(abstract_params, t.freeze)
        if not any(jax.tree.leaves(mask)):
            paths = [sharding_lib.path_str(p) for p, _ in jax.tree_util.tree_flatten_with_path(abstract_params)[0]]
            raise ConfigError(f"config.train.freeze={t.freeze!r} matches no parameter; parameter paths look like "
                              f"{paths[:4]}")
        labels = jax.tree.map(lambda frozen: "frozen" if frozen else "trained", mask)
        tx = optax.multi_transform({"trained": tx, "frozen": optax.set_to_zero()}, labels)
    return tx, schedule


def ring_options(mesh: Mesh) -> dict[str, Any]:
    """The ``ring`` backend's options on the run's mesh: the sequence over ``context``, the batch over ``data``
    and the heads over ``model`` (as the parameter rules shard them)."""
    return {"mesh": mesh, "axis": sharding_lib.CONTEXT, "batch_axis": sharding_lib.DATA,
            "head_axis": sharding_lib.MODEL if mesh.shape[sharding_lib.MODEL] > 1 else None}


@dataclasses.dataclass
class Setup:
    """Everything built once per run."""

    config: ml_collections.ConfigDict
    task: Any  # engine.tasks.Task
    mesh: Mesh
    model_cfg: models.TransformerConfig
    graphdef: Any
    rest: Any  # non-parameter model state (RNG streams), replaced per step
    tx: optax.GradientTransformation
    schedule: optax.Schedule
    state_shardings: Any
    leaf_paths: list[str]

    def model(self, params) -> nnx.Module:
        return nnx.merge(self.graphdef, params, self.rest)

    @property
    def layout(self) -> str:
        """How batches meet the context axis: ``config.mesh.context_layout`` ("natural" or "zigzag")."""
        return self.config.mesh.get("context_layout", "natural")


def build(config: ml_collections.ConfigDict, task, mesh: Mesh, vocab_size: int,
          model_cfg: Optional[models.TransformerConfig] = None) -> tuple[Setup, Callable[[], dict]]:
    """Model, optimizer and state shardings; returns (setup, init) where ``init()`` makes the initial
    (sharded) train state. model_cfg: what ``engine.config.validate`` returned for ``config`` (default: built
    from ``config.model`` here)."""
    cfg = model_config(config, vocab_size, model_cfg)
    if cfg.attention_impl == "ring" and sharding_lib.context_size(mesh) > 1:
        cfg = cfg.bind(attention_options=dict(cfg.attention_options, **ring_options(mesh)))
    seed = int(config.seed)

    def init_model():
        return task.create_model(cfg, nnx.Rngs(params=seed, dropout=seed + 1))

    abstract = nnx.eval_shape(init_model)
    graphdef, abstract_params, _ = nnx.split(abstract, nnx.Param, ...)
    abstract_params = nnx.to_pure_dict(abstract_params)
    tx, schedule = make_optimizer(config.train, abstract_params)
    rules = tuple(tuple(r) for r in config.mesh.rules) + DEFAULT_RULES
    param_sh = sharding_lib.tree_shardings(abstract_params, mesh, rules)
    opt_sh = sharding_lib.tree_shardings(jax.eval_shape(tx.init, abstract_params), mesh, rules)
    rep = sharding_lib.replicated(mesh)
    leaf_paths = [sharding_lib.path_str(p) for p, _ in jax.tree_util.tree_flatten_with_path(abstract_params)[0]]
    state_sh = {
        "params": param_sh, "opt_state": opt_sh, "step": rep, "rng": rep,
        "bad_step": rep, "bad_code": rep, "bad_leaves": rep,
    }

    def init_state():
        _, params, _ = nnx.split(init_model(), nnx.Param, ...)
        params = nnx.to_pure_dict(params)
        return {
            "params": params,
            "opt_state": tx.init(params),
            "step": jnp.zeros((), jnp.int32),
            "rng": jax.random.key_data(jax.random.key(seed + 2)),
            "bad_step": jnp.full((), -1, jnp.int32),
            "bad_code": jnp.zeros((), jnp.int32),
            "bad_leaves": jnp.zeros((len(leaf_paths),), jnp.bool_),
        }

    def init_rest():  # the dropout RNG streams (reseeded every step); XLA drops the unused parameter init.
        return nnx.split(init_model(), nnx.Param, ...)[2]

    rest = jax.jit(init_rest, out_shardings=rep)()
    setup = Setup(config, task, mesh, cfg, graphdef, rest, tx, schedule, state_sh, leaf_paths)
    return setup, jax.jit(init_state, out_shardings=state_sh)


def admin_params(setup: Setup, params: Any, batch: Mapping[str, jax.Array]) -> Any:
    """``params`` with every Admin residual scale set from one deterministic forward pass on ``batch`` (a device
    batch of the whole mesh, so every process computes the same scales); see ``models.admin_initialize``."""

    def profile(params, batch):
        model = setup.model(params)
        models.admin_initialize(model, lambda m: setup.task.forward(m, batch, deterministic=True))
        return nnx.to_pure_dict(nnx.split(model, nnx.Param, ...)[1])

    return jax.jit(profile, out_shardings=setup.state_shardings["params"])(params, batch)


def abstract_state(setup: Setup, init: Callable[[], dict]) -> dict:
    """ShapeDtypeStructs (with shardings) of the train state, for restoring a checkpoint."""
    shapes = jax.eval_shape(init)
    return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes,
                        setup.state_shardings)


def reference_graphdef(setup: Setup, implementation: str = "reference") -> Any:
    """The graph of the same model on another attention backend (default ``reference``: full weights in its
    statistics), to merge with the run's parameters for heatmaps, the explorer and the doctor."""
    cfg = setup.model_cfg.bind(attention_impl=implementation, attention_options={})
    abstract = nnx.eval_shape(lambda: setup.task.create_model(cfg, nnx.Rngs(params=0, dropout=1)))
    return nnx.split(abstract, nnx.Param, ...)[0]


def flops_forward(setup: Setup) -> Callable:
    """``fwd(params, batch) -> logits`` of the model on the ``xla`` backend, for counting model FLOPs: XLA's
    cost analysis counts nothing inside Pallas or cuDNN kernels (it reports -1), so MFU is computed from the
    same model with plain XLA attention."""
    graphdef = reference_graphdef(setup, "xla")
    return lambda params, batch: setup.task.forward(nnx.merge(graphdef, params, setup.rest), batch,
                                                    deterministic=True)
