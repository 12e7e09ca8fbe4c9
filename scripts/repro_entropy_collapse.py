"""Reproduction 4: attention entropy collapse before divergence (Zhai et al. 2023), seen by the health monitor.

Zhai et al. report that unstable Transformer training goes with "entropy collapse": attention entropy of
some heads falls to near zero (one-hot attention), and that this happens as the loss becomes unstable.
This trains one small decoder at a stable learning rate and at a too-high one, records every head's
entropy at every step, feeds the engine's health monitor (``engine.health.HealthMonitor`` with the
defaults of ``config.health``) exactly as ``train.py`` does, and reports when the monitor's warnings
fire relative to the loss divergence.

Divergence step: the first step whose training loss is non-finite or more than ``--spike`` nats above the
lowest loss reached before it.

    python scripts/repro_entropy_collapse.py          # full: a couple of minutes -> docs/results/entropy_collapse/
    python scripts/repro_entropy_collapse.py --quick  # seconds; for tests
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Optional, Sequence

import numpy as np

from _report import Report, environment_line, plt
from _runs import config_path, load, run_point

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def divergence_step(steps: Sequence[int], losses: Sequence[float], spike: float) -> Optional[int]:
    """First step whose loss is non-finite or exceeds the running minimum before it by more than ``spike``."""
    best = math.inf
    for s, x in zip(steps, losses):
        if not math.isfinite(x) or x > best + spike:
            return int(s)
        best = min(best, x)
    return None


def first_warning(hist: dict, kind: str) -> Optional[int]:
    steps = [w.step for w in hist["warnings"] if w.kind == kind]
    return min(steps) if steps else None


def main(argv: Optional[Sequence[str]] = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, runs in seconds (for tests)")
    parser.add_argument("--out", default=None, help="report folder (default docs/results/entropy_collapse, or "
                        "runs/repro/entropy_collapse_quick with --quick)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stable_lr", type=float, default=1e-3)
    parser.add_argument("--high_lr", type=float, default=1e-1, help="a too-high learning rate")
    parser.add_argument("--very_high_lr", type=float, default=1.0, help="a far too high learning rate")
    parser.add_argument("--spike", type=float, default=0.5, help="loss rise (nats) that counts as divergence")
    args = parser.parse_args(argv)
    out = args.out or os.path.join(REPO, "runs/repro/entropy_collapse_quick" if args.quick
                                   else "docs/results/entropy_collapse")

    spec = config_path("repro_entropy_collapse") + f":seed={args.seed}" + (",quick" if args.quick else "")
    base = load(spec)
    steps, d_model, layers = base.train.num_steps, base.model.d_model, base.model.num_decoder_layers
    pairs, seq_len, vocab, batch = (base.data.mqar_num_kv_pairs, base.data.seq_len, base.data.vocab_size,
                                    base.data.batch_size)
    runs = {}
    for label, lr in (("stable", args.stable_lr), ("high", args.high_lr), ("very high", args.very_high_lr)):
        hist = run_point(spec, {"train.learning_rate": lr})
        runs[label] = {"lr": lr, "hist": hist,
                       "diverged": divergence_step(hist["step"], hist["loss"], args.spike)}
        print(f"{label} lr={lr:g}: divergence {runs[label]['diverged']}, warnings {len(hist['warnings'])}, "
              f"{hist['seconds']:.0f}s", flush=True)

    report = Report(out, "Entropy collapse before divergence (Zhai et al. 2023), seen by the health monitor")
    report.text(environment_line() + (" Quick mode (tiny sizes)." if args.quick else ""))
    report.text(
        f"A {layers}-layer pre-LN decoder (d_model {d_model}, 4 heads, "
        "no QK-LayerNorm, "
        f"{runs['stable']['hist']['params']:,} parameters) on multi-query associative recall "
        f"({pairs} pairs, sequence {seq_len}, vocabulary {vocab}, batch "
        f"{batch}); AdamW (0.9, 0.95), short linear warmup to a constant learning rate, {steps} steps "
        f"(config `configs/repro_entropy_collapse.py`, each run through `engine.run`), "
        f"seed {args.seed}; attention statistics and the health monitor at every step. Divergence: first step "
        f"with a non-finite loss or a loss more than {args.spike:g} nats above the lowest loss before it."
    )
    rows = []
    for label, r in runs.items():
        h = r["hist"]
        ent = np.stack(h["entropy"])  # [steps, L, H]
        rows.append([label, r["lr"], r["diverged"], first_warning(h, "entropy_collapse"),
                     first_warning(h, "max_logit"), first_warning(h, "uniform_attention"),
                     float(ent[0].min()), float(ent[-1].min()), float(np.max(np.stack(h["max_logit"]))),
                     h["loss"][-1]])
    report.table(["run", "lr", "divergence step", "first entropy-collapse warning", "first max-logit warning",
                  "first near-uniform warning", "min head entropy (step 1)", "min head entropy (last step)",
                  "max logit (over training)", "last loss"], rows, csv_name="summary.csv")

    warn_rows = [[label, w.step, w.kind, w.layer, w.head, w.value, w.threshold]
                 for label, r in runs.items() for w in r["hist"]["warnings"][:20]]
    if warn_rows:
        report.text("Health-monitor warnings (first 20 per run):")
        report.table(["run", "step", "kind", "layer", "head", "value", "threshold"], warn_rows)

    fig, axes = plt.subplots(2, len(runs), figsize=(5 * len(runs), 5.5), sharex="col", squeeze=False)
    for col, (label, r) in enumerate(runs.items()):
        h = r["hist"]
        ent = np.stack(h["entropy"])
        L, H = ent.shape[1:]
        axes[0, col].plot(h["step"], h["loss"], color="black", lw=1)
        axes[0, col].set_title(f"{label} lr {r['lr']:g}: train loss", fontsize=9)
        for layer in range(L):
            for head in range(H):
                axes[1, col].plot(h["stats_step"], ent[:, layer, head], lw=0.8, label=f"L{layer}H{head}")
        axes[1, col].set_title("entropy per head (nats)", fontsize=9)
        axes[1, col].set_xlabel("step")
        for ax in axes[:, col]:
            if r["diverged"] is not None:
                ax.axvline(r["diverged"], color="red", ls="--", lw=1, label="divergence")
            fc = first_warning(h, "entropy_collapse")
            if fc is not None:
                ax.axvline(fc, color="orange", ls=":", lw=1.5, label="first collapse warning")
    axes[1, -1].legend(fontsize=6, ncol=2)
    report.figure(fig, "entropy_collapse", "Loss (top) and per-head attention entropy (bottom); red dashes: "
                  "divergence, orange dots: the health monitor's first entropy-collapse warning.")
    report.section("What the data say")
    report.text(verdict(runs))
    path = report.write()
    print(f"wrote {path}")
    return path


def verdict(runs: dict) -> str:
    lines = []
    stable_loss = runs["stable"]["hist"]["loss"][-1]
    for label, r in runs.items():
        h = r["hist"]
        fc, fm, d = first_warning(h, "entropy_collapse"), first_warning(h, "max_logit"), r["diverged"]
        if d is None:
            first = f" (first at step {fc})" if fc is not None else ""
            lines.append(f"- {label} (lr {r['lr']:g}): no divergence by the criterion above; last loss "
                         f"{h['loss'][-1]:.3g} (stable run: {stable_loss:.3g}); entropy-collapse warnings: "
                         f"{sum(1 for w in h['warnings'] if w.kind == 'entropy_collapse')}{first}.")
            continue
        if fc is None:
            when = "the monitor raised no entropy-collapse warning"
        elif fc < d:
            when = f"the first entropy-collapse warning came at step {fc}, {d - fc} steps before"
        elif fc == d:
            when = f"the first entropy-collapse warning came at the divergence step {fc}"
        else:
            when = f"the first entropy-collapse warning came at step {fc}, {fc - d} steps after"
        ml = f"; first max-logit warning at step {fm}" if fm is not None else ""
        lines.append(f"- {label} (lr {r['lr']:g}): the loss diverged at step {d}; {when}{ml}.")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
