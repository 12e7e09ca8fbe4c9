"""curves.csv and loss.png of the bf16 vs f32 runs from their metrics.jsonl; prints the measured gaps.

    python docs/results/mixed_precision/make_report.py RUN_F32_DIR RUN_BF16_DIR
"""
from __future__ import annotations

import csv
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
KEYS = ("train/loss", "train/nll", "train/grad_norm", "attn/encoder_self/entropy", "attn/decoder_self/entropy",
        "attn/cross/entropy", "attn/encoder_self/max_logit", "perf/tokens_per_sec")


def read_run(workdir: str) -> dict[int, dict]:
    """step -> the logged values of KEYS at that step (training and attention-statistics records merged)."""
    out: dict[int, dict] = {}
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            step = rec.get("attn/step", rec.get("step"))
            if "step" not in rec or step is None:
                continue
            vals = {k: rec[k] for k in KEYS if k in rec}
            if vals:
                out.setdefault(int(step) if "attn/step" not in rec else int(rec["attn/step"]), {}).update(vals)
    return out


def main(f32_dir: str, bf16_dir: str) -> None:
    runs = {"float32": read_run(f32_dir), "bfloat16": read_run(bf16_dir)}
    steps = sorted(set(runs["float32"]) | set(runs["bfloat16"]))
    with open(os.path.join(HERE, "curves.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step"] + [f"{dt}:{k}" for dt in runs for k in KEYS])
        for s in steps:
            w.writerow([s] + [runs[dt].get(s, {}).get(k, "") for dt in runs for k in KEYS])
    loss_steps = [s for s in steps if all("train/loss" in runs[dt].get(s, {}) for dt in runs)]
    a = np.array([runs["float32"][s]["train/loss"] for s in loss_steps])
    b = np.array([runs["bfloat16"][s]["train/loss"] for s in loss_steps])
    gap = b - a
    last = [i for i, s in enumerate(loss_steps) if s > loss_steps[-1] - 50]
    print(f"logged points: {len(loss_steps)} (every {loss_steps[1] - loss_steps[0]} steps, up to {loss_steps[-1]})")
    print(f"max |gap| {np.max(np.abs(gap)):.4f} at step {loss_steps[int(np.argmax(np.abs(gap)))]}; "
          f"mean |gap| {np.mean(np.abs(gap)):.4f}; mean gap {np.mean(gap):+.4f}; "
          f"mean gap over the last 50 steps {np.mean(gap[last]):+.4f}")
    print(f"final loss f32 {a[-1]:.4f}, bf16 {b[-1]:.4f}; relative max |gap| {np.max(np.abs(gap) / a):.2%}")
    for dt in runs:
        tok = [v["perf/tokens_per_sec"] for v in runs[dt].values() if "perf/tokens_per_sec" in v]
        print(f"{dt}: median tokens/s {np.median(tok):.0f} (shared 2-core CPU)")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(7, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    ax.plot(loss_steps, a, label="float32", lw=1.5)
    ax.plot(loss_steps, b, label="bfloat16 compute (float32 params)", lw=1.5, ls="--")
    ax.set_ylabel("training loss (label-smoothed)")
    ax.set_title("configs/translation.py, seed 0: bf16 vs f32")
    ax.legend()
    ax2.plot(loss_steps, gap, color="k", lw=1)
    ax2.axhline(0, color="grey", lw=0.5)
    ax2.set_ylabel("bf16 - f32")
    ax2.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(os.path.join(HERE, "loss.png"), dpi=110)


if __name__ == "__main__":
    main(*sys.argv[1:3])
