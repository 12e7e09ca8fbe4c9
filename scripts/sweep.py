"""Run a sweep defined beside its config, then aggregate it into one table and plots.

A sweep is a function ``sweep(arg=None)`` in a config file (next to its ``get_config(arg=None)``) that
yields the points: dicts from dotted config fields to values, e.g.
``{"model.num_heads": 4, "model.qk_dim": 128, "model.v_dim": 128, "seed": 1}``.

    # every point in turn on this machine; each trains with train.py in <workdir>/<point>
    python scripts/sweep.py --config=configs/table3_heads.py
    # the same config argument string train.py takes; extra overrides for every point
    python scripts/sweep.py --config=configs/table3_heads.py:wmt14 --set=train.num_steps=100000
    # only some points, or only rebuild the table and plots
    python scripts/sweep.py --config=configs/table3_dk.py --point=qk_dim_16-seed_0 --aggregate_only
    # a W&B sweep file for `wandb sweep` + `wandb agent` on many machines (each agent runs one point)
    python scripts/sweep.py --config=configs/table3_heads.py:wmt14 --wandb_sweep=table3_heads.yaml

Points run sequentially as ``python train.py --config=<config> --workdir=<workdir>/<point>
--config.<field>=<value> ...`` with ``config.wandb.group`` set to the sweep's name, so every point lands in
one W&B group. A finished point leaves ``<point>/sweep_point.json`` with ``"status": "done"`` and is skipped
when the sweep is run again; an interrupted point resumes from its own checkpoints (train.py resumes from
its workdir). Aggregation writes ``<workdir>/README.md`` (Markdown table and figures), ``results.csv``,
``bleu_perplexity.png`` and ``entropy_heatmaps.png``.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _report import Report, heatmap_grid, plt  # noqa: E402
from engine import metrics as metrics_lib  # noqa: E402
from engine.config import config_name  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = "sweep_point.json"
METRICS = "metrics.jsonl"
FINISHED_REASONS = ("num_steps", "max_minutes")  # train_end reasons of a run that trained to its end


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
    """Raise ValueError naming the field when an override names a field the config does not have."""
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


def run_point(config_spec: str, sweep_dir: str, point: Point, extra: Mapping[str, Any], *, group: str,
              python: str = sys.executable, train_script: Optional[str] = None) -> bool:
    """Train one point unless its marker says it is done; True when it finished.

    train.py's console output goes to <point>/sweep_stdout.log (its own log is <point>/train.log). A point
    counts as finished when train.py exits 0 after training to the end (``train_end`` reason ``num_steps`` or
    ``max_minutes``); one stopped by a signal is resumed on the next run.
    """
    point_dir = os.path.join(sweep_dir, point.name)
    overrides = {**extra, **point.overrides}
    status = point_status(point_dir)
    if status is not None:
        wanted = {"config": same_file_spec(config_spec), "overrides": json.loads(json.dumps(overrides))}
        found = {"config": same_file_spec(status.get("config", "")), "overrides": status.get("overrides")}
        if found != wanted:
            raise ValueError(f"sweep point {point_dir} was trained as {found}, but this sweep asks for {wanted}; "
                             "use another --workdir, or delete that folder to retrain it")
        print(f"[sweep] {point.name}: done already, skipped")
        return True
    os.makedirs(point_dir, exist_ok=True)
    # Under `wandb agent`, make the point's W&B run the one the agent created (train.py reuses this id).
    agent_run_id = os.environ.get("WANDB_RUN_ID")
    if os.environ.get("WANDB_SWEEP_ID") and agent_run_id:
        with open(os.path.join(point_dir, "wandb_run_id"), "w") as f:
            f.write(agent_run_id)
    cmd = train_command(config_spec, point_dir, overrides, group=group, run_name=f"{group}/{point.name}",
                        python=python, train_script=train_script)
    print(f"[sweep] {point.name}: {' '.join(cmd)}", flush=True)
    start = time.time()
    stdout_path = os.path.join(point_dir, "sweep_stdout.log")
    with open(stdout_path, "a") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    wall = time.time() - start
    reason = end_reason(point_dir)
    if rc != 0 or reason not in FINISHED_REASONS:
        print(f"[sweep] {point.name}: train.py exited with {rc} (stop reason {reason}) after {wall:.0f}s; "
              f"see {stdout_path}", flush=True)
        return False
    with open(os.path.join(point_dir, MARKER), "w") as f:
        json.dump({"status": "done", "config": config_spec, "overrides": overrides, "wall_s": wall,
                   "command": cmd}, f, indent=1)
    print(f"[sweep] {point.name}: done in {wall:.0f}s", flush=True)
    return True


def wandb_sweep_yaml(config_spec: str, workdir: str, points: Sequence[Point], *, group: str,
                     extra: Sequence[str] = ()) -> str:
    """A W&B sweep file: a grid over the point names; each agent run calls this script for one point."""
    lines = [
        f"# W&B sweep for {config_spec}: `wandb sweep <this file>`, then `wandb agent <sweep id>` on each machine.",
        "program: scripts/sweep.py",
        "method: grid",
        f"name: {group}",
        "parameters:",
        "  point:",
        "    values:",
    ]
    lines += [f"      - {json.dumps(p.name)}" for p in points]
    lines += ["command:", "  - ${env}", "  - ${interpreter}", "  - ${program}",
              f"  - {json.dumps('--config=' + config_spec)}", f"  - {json.dumps('--workdir=' + workdir)}"]
    lines += [f"  - {json.dumps('--set=' + s)}" for s in extra]
    lines += ["  - ${args}"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------- aggregation
def read_records(path: str) -> list[dict]:
    """Records of a metrics.jsonl file; a truncated last line (killed run) is ignored."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


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
        out.update({k: v for k, v in r.items() if k not in ("time",)})
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


def aggregate(sweep_dir: str, points: Sequence[Point], title: str) -> str:
    """Write README.md, results.csv and the figures for the points found in ``sweep_dir``; returns README path."""
    fields = varying_fields(points) or list(points[0].overrides)[:1]
    summaries = [(p, point_summary(os.path.join(sweep_dir, p.name))) for p in points]
    groups = sorted({g for _, s in summaries for g in s["entropy"]})
    entropy_cols = [f"H {g} L{l}" for g in groups
                    for l in range(max(s["entropy"][g].shape[0] for _, s in summaries if g in s["entropy"]))]
    metric_cols = [c for c in COLUMNS if any(s[c] is not None for _, s in summaries)]
    headers = ["point"] + [f.rsplit(".", 1)[-1] for f in fields] + metric_cols + entropy_cols + ["status"]
    rows = []
    for p, s in summaries:
        ent = []
        for col in entropy_cols:
            _, g, l = col.split(" ")
            arr = s["entropy"].get(g)
            layer = int(l[1:])
            ent.append(float(np.nanmean(arr[layer])) if arr is not None and layer < arr.shape[0] else None)
        rows.append([p.name] + [p.overrides.get(f) for f in fields] + [s[c] for c in metric_cols] + ent
                    + [s["status"]])
    report = Report(sweep_dir, title)
    done = sum(1 for _, s in summaries if s["status"] == "done")
    report.text(f"{done} of {len(points)} points done. Varied: {', '.join(fields)}. Entropy columns: mean "
                "attention entropy (nats) over the heads of each layer, at the last logged step. Metrics no "
                "point has are left out.")
    report.table(headers, rows, csv_name="results.csv")
    _plot_metrics(report, fields, summaries)
    _plot_entropy(report, summaries, groups)
    return report.write()


def _axis_field(fields: Sequence[str]) -> str:
    """The field to put on the x axis: the first varied one that is not a seed."""
    for f in fields:
        if f.rsplit(".", 1)[-1] != "seed":
            return f
    return fields[0]


def _plot_metrics(report: Report, fields: Sequence[str], summaries) -> None:
    xf = _axis_field(fields)
    series = [c for c in ("test BLEU", "valid perplexity") if any(s[c] is not None for _, s in summaries)]
    if not series:
        return
    fig, axes = plt.subplots(1, len(series), figsize=(4.2 * len(series), 3.2), squeeze=False)
    others = [f for f in fields if f != xf]
    for ax, col in zip(axes[0], series):
        lines: dict[tuple, list[tuple[float, float]]] = {}
        for p, s in summaries:
            x, y = _num(p.overrides.get(xf)), s[col]
            if x is None or y is None:
                continue
            lines.setdefault(tuple(p.overrides.get(f) for f in others), []).append((x, y))
        for key, pts in sorted(lines.items(), key=lambda kv: str(kv[0])):
            pts.sort()
            label = ", ".join(f"{f.rsplit('.', 1)[-1]}={v}" for f, v in zip(others, key)) or None
            ax.plot([a for a, _ in pts], [b for _, b in pts], marker="o", label=label)
        xs = sorted({_num(p.overrides.get(xf)) for p, _ in summaries if _num(p.overrides.get(xf)) is not None})
        if xs and xs[0] > 0 and xs[-1] / xs[0] >= 8:
            ax.set_xscale("log", base=2)
        ax.set_xlabel(xf.rsplit(".", 1)[-1])
        ax.set_title(col, fontsize=9)
        if others:
            ax.legend(fontsize=7)
    report.figure(fig, "bleu_perplexity", f"BLEU and perplexity vs {xf}.")


def _plot_entropy(report: Report, summaries, groups: Sequence[str]) -> None:
    with_stats = [(p, s) for p, s in summaries if s["entropy"]]
    panels = [(f"{p.name}\n{g}", s["entropy"].get(g, np.full((1, 1), np.nan))) for g in groups
              for p, s in with_stats]
    if not panels:
        return
    fig = heatmap_grid(panels, ncols=len(with_stats))
    report.figure(fig, "entropy_heatmaps", "Mean attention entropy per layer (rows) and head (columns) at the "
                  "last logged step, one panel per point and attention group.")


# --------------------------------------------------------------------------------------------------- CLI
def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--config", required=True, help="config file with sweep(), optionally ':<arg>'")
    parser.add_argument("--workdir", default=None, help="sweep folder (default runs/sweeps/<sweep name>)")
    parser.add_argument("--point", action="append", default=[], help="run only this point (repeatable)")
    parser.add_argument("--set", action="append", default=[], dest="sets", metavar="FIELD=VALUE",
                        help="override for every point, e.g. train.num_steps=100 (repeatable)")
    parser.add_argument("--group", default=None, help="W&B group (default: the sweep name)")
    parser.add_argument("--list", action="store_true", help="print the points and their commands, run nothing")
    parser.add_argument("--aggregate_only", action="store_true", help="only rebuild the table and plots")
    parser.add_argument("--wandb_sweep", default=None, metavar="YAML", help="write a W&B sweep file and exit")
    parser.add_argument("--train_script", default=None, help="training entry point (default <repo>/train.py)")
    args = parser.parse_args(argv)

    name = sweep_name(args.config)
    group = args.group or name
    workdir_arg = args.workdir or os.path.join("runs", "sweeps", name)
    workdir = os.path.abspath(workdir_arg)
    points = sweep_points(args.config)
    extra = parse_sets(args.sets)
    check_overrides(args.config, points, extra)
    selected = points
    if args.point:
        known = {p.name: p for p in points}
        unknown = [n for n in args.point if n not in known]
        if unknown:
            raise ValueError(f"--point {unknown}: not points of this sweep; expected some of {sorted(known)}")
        selected = [known[n] for n in args.point]

    if args.wandb_sweep:
        with open(args.wandb_sweep, "w") as f:
            f.write(wandb_sweep_yaml(args.config, workdir_arg, points, group=group, extra=args.sets))
        print(f"wrote {args.wandb_sweep}: `wandb sweep {args.wandb_sweep}`, then `wandb agent <id>` per machine")
        return 0
    if args.list:
        for p in selected:
            print(p.name, " ".join(train_command(args.config, os.path.join(workdir, p.name), {**extra, **p.overrides},
                                                 group=group, run_name=f"{group}/{p.name}",
                                                 train_script=args.train_script)))
        return 0
    failed = []
    if not args.aggregate_only:
        os.makedirs(workdir, exist_ok=True)
        for p in selected:
            if not run_point(args.config, workdir, p, extra, group=group, train_script=args.train_script):
                failed.append(p.name)
    path = aggregate(workdir, points, f"Sweep {name}")
    print(f"wrote {path}")
    if failed:
        print(f"[sweep] failed points: {failed}; rerun the same command to retry them", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
