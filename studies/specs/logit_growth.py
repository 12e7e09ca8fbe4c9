"""Reproduction 3: attention logit growth, learning-rate sensitivity and its trend across widths (Wortsman et
al. 2023, "Small-scale proxies for large-scale Transformer training instabilities").

Wortsman et al. find that small Transformers show the instabilities of large ones when the learning rate is
high: attention logits grow without bound and the loss degrades; the learning rate at which training
degrades falls as the model grows, and QK-LayerNorm (LayerNorm on queries and keys) removes the logit growth
and lowers the learning-rate sensitivity.

This trains the small decoder of ``configs/repro_logit_growth.py`` on multi-query associative recall over a
learning-rate grid at two widths, with and without ``model.qk_layernorm``, three seeds. Every point trains
with train.py through ``scripts/sweep.py`` and leaves a committed record in ``<out>/points/<point>.json``; a
point with a record is never trained again, and ``--report_only`` rebuilds the report from the records
(listing the points not finished yet).

    python scripts/repro_logit_growth.py                  # 72 points, records, report
                                                          #   -> docs/results/logit_growth/
    python scripts/repro_logit_growth.py --report_only    # the report from the committed records
    python scripts/repro_logit_growth.py --quick          # tiny model, a few steps; for tests

Pass criteria (fixed before the sweep ran). A *sweep* is one (width, QK-LayerNorm, seed) over the grid.
- Final loss of a run: its held-out loss at the end (8 batches, answer positions); a run whose loss became
  non-finite has final loss +inf. The sweep's *best* run has the lowest final loss; the sweep *learned* when
  its best run's held-out accuracy is at least LEARNED (0.9). Sweeps that did not learn take part in no
  comparison.
- *Degradation LR* of a sweep: the smallest grid learning rate above the best one whose final loss is more
  than DEGRADE_NATS (0.5) above the best (or non-finite); none in the grid counts as above the largest.
- Width trend (Wortsman et al.: the learning rate at which training degrades falls as width grows), without
  QK-LayerNorm: reproduced when the degradation LR at the larger width is below the smaller width's in every
  seed where both sweeps learned (at least MIN_SEEDS = 3 such seeds); partial when it is below in some seeds
  and above in none; not reproduced otherwise; undecided with fewer than 3 seeds.
- Logit growth: at each width, over the two largest learning rates, the log10 of the largest attention logit
  without QK-LayerNorm minus with it, 95% Welch interval over runs; reproduced when it is above 0 with the
  interval excluding 0 at every width, partial at some widths, not reproduced at none.
- QK-LayerNorm lowers the LR sensitivity (Wortsman et al.'s metric, mean over the grid of min(final loss,
  log V) minus the grid's minimum): per width, sensitivity without minus with QK-LayerNorm over seeds, 95%
  Welch interval; reproduced when positive with the interval excluding 0 at every width, partial at some
  widths, not reproduced at none.
"""
from __future__ import annotations

import csv
import math
import os
from typing import Callable, Optional, Sequence

import numpy as np

from analysis import degradation_lr, lr_sensitivity
from studies import runner as _study
from studies import stats as _stats
from studies.regenerate import regenerate
from studies.report import REPO, Report, environment_line, mean_std, plt

TITLE = "Attention logit growth, learning-rate sensitivity and width (Wortsman et al. 2023 proxies)"
CONFIG = "configs/repro_logit_growth.py"
LEARNED = 0.9  # held-out accuracy at which a sweep's best run has learned MQAR
DEGRADE_NATS = 0.5  # final loss this far above the sweep's best = degraded
MIN_SEEDS = 3


def final_loss(record: dict) -> float:
    """Held-out loss at the end; +inf when the run's loss became non-finite or no loss was recorded."""
    if (record.get("stability") or {}).get("non_finite_step") is not None:
        return math.inf
    v = (record.get("validation") or {}).get("loss")
    return math.inf if v is None else float(v)


def max_logit(record: dict) -> Optional[float]:
    vals = [v for v in ((record.get("stability") or {}).get("max_attention_logit") or {}).values() if v is not None]
    return max(vals) if vals else None


def run(argv: Optional[Sequence[str]] = None) -> str:
    """The study\'s command line (``scripts/repro_logit_growth.py``): train the points without a record, then the report."""
    study = _study.open_study("logit_growth", CONFIG, __doc__, argv)
    failed = [] if study.args.report_only else _study.train_missing(study)
    path = write_report(study.out, study.points, study.base, quick=study.args.quick, command=study.command)
    return _study.finish(study, path, failed)


def _sweeps(rows: list[dict], lrs: Sequence[float]) -> dict[tuple[int, bool, int], dict]:
    """(width, qk_ln, seed) -> the sweep's complete grid: losses, best run, learned, degradation LR."""
    out = {}
    for key in sorted({(r["d_model"], r["qk_ln"], r["seed"]) for r in rows}):
        got = {r["lr"]: r for r in rows if (r["d_model"], r["qk_ln"], r["seed"]) == key}
        if set(got) != set(lrs):
            continue
        losses = [got[lr]["final_loss"] for lr in lrs]
        best = int(np.argmin(losses))
        acc = got[lrs[best]]["accuracy"]
        out[key] = {"losses": losses, "best_lr": lrs[best], "best_accuracy": acc,
                    "learned": acc is not None and acc >= LEARNED,
                    "degrade_lr": degradation_lr(lrs, losses, DEGRADE_NATS)}
    return out


def write_report(out: str, points, base, *, quick: bool, command: str) -> str:
    """The report from the records under ``<out>/points``."""
    recs, missing = _study.recorded(out, points)
    rows = []
    for p, r in recs:
        o = p.overrides
        rows.append({"point": p.name, "d_model": int(o.get("model.d_model", base.model.d_model)),
                     "qk_ln": bool(o["model.qk_layernorm"]), "lr": float(o["train.learning_rate"]),
                     "seed": r.get("seed"), "steps": r.get("steps"), "final_loss": final_loss(r),
                     "accuracy": (r.get("validation") or {}).get("accuracy"), "max_logit": max_logit(r),
                     "non_finite": (r.get("stability") or {}).get("non_finite_step"),
                     "warnings": (r.get("stability") or {}).get("health_warnings"), "wall_s": r.get("wall_s"),
                     "commit": r.get("commit"), "curve": (r.get("stability") or {}).get("max_logit_curve") or {}})
    lrs = sorted({float(p.overrides["train.learning_rate"]) for p in points})
    widths = sorted({int(p.overrides.get("model.d_model", base.model.d_model)) for p in points})
    init_loss = math.log(base.data.vocab_size)
    sweeps = _sweeps(rows, lrs)

    report = Report(out, TITLE)
    report.text(environment_line() + (" Quick mode (tiny sizes)." if quick else ""))
    m, d, t = base.model, base.data, base.train
    wall = sum(r["wall_s"] or 0.0 for r in rows)
    report.text(
        f"Protocol: a {m.num_decoder_layers}-layer pre-LN decoder ({m.num_heads} head(s), d_k = d_model / heads, "
        f"d_ff = 4 d_model; widths d_model {', '.join(map(str, widths))}) on multi-query associative recall "
        f"({d.mqar_num_kv_pairs} pairs, sequence {d.seq_len}, vocabulary {d.vocab_size}, batch {d.batch_size}), "
        f"AdamW (0.9, 0.95), {t.warmup_steps} warmup steps then cosine decay, {t.num_steps} steps, no weight decay, "
        f"no clipping (`{CONFIG}`, every point through `train.py` / `engine.run`); peak learning rates "
        f"{', '.join(f'{x:g}' for x in lrs)}, QK-LayerNorm off/on. A non-finite loss ends a run (its final loss is "
        f"+inf). Final loss: held-out loss on the answers at the end; chance (uniform over the vocabulary) is "
        f"log {d.vocab_size} = {init_loss:.2f}, guessing among the {d.mqar_num_kv_pairs} values in context "
        f"log {d.mqar_num_kv_pairs} = {math.log(d.mqar_num_kv_pairs):.2f}. Max attention logit: the largest scaled "
        f"logit of any layer and head at the logged steps.\n\nCommand: `{command}` (resumable; `--report_only` "
        f"rebuilds this report from `points/`). Records: {len(rows)} of {len(points)} points; training wall time of "
        f"the recorded points {wall / 60:.1f} min. Made by commit(s): "
        f"{', '.join(sorted({str(r['commit']) for r in rows})) or '—'}.")
    if missing:
        report.text(f"**Not finished yet ({len(missing)} points):** " + ", ".join(f"`{n}`" for n in missing)
                    + ". Everything below uses the finished points only.")

    report.section("Every run")
    report.table(["point", "d_model", "QK-LayerNorm", "peak lr", "seed", "steps", "final loss", "held-out accuracy",
                  "max attention logit", "non-finite at step", "health warnings", "wall (s)", "commit"],
                 [[r["point"], r["d_model"], r["qk_ln"], r["lr"], r["seed"], r["steps"], r["final_loss"],
                   r["accuracy"], r["max_logit"], r["non_finite"], r["warnings"], r["wall_s"], r["commit"]]
                  for r in rows], csv_name="runs.csv", digits=4)

    report.section("Per sweep: best and degradation learning rate")
    report.text(f"A sweep is one (d_model, QK-LayerNorm, seed) over the whole grid; learned: its best run has "
                f"held-out accuracy >= {LEARNED:g}; degradation LR: the smallest grid LR above the best whose final "
                f"loss is more than {DEGRADE_NATS:g} nats above the best (or non-finite); '—': none in the grid.")
    report.table(["d_model", "QK-LayerNorm", "seed", "best lr", "best accuracy", "learned", "degradation lr",
                  "LR sensitivity"],
                 [[w, q, s, v["best_lr"], v["best_accuracy"], v["learned"], v["degrade_lr"],
                   lr_sensitivity(v["losses"], init_loss)] for (w, q, s), v in sweeps.items()],
                 csv_name="sweeps.csv", digits=4)
    if rows:
        _figures(report, rows, widths, lrs, init_loss)

    verdicts = [width_trend(sweeps, widths), logit_growth(rows, widths, lrs), sensitivity(sweeps, widths, init_loss)]
    report.section("Verdicts")
    report.text("Criteria: see the docstring of `scripts/repro_logit_growth.py` (fixed before the sweep ran).")
    report.table(["claim", "paper", "measured", "verdict", "reason"], verdicts, csv_name="verdicts.csv")
    report.section("What the data say")
    report.text(what_the_data_say(rows, sweeps, widths, lrs, verdicts, missing, init_loss))
    return report.write()


def _learned(sweeps, width, qk_ln) -> dict[int, dict]:
    return {s: v for (w, q, s), v in sweeps.items() if w == width and q == qk_ln and v["learned"]}


def width_trend(sweeps, widths) -> list:
    claim = "the LR where training degrades falls as width grows (no QK-LayerNorm)"
    paper = "Wortsman et al. 2023, Fig. 1 (LR vs final loss per model size)"
    if len(widths) < 2:
        return [claim, paper, "one width", "undecided", "needs two widths"]
    small, large = _learned(sweeps, widths[0], False), _learned(sweeps, widths[-1], False)
    seeds = sorted(set(small) & set(large))
    inf = math.inf
    pairs = [((small[s]["degrade_lr"] or inf), (large[s]["degrade_lr"] or inf)) for s in seeds]
    measured = "; ".join(f"seed {s}: {a:g} -> {b:g}" for s, (a, b) in zip(seeds, pairs)) or "no seed"
    if len(seeds) < MIN_SEEDS:
        return [claim, paper, measured, "undecided", f"{len(seeds)} seed(s) where both widths' sweeps learned; "
                f"{MIN_SEEDS} needed"]
    below = sum(b < a for a, b in pairs)
    above = sum(b > a for a, b in pairs)
    if below == len(pairs):
        v = "reproduced"
    elif below and not above:
        v = "partial"
    else:
        v = "not reproduced"
    return [claim, paper, f"degradation LR d_model {widths[0]} -> {widths[-1]}: {measured}", v,
            f"lower at the larger width in {below}, higher in {above}, equal in {len(pairs) - below - above} of "
            f"{len(pairs)} seeds"]


def _off_above_on(claim: str, paper: str, widths, samples: Callable, describe: Callable, undecided: str,
                  higher: str) -> list:
    """Verdict row for "larger without QK-LayerNorm than with it, at every width": ``samples(w)`` gives (off
    values, on values, what is missing when either has fewer than 2), ``describe(off, on, interval)`` the
    measured text of one width."""
    parts, found = [], []
    for w in widths:
        off, on, lacking = samples(w)
        if len(off) < 2 or len(on) < 2:
            parts.append(f"d_model {w}: {lacking}")
            continue
        found.append((w, off, on, _stats.welch_ci(off, on)))
    decided, ok = len(found), 0
    for (w, off, on, iv), p in zip(found, _stats.holm([iv.p for *_, iv in found])):
        ok += int(p is not None and p < 0.05 and iv.diff > 0)  # Holm over the widths (2026-12-05, post-hoc)
        parts.append(f"d_model {w}: {describe(off, on, iv)} (p {iv.p:.2g}, Holm {p:.2g})")
    if decided < len(widths):
        return [claim, paper, "; ".join(parts), "undecided", undecided]
    v = "reproduced" if ok == len(widths) else ("partial" if ok else "not reproduced")
    return [claim, paper, "; ".join(parts), v, f"{higher} (Holm-adjusted p < 0.05 over the widths, added 2026-12-05 after the data: post-hoc) at {ok} of "
                                           f"{len(widths)} widths"]


def logit_growth(rows, widths, lrs) -> list:
    top = lrs[-2:]

    def samples(w):
        logs = {qk: [math.log10(r["max_logit"]) for r in rows if r["d_model"] == w and r["qk_ln"] == qk
                     and r["lr"] in top and r["max_logit"] and r["max_logit"] > 0] for qk in (False, True)}
        return logs[False], logs[True], "not enough runs"

    return _off_above_on(
        "attention logits grow at high LR without QK-LayerNorm; QK-LayerNorm prevents it",
        "Wortsman et al. 2023, section 3.1 (attention logit growth)", widths, samples,
        lambda off, on, iv: (f"log10 max logit off - on {iv.text(2)} (off {10 ** np.mean(off):.3g}, on "
                             f"{10 ** np.mean(on):.3g}, geometric means at lr {', '.join(f'{x:g}' for x in top)})"),
        "not every width has runs at the two largest LRs", "higher without QK-LayerNorm")


def sensitivity(sweeps, widths, init_loss) -> list:
    def samples(w):
        off, on = _learned(sweeps, w, False), _learned(sweeps, w, True)
        a = [lr_sensitivity(v["losses"], init_loss) for v in off.values()]
        b = [lr_sensitivity(v["losses"], init_loss) for v in on.values()]
        return a, b, f"{len(a)}/{len(b)} learned sweeps off/on"

    return _off_above_on(
        "QK-LayerNorm lowers the LR sensitivity",
        "Wortsman et al. 2023, Fig. 1 / section 3.1 (LR sensitivity with and without qk-layernorm)", widths, samples,
        lambda off, on, iv: f"off {np.mean(off):.3f}, on {np.mean(on):.3f}, off - on {iv.text(3)}",
        "fewer than 2 learned sweeps per variant at some width", "lower with QK-LayerNorm")


def _figures(report: Report, rows, widths, lrs, init_loss) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    for i, w in enumerate(widths):
        for qk_ln, ls, marker in ((False, "-", "o"), (True, "--", "s")):
            xs, mean, lo, hi = [], [], [], []
            for lr in lrs:
                v = [min(r["final_loss"], init_loss) for r in rows if r["d_model"] == w and r["qk_ln"] == qk_ln
                     and r["lr"] == lr]
                ml = [r["max_logit"] for r in rows if r["d_model"] == w and r["qk_ln"] == qk_ln and r["lr"] == lr
                      and r["max_logit"]]
                if v:
                    xs.append(lr)
                    mean.append(np.mean(v))
                    lo.append(np.min(v))
                    hi.append(np.max(v))
                if ml:
                    axes[1].scatter([lr] * len(ml), ml, color=f"C{i}", marker=marker, s=12)
            label = f"d_model {w}, QK-LN {'on' if qk_ln else 'off'}"
            if xs:
                axes[0].plot(xs, mean, ls=ls, marker=marker, color=f"C{i}", label=label)
                axes[0].fill_between(xs, lo, hi, color=f"C{i}", alpha=0.12)
            ml_mean = [np.exp(np.mean(np.log([r["max_logit"] for r in rows if r["d_model"] == w and
                                              r["qk_ln"] == qk_ln and r["lr"] == lr and r["max_logit"]])))
                       for lr in lrs if any(r["d_model"] == w and r["qk_ln"] == qk_ln and r["lr"] == lr and
                                            r["max_logit"] for r in rows)]
            xs_ml = [lr for lr in lrs if any(r["d_model"] == w and r["qk_ln"] == qk_ln and r["lr"] == lr and
                                             r["max_logit"] for r in rows)]
            if xs_ml:
                axes[1].plot(xs_ml, ml_mean, ls=ls, color=f"C{i}", label=label)
    axes[0].axhline(init_loss, color="gray", ls=":", lw=1)
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("peak learning rate")
    axes[0].set_ylabel(f"final held-out loss (capped at log V = {init_loss:.2f})")
    axes[0].set_title("mean over seeds (band: min-max)", fontsize=9)
    axes[1].set_yscale("log")
    axes[1].set_ylabel("largest attention logit during training")
    axes[1].set_title("per run (dots) and geometric mean (lines)", fontsize=9)
    axes[0].legend(fontsize=7)
    report.figure(fig, "loss_vs_lr", "Final loss and largest attention logit against the learning rate, per width, "
                  "with (dashed) and without (solid) QK-LayerNorm.")


def _degradation_with_qkln(sweeps, widths) -> str:
    """Per width: does QK-LayerNorm let training go to a higher LR before it degrades (Wortsman et al.: it
    does), seed by seed (no degradation in the grid counts as above its largest LR)."""
    parts = []
    for w in widths:
        pairs = [(v["degrade_lr"], sweeps[(w, True, s)]["degrade_lr"]) for (ww, q, s), v in sweeps.items()
                 if ww == w and not q and (w, True, s) in sweeps]
        if not pairs:
            continue
        key = lambda x: math.inf if x is None else x  # noqa: E731
        higher = sum(key(on) > key(off) for off, on in pairs)
        lower = sum(key(on) < key(off) for off, on in pairs)
        parts.append(f"at d_model {w} the degradation LR is higher with QK-LayerNorm in {higher}, lower in {lower} "
                     f"and equal in {len(pairs) - higher - lower} of {len(pairs)} seeds")
    if not parts:
        return ""
    return ("Degradation LR with and without QK-LayerNorm (Wortsman et al.: QK-LayerNorm keeps training stable "
            "at higher learning rates; no pass criterion was set for this before the sweep, so no verdict): "
            + "; ".join(parts) + ".")


def what_the_data_say(rows, sweeps, widths, lrs, verdicts, missing, init_loss) -> str:
    if not rows:
        return "No point has finished yet: nothing can be said."
    paras = ["Wortsman et al. (2023) train pre-LN GPT-2-style language models (millions to about a billion "
             "parameters) on C4 with AdamW (0.9, 0.95), gradient clipping at 1, weight decay 1e-4, z-loss 1e-4, "
             "5% warmup and cosine decay, over learning rates 3e-4 to 3e-1, and report: without QK-LayerNorm the "
             "attention logits grow at high learning rates until attention is nearly one-hot and the loss "
             "degrades; the learning rate where this starts falls as the model grows; with QK-LayerNorm the logits "
             "stay small and the LR sensitivity is much lower at every size. Here the models are "
             f"{len(widths)} widths of a 2-layer, 2-head decoder on a synthetic recall task, "
             f"{max(r['steps'] or 0 for r in rows):,} steps each (fewer where the loss turned non-finite), without "
             "clipping, weight decay or z-loss (so instability sets in at lower learning rates than theirs), so "
             "only the direction of each effect can be compared, not its size."]
    lines = []
    for w in widths:
        for q in (False, True):
            sw = {s: v for (ww, qq, s), v in sweeps.items() if ww == w and qq == q}
            if not sw:
                continue
            deg = [v["degrade_lr"] for v in sw.values()]
            lines.append(f"- d_model {w}, QK-LayerNorm {'on' if q else 'off'}: {sum(v['learned'] for v in sw.values())}"
                         f" of {len(sw)} sweeps learned; best LR per seed "
                         + ", ".join(f"{v['best_lr']:g}" for v in sw.values()) + "; degradation LR per seed "
                         f"{', '.join('—' if x is None else f'{x:g}' for x in deg)}; largest attention logit at lr "
                         f"{lrs[-1]:g}: " + mean_std([r["max_logit"] for r in rows if r["d_model"] == w and
                                                      r["qk_ln"] == q and r["lr"] == lrs[-1]]) + ".")
    paras.append("\n".join(lines))
    paras.append("\n".join(f"- {v[0]}: **{v[3]}** ({v[4]})." for v in verdicts))
    paras.append(_degradation_with_qkln(sweeps, widths))
    if missing:
        paras.append(f"{len(missing)} points have not finished; the statements above may change as they do.")
    return "\n\n".join(paras)


def generate(into: Optional[str] = None) -> list[str]:
    """The registry's entry: the committed report regenerated from its records (no training; under ``into`` when
    given)."""
    return [regenerate(os.path.join(REPO, "docs", "results", "logit_growth"), ("points", "attempt_1head"),
                       lambda out: run(["--report_only", f"--out={out}"]), into)]


def summary() -> list:
    """The study's row of docs/results/README.md: its records and the verdicts of its generated report."""
    from studies.specs import Summary

    out = os.path.join(REPO, "docs", "results", "logit_growth")
    with open(os.path.join(out, "verdicts.csv")) as f:
        kinds = [row["verdict"] for row in csv.DictReader(f)]
    records = len([f for f in os.listdir(os.path.join(out, "points")) if f.endswith(".json")])
    return [Summary(os.path.relpath(out, REPO), TITLE, f"{records} points recorded; verdicts: "
                    + ", ".join(f"{kinds.count(k)} {k}" for k in dict.fromkeys(kinds)))]
