"""Reproduction 6: induction heads and the in-context-learning phase change (Olsson et al. 2022).

An induction head completes ``[A][B] ... [A] -> [B]``: it needs a previous-token head in an earlier layer
that writes "my predecessor was A" into each position, and a head in a later layer that matches it. So an
attention-only model with 2 layers can form one and a 1-layer model cannot. Olsson et al. measure it with the
in-context-learning score: loss late in the context minus loss early in the context (more negative = the
model uses its context more), and see it drop abruptly — a phase change — during training.

This trains attention-only decoders (no MLP blocks) with 1 and 2 layers, as language models
(loss on every token), on sequences made of a block of random distinct tokens repeated until the sequence
is full (``induction_layout="repeat"``; the block length varies per sequence so no fixed-offset positional
head can solve it), and tracks the ICL score on held-out sequences over training.

The experiment is ``configs/repro_induction.py`` (sizes, ``:quick``, the layers x seeds sweep); every run goes
through ``engine.run``.

    python scripts/repro_induction.py          # full: about 8 minutes on one CPU core -> docs/results/induction/
    python scripts/repro_induction.py --quick  # seconds; for tests
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Optional, Sequence

import numpy as np

from _report import Report, environment_line, mean_std, plt
from _runs import config_path, load, points, run_point

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def icl_score(position_loss: np.ndarray, early: tuple[int, int], late: tuple[int, int]) -> float:
    """Mean loss over positions [late) minus mean loss over positions [early) (NaN positions ignored).

    position_loss: [T] held-out loss per sequence position."""
    return float(np.nanmean(position_loss[late[0]:late[1]]) - np.nanmean(position_loss[early[0]:early[1]]))


def phase_change_step(steps: Sequence[int], scores: Sequence[float]) -> Optional[int]:
    """The step where the ICL score falls fastest between two consecutive measurements (None if it never falls)."""
    if len(scores) < 2:
        return None
    drops = np.diff(np.asarray(scores, np.float64))
    i = int(np.argmin(drops))
    return int(steps[i + 1]) if drops[i] < 0 else None


def transition(steps: Sequence[int], scores: Sequence[float], lo: float = 0.1,
               hi: float = 0.9) -> tuple[Optional[int], Optional[int]]:
    """First steps at which the ICL score has covered ``lo`` and ``hi`` of its total fall from the first
    measurement to the lowest one (None, None if it never falls). A small gap = an abrupt change."""
    s = np.asarray(scores, np.float64)
    if len(s) < 2 or not np.all(np.isfinite(s)) or s.min() >= s[0]:
        return None, None
    fall = (s[0] - s) / (s[0] - s.min())
    return int(steps[int(np.argmax(fall >= lo))]), int(steps[int(np.argmax(fall >= hi))])


def main(argv: Optional[Sequence[str]] = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, runs in seconds (for tests)")
    parser.add_argument("--out", default=None, help="report folder (default docs/results/induction, or "
                        "runs/repro/induction_quick with --quick)")
    parser.add_argument("--seeds", default=None, help="comma-separated seeds (default 0,1; 0 with --quick)")
    parser.add_argument("--steps", type=int, default=None, help="training steps per run (default 1500; 4 quick)")
    args = parser.parse_args(argv)
    out = args.out or os.path.join(REPO, "runs/repro/induction_quick" if args.quick else "docs/results/induction")
    seeds = [int(s) for s in (args.seeds or ("0" if args.quick else "0,1")).split(",")]
    spec_arg = ",".join(x for x in ("quick" if args.quick else "", f"steps={args.steps}" if args.steps else "") if x)
    spec = config_path("repro_induction") + (f":{spec_arg}" if spec_arg else "")
    base = load(spec)
    steps = int(base.train.num_steps)
    if steps < 2:
        raise ValueError(f"--steps must be >= 2 (the ICL score needs two measurements); got {steps}")
    every = int(base.train.eval_every)
    eval_batches = int(base.data.num_eval_batches)
    d_model, num_heads = base.model.d_model, base.model.num_heads
    T = base.data.seq_len
    early, late = (T // 8, T // 4), (T - T // 4, T)  # early: inside the first block; late: in the repeats
    runs = {}
    for layers in sorted({p.overrides["model.num_decoder_layers"] for p in points(spec)}):
        for seed in seeds:
            hist = run_point(spec, {"model.num_decoder_layers": layers, "seed": seed})
            scores = [icl_score(p, early, late) for p in hist["position_loss"]]
            final = icl_score(hist["eval_position_loss"], early, late) if hist["eval_position_loss"] is not None \
                else math.nan
            runs[layers, seed] = {"hist": hist, "scores": scores, "final": final,
                                  "phase": phase_change_step(hist["position_loss_step"], scores),
                                  "window": transition(hist["position_loss_step"], scores)}
            print(f"{layers} layer(s), seed {seed}: final ICL score {final:.3f}, accuracy on the repeats "
                  f"{hist['eval_accuracy']:.3f}, phase change at {runs[layers, seed]['phase']} "
                  f"({hist['seconds']:.0f}s)", flush=True)

    segment, vocab, batch = base.data.induction_segment_len, base.data.vocab_size, base.data.batch_size
    n_lo, n_hi = max(2, segment // 2), segment
    lr = base.train.learning_rate
    report = Report(out, "Induction heads: in-context-learning score, 1 vs 2 attention-only layers")
    report.text(environment_line() + (" Quick mode (tiny sizes)." if args.quick else ""))
    report.text(
        f"Attention-only decoders (`model.attention_only`: no MLP blocks; pre-LN, untied output projection, rotary "
        f"positions), d_model {d_model}, {num_heads} heads, 1 or 2 layers. Data: `BOS` then a block of n "
        f"distinct random tokens, n uniform in [{n_lo}, {n_hi}] per sequence, repeated until the sequence "
        f"(length {T}, vocabulary {vocab}) is full (`data.build_synthetic`, task `induction`, "
        f"`induction_layout=\"repeat\"`; config `configs/repro_induction.py`, run through `engine.run`). "
        f"Trained as a language model on every token (`train.loss_on=\"all\"`): AdamW lr {lr:g}, warmup "
        f"then cosine decay, {steps} steps of batch {batch}, seeds {', '.join(map(str, seeds))}.\n\n"
        f"**ICL score** (Olsson et al.: loss at a late token minus loss at an early token) = mean held-out loss "
        f"over positions {late[0]}-{late[1] - 1} minus mean over positions {early[0]}-{early[1] - 1}, on "
        f"{eval_batches * batch} held-out sequences, every {every} steps. The early positions are "
        f"always inside the first block (nothing to copy: loss about log({vocab - 5}) = "
        f"{math.log(vocab - 5):.2f}); the late ones are always in a repeat, predictable by an induction "
        f"head. A perfect induction model scores about {-math.log(vocab - 5):.2f}; a model that only "
        f"spreads its bet over the tokens already seen scores about log(n) - log({vocab - 5}) "
        f"(≈ {math.log((n_lo + n_hi) / 2) - math.log(vocab - 5):.2f} at the mean n). **Phase change** "
        "= the step where the score falls fastest between two measurements; the 10%→90% window is where the "
        "score covers 10% and 90% of its total fall. Accuracy: argmax on the targets inside the repeats."
    )
    headers = ["attention layers", "seed", "parameters", "ICL score (start)", "ICL score (end)",
               "phase change at step", "10%→90% of the fall (steps)", "loss late (end)", "loss early (end)",
               "accuracy on repeats (end)", "seconds"]
    rows = []
    for (layers, seed), r in runs.items():
        h = r["hist"]
        p = h["eval_position_loss"]
        lo, hi = r["window"]
        rows.append([layers, seed, h["params"], r["scores"][0], r["final"], r["phase"],
                     None if lo is None else f"{lo}→{hi}",
                     float(np.nanmean(p[late[0]:late[1]])) if p is not None else math.nan,
                     float(np.nanmean(p[early[0]:early[1]])) if p is not None else math.nan,
                     h["eval_accuracy"], round(h["seconds"])])
    report.table(headers, rows, csv_name="summary.csv")

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.4))
    colors = {1: "tab:blue", 2: "tab:red"}
    for (layers, seed), r in runs.items():
        h = r["hist"]
        label = f"{layers} layer(s), seed {seed}"
        style = dict(color=colors[layers], alpha=1.0 if seed == seeds[0] else 0.55,
                     linestyle="-" if seed == seeds[0] else "--")
        axes[0].plot(h["position_loss_step"], r["scores"], label=label, **style)
        axes[1].plot(h["step"], h["loss"], label=label, **style)
        if h["eval_position_loss"] is not None:
            axes[2].plot(np.arange(T), h["eval_position_loss"], label=label, **style)
    axes[0].set_title("ICL score (late - early held-out loss)", fontsize=9)
    axes[0].set_xlabel("step")
    axes[0].set_ylabel("nats")
    axes[1].set_title("training loss (every token)", fontsize=9)
    axes[1].set_xlabel("step")
    axes[2].set_title("held-out loss by position (end of training)", fontsize=9)
    axes[2].set_xlabel("position")
    for a, b in (early, late):
        axes[2].axvspan(a - 0.5, b - 0.5, color="0.9")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.tight_layout()
    report.figure(fig, "icl_score", "In-context-learning score over training, training loss, and the held-out "
                  "loss per position at the end (grey: the early and late windows of the score), for 1- and "
                  "2-layer attention-only models.")
    report.section("What the data say")
    report.text(verdict(runs, seeds))
    report.section("Through the engine")
    report.text(
        "Until commit 55e6866 this reproduction ran on a private training loop (`scripts/_synthetic.py`, "
        "deleted). It now runs through `engine.run` with `configs/repro_induction.py`. What changed in the "
        "set-up: attention-only models have no MLP blocks (`model.attention_only`) instead of zeroed, frozen "
        "ones, so the parameter counts fell (1 layer 58,304 → 25,088; 2 layers 108,288 → 41,856: the MLP "
        "weights were never trained); the held-out loss per position is logged by the evaluation hook every "
        "25 steps from step 25 (it used to be measured at step 1 as well); everything else — data, sizes, "
        "optimizer, schedule, seeds — is the same. The old loop's numbers, 2 seeds each: 1 layer final ICL "
        "score -0.998 / -0.947, steepest fall at steps 500 / 650, accuracy on the repeats 0.085 / 0.088; "
        "2 layers -4.077 / -4.078, steepest fall at 350 / 375 (10%→90% of the fall in 300→375 and "
        "325→400), accuracy 1.00. The engine's numbers above agree to within the seed spread: the 2-layer "
        "phase change falls in the same 325-400 window and ends at the same score, the 1-layer model again "
        "only drifts to about -1.")
    path = report.write()
    print(f"wrote {path}")
    return path


def verdict(runs: dict, seeds: Sequence[int]) -> str:
    """Markdown bullets comparing the 1- and 2-layer runs."""
    lines = []
    for layers in (1, 2):
        finals = [runs[layers, s]["final"] for s in seeds]
        phases = [runs[layers, s]["phase"] for s in seeds]
        windows = [runs[layers, s]["window"] for s in seeds]
        acc = [runs[layers, s]["hist"]["eval_accuracy"] for s in seeds]
        lines.append(
            f"- {layers} layer(s): final ICL score {mean_std(finals)}; accuracy on the repeats {mean_std(acc)}; "
            f"steepest fall at step(s) {', '.join(str(p) for p in phases)}; 10%→90% of the fall between steps "
            + ", ".join("—" if lo is None else f"{lo}→{hi}" for lo, hi in windows) + ".")
    gap = np.nanmean([runs[2, s]["final"] for s in seeds]) - np.nanmean([runs[1, s]["final"] for s in seeds])
    lines.append(f"- End-of-training difference (2 layers minus 1 layer): {gap:.3f} nats.")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
