"""Config loading and validation for train.py / eval.py.

Experiments are ml_collections files under ``configs/`` with ``get_config(arg=None)``. ``arg`` is a
big_vision-style string: ``"heads=4,qk_dim=128,runlocal"`` (``key=value`` pairs, a bare key means True).
``parse_arg`` turns it into a ConfigDict typed by the defaults the config file declares.
"""
from __future__ import annotations

import ast
import datetime
import importlib.util
import os
import re
from typing import Any, Optional

import ml_collections

from engine.doctor_report import default_thresholds
from engine.errors import ConfigError  # noqa: F401  (raised here; callers catch it as engine.config.ConfigError)

SCHEDULES = ("rsqrt", "cosine", "constant")
OPTIMIZERS = ("adam", "adamw")
DECODERS = ("greedy", "beam")
WANDB_MODES = ("auto", "online", "offline", "disabled")
LOSS_ON = ("answers", "all")
ON_NON_FINITE = ("raise", "stop")
EARLY_STOP_MODES = ("max", "min")


def _convert(key: str, value: str, default: Any) -> Any:
    if isinstance(default, bool):
        low = value.lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"config arg {key}={value!r}: expected a boolean (true/false)")
    if isinstance(default, int):
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"config arg {key}={value!r}: expected an int") from None
    if isinstance(default, float):
        try:
            return float(value)
        except ValueError:
            raise ValueError(f"config arg {key}={value!r}: expected a float") from None
    if isinstance(default, str) or default is None:
        return value
    try:
        return type(default)(ast.literal_eval(value))
    except (ValueError, SyntaxError, TypeError):
        raise ValueError(f"config arg {key}={value!r}: expected a {type(default).__name__}") from None


def parse_arg(arg: Optional[str], **defaults: Any) -> ml_collections.ConfigDict:
    """Parse ``"heads=4,qk_dim=128,runlocal"`` into a ConfigDict with the keys of ``defaults``.

    Values take the type of their default (a default of None keeps the string); a bare key sets True.
    Unknown keys raise ValueError listing the known ones.
    """
    out = dict(defaults)
    if arg:
        for part in arg.split(","):
            part = part.strip()
            if not part:
                continue
            key, sep, value = part.partition("=")
            key = key.strip()
            if key not in defaults:
                raise ValueError(f"unknown config arg {key!r}; expected one of {sorted(defaults)}")
            out[key] = _convert(key, value.strip(), defaults[key]) if sep else True
    return ml_collections.ConfigDict(out)


def sibling_config(config_file: str, name: str):
    """The module ``<dir of config_file>/<name>.py``, imported by path: config files are not a package, so one
    that builds on another (``configs/table3_dk.py`` on ``table3_heads.py``) loads it with
    ``sibling_config(__file__, "table3_heads")``."""
    path = os.path.join(os.path.dirname(os.path.abspath(config_file)), name + ".py")
    if not os.path.exists(path):
        raise ValueError(f"config {config_file!r} needs {name}.py beside it; {path} does not exist")
    spec = importlib.util.spec_from_file_location(f"attnlab_config_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def config_name(config_path: str) -> str:
    """``configs/translation.py:heads=4`` -> ``translation-heads=4``, for default workdirs and run names."""
    path, _, arg = config_path.partition(":")
    name = os.path.splitext(os.path.basename(path))[0]
    if arg:
        name += "-" + re.sub(r"[^A-Za-z0-9_.=-]+", "_", arg)
    return name


def default_workdir(config_path: str, config: ml_collections.ConfigDict) -> str:
    """``./runs/<config-name>-<run name or timestamp>``."""
    suffix = config.get("name") or datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join("runs", f"{config_name(config_path)}-{suffix}")


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(message)


def _one_of(path: str, value: Any, allowed: tuple) -> None:
    _need(value in allowed, f"config.{path}={value!r}; expected one of {allowed}")


def _positive(path: str, value: Any, allow_zero: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (value >= 0 if allow_zero else value > 0)
    _need(ok, f"config.{path}={value!r}; expected a number {'>= 0' if allow_zero else '> 0'}")


def sharding_tasks() -> tuple[str, ...]:
    """Names of the tasks that can shard their sequence over ``config.mesh.context``."""
    from engine.tasks import TASKS

    return tuple(name for name, t in TASKS.items() if t.can_shard_sequence)


def validate(config: ml_collections.ConfigDict, num_devices: int, available_backends: tuple[str, ...] = (),
             task=None):
    """Raise ConfigError naming the field for impossible or unknown settings, before anything is built; the
    one place a run checks its config.

    num_devices: total devices the mesh is built over. available_backends: registered attention backends
    (checked when given). task: the run's ``engine.tasks.Task`` (its own checks; default: from config.task).
    Returns the run's ``models.TransformerConfig``, built (and so validated) here once; ``engine.state.build``
    binds the data's vocabulary size to it (``TransformerConfig.bind``) rather than building another.
    """
    import models  # the model config checks every architecture field (widths, head divisibility, enums)
    from engine import sharding
    from engine.tasks import get_task

    task = task or get_task(config)
    m = config.model

    try:  # the vocabulary comes from the data later (bind); until then the smallest one the token ids allow
        model_cfg = models.TransformerConfig.from_dict(dict(m.to_dict(), vocab_size=max(m.get("pad_id", 0), 3) + 1))
    except ValueError as e:
        raise ConfigError(f"config.model: {e}") from None
    num_kv = m.get("num_kv_heads") or m.num_heads
    if available_backends:
        allowed = ("auto",) + tuple(available_backends)
        _need(
            m.attention_impl in allowed,
            f"config.model.attention_impl={m.attention_impl!r} is not a registered attention backend; "
            f"expected one of {allowed}",
        )
    problem = task.check_config()
    _need(problem is None, problem or "")

    t = config.train
    _one_of("train.optimizer", t.optimizer, OPTIMIZERS)
    _one_of("train.schedule", t.schedule, SCHEDULES)
    _positive("train.learning_rate", t.learning_rate)
    _positive("train.warmup_steps", t.warmup_steps, allow_zero=True)
    _positive("train.num_steps", t.num_steps)
    _positive("train.max_minutes", t.max_minutes, allow_zero=True)
    _positive("train.grad_clip_norm", t.grad_clip_norm, allow_zero=True)
    _need(0.0 <= t.label_smoothing < 1.0, f"config.train.label_smoothing={t.label_smoothing!r}; expected [0, 1)")
    for field in ("log_every", "stats_every", "checkpoint_every", "eval_every"):
        _positive(f"train.{field}", t[field], allow_zero=True)
    _need(t.log_every > 0, f"config.train.log_every={t.log_every}; expected > 0")
    if t.schedule == "rsqrt":
        _need(t.warmup_steps > 0, "config.train.schedule='rsqrt' needs config.train.warmup_steps > 0")
    _one_of("train.loss_on", t.loss_on, LOSS_ON)
    _one_of("train.on_non_finite", t.on_non_finite, ON_NON_FINITE)
    _one_of("train.early_stop_mode", t.early_stop_mode, EARLY_STOP_MODES)
    for name in ("watchdog_seconds", "stop_grace_seconds"):  # faults (engine/watchdog.py)
        _need(t.get(name, 0.0) >= 0, f"config.train.{name}={t.get(name)}; expected >= 0 (0 = off)")
    if t.freeze:
        try:
            re.compile(t.freeze)
        except re.error as e:
            raise ConfigError(f"config.train.freeze={t.freeze!r} is not a valid regular expression: {e}") from None

    margin = config.health.get("recover_margin", 1.0)
    _need(isinstance(margin, (int, float)) and 0.0 < margin <= 1.0,
          f"config.health.recover_margin={margin!r}; expected a number in (0, 1]")
    collapse = config.health.get("collapse_spread_ratio", 0.05)
    _need(isinstance(collapse, (int, float)) and 0.0 < collapse < 1.0,
          f"config.health.collapse_spread_ratio={collapse!r}; expected a number in (0, 1)")

    mesh = config.mesh
    _need(isinstance(mesh.model, int) and mesh.model >= 1, f"config.mesh.model={mesh.model!r}; expected an int >= 1")
    context = mesh.get("context", 1)
    _need(isinstance(context, int) and context >= 1, f"config.mesh.context={context!r}; expected an int >= 1")
    inner = mesh.model * context
    if mesh.data == -1:
        _need(
            num_devices % inner == 0,
            f"config.mesh.{'model' if context == 1 else 'context'}={mesh.model if context == 1 else context}"
            f"{'' if context == 1 else f' x model={mesh.model}'} does not divide the {num_devices} available devices",
        )
        data_axis = num_devices // inner
    else:
        _need(isinstance(mesh.data, int) and mesh.data >= 1, f"config.mesh.data={mesh.data!r}; expected -1 or >= 1")
        data_axis = mesh.data
        _need(
            data_axis * inner <= num_devices,
            f"config.mesh data={mesh.data} x context={context} x model={mesh.model} needs {data_axis * inner} "
            f"devices; {num_devices} available",
        )
    if mesh.model > 1:
        _need(
            m.num_heads % mesh.model == 0 and num_kv % mesh.model == 0,
            f"config.mesh.model={mesh.model} must divide config.model.num_heads={m.num_heads} and "
            f"num_kv_heads={num_kv} to shard attention heads",
        )
        _need(m.d_ff % mesh.model == 0, f"config.mesh.model={mesh.model} must divide config.model.d_ff={m.d_ff}")
    if context > 1:
        _need(task.can_shard_sequence, f"config.mesh.context={context} (sequence sharding) needs a task over one "
              f"sequence that can shard it ({', '.join(repr(n) for n in sharding_tasks())}); "
              f"config.task={config.task!r}")
        _need(m.attention_impl == "ring", f"config.mesh.context={context} needs config.model.attention_impl='ring' "
              f"(ring attention over the context axis); got {m.attention_impl!r}")
        _need(not m.get("attention_dropout_rate", 0.0), f"config.model.attention_dropout_rate="
              f"{m.get('attention_dropout_rate')!r}: ring attention (config.mesh.context={context}) has no dropout")
        seq_len = config.data.get("seq_len", 0)
        _need(seq_len % context == 0, f"config.data.seq_len={seq_len} is not divisible by config.mesh.context="
              f"{context} (each device holds seq_len / context tokens)")
    layout = mesh.get("context_layout", "natural")
    _one_of("mesh.context_layout", layout, sharding.CONTEXT_LAYOUTS)
    if layout == "zigzag":
        _need(context > 1, "config.mesh.context_layout='zigzag' needs config.mesh.context > 1 (a sequence split "
              f"over several devices); config.mesh.context={context}")
        seq_len = config.data.get("seq_len", 0)
        _need(seq_len % (2 * context) == 0, f"config.data.seq_len={seq_len} is not divisible by 2 x "
              f"config.mesh.context={context} (the zig-zag layout gives each device 2 chunks)")
    batch = config.data.get("batch_size")
    if batch:
        _need(
            batch % data_axis == 0,
            f"config.data.batch_size={batch} is not divisible by the {data_axis} data-parallel devices "
            f"(mesh data axis); pick a multiple of {data_axis}",
        )

    e = config.eval
    _one_of("eval.decode", e.decode, DECODERS)
    _positive("eval.beam_size", e.beam_size)
    for field in ("bleu_examples", "split_examples", "max_batches"):
        _positive(f"eval.{field}", e[field], allow_zero=True)
    _one_of("wandb.mode", config.wandb.mode, WANDB_MODES)
    return model_cfg


def base_config() -> ml_collections.ConfigDict:
    """Sections every experiment shares (train, eval, mesh, health, doctor, wandb) with their defaults.

    Config files start from this, set ``task``, ``model`` and ``data``, and override what they need.
    """
    c = ml_collections.ConfigDict()
    c.name = ""  # run name: default workdir suffix and W&B run name (default: a timestamp).
    c.seed = 0
    c.task = "translation"  # translation (EncoderDecoder) | lm (DecoderOnly, synthetic) | classification

    t = c.train = ml_collections.ConfigDict()
    t.optimizer = "adam"  # "adam" or "adamw".
    t.schedule = "rsqrt"  # "rsqrt" (Vaswani), "cosine" or "constant"; see engine/optim.py.
    t.learning_rate = 7e-4  # peak learning rate, reached after warmup_steps.
    t.warmup_steps = 4000
    t.final_lr_fraction = 0.1  # cosine: final lr = learning_rate * final_lr_fraction.
    t.b1 = 0.9
    t.b2 = 0.98
    t.eps = 1e-9
    t.weight_decay = 0.0  # adamw only; applied to parameters with ndim > 1.
    t.grad_clip_norm = 0.0  # 0 = no clipping.
    t.label_smoothing = 0.1
    t.num_steps = 100_000
    t.max_minutes = 0.0  # wall-clock budget from start-up to the end of training (data, compile, steps; the
    # final evaluation comes after); 0 = none. Training stops at num_steps or max_minutes, whichever is first.
    t.log_every = 100  # metrics are pulled from the device every log_every steps (the only host sync).
    t.stats_every = 500  # attention statistics + health check every stats_every steps (0 = never).
    t.eval_every = 5000  # validation loss (+ BLEU on eval.bleu_examples) every eval_every steps (0 = end only).
    t.checkpoint_every = 5000  # 0 = only at the end and on SIGTERM/SIGINT.
    t.keep_checkpoints = 3
    t.async_checkpoint = True
    t.peak_flops = 0.0  # device peak FLOP/s for MFU; 0 = measure once and cache.
    t.freeze = ""  # regex over "/"-joined parameter paths; matching parameters are not trained ("" = none).
    t.loss_on = "answers"  # lm tasks: "answers" (the task's loss mask) or "all" (every real target).
    t.on_non_finite = "raise"  # NaN/Inf loss or gradient: "raise" (error naming the step) or "stop" (end the
    # run, report diverged_step; for sweeps over learning rates that are meant to diverge).
    t.early_stop_metric = ""  # an evaluation metric (e.g. "validation/accuracy"); "" = no early stop.
    t.early_stop_value = 0.0  # ... stop once it reaches this value
    t.early_stop_mode = "max"  # "max": stop when metric >= value; "min": when metric <= value.
    # --- faults (engine/watchdog.py, docs/reliability.md) ---
    t.watchdog_seconds = 1800.0  # a train step (the first one compiles), an evaluation or a save running longer
    # is a hang: stacks dumped, exit code 1 on every host (0 = no watchdog).
    t.stop_grace_seconds = 60.0  # after SIGTERM/SIGINT the run saves and stops at the next step; past this many
    # seconds (or on a second signal) it dumps stacks and exits at once (0 = wait as long as it takes).
    # --- end of faults ---

    e = c.eval = ml_collections.ConfigDict()
    e.decode = "beam"  # "greedy" or "beam".
    e.beam_size = 4
    e.length_penalty = 0.6
    e.max_decode_extra = 50  # decode up to source length + max_decode_extra tokens (capped by model.max_len).
    e.decode_batch_size = 64  # sentences per decoding batch.
    e.length_bucket = 16  # decoding pads source and output lengths to multiples of this (fewer compiles).
    e.split = "test"  # split decoded and scored at the end of training.
    e.bleu_split = "validation"  # split scored during training.
    e.bleu_examples = 256  # sentences of bleu_split decoded at each evaluation during training (0 = none).
    e.num_samples = 5  # sample translations logged per evaluation.
    e.heatmap_examples = 2  # fixed examples whose attention maps are drawn per evaluation (0 = none).
    e.max_batches = 0  # cap on eval batches for loss/accuracy (0 = all).
    e.split_examples = 0  # sentences of eval.split decoded when training ends (0 = all; sweeps use a cap).
    e.at_end = True  # evaluate (decode eval.split) when training ends.
    e.position_loss = False  # also log the evaluation loss per sequence position (<split>/position_loss).

    m = c.mesh = ml_collections.ConfigDict()
    m.data = -1  # data-parallel devices; -1 = all devices not used by the model axis.
    m.model = 1  # tensor-parallel devices (shards heads and the MLP).
    m.context = 1  # context-parallel devices (shard the sequence; needs model.attention_impl="ring", task lm).
    m.context_layout = "natural"  # natural | zigzag: device r of N holds sequence chunks r and 2N-1-r (balanced causal work).
    m.rules = ()  # extra (regex, spec) sharding rules, tried before the built-in ones; see engine/sharding.py.

    h = c.health = ml_collections.ConfigDict()
    # The attention health monitor (engine/health.py; docs/health.md). Thresholds on whole layers, relative to the
    # model's early state; measured on a calibration split of traced runs and reported on a held-out split in
    # docs/results/health_calibration/ (python -m studies train health_calibration), which names the commit.
    h.baseline_checks = 2  # early value of a layer = the mean over its first baseline_checks checks.
    h.init_std_high = 3.0  # init_spread_high: a layer's median logit std at the first check above this (a working
    # 1/sqrt(d_k) scale gives 0.4-2.5 in every committed healthy run; a missing one ~sqrt(d_k) times that) ...
    h.init_sharp = 0.6  # ... cause named when every head is above it and the mean normalized entropy is below this.
    h.init_std_low = 0.2  # init_spread_low: every layer of a group with its median logit std at the first check
    # below this (healthy 6-layer post-LN cross-attention starts at 0.25) ...
    h.init_std_all_low = 0.35  # ... or every layer of every group below this (a scale acts on all of them; 1/d_k
    # gives ~0.8/sqrt(d_k), 0.14-0.21 at d_k 16-32; no healthy run has every group below 0.78).
    h.growth_ratio = 10.0  # logit_growth: a layer's median logit std above growth_ratio x its early value ...
    h.growth_floor = 8.0  # ... and above this ...
    h.growth_rate = 1.5  # ... grown this many times over the last growth_window checks ...
    h.growth_window = 2
    h.loss_rise = 0.1  # ... while the training loss is this many nats above its lowest value so far.
    h.max_logit = 1000.0  # runaway_logits: a head's max scaled logit above this (healthy runs stay below 400).
    h.uniform_ratio = 0.98  # uniform_attention: every head of a layer above this normalized entropy ...
    h.uniform_layers = 0.5  # ... in at least this fraction of the group's layers ...
    h.uniform_after_checks = 16  # ... from this check on (healthy 6-layer post-LN cross-attention stays uniform
    # to check 11).
    h.collapse_spread_ratio = 0.05  # attention_collapse: a layer's median logit std below this x its first-check
    # value, every head above uniform_ratio (set on the calibration split: no healthy run's near-uniform layer falls
    # within 2.5x of it, every deep post-LN run without warmup is below it at the second check; the report's
    # "attention_collapse margin" table).
    h.mask_leak_ratio = 1.01  # mask_leak: a head's normalized entropy above this (at most 1 when the mask holds).
    h.recover_margin = 0.8  # a problem clears (and can warn again) only once its value is past threshold x this
    # (an upper bound) or threshold / this (a lower bound).

    c.doctor = default_thresholds()  # eval.py --diagnose: thresholds and sample sizes (see engine/doctor_report.py).

    w = c.wandb = ml_collections.ConfigDict()
    w.mode = "auto"  # auto | online | offline | disabled; see engine/logging.py.
    w.project = "attnlab"
    w.entity = ""
    w.group = ""
    w.tags = ()
    w.name = ""  # default: the workdir's name.
    w.notes = ""
    w.job_type = "train"
    w.init_timeout = 60.0
    return c
