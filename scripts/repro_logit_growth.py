"""Reproduction 3: attention logit growth and learning-rate sensitivity (Wortsman et al. 2023, small-scale proxies).

Wortsman et al. find that small Transformers reproduce large-scale instabilities when the learning rate is
high: attention logits grow without bound, attention entropy collapses and the loss diverges; QK-LayerNorm
(LayerNorm on queries and keys) removes the logit growth and widens the range of good learning rates.

This trains the same small decoder on multi-query associative recall over a learning-rate grid, with and
without ``model.qk_layernorm``, and reports the final loss vs learning rate, the max attention logit over
training, and the learning-rate sensitivity ``E_lr[min(loss(lr), loss_init) - min_lr loss(lr)]`` (their
LR-sensitivity metric, over our grid).

    python scripts/repro_logit_growth.py          # full: a few minutes on 2 CPU cores -> docs/results/logit_growth/
    python scripts/repro_logit_growth.py --quick  # seconds; for tests
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Optional, Sequence

import numpy as np

from _report import Report, environment_line, plt
from _runs import config_path, load, points, run_point

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def final_loss(hist: dict) -> float:
    """Mean training loss over the last quarter of the logged steps; inf when the run diverged."""
    if hist["diverged_step"] is not None:
        return math.inf
    losses = hist["loss"]
    tail = losses[-max(1, len(losses) // 4):]
    return float(np.mean(tail))


def lr_sensitivity(losses: Sequence[float], init_loss: float) -> float:
    """Wortsman et al.'s LR sensitivity over a grid: mean of min(loss, init_loss) minus the best loss."""
    capped = [min(x, init_loss) for x in losses]
    return float(np.mean(capped) - min(capped))


def main(argv: Optional[Sequence[str]] = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, runs in seconds (for tests)")
    parser.add_argument("--out", default=None, help="report folder (default docs/results/logit_growth, or "
                        "runs/repro/logit_growth_quick with --quick)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = args.out or os.path.join(REPO, "runs/repro/logit_growth_quick" if args.quick else "docs/results/logit_growth")

    spec = config_path("repro_logit_growth") + f":seed={args.seed}" + (",quick" if args.quick else "")
    base = load(spec)
    steps, d_model, layers = base.train.num_steps, base.model.d_model, base.model.num_decoder_layers
    pairs, seq_len, vocab, batch = (base.data.mqar_num_kv_pairs, base.data.seq_len, base.data.vocab_size,
                                    base.data.batch_size)
    runs = []
    for point in points(spec):
        hist = run_point(spec, point.overrides)
        qk_ln, lr = point.overrides["model.qk_layernorm"], point.overrides["train.learning_rate"]
        runs.append({"qk_layernorm": qk_ln, "lr": lr, "hist": hist})
        print(f"qk_layernorm={qk_ln} lr={lr:g}: final loss {final_loss(hist):.4g}, max logit "
              f"{max(float(np.max(m)) for m in hist['max_logit']):.4g}, {hist['seconds']:.0f}s", flush=True)

    init_loss = math.log(vocab)
    report = Report(out, "Attention logit growth and learning-rate sensitivity (Wortsman et al. 2023 proxies)")
    report.text(environment_line() + (" Quick mode (tiny sizes)." if args.quick else ""))
    m = runs[0]["hist"]
    report.text(
        f"A {layers}-layer pre-LN decoder (d_model {d_model}, 4 heads of d_k {d_model // 4}, "
        f"{m['params']:,} parameters) on multi-query associative recall ({pairs} pairs, sequence "
        f"{seq_len}, vocabulary {vocab}, batch {batch}; config `configs/repro_logit_growth.py`, each run "
        f"through `engine.run`), AdamW (0.9, 0.95) "
        f"with 10% linear warmup and cosine decay, {steps} steps, no weight decay, no gradient clipping, seed "
        f"{args.seed}. Only the peak learning rate and ``model.qk_layernorm`` change. 'Final loss': mean training "
        "loss over the last quarter of training (inf: the loss became NaN/Inf and the run stopped)."
    )
    rows = []
    for r in runs:
        h = r["hist"]
        ml = [float(np.max(x)) for x in h["max_logit"]]
        rows.append(["on" if r["qk_layernorm"] else "off", r["lr"], final_loss(r["hist"]), h["eval_accuracy"],
                     ml[0], max(ml), ml[-1], h["diverged_step"],
                     sum(1 for w in h["warnings"] if w.kind == "max_logit")])
    report.table(["QK-LayerNorm", "peak lr", "final loss", "eval accuracy", "max logit (step 1)",
                  "max logit (max over training)", "max logit (end)", "diverged at step", "max-logit warnings"],
                 rows, csv_name="runs.csv")
    sens = {}
    for qk_ln in (False, True):
        losses = [final_loss(r["hist"]) for r in runs if r["qk_layernorm"] == qk_ln]
        sens[qk_ln] = lr_sensitivity(losses, init_loss)
    report.text(f"LR sensitivity (lower is better; losses capped at the initial loss log(V) = {init_loss:.3f}): "
                f"without QK-LayerNorm {sens[False]:.3f}, with QK-LayerNorm {sens[True]:.3f}.")

    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    for qk_ln, marker in ((False, "o"), (True, "s")):
        sub = [r for r in runs if r["qk_layernorm"] == qk_ln]
        ax.plot([r["lr"] for r in sub], [min(final_loss(r["hist"]), init_loss) for r in sub], marker=marker,
                label="QK-LayerNorm" if qk_ln else "no QK-LayerNorm")
    ax.axhline(init_loss, color="gray", ls=":", lw=1, label="log(V) (cap)")
    ax.set_xscale("log")
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel("final train loss")
    ax.legend(fontsize=7)
    report.figure(fig, "loss_vs_lr", "Final loss vs learning rate, with and without QK-LayerNorm.")

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), sharey=True)
    cmap = plt.get_cmap("viridis")
    for ax, qk_ln in zip(axes, (False, True)):
        sub = [r for r in runs if r["qk_layernorm"] == qk_ln]
        for i, r in enumerate(sub):
            h = r["hist"]
            ax.plot(h["stats_step"], [float(np.max(x)) for x in h["max_logit"]], color=cmap(i / max(1, len(sub) - 1)),
                    label=f"lr {r['lr']:g}")
        ax.set_yscale("symlog")
        ax.set_xlabel("step")
        ax.set_title("QK-LayerNorm" if qk_ln else "no QK-LayerNorm", fontsize=9)
    axes[0].set_ylabel("max attention logit (all layers, heads)")
    axes[0].legend(fontsize=7)
    report.figure(fig, "max_logit", "Largest attention logit over training for each learning rate.")

    report.section("What the data say")
    report.text(verdict(runs, sens))
    path = report.write()
    print(f"wrote {path}")
    return path


def verdict(runs: list[dict], sens: dict) -> str:
    """Sentences computed from the runs."""
    lines = []
    for qk_ln in (False, True):
        sub = [r for r in runs if r["qk_layernorm"] == qk_ln]
        peak = max(sub, key=lambda r: max(float(np.max(x)) for x in r["hist"]["max_logit"]))
        best = min(sub, key=lambda r: final_loss(r["hist"]))
        diverged = [f"{r['lr']:g}" for r in sub if r["hist"]["diverged_step"] is not None]
        lines.append(
            f"- {'With' if qk_ln else 'Without'} QK-LayerNorm: the largest attention logit seen was "
            f"{max(float(np.max(x)) for x in peak['hist']['max_logit']):.3g} (lr {peak['lr']:g}); best final loss "
            f"{final_loss(best['hist']):.3g} at lr {best['lr']:g}; "
            + (f"diverged at lr {', '.join(diverged)}." if diverged else "no run diverged.")
        )
    better = "lower" if sens[True] < sens[False] else "not lower"
    lines.append(f"- LR sensitivity with QK-LayerNorm is {better} than without ({sens[True]:.3f} vs "
                 f"{sens[False]:.3f}); the metric is relative to each variant's own best loss.")
    on = {r["lr"]: final_loss(r["hist"]) for r in runs if r["qk_layernorm"]}
    off = {r["lr"]: final_loss(r["hist"]) for r in runs if not r["qk_layernorm"]}
    wins = [lr for lr in on if on[lr] < off.get(lr, math.inf)]
    lines.append(f"- QK-LayerNorm reaches a lower final loss at {len(wins)} of {len(on)} learning rates"
                 + (f" ({', '.join(f'{lr:g}' for lr in wins)})." if wins else "."))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
