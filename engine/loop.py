"""The one training loop: ``run(config, workdir=None, hooks=())`` trains any task and returns its metrics.

Every experiment runs through it: ``train.py`` calls it with a workdir (checkpoints, resume, JSONL, W&B,
progress bar); reproductions, sweeps, tests and notebooks call it in-process, with or without a workdir
(without one nothing is written to disk). Around the jit-compiled train step everything is a hook
(``engine.hooks``); the metrics of the train step stay on the device and are pulled every
``train.log_every`` steps, the only host sync.

With several hosts every process runs the same loop on its slice of each batch; only the lead process
(index 0) writes the config, the tokenizer copy, metrics, outputs, heatmaps and the W&B run, and the others
read what it wrote after a barrier (``engine.runtime``).
"""
from __future__ import annotations

import dataclasses
import logging
import logging.handlers
import math
import os
import platform
import time
from typing import Any, Callable, Mapping, Optional, Sequence

import jax
import ml_collections
import numpy as np

from engine import checkpoint as ckpt_lib
from engine import config as config_lib
from engine import evaluation
from engine import logs
from engine import metrics as metrics_lib
from engine import runtime
from engine import sharding as sharding_lib
from engine import watchdog as watchdog_lib
from engine import workdir as workdir_lib
from engine import writer as writer_lib
from engine.hooks import Hook, default_hooks
from engine.state import Setup, abstract_state, admin_params, build, flops_forward
from engine.errors import NonFiniteError
from engine.steps import make_train_step, non_finite_message, to_device
from engine.tasks import Task, get_task

log = logging.getLogger("attnlab")

_SUMMED = ("loss_sum", "nll_sum", "weight_sum", "tokens", "correct")


@dataclasses.dataclass
class Run:
    """The state of a run that hooks see and may change (``state``, ``step`` when restoring; ``final``).

    Hooks publish what others need here: ``checkpointer`` (set by ``Checkpointing``: the run's
    ``engine.checkpoint.Checkpointer``), ``attention`` ((step, summary) pairs) and ``health_warnings`` (both
    filled by ``AttentionStatistics``)."""

    config: ml_collections.ConfigDict
    workdir: Optional[str]
    task: Task
    data: Any
    setup: Setup
    init: Callable[[], dict]
    logger: writer_lib.MetricLogger
    evaluator: evaluation.Evaluator
    train_iter: Any
    hooks: Sequence[Hook]
    num_steps: int
    deadline: Optional[float]
    peak_flops: float
    lead: bool
    state: Optional[dict] = None
    step: int = 0
    stop_reason: Optional[str] = None
    final: dict = dataclasses.field(default_factory=dict)
    last_train_metrics: dict = dataclasses.field(default_factory=dict)
    checkpointer: Optional[Any] = None
    attention: list = dataclasses.field(default_factory=list)
    health_warnings: list = dataclasses.field(default_factory=list)
    _pending: list = dataclasses.field(default_factory=list)
    _clock: dict = dataclasses.field(default_factory=lambda: {"t0": None, "flops": 0.0, "steps": 0})
    _flops_cache: dict = dataclasses.field(default_factory=dict)

    def log(self, metrics: Mapping[str, Any]) -> None:
        """Log metrics at the current step."""
        self.logger.log(self.step, metrics)

    def event(self, name: str, **fields: Any) -> None:
        """Record a non-metric event at the current step."""
        self.logger.log_event(self.step, name, **fields)

    def request_stop(self, reason: str) -> None:
        """End training after the current step, with ``reason`` as the stop reason."""
        self.stop_reason = self.stop_reason or reason

    def reset_clock(self) -> None:
        """Restart the throughput clock (after work that is not training, e.g. an evaluation)."""
        self._clock.update(t0=time.time(), flops=0.0, steps=0)

    def step_flops(self, batch: Mapping[str, jax.Array]) -> float:
        """Model FLOPs of one train step on ``batch``'s shapes (3x the forward pass as XLA counts it)."""
        key = tuple((k, v.shape) for k, v in sorted(batch.items()))
        if key not in self._flops_cache:
            params = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), self.state["params"])
            abstract = {k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in batch.items()}
            fwd = flops_forward(self.setup)
            self._flops_cache[key] = 3.0 * metrics_lib.forward_flops(fwd, params, abstract)
        return self._flops_cache[key]

    def flush(self) -> None:
        """Pull pending train metrics to the host, check the NaN guard, log, then the hooks' ``on_flush``."""
        guard = jax.device_get({k: self.state[k] for k in ("bad_step", "bad_code", "bad_leaves")})
        if int(guard["bad_step"]) >= 0:
            ckpt = self.checkpointer
            message = non_finite_message(guard, self.setup.leaf_paths, ckpt and ckpt.latest_step(),
                                         ckpt and ckpt.directory)
            if self.config.train.on_non_finite == "raise":
                raise NonFiniteError(message)
            if self.stop_reason != "non_finite":
                log.warning("%s", message)
                self.final["diverged_step"] = int(guard["bad_step"])
                self.event("non_finite", message=message, at_step=int(guard["bad_step"]))
            self.stop_reason = "non_finite"
        if self._pending:
            ms = jax.device_get(self._pending)
            now = time.time()
            agg = {k: float(sum(float(m[k]) for m in ms)) for k in _SUMMED}
            w = max(agg["weight_sum"], 1.0)
            out = {
                "train/loss": agg["loss_sum"] / w,
                "train/nll": agg["nll_sum"] / w,
                "train/perplexity": math.exp(min(agg["nll_sum"] / w, 50.0)),
                "train/accuracy": agg["correct"] / w,
                "train/grad_norm": float(np.mean([float(m["grad_norm"]) for m in ms])),
                "train/learning_rate": float(ms[-1]["lr"]),
            }
            clock = self._clock
            if clock["t0"] is not None and clock["steps"]:
                dt = now - clock["t0"]
                out["perf/tokens_per_sec"] = agg["tokens"] / dt
                out["perf/steps_per_sec"] = clock["steps"] / dt
                out["perf/mfu"] = clock["flops"] / dt / self.peak_flops
            self.log(out)
            self.final.update(out)
            self.last_train_metrics = out
            self._pending = []
            clock.update(t0=now, flops=0.0, steps=0)
        for h in self.hooks:
            h.on_flush(self)

    def _train_one(self, train_step: Callable) -> None:
        batch = to_device(next(self.train_iter), self.setup.mesh, self.setup.layout)
        for h in self.hooks:
            h.before_step(self, batch)
        self.state, metrics = train_step(self.state, batch)
        if self._clock["t0"] is not None:
            self._clock["flops"] += self.step_flops(batch)
            self._clock["steps"] += 1
        self._pending.append(metrics)
        self.step += 1
        if self._clock["t0"] is None:  # after the first (compiling) step: start the throughput clock.
            jax.block_until_ready(metrics)
            self.reset_clock()
        if self.step % self.config.train.log_every == 0 or self.step == self.num_steps:
            self.flush()
        for h in self.hooks:
            h.after_step(self)


def run(config: ml_collections.ConfigDict, workdir: Optional[str] = None, hooks: Sequence[Hook] = (), *,
        use_default_hooks: bool = True, allow_config_change: bool = False,
        logfile: Optional[str] = None) -> dict[str, Any]:
    """Train ``config``'s task (resuming from ``workdir`` when it holds checkpoints), evaluate, and return
    the final metrics.

    workdir: None = in-process only (nothing written: no checkpoints, JSONL, W&B or progress bar).
    hooks: extra hooks, run after the defaults of ``engine.hooks.default_hooks`` (unless
    ``use_default_hooks=False``).
    Returns the final scalars (train metrics of the last interval, evaluation results, ``step``,
    ``stop_reason``, ``wall_minutes``, ``params``, ``peak_flops``, ``diverged_step`` when a non-finite loss
    stopped a ``train.on_non_finite="stop"`` run) plus ``history`` (every logged record), ``attention``
    ((step, {group: {field: [L, H]}}) pairs) and ``health_warnings``.

    With a workdir (``engine.workdir``): the workdir must be writable and free of another live run (its lock is
    held until the end); a config that differs from the run's record in a field that changes training is
    refused unless ``allow_config_change`` (then the change is recorded with its step); a run that already
    finished raises ``engine.workdir.RunFinished``; a checkpoint of another model config raises CheckpointError.
    All of this before anything is written: ``logfile`` (train.py's train.log) gets the lines logged so far only
    then, and a refused run leaves the workdir and W&B as they were. ``train.watchdog_seconds`` and ``train.stop_grace_seconds``
    bound every step, evaluation and save, and the time from a stop signal to the exit (``engine.watchdog``).
    """
    from attention import available_backends

    t_start = time.time()
    task = get_task(config)
    model_cfg = config_lib.validate(config, jax.device_count(), available_backends(), task)
    mesh = sharding_lib.make_mesh(config.mesh)
    lead = runtime.is_lead()
    session = workdir_lib.open_run(config, workdir, allow_change=allow_config_change) if workdir else None
    held = _HeldLines() if logfile else None
    try:
        if workdir is not None:
            log.info("workdir: %s", os.path.abspath(workdir))
        out = _run(config, workdir, hooks, use_default_hooks, session, task, model_cfg, mesh, lead, t_start,
                   logfile, held)
    except BaseException:
        if held is not None:
            held.drop()
        if session is not None:
            session.close(failed=True)
        raise
    if session is not None:
        session.close()
    return out


def _run(config, workdir, hooks, use_default_hooks, session, task, model_cfg, mesh, lead, t_start, logfile,
         held) -> dict[str, Any]:
    data = build_data(task, workdir)
    if hasattr(data, "describe"):
        log.info("%s", data.describe())
    setup, init = build(config, task, mesh, data.vocab_size, model_cfg)
    if workdir is not None:  # the last refusal, before the log file, metrics.jsonl and W&B are written
        ckpt_lib.refuse_other_config(os.path.join(workdir, "checkpoints"), abstract_state(setup, init), config)
    if held is not None:
        held.write_to(logfile)
    t = config.train
    all_hooks = (default_hooks(config, workdir) if use_default_hooks else []) + list(hooks)
    logger = writer_lib.MetricLogger(workdir, config, process_index=jax.process_index(),
                                     run_name=os.path.basename(os.path.abspath(workdir)) if workdir else None)
    r = Run(config=config, workdir=workdir, task=task, data=data, setup=setup, init=init, logger=logger,
            evaluator=evaluation.for_task(setup, data, logger, workdir), train_iter=data.train_iter(),
            hooks=all_hooks, num_steps=int(t.num_steps),
            deadline=t_start + 60.0 * float(t.max_minutes) if t.max_minutes > 0 else None,
            peak_flops=float(t.peak_flops) or _peak_flops(mesh, config.model.dtype), lead=lead)
    watchdog = watchdog_lib.Watchdog(float(t.watchdog_seconds), describe=lambda: _last_good(r.checkpointer))
    try:
        for h in all_hooks:
            h.start(r)
        resumed = r.state is not None
        if not resumed:
            r.state = init()
            if setup.model_cfg.norm == "admin":
                r.state = _admin_init(setup, r.state, data)
        if workdir is not None and lead:  # after a restore, so a run refused for another config leaves no record
            session.started = True
            workdir_lib.write_record(config, workdir, session.changes, r.step)
            workdir_lib.check_free_space(workdir, sum(x.nbytes for x in jax.tree.leaves(r.state)),
                                         int(t.keep_checkpoints))
        n_params = int(sum(np.prod(x.shape) for x in jax.tree.leaves(r.state["params"])))
        log.info("%s", logs.start_line(
            model=type(setup.model(r.state["params"])).__name__, params=n_params,
            attention=logs.attention_text(setup.model_cfg.attention_kind, setup.model_cfg.attention_impl,
                                          jax.default_backend()),
            mesh_shape=dict(mesh.shape), wandb_mode=logger.mode, wandb_dir=logs.wandb_folder(logger.wandb_run),
            process_index=jax.process_index(), process_count=jax.process_count(),
            devices=logs.devices_text(jax.devices())))
        r.event("start", params=n_params, mesh=dict(mesh.shape), resumed=resumed, wandb_mode=logger.mode,
                device=f"{jax.devices()[0].platform} {jax.devices()[0].device_kind} x{jax.device_count()}",
                matmul_precision=str(jax.config.jax_default_matmul_precision or "default"),
                cpu=runtime.cpu_model(), host=platform.node(), boot=runtime.boot_id(),
                software=runtime.software_versions(),
                data_stats=_jsonable(getattr(data, "stats", {})))
        logger.summary({"params": n_params})
        train_step = make_train_step(setup)
        with watchdog_lib.StopRequest(float(t.stop_grace_seconds),
                                      describe=lambda: _last_good(r.checkpointer)) as stop:
            for h in all_hooks if resumed else ():
                with watchdog.phase(f"{type(h).__name__}.resumed at step {r.step}"):
                    h.resumed(r)
            while r.step < r.num_steps and r.stop_reason is None:
                with watchdog.phase(f"train step {r.step + 1}"):
                    r._train_one(train_step)
                    if jax.process_count() == 1 or r.step % t.log_every == 0:  # multi-host: agree at log steps
                        ckpt = r.checkpointer
                        reason = stop.check(r.deadline, save_failed=ckpt is not None and ckpt.failure() is not None)
                        if reason == "save_failed":  # on one host: every host stops here with its line
                            ckpt.raise_agreed()
                        r.stop_reason = r.stop_reason or reason
            r.stop_reason = r.stop_reason or "num_steps"
            r.flush()
            minutes = (time.time() - t_start) / 60
            log.info("training stopped at step %d (%s) after %.1f min", r.step, r.stop_reason, minutes)
            r.event("train_end", reason=r.stop_reason, minutes=minutes)
            for h in all_hooks:  # the final checkpoint and evaluation
                with watchdog.phase(f"{type(h).__name__}.end at step {r.step}"):
                    h.end(r)
        r.final.update({"step": r.step, "stop_reason": r.stop_reason, "wall_minutes": (time.time() - t_start) / 60,
                        "params": n_params, "peak_flops": r.peak_flops})
        scalars = {k: v for k, v in r.final.items() if isinstance(v, (int, float, str))}
        logger.summary(scalars)
        logger.log_event(r.step, "final", **{k: v for k, v in scalars.items() if k != "step"})
        return dict(r.final, history=logger.history, attention=list(r.attention),
                    health_warnings=list(r.health_warnings))
    finally:
        with watchdog.phase("closing the run (checkpoint writes, W&B)"):
            for h in all_hooks:
                h.close(r)
            logger.close()
        watchdog.close()


class _HeldLines(logging.handlers.MemoryHandler):
    """The run's log lines, held until its log file may be written (every refusal check passed)."""

    def __init__(self):
        super().__init__(capacity=1 << 20, flushLevel=logging.CRITICAL + 1)
        log.addHandler(self)

    def write_to(self, logfile: str) -> None:
        """Open ``logfile`` (``runtime.setup_logging``) and write the held lines to it first."""
        runtime.setup_logging(logfile)
        path = os.path.abspath(logfile)
        self.setTarget(next(h for h in log.handlers if getattr(h, "baseFilename", None) == path))
        self.drop()

    def drop(self) -> None:
        """Stop holding: lines held go to the log file when it is open, else nowhere."""
        log.removeHandler(self)
        self.close()


def _last_good(ckpt: Optional[ckpt_lib.Checkpointer]) -> str:
    """"; last good checkpoint: step 20 in <dir>" for fault messages ("" without checkpoints)."""
    if ckpt is None:
        return ""
    step = ckpt.latest_step()
    return f"; last good checkpoint: step {step} in {ckpt.directory}" if step is not None else \
        f"; no checkpoint in {ckpt.directory} yet"


def _admin_init(setup, state: dict, data: Any) -> dict:
    """A fresh ``norm="admin"`` model: the residual scales from the first training batch (a fresh iterator, so
    the run's own data order is untouched); the optimizer state is made anew for the new parameters."""
    batch = to_device(next(data.train_iter()), setup.mesh, setup.layout)
    params = admin_params(setup, state["params"], batch)
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    scales = [float(np.asarray(leaf.addressable_data(0)).flat[0]) for path, leaf in leaves
              if sharding_lib.path_str(path).endswith("omega")]  # one value per sublayer, in every channel
    log.info("Admin: %d residual scales from the first training batch, %.3f to %.3f", len(scales), min(scales),
             max(scales))
    opt_state = jax.jit(setup.tx.init, out_shardings=setup.state_shardings["opt_state"])(params)
    return dict(state, params=params, opt_state=opt_state)


def build_data(task: Task, workdir: Optional[str]) -> Any:
    """``task.build_data`` for this process. With several hosts and a workdir the lead builds first (it writes
    the tokenizer copy into the workdir) and the others build after a barrier, reading it."""
    if workdir is None or jax.process_count() == 1:
        return task.build_data(workdir, jax.process_index(), jax.process_count())
    data = task.build_data(workdir, 0, jax.process_count()) if runtime.is_lead() else None
    runtime.barrier("attnlab:data")
    if data is None:
        data = task.build_data(workdir, jax.process_index(), jax.process_count())
    return data


def _peak_flops(mesh, dtype: str) -> float:
    """Measured peak FLOP/s of the mesh: with several hosts, of this host's devices times the host count (no
    collective, so hosts that have it cached and hosts that measure cannot wait on each other)."""
    if jax.process_count() == 1:
        return metrics_lib.measure_peak_flops(mesh, dtype)
    local = jax.sharding.Mesh(np.asarray(jax.local_devices()), ("all",))
    return metrics_lib.measure_peak_flops(local, dtype) * jax.process_count()


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

