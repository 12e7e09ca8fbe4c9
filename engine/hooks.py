"""What a run does around the train step: hooks (periodic actions, as in Flax's wmt/lm1b examples).

The loop (``engine.loop.run``) calls, on every hook in order:
- ``start(run)`` once, before the first step (a hook may set ``run.state``: ``Checkpointing`` restores);
- ``resumed(run)`` once, after the run's ``start`` event, when it resumed from a checkpoint at ``run.step``: what
  the interrupted run did after saving that step (an evaluation, an early stop) it does again, since the resume
  supersedes what the interrupted run logged at steps >= ``run.step``;
- ``before_step(run, batch)`` with the device batch of the step about to run (``run.step`` is its index);
- ``after_step(run)`` after it (``run.step`` is the number of steps done);
- ``on_flush(run)`` whenever metrics are pulled to the host (every ``train.log_every`` steps and before
  checkpoints and evaluations);
- ``end(run)`` once training stopped (not after an error), and ``close(run)`` always.
A new measurement is a new hook: subclass ``Hook``, override what you need, pass it to ``engine.run(...,
hooks=[MyHook()])``. ``run.log(metrics)`` / ``run.event(name, **fields)`` write through the run's writer
(kept in ``run.logger.history``; JSONL and W&B with a workdir); ``run.request_stop(reason)`` ends training
after the current step.
"""
from __future__ import annotations

import logging
import math
import os
import sys
import time
from typing import Any, Optional

import jax
import numpy as np

from engine import checkpoint as ckpt_lib
from engine import health as health_lib
from engine import health_wandb
from engine import metrics as metrics_lib
from engine import writer as writer_lib
from engine.state import abstract_state
from engine.steps import make_stats_step

# Hooks receive the loop's ``engine.loop.Run`` (not imported here: the loop imports the hooks).
Run = Any

log = logging.getLogger("attnlab")


class Hook:
    """Base class: every callback does nothing."""

    def start(self, run: "Run") -> None:
        pass

    def resumed(self, run: "Run") -> None:
        pass

    def before_step(self, run: "Run", batch: dict) -> None:
        pass

    def after_step(self, run: "Run") -> None:
        pass

    def on_flush(self, run: "Run") -> None:
        pass

    def end(self, run: "Run") -> None:
        pass

    def close(self, run: "Run") -> None:
        pass


def _every(step: int, every: int) -> bool:
    return every > 0 and step % every == 0


class Checkpointing(Hook):
    """Restores the newest checkpoint of ``<workdir>/checkpoints`` that restores at start (train state and
    data iterator; damaged steps are moved aside, see ``engine.checkpoint``), saves every ``every`` steps and
    when training ends (unless it ended on a non-finite loss: the last good checkpoint stays the latest).
    ``config`` is recorded with every step, so a checkpoint of another config is named with the fields that
    differ."""

    def __init__(self, directory: str, every: int, *, keep: int = 3, async_save: bool = True, config=None):
        self.every = int(every)
        self.ckpt = ckpt_lib.Checkpointer(directory, max_to_keep=int(keep), async_save=bool(async_save),
                                          config=config)

    def start(self, run):
        run.checkpointer = self.ckpt  # published for the loop's non-finite message
        if not self.ckpt.all_steps():  # steps that exist but all fail to restore raise CheckpointError
            return
        state, data_state, step = self.ckpt.restore(abstract_state(run.setup, run.init))
        run.state, run.step = state, step
        run.train_iter.set_state(data_state)
        log.info("resumed from %s at step %d", self.ckpt.directory, step)

    def save(self, run) -> None:
        run.flush()
        self.ckpt.save(run.step, run.state, run.train_iter.get_state())

    def after_step(self, run):
        self.ckpt.check()  # a failed background save stops the run at the next step
        if _every(run.step, self.every):
            self.save(run)

    def end(self, run):
        if run.stop_reason != "non_finite":
            self.save(run)
        self.ckpt.wait()

    def close(self, run):
        self.ckpt.close()


class AttentionStatistics(Hook):
    """Every ``every`` steps (and at the last step): the per-layer, per-head attention summary of the step's
    training forward pass (entropy, normalized entropy, max logit, sink; see ``engine.metrics``), logged as
    ``attn/<group>/<field>/L<l>H<h>`` with ``attn/step``, and checked by the health monitor (warnings logged
    as ``health_warning`` events and kept in ``warnings``; groups in ``frozen_groups``, frozen to uniform
    attention on purpose, are not checked). ``records`` keeps (step, summary) pairs; both are published on the
    run (``run.attention``, ``run.health_warnings``). A resumed run first
    replays what it logged before the resume step (``rebuild``), so its warnings are the unbroken run's."""

    def __init__(self, every: int, health: Any, frozen_groups: tuple = ()):
        self.every = int(every)
        self.monitor = health_lib.HealthMonitor(health)
        self.frozen_groups = frozenset(frozen_groups)  # frozen to uniform by config: logged, not checked
        self.pending: list[tuple[int, Any]] = []
        self.records: list[tuple[int, dict]] = []
        self.warnings: list[health_lib.HealthWarning] = []
        self.losses: list[tuple[int, float]] = []  # logged training losses not yet fed to the monitor

    def start(self, run):
        self.records, self.warnings = run.attention, run.health_warnings  # published on the run
        self.stats_step = make_stats_step(run.setup, deterministic=False)
        self.reporter = health_wandb.HealthReporter(getattr(run.logger, "wandb_run", None))
        path = os.path.join(run.workdir, writer_lib.METRICS_FILE) if run.workdir else None
        if run.step > 0 and path and os.path.exists(path):
            self.rebuild(writer_lib.read_jsonl(path), run.step)

    def rebuild(self, logged: list[dict], step: int) -> None:
        """Monitor, ``records`` and ``warnings`` as they stood before ``step``, from the summaries the run
        logged before it (metrics.jsonl records): after a resume at ``step`` the monitor keeps its early
        baselines and flagged heads and warns as the unbroken run would."""
        self.losses = [(int(r["step"]), float(r["train/loss"])) for r in logged
                       if "train/loss" in r and "step" in r and int(r["step"]) < step]
        for s_step, summary in metrics_lib.logged_summaries(logged):
            if s_step >= step:
                break
            self.records.append((s_step, summary))
            self._feed_losses(s_step)
            self.warnings.extend(
                self.monitor.update(s_step, {g: v for g, v in summary.items() if g not in self.frozen_groups}))

    def _feed_losses(self, step: int) -> None:
        """Give the monitor the logged losses up to ``step`` (as ``health.replay`` does)."""
        while self.losses and self.losses[0][0] <= step:
            self.monitor.observe_loss(*self.losses.pop(0))

    def before_step(self, run, batch):
        if _every(run.step, self.every) or run.step + 1 == run.num_steps:
            self.pending.append((run.step, self.stats_step(run.state, batch)))

    def on_flush(self, run):
        loss = (getattr(run, "last_train_metrics", None) or {}).get("train/loss")
        if loss is not None and (not self.losses or self.losses[-1][0] < run.step):
            self.losses.append((run.step, float(loss)))
        for s_step, summary in self.pending:
            # Logged at the current step (W&B steps only go forward); attn/step is the step they describe.
            host = jax.tree.map(np.asarray, jax.device_get(summary))
            self.records.append((s_step, host))
            flat = metrics_lib.flatten_summary(host)
            self._feed_losses(s_step)
            warnings = self.monitor.update(s_step, {g: v for g, v in host.items() if g not in self.frozen_groups})
            for w in warnings:
                log.warning("health: %s", w.message())
                run.event("health_warning", **w.record(), at_step=s_step)
                self.reporter.warn(w)
            self.warnings.extend(warnings)
            flat.update({f"health/{k}": v for k, v in self.monitor.active_counts().items()})
            flat["health/new_warnings"] = len(warnings)
            flat["attn/step"] = s_step
            run.log(flat)
        self.pending = []

    def end(self, run):
        self.reporter.finish(run.step)


class Evaluation(Hook):
    """The task's evaluators every ``every`` steps (0 = never during training) and, when ``at_end``, once
    training ended by its step or time budget or an early stop (final=True)."""

    def __init__(self, every: int, *, at_end: bool = True):
        self.every = int(every)
        self.at_end = bool(at_end)
        self.last: dict[str, Any] = {}

    def resumed(self, run):
        # A run stopped in (or after) the evaluation of the step it saved evaluates it again. Nothing is pending and
        # the throughput clock stays unstarted: the first step after a resume compiles, and is not timed.
        if self._due(run):
            self._evaluate(run)

    def after_step(self, run):
        if self._due(run):
            run.flush()
            self._evaluate(run)
            run.reset_clock()

    def end(self, run):
        if self.at_end and run.stop_reason in ("num_steps", "max_minutes", "early_stop"):
            self._evaluate(run, final=True)

    def _due(self, run) -> bool:
        """An evaluation step before the last (whose evaluation, the final one, is ``end``'s)."""
        return _every(run.step, self.every) and run.step < run.num_steps

    def _evaluate(self, run, final: bool = False) -> None:
        self.last = run.evaluator.evaluate(run.state["params"], run.step, final=final)
        run.final.update(self.last)


class EarlyStopping(Hook):
    """Stops training once ``metric`` (a key of the evaluations, e.g. ``validation/accuracy``) reaches
    ``value`` (``mode="max"``: >=, ``"min"``: <=). Needs an ``Evaluation`` hook placed before it."""

    def __init__(self, metric: str, value: float, mode: str = "max"):
        if mode not in ("max", "min"):
            raise ValueError(f"EarlyStopping mode={mode!r}; expected 'max' or 'min'")
        self.metric, self.value, self.mode = metric, float(value), mode

    def resumed(self, run):
        self.after_step(run)  # the evaluation redone at the resume step may end training before another step

    def after_step(self, run):
        v = run.final.get(self.metric)
        if isinstance(v, float) and (v >= self.value if self.mode == "max" else v <= self.value):
            run.request_stop("early_stop")


class ProgressBar(Hook):
    """Progress on the lead process: a tqdm bar (loss, tokens/s and, with a time budget, the time left) when
    stderr is a terminal, else a log line at a metrics flush at most every ``line_every_s`` seconds and at the
    last step (a log file gets no carriage-return redraws)."""

    def __init__(self, line_every_s: float = 30.0):
        self.line_every_s = line_every_s

    def start(self, run):
        from tqdm import tqdm

        self.lines, self.line_time, self.line_step = not sys.stderr.isatty(), -math.inf, None
        self.bar = tqdm(total=run.num_steps, initial=run.step, disable=self.lines or not run.lead,
                        dynamic_ncols=True, desc="train")

    def after_step(self, run):
        self.bar.update(1)

    def on_flush(self, run):
        out = run.last_train_metrics
        if not out:
            return
        postfix = dict(loss=f"{out['train/loss']:.3f}", tok_s=f"{out.get('perf/tokens_per_sec', 0.0):.0f}")
        if run.deadline is not None:
            left = max(run.deadline - time.time(), 0.0)
            postfix["left"] = time.strftime("%M:%S", time.gmtime(left))
            if "perf/steps_per_sec" in out:  # the bar's total: the step the time budget will end at
                self.bar.total = min(run.num_steps, run.step + int(left * out["perf/steps_per_sec"]))
        now = time.time()
        due = now - self.line_time >= self.line_every_s or run.step == run.num_steps
        if self.lines and run.lead and due and run.step != self.line_step:
            self.line_time, self.line_step = now, run.step
            log.info("train step %d/%d: %s", run.step, run.num_steps, ", ".join(f"{k}={v}" for k, v in postfix.items()))
        self.bar.set_postfix(postfix, refresh=False)

    def end(self, run):
        self.close(run)  # training is over: the final evaluation reports its own progress

    def close(self, run):
        if hasattr(self, "bar"):
            self.bar.close()


def default_hooks(config, workdir: Optional[str]) -> list[Hook]:
    """The hooks ``config`` asks for: progress bar and checkpoints (only with a workdir), attention
    statistics and health (``train.stats_every``), evaluation (``train.eval_every``, ``eval.at_end``) and
    early stopping (``train.early_stop_metric``)."""
    t = config.train
    hooks: list[Hook] = []
    if workdir is not None:
        hooks.append(ProgressBar())
        hooks.append(Checkpointing(os.path.join(workdir, "checkpoints"), t.checkpoint_every,
                                   keep=t.keep_checkpoints, async_save=t.async_checkpoint, config=config))
    if t.stats_every > 0:
        hooks.append(AttentionStatistics(t.stats_every, config.health,
                                         tuple(config.model.get("uniform_attention_groups", ()))))
    hooks.append(Evaluation(t.eval_every, at_end=config.eval.at_end))
    if t.early_stop_metric:
        hooks.append(EarlyStopping(t.early_stop_metric, t.early_stop_value, t.early_stop_mode))
    return hooks
