"""Reproduction 5: multi-query associative recall (Arora et al. 2023, Zoology) over num_heads x qk_dim.

MQAR puts key-value pairs at the start of a sequence and queries some keys later; the model must output the
value bound to each queried key. Attention solves it by matching the query against the keys, so the
question is how the accuracy depends on the number of heads and on the query/key width d_k.

A 2-layer decoder with fixed d_model is trained for each (num_heads, qk_dim) on the grid, with v_dim =
d_model / num_heads so the attention output width stays d_model, for the same fixed number of steps;
accuracy is measured on the answer positions of held-out sequences, and the training loss over time shows
how fast each cell learns the task.

The experiment (sizes, ``:quick``, the grid) is ``configs/mqar_grid.py``; every cell runs through ``engine.run``.

    python scripts/repro_mqar.py          # full: 3 seeds x 3,000 steps per cell -> docs/results/mqar/
    python scripts/repro_mqar.py --quick  # seconds; for tests

Pass criteria (fixed before the 3-seed run): a run *learned* the task when its held-out accuracy is at least
``LEARNED_ACC``; a cell is solved when every seed learned.
- Zoology's claim that attention solves MQAR: reproduced when every (num_heads, qk_dim) cell is solved,
  partial when some are, not reproduced when none is.
- The earlier 800-step, 2-seed finding "more heads learn faster": reproduced when the steps to learn of
  1-head runs exceed those of the 4-head runs with a 95% Welch interval (over all runs of each head count,
  every qk_dim) excluding zero; not reproduced when the interval includes zero; undecided when fewer than 2
  runs of either learned.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

import numpy as np

from _report import Report, environment_line, plt
import _stats
from _runs import config_path, load, points, run_point

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOLVED_LOSS = 0.5  # "learned the task" threshold on the training loss (nats; chance is about log(29) = 3.4)
LEARNED_ACC = 0.95  # held-out accuracy at which a run has learned the task


def solve_step(steps: Sequence[int], losses: Sequence[float], threshold: float = SOLVED_LOSS) -> Optional[int]:
    """First logged step whose (interval-mean) training loss is below ``threshold``; None if never."""
    below = [s for s, loss in zip(steps, losses) if loss < threshold]
    return int(below[0]) if below else None


def main(argv: Optional[Sequence[str]] = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, runs in seconds (for tests)")
    parser.add_argument("--out", default=None, help="report folder (default docs/results/mqar, or "
                        "runs/repro/mqar_quick with --quick)")
    parser.add_argument("--seeds", default=None, help="comma-separated seeds (default 0,1,2; 0 with --quick)")
    parser.add_argument("--steps", type=int, default=None, help="training steps per cell")
    args = parser.parse_args(argv)
    out = args.out or os.path.join(REPO, "runs/repro/mqar_quick" if args.quick else "docs/results/mqar")

    spec_arg = ",".join(x for x in ("quick" if args.quick else "", f"steps={args.steps}" if args.steps else "") if x)
    spec = config_path("mqar_grid") + (f":{spec_arg}" if spec_arg else "")
    base = load(spec)
    grid = points(spec)
    heads = sorted({p.overrides["model.num_heads"] for p in grid})
    qk_dims = sorted({p.overrides["model.qk_dim"] for p in grid})
    d_model, layers, steps = base.model.d_model, base.model.num_decoder_layers, base.train.num_steps
    eval_batches, lr = base.data.num_eval_batches, base.train.learning_rate
    pairs, seq_len, vocab, batch = (base.data.mqar_num_kv_pairs, base.data.seq_len, base.data.vocab_size,
                                    base.data.batch_size)
    seeds = [int(x) for x in (args.seeds or ("0" if args.quick else "0,1,2")).split(",")]
    # accuracy and steps to learn (NaN: not within the budget) per [head, qk_dim, seed]
    acc = np.full((len(heads), len(qk_dims), len(seeds)), np.nan)
    learn = np.full((len(heads), len(qk_dims), len(seeds)), np.nan)
    rows = []
    curves = {}
    for i, h in enumerate(heads):
        for j, dk in enumerate(qk_dims):
            for k, seed in enumerate(seeds):
                hist = run_point(spec, {"model.num_heads": h, "model.qk_dim": dk, "model.v_dim": d_model // h,
                                        "seed": seed})
                acc[i, j, k] = hist["eval_accuracy"]
                curves[h, dk, seed] = (hist["step"], hist["loss"])
                solved = solve_step(hist["step"], hist["loss"])
                learn[i, j, k] = np.nan if solved is None else solved
                rows.append([h, dk, seed, d_model // h, hist["params"], hist["loss"][-1], solved,
                             hist["eval_loss"], hist["eval_accuracy"], round(hist["seconds"])])
                print(f"heads={h} qk_dim={dk} seed={seed}: accuracy {hist['eval_accuracy']:.3f} "
                      f"({hist['seconds']:.0f}s)", flush=True)

    report = Report(out, "Multi-query associative recall: accuracy over num_heads x qk_dim")
    report.text(environment_line() + (" Quick mode (tiny sizes)." if args.quick else ""))
    report.text(
        f"{layers}-layer pre-LN decoder, d_model {d_model}, v_dim = d_model / num_heads, learned positions; MQAR with "
        f"{pairs} key-value pairs, sequence {seq_len}, vocabulary {vocab}; AdamW lr "
        f"{lr:g} with warmup and cosine decay, {steps} steps of batch {batch} (config `configs/mqar_grid.py`, "
        f"each cell through `engine.run`), "
        f"seeds {', '.join(map(str, seeds))}. "
        f"Accuracy: exact-match of the value token at the answer positions of "
        f"{eval_batches * batch} held-out "
        f"sequences (chance is about 1/{(vocab - 5) // 2}: values come from half the task tokens)."
    )
    report.text(f"Steps to learn: the first logged step (every {max(1, steps // 40)}) whose mean training "
                f"loss since the previous log is below {SOLVED_LOSS} nats (— = not within {steps} steps).")
    report.table(["num_heads", "qk_dim", "seed", "v_dim", "parameters", "last train loss", "steps to learn",
                  "eval loss", "eval accuracy", "seconds"], rows, csv_name="grid.csv")
    mean_acc = acc.mean(axis=2)
    fig, (ax, ax_loss) = plt.subplots(1, 2, figsize=(5.5 + 0.9 * len(qk_dims), 1.2 + 0.7 * len(heads)),
                                      gridspec_kw={"width_ratios": [1.0, 1.6]})
    im = ax.imshow(mean_acc, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    for i in range(len(heads)):
        for j in range(len(qk_dims)):
            ax.text(j, i, f"{mean_acc[i, j]:.2f}", ha="center", va="center", fontsize=7,
                    color="white" if mean_acc[i, j] < 0.6 else "black")
    ax.set_xticks(range(len(qk_dims)), [str(d) for d in qk_dims])
    ax.set_yticks(range(len(heads)), [str(h) for h in heads])
    ax.set_xlabel("qk_dim (d_k)")
    ax.set_ylabel("num_heads")
    fig.colorbar(im, ax=ax, label="accuracy")
    styles = dict(zip(qk_dims, ["-", "--", ":", "-."] * len(qk_dims)))
    colors = dict(zip(heads, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    for (h, dk, seed), (st, loss) in curves.items():
        ax_loss.plot(st, loss, color=colors[h], linestyle=styles[dk], alpha=0.9 if seed == seeds[0] else 0.45,
                     label=f"h={h}, d_k={dk}" if seed == seeds[0] else None)
    ax_loss.set_xlabel("step")
    ax_loss.set_ylabel("training loss (answers)")
    ax_loss.legend(fontsize=6, ncol=len(heads))
    fig.tight_layout()
    report.figure(fig, "accuracy_grid", "MQAR held-out accuracy for each (num_heads, qk_dim) after the same "
                  "number of steps, mean over seeds (left) and the training loss on the answers over training "
                  "(right; colour = heads, line style = d_k; fainter: later seeds).")
    report.section("Verdicts (criteria fixed in the script before the run)")
    report.table(["claim", "measured", "verdict", "why"], claims(acc, learn, heads, qk_dims), csv_name="verdicts.csv")
    report.section("What the data say")
    report.text(verdict(acc, learn, heads, qk_dims, steps))
    path = report.write()
    print(f"wrote {path}")
    return path


def claims(acc_seeds: np.ndarray, learn: np.ndarray, heads: Sequence[int], qk_dims: Sequence[int]) -> list[list]:
    """Rows [claim, measured, verdict, why] under the pass criteria of the module docstring. acc_seeds, learn:
    [heads, qk_dims, seeds] (accuracy; steps to learn, NaN = not learned)."""
    solved = np.all(acc_seeds >= LEARNED_ACC, axis=2)
    n_solved, n_cells = int(solved.sum()), solved.size
    zoology = "reproduced" if n_solved == n_cells else "partial" if n_solved else "not reproduced"
    unsolved = ", ".join(f"h={heads[i]}/d_k={qk_dims[j]}" for i, j in zip(*np.nonzero(~solved))) or "none"
    rows = [["attention solves MQAR at every (heads, d_k) (Zoology)", f"{n_solved} of {n_cells} cells solved",
             zoology, f"a cell is solved when all seeds reach accuracy >= {LEARNED_ACC}; unsolved: {unsolved}"]]
    one, many = learn[0].ravel(), learn[-1].ravel()
    one, many = one[np.isfinite(one)], many[np.isfinite(many)]
    claim = f"{heads[0]} head(s) learn slower than {heads[-1]} (steps to learn)"
    if one.size < 2 or many.size < 2:
        rows.append([claim, f"{one.size} / {many.size} runs learned", "undecided",
                     "fewer than 2 learned runs in a group"])
    else:
        ci = _stats.welch_ci(one, many)
        rows.append([claim, f"{ci.text(0)} steps (95% Welch; n = {ci.n_a}, {ci.n_b})",
                     "reproduced" if ci.excludes_zero() and ci.diff > 0 else "not reproduced",
                     "interval excludes zero" if ci.excludes_zero() else "interval includes zero"])
    return rows


def verdict(acc_seeds: np.ndarray, learn: np.ndarray, heads: Sequence[int], qk_dims: Sequence[int],
            steps: int) -> str:
    """Markdown bullets: best/worst cells and the means by d_k and by heads. acc_seeds, learn:
    [heads, qk_dims, seeds] (accuracy, steps to learn with NaN = not learned)."""
    acc = acc_seeds.mean(axis=2)
    best = np.unravel_index(np.nanargmax(acc), acc.shape)
    worst = np.unravel_index(np.nanargmin(acc), acc.shape)
    by_dk = np.nanmean(acc, axis=0)
    by_h = np.nanmean(acc, axis=1)
    spread = ", ".join(f"h={h}/d_k={d}: " + "/".join(f"{a:.2f}" for a in acc_seeds[i, j])
                       for i, h in enumerate(heads) for j, d in enumerate(qk_dims))
    return "\n".join([
        f"- Accuracy per seed: {spread}.",
        f"- Best cell: {heads[best[0]]} heads, d_k {qk_dims[best[1]]} ({acc[best]:.3f}); worst: "
        f"{heads[worst[0]]} heads, d_k {qk_dims[worst[1]]} ({acc[worst]:.3f}).",
        "- Mean accuracy by d_k: " + ", ".join(f"{d}: {a:.3f}" for d, a in zip(qk_dims, by_dk)) + ".",
        "- Mean accuracy by number of heads: " + ", ".join(f"{h}: {a:.3f}" for h, a in zip(heads, by_h)) + ".",
        f"- Runs that learned the task within {steps} steps: {int(np.sum(np.isfinite(learn)))} of {learn.size}; "
        "steps to learn by cell and seed: " + ", ".join(
            f"h={h}/d_k={d}: " + "/".join("—" if np.isnan(x) else str(int(x)) for x in learn[i, j])
            for i, h in enumerate(heads) for j, d in enumerate(qk_dims)) + ".",
    ])


if __name__ == "__main__":
    from engine import cli

    sys.exit(0 if cli.script(main) else 1)
