"""Reproduction 5: multi-query associative recall (Arora et al. 2023, Zoology) over num_heads x qk_dim.

MQAR puts key-value pairs at the start of a sequence and queries some keys later; the model must output the
value bound to each queried key. Attention solves it by matching the query against the keys, so the
question is how the accuracy depends on the number of heads and on the query/key width d_k.

A 2-layer decoder with fixed d_model is trained for each (num_heads, qk_dim) on the grid, with v_dim =
d_model / num_heads so the attention output width stays d_model; accuracy is measured on the answer
positions of held-out sequences.

    python scripts/repro_mqar.py          # full: a few minutes on 2 CPU cores -> docs/results/mqar/
    python scripts/repro_mqar.py --quick  # seconds; for tests
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

import numpy as np

from _report import Report, environment_line, plt
from _synthetic import mqar_task, tiny_model_config, train_decoder

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv: Optional[Sequence[str]] = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, runs in seconds (for tests)")
    parser.add_argument("--out", default=None, help="report folder (default docs/results/mqar, or "
                        "runs/repro/mqar_quick with --quick)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None, help="training steps per cell")
    args = parser.parse_args(argv)
    out = args.out or os.path.join(REPO, "runs/repro/mqar_quick" if args.quick else "docs/results/mqar")

    heads = (1, 2) if args.quick else (1, 2, 4)
    qk_dims = (8,) if args.quick else (2, 8, 32)
    d_model = 16 if args.quick else 64
    layers = 1 if args.quick else 2
    steps = args.steps or (5 if args.quick else 300)
    eval_batches = 1 if args.quick else 8
    lr = 3e-3
    task = mqar_task(num_pairs=2 if args.quick else 4, seq_len=16 if args.quick else 32,
                     vocab_size=32 if args.quick else 64, batch_size=8 if args.quick else 16)
    acc = np.full((len(heads), len(qk_dims)), np.nan)
    rows = []
    for i, h in enumerate(heads):
        for j, dk in enumerate(qk_dims):
            model_cfg = tiny_model_config(vocab_size=task.vocab_size, d_model=d_model, num_heads=h, qk_dim=dk,
                                          v_dim=d_model // h, num_layers=layers, max_len=task.seq_len)
            hist = train_decoder(model_cfg, task, steps=steps, learning_rate=lr, seed=args.seed,
                                 log_every=max(1, steps // 10), eval_batches=eval_batches)
            acc[i, j] = hist["eval_accuracy"]
            rows.append([h, dk, d_model // h, hist["params"], hist["loss"][-1], hist["eval_loss"],
                         hist["eval_accuracy"]])
            print(f"heads={h} qk_dim={dk}: accuracy {hist['eval_accuracy']:.3f} ({hist['seconds']:.0f}s)", flush=True)

    report = Report(out, "Multi-query associative recall: accuracy over num_heads x qk_dim")
    report.text(environment_line() + (" Quick mode (tiny sizes)." if args.quick else ""))
    report.text(
        f"{layers}-layer pre-LN decoder, d_model {d_model}, v_dim = d_model / num_heads, learned positions; MQAR with "
        f"{task.num_pairs} key-value pairs, sequence {task.seq_len}, vocabulary {task.vocab_size}; AdamW lr "
        f"{lr:g} with warmup and cosine decay, {steps} steps of batch {task.batch_size}, seed {args.seed}. "
        f"Accuracy: exact-match of the value token at the answer positions of "
        f"{eval_batches * task.batch_size} held-out "
        f"sequences (chance is about 1/{(task.vocab_size - 5) // 2}: values come from half the task tokens)."
    )
    report.table(["num_heads", "qk_dim", "v_dim", "parameters", "last train loss", "eval loss", "eval accuracy"],
                 rows, csv_name="grid.csv")
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(qk_dims), 0.8 + 0.7 * len(heads)))
    im = ax.imshow(acc, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    for i in range(len(heads)):
        for j in range(len(qk_dims)):
            ax.text(j, i, f"{acc[i, j]:.2f}", ha="center", va="center", fontsize=7,
                    color="white" if acc[i, j] < 0.6 else "black")
    ax.set_xticks(range(len(qk_dims)), [str(d) for d in qk_dims])
    ax.set_yticks(range(len(heads)), [str(h) for h in heads])
    ax.set_xlabel("qk_dim (d_k)")
    ax.set_ylabel("num_heads")
    fig.colorbar(im, ax=ax, label="accuracy")
    report.figure(fig, "accuracy_grid", "MQAR accuracy for each (num_heads, qk_dim).")
    report.section("What the data say")
    report.text(verdict(acc, heads, qk_dims))
    path = report.write()
    print(f"wrote {path}")
    return path


def verdict(acc: np.ndarray, heads: Sequence[int], qk_dims: Sequence[int]) -> str:
    best = np.unravel_index(np.nanargmax(acc), acc.shape)
    worst = np.unravel_index(np.nanargmin(acc), acc.shape)
    by_dk = np.nanmean(acc, axis=0)
    by_h = np.nanmean(acc, axis=1)
    return "\n".join([
        f"- Best cell: {heads[best[0]]} heads, d_k {qk_dims[best[1]]} ({acc[best]:.3f}); worst: "
        f"{heads[worst[0]]} heads, d_k {qk_dims[worst[1]]} ({acc[worst]:.3f}).",
        "- Mean accuracy by d_k: " + ", ".join(f"{d}: {a:.3f}" for d, a in zip(qk_dims, by_dk)) + ".",
        "- Mean accuracy by number of heads: " + ", ".join(f"{h}: {a:.3f}" for h, a in zip(heads, by_h)) + ".",
    ])


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
