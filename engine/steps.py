"""The jit-compiled programs of a run: the train step, the attention-statistics step and the eval step, plus
moving host batches onto the mesh.

The train step's NaN guard lives in the train state (no host sync per step): a non-finite loss or gradient
norm leaves params and optimizer state unchanged and records the first bad step, the quantity and the
parameters with non-finite gradients; the loop checks it whenever it pulls metrics.
"""
from __future__ import annotations

from typing import Callable, Mapping, Optional

import flax.nnx as nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh

from engine import metrics as metrics_lib
from engine import sharding as sharding_lib
from engine.state import Setup


def dropout_key(state_rng: jax.Array, step: jax.Array) -> jax.Array:
    """The dropout key of a train step: a function of the run's RNG and the step only (exact resumes)."""
    return jax.random.fold_in(jax.random.wrap_key_data(state_rng), step)


def seeded_rest(setup: Setup, params, rest, key: jax.Array):
    """The model's RNG streams reseeded from ``key``, as a pure dict (for ``nnx.merge`` under ``grad``)."""
    model = nnx.merge(setup.graphdef, params, rest)
    nnx.reseed(model, dropout=key)
    return nnx.to_pure_dict(nnx.split(model, nnx.Param, ...)[2])


def in_order(fn: Callable) -> Callable:
    """``fn`` (a jitted step over the whole mesh), finished before it returns when several CPU processes run it.

    XLA:CPU runs a program on a device as soon as its inputs are ready, so two programs that do not depend on each
    other (two evaluation batches with the same parameters, the statistics and the train step of one state) can
    run at once and in either order; their all-reduces then reach gloo in different orders on different devices
    and every process waits forever (the multi-host hang of issue 44). Waiting for each step keeps every device's
    collectives in program order. GPUs and TPUs run one device's programs in order, and a single process needs no
    cross-process order, so there ``fn`` is returned as it is."""
    if jax.process_count() == 1 or jax.default_backend() != "cpu":
        return fn

    def ordered(*args):
        return jax.block_until_ready(fn(*args))

    return ordered


def make_train_step(setup: Setup) -> Callable:
    """jit(train_step)(state, batch) -> (state, metrics); the state is donated."""
    task = setup.task
    smoothing = float(setup.config.train.label_smoothing)

    def train_step(state, batch, rest):
        step = state["step"]
        rest = seeded_rest(setup, state["params"], rest, dropout_key(state["rng"], step))

        def loss_fn(params):
            model = nnx.merge(setup.graphdef, params, rest)
            logits = task.forward(model, batch, deterministic=False)
            terms = task.loss_terms(logits, batch, smoothing)
            return terms["loss_sum"] / jnp.maximum(terms["weight_sum"], 1.0), terms

        (loss, terms), grads = jax.value_and_grad(loss_fn, has_aux=True)(state["params"])
        grad_norm = optax.tree.norm(grads)
        loss_ok = jnp.isfinite(loss)
        grad_ok = jnp.isfinite(grad_norm)
        ok = loss_ok & grad_ok
        updates, opt_state = setup.tx.update(grads, state["opt_state"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        keep = lambda new, old: jax.tree.map(lambda n, o: jnp.where(ok, n, o), new, old)  # noqa: E731
        first_bad = (state["bad_step"] < 0) & ~ok
        leaf_bad = jnp.stack([~jnp.all(jnp.isfinite(g)) for g in jax.tree.leaves(grads)])
        new_state = {
            "params": keep(params, state["params"]),
            "opt_state": keep(opt_state, state["opt_state"]),
            "step": step + 1,
            "rng": state["rng"],
            "bad_step": jnp.where(first_bad, step, state["bad_step"]),
            "bad_code": jnp.where(first_bad, (~loss_ok).astype(jnp.int32) + 2 * (~grad_ok).astype(jnp.int32),
                                  state["bad_code"]),
            "bad_leaves": jnp.where(first_bad, leaf_bad, state["bad_leaves"]),
        }
        metrics = dict(terms, grad_norm=grad_norm, lr=setup.schedule(step), tokens=task.tokens(batch))
        return new_state, metrics

    jitted = in_order(jax.jit(train_step, out_shardings=(setup.state_shardings, None), donate_argnums=(0,)))
    return lambda state, batch: jitted(state, batch, setup.rest)


def make_stats_step(setup: Setup, *, deterministic: bool) -> Callable:
    """jit(stats_step)(state, batch) -> per-group attention summary ({group: {field: [L, H]}}).

    With ``deterministic=False`` it replays the forward pass of the train step at ``state["step"]`` (same
    params, batch and dropout masks), so the statistics are those of the training forward pass; a separate
    forward-only program keeps the every-step train program free of statistics work.
    """
    task = setup.task

    def stats_step(state, batch, rest):
        if not deterministic:
            rest = seeded_rest(setup, state["params"], rest, dropout_key(state["rng"], state["step"]))
        model = nnx.merge(setup.graphdef, state["params"], rest)
        _, stats = task.forward(model, batch, deterministic=deterministic, return_stats=True)
        return metrics_lib.attention_summary(stats, task.visible_keys(batch))

    jitted = in_order(jax.jit(stats_step))
    return lambda state, batch: jitted(state, batch, setup.rest)


def make_eval_step(setup: Setup, *, per_position: bool = False) -> Callable:
    """jit(eval_step)(params, batch) -> sums of loss terms (deterministic forward); with ``per_position``
    also ``position_nll`` / ``position_count`` [T]: the NLL summed per sequence position over every target
    the task counts as real (``Task.real_targets``)."""
    task = setup.task
    smoothing = float(setup.config.train.label_smoothing)

    def eval_step(params, batch):
        logits = task.forward(setup.model(params), batch, deterministic=True)
        terms = task.loss_terms(logits, batch, smoothing, weights=task.eval_weights(batch))
        if per_position:
            nll = task.token_nll(logits, batch)  # [B, T]
            real = task.real_targets(batch)
            terms["position_nll"] = jnp.sum(nll * real, axis=0)
            terms["position_count"] = jnp.sum(real, axis=0)
        return terms

    return in_order(jax.jit(eval_step))


def non_finite_message(state_host: Mapping[str, np.ndarray], leaf_paths: list[str], last_good: Optional[int],
                       ckpt_dir: Optional[str]) -> str:
    step = int(state_host["bad_step"])
    code = int(state_host["bad_code"])
    what = {1: "loss", 2: "gradient norm", 3: "loss and gradient norm"}.get(code, "loss/gradient")
    leaves = [p for p, bad in zip(leaf_paths, np.asarray(state_host["bad_leaves"])) if bad]
    shown = ", ".join(leaves[:8]) + (f" (+{len(leaves) - 8} more)" if len(leaves) > 8 else "")
    msg = f"non-finite {what} at step {step}"
    if leaves:
        msg += f"; parameters with NaN/Inf gradients: {shown}"
    if ckpt_dir is None:
        msg += ". Training stopped (no workdir: nothing was written)."
    elif last_good is not None:
        msg += f". Training stopped; the last good checkpoint is step {last_good} in {ckpt_dir} (left intact)."
    else:
        msg += ". Training stopped before any checkpoint was written."
    return msg


def pad_rows(batch: Mapping[str, np.ndarray], multiple: int) -> dict[str, np.ndarray]:
    """Append all-zero rows (padding: weight 0 everywhere) so the batch splits over ``multiple`` devices."""
    rows = next(iter(batch.values())).shape[0]
    extra = (-rows) % multiple
    if not extra:
        return dict(batch)
    return {k: np.concatenate([v, np.zeros((extra,) + v.shape[1:], v.dtype)]) for k, v in batch.items()}


def local_data_devices(mesh: Mesh) -> int:
    return max(mesh.devices.shape[0] // jax.process_count(), 1)


def to_device(batch: Mapping[str, np.ndarray], mesh: Mesh, layout: str = "natural") -> dict[str, jax.Array]:
    """A host batch -> global arrays on ``mesh`` (rows padded to the data axis; ``layout``:
    ``config.mesh.context_layout``, see ``engine.sharding.shard_batch``)."""
    return sharding_lib.shard_batch(pad_rows(batch, local_data_devices(mesh)), mesh, layout)
