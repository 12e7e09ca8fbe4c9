"""curves.csv, seeds.csv and loss.png of bf16 vs f32 runs of the main config (one pair of runs per seed) from
their metrics.jsonl; prints the measured gaps per seed and over seeds.

    python docs/results/mixed_precision/make_report.py F32_DIR BF16_DIR [F32_DIR BF16_DIR ...] [--out DIR]
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TOLERANCE = 0.01  # nats: the largest |bf16 - f32| training-loss gap allowed at any logged step
GROUPS = ("encoder_self", "decoder_self", "cross")
ENTROPY_KEYS = tuple(f"attn/{g}/entropy" for g in GROUPS)
KEYS = ("train/loss", "train/nll", "train/grad_norm", *ENTROPY_KEYS, "attn/encoder_self/max_logit",
        "perf/tokens_per_sec")
SEED_HEADERS = ("seed", "logged_steps", "max_abs_loss_gap", "at_step", "mean_abs_loss_gap", "mean_loss_gap",
                "final_loss_f32", "final_loss_bf16", "max_rel_loss_gap", "max_abs_entropy_gap",
                "max_abs_encoder_max_logit_gap", "max_abs_grad_norm_gap", "health_warnings_f32",
                "health_warnings_bf16", "non_finite_f32", "non_finite_bf16", "median_tokens_per_sec_f32",
                "median_tokens_per_sec_bf16", "within_tolerance")


def read_run(workdir: str) -> tuple[dict[int, dict], dict[str, int]]:
    """(step -> the logged values of KEYS at that step, training and attention-statistics records merged;
    event name -> count for health warnings and non-finite steps)."""
    out: dict[int, dict] = {}
    events = {"health_warning": 0, "non_finite": 0}
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("event") in events:
                events[rec["event"]] += 1
                continue
            if "step" not in rec:
                continue
            vals = {k: rec[k] for k in KEYS if k in rec}
            if vals:
                out.setdefault(int(rec.get("attn/step", rec["step"])), {}).update(vals)
    return out, events


def seed_of(workdir: str) -> int:
    with open(os.path.join(workdir, "config.json")) as f:
        return int(json.load(f)["seed"])


def _max_gap(a: dict, b: dict, keys: tuple[str, ...]) -> float:
    gaps = [abs(b[s][k] - a[s][k]) for s in a if s in b for k in keys if k in a[s] and k in b[s]]
    return max(gaps) if gaps else float("nan")


def compare(f32_dir: str, bf16_dir: str) -> tuple[dict, dict]:
    """(a row keyed by SEED_HEADERS, the loss curves {"steps", "f32", "bf16"}) of one seed's pair of runs."""
    (a, ev_a), (b, ev_b) = read_run(f32_dir), read_run(bf16_dir)
    seed = seed_of(f32_dir)
    if seed_of(bf16_dir) != seed:
        raise SystemExit(f"{f32_dir} has seed {seed} but {bf16_dir} has seed {seed_of(bf16_dir)}; expected pairs "
                         "of the same seed")
    steps = [s for s in sorted(a) if "train/loss" in a[s] and "train/loss" in b.get(s, {})]
    if len(steps) < 2:
        raise SystemExit(f"{f32_dir} and {bf16_dir} share {len(steps)} logged training steps; expected a full run")
    la = np.array([a[s]["train/loss"] for s in steps])
    lb = np.array([b[s]["train/loss"] for s in steps])
    gap = lb - la
    worst = int(np.argmax(np.abs(gap)))
    tok = [np.median([v["perf/tokens_per_sec"] for v in r.values() if "perf/tokens_per_sec" in v]) for r in (a, b)]
    row = {"seed": seed, "logged_steps": len(steps), "max_abs_loss_gap": float(np.abs(gap).max()),
           "at_step": steps[worst], "mean_abs_loss_gap": float(np.abs(gap).mean()), "mean_loss_gap": float(gap.mean()),
           "final_loss_f32": float(la[-1]), "final_loss_bf16": float(lb[-1]),
           "max_rel_loss_gap": float((np.abs(gap) / la).max()), "max_abs_entropy_gap": _max_gap(a, b, ENTROPY_KEYS),
           "max_abs_encoder_max_logit_gap": _max_gap(a, b, ("attn/encoder_self/max_logit",)),
           "max_abs_grad_norm_gap": _max_gap(a, b, ("train/grad_norm",)),
           "health_warnings_f32": ev_a["health_warning"], "health_warnings_bf16": ev_b["health_warning"],
           "non_finite_f32": ev_a["non_finite"], "non_finite_bf16": ev_b["non_finite"],
           "median_tokens_per_sec_f32": float(tok[0]), "median_tokens_per_sec_bf16": float(tok[1]),
           "within_tolerance": bool(np.abs(gap).max() <= TOLERANCE)}
    return row, {"steps": steps, "f32": la, "bf16": lb, "runs": (a, b)}


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", help="train.py workdirs: float32 then bfloat16, one pair per seed")
    ap.add_argument("--out", default=HERE, help="where seeds.csv, curves.csv and loss.png go (default: here)")
    a = ap.parse_args(argv)
    dirs, out = a.dirs, a.out
    if len(dirs) % 2:
        raise SystemExit(f"got {len(dirs)} run directories; expected pairs: F32_DIR BF16_DIR [F32_DIR BF16_DIR ...]")
    for d in dirs:
        if not os.path.isfile(os.path.join(d, "metrics.jsonl")):
            raise SystemExit(f"{d}/metrics.jsonl not found; expected a train.py workdir")
    pairs = [compare(dirs[i], dirs[i + 1]) for i in range(0, len(dirs), 2)]
    pairs.sort(key=lambda p: p[0]["seed"])
    with open(os.path.join(out, "seeds.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=SEED_HEADERS)
        w.writeheader()
        w.writerows(row for row, _ in pairs)
    with open(os.path.join(out, "curves.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["seed", "step"] + [f"{dt}:{k}" for dt in ("float32", "bfloat16") for k in KEYS])
        for row, c in pairs:
            runs = c["runs"]
            for s in sorted(set(runs[0]) | set(runs[1])):
                w.writerow([row["seed"], s] + [r.get(s, {}).get(k, "") for r in runs for k in KEYS])

    for row, _ in pairs:
        print(f"seed {row['seed']}: max |gap| {row['max_abs_loss_gap']:.4f} at step {row['at_step']}; mean |gap| "
              f"{row['mean_abs_loss_gap']:.4f}; mean gap {row['mean_loss_gap']:+.4f}; final loss f32 "
              f"{row['final_loss_f32']:.4f}, bf16 {row['final_loss_bf16']:.4f}; relative max |gap| "
              f"{row['max_rel_loss_gap']:.2%}; entropy {row['max_abs_entropy_gap']:.3f}, max logit "
              f"{row['max_abs_encoder_max_logit_gap']:.3f}, grad norm {row['max_abs_grad_norm_gap']:.4f}; "
              f"health warnings {row['health_warnings_f32']}/{row['health_warnings_bf16']}, non-finite "
              f"{row['non_finite_f32']}/{row['non_finite_bf16']}; tokens/s "
              f"{row['median_tokens_per_sec_f32']:.0f}/{row['median_tokens_per_sec_bf16']:.0f}")
    for name in ("max_abs_loss_gap", "mean_abs_loss_gap", "mean_loss_gap", "max_abs_entropy_gap",
                 "max_abs_encoder_max_logit_gap", "max_abs_grad_norm_gap"):
        v = np.array([row[name] for row, _ in pairs])
        print(f"{name}: {v.mean():.4f} ± {v.std(ddof=1) if len(v) > 1 else 0.0:.4f} over {len(v)} seed(s), "
              f"max {v.max():.4f}")
    inside = sum(row["within_tolerance"] for row, _ in pairs)
    print(f"within the {TOLERANCE} nats tolerance at every logged step: {inside} of {len(pairs)} seeds")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(7, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    for i, (row, c) in enumerate(pairs):
        color = f"C{i}"
        ax.plot(c["steps"], c["f32"], color=color, lw=1.2, label=f"seed {row['seed']} float32")
        ax.plot(c["steps"], c["bf16"], color=color, lw=1.2, ls="--", label=f"seed {row['seed']} bfloat16")
        ax2.plot(c["steps"], c["bf16"] - c["f32"], color=color, lw=1)
    ax.set_ylabel("training loss (label-smoothed)")
    ax.set_title(f"configs/translation.py: bf16 compute vs f32, {len(pairs)} seed(s)")
    ax.legend(fontsize=7, ncol=2)
    for y in (-TOLERANCE, 0, TOLERANCE):
        ax2.axhline(y, color="grey", lw=0.5, ls=":" if y else "-")
    ax2.set_ylabel("bf16 - f32")
    ax2.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "loss.png"), dpi=110)


if __name__ == "__main__":
    main(sys.argv[1:])
