"""Reproduction 1: Vaswani et al. (2017) Table 3 rows (A) and (B) at CPU scale, with seed spread.

Rows (A) vary the number of heads at constant compute (d_k = d_v = d_model / h); the paper finds one head
0.9 BLEU worse than the best setting and too many heads also worse. Rows (B) reduce d_k from the base (to
1/2 and 1/4 of it) at 8 heads with d_v kept, and find that it hurts. This runs both sweeps (``configs/table3_heads.py`` and
``configs/table3_dk.py``) on the embedded corpus through ``scripts/sweep.py`` with several seeds and
reports test BLEU and validation perplexity as mean +- standard deviation over seeds.

Each point trains with ``train.py`` in ``<workdir>/<sweep>/<point>``; finished points are skipped on a rerun,
so an interrupted reproduction continues where it stopped.

    python scripts/repro_table3.py                       # 3 seeds, 2,400 steps per point, d_model 128
    python scripts/repro_table3.py --d_model=256         # the wider model -> docs/results/table3_d256
    python scripts/repro_table3.py --quick               # tiny model, a handful of steps; for tests
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

import numpy as np

from _report import Report, environment_line, mean_std, plt
import sweep as sweep_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SWEEPS = {"A": "configs/table3_heads.py", "B": "configs/table3_dk.py"}
QUICK = {"A": ("model.num_heads", (1, 8))}  # the points of rows (A) --quick runs (rows (B): both)


def run_sweep(config_spec: str, workdir: str, extra: dict, point_filter: Optional[Sequence[str]] = None,
              train_script: Optional[str] = None) -> list[tuple[sweep_lib.Point, dict]]:
    """Run (or resume) one sweep and return (point, summary) for its points."""
    points = sweep_lib.sweep_points(config_spec)
    sweep_lib.check_overrides(config_spec, points, extra)
    if point_filter is not None:
        points = [p for p in points if p.name in point_filter]
    group = sweep_lib.sweep_name(config_spec)
    os.makedirs(workdir, exist_ok=True)
    for p in points:
        sweep_lib.run_point(config_spec, workdir, p, extra, group=group, train_script=train_script)
    sweep_lib.aggregate(workdir, points, f"Sweep {group}")
    return [(p, sweep_lib.point_summary(os.path.join(workdir, p.name))) for p in points]


def shared_points(rows_a, d_model: int) -> list[tuple[sweep_lib.Point, dict]]:
    """The h = 8 points of rows (A) as the d_k = d_model / 8 points of rows (B) (the same configuration)."""
    return [(sweep_lib.Point(p.name, {"model.qk_dim": d_model // 8, "seed": p.overrides["seed"]}), s)
            for p, s in rows_a if p.overrides["model.num_heads"] == 8]


def by_value(results, field: str, metric: str) -> dict:
    """value of ``field`` -> list over seeds of ``metric`` (finished points only)."""
    out: dict = {}
    for p, s in results:
        if s["status"] == "done" and s[metric] is not None:
            out.setdefault(p.overrides[field], []).append(s[metric])
    return dict(sorted(out.items()))


def spread_plot(ax, groups: dict, xlabel: str, ylabel: str) -> None:
    xs = list(groups)
    means = [float(np.mean(v)) for v in groups.values()]
    stds = [float(np.std(v, ddof=1)) if len(v) > 1 else 0.0 for v in groups.values()]
    ax.errorbar(range(len(xs)), means, yerr=stds, marker="o", capsize=3)
    for i, v in enumerate(groups.values()):
        ax.scatter([i] * len(v), v, s=8, color="gray", zorder=3)
    ax.set_xticks(range(len(xs)), [str(x) for x in xs])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)


def compare(groups: dict, a, b, name: str, higher_is_better: bool) -> str:
    """'a vs b: difference of means, and whether it exceeds the seed spread'."""
    if a not in groups or b not in groups:
        return f"{name}: not enough finished points to compare {a} and {b}."
    va, vb = np.asarray(groups[a]), np.asarray(groups[b])
    diff = float(va.mean() - vb.mean())
    spread = max(float(va.std(ddof=1)) if va.size > 1 else 0.0, float(vb.std(ddof=1)) if vb.size > 1 else 0.0)
    worse = (diff < 0) if higher_is_better else (diff > 0)
    overlap = min(va.max(), vb.max()) >= max(va.min(), vb.min())
    return (f"{name} {a} vs {b}: {va.mean():.3g} vs {vb.mean():.3g} (difference {diff:+.3g}; largest seed std "
            f"{spread:.2g}; n = {va.size}, {vb.size}); {a} is {'worse' if worse else 'not worse'}"
            + (", but the seed ranges overlap." if overlap else ", and the seed ranges do not overlap."))


def main(argv: Optional[Sequence[str]] = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny model, a few steps, 2 points per row, 1 seed")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2400, help="training steps per point (CPU scale)")
    parser.add_argument("--d_model", type=int, default=128, help="model width (CPU scale: 128 or 256)")
    parser.add_argument("--minutes", type=float, default=0.0, help="optional time cap per point (0 = none)")
    parser.add_argument("--test_examples", type=int, default=0, help="test sentences decoded per point (0 = all)")
    parser.add_argument("--workdir", default=None, help="sweep folders (default runs/repro/table3[_quick])")
    parser.add_argument("--out", default=None, help="report folder (default docs/results/table3, or "
                        "runs/repro/table3_quick with --quick)")
    parser.add_argument("--train_script", default=None, help="training entry point (default <repo>/train.py)")
    args = parser.parse_args(argv)
    tag = "table3_quick" if args.quick else "table3" + ("" if args.d_model == 128 else f"_d{args.d_model}")
    workdir = os.path.abspath(args.workdir or os.path.join(REPO, "runs/repro", tag))
    out = args.out or os.path.join(REPO, "runs/repro" if args.quick else "docs/results", tag)

    config_arg = f"seeds={1 if args.quick else args.seeds}" + (
        ",quick" if args.quick else f",steps={args.steps},minutes={args.minutes:g},test_examples={args.test_examples},"
                                    f"d_model={args.d_model}")
    base = sweep_lib.load_config_module(os.path.join(REPO, SWEEPS["A"])).get_config(config_arg)
    d_model = base.model.d_model
    results = {}
    for row, path in SWEEPS.items():
        spec = f"{os.path.join(REPO, path)}:{config_arg}"
        points = sweep_lib.sweep_points(spec)
        keep = [p.name for p in points]
        if args.quick and row in QUICK:
            field, values = QUICK[row]
            keep = [p.name for p in points if p.overrides[field] in values]
        results[row] = run_sweep(spec, os.path.join(workdir, row), {}, keep, args.train_script)
        if row == "B":  # the base d_k = d_model / 8 at 8 heads is the h = 8 point of rows (A): trained once
            results[row] += shared_points(results["A"], d_model)

    report = Report(out, "Vaswani et al. Table 3 rows (A) and (B) at CPU scale")
    report.text(environment_line() + (" Quick mode (tiny model, few steps)." if args.quick else ""))
    report.text(
        f"Embedded corpus, d_model {base.model.d_model}, {base.model.num_encoder_layers}+"
        f"{base.model.num_decoder_layers} layers, d_ff {base.model.d_ff}; each point trains for "
        f"{base.train.num_steps} steps" + (f" (capped at {base.train.max_minutes:g} minutes)" if
                                             base.train.max_minutes else "") + ", then decodes "
        f"{base.eval.split_examples or 'all'} test sentences ({base.eval.decode}). "
        f"Seeds: {1 if args.quick else args.seeds}. Per-point tables: `{os.path.relpath(workdir, REPO)}/A/README.md` "
        "and `.../B/README.md` (rows (B) reuse the h = 8 points of rows (A) for d_k = d_model / 8)."
    )
    verdicts = []
    fig, axes = plt.subplots(2, 2, figsize=(9, 6))
    for r, (row, field, label) in enumerate((("A", "model.num_heads", "num_heads (d_k = d_v = d_model/h)"),
                                             ("B", "model.qk_dim", "qk_dim (h = 8, d_v kept)"))):
        res = results[row]
        bleu = by_value(res, field, "test BLEU")
        ppl = by_value(res, field, "valid perplexity")
        report.section(f"Rows ({row}): {label}")
        rows = []
        for value in sorted({p.overrides[field] for p, _ in res}):
            sub = [s for p, s in res if p.overrides[field] == value]
            params = next((s["parameters"] for s in sub if s["parameters"] is not None), None)
            rows.append([value, params, mean_std(bleu.get(value, [])), mean_std(ppl.get(value, [])),
                         sum(1 for s in sub if s["status"] == "done")])
        report.table([field.rsplit(".", 1)[-1], "parameters", "test BLEU", "valid perplexity", "finished seeds"],
                     rows, csv_name=f"rows_{row}.csv")
        if bleu:
            spread_plot(axes[r, 0], bleu, label, "test BLEU")
        if ppl:
            spread_plot(axes[r, 1], ppl, label, "valid perplexity")
        if row == "A":
            verdicts.append("- " + compare(bleu, 1, 8, "Test BLEU, heads", True))
            verdicts.append("- " + compare(ppl, 1, 8, "Validation perplexity, heads", False))
            if 32 in bleu:
                verdicts.append("- " + compare(bleu, 32, 8, "Test BLEU, heads", True))
        else:
            verdicts.append("- " + compare(bleu, 16, 64, "Test BLEU, d_k", True))
            verdicts.append("- " + compare(ppl, 16, 64, "Validation perplexity, d_k", False))
    fig.tight_layout()
    report.figure(fig, "table3", "Test BLEU and validation perplexity per setting; error bars: std over seeds, "
                  "grey dots: single seeds.")
    report.section("What the data say")
    report.text("The paper (base model, 100k steps on WMT14 EN-DE): one head is 0.9 BLEU below eight; 32 heads "
                "are also worse; d_k 16 or 32 instead of 64 costs BLEU (rows B). Here:\n" + "\n".join(verdicts))
    path = report.write()
    print(f"wrote {path}")
    return path


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
