"""Reproduction 6: induction heads and the in-context-learning phase change (Olsson et al. 2022).

An induction head completes ``[A][B] ... [A] -> [B]``: it needs a previous-token head in an earlier layer
that writes "my predecessor was A" into each position, and a head in a later layer that matches it. So an
attention-only model with 2 layers can form one and a 1-layer model cannot. Olsson et al. measure it with the
in-context-learning score: loss late in the context minus loss early in the context (more negative = the
model uses its context more), and see it drop abruptly — a phase change — during training.

This trains attention-only decoders (MLP blocks zeroed and frozen) with 1 and 2 layers on the induction
task (random tokens with repeated segments) and tracks the ICL score on held-out sequences over training.

    python scripts/repro_induction.py          # full: a few minutes on 2 CPU cores -> docs/results/induction/
    python scripts/repro_induction.py --quick  # seconds; for tests
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

import numpy as np

from _report import Report, environment_line, plt
from _synthetic import induction_task, tiny_model_config, train_decoder

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LR = 3e-3


def icl_score(position_loss: np.ndarray, early: tuple[int, int], late: tuple[int, int]) -> float:
    """Mean loss over positions [late) minus mean loss over positions [early) (NaN positions ignored)."""
    return float(np.nanmean(position_loss[late[0]:late[1]]) - np.nanmean(position_loss[early[0]:early[1]]))


def phase_change_step(steps: Sequence[int], scores: Sequence[float]) -> Optional[int]:
    """The step where the ICL score falls fastest between two consecutive measurements (None if it never falls)."""
    if len(scores) < 2:
        return None
    drops = np.diff(np.asarray(scores, np.float64))
    i = int(np.argmin(drops))
    return int(steps[i + 1]) if drops[i] < 0 else None


def main(argv: Optional[Sequence[str]] = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, runs in seconds (for tests)")
    parser.add_argument("--out", default=None, help="report folder (default docs/results/induction, or "
                        "runs/repro/induction_quick with --quick)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None)
    args = parser.parse_args(argv)
    out = args.out or os.path.join(REPO, "runs/repro/induction_quick" if args.quick else "docs/results/induction")

    steps = args.steps or (4 if args.quick else 3000)
    every = max(1, steps // (2 if args.quick else 30))
    eval_batches = 1 if args.quick else 8
    task = induction_task(seq_len=16 if args.quick else 64, vocab_size=16 if args.quick else 64,
                          batch_size=8 if args.quick else 16, segment_len=4 if args.quick else 16)
    T = task.seq_len
    early, late = (T // 8, T // 4), (T - T // 4, T)  # skip the first positions: almost no context there
    runs = {}
    for layers in (1, 2):
        model_cfg = tiny_model_config(vocab_size=task.vocab_size, d_model=16 if args.quick else 64, num_heads=4,
                                      num_layers=layers, max_len=T, position="rope")
        hist = train_decoder(model_cfg, task, steps=steps, learning_rate=LR, seed=args.seed, log_every=every,
                             attention_only=True, position_loss_every=every, eval_batches=eval_batches)
        scores = [icl_score(p, early, late) for p in hist["position_loss"]]
        runs[layers] = {"hist": hist, "scores": scores,
                        "phase": phase_change_step(hist["position_loss_step"], scores)}
        print(f"{layers} layer(s): final ICL score {scores[-1]:.3f}, eval loss {hist['eval_loss']:.3f} "
              f"({hist['seconds']:.0f}s)", flush=True)

    report = Report(out, "Induction heads: in-context-learning score, 1 vs 2 attention-only layers")
    report.text(environment_line() + (" Quick mode (tiny sizes)." if args.quick else ""))
    report.text(
        f"Attention-only decoders (MLP blocks zeroed and frozen), d_model {model_cfg['d_model']}, 4 heads, "
        f"rotary positions, on the induction task (random tokens with one segment of {task.segment_len} "
        f"distinct tokens repeated later; sequence {T}, vocabulary {task.vocab_size}, batch {task.batch_size}; "
        f"trained on the repeat's targets); AdamW lr {LR:g} with warmup and cosine decay, {steps} steps, "
        f"seed {args.seed}. "
        f"ICL score = mean held-out loss over positions {late[0]}-{late[1] - 1} minus mean over positions "
        f"{early[0]}-{early[1] - 1}, measured every {every} steps on {eval_batches * task.batch_size} held-out "
        "sequences "
        "(loss over every target, not only the repeat)."
    )
    rows = []
    for layers, r in runs.items():
        h = r["hist"]
        rows.append([layers, h["params"], r["scores"][0], min(r["scores"]), r["scores"][-1], r["phase"],
                     h["eval_loss"], h["eval_accuracy"]])
    report.table(["attention layers", "parameters", "ICL score (start)", "ICL score (min)", "ICL score (end)",
                  "steepest drop at step", "eval loss (end)", "eval accuracy (end)"], rows, csv_name="summary.csv")

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.2))
    for layers, r in runs.items():
        h = r["hist"]
        axes[0].plot(h["position_loss_step"], r["scores"], marker=".", label=f"{layers} layer(s)")
        axes[1].plot(h["step"], h["loss"], label=f"{layers} layer(s)")
        if h["eval_position_loss"] is not None:
            axes[2].plot(np.arange(T), h["eval_position_loss"], label=f"{layers} layer(s)")
    axes[0].set_title("ICL score (late - early loss)", fontsize=9)
    axes[0].set_xlabel("step")
    axes[1].set_title("train loss", fontsize=9)
    axes[1].set_xlabel("step")
    axes[2].set_title("held-out loss by position (end of training)", fontsize=9)
    axes[2].set_xlabel("position")
    for ax in axes:
        ax.legend(fontsize=7)
    report.figure(fig, "icl_score", "In-context-learning score over training, training loss, and the loss per "
                  "position at the end, for 1- and 2-layer attention-only models.")
    report.section("What the data say")
    one, two = runs[1], runs[2]
    report.text("\n".join([
        f"- 1 layer: ICL score {one['scores'][0]:.3f} at the start, {one['scores'][-1]:.3f} at the end "
        f"(held-out accuracy {one['hist']['eval_accuracy']:.3f}).",
        f"- 2 layers: ICL score {two['scores'][0]:.3f} at the start, {two['scores'][-1]:.3f} at the end "
        f"(held-out accuracy {two['hist']['eval_accuracy']:.3f}); steepest drop at step {two['phase']}.",
        f"- End-of-training difference (2 layers minus 1 layer): {two['scores'][-1] - one['scores'][-1]:.3f} nats.",
    ]))
    path = report.write()
    print(f"wrote {path}")
    return path


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
