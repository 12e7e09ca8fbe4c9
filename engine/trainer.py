"""The training loop shared by every experiment: ``train_and_evaluate(config, workdir)``.

One jit-compiled train step (plus a variant that also returns attention statistics, run every
``train.stats_every`` steps); metrics stay on the device and are pulled every ``train.log_every`` steps.
Checkpoints (params, optimizer, step, RNG, data iterator) are written every ``train.checkpoint_every`` steps,
at the end, and on SIGTERM/SIGINT; a rerun with the same workdir resumes from the latest one.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from typing import Any, Callable, Mapping, Optional

import flax.nnx as nnx
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from jax.sharding import Mesh

import models
from engine import checkpoint as ckpt_lib
from engine import config as config_lib
from engine import evaluation
from engine import health as health_lib
from engine import logging as logging_lib
from engine import metrics as metrics_lib
from engine import optim
from engine import sharding as sharding_lib

log = logging.getLogger("attnlab")

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


class NonFiniteError(RuntimeError):
    """Raised when the loss or a gradient became NaN/Inf; the message names the step and the quantity."""


# ------------------------------------------------------------------------------------------------ model
def model_config(config: ml_collections.ConfigDict, vocab_size: int) -> models.TransformerConfig:
    """``config.model`` plus the vocabulary size from the tokenizer, as a ``TransformerConfig``."""
    d = config.model.to_dict()
    d["vocab_size"] = int(vocab_size)
    try:
        return models.TransformerConfig.from_dict(d)
    except ValueError as e:
        raise ValueError(f"config.model: {e}") from None


def create_model(cfg: models.TransformerConfig, task: str, rngs: nnx.Rngs) -> nnx.Module:
    return models.EncoderDecoder(cfg, rngs=rngs) if task == "translation" else models.DecoderOnly(cfg, rngs=rngs)


def forward(model: nnx.Module, batch: Mapping[str, jax.Array], task: str, *, deterministic: bool,
            return_stats: bool = False):
    """logits [B, T, V] (or (logits, stats)) for a translation or language-model batch."""
    if task == "translation":
        return model(
            batch["inputs"], batch["targets"],
            inputs_segmentation=batch["inputs_segmentation"], targets_segmentation=batch["targets_segmentation"],
            inputs_position=batch["inputs_position"], targets_position=batch["targets_position"],
            deterministic=deterministic, return_stats=return_stats,
        )
    return model(
        batch["inputs"], segmentation=batch.get("segmentation"), position=batch.get("position"),
        deterministic=deterministic, return_stats=return_stats,
    )


def target_weights(batch: Mapping[str, jax.Array], task: str) -> jax.Array:
    """Which target positions count in the loss: [B, T] float32."""
    if task == "translation":
        return (batch["targets_segmentation"] > 0).astype(jnp.float32)
    w = batch["loss_mask"].astype(jnp.float32)
    if "segmentation" in batch:
        w = w * (batch["segmentation"] > 0)
    return w


def batch_tokens(batch: Mapping[str, jax.Array], task: str) -> jax.Array:
    """Real (non-padding) tokens processed in a batch, for tokens/s."""
    if task == "translation":
        return jnp.sum(batch["inputs_segmentation"] > 0) + jnp.sum(batch["targets_segmentation"] > 0)
    if "segmentation" in batch:
        return jnp.sum(batch["segmentation"] > 0)
    return jnp.asarray(batch["inputs"].size)


def loss_terms(logits: jax.Array, batch: Mapping[str, jax.Array], task: str, label_smoothing: float) -> dict:
    """Sums over the batch: smoothed loss, NLL, weight (token count), correct argmax predictions, and
    sequences whose every weighted position is correct (``seq_correct`` of ``seq_count`` with any weight)."""
    w = target_weights(batch, task)
    loss_sum, weight_sum = models.cross_entropy(logits, batch["targets"], w, label_smoothing=label_smoothing)
    if label_smoothing > 0:
        nll_sum, _ = models.cross_entropy(logits, batch["targets"], w, label_smoothing=0.0)
    else:
        nll_sum = loss_sum
    hit = jnp.argmax(logits, axis=-1) == batch["targets"]
    counted = jnp.any(w > 0, axis=-1)
    seq_ok = jnp.all(hit | (w == 0), axis=-1) & counted
    return {"loss_sum": loss_sum, "nll_sum": nll_sum, "weight_sum": weight_sum, "correct": jnp.sum(hit * w),
            "seq_correct": jnp.sum(seq_ok), "seq_count": jnp.sum(counted)}


# ------------------------------------------------------------------------------------------------ state
@dataclasses.dataclass
class Setup:
    """Everything built once per run."""

    config: ml_collections.ConfigDict
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


def build(config: ml_collections.ConfigDict, mesh: Mesh, vocab_size: int) -> tuple[Setup, Callable[[], dict]]:
    """Model, optimizer and state shardings; returns (setup, init) where ``init()`` makes the initial
    (sharded) train state. Resuming skips ``init`` and restores onto ``abstract_state(setup)``."""
    cfg = model_config(config, vocab_size)
    task = config.task
    seed = int(config.seed)

    def init_model():
        return create_model(cfg, task, nnx.Rngs(params=seed, dropout=seed + 1))

    abstract = nnx.eval_shape(init_model)
    graphdef, abstract_params, _ = nnx.split(abstract, nnx.Param, ...)
    abstract_params = nnx.to_pure_dict(abstract_params)
    tx, schedule = optim.make_optimizer(config.train)
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
    setup = Setup(config, mesh, cfg, graphdef, rest, tx, schedule, state_sh, leaf_paths)
    return setup, jax.jit(init_state, out_shardings=state_sh)


def abstract_state(setup: Setup, init: Callable[[], dict]) -> dict:
    """ShapeDtypeStructs (with shardings) of the train state, for restoring a checkpoint."""
    shapes = jax.eval_shape(init)
    return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes,
                        setup.state_shardings)


# ------------------------------------------------------------------------------------------------ steps
def dropout_key(state_rng: jax.Array, step: jax.Array) -> jax.Array:
    """The dropout key of a train step: a function of the run's RNG and the step only (exact resumes)."""
    return jax.random.fold_in(jax.random.wrap_key_data(state_rng), step)


def seeded_rest(setup: Setup, params, rest, key: jax.Array):
    """The model's RNG streams reseeded from ``key``, as a pure dict (for ``nnx.merge`` under ``grad``)."""
    model = nnx.merge(setup.graphdef, params, rest)
    nnx.reseed(model, dropout=key)
    return nnx.to_pure_dict(nnx.split(model, nnx.Param, ...)[2])


def make_train_step(setup: Setup) -> Callable:
    """jit(train_step)(state, batch) -> (state, metrics); the state is donated.

    A non-finite loss or gradient norm leaves params and optimizer state unchanged and records the first bad
    step, the quantity and the parameters with non-finite gradients in the state (checked on the host when
    metrics are pulled).
    """
    task = setup.config.task
    smoothing = float(setup.config.train.label_smoothing)

    def train_step(state, batch, rest):
        step = state["step"]
        rest = seeded_rest(setup, state["params"], rest, dropout_key(state["rng"], step))

        def loss_fn(params):
            model = nnx.merge(setup.graphdef, params, rest)
            logits = forward(model, batch, task, deterministic=False)
            terms = loss_terms(logits, batch, task, smoothing)
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
        metrics = dict(terms, grad_norm=grad_norm, lr=setup.schedule(step), tokens=batch_tokens(batch, task))
        return new_state, metrics

    jitted = jax.jit(train_step, out_shardings=(setup.state_shardings, None), donate_argnums=(0,))
    return lambda state, batch: jitted(state, batch, setup.rest)


def make_stats_step(setup: Setup, *, deterministic: bool) -> Callable:
    """jit(stats_step)(state, batch) -> per-group attention summary ({group: {field: [L, H]}}).

    With ``deterministic=False`` it replays the forward pass of the train step at ``state["step"]`` (same
    params, batch and dropout masks), so the statistics are those of the training forward pass; running it
    as a separate forward-only program keeps the every-step train program free of statistics work and
    compiles in a fraction of the time of a second train-step variant.
    """
    task = setup.config.task

    def stats_step(state, batch, rest):
        if not deterministic:
            rest = seeded_rest(setup, state["params"], rest, dropout_key(state["rng"], state["step"]))
        model = nnx.merge(setup.graphdef, state["params"], rest)
        _, stats = forward(model, batch, task, deterministic=deterministic, return_stats=True)
        return metrics_lib.attention_summary(stats, metrics_lib.visible_keys(batch, task))

    jitted = jax.jit(stats_step)
    return lambda state, batch: jitted(state, batch, setup.rest)


def make_eval_step(setup: Setup) -> Callable:
    """jit(eval_step)(params, batch) -> sums of loss terms (deterministic forward)."""
    task = setup.config.task
    smoothing = float(setup.config.train.label_smoothing)

    def eval_step(params, batch):
        logits = forward(setup.model(params), batch, task, deterministic=True)
        return loss_terms(logits, batch, task, smoothing)

    return jax.jit(eval_step)


def non_finite_message(state_host: Mapping[str, np.ndarray], leaf_paths: list[str], last_good: Optional[int],
                       ckpt_dir: str) -> str:
    step = int(state_host["bad_step"])
    code = int(state_host["bad_code"])
    what = {1: "loss", 2: "gradient norm", 3: "loss and gradient norm"}.get(code, "loss/gradient")
    leaves = [p for p, bad in zip(leaf_paths, np.asarray(state_host["bad_leaves"])) if bad]
    shown = ", ".join(leaves[:8]) + (f" (+{len(leaves) - 8} more)" if len(leaves) > 8 else "")
    msg = f"non-finite {what} at step {step}"
    if leaves:
        msg += f"; parameters with NaN/Inf gradients: {shown}"
    if last_good is not None:
        msg += f". Training stopped; the last good checkpoint is step {last_good} in {ckpt_dir} (left intact)."
    else:
        msg += ". Training stopped before any checkpoint was written."
    return msg


# ------------------------------------------------------------------------------------------------ data
def build_data(config: ml_collections.ConfigDict, workdir: str):
    import data as data_lib

    kwargs = dict(seed=int(config.seed), process_index=jax.process_index(), process_count=jax.process_count())
    if config.task == "translation":
        return data_lib.build_translation(config.data, workdir=workdir, **kwargs)
    return data_lib.build_synthetic(config.data, **kwargs)


def pad_rows(batch: Mapping[str, np.ndarray], multiple: int) -> dict[str, np.ndarray]:
    """Append all-zero rows (padding: weight 0 everywhere) so the batch splits over ``multiple`` devices."""
    rows = next(iter(batch.values())).shape[0]
    extra = (-rows) % multiple
    if not extra:
        return dict(batch)
    return {k: np.concatenate([v, np.zeros((extra,) + v.shape[1:], v.dtype)]) for k, v in batch.items()}


def local_data_devices(mesh: Mesh) -> int:
    return max(mesh.devices.shape[0] // jax.process_count(), 1)


def to_device(batch: Mapping[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
    return sharding_lib.shard_batch(pad_rows(batch, local_data_devices(mesh)), mesh)


# ------------------------------------------------------------------------------------------------ loop
def _summary_to_host(summary) -> dict:
    return jax.tree.map(np.asarray, jax.device_get(summary))


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict:
    """Train (resuming from ``workdir`` when it holds checkpoints), evaluate, and return the final metrics."""
    from tqdm import tqdm

    from attention import available_backends

    t_start = time.time()
    config_lib.validate(config, jax.device_count(), available_backends())
    mesh = sharding_lib.make_mesh(config.mesh)
    os.makedirs(workdir, exist_ok=True)
    _save_config(config, workdir)
    lead = jax.process_index() == 0

    data = build_data(config, workdir)
    if hasattr(data, "describe"):
        log.info("%s", data.describe())
    setup, init = build(config, mesh, data.vocab_size)

    t = config.train
    ckpt = ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints"), max_to_keep=int(t.keep_checkpoints),
                                 async_save=bool(t.async_checkpoint))
    train_iter = data.train_iter()
    start_step = 0
    if ckpt.latest_step() is not None:
        state, data_state, start_step = ckpt.restore(abstract_state(setup, init))
        train_iter.set_state(data_state)
        log.info("resumed from %s at step %d", ckpt.directory, start_step)
    else:
        state = init()
    n_params = int(sum(np.prod(x.shape) for x in jax.tree.leaves(state["params"])))
    log.info("model: %s, %.2fM parameters; mesh %s", type(setup.model(state["params"])).__name__, n_params / 1e6,
             dict(mesh.shape))

    logger = logging_lib.MetricLogger(workdir, config, process_index=jax.process_index(),
                                      run_name=os.path.basename(os.path.abspath(workdir)))
    logger.log_event(start_step, "start", params=n_params, mesh=dict(mesh.shape), resumed=start_step > 0,
                     wandb_mode=logger.mode, data_stats=_jsonable(getattr(data, "stats", {})))
    logger.summary({"params": n_params})
    monitor = health_lib.HealthMonitor(config.health)
    peak = float(t.peak_flops) or metrics_lib.measure_peak_flops(mesh, config.model.dtype)
    train_step = make_train_step(setup)
    stats_step = make_stats_step(setup, deterministic=False)
    eval_step = make_eval_step(setup)
    evaluator = evaluation.Evaluator(setup, data, eval_step, logger, workdir)
    flops_cache: dict[tuple, float] = {}

    def step_flops(batch) -> float:
        key = tuple((k, v.shape) for k, v in sorted(batch.items()))
        if key not in flops_cache:
            abstract_params = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state["params"])
            abstract_batch = {k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in batch.items()}
            fwd = lambda p, b: forward(setup.model(p), b, config.task, deterministic=True)  # noqa: E731
            flops_cache[key] = 3.0 * metrics_lib.forward_flops(fwd, abstract_params, abstract_batch)
        return flops_cache[key]

    num_steps = int(t.num_steps)
    deadline = t_start + 60.0 * float(t.max_minutes) if t.max_minutes > 0 else None
    pending: list[dict] = []
    pending_stats: list[tuple[int, Any]] = []
    interval = {"t0": None, "flops": 0.0, "steps": 0}
    step = start_step
    stop_reason = "num_steps"
    final: dict = {}
    bar = tqdm(total=num_steps, initial=start_step, disable=not lead, dynamic_ncols=True, desc="train")

    def flush(step: int) -> None:
        """Pull pending metrics to the host, check the NaN guard, log, run the health monitor."""
        nonlocal pending, pending_stats
        host_state = jax.device_get({k: state[k] for k in ("bad_step", "bad_code", "bad_leaves")})
        if int(host_state["bad_step"]) >= 0:
            raise NonFiniteError(non_finite_message(host_state, setup.leaf_paths, ckpt.latest_step(), ckpt.directory))
        if pending:
            ms = jax.device_get(pending)
            now = time.time()
            agg = {k: float(sum(float(m[k]) for m in ms)) for k in ("loss_sum", "nll_sum", "weight_sum", "tokens",
                                                                      "correct")}
            w = max(agg["weight_sum"], 1.0)
            out = {
                "train/loss": agg["loss_sum"] / w,
                "train/nll": agg["nll_sum"] / w,
                "train/perplexity": math.exp(min(agg["nll_sum"] / w, 50.0)),
                "train/accuracy": agg["correct"] / w,
                "train/grad_norm": float(np.mean([float(m["grad_norm"]) for m in ms])),
                "train/learning_rate": float(ms[-1]["lr"]),
            }
            if interval["t0"] is not None and interval["steps"]:
                dt = now - interval["t0"]
                out["perf/tokens_per_sec"] = agg["tokens"] / dt
                out["perf/steps_per_sec"] = interval["steps"] / dt
                out["perf/mfu"] = interval["flops"] / dt / peak
            logger.log(step, out)
            postfix = dict(loss=f"{out['train/loss']:.3f}", tok_s=f"{out.get('perf/tokens_per_sec', 0.0):.0f}")
            if deadline is not None:
                postfix["left"] = time.strftime("%M:%S", time.gmtime(max(deadline - now, 0.0)))
                if "perf/steps_per_sec" in out:  # the bar's total: the step the time budget will end at
                    bar.total = min(num_steps, step + int(max(deadline - now, 0.0) * out["perf/steps_per_sec"]))
            bar.set_postfix(postfix, refresh=False)
            final.update(out)
            pending = []
            interval.update(t0=now, flops=0.0, steps=0)
        for s_step, summary in pending_stats:
            # Logged at the current step (W&B steps only go forward); attn/step is the step they describe.
            host = _summary_to_host(summary)
            flat = metrics_lib.flatten_summary(host)
            warnings = monitor.update(s_step, host)
            for wmsg in warnings:
                log.warning("health: %s", wmsg.message())
                logger.log_event(step, "health_warning", kind=wmsg.kind, group=wmsg.group, layer=wmsg.layer,
                                 head=wmsg.head, value=wmsg.value, threshold=wmsg.threshold, message=wmsg.message(),
                                 at_step=s_step)
            flat.update({f"health/{k}": v for k, v in monitor.active_counts().items()})
            flat["health/new_warnings"] = len(warnings)
            flat["attn/step"] = s_step
            logger.log(step, flat)
        pending_stats = []

    def save(step: int) -> None:
        flush(step)
        ckpt.save(step, state, train_iter.get_state())

    try:
        with ckpt_lib.StopRequest() as stop:
            while step < num_steps:
                batch_np = next(train_iter)
                batch = to_device(batch_np, mesh)
                use_stats = t.stats_every > 0 and (step % t.stats_every == 0 or step + 1 == num_steps)
                if use_stats:  # the statistics of this step's training forward pass (before the update)
                    pending_stats.append((step, stats_step(state, batch)))
                state, metrics = train_step(state, batch)
                if interval["t0"] is not None:
                    interval["flops"] += step_flops(batch)
                    interval["steps"] += 1
                pending.append(metrics)
                step += 1
                bar.update(1)
                if interval["t0"] is None:  # after the first (compiling) step: start the throughput clock.
                    jax.block_until_ready(metrics)
                    interval["t0"] = time.time()
                if step % t.log_every == 0 or step == num_steps:
                    flush(step)
                if t.checkpoint_every and step % t.checkpoint_every == 0:
                    save(step)
                if t.eval_every and step % t.eval_every == 0 and step < num_steps:
                    flush(step)
                    final.update(evaluator.evaluate(state["params"], step, final=False))
                    interval["t0"] = time.time()
                if jax.process_count() == 1 or step % t.log_every == 0:  # multi-host: agree at log steps
                    reason = stop.check(deadline)
                    if reason is not None:
                        stop_reason = reason
                        break
            save(step)
        bar.close()
        ckpt.wait()
        log.info("training stopped at step %d (%s) after %.1f min", step, stop_reason, (time.time() - t_start) / 60)
        logger.log_event(step, "train_end", reason=stop_reason, minutes=(time.time() - t_start) / 60)
        if stop_reason in ("num_steps", "max_minutes") and config.eval.at_end:
            final.update(evaluator.evaluate(state["params"], step, final=True))
        final.update({"step": step, "stop_reason": stop_reason, "wall_minutes": (time.time() - t_start) / 60,
                      "params": n_params, "peak_flops": peak})
        logger.summary({k: v for k, v in final.items() if isinstance(v, (int, float, str))})
        logger.log_event(step, "final", **{k: v for k, v in final.items()
                                           if isinstance(v, (int, float, str)) and k != "step"})
        return final
    finally:
        bar.close()
        ckpt.close()
        logger.close()


def _jsonable(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return _jsonable(dataclasses.asdict(x))
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.integer, np.floating)):
        return x.item()
    return x if isinstance(x, (int, float, str, bool)) or x is None else str(x)


def _save_config(config: ml_collections.ConfigDict, workdir: str) -> None:
    if jax.process_index() != 0:
        return
    with open(os.path.join(workdir, "config.json"), "w") as f:
        f.write(config.to_json_best_effort(indent=1, sort_keys=True))


# ------------------------------------------------------------------------------------------------ eval.py
def evaluate_checkpoint(config: ml_collections.ConfigDict, workdir: str, *, step: Optional[int] = None,
                        split: Optional[str] = None, heatmap_examples: tuple[int, ...] = (),
                        stats_batches: int = 8) -> dict:
    """Restore a checkpoint of ``workdir`` and evaluate it on ``split`` (default ``config.eval.split``; synthetic
    tasks have one evaluation set, reported as "validation").

    Writes ``<workdir>/eval/<split>_step<N>/`` (hypotheses, results.json, entropy tables, heatmaps) and
    returns the results: loss/perplexity, BLEU/chrF with signatures (translation), and per-layer,
    per-head attention summaries averaged over ``stats_batches`` batches of the split.
    """
    import json

    from attention import available_backends

    config_lib.validate(config, jax.device_count(), available_backends())
    mesh = sharding_lib.make_mesh(config.mesh)
    split = split or (config.eval.split if config.task == "translation" else "validation")
    data = build_data(config, workdir)
    if hasattr(data, "describe"):
        log.info("%s", data.describe())
    setup, init = build(config, mesh, data.vocab_size)
    ckpt = ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints"), async_save=False)
    try:
        state, _, step = ckpt.restore(abstract_state(setup, init), step)
    finally:
        ckpt.close()
    params = state["params"]
    out_dir = os.path.join(workdir, "eval", f"{split}_step{step}")
    os.makedirs(out_dir, exist_ok=True)
    logger = logging_lib.MetricLogger(out_dir, config, process_index=jax.process_index(),
                                      run_name=os.path.basename(os.path.abspath(workdir)) + "-eval",
                                      job_type="eval")
    try:
        evaluator = evaluation.Evaluator(setup, data, make_eval_step(setup), logger, out_dir)
        results: dict[str, Any] = {"step": step, "split": split}
        results.update(evaluator.loss_metrics(params, split))
        if config.task == "translation":
            r = evaluator.bleu(params, split, step)
            results.update({f"{split}/bleu": r["bleu"], f"{split}/chrf": r["chrf"],
                            "bleu_signature": r["bleu_signature"], "chrf_signature": r["chrf_signature"],
                            "hypotheses_path": r.get("hypotheses_path"), "sentences": r["num_sentences"]})
            logger.log_table(step, f"{split}/samples", ["source", "reference", "hypothesis"], r["samples"])
        stats_step = make_stats_step(setup, deterministic=True)
        batches = data.eval_batches(split) if config.task == "translation" else data.eval_batches()
        summaries = [_summary_to_host(stats_step(state, to_device(b, mesh))) for b in list(batches)[:stats_batches]]
        summary = jax.tree.map(lambda *xs: np.mean(np.stack(xs), axis=0), *summaries)
        tables = "\n\n".join(metrics_lib.format_table(summary, f) for f in metrics_lib.FIELDS)
        with open(os.path.join(out_dir, "attention.txt"), "w") as f:
            f.write(tables + "\n")
        results["attention"] = jax.tree.map(lambda a: np.round(a, 5).tolist(), summary)
        flat = metrics_lib.flatten_summary(summary)
        logger.log(step, {k: v for k, v in results.items() if isinstance(v, float)} | flat)
        if config.task == "translation" and heatmap_examples:
            images = evaluator.heatmaps(params, step, split, indices=heatmap_examples)
            logger.log_images(step, images)
            results["heatmaps"] = sorted(images.values())
        with open(os.path.join(out_dir, "results.json"), "w") as f:
            json.dump(results, f, indent=1)
        results["tables"] = tables
        results["out_dir"] = out_dir
        return results
    finally:
        logger.close()
