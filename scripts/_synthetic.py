"""A small in-process training loop for the reproductions on synthetic tasks.

It trains ``models.DecoderOnly`` on ``data.build_synthetic`` batches with the engine's optimizer and schedule
(``engine.optim``), the engine's per-layer/per-head attention summary (``engine.metrics``) and the engine's
health monitor (``engine.health``), recording attention statistics at every logged step. It is what
``train.py`` does for ``task="lm"`` minus checkpoints, sharding and W&B, so that a reproduction can train
dozens of tiny models in minutes on a CPU and read any quantity it needs along the way.
"""
from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from typing import Any, Callable, Optional

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

import flax.nnx as nnx
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

import data as data_lib
import models
from engine import config as config_lib
from engine import health as health_lib
from engine import metrics as metrics_lib
from engine import optim


@dataclasses.dataclass(frozen=True)
class Task:
    """A synthetic task of ``data.build_synthetic``: its name and sizes."""

    name: str  # "mqar" or "induction"
    vocab_size: int
    seq_len: int
    batch_size: int
    num_pairs: int = 0  # mqar: key-value pairs per sequence
    segment_len: int = 0  # induction: length of the repeated segment
    layout: str = "segment"  # induction: "segment" or "repeat" (see data/synthetic.py)

    def data_config(self, num_eval_batches: int = 8) -> ml_collections.ConfigDict:
        """The ``config.data`` that ``data.build_synthetic`` takes for this task."""
        c = data_lib.default_synthetic_config()
        c.task = self.name
        c.vocab_size = self.vocab_size
        c.seq_len = self.seq_len
        c.batch_size = self.batch_size
        c.batch_multiple = 1  # this loop runs on one device
        c.num_eval_batches = num_eval_batches
        if self.name == "mqar":
            c.mqar_num_kv_pairs = self.num_pairs
        if self.name == "induction":
            c.induction_segment_len = self.segment_len
            c.induction_layout = self.layout
        return c


def mqar_task(*, num_pairs: int, seq_len: int, vocab_size: int, batch_size: int) -> Task:
    """Multi-query associative recall with ``num_pairs`` key-value pairs per sequence."""
    return Task("mqar", vocab_size=vocab_size, seq_len=seq_len, batch_size=batch_size, num_pairs=num_pairs)


def induction_task(*, seq_len: int, vocab_size: int, batch_size: int, segment_len: int,
                   layout: str = "segment") -> Task:
    """The induction-head task: layout "segment" = random tokens with one segment of ``segment_len`` tokens
    repeated later; "repeat" = a block of ``segment_len // 2 .. segment_len`` random tokens tiled."""
    return Task("induction", vocab_size=vocab_size, seq_len=seq_len, batch_size=batch_size, segment_len=segment_len,
                layout=layout)


def tiny_model_config(*, vocab_size: int, d_model: int, num_heads: int, num_layers: int, max_len: int,
                      qk_dim: Optional[int] = None, v_dim: Optional[int] = None, d_ff: Optional[int] = None,
                      attention_scale: Optional[float] = None, qk_layernorm: bool = False,
                      position: str = "learned") -> dict[str, Any]:
    """``TransformerConfig`` fields of a small pre-LN decoder without dropout."""
    return dict(
        vocab_size=vocab_size, d_model=d_model, num_heads=num_heads, qk_dim=qk_dim, v_dim=v_dim,
        d_ff=d_ff or 4 * d_model, num_encoder_layers=0, num_decoder_layers=num_layers, dropout_rate=0.0,
        attention_dropout_rate=0.0, norm="pre", position=position, max_len=max_len,
        attention_scale=attention_scale, qk_layernorm=qk_layernorm, attention_impl="xla",
    )


def train_config(*, learning_rate: float, steps: int, warmup_steps: int, schedule: str = "cosine",
                 weight_decay: float = 0.0, grad_clip_norm: float = 0.0) -> ml_collections.ConfigDict:
    """``config.train`` for ``engine.optim.make_optimizer``: AdamW (0.9, 0.95, 1e-8) with the given schedule."""
    t = config_lib.base_config().train
    t.optimizer = "adamw"
    t.schedule = schedule
    t.learning_rate = float(learning_rate)
    t.warmup_steps = int(warmup_steps)
    t.num_steps = int(steps)
    t.b2 = 0.95
    t.eps = 1e-8
    t.weight_decay = float(weight_decay)
    t.grad_clip_norm = float(grad_clip_norm)
    t.final_lr_fraction = 0.1
    return t


def _mlp_mask(params) -> Any:
    """True for every parameter of an MLP block (path contains 'mlp')."""
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    marks = {jax.tree_util.keystr(p): "mlp" in jax.tree_util.keystr(p) for p, _ in flat}
    return jax.tree_util.tree_map_with_path(lambda p, _: marks[jax.tree_util.keystr(p)], params)


def train_decoder(
    model_cfg: dict[str, Any],
    task: Task,
    *,
    steps: int,
    learning_rate: float,
    seed: int = 0,
    log_every: int = 10,
    warmup_steps: Optional[int] = None,
    schedule: str = "cosine",
    attention_only: bool = False,
    eval_batches: int = 4,
    health: Optional[ml_collections.ConfigDict] = None,
    on_log: Optional[Callable[[int, dict], None]] = None,
    position_loss_every: int = 0,
    train_on_all_targets: bool = False,
) -> dict[str, Any]:
    """Train a ``DecoderOnly`` on a synthetic task and return its history.

    model_cfg: ``TransformerConfig`` fields (see ``tiny_model_config``); task: the synthetic task (its
    ``vocab_size`` must fit the model's). attention_only: the MLP blocks are
    zeroed and frozen, leaving an attention-only model (Elhage et al. 2021). health: ``config.health`` for the
    engine's monitor (default: ``engine.config.base_config().health``). eval_batches: size of the task's fixed
    evaluation set. position_loss_every: every that many steps also record the held-out loss per sequence
    position over every non-PAD target (``position_loss``, [T]). train_on_all_targets: the training loss
    covers every non-PAD target (language modelling) instead of the task's ``loss_mask``; evaluation still
    uses the mask.

    Returns dict of lists over logged steps: ``step``, ``loss`` (mean over the interval), ``lr``,
    ``grad_norm``, ``entropy`` / ``norm_entropy`` / ``max_logit`` ([L, H] each, at that step), plus
    ``warnings`` (engine HealthWarnings), ``diverged_step`` (first step with a non-finite loss, else None;
    training stops there), ``eval_loss`` / ``eval_accuracy`` (held-out batches at the end; NaN if diverged),
    ``params`` and ``seconds``.
    """
    start = time.time()
    cfg = models.TransformerConfig.from_dict(model_cfg)
    model = models.DecoderOnly(cfg, rngs=nnx.Rngs(params=seed, dropout=seed + 1))
    if attention_only:
        for path, value in nnx.iter_graph(model):
            if "mlp" in [str(p) for p in path] and isinstance(value, nnx.Param):
                value[...] = jnp.zeros_like(value[...])
    tcfg = train_config(learning_rate=learning_rate, steps=steps,
                        warmup_steps=warmup_steps if warmup_steps is not None else max(1, steps // 10),
                        schedule=schedule)
    tx, lr_schedule = optim.make_optimizer(tcfg)
    if attention_only:
        tx = optax.chain(optax.masked(optax.set_to_zero(), _mlp_mask), tx)
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    monitor = health_lib.HealthMonitor(health or config_lib.base_config().health)

    def loss_fn(model, batch, return_stats):
        out = model(batch["inputs"], deterministic=True, return_stats=return_stats)
        logits, stats = out if return_stats else (out, None)
        if train_on_all_targets:
            weights = (batch["targets"] != data_lib.PAD_ID).astype(jnp.float32)
        else:
            weights = batch["loss_mask"].astype(jnp.float32)
        loss_sum, weight_sum = models.cross_entropy(logits, batch["targets"], weights)
        return loss_sum / jnp.maximum(weight_sum, 1.0), (logits, stats)

    @nnx.jit
    def train_step(model, optimizer, batch):
        (loss, (_, stats)), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model, batch, True)
        optimizer.update(model, grads)
        summary = metrics_lib.attention_summary(stats, metrics_lib.visible_keys(batch, "lm"))
        return loss, optax.tree.norm(grads), summary

    @nnx.jit
    def eval_step(model, batch):
        logits = model(batch["inputs"], deterministic=True)
        logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
        nll = -jnp.take_along_axis(logp, batch["targets"][..., None].astype(jnp.int32), axis=-1)[..., 0]
        correct = (jnp.argmax(logits, axis=-1) == batch["targets"]).astype(jnp.float32)
        return nll, correct

    dataset = data_lib.build_synthetic(task.data_config(eval_batches), seed=seed)
    train_iter = dataset.train_iter()
    eval_set = [_device(b) for b in dataset.eval_batches()]

    def evaluate() -> tuple[float, float, np.ndarray]:
        """(loss, accuracy) on the masked targets, and the loss per position over every non-PAD target."""
        nll_sum = acc_sum = w_sum = 0.0
        pos_sum = pos_w = 0.0
        for batch in eval_set:
            nll, correct = jax.device_get(eval_step(model, batch))
            w = np.asarray(batch["loss_mask"], np.float32)
            nll_sum += float(np.sum(nll * w))
            acc_sum += float(np.sum(correct * w))
            w_sum += float(np.sum(w))
            real = (np.asarray(batch["targets"]) != data_lib.PAD_ID).astype(np.float32)
            pos_sum = pos_sum + np.sum(nll * real, axis=0)
            pos_w = pos_w + np.sum(real, axis=0)
        per_pos = np.where(pos_w > 0, pos_sum / np.maximum(pos_w, 1.0), np.nan)
        return nll_sum / max(w_sum, 1.0), acc_sum / max(w_sum, 1.0), per_pos

    hist: dict[str, Any] = {k: [] for k in ("step", "loss", "lr", "grad_norm", "entropy", "norm_entropy",
                                            "max_logit")}
    hist.update(warnings=[], diverged_step=None, position_loss=[], position_loss_step=[],
                params=models.count_params(model))
    losses: list[Any] = []
    for step in range(1, steps + 1):
        batch = _device(next(train_iter))
        log_now = step % log_every == 0 or step == steps or step == 1
        loss, gnorm, summary = train_step(model, optimizer, batch)
        losses.append(loss)
        if position_loss_every and (step % position_loss_every == 0 or step == 1):
            hist["position_loss_step"].append(step)
            hist["position_loss"].append(evaluate()[2])
        if not log_now:
            continue
        host_losses = np.asarray(jax.device_get(losses), np.float64)
        losses = []
        summary = jax.tree.map(np.asarray, jax.device_get(summary))["decoder_self"]
        record = {"step": step, "loss": float(np.mean(host_losses)), "lr": float(lr_schedule(step - 1)),
                  "grad_norm": float(gnorm), "entropy": summary["entropy"],
                  "norm_entropy": summary["norm_entropy"], "max_logit": summary["max_logit"]}
        for k, v in record.items():
            hist[k].append(v)
        hist["warnings"].extend(monitor.update(step, {"decoder_self": summary}))
        if on_log is not None:
            on_log(step, record)
        if not np.all(np.isfinite(host_losses)):
            bad = np.flatnonzero(~np.isfinite(host_losses))[0]
            hist["diverged_step"] = step - len(host_losses) + 1 + int(bad)
            break
    if hist["diverged_step"] is None:
        hist["eval_loss"], hist["eval_accuracy"], hist["eval_position_loss"] = evaluate()
    else:
        hist["eval_loss"], hist["eval_accuracy"], hist["eval_position_loss"] = math.nan, math.nan, None
    hist["seconds"] = time.time() - start
    return hist


def _device(batch: dict[str, np.ndarray]) -> dict[str, jax.Array]:
    return {k: jnp.asarray(v) for k, v in batch.items() if k in ("inputs", "targets", "loss_mask")}
