"""Reproduction 1: Vaswani et al. (2017) Table 3 rows (A) and (B) at CPU scale, with confidence intervals.

Rows (A) vary the number of heads at constant compute (d_k = d_v = d_model / h); rows (B) reduce d_k from
the base (to 1/2 and 1/4 of it) at 8 heads with d_v kept; the A/A control trains the base point (h = 8,
d_k = d_model / 8) again with other seeds, so the report shows how large a difference no change at all makes.
Every point trains with ``train.py`` through ``scripts/sweep.py`` (``configs/table3_heads.py``,
``configs/table3_dk.py``) and, when it finishes, leaves a small committed record in
``<out>/points/<row>/<point>.json`` (final metrics, learning curve, stability statistics, per-sentence BLEU
statistics). A point with a record is never trained again, so the sweep accumulates across sessions with
fresh checkouts; the report is built from the records alone and works with any subset of them.

    python scripts/repro_table3.py                       # 3 seeds, 2,400 steps per point, d_model 128
    python scripts/repro_table3.py --d_model=256         # the wider model -> docs/results/table3_d256
    python scripts/repro_table3.py --report_only         # rebuild the report from the committed records
    python scripts/repro_table3.py --quick               # tiny model, a handful of steps; for tests

Points run seed-major (seed 0 of every setting of rows (A) and (B), then seed 1, ...), then the A/A row and
the single-head extension, so a partial sweep covers every setting first. Statistics: mean +- std over seeds;
each contrast against the base point as a difference of means with a 95% Welch t interval and a seed bootstrap
interval; test BLEU differences per seed pair with a paired bootstrap over test sentences. Verdicts
(``verdict``) compare the Welch interval of the validation-NLL difference with the paper's sign: reproduced
(excludes 0, same sign), contradicted (excludes 0, other sign), not resolved / not reproduced (includes 0),
consistent when the paper has no effect; no verdict with fewer than MIN_SEEDS (3) seeds a side.

The single-head extension (row ``A1``, written on 2026-12-03 after the 3-seed rows (A) at d_model 128 left h = 1
undecided, -0.064 [-0.211, +0.083] nats with a seed spread 9x the base's, and before any of its points ran): h = 1
again with the A/A control's seeds (3 .. 5), so h = 1 and h = 8 both have 6 seeds (h = 8: the base and the A/A
row). Its reading, of the Welch interval of h = 1 minus h = 8 validation NLL over all 6 seeds a side, is fixed
here (``extension_reading``): a penalty larger than the paper's when the lower end is above the paper's +0.073; a
single-head penalty when the lower end is above 0 (smaller than the paper's when the upper end is below +0.073
too); single head better when the upper end is below 0; the paper's penalty ruled out, none resolved, when the
interval holds 0 and its upper end is below +0.073; undecided otherwise. The 3-seed verdict of the contrasts table
stays the pre-set one; the extension is reported beside it.

The single-head d_k control (row ``A1dk``, written on 2026-12-03 after the extension found h = 1 better than
h = 8 at d_model 128, -0.069 [-0.114, -0.025] nats over 6 seeds each, and before any of its points ran): h = 1
with the base's d_k = d_model / 8 and d_v = d_model (the base's total value width), seeds 0 .. 2, so head count
and d_k can be told apart. Two Welch intervals of validation NLL (``dk_control_reading``): head count at equal
d_k, h = 1 (d_k = d_model / 8) minus h = 8 (every seed of the base and the A/A row); d_k at one head, h = 1
(d_k = d_model, every seed of rows (A) and A1) minus h = 1 (d_k = d_model / 8). Reading: the single head's
advantage "goes with its d_k" when the d_k contrast is below 0 and the head-count contrast is not; "goes with the
head count" when the head-count contrast is below 0 and the d_k contrast is not; "both" when both are below 0;
"neither resolved" when neither is; fewer than MIN_SEEDS seeds on a side: "waiting".
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import sys
from typing import Any, Callable, Optional, Sequence

import numpy as np

from _report import Report, environment_line, mean_std, plt
import _stats
import _study
import sweep as sweep_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROWS = {"A": ("configs/table3_heads.py", ""), "B": ("configs/table3_dk.py", ""),
        "AA": ("configs/table3_heads.py", ",aa"),
        "A1": ("configs/table3_heads.py", ",more_h1"),
        "A1dk": ("configs/table3_heads.py", ",h1_base_dk")}  # row -> (config, extra config argument)
LATE_ROWS = {"AA": 1, "A1": 2, "A1dk": 3}  # rows trained after rows (A) and (B) of every seed, in this order
QUICK = {"A": ("model.num_heads", (1, 8))}  # the points of rows (A) --quick runs (rows (B), A/A: all)

# Vaswani et al. 2017, Table 3 (newstest2013 dev; base: h = 8, d_k = 64, PPL 4.92, BLEU 25.8): per contrast,
# the change in log perplexity (nats per wordpiece) and in BLEU against the base. Rows (B) are named by d_k
# as a fraction of the base's (paper: d_k 32 = 1/2, 16 = 1/4).
PAPER = {
    ("h", 1): (math.log(5.29 / 4.92), 24.9 - 25.8),
    ("h", 4): (math.log(5.00 / 4.92), 25.5 - 25.8),
    ("h", 16): (math.log(4.91 / 4.92), 25.8 - 25.8),
    ("h", 32): (math.log(5.01 / 4.92), 25.4 - 25.8),
    ("dk", 2): (math.log(5.01 / 4.92), 25.4 - 25.8),
    ("dk", 4): (math.log(5.16 / 4.92), 25.1 - 25.8),
}
NO_EFFECT = {"nll": 0.005, "bleu": 0.05}  # paper effects smaller than this count as "no effect"
MIN_SEEDS = 3  # seeds a side below which a contrast gets no verdict


# ------------------------------------------------------------------------------------------- records
def metric(record: dict, name: str) -> Optional[float]:
    """A number of a point record: nll, ppl, bleu, chrf, grad (max grad norm), spikes, jump (largest loss
    jump), logit (largest attention logit over groups), warnings (the health monitor's warnings), wall (minutes:
    the larger of the sweep runner's time for the last train.py call and the logged time of all calls), train
    (minutes: steps x the median seconds per step, which pauses do not inflate; None in records made before it
    was recorded)."""
    st = record.get("stability") or {}
    getters: dict[str, Callable[[], Any]] = {
        "nll": lambda: (record.get("validation") or {}).get("nll"),
        "ppl": lambda: (record.get("validation") or {}).get("perplexity"),
        "bleu": lambda: (record.get("test") or {}).get("bleu"),
        "chrf": lambda: (record.get("test") or {}).get("chrf"),
        "grad": lambda: st.get("max_grad_norm"),
        "spikes": lambda: st.get("loss_spikes"),
        "jump": lambda: st.get("max_loss_jump"),
        "warnings": lambda: st.get("health_warnings"),
        "logit": lambda: max([v for v in (st.get("max_attention_logit") or {}).values() if v is not None],
                             default=None),
        "wall": lambda: _study.wall_minutes(record),
        "train": lambda: _study.train_minutes(record),
    }
    if name not in getters:
        raise ValueError(f"metric {name!r}; expected one of {sorted(getters)}")
    v = getters[name]()
    if v is None or not math.isfinite(float(v)):
        return None
    return float(v)


def values(records: Sequence[dict], name: str) -> list[float]:
    return [v for v in (metric(r, name) for r in records) if v is not None]


def sentence_rows(record: dict) -> Optional[np.ndarray]:
    rows = (record.get("bleu_sentence_stats") or {}).get("rows")
    return np.asarray(rows, dtype=np.int64) if rows else None


def contrast(a: Sequence[dict], b: Sequence[dict], name: str) -> tuple[_stats.Interval, _stats.Interval] | None:
    """(Welch, bootstrap) intervals of mean(a) - mean(b) of ``metric`` ``name``; None when a side is empty."""
    va, vb = values(a, name), values(b, name)
    if not va or not vb:
        return None
    return _stats.welch_ci(va, vb), _stats.bootstrap_ci(va, vb)


def paired_bleu(a: Sequence[dict], b: Sequence[dict], resamples: int = 1000) -> list[tuple[Any, Any, _stats.Interval]]:
    """Paired bootstrap of test BLEU per seed pair: a's seed s against b's seed s when b has every seed of a,
    else a's and b's records in seed order (the A/A row: seeds 3, 4, 5 against 0, 1, 2)."""
    a = sorted(a, key=lambda r: r.get("seed", 0))
    b_by_seed = {r.get("seed"): r for r in b}
    if all(r.get("seed") in b_by_seed for r in a):
        pairs = [(r, b_by_seed[r.get("seed")]) for r in a]
    else:
        pairs = list(zip(a, sorted(b, key=lambda r: r.get("seed", 0))))
    out = []
    for ra, rb in pairs:
        sa, sb = sentence_rows(ra), sentence_rows(rb)
        if sa is not None and sb is not None and sa.shape == sb.shape:
            out.append((ra.get("seed"), rb.get("seed"), _stats.paired_bootstrap_bleu(sa, sb, resamples=resamples)))
    return out


def decidable(interval: _stats.Interval) -> bool:
    """Whether ``interval`` has MIN_SEEDS or more seeds a side (and so a width): enough for a verdict."""
    return interval.lo is not None and min(interval.n_a, interval.n_b) >= MIN_SEEDS


def spread_reading(settings: dict, base_label: str) -> str:
    """Seed-to-seed spread of validation NLL per setting against the base's: the settings whose variance
    differs from the base's in a two-sided F test at the 5% level (MIN_SEEDS or more seeds a side)."""
    base = values(settings.get(base_label, {}).get("records", []), "nll")
    if len(base) < MIN_SEEDS:
        return ""
    tested, flagged = 0, []
    for label, s in settings.items():
        v = values(s["records"], "nll")
        if label == base_label or len(v) < MIN_SEEDS or s.get("row") == "AA":
            continue
        ratio, p = _stats.variance_ratio(v, base)
        tested += 1
        if p is not None and p < 0.05:
            flagged.append(f"{label} (std {np.std(v, ddof=1):.3f}, {math.sqrt(ratio):.1f}x the base's; F test "
                           f"p = {p:.3f})")
    if not tested:
        return ""
    head = (f"Seed-to-seed spread of validation NLL (base {base_label}: std {np.std(base, ddof=1):.3f}, n = "
            f"{len(base)}): ")
    if not flagged:
        return head + f"no setting's variance differs from the base's (F test, 5%, {tested} settings tested)."
    return (head + "the variance differs from the base's at the 5% level for " + "; ".join(flagged)
            + f" (F test, {tested} settings tested with no correction for that; it assumes normal values and has "
            "little power with 3 seeds). A mean difference with such a spread is read from its Welch interval, "
            "which allows unequal variances. (Liu, Liu & Han 2021 trace the multi-head advantage to training "
            "stability; `docs/results/heads_vs_depth/` tests that.)")


def budget_reading(by_step: Sequence[tuple[str, Sequence[tuple[int, _stats.Interval]]]]) -> str:
    """Which contrasts' mean differences change sign between validation steps, and whether any step resolves
    a difference (a decidable interval excluding zero): a flip no step resolves is noise, one resolved in
    both directions reverses with the budget, one resolved in one direction only is said so, and one with too
    few seeds for an interval at every step is said to be undecided."""
    noise, reverses, one_way, unseeded = [], [], [], []
    for name, cs in by_step:
        signs = {math.copysign(1, iv.diff) for _, iv in cs if iv.diff != 0}
        if len(cs) < 2 or len(signs) < 2:
            continue
        label = (f"{name.split(' vs ')[0]} ({cs[0][1].diff:+.3f} at step {cs[0][0]}, {cs[-1][1].diff:+.3f} at "
                 f"{cs[-1][0]})")
        resolved = {math.copysign(1, iv.diff): step for step, iv in cs if decidable(iv) and iv.excludes_zero()}
        if not any(decidable(iv) for _, iv in cs):
            unseeded.append(label)
        elif not resolved:
            noise.append(label)
        elif len(resolved) == 2:
            reverses.append(label)
        else:
            sign, step = next(iter(resolved.items()))
            one_way.append(f"{label}, resolved only {'above' if sign > 0 else 'below'} zero (at step {step})")
    if not (noise or reverses or one_way or unseeded):
        return "every contrast keeps its sign at every validation step."
    parts = []
    if reverses:
        parts.append(f"the difference reverses with the budget for {'; '.join(reverses)} (resolved with both "
                     "signs)")
    if one_way:
        parts.append(f"the sign of the mean changes for {'; '.join(one_way)}")
    if noise:
        parts.append(f"the sign of the mean changes for {'; '.join(noise)}, but no validation step resolves a "
                     "difference (every interval includes zero), so the change is within seed noise")
    if unseeded:
        parts.append(f"the sign of the mean changes for {'; '.join(unseeded)}, with fewer than {MIN_SEEDS} seeds a "
                     "side at every step: no interval yet, nothing resolved")
    return "; ".join(parts) + "; the others keep their sign at every step."


def verdict(interval: Optional[_stats.Interval], paper: Optional[float], no_effect: float) -> str:
    """Our interval against the paper's effect: reproduced, contradicted, not resolved, consistent, missing, or
    too few seeds (fewer than MIN_SEEDS on a side: the interval is shown, nothing is claimed)."""
    if interval is None:
        return "missing"
    if not decidable(interval):
        return "too few seeds"
    if paper is None:
        return ("differs from 0" if interval.excludes_zero() else "no difference resolved")
    if abs(paper) < no_effect:
        return "consistent (paper: no effect)" if not interval.excludes_zero() else "differs (paper: no effect)"
    same = (interval.diff > 0) == (paper > 0)
    if interval.excludes_zero():
        return "reproduced" if same else "contradicted"
    return "not resolved (same sign)" if same else "not reproduced"


def extension_reading(interval: Optional[_stats.Interval], paper: float, n_needed: int) -> str:
    """The single-head extension's reading of the Welch interval of h = 1 minus h = 8 validation NLL over all
    seeds (the rule of the module docstring), or why there is none (fewer than ``n_needed`` seeds a side)."""
    if interval is None or min(interval.n_a, interval.n_b) < n_needed or interval.lo is None:
        return f"waiting for {n_needed} seeds a side"
    if interval.lo > paper:
        return f"a single-head penalty larger than the paper's {paper:+.3f}"
    if interval.lo > 0:
        return "a single-head penalty" + (f", smaller than the paper's {paper:+.3f}" if interval.hi < paper else "")
    if interval.hi < 0:
        return "single head better (the paper's penalty contradicted)"
    if interval.hi < paper:
        return f"no penalty resolved; the paper's {paper:+.3f} ruled out"
    return f"undecided: the interval holds 0 and the paper's {paper:+.3f}"


def records_of(settings: dict, rows: Sequence[str], h: int) -> list[dict]:
    """The records of every setting in ``rows`` with ``h`` heads (h = 8 in rows A and AA: the base and the A/A
    row; h = 1 in rows A and A1: every seed of the single head at d_k = d_model)."""
    return [r for s in settings.values() if s["row"] in rows and s["h"] == h for r in s["records"]]


def single_head_extension(settings: dict, d_model: int) -> Optional[tuple[list, str]]:
    """(table row, sentence) of h = 1 against h = 8 over every seed of each (rows (A) and A1 against the base
    and the A/A row); None when the extension has no expected points."""
    ext = [s for s in settings.values() if s["row"] == "A1"]
    h1 = settings.get(f"h=1, d_k={d_model}")
    if not ext or h1 is None:
        return None
    n_needed = h1["expected"] + sum(s["expected"] for s in ext)
    ones, eights = records_of(settings, ("A", "A1"), 1), records_of(settings, ("A", "AA"), 8)
    paper = PAPER[("h", 1)][0]
    nll, bleu = contrast(ones, eights, "nll"), contrast(ones, eights, "bleu")
    reading = extension_reading(nll[0] if nll else None, paper, n_needed)
    seeds = lambda rs: sorted(r.get("seed") for r in rs)  # noqa: E731
    row = [f"h=1 (d_k={d_model}) vs h=8, every seed", str(seeds(ones)), str(seeds(eights)), round(paper, 3),
           nll[0].text(3) if nll else "—", nll[1].text(3) if nll else "—", bleu[0].text(2) if bleu else "—",
           reading]
    sentence = (f"Single-head extension (h = 1 and h = 8 with {n_needed} seeds each, the reading fixed before its "
                f"points ran): Δ NLL {nll[0].text(3) if nll else '—'} nats (n = {len(ones)} vs {len(eights)}): "
                f"{reading}. Head count and d_k change together here (d_k {d_model} at h = 1, {d_model // 8} at "
                "h = 8).")
    return row, sentence


def dk_control_reading(heads: Optional[_stats.Interval], dk: Optional[_stats.Interval]) -> str:
    """The single-head d_k control's reading (the module docstring's rule) of the Welch intervals of h = 1 minus
    h = 8 at equal d_k (``heads``) and of h = 1 at d_k = d_model minus h = 1 at d_model / 8 (``dk``)."""
    if any(iv is None or iv.lo is None or min(iv.n_a, iv.n_b) < MIN_SEEDS for iv in (heads, dk)):
        return f"waiting for {MIN_SEEDS} seeds a side"
    better_heads, better_dk = heads.hi < 0, dk.hi < 0
    if better_dk and better_heads:
        return "both: one head is better at equal d_k, and a wider d_k is better still"
    if better_dk:
        return "the single head's advantage goes with its d_k"
    if better_heads:
        return "the single head's advantage goes with the head count"
    return "neither resolved"


def dk_control(settings: dict, d_model: int) -> Optional[tuple[list[list], str]]:
    """(table rows, sentence) of the single-head d_k control; None when it has no expected points."""
    if not any(s["row"] == "A1dk" for s in settings.values()):
        return None
    small, eights = records_of(settings, ("A1dk",), 1), records_of(settings, ("A", "AA"), 8)
    wide = records_of(settings, ("A", "A1"), 1)
    small_label = f"h=1 (d_k={d_model // 8}, d_v={d_model})"
    pairs = [(f"{small_label} minus h=8 (d_k={d_model // 8}): head count at equal d_k", small, eights),
             (f"h=1 (d_k={d_model}) minus {small_label}: d_k at one head", wide, small)]
    rows, welch = [], []
    for name, a, b in pairs:
        nll, bleu = contrast(a, b, "nll"), contrast(a, b, "bleu")
        welch.append(nll[0] if nll else None)
        rows.append([name, len(a), len(b), nll[0].text(3) if nll else "—", nll[1].text(3) if nll else "—",
                     bleu[0].text(2) if bleu else "—"])
    reading = dk_control_reading(*welch)
    sentence = ("Single-head d_k control (the reading fixed before its points ran): "
                + "; ".join(f"{name} {iv.text(3) if iv else '—'} nats" for (name, _, _), iv in zip(pairs, welch))
                + f": {reading}.")
    return rows, sentence


def valid_nll_at(record: dict, step: int) -> Optional[float]:
    """The record's validation NLL at ``step`` (its learning curve), or None when it was not evaluated there."""
    c = record.get("curve") or {}
    v = dict(zip(c.get("valid_step", []), c.get("valid_nll", []))).get(step)
    return None if v is None or not math.isfinite(float(v)) else float(v)


def contrasts_by_step(a: Sequence[dict], b: Sequence[dict]) -> list[tuple[int, _stats.Interval]]:
    """(step, Welch interval of mean(a) - mean(b) validation NLL over the records evaluated at that step) at
    every validation step where both sides have a record evaluated."""
    out = []
    for step in sorted({s for r in (*a, *b) for s in (r.get("curve") or {}).get("valid_step", [])}):
        va = [v for v in (valid_nll_at(r, step) for r in a) if v is not None]
        vb = [v for v in (valid_nll_at(r, step) for r in b) if v is not None]
        if va and vb:
            out.append((step, _stats.welch_ci(va, vb)))
    return out


def mean_curve(records: Sequence[dict], step_key: str, value_key: str) -> tuple[list[int], list[float]]:
    """Mean over records of a learning-curve series at the steps every record has."""
    series = []
    for r in records:
        c = r.get("curve") or {}
        series.append({s: v for s, v in zip(c.get(step_key, []), c.get(value_key, [])) if v is not None})
    if not series:
        return [], []
    steps = sorted(set.intersection(*(set(s) for s in series)))
    return steps, [float(np.mean([s[x] for s in series])) for x in steps]


def plot_curves(ax_train, ax_valid, groups: dict[str, Sequence[dict]]) -> None:
    """Train NLL (100-step means) and validation NLL against step, mean over seeds, one line per group."""
    for label, recs in groups.items():
        if not recs:
            continue
        s, v = mean_curve(recs, "step", "train_nll")
        line = ax_train.plot(s, v, label=f"{label} (n={len(recs)})", lw=1)[0]
        s, v = mean_curve(recs, "valid_step", "valid_nll")
        ax_valid.plot(s, v, marker="o", ms=3, lw=1, color=line.get_color(), label=f"{label} (n={len(recs)})")
    for ax, title in ((ax_train, "train NLL (100-step means)"), (ax_valid, "validation NLL (whole split)")):
        ax.set_xlabel("step")
        ax.set_ylabel("nats per token")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=6)


# ---------------------------------------------------------------------------------------------- main
PILOTS = os.path.join(REPO, "docs/results/table3_d512/pilot_lr.csv")  # learning-rate pilots of every width > 128


def lr_pilots(d_model: int, path: str = PILOTS) -> list[list]:
    """Step-300 rows of the learning-rate pilots at ``d_model``: [lr, train loss, valid NLL, max logits]."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        rows = [r for r in csv.DictReader(f) if int(r["d_model"]) == d_model and int(r["step"]) == 300]
    return [[float(r["learning_rate"]), float(r["train_loss"]), float(r["valid_nll_at_300"]),
             f"{r['max_logit_encoder_self']} / {r['max_logit_decoder_self']} / {r['max_logit_cross']}"]
            for r in sorted(rows, key=lambda r: -float(r["learning_rate"]))]


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line, checked (one ValueError naming the first bad value)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny model, a few steps, 2 points in rows (A), 1 seed")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2400, help="training steps per point (CPU scale)")
    parser.add_argument("--d_model", type=int, default=128, help="model width (CPU: 128 or 256; an accelerator: "
                        "512, the paper's d_k values, scripts/gpu_sweeps.py)")
    parser.add_argument("--minutes", type=float, default=0.0, help="optional time cap per point (0 = none)")
    parser.add_argument("--test_examples", type=int, default=0, help="test sentences decoded per point (0 = all)")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"rows to train, of {', '.join(ROWS)} (the report "
                        "shows all)")
    parser.add_argument("--report_only", action="store_true", help="train nothing; the report from the records")
    parser.add_argument("--workdir", default=None, help="run folders (default runs/repro/table3[_quick])")
    parser.add_argument("--out", default=None, help="report and records folder (default docs/results/table3, or "
                        "runs/repro/table3_quick with --quick)")
    parser.add_argument("--train_script", default=None, help="training entry point (default <repo>/train.py)")
    args = parser.parse_args(argv)
    _study.check_args(args)
    args.rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    bad = [r for r in args.rows if r not in ROWS]
    if bad:
        raise ValueError(f"--rows {','.join(args.rows)!r}: unknown rows {bad}; expected some of {list(ROWS)}")
    tag = "table3_quick" if args.quick else "table3" + ("" if args.d_model == 128 else f"_d{args.d_model}")
    args.workdir = os.path.abspath(args.workdir or os.path.join(REPO, "runs/repro", tag))
    args.out = args.out or os.path.join(REPO, "runs/repro" if args.quick else "docs/results", tag)
    seeds = 1 if args.quick else args.seeds
    args.config_arg = f"seeds={seeds}" + (
        ",quick" if args.quick else f",steps={args.steps},minutes={args.minutes:g},test_examples={args.test_examples},"
                                    f"d_model={args.d_model}")
    return args


def expected_points(args: argparse.Namespace) -> dict[str, list[tuple[str, sweep_lib.Point]]]:
    """Per row, (config spec, point) of every point the report expects."""
    expected: dict[str, list[tuple[str, sweep_lib.Point]]] = {}
    for row, (path, extra_arg) in ROWS.items():
        spec = f"{os.path.join(REPO, path)}:{args.config_arg}{extra_arg}"
        points = sweep_lib.sweep_points(spec)
        sweep_lib.check_overrides(spec, points, {})
        if args.quick and row in QUICK:
            field, keep = QUICK[row]
            points = [p for p in points if p.overrides[field] in keep]
        expected[row] = [(spec, p) for p in points]
    return expected


def training_order(row: str, point: sweep_lib.Point) -> tuple[int, int, int]:
    """Sort key of a point: seed-major over rows (A) and (B), then the late rows (sorted() keeps the order of
    points that tie)."""
    return LATE_ROWS.get(row, 0), point.overrides.get("seed", 0), list(ROWS).index(row)


def jobs(argv: Optional[Sequence[str]] = None) -> list[_study.Job]:
    """The points of ``--rows`` in training order (seed-major over rows (A) and (B), then the late rows), done or
    not, each with its run folder and record path."""
    args = parse_args(argv)
    return jobs_of(args, expected_points(args))


def jobs_of(args: argparse.Namespace, expected: dict[str, list[tuple[str, sweep_lib.Point]]]) -> list[_study.Job]:
    """``jobs`` from parsed arguments and their ``expected_points``."""
    ordered = sorted(((row, spec, p) for row in args.rows for spec, p in expected[row]),
                     key=lambda j: training_order(j[0], j[2]))
    return [_study.Job(spec, p, os.path.join(args.workdir, row), os.path.join(args.out, "points", row,
                                                                              f"{p.name}.json"), f"{row}/{p.name}")
            for row, spec, p in ordered]


def main(argv: Optional[Sequence[str]] = None) -> str:
    args = parse_args(argv)
    expected = expected_points(args)
    failed = [] if args.report_only else _study.train_jobs(jobs_of(args, expected), args.train_script)
    base = sweep_lib.load_config_module(os.path.join(REPO, ROWS["A"][0])).get_config(args.config_arg)
    path = write_report(args.out, expected, base, quick=args.quick, workdir=args.workdir)
    print(f"wrote {path}")
    if failed:
        print(f"[table3] failed points: {failed}; rerun the same command to retry them", file=sys.stderr)
    return path


# --------------------------------------------------------------------------------------------- report
def setting_of(row: str, overrides: dict, d_model: int) -> tuple[str, int, int, int]:
    """(label, h, d_k, d_v) of a point of ``row``."""
    if row == "B":
        h, dk, dv = 8, int(overrides["model.qk_dim"]), d_model // 8
    else:
        h = int(overrides["model.num_heads"])
        dk = int(overrides["model.qk_dim"])
        dv = int(overrides.get("model.v_dim", dk))
    label = {"AA": "A/A: ", "A1": "more seeds: "}.get(row, "") + f"h={h}, d_k={dk}" + (
        f", d_v={dv}" if row == "A1dk" else "")
    return label, h, dk, dv


def write_report(out: str, expected: dict[str, list], base, *, quick: bool, workdir: str) -> str:
    """The report from the records under ``<out>/points``: tables, contrasts, curves, "What the data say"."""
    d_model = int(base.model.d_model)
    base_dk = d_model // 8
    recs: dict[str, dict[str, dict]] = {row: sweep_lib.read_records_dir(os.path.join(out, "points", row))
                                        for row in ROWS}
    # settings: label -> (row, h, dk, dv, records); rows (B)'s base is rows (A)'s h = 8 point
    settings: dict[str, dict] = {}
    unfinished: list[tuple[str, sweep_lib.Point]] = []
    for row, pts in expected.items():
        for _, p in pts:
            label, h, dk, dv = setting_of(row, p.overrides, d_model)
            s = settings.setdefault(label, {"row": row, "h": h, "dk": dk, "dv": dv, "records": [], "expected": 0})
            s["expected"] += 1
            if p.name in recs[row]:
                s["records"].append(recs[row][p.name])
            else:
                unfinished.append((row, p))
    missing = [f"{row}/{p.name}" for row, p in sorted(unfinished, key=lambda m: training_order(*m))]
    base_label = f"h=8, d_k={base_dk}"
    base_recs = settings.get(base_label, {}).get("records", [])
    all_recs = [r for row in recs.values() for r in row.values()]

    report = Report(out, "Vaswani et al. Table 3 rows (A) and (B) at " + (
        "CPU scale" if d_model <= 256 else f"d_model {d_model} (an accelerator's points)"))
    report.text(environment_line() + (" Quick mode (tiny model, few steps)." if quick else ""))
    report.text(_study.trained_on_text(all_recs))
    commits = sorted({r.get("commit", "unknown") for r in all_recs})
    steps = sorted({r.get("steps") for r in all_recs})
    n_expected = sum(len(v) for v in expected.values())
    report.text(
        f"Protocol: embedded Spanish->English corpus, d_model {d_model}, {base.model.num_encoder_layers}+"
        f"{base.model.num_decoder_layers} layers, d_ff {base.model.d_ff}, no QK-LayerNorm, learning rate "
        f"{base.train.learning_rate:g} ({base.train.schedule}, {base.train.warmup_steps} warmup steps), batch "
        f"{base.data.batch_size} packed rows of {base.data.max_source_len} tokens, {base.train.num_steps} steps per "
        f"point; validation loss on the whole validation split every {base.train.eval_every} steps and at the end; "
        f"greedy decoding of {base.eval.split_examples or 'all'} test sentences at the end (sacreBLEU). Rows (A): "
        f"h with d_k = d_v = d_model / h. Rows (B): h = 8, d_v = {d_model // 8}, d_k reduced from {base_dk} to "
        f"1/2 and 1/4 of it. A/A control: the base point (h = 8, d_k = {base_dk}) with seeds "
        f"{sorted({r.get('seed') for r in recs['AA'].values()}) or 'not yet run'} against the base's own seeds.\n\n"
        f"Records: {len(all_recs)} of {n_expected} points (`points/<row>/<point>.json`, one per finished point: "
        f"config, commit, seed, final metrics, learning curve, stability statistics and per-sentence BLEU "
        f"statistics), and beside each the decoded test sentences (`<point>.test.txt`, greedy, one line per test "
        f"sentence in corpus order). Steps per recorded point: {steps or 'none yet'}. Made by commit(s): "
        f"{', '.join(commits) or '—'}. Run folders (not committed): `{os.path.relpath(workdir, REPO)}/<row>/<point>`.")
    queue = d_model <= 256  # wider: an accelerator's points
    command = "python scripts/repro_table3.py" + (" --quick" if quick else "") + (
        f" --d_model={d_model}" if d_model != 128 else "")
    if not queue:
        command = f"python scripts/gpu_sweeps.py --studies=table3_d{d_model}"
    report.text(_study.runtime_text(command, all_recs, queue=queue))
    if missing:
        report.text(f"**Not finished yet ({len(missing)} points, in training order):** "
                    + ", ".join(f"`{m}`" for m in missing) + ". Everything below uses the finished points only.")
    pilots = [] if quick else lr_pilots(d_model)
    if pilots:
        report.section("Learning rate at this width (pilots)")
        report.text(
            f"The learning rate {base.train.learning_rate:g} (`configs/table3_heads.py: learning_rate`) was chosen "
            "before any point at this width ran: 300-step pilots of the base point (h = 8, seed 0) at 3e-3 x "
            "(128 / d_model)^k for k = 0, 1/2, 1, the candidate with the lowest validation NLL at step 300 (the "
            f"whole validation split). Pilots at every width: [pilot_lr.csv]({os.path.relpath(PILOTS, out)}) "
            "(training loss, gradient norm and the largest attention logit per group every 50 steps). The smallest "
            "candidate won at both widths, the edge of the grid; a 300-step choice favours small rates (the "
            "short-horizon bias), and it was made for the base point only.")
        report.table(["learning rate", "train loss at 300", "valid NLL at 300", "max attn logit at 300 (enc / dec / "
                      "cross)"], pilots, digits=4)

    # ---- per setting
    report.section("Results per setting (mean ± std over seeds)")
    rows_out, csv_runs = [], []
    for label, s in settings.items():
        rs = s["records"]
        params = next((r.get("params") for r in rs if r.get("params") is not None), None)
        rows_out.append([s["row"], s["h"], s["dk"], s["dv"], params,
                         f"{len(rs)}/{s['expected']}" + (f" (seeds {sorted(r.get('seed') for r in rs)})" if rs else ""),
                         mean_std(values(rs, "nll")), mean_std(values(rs, "ppl")), mean_std(values(rs, "bleu")),
                         mean_std(values(rs, "chrf")), mean_std(values(rs, "wall"))])
        for r in rs:
            csv_runs.append([s["row"], r.get("point"), s["h"], s["dk"], s["dv"], r.get("seed"), r.get("steps"),
                             r.get("params"), metric(r, "nll"), metric(r, "ppl"), metric(r, "bleu"),
                             metric(r, "chrf"), metric(r, "grad"), metric(r, "spikes"), metric(r, "jump"),
                             metric(r, "logit"), metric(r, "wall"), metric(r, "train"), r.get("commit")])
    report.table(["row", "h", "d_k", "d_v", "parameters", "seeds done", "valid NLL (nats)", "valid perplexity",
                  "test BLEU", "test chrF", "wall (min)"], rows_out, csv_name="settings.csv")
    report.text("Every run (one line per record):")
    report.table(["row", "point", "h", "d_k", "d_v", "seed", "steps", "parameters", "valid NLL", "valid ppl",
                  "test BLEU", "test chrF", "max grad norm", "loss spikes", "max loss jump", "max attn logit",
                  "wall (min)", "train (min)", "commit"], csv_runs, csv_name="runs.csv", digits=4)

    # ---- contrasts
    contrasts = []  # (name, key in PAPER or None, records)
    for label, s in settings.items():
        if label == base_label:
            continue
        if s["row"] == "A":
            contrasts.append((f"h={s['h']} (d_k={s['dk']}) vs h=8", ("h", s["h"]), s["records"]))
        elif s["row"] == "B":
            frac = base_dk // s["dk"] if s["dk"] else 0
            contrasts.append((f"d_k={s['dk']} (1/{frac} of base) vs {base_dk}", ("dk", frac), s["records"]))
        elif s["row"] == "AA":
            contrasts.append((f"A/A: seeds {sorted(r.get('seed') for r in s['records'])} vs "
                              f"{sorted(r.get('seed') for r in base_recs)}", None, s["records"]))
    report.section("Contrasts against the base point (h = 8, d_k = d_model / 8)")
    report.text("Difference of means (setting minus base) with 95% intervals: Welch's t (primary) and a "
                "bootstrap over seeds (coarse with 3 seeds). NLL is the validation loss in nats per target "
                "token of our 8k BPE vocabulary; the paper's column is the change in log perplexity per wordpiece "
                "on newstest2013 (same units, different data and scale). Verdicts compare the Welch interval "
                "with the paper's sign.")
    c_rows, verdicts = [], []
    fig_rows = []
    for name, key, rs in contrasts:
        paper_nll, paper_bleu = PAPER.get(key, (None, None)) if key else (None, None)
        nll = contrast(rs, base_recs, "nll")
        bleu = contrast(rs, base_recs, "bleu")
        v_nll = verdict(nll[0] if nll else None, paper_nll, NO_EFFECT["nll"])
        v_bleu = verdict(bleu[0] if bleu else None, paper_bleu, NO_EFFECT["bleu"])
        c_rows.append([name, len(rs), len(base_recs), None if paper_nll is None else round(paper_nll, 3),
                       nll[0].text(3) if nll else "—", nll[1].text(3) if nll else "—",
                       None if paper_bleu is None else round(paper_bleu, 1),
                       bleu[0].text(2) if bleu else "—", bleu[1].text(2) if bleu else "—", v_nll, v_bleu])
        verdicts.append((name, key, nll, bleu, v_nll, v_bleu, paper_nll, paper_bleu))
        if nll:
            fig_rows.append((name, nll[0], paper_nll, bleu[0] if bleu else None, paper_bleu))
    report.table(["contrast", "n", "n base", "paper Δ log-ppl", "Δ NLL [Welch 95%]", "Δ NLL [bootstrap 95%]",
                  "paper Δ BLEU", "Δ BLEU [Welch 95%]", "Δ BLEU [bootstrap 95%]", "verdict (NLL)",
                  "verdict (BLEU)"], c_rows, csv_name="contrasts.csv")

    # ---- head count at equal d_k
    same_dk = [(a, b) for a in settings.values() for b in settings.values()
               if a["row"] == "A" and b["row"] == "B" and a["dk"] == b["dk"] and a["records"] and b["records"]]
    if same_dk:
        report.section("Head count at equal d_k: rows (A) against rows (B)")
        report.text("Where a rows (A) point and a rows (B) point share d_k, their difference is the head count "
                    "(and d_v) at the same query/key width: rows (A) has h = d_model / d_k heads with d_v = d_k, "
                    "rows (B) 8 heads with d_v = d_model / 8 (the same total value width; rows (A) has more "
                    "query/key parameters). An interval that includes 0 means the rows (A) penalty at that head "
                    "count cannot be told apart from the penalty of the small d_k alone.")
        e_rows = []
        for a, b in same_dk:
            nll, bleu = contrast(a["records"], b["records"], "nll"), contrast(a["records"], b["records"], "bleu")
            reading = verdict(nll[0] if nll else None, None, NO_EFFECT["nll"])
            e_rows.append([f"h={a['h']} (d_k={a['dk']}, d_v={a['dv']}) minus h={b['h']} (d_k={b['dk']}, d_v={b['dv']})",
                           len(a["records"]), len(b["records"]), nll[0].text(3) if nll else "—",
                           bleu[0].text(2) if bleu else "—", reading])
        report.table(["contrast", "n (A)", "n (B)", "Δ NLL [Welch 95%]", "Δ BLEU [Welch 95%]", "reading (NLL)"],
                     e_rows, csv_name="equal_dk.csv")

    # ---- the single-head extension
    extension = single_head_extension(settings, d_model)
    if extension:
        report.section("Single head with more seeds (extension)")
        report.text("h = 1 trained again with the A/A control's seeds (added after the 3-seed h = 1 contrast at "
                    "d_model 128 was left undecided), compared with h = 8 over every seed of each (h = 8: the base "
                    "and the A/A row). The reading rule was written in `scripts/repro_table3.py` before these "
                    "points ran; the contrasts table above keeps the pre-set 3-seed verdict.")
        report.table(["contrast", "seeds h=1", "seeds h=8", "paper Δ log-ppl", "Δ NLL [Welch 95%]",
                      "Δ NLL [bootstrap 95%]", "Δ BLEU [Welch 95%]", "reading"], [extension[0]],
                     csv_name="single_head_extension.csv")

    control = dk_control(settings, d_model)
    if control:
        report.section("Single head at the base's d_k (control)")
        report.text(f"h = 1 with d_k = {d_model // 8} (the base's) and d_v = {d_model} (the base's total value "
                    f"width), against h = 8 at the same d_k (head count at equal d_k) and against h = 1 at d_k = "
                    f"{d_model} (d_k at one head). Added after the extension at d_model 128 found one head better; "
                    "the reading rule was written in `scripts/repro_table3.py` before these points ran.")
        report.table(["contrast", "n", "n other", "Δ NLL [Welch 95%]", "Δ NLL [bootstrap 95%]",
                      "Δ BLEU [Welch 95%]"], control[0], csv_name="single_head_dk_control.csv")
        report.text(control[1])

    # ---- contrasts against the training budget
    by_step = [(name, contrasts_by_step(rs, base_recs)) for name, _, rs in contrasts]
    steps_seen = sorted({st for _, cs in by_step for st, _ in cs})
    if steps_seen:
        report.section("Contrasts against the training budget")
        report.text("The same validation-NLL contrasts at every validation step where both sides have runs "
                    "evaluated (each point is one run of the full budget evaluated along the way, not a separate run "
                    "per budget; the learning rate schedule is the same at every step): does the sign hold as "
                    "training goes on? "
                    "n: seeds a side evaluated at that step (a record made before validation ran every "
                    f"{base.train.eval_every} steps has fewer steps).")
        b_rows = []
        for name, cs in by_step:
            at = dict(cs)
            b_rows.append([name] + [f"{at[st].text(3)} (n {at[st].n_a}/{at[st].n_b})" if st in at else "—"
                                    for st in steps_seen])
        report.table(["contrast"] + [f"Δ NLL at {st}" for st in steps_seen], b_rows, csv_name="contrasts_by_step.csv")
        fig, ax = plt.subplots(figsize=(7, 3.6))
        for i, (name, cs) in enumerate(by_step):
            if cs:
                ax.plot([st for st, _ in cs], [iv.diff for _, iv in cs], marker="o", ms=3, lw=1, color=f"C{i}",
                        label=name)
                ci = [(st, iv) for st, iv in cs if iv.lo is not None]
                if ci:
                    ax.fill_between([st for st, _ in ci], [iv.lo for _, iv in ci], [iv.hi for _, iv in ci],
                                    color=f"C{i}", alpha=0.12)
        ax.axhline(0, color="gray", lw=0.8)
        ax.set_xlabel("step")
        ax.set_ylabel("Δ validation NLL vs base (nats)")
        ax.legend(fontsize=6)
        fig.tight_layout()
        report.figure(fig, "contrasts_by_step", "Each contrast's difference of mean validation NLL against the "
                      "base at every validation step both sides have, with its 95% Welch band where there are 2+ seeds "
                      "a side.")

    # ---- paired bootstrap BLEU
    report.section("Test BLEU per seed pair (paired bootstrap over test sentences)")
    report.text("For each contrast and seed, BLEU(setting) - BLEU(base) on the same test sentences with a 95% "
                "percentile interval and two-sided p from 1,000 resamples of the sentences (the A/A row pairs "
                "seeds 3/4/5 with 0/1/2). This measures test-set sampling noise for one pair of trained models; "
                "the seed-level intervals above measure training noise.")
    p_rows, p_summary = [], {}
    for name, key, rs in contrasts:
        for sa, sb, iv in paired_bleu(rs, base_recs):
            p_rows.append([name, sa, sb, iv.text(2), iv.p])
            p_summary.setdefault(name, []).append(iv)
    report.table(["contrast", "seed", "base seed", "Δ BLEU [95%]", "p"], p_rows, csv_name="paired_bleu.csv")

    # ---- figures
    if any(s["records"] for s in settings.values()):
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
        labels = [l for l, s in settings.items() if s["records"]]
        for ax, (m, ylabel) in zip(axes, (("nll", "validation NLL (nats)"), ("bleu", "test BLEU"))):
            for i, l in enumerate(labels):
                v = values(settings[l]["records"], m)
                if v:
                    ax.errorbar([i], [np.mean(v)], yerr=[np.std(v, ddof=1) if len(v) > 1 else 0], marker="o",
                                capsize=3, color="C0")
                    ax.scatter([i] * len(v), v, s=8, color="gray", zorder=3)
            ax.set_xticks(range(len(labels)), [l.replace(", ", "\n") for l in labels], fontsize=6)
            ax.set_ylabel(ylabel)
        fig.tight_layout()
        report.figure(fig, "table3", "Validation NLL and test BLEU per setting: mean ± std over seeds (blue), "
                      "single seeds (grey).")
    if fig_rows:
        fig, axes = plt.subplots(1, 2, figsize=(10, 0.5 + 0.45 * len(fig_rows)), squeeze=False)
        for ax, idx, (xlabel) in ((axes[0, 0], 1, "Δ validation NLL vs base (nats)"),
                                  (axes[0, 1], 3, "Δ test BLEU vs base")):
            for y, row in enumerate(fig_rows):
                iv, paper = row[idx], row[idx + 1]
                if iv is not None:
                    err = ([[iv.diff - iv.lo], [iv.hi - iv.diff]] if iv.lo is not None else None)
                    ax.errorbar([iv.diff], [y], xerr=err, fmt="o", color="C0", capsize=3,
                                label="ours (Welch 95%)" if y == 0 else None)
                if paper is not None:
                    ax.scatter([paper], [y], marker="x", color="C3", zorder=3, label="paper" if y == 0 else None)
            ax.axvline(0, color="gray", lw=0.8)
            ax.set_yticks(range(len(fig_rows)), [r[0] for r in fig_rows], fontsize=7)
            ax.invert_yaxis()
            ax.set_xlabel(xlabel)
            ax.legend(fontsize=7)
        fig.tight_layout()
        report.figure(fig, "contrasts", "Each contrast against the base point: our difference of means with its "
                      "95% Welch interval (blue) and the paper's Table 3 difference (red x).")
    if any(r.get("curve") for r in all_recs):
        fig, axes = plt.subplots(2, 2, figsize=(10, 7))
        groups_a = {l: s["records"] for l, s in settings.items() if s["row"] in ("A", "A1", "A1dk")}
        groups_b = {l: s["records"] for l, s in settings.items() if s["row"] in ("B", "AA") or l == base_label}
        plot_curves(axes[0, 0], axes[0, 1], groups_a)
        plot_curves(axes[1, 0], axes[1, 1], groups_b)
        for ax in axes[:, 1]:
            ys = [l.get_ydata() for l in ax.get_lines() if len(l.get_ydata())]
            if ys:
                lo = min(float(np.min(y)) for y in ys)
                ax.set_ylim(lo - 0.1, lo + 2.0)
        fig.tight_layout()
        report.figure(fig, "learning_curves", "Learning curves, mean over seeds: rows (A) on top, rows (B) with "
                      "the base and the A/A control below.")
    st_rows = [[l, len(s["records"]), mean_std(values(s["records"], "grad")), mean_std(values(s["records"], "spikes")),
                mean_std(values(s["records"], "jump")), mean_std(values(s["records"], "logit"))]
               for l, s in settings.items() if s["records"]]
    if st_rows:
        report.section("Stability")
        report.text("Per run, then mean ± std over seeds: the largest logged gradient norm (before clipping, mean "
                    f"of each {base.train.log_every}-step interval), loss spikes ({sweep_lib.SPIKE_NATS} nats above "
                    f"the median of the previous {sweep_lib.SPIKE_WINDOW} logged losses), the largest such jump, and "
                    "the largest attention logit of the logged statistics (any group, layer and head).")
        report.table(["setting", "n", "max grad norm", "loss spikes", "max loss jump", "max attention logit"],
                     st_rows)

    report.section("What the data say")
    report.text(what_the_data_say(verdicts, p_summary, settings, base_label, missing, d_model, all_recs, by_step)
                + (f"\n\n{extension[1]}" if extension else "") + (f"\n\n{control[1]}" if control else ""))
    return report.write()


def budget(records: Sequence[dict]) -> str:
    steps = sorted({r.get("steps") for r in records if r.get("steps")})
    epochs = sorted({round(r["steps"] / r["batches_per_epoch"], 2) for r in records
                     if r.get("steps") and r.get("batches_per_epoch")})
    return (f"{'/'.join(str(s) for s in steps)} steps" + (f" (about {'/'.join(str(e) for e in epochs)} epochs)"
                                                          if epochs else "")) if steps else "no finished points"


def what_the_data_say(verdicts, p_summary, settings, base_label, missing, d_model, records, by_step=()) -> str:
    """The paragraph, generated from the intervals: which effects reproduce, at what budget (``by_step``:
    (contrast, [(step, interval)]) pairs), what is missing."""
    n_base = len(settings.get(base_label, {}).get("records", []))
    intro = (f"Budget: {budget(records)} per point, d_model {d_model}; base point ({base_label}): "
             f"{n_base} seed{'' if n_base == 1 else 's'}. Verdicts use the 95% Welch interval of "
             "the difference in validation NLL against the paper's sign; with enough seeds each line also says "
             "whether the paper's value lies inside that interval (a verdict other than 'reproduced' with the "
             "paper's value inside is a wide interval, not evidence against the paper).")
    if not records:
        return "No point has finished yet: nothing can be said."
    items, tally = [], {}
    for name, key, nll, bleu, v_nll, v_bleu, paper_nll, paper_bleu in verdicts:
        if key is not None:
            tally.setdefault(v_nll, []).append(name.split(" vs ")[0])
        if nll is None:
            items.append(f"- {name}: no finished seeds yet.")
            continue
        w = nll[0]
        paper = "" if paper_nll is None else f" (paper {paper_nll:+.3f} nats, {paper_bleu:+.1f} BLEU)"
        text = f"- {name}: Δ NLL {w.text(3)} nats, n = {w.n_a} vs {w.n_b}{paper}: **{v_nll}**"
        if paper_nll is not None and decidable(w):
            where = ("inside our interval: not ruled out" if w.lo <= paper_nll <= w.hi else
                     "below our interval" if paper_nll < w.lo else "above our interval")
            text += f" (the paper's {paper_nll:+.3f} is {where})"
        if bleu:
            text += f"; Δ BLEU {bleu[0].text(2)}: {v_bleu}"
        pairs = p_summary.get(name, [])
        if pairs:
            sig = sum(1 for iv in pairs if iv.excludes_zero())
            text += (f"; paired bootstrap: {sig} of {len(pairs)} seed pairs differ in BLEU at the 5% level "
                     f"(Δ {', '.join(f'{iv.diff:+.2f}' for iv in pairs)})")
        items.append(text + ".")
    paragraphs = [intro, "\n".join(items),
                  "In short (NLL): " + "; ".join(f"{v}: {', '.join(names)}" for v, names in tally.items()) + "."]
    if by_step and any(cs for _, cs in by_step):
        paragraphs.append("Against the training budget (mean differences at the validation steps): "
                          + budget_reading(by_step))
    spread = spread_reading(settings, base_label)
    if spread:
        paragraphs.append(spread)
    aa = [v for v in verdicts if v[1] is None and v[2] is not None]
    if aa:
        w = aa[0][2][0]
        if not decidable(w):
            paragraphs.append(f"The A/A control has too few seeds for a verdict yet ({w.text(3)} nats, n = {w.n_a} "
                              f"vs {w.n_b}).")
        elif w.excludes_zero():
            paragraphs.append(f"**The A/A control's interval excludes zero** ({w.text(3)} nats between identical "
                              "settings): seed-to-seed variation is larger than the Welch intervals assume here, so "
                              "treat the other 'reproduced' verdicts with the same suspicion.")
        else:
            paragraphs.append(f"The A/A control (identical settings, other seeds) gives {w.text(3)} nats, an "
                              "interval that includes zero, as it should.")
        aa_pairs = p_summary.get(aa[0][0], [])
        flagged = sum(1 for iv in aa_pairs if iv.excludes_zero())
        if flagged:
            paragraphs.append(
                f"The paired bootstrap flags {flagged} of {len(aa_pairs)} A/A seed pairs as differing in BLEU at the "
                "5% level between identical settings: it resamples test sentences for one pair of trained models "
                "and leaves out the seed-to-seed variation, so a contrast's 'n of 3 seed pairs differ' is no "
                "evidence of an effect; the seed-level intervals are the verdicts' basis.")
    if d_model // 32 < 16:
        paragraphs.append(f"Confounds: at d_model {d_model}, h = 32 means d_k = {d_model // 32} (the paper's smallest"
                          f" d_k is 16), so the rows (A) contrast at h = 32 alone cannot tell a head-count penalty "
                          f"from a small-d_k one; the equal-d_k table does, against rows (B)'s 1/4 point, which has "
                          f"d_k = {d_model // 32} too.")
    if missing:
        paragraphs.append(f"{len(missing)} points have not finished; their settings are missing or rest on fewer "
                          "seeds, and the verdicts may change as the sweep completes.")
    return "\n\n".join(paragraphs)


if __name__ == "__main__":
    from engine import cli

    sys.exit(0 if cli.script(main) else 1)
