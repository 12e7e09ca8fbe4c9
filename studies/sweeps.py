"""``python -m studies sweep``: run a sweep defined beside its config, then aggregate it into one table and plots.

A sweep is a function ``sweep(arg=None)`` in a config file (next to its ``get_config(arg=None)``) that yields the
points: dicts from dotted config fields to values, e.g.
``{"model.num_heads": 4, "model.qk_dim": 128, "model.v_dim": 128, "seed": 1}``.

    python -m studies sweep --config=configs/table3_heads.py                  # every point in turn on this machine
    python -m studies sweep --config=configs/table3_heads.py:wmt14 --set=train.num_steps=100000   # + overrides
    python -m studies sweep --config=configs/table3_dk.py --point=qk_dim_16-seed_0 --aggregate_only
    python -m studies sweep --config=configs/table3_heads.py:wmt14 --wandb_sweep=table3_heads.yaml  # many machines
    python -m studies sweep --config=configs/table3_dk.py --records=docs/results/table3/points/B

Points run sequentially as ``python train.py --config=<config> --workdir=<workdir>/<point> --config.<field>=<value>
...`` with ``config.wandb.group`` set to the sweep's name (``--in_process``: through ``engine.run`` in this process).
A finished point leaves ``<point>/sweep_point.json`` with ``"status": "done"`` and is skipped when the sweep runs
again; an interrupted point resumes from its checkpoints. ``--records=DIR`` keeps a committed record of every
finished point (``studies.points.point_record``) with its decoded sentences and attention trace beside it: a point
whose record exists is never trained again, and a record made with other settings is refused, naming the point.
Aggregation writes ``<workdir>/README.md``, ``results.csv``, ``metrics.png`` (the task's metrics, one line per
varied setting, seeds aggregated as mean and range) and ``entropy_heatmaps.png`` (attention entropy per layer and
head). While a point trains, a line per minute gives its settings, step, loss and time left.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Optional, Sequence

import numpy as np

from studies.points import (COLUMNS, Point, _num, check_overrides, parse_sets, point_summary, run_point, sweep_name,
                            sweep_points, train_command, varying_fields, wandb_sweep_yaml)
from studies.report import Report, heatmap_grid, plt

PLOTTED = ("test BLEU", "valid perplexity", "valid accuracy", "train loss")  # the metrics a figure may show


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


def _is_seed(field: str) -> bool:
    return field.rsplit(".", 1)[-1] == "seed"


def _line_fields(fields: Sequence[str], xf: str, summaries) -> list[str]:
    """The varied non-seed fields besides ``xf`` that are not a function of it (``v_dim = d_model / num_heads``
    follows the heads: a line per value of it would be a line per point)."""
    out = []
    for f in fields:
        if f == xf or _is_seed(f):
            continue
        by_x: dict = {}
        for p, _ in summaries:
            by_x.setdefault(str(p.overrides.get(xf)), set()).add(str(p.overrides.get(f)))
        if any(len(v) > 1 for v in by_x.values()):
            out.append(f)
    return out


def metric_lines(fields: Sequence[str], summaries, column: str) -> tuple[str, dict[tuple, list[tuple]]]:
    """(x field, {values of the other non-seed fields: [(x, mean, lo, hi, seeds)]}): ``column`` against the
    first varied non-seed field, one line per setting of the other non-seed fields, the seeds of each x
    aggregated (mean, min, max)."""
    xf = _axis_field(fields)
    others = _line_fields(fields, xf, summaries)
    cells: dict[tuple, dict[Any, list[float]]] = {}
    for p, s in summaries:
        x, y = p.overrides.get(xf), s[column]
        if y is None:
            continue
        cells.setdefault(tuple(p.overrides.get(f) for f in others), {}).setdefault(x, []).append(float(y))
    lines = {}
    for key, by_x in cells.items():
        pts = [(x, float(np.mean(v)), min(v), max(v), len(v)) for x, v in by_x.items()]
        lines[key] = sorted(pts, key=lambda t: (_num(t[0]) is None, _num(t[0]) or 0, str(t[0])))
    return xf, dict(sorted(lines.items(), key=lambda kv: str(kv[0])))


def _plot_metrics(report: Report, fields: Sequence[str], summaries) -> None:
    series = [c for c in PLOTTED if any(s[c] is not None for _, s in summaries)]
    if not series:
        return
    fig, axes = plt.subplots(1, len(series), figsize=(4.2 * len(series), 3.2), squeeze=False)
    xf = _axis_field(fields)
    others = _line_fields(fields, xf, summaries)
    numeric = all(_num(p.overrides.get(xf)) is not None for p, _ in summaries)
    for ax, col in zip(axes[0], series):
        _, lines = metric_lines(fields, summaries, col)
        for key, pts in lines.items():
            xs = [_num(t[0]) if numeric else str(t[0]) for t in pts]
            label = ", ".join(f"{f.rsplit('.', 1)[-1]}={v}" for f, v in zip(others, key)) or None
            ax.plot(xs, [t[1] for t in pts], marker="o", label=label)
            if any(t[4] > 1 for t in pts):
                ax.fill_between(xs, [t[2] for t in pts], [t[3] for t in pts], alpha=0.2)
        if numeric:
            xs = sorted({_num(p.overrides.get(xf)) for p, _ in summaries})
            if xs and xs[0] > 0 and xs[-1] / xs[0] >= 8:
                ax.set_xscale("log", base=2)
        ax.set_xlabel(xf.rsplit(".", 1)[-1])
        ax.set_title(col, fontsize=9)
        if others:
            ax.legend(fontsize=7)
    seeds = any(_is_seed(f) for f in fields)
    report.figure(fig, "metrics", f"{', '.join(series)} against {xf.rsplit('.', 1)[-1]}, one line per setting"
                  + (" (mean over seeds; band: the seeds' range)." if seeds else "."))


def _plot_entropy(report: Report, summaries, groups: Sequence[str]) -> None:
    with_stats = [(p, s) for p, s in summaries if s["entropy"]]
    panels = [(f"{p.name}\n{g}", s["entropy"].get(g, np.full((1, 1), np.nan))) for g in groups
              for p, s in with_stats]
    if not panels:
        return
    fig = heatmap_grid(panels, ncols=len(with_stats))
    report.figure(fig, "entropy_heatmaps", "Mean attention entropy per layer (rows) and head (columns) at the "
                  "last logged step, one panel per point and attention group.")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m studies sweep``: train the sweep's points (or list them, or write a W&B sweep file), then aggregate;
    0 when every selected point finished."""
    parser = argparse.ArgumentParser(prog="python -m studies sweep", description="Run a sweep defined beside its "
                                     "config, then aggregate it into one table and plots.",
                                     epilog="See studies/sweeps.py and docs/studies.md.")
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
    parser.add_argument("--in_process", action="store_true", help="train each point through engine.run in this "
                        "process instead of a train.py subprocess (short points)")
    parser.add_argument("--records", default=None, metavar="DIR",
                        help="keep a record of every finished point as DIR/<point>.json, its decoded sentences as "
                             "DIR/<point>.<split>.txt (commit them: a point with a record is not trained again, "
                             "even without its run folder)")
    args = parser.parse_args(argv)

    name = sweep_name(args.config)
    group = args.group or name
    workdir_arg = args.workdir or os.path.join("runs", "sweeps", name)
    workdir = os.path.abspath(workdir_arg)
    points = sweep_points(args.config)
    extra = parse_sets(args.sets)
    selected = points
    if args.point:
        known = {p.name: p for p in points}
        unknown = [n for n in args.point if n not in known]
        if unknown:
            raise ValueError(f"--point {unknown}: not points of this sweep; expected some of {sorted(known)}")
        selected = [known[n] for n in args.point]
    check_overrides(args.config, selected, extra)

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
            record = os.path.join(args.records, f"{p.name}.json") if args.records else None
            if not run_point(args.config, workdir, p, extra, group=group, train_script=args.train_script,
                             record=record, in_process=args.in_process):
                failed.append(p.name)
    path = aggregate(workdir, points, f"Sweep {name}")
    print(f"wrote {path}")
    if failed:
        print(f"[sweep] failed points: {failed}; rerun the same command to retry them", file=sys.stderr)
        return 1
    return 0

