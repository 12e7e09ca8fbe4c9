"""Sweep points and their committed records: a config file's ``sweep()`` points, training one point with
``train.py`` (a subprocess, for long points) or ``engine.run`` (in-process), and the record a finished point leaves.

A sweep is a function ``sweep(arg=None)`` in a config file (next to its ``get_config(arg=None)``) that yields the
points: dicts from dotted config fields to values, e.g. ``{"model.num_heads": 4, "model.qk_dim": 128, "seed": 1}``.
``sweep_points(spec)`` names them by what varies (``num_heads_4-seed_1``).

``run_point(spec, sweep_dir, point, extra, group=..., record=path)`` trains one point unless its record (or its run
folder's completion marker) says it is done. A finished point writes its record (``point_record``: config and
overrides, the hash of the study's settings for it, commit, seed, final validation and test metrics, learning
curve, stability statistics, per-sentence BLEU statistics), its decoded sentences (``<point>.<split>.txt``) and the
attention trace the health monitor read (``<point>.attention.json.gz``) beside it. A point whose record exists is
never trained again, even when its run folder is gone; a record made with other settings is refused with a message
naming the point. While a point trains, one progress line is printed every ``PROGRESS_S`` seconds (point, settings,
step, loss, time left).
"""
from __future__ import annotations

import collections
import dataclasses
import gzip
import hashlib
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
import time
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from engine import metrics as metrics_lib
from engine import runtime
from engine import workdir as workdir_lib
from engine import writer as writer_lib
from engine.config import config_name
from studies import stats as stats_lib
from studies.report import REPO, source_commit

MARKER = "sweep_point.json"
METRICS = writer_lib.METRICS_FILE
# train_end reasons of a run that trained to its end; "non_finite" is the end of a train.on_non_finite="stop" run
# (a learning-rate sweep meant to diverge: the divergence is its result, and a rerun would diverge again).
FINISHED_REASONS = ("num_steps", "max_minutes", "non_finite")


@dataclasses.dataclass(frozen=True)
class Point:
    """One sweep point: its directory name and the config overrides that make it."""

    name: str
    overrides: dict[str, Any]


# ------------------------------------------------------------------------------------------ sweep specs
def split_config_spec(spec: str) -> tuple[str, Optional[str]]:
    """``"configs/x.py:heads=4"`` -> ``("configs/x.py", "heads=4")``; no argument -> ``(path, None)``."""
    path, sep, arg = spec.partition(":")
    if not path.endswith(".py"):
        raise ValueError(f"--config={spec!r}: expected a config file path ending in .py, optionally ':<arg>'")
    return path, (arg if sep else None)


def load_config_module(path: str):
    """Import a config file by path (it need not be inside a package)."""
    full = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)
    if not os.path.exists(full):
        raise ValueError(f"config file {path!r} does not exist (looked at {full})")
    name = "sweep_config_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(full))[0])
    spec = importlib.util.spec_from_file_location(name, full)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _value_str(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def point_name(overrides: Mapping[str, Any], keys: Sequence[str]) -> str:
    """Directory-safe name from the values of ``keys``: ``num_heads_8-qk_dim_64-seed_0``.

    Keys are shortened to their last component unless two of them share it.
    """
    last = [k.rsplit(".", 1)[-1] for k in keys]
    short = last if len(set(last)) == len(last) else [k.replace(".", "_") for k in keys]
    parts = []
    for k, s in zip(keys, short):
        v = re.sub(r"[^A-Za-z0-9.+-]+", "_", _value_str(overrides[k]))
        parts.append(f"{s}_{v}")
    return "-".join(parts) or "default"


def sweep_points(config_spec: str) -> list[Point]:
    """The points of the sweep defined in the config file of ``config_spec``, named by what varies."""
    path, arg = split_config_spec(config_spec)
    module = load_config_module(path)
    if not hasattr(module, "sweep"):
        raise ValueError(f"config file {path!r} defines no sweep(arg=None) function; nothing to sweep")
    raw = [dict(p) for p in module.sweep(arg)]
    if not raw:
        raise ValueError(f"{path}: sweep({arg!r}) yielded no points")
    for p in raw:
        if not p or not all(isinstance(k, str) and k for k in p):
            raise ValueError(f"{path}: sweep point {p!r} must be a non-empty dict of dotted config fields")
    keys = list(dict.fromkeys(k for p in raw for k in p))
    varying = [k for k in keys if len({_value_str(p.get(k)) for p in raw}) > 1] or keys[:1]
    naming: list[str] = []  # varying keys that tell points apart; e.g. qk_dim = d_model / num_heads adds nothing
    for k in varying:
        distinct = lambda ks: len({tuple(_value_str(p.get(x)) for x in ks) for p in raw})  # noqa: E731
        if distinct(naming + [k]) > distinct(naming):
            naming.append(k)
    points = [Point(point_name(p, [k for k in naming if k in p]), p) for p in raw]
    names = [p.name for p in points]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"{path}: sweep({arg!r}) yields duplicate points {dupes}")
    return points


def varying_fields(points: Sequence[Point]) -> list[str]:
    """Dotted fields whose value differs between points, in first-seen order."""
    keys = list(dict.fromkeys(k for p in points for k in p.overrides))
    return [k for k in keys if len({_value_str(p.overrides.get(k)) for p in points}) > 1]


def check_overrides(config_spec: str, points: Sequence[Point], extra: Mapping[str, Any]) -> None:
    """Raise ValueError naming the field when an override names a field the config does not have, or when a
    ``--set`` field is one a point sets itself (the point's value would silently win)."""
    for key, value in extra.items():
        clash = next((p for p in points if key in p.overrides), None)
        if clash is not None:
            raise ValueError(f"--set {key}={value}: point {clash.name} sets {key}={clash.overrides[key]!r} itself, "
                             "and a point's own value wins; change it through the config argument or drop the --set")
    path, arg = split_config_spec(config_spec)
    config = load_config_module(path).get_config(arg)
    for where, overrides in [("--set", extra)] + [(f"point {p.name}", p.overrides) for p in points]:
        for key in overrides:
            node = config
            for part in key.split("."):
                if not hasattr(node, "keys") or part not in node:
                    raise ValueError(f"{where}: config has no field {key!r} (config file {path})")
                node = node[part]


def same_file_spec(config_spec: str) -> str:
    """``config_spec`` with an absolute path (relative to the repository), to compare specs across working dirs."""
    path, arg = split_config_spec(config_spec)
    full = os.path.normpath(path if os.path.isabs(path) else os.path.join(REPO, path))
    return full + (f":{arg}" if arg is not None else "")


def sweep_name(config_spec: str) -> str:
    """``configs/table3_heads.py:wmt14`` -> ``table3_heads-wmt14`` (the W&B group and default workdir)."""
    split_config_spec(config_spec)
    return config_name(config_spec)


def parse_sets(items: Sequence[str]) -> dict[str, str]:
    """``["train.num_steps=10", ...]`` -> ``{"train.num_steps": "10"}``."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item!r}: expected <dotted.field>=<value>")
        out[key.strip()] = value.strip()
    return out


# -------------------------------------------------------------------------------------------- running
def train_command(config_spec: str, workdir: str, overrides: Mapping[str, Any], *, group: str, run_name: str,
                  python: str = sys.executable, train_script: Optional[str] = None) -> list[str]:
    """The train.py command line of one point."""
    cmd = [python, train_script or os.path.join(REPO, "train.py"), f"--config={config_spec}",
           f"--workdir={workdir}", f"--config.wandb.group={group}", f"--config.wandb.name={run_name}"]
    cmd += [f"--config.{k}={_value_str(v)}" for k, v in overrides.items()]
    return cmd


def end_reason(point_dir: str) -> Optional[str]:
    """The ``reason`` of the last ``train_end`` event in the point's metrics.jsonl (None if none)."""
    path = os.path.join(point_dir, METRICS)
    if not os.path.exists(path):
        return None
    ends = [r for r in read_records(path) if r.get("event") == "train_end"]
    return ends[-1].get("reason") if ends else None


def point_status(point_dir: str) -> Optional[dict]:
    """The completion marker of a point, or None when it has not finished."""
    path = os.path.join(point_dir, MARKER)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        status = json.load(f)
    return status if status.get("status") == "done" else None


def settings_hash(config_spec: str, overrides: Mapping[str, Any]) -> str:
    """The hash of what a study asks of a point (its config file and argument, and its overrides), kept in the
    point's record as ``settings_sha``: 16 hex digits of SHA-256 over their canonical JSON."""
    canon = json.dumps({"config": _repo_spec(config_spec), "overrides": json.loads(json.dumps(overrides))},
                       sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()[:16]


def _repo_spec(config_spec: str) -> str:
    """``config_spec`` with its path relative to the repository (absolute when outside it)."""
    path, arg = split_config_spec(config_spec)
    rel = os.path.relpath(os.path.abspath(path if os.path.isabs(path) else os.path.join(REPO, path)), REPO)
    spec = rel if not rel.startswith("..") else os.path.abspath(path)
    return spec + (f":{arg}" if arg is not None else "")


def _check_same(where: str, found: Mapping[str, Any], config_spec: str, overrides: Mapping[str, Any],
                hint: str) -> None:
    """Raise ValueError naming ``where`` when a marker or record ``found`` was made with other settings: another
    ``settings_sha`` (where it keeps one), or another config or other overrides."""
    wanted = {"config": same_file_spec(config_spec), "overrides": json.loads(json.dumps(overrides))}
    got = {"config": same_file_spec(found.get("config", "")), "overrides": found.get("overrides")}
    sha = found.get("settings_sha")
    if got != wanted or (sha is not None and sha != settings_hash(config_spec, overrides)):
        raise ValueError(f"sweep point {where} was trained with other settings (config {found.get('config')}, "
                         f"overrides {found.get('overrides')}), but this study asks for {_repo_spec(config_spec)} "
                         f"with {wanted['overrides']}; {hint}")


PROGRESS_S = 60.0  # seconds between a training point's progress lines


def settings_text(overrides: Mapping[str, Any]) -> str:
    """``num_heads=4 qk_dim=32 seed=1``: a point's overrides by their last field name."""
    return " ".join(f"{k.rsplit('.', 1)[-1]}={_value_str(v)}" for k, v in overrides.items())


def progress_line(name: str, overrides: Mapping[str, Any], point_dir: str, started: float,
                  num_steps: Optional[int]) -> str:
    """One line on a training point: its name and settings, the last logged step and training loss, the elapsed
    time and the time left at the speed since ``started`` (from its metrics.jsonl; a resumed point's speed counts
    from the last step logged before ``started``)."""
    path = os.path.join(point_dir, METRICS)
    train = [r for r in (read_records(path) if os.path.exists(path) else []) if "train/loss" in r
             and "event" not in r]
    elapsed = time.time() - started
    head = f"[sweep] {name} ({settings_text(overrides)})"
    if not train:
        return f"{head}: starting, {elapsed:.0f}s elapsed"
    step, loss = int(train[-1]["step"]), _num(train[-1]["train/loss"])
    earlier = [r for r in train if (_num(r.get("time")) or 0.0) < started]
    first = int(earlier[-1]["step"] if earlier and len(earlier) < len(train) else train[0]["step"])
    text = f"{head}: step {step}" + (f"/{num_steps}" if num_steps else "") + (
        f", loss {loss:.4f}" if loss is not None else "") + f", {elapsed / 60:.1f} min elapsed"
    if num_steps and step > first and elapsed > 0:
        rate = (step - first) / elapsed
        text += f", ~{(num_steps - step) / rate / 60:.1f} min left"
    return text


def _num_steps(point_dir: str, config_spec: str, overrides: Mapping[str, Any]) -> Optional[int]:
    """The point's training steps (its overrides, else its config), None when unknown."""
    if "train.num_steps" in overrides:
        return int(overrides["train.num_steps"])
    try:
        path, arg = split_config_spec(config_spec)
        return int(load_config_module(path).get_config(arg).train.num_steps)
    except (ValueError, AttributeError, KeyError):
        return None


def run_point(config_spec: str, sweep_dir: str, point: Point, extra: Mapping[str, Any], *, group: str,
              python: str = sys.executable, train_script: Optional[str] = None,
              record: Optional[str] = None, execution: Optional[Mapping[str, Any]] = None,
              in_process: bool = False, progress_s: float = PROGRESS_S) -> bool:
    """Train one point unless its record or marker says it is done; True when it finished.

    ``in_process``: train through ``engine.run`` in this process (short points; ``execution`` applies the same
    way); else ``train.py`` as a subprocess, whose console output goes to <point>/sweep_stdout.log (its own log is
    <point>/train.log) while this process prints a progress line every ``progress_s`` seconds.

    ``execution``: overrides of how the point runs, not what it is (e.g. ``model.attention_impl`` on an
    accelerator): applied after the point's overrides, kept in the record under ``execution`` and left out of the
    check that an existing record or marker was made by the same point.

    A point counts as finished when training reached its end (``train_end`` reason in ``FINISHED_REASONS``); one
    stopped by a signal resumes from its checkpoints on the next run. With ``record`` (a JSON path, e.g. under
    ``docs/results/<study>/points/``) a finished point also writes its record there (``point_record``), its
    decoded sentences (``save_hypotheses``) and attention trace (``save_attention_trace``) beside it, and a point
    whose record exists is not trained again even when ``sweep_dir`` is gone (a record made with other settings
    raises ValueError naming the point).
    """
    point_dir = os.path.join(sweep_dir, point.name)
    overrides = {**extra, **point.overrides}
    if record is not None and os.path.exists(record):
        recorded = read_record(record)
        _check_same(f"{point.name} (record {os.path.relpath(record, REPO)})", recorded, config_spec, overrides,
                    "move that record away (or use another records folder) to retrain it")
        save_hypotheses(record, point_dir, recorded)
        save_attention_trace(record, point_dir)
        print(f"[sweep] {point.name}: record {os.path.relpath(record, REPO)} exists, skipped")
        return True
    status = point_status(point_dir)
    if status is not None:
        _check_same(f"{point.name} (run folder {point_dir})", status, config_spec, overrides,
                    "use another --workdir, or delete that folder to retrain it")
        if record is not None:
            _finish_record(record, point_dir, config_spec, overrides, point.name, execution)
        print(f"[sweep] {point.name}: done already, skipped")
        return True
    os.makedirs(point_dir, exist_ok=True)
    commit = source_commit()
    start = time.time()
    if in_process:
        cmd = ["engine.run", config_spec] + [f"{k}={_value_str(v)}" for k, v in {**overrides,
                                                                               **(execution or {})}.items()]
        print(f"[sweep] {point.name} ({settings_text(overrides)}): training in-process", flush=True)
        rc = _train_in_process(config_spec, point_dir, {**overrides, **(execution or {})})
        stdout_path = point_dir
    else:
        # Under `wandb agent`, make the point's W&B run the one the agent created (train.py reuses this id).
        agent_run_id = os.environ.get("WANDB_RUN_ID")
        if os.environ.get("WANDB_SWEEP_ID") and agent_run_id:
            with open(os.path.join(point_dir, "wandb_run_id"), "w") as f:
                f.write(agent_run_id)
        cmd = train_command(config_spec, point_dir, {**overrides, **(execution or {})}, group=group,
                            run_name=f"{group}/{point.name}", python=python, train_script=train_script)
        print(f"[sweep] {point.name} ({settings_text(overrides)}): training, log {point_dir}/sweep_stdout.log",
              flush=True)
        stdout_path = os.path.join(point_dir, "sweep_stdout.log")
        num_steps = _num_steps(point_dir, config_spec, overrides)
        with open(stdout_path, "a") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
            while True:
                try:
                    rc = proc.wait(timeout=progress_s)
                    break
                except subprocess.TimeoutExpired:
                    print(progress_line(point.name, overrides, point_dir, start, num_steps), flush=True)
    wall = time.time() - start
    reason = end_reason(point_dir)
    if rc != 0 or reason not in FINISHED_REASONS:
        print(f"[sweep] {point.name}: training exited with {rc} (stop reason {reason}) after {wall:.0f}s; "
              f"see {stdout_path}", flush=True)
        return False
    _write_text_atomic(os.path.join(point_dir, MARKER), json.dumps(
        {"status": "done", "config": config_spec, "overrides": overrides, "wall_s": wall, "command": cmd,
         "commit": commit, "settings_sha": settings_hash(config_spec, overrides)}, indent=1))
    if record is not None:
        _finish_record(record, point_dir, config_spec, overrides, point.name, execution)
    print(f"[sweep] {point.name}: done in {wall:.0f}s; "
          + progress_line(point.name, overrides, point_dir, start, None).split(": ", 1)[1].split(", ")[0]
          + f" (stop reason {reason})", flush=True)
    return True


def _train_in_process(config_spec: str, point_dir: str, overrides: Mapping[str, Any]) -> int:
    """``engine.run`` of the point in ``point_dir``; 0 when it returned, 1 when it raised (the error is printed)."""
    import engine
    from studies.inprocess import load, with_overrides

    try:
        engine.run(with_overrides(load(config_spec), overrides), point_dir)
    except Exception as e:  # noqa: BLE001 (a failed point is reported and the sweep goes on, as with train.py)
        print(f"[sweep] {os.path.basename(point_dir)}: engine.run raised {type(e).__name__}: {e}", flush=True)
        return 1
    return 0


def _finish_record(record: str, point_dir: str, config_spec: str, overrides: Mapping[str, Any], name: str,
                   execution: Optional[Mapping[str, Any]]) -> None:
    """Write a finished point's record, decoded sentences and attention trace beside ``record``."""
    finished = point_record(point_dir, config_spec, overrides, name=name)
    if execution:
        finished["execution"] = json.loads(json.dumps(dict(execution)))
    write_record(record, finished)
    save_hypotheses(record, point_dir, finished)
    save_attention_trace(record, point_dir)


def wandb_sweep_yaml(config_spec: str, workdir: str, points: Sequence[Point], *, group: str,
                     extra: Sequence[str] = ()) -> str:
    """A W&B sweep file: a grid over the point names; each agent run calls ``python -m studies sweep`` for one
    point."""
    lines = [
        f"# W&B sweep for {config_spec}: `wandb sweep <this file>`, then `wandb agent <sweep id>` on each machine.",
        "program: studies/__main__.py",
        "method: grid",
        f"name: {group}",
        "parameters:",
        "  point:",
        "    values:",
    ]
    lines += [f"      - {json.dumps(p.name)}" for p in points]
    lines += ["command:", "  - ${env}", "  - ${interpreter}", "  - -m", "  - studies", "  - sweep",
              f"  - {json.dumps('--config=' + config_spec)}", f"  - {json.dumps('--workdir=' + workdir)}"]
    lines += [f"  - {json.dumps('--set=' + s)}" for s in extra]
    lines += ["  - ${args}"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------- aggregation
def read_records(path: str) -> list[dict]:
    """Records of a metrics.jsonl file; a truncated line (killed run) is ignored."""
    return writer_lib.read_jsonl(path)


def _num(x: Any) -> Optional[float]:
    """A number from a JSON value (ints stay ints; "nan"/"inf" strings as floats), else None."""
    if isinstance(x, bool) or x is None:
        return None
    if isinstance(x, int):
        return x
    if isinstance(x, float):
        return x
    if isinstance(x, str):
        try:
            return float(x)
        except ValueError:
            return None
    return None


def last_values(records: Iterable[dict]) -> dict[str, Any]:
    """The latest value of every metric key over the records (events included)."""
    out: dict[str, Any] = {}
    for r in records:
        out.update({k: v for k, v in r.items() if k not in ("time", "cpu_s")})
    return out


# Where each table column is read from (keys of engine.run's metrics.jsonl; the first present wins).
COLUMNS = {
    "test BLEU": ("test/bleu",),
    "test chrF": ("test/chrf",),
    "valid perplexity": ("validation/perplexity",),
    "valid accuracy": ("validation/accuracy",),
    "train loss": ("train/loss",),
    "parameters": ("params",),
    "tokens/s": ("perf/tokens_per_sec",),
}


def pick(values: Mapping[str, Any], keys: Sequence[str]) -> Optional[float]:
    for k in keys:
        if k in values:
            v = _num(values[k])
            if v is not None:
                return v
    return None


def entropy_arrays(values: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """group -> [layers, heads] entropy from ``attn/<group>/entropy/L<l>H<h>`` keys."""
    return metrics_lib.head_arrays({k: _num(v) for k, v in values.items()}, "entropy")


def point_summary(point_dir: str) -> dict[str, Any]:
    """Table values of one point from its metrics.jsonl."""
    path = os.path.join(point_dir, METRICS)
    values = last_values(read_records(path)) if os.path.exists(path) else {}
    row = {col: pick(values, keys) for col, keys in COLUMNS.items()}
    row["entropy"] = entropy_arrays(values)
    row["status"] = "done" if point_status(point_dir) else ("partial" if values else "missing")
    return row


# ------------------------------------------------------------------------------------------- records
RECORD_SCHEMA = 1
CURVE_EVERY = 100  # steps per learning-curve bin in a record
SPIKE_WINDOW = 10  # logged train losses a spike is measured against (their median)
SPIKE_NATS = 0.3  # a logged train loss this far above that median counts as a loss spike


MACHINE_ENV = "ATTNLAB_MACHINE"  # names the machine in the records it writes (default: the host name)


def machine(cpu: Optional[str] = None, device: Optional[str] = None,
            boots: Sequence[Optional[str]] = ()) -> dict[str, Any]:
    """The ``machine`` of a record written here: its name (``$ATTNLAB_MACHINE``, else the host name), CPU model
    (``cpu`` as the run logged it, else this host's), the run's device ("<platform> <kind> x<count>") and ``boots``,
    the boot id each training call logged, in order (``engine.runtime.boot_id``; None for a call whose start event
    has none): cloud machines from one image share a host name and CPU model, not a boot."""
    return {"name": os.environ.get(MACHINE_ENV) or platform.node() or None, "cpu": cpu or runtime.cpu_model() or None,
            "device": device, "boots": [b or None for b in boots]}


def _last_logged(events: Sequence[dict], key: str) -> Any:
    """``key`` of the last event that logged it (None when none did)."""
    return next((e[key] for e in reversed(events) if e.get(key)), None)


def _round(x: Any, digits: int = 5) -> Optional[float]:
    """A float with ``digits`` significant digits for a record (None for missing or non-finite values)."""
    v = _num(x)
    if v is None or not np.isfinite(v):
        return None
    return float(f"{float(v):.{digits}g}")


def _by_step(records: Sequence[dict], key: str) -> list[tuple[int, float]]:
    """(step, value) of ``key`` over the metric records, one per step (the last logged wins: after a resume
    the rerun steps replace the killed run's), in step order."""
    out: dict[int, float] = {}
    for r in records:
        if key in r and "event" not in r and _num(r.get("step")) is not None:
            v = _num(r[key])
            out[int(r["step"])] = float(v) if v is not None else float("nan")
    return sorted(out.items())


def learning_curve(records: Sequence[dict], every: int = CURVE_EVERY) -> dict[str, list]:
    """Train loss / NLL (mean of the logged values in each ``every``-step bin, labelled by the last logged
    step in the bin), the largest logged gradient norm in the bin, and every logged validation loss / NLL."""
    series = {name: dict(_by_step(records, key)) for key, name in (
        ("train/loss", "train_loss"), ("train/nll", "train_nll"), ("train/grad_norm", "grad_norm"))}
    bins: dict[int, list[int]] = {}
    for step in sorted(series["train_loss"]):
        bins.setdefault(-(-step // every), []).append(step)
    groups = [bins[b] for b in sorted(bins)]
    curve: dict[str, list] = {"step": [max(g) for g in groups]}
    for name, reduce in (("train_loss", np.mean), ("train_nll", np.mean), ("grad_norm", np.max)):
        got = [[series[name][s] for s in g if s in series[name]] for g in groups]
        curve[name] = [_round(reduce(v)) if v else None for v in got]
    valid = dict(_by_step(records, "validation/nll"))
    valid_loss = dict(_by_step(records, "validation/loss"))
    curve["valid_step"] = sorted(valid)
    curve["valid_nll"] = [_round(valid[s]) for s in sorted(valid)]
    curve["valid_loss"] = [_round(valid_loss.get(s)) for s in sorted(valid)]
    return curve


def loss_spikes(losses: Sequence[float], window: int = SPIKE_WINDOW, nats: float = SPIKE_NATS) -> tuple[int, float]:
    """(number of spikes, largest jump): a jump is a logged loss minus the median of the ``window`` logged
    losses before it; a spike is a jump above ``nats``. Non-finite losses count as spikes."""
    v = np.asarray(losses, dtype=np.float64)
    count, largest = 0, 0.0
    for i in range(window, v.size):
        if not np.isfinite(v[i]):
            count += 1
            continue
        prev = v[i - window:i]
        prev = prev[np.isfinite(prev)]
        if prev.size == 0:
            continue
        jump = float(v[i] - np.median(prev))
        largest = max(largest, jump)
        count += int(jump > nats)
    return count, largest


def current_events(records: Sequence[dict], name: str) -> list[dict]:
    """The run's ``name`` events that no later resume superseded: a resume at step s (its ``start`` event is
    logged at s) drops the earlier events about steps >= s (``at_step``, else ``step``), which the resumed run
    does again."""
    out: list[dict] = []
    for r in records:
        if r.get("event") == "start" and _num(r.get("step")) is not None:
            out = [e for e in out if (_num(e.get("at_step", e.get("step"))) or 0) < int(r["step"])]
        elif r.get("event") == name:
            out.append(r)
    return out


def stability(records: Sequence[dict]) -> dict[str, Any]:
    """Loss spikes, gradient norms, attention max logits and the health monitor's warnings (all, and per
    ``kind/group``) of a run, from its metrics.jsonl records."""
    losses = [v for _, v in _by_step(records, "train/loss")]
    spikes, jump = loss_spikes(losses)
    grads = [v for _, v in _by_step(records, "train/grad_norm") if np.isfinite(v)]
    groups = sorted({k.split("/")[1] for r in records for k in r
                     if k.startswith("attn/") and k.endswith("/max_logit") and k.count("/") == 2})
    logit_curve: dict[str, list] = {"step": []}
    per_step: dict[int, dict[str, float]] = {}
    for r in records:
        if "attn/step" in r:
            per_step[int(r["attn/step"])] = {g: r.get(f"attn/{g}/max_logit") for g in groups}
    logit_curve["step"] = sorted(per_step)
    for g in groups:
        logit_curve[g] = [_round(per_step[s].get(g), 4) for s in logit_curve["step"]]
    non_finite = [r.get("at_step", r.get("step")) for r in records if r.get("event") == "non_finite"]
    warnings = current_events(records, "health_warning")
    return {
        "loss_spikes": spikes, "max_loss_jump": _round(jump, 4),
        "spike_rule": f"a logged train loss (mean of train.log_every steps) more than {SPIKE_NATS} nats above "
                      f"the median of the {SPIKE_WINDOW} logged losses before it",
        "max_grad_norm": _round(max(grads)) if grads else None,
        "grad_norm_note": "before clipping, mean over each train.log_every interval",
        "max_attention_logit": {g: _round(max((x for x in logit_curve[g] if x is not None), default=None), 4)
                                for g in groups},
        "max_logit_curve": logit_curve,
        "non_finite_step": non_finite[0] if non_finite else None,
        "health_warnings": len(warnings),
        "health_warning_kinds": dict(sorted(collections.Counter(f"{w.get('kind')}/{w.get('group')}"
                                                                for w in warnings).items())),
    }


_REFERENCES: dict[str, list[str]] = {}


def split_references(point_dir: str, split: str) -> list[str]:
    """The reference translations of ``split`` of the corpus the point trained on (its config.json), in the
    order the engine decodes them; cached per data config."""
    import data as data_lib
    import ml_collections

    path = os.path.join(point_dir, "config.json")
    if not os.path.exists(path):
        raise ValueError(f"{path} does not exist: the point's config is needed to read its {split} references")
    with open(path) as f:
        cfg = ml_collections.ConfigDict(json.load(f)["data"])
    key = json.dumps([cfg.to_dict(), split], sort_keys=True, default=str)
    if key not in _REFERENCES:
        ds = data_lib.build_translation(cfg, workdir=None, seed=0)
        _REFERENCES[key] = [r for _, r in ds.examples(split)]
    return _REFERENCES[key]


def final_hypotheses(point_dir: str, records: Sequence[dict]) -> tuple[Optional[dict], str]:
    """(the point's last ``bleu`` event and its decoded sentences, one per line in split order; or None and why
    there are none)."""
    bleus = [r for r in records if r.get("event") == "bleu"]
    if not bleus or not bleus[-1].get("hypotheses"):
        return None, "no decoded hypotheses logged"
    ev = bleus[-1]
    hyp_path = os.path.join(point_dir, "outputs", os.path.basename(ev["hypotheses"]))
    if not os.path.exists(hyp_path):
        return None, f"hypotheses file {hyp_path} is missing"
    with open(hyp_path, encoding="utf-8") as f:
        return ev, "\n".join(f.read().split("\n")[: int(ev["sentences"])])


def hypotheses_path(record_path: str, split: str) -> str:
    """Where a point's decoded ``split`` is committed: ``<point>.<split>.txt`` beside its record."""
    return f"{os.path.splitext(record_path)[0]}.{split}.txt"


def save_hypotheses(record_path: str, point_dir: str, record: Mapping[str, Any]) -> Optional[str]:
    """Copy the point's final decoded sentences beside its record (``hypotheses_path``) unless they are there
    already; the path, or None when the record names no decoded split or the run folder is gone. Reads the
    run folder only when the file is missing."""
    split = (record.get("test") or {}).get("split")
    if not split:
        return None
    dest = hypotheses_path(record_path, split)
    if os.path.exists(dest):
        return dest
    metrics = os.path.join(point_dir, METRICS)
    if not os.path.exists(metrics):
        return None
    ev, text = final_hypotheses(point_dir, read_records(metrics))
    if ev is None:
        return None
    _write_text_atomic(dest, text + "\n")
    print(f"[sweep] decoded {split} sentences {os.path.relpath(dest, REPO)}", flush=True)
    return dest


TRACE_SCHEMA = 1


def attention_trace_path(record_path: str) -> str:
    """Where a point's attention trace is committed: ``<point>.attention.json.gz`` beside its record."""
    return f"{os.path.splitext(record_path)[0]}.attention.json.gz"


def _f32(x: Any) -> float:
    """``x`` as the shortest decimal that reads back as the same float32 (the statistics are float32)."""
    return float(str(np.float32(x)))


def attention_trace(point_dir: str) -> Optional[dict[str, Any]]:
    """Every attention summary the run logged for the health monitor (``health.FIELDS`` per group, layer and
    head at every check) and its logged training losses, so the monitor can be replayed offline with other
    thresholds (``python -m studies train health_calibration``); None when the run logged no attention statistics."""
    from engine import health as health_lib

    records = read_records(os.path.join(point_dir, METRICS))
    observations = metrics_lib.logged_summaries(records, health_lib.FIELDS)
    if not observations:
        return None
    config: dict = {}
    if os.path.exists(os.path.join(point_dir, "config.json")):
        with open(os.path.join(point_dir, "config.json")) as f:
            config = json.load(f)
    groups: dict[str, dict[str, Any]] = {}
    for group in observations[-1][1]:
        fields = [f for f in health_lib.FIELDS if f in observations[-1][1][group]]
        shape = list(observations[-1][1][group][fields[0]].shape)
        groups[group] = {"shape": shape, **{f: [[_f32(v) for v in np.ravel(s[group][f])] if group in s else None
                                                for _, s in observations] for f in fields}}
    losses = _by_step(records, "train/loss")
    return {"schema": TRACE_SCHEMA, "steps": [step for step, _ in observations], "groups": groups,
            "skip_groups": list((config.get("model") or {}).get("uniform_attention_groups") or ()),
            "health": config.get("health"), "loss_step": [s for s, _ in losses], "loss": [_f32(v) for _, v in losses]}


def trace_observations(trace: Mapping[str, Any]) -> list[tuple[int, dict[str, dict[str, np.ndarray]]]]:
    """The (step, group -> field -> [L, H]) summaries of an ``attention_trace``, for ``health.replay``."""
    out = []
    for i, step in enumerate(trace["steps"]):
        summary = {}
        for group, g in trace["groups"].items():
            fields = {f: np.asarray(v[i], np.float32).reshape(g["shape"]) for f, v in g.items()
                      if f != "shape" and v[i] is not None}
            if fields:
                summary[group] = fields
        out.append((int(step), summary))
    return out


def read_attention_trace(path: str) -> dict[str, Any]:
    """An attention trace written by ``save_attention_trace``."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def save_attention_trace(record_path: str, point_dir: str) -> Optional[str]:
    """Write the point's ``attention_trace`` beside its record (``attention_trace_path``) unless it is there
    already; the path, or None when the run folder is gone or logged no attention statistics."""
    dest = attention_trace_path(record_path)
    if os.path.exists(dest):
        return dest
    if not os.path.exists(os.path.join(point_dir, METRICS)):
        return None
    trace = attention_trace(point_dir)
    if trace is None:
        return None
    os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
    tmp = f"{dest}.tmp{os.getpid()}"
    with gzip.GzipFile(tmp, "wb", mtime=0) as f:
        f.write(json.dumps(trace, separators=(",", ":")).encode("utf-8"))
    os.replace(tmp, dest)
    print(f"[sweep] attention trace {os.path.relpath(dest, REPO)} ({os.path.getsize(dest) / 1024:.0f} KB)", flush=True)
    return dest


def bleu_sentence_stats(point_dir: str, records: Sequence[dict]) -> dict[str, Any]:
    """Per-sentence BLEU statistics of the point's final decoded split (hypotheses from its ``outputs/``),
    or ``{"rows": None, "reason": ...}`` when the point decoded nothing."""
    ev, text = final_hypotheses(point_dir, records)
    if ev is None:
        return {"rows": None, "reason": text}
    hyps = text.split("\n")
    refs = split_references(point_dir, ev["split"])[: len(hyps)]
    rows = stats_lib.sentence_stats(hyps, refs)
    return {"split": ev["split"], "sentences": len(hyps), "fields": list(stats_lib.STAT_FIELDS),
            "rows": rows.tolist()}


@dataclasses.dataclass
class TrainingCall:
    """One training call of a point, from its ``start`` event to the last line it logged: wall times and the
    process's CPU seconds (``cpu_s``; None for a call logged before the engine wrote it)."""
    start_time: float
    last_time: float
    start_cpu_s: Optional[float]
    last_cpu_s: Optional[float]


def training_calls(records: Sequence[dict]) -> list[TrainingCall]:
    """The training calls of a point's metrics.jsonl records, in order (a resume starts a new one)."""
    calls: list[TrainingCall] = []
    for r in records:
        if r.get("event") == "start":
            cpu = _num(r.get("cpu_s"))
            calls.append(TrainingCall(r["time"], r["time"], cpu, cpu))
        elif calls and _num(r.get("time")) is not None:
            call = calls[-1]
            call.last_time = r["time"]
            cpu = _num(r.get("cpu_s"))
            if call.start_cpu_s is not None and cpu is not None:
                call.last_cpu_s = max(call.last_cpu_s, cpu)
    return calls


def point_record(point_dir: str, config_spec: str, overrides: Mapping[str, Any], *, name: str) -> dict[str, Any]:
    """The committed summary of a finished point: what it was, its final metrics, learning curve, stability
    statistics and per-sentence BLEU statistics (so paired bootstrap needs no run folder). Tens of KB."""
    records = read_records(os.path.join(point_dir, METRICS))
    values = last_values(r for r in records if "event" not in r)
    status = point_status(point_dir) or {}
    config: dict = {}
    if os.path.exists(os.path.join(point_dir, "config.json")):
        with open(os.path.join(point_dir, "config.json")) as f:
            config = json.load(f)
    path, arg = split_config_spec(config_spec)
    rel = os.path.relpath(os.path.abspath(path), REPO)
    spec = (rel if not rel.startswith("..") else os.path.abspath(path)) + (f":{arg}" if arg is not None else "")
    starts = [r for r in records if r.get("event") == "start"]
    times = [r["time"] for r in records if _num(r.get("time")) is not None]
    calls = training_calls(records)
    logged = sum(c.last_time - c.start_time for c in calls)
    cpu = sum(c.last_cpu_s - c.start_cpu_s for c in calls) if calls and all(
        c.start_cpu_s is not None for c in calls) else None
    speeds = sorted(v for r in records if (v := _num(r.get("perf/steps_per_sec"))) is not None and v > 0)
    bleu_events = [r for r in records if r.get("event") == "bleu"]
    test = {k.split("/", 1)[1]: _round(values[k]) for k in ("test/bleu", "test/chrf") if k in values}
    if bleu_events:
        ev = bleu_events[-1]
        test = {"split": ev.get("split"), "bleu": _round(ev.get("bleu")), "chrf": _round(ev.get("chrf")),
                "sentences": ev.get("sentences"), "bleu_signature": ev.get("bleu_signature"),
                "chrf_signature": ev.get("chrf_signature")}
    return {
        "schema": RECORD_SCHEMA,
        "point": name,
        "config": spec,
        "overrides": json.loads(json.dumps(overrides)),
        "settings_sha": settings_hash(config_spec, overrides),
        "seed": config.get("seed", overrides.get("seed")),
        "commit": status.get("commit") or f"{source_commit()} (at record time; the run's commit was not kept)",
        "recorded_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "host": f"{os.uname().sysname} {os.uname().machine}, {os.cpu_count()} CPU cores",
        "device": _last_logged(starts, "device"),
        "machine": machine(_last_logged(starts, "cpu"), _last_logged(starts, "device"),
                           [r.get("boot") for r in starts]),
        "matmul_precision": _last_logged(starts, "matmul_precision"),
        "cpu": _last_logged(starts, "cpu"),  # the run's CPU and libraries: runs that differ in either need not
        "software": _last_logged(starts, "software"),  # repeat each other bit for bit
        "steps": int(values.get("step", 0)),
        "end_reason": end_reason(point_dir),
        "params": next((r.get("params") for r in starts if r.get("params") is not None), None),
        "batches_per_epoch": next((((r.get("data_stats") or {}).get("batches") or {}).get("per_epoch")
                                   for r in starts if isinstance(r.get("data_stats"), dict)), None),
        "model": {k: config.get("model", {}).get(k) for k in (
            "d_model", "num_heads", "qk_dim", "v_dim", "d_ff", "num_encoder_layers", "num_decoder_layers",
            "qk_layernorm")} if config else {},
        "train": {k: config.get("train", {}).get(k) for k in (
            "num_steps", "learning_rate", "schedule", "warmup_steps", "label_smoothing", "grad_clip_norm")}
        if config else {},
        "wall_s": _round(status.get("wall_s"), 4),
        "logged_s": _round(logged, 4),
        "cpu_s": _round(cpu, 4),  # CPU seconds from each call's start event on (pauses out); None if one lacks it
        "median_step_s": _round(1.0 / speeds[len(speeds) // 2], 4) if speeds else None,
        "resumes": max(len(starts) - 1, 0),
        "config_changes": [{"step": e.get("step"), "changes": e.get("changes", {})}  # config_history.jsonl: fields
                           for e in workdir_lib.read_history(point_dir)],  # changed on a resume, from that step on
        "first_logged_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(min(times))) if times else None,
        "validation": {k.split("/", 1)[1]: _round(values.get(k)) for k in (
            "validation/nll", "validation/loss", "validation/perplexity", "validation/accuracy") if k in values},
        "test": test,
        "curve": learning_curve(records),
        "stability": stability(records),
        "bleu_sentence_stats": bleu_sentence_stats(point_dir, records),
    }


def _write_text_atomic(path: str, text: str) -> None:
    """Write ``text`` through a temporary file and a rename, so a killed process leaves the old file or the new."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def write_record(path: str, record: Mapping[str, Any]) -> None:
    """Write a point record: one top-level field per line (compact values), atomically."""
    lines = [f"{json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}" for k, v in record.items()]
    _write_text_atomic(path, "{\n" + ",\n".join(lines) + "\n}\n")
    print(f"[sweep] record {path} ({os.path.getsize(path) / 1024:.0f} KB)", flush=True)


def read_record(path: str) -> dict[str, Any]:
    """A point record written by ``write_record``."""
    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"point record {path} is not valid JSON ({e}); delete it to retrain the point") from None


def read_records_dir(records_dir: str) -> dict[str, dict]:
    """point name -> record for every ``<records_dir>/<point>.json`` (empty when the folder is missing)."""
    if not os.path.isdir(records_dir):
        return {}
    return {f[: -len(".json")]: read_record(os.path.join(records_dir, f))
            for f in sorted(os.listdir(records_dir)) if f.endswith(".json")}
