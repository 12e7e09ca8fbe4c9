"""Heads vs depth (Liu, Liu & Han 2021): 8 heads x 3+3 layers against single-head models 6+6, 12+12 and 24+24
layers deep at the same parameter count, pre-LN with and without QK-LayerNorm, and post-LN with the short and a
long learning-rate warmup and with Admin, on the Table 3 CPU-scale translation model.

Liu et al. ("Multi-head or single-head? An empirical comparison for Transformer training") split each
multi-head layer into single-head layers of the same total width, so the deep single-head model attends as many
places with as many parameters, and report that the multi-head advantage is mostly training stability: deeper
single-head models match or beat it once they train. This trains the points of ``configs/heads_depth.py``
(the construction is in its docstring) through ``scripts/sweep.py`` (``train.py`` runs, resumable) and keeps
a committed record per finished point in ``<out>/points/<point>.json`` (as ``scripts/repro_table3.py``
does), so a point with a record is never trained again; the report is built from the records alone: quality
(validation NLL on the whole split, test BLEU) and stability (loss spikes, largest gradient norm, largest
attention logit from the engine's statistics).

    python scripts/repro_heads_depth.py                 # 3 seeds x (4 architectures x 5 arms + 2 x 1, see below)
    python scripts/repro_heads_depth.py --report_only   # the report from the committed records
    python scripts/repro_heads_depth.py --quick         # tiny model, a handful of steps; for tests

Pass criteria (written on 2026-12-02 and revised the same day from one deep model to three, before any point
of the sweep ran). Each deep single-head model is judged on its own against the shallow multi-head one.
Contrasts are deep minus shallow, differences of means over seeds with a 95% Welch interval; fewer than
MIN_SEEDS (3) finished seeds on a side make a row undecided. MARGIN = 0.05 nats of validation NLL (two thirds
of the single-head penalty of Vaswani et al.'s Table 3, +0.073).
1. and 2. "A deeper single-head model matches the multi-head one" (QK-LayerNorm off; on): reproduced when the
   interval's upper end is below +MARGIN; not reproduced when its lower end is above 0 (significantly worse);
   undecided otherwise (too wide to tell).
3. "Without QK-LayerNorm the deep single-head model trains less stably": reproduced when the interval of at
   least one of max gradient norm, max loss jump and max attention logit lies above 0; not reproduced when
   none does.
4. "The multi-head advantage is training stability" (Liu et al.'s reading): reproduced when criterion 1 is not
   reproduced (a multi-head advantage without QK-LayerNorm) and criterion 2 is (the stabilised deep model
   matches); not reproduced when criterion 2 is not reproduced (worse even when stabilised); undecided when
   there is no multi-head advantage to explain (criterion 1 reproduced) or a criterion is undecided.

The post-LN arm and criteria 5-6 were added on 2026-12-02 (a later session), before any point of the sweep ran,
after two 300-step post-LN pilots (``docs/results/heads_vs_depth/pilot_post_ln.csv``; seed 0, ``python train.py
--config=configs/heads_depth.py:arch=<arch>,steps=300,test_examples=20 --config.model.norm=post``, so the
learning rate decays to 0 at step 300): validation NLL at step 300 4.79 for 8 heads x 3+3, 6.23 for 1 head x
24+24, which had not moved from 6.28 at step 75. Liu et al. had to stabilise the training of their deep
single-head models; post-LN without a stabiliser is the setting in which depth should cost the single-head
model, and pre-LN is our stabiliser.
5. "Without a stabiliser (post-LN) the deep single-head model is worse than the multi-head one": reproduced when
   the post-LN interval of deep - shallow validation NLL has its lower end above +MARGIN; not reproduced when its
   upper end is below +MARGIN; undecided otherwise.
6. "The post-LN depth penalty is training stability: a stabiliser (pre-LN) removes it": reproduced when criteria
   5 and 1 are reproduced (worse post-LN, matches pre-LN); not reproduced when 5 is reproduced and 1 is not
   reproduced (worse pre-LN too); undecided when there is no post-LN penalty to explain (5 not reproduced) or a
   criterion is undecided.

The long-warmup post-LN arm and criteria 7-8 were added on 2026-12-03 (a later session), after 16 of the first
36 points had finished, seed 0 of every arm among them (every single-head post-LN model stayed at validation NLL
6.21, the unigram level, while 8 heads x 3+3 post-LN reached 3.26), and after four pilots
(``docs/results/heads_vs_depth/pilot_post_ln_warmup.csv``): with 800 warmup steps instead of 100, 1 head x 24+24
post-LN was still at validation NLL 6.25 (peak learning rate 3e-3) and 6.08 (1e-3) at step 800, while 1 head x 6+6
post-LN reached 4.58 at step 800; and 8 heads x 6+6 post-LN with the short warmup (a depth control, not
parameter-matched: 3.80M parameters) was at 6.16 at step 300, where 8 heads x 3+3 had reached 4.79, so the
post-LN failure follows depth, not the single head. A long warmup is the usual stabiliser of post-LN training
(Vaswani et al. warm up for 4,000 steps; Xiong et al. 2020); the arm keeps the peak learning rate (3e-3) and
changes only the warmup, to a third of the steps (800).
7. "With a long warmup the deep single-head model matches the multi-head one (post-LN)": as criteria 1 and 2, on
   the long-warmup post-LN arm (shallow and deep both with the long warmup).
8. "A long warmup trains the post-LN deep single-head model": the interval of deep long-warmup minus deep
   short-warmup validation NLL; reproduced when its upper end is below -MARGIN; not reproduced when its lower end
   is above -MARGIN; undecided otherwise.

The Admin post-LN arm and criteria 9-10 were added on 2026-12-03 (a later session), after 22 of the first 36
points had finished (seeds 0 and 1 of both pre-LN arms, seed 0 and half of seed 1 of the post-LN arm; no
long-warmup point), and after two 300-step pilots (``docs/results/heads_vs_depth/pilot_admin.csv``; seed 0,
``python train.py --config=configs/heads_depth.py:arch=<arch>,post,steps=300,test_examples=20
--config.model.norm=admin``, the protocol of ``pilot_post_ln.csv``): at step 300, 1 head x 24+24 post-LN with
Admin reached validation NLL 4.79 (plain post-LN: 6.23) and 8 heads x 3+3 with Admin 4.59 (plain post-LN: 4.79).
The arm runs before the long-warmup arm (Admin is the stabiliser of Liu, Liu & Han). Admin (Liu et al. 2020,
"Understanding the Difficulty of Training Transformers"; ``models.admin_initialize``) rescales each post-LN
residual, ``LN(omega * x + f(x))``, with omega set from one forward pass at initialisation; Liu, Liu & Han
stabilised their deep single-head models with it. The arm keeps everything else of the post-LN arm (the 100
warmup steps, peak learning rate 3e-3).
9. "With Admin the deep single-head model matches the multi-head one (post-LN)": as criteria 1 and 2, on the
   Admin arm (shallow and deep both with Admin).
10. "Admin trains the post-LN deep single-head model": as criterion 8, on deep Admin minus deep plain post-LN.

The long-budget arm and criterion 11 were added on 2026-12-03 (a later session), after the QK-LN-off arm had
finished (3 seeds of every architecture) and 28 of the 60 points: 1 head x 6+6 was worse than 8 heads x 3+3 by
+0.050 [+0.029, +0.070] nats at step 2,400, but that gap had narrowed at every validation step (+0.120, +0.103,
+0.087, +0.050 at steps 600, 1,200, 1,800, 2,400), while the 12+12 and 24+24 gaps had not (+0.220 to +0.191,
+0.292 to +0.302); Liu, Liu & Han trained far longer. The arm trains 8 heads x 3+3 and 1 head x 6+6 (pre-LN,
QK-LayerNorm off) for 3 x 2,400 = 7,200 steps (about 7.6 epochs), seeds 0-2, with everything else as the QK-LN-off
arm; the rsqrt schedule does not depend on the number of steps, so its first 2,400 steps are the QK-LN-off
points' run (the report checks it: ``same_start.csv``) and its validation every 600 steps extends their curves.
It runs after the Admin arm and before the long-warmup arm.
11. "With 3x the training budget the deep single-head model matches the multi-head one (QK-LN off)": as criteria
    1 and 2, on the long-budget arm (shallow and deep both at 7,200 steps).

Checked on 2026-12-04, after 3 long-budget points: their first 2,400 steps differ from the QK-LN-off points' runs
(validation NLL up to 0.016 nats; ``same_start.csv``), which were made by older commits; a 200-step rerun of
8 heads x 3+3 seed 0 at the long-budget points' commit (917d997, ``--config.train.num_steps=200``) logged the same
train losses as the long-budget run bit for bit, and so did 100 steps at 0ec014c (the commit of the 2,400-step
seed-0 point, without its uncommitted local changes): the program is deterministic and the commit does not explain
the difference; the machine or library build of the earlier runs (not kept in records before 2026-12-04) is the
likely cause. Criterion 11 compares long-budget records only.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
from typing import Optional, Sequence

import numpy as np

from _report import VERDICT_HEADERS, Report, environment_line, mean_std, plt
import _stats
import repro_table3 as t3
import _study
import sweep as sweep_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = "configs/heads_depth.py"
PAPER = "Liu, Liu & Han 2021, Multi-head or Single-head? An Empirical Comparison for Transformer Training"
MIN_SEEDS = t3.MIN_SEEDS  # 3: as in the Table 3 report
MARGIN = 0.05  # nats of validation NLL: "matches" when deep - shallow stays below it


# pre-LN without, with QK-LayerNorm; post-LN with the Table 3 model's 100 warmup steps, with a third of the steps,
# and with Admin's residual scales (100 warmup steps)
VARIANTS = {"off": "QK-LN off", "on": "QK-LN on", "post": "post-LN", "warm": "post-LN, long warmup",
            "admin": "post-LN, Admin", "long": "QK-LN off, long budget"}


def setting(overrides: dict) -> tuple[str, str, str]:
    """(architecture label, variant (a key of VARIANTS), full label) of a point."""
    h, n, d_ff = overrides["model.num_heads"], overrides["model.num_encoder_layers"], overrides["model.d_ff"]
    arch = f"{h} head{'s' if h > 1 else ''} x {n}+{n}, d_k {overrides['model.qk_dim']}, d_ff {d_ff}"
    norm = overrides.get("model.norm", "pre")
    if "train.num_steps" in overrides:
        variant = "long"
    elif norm == "admin":
        variant = "admin"
    elif norm == "post":
        variant = "warm" if "train.warmup_steps" in overrides else "post"
    else:
        variant = "on" if overrides["model.qk_layernorm"] else "off"
    return arch, variant, f"{arch}, {VARIANTS[variant]}"


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line, checked, with the run and report folders and the config argument filled in."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny model, a few steps, 1 seed")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2400, help="training steps per point")
    parser.add_argument("--minutes", type=float, default=0.0, help="optional time cap per point (0 = none)")
    parser.add_argument("--test_examples", type=int, default=0, help="test sentences decoded per point (0 = all)")
    parser.add_argument("--report_only", action="store_true", help="train nothing; the report from the records")
    parser.add_argument("--workdir", default=None, help="run folders (default runs/repro/heads_depth[_quick])")
    parser.add_argument("--out", default=None, help="report and records folder (default docs/results/heads_vs_depth, "
                        "or runs/repro/heads_depth_quick with --quick)")
    parser.add_argument("--train_script", default=None, help="training entry point (default <repo>/train.py)")
    args = parser.parse_args(argv)
    _study.check_args(args)
    tag = "heads_depth_quick" if args.quick else "heads_depth"
    args.workdir = os.path.abspath(args.workdir or os.path.join(REPO, "runs/repro", tag))
    args.out = args.out or os.path.join(REPO, "runs/repro/heads_depth_quick" if args.quick
                                        else "docs/results/heads_vs_depth")
    args.config_arg = (f"seeds={1 if args.quick else args.seeds},steps={args.steps},minutes={args.minutes:g},"
                       f"test_examples={args.test_examples}" + (",quick" if args.quick else ""))
    return args


def points_of(args: argparse.Namespace) -> tuple[str, list[sweep_lib.Point]]:
    """The config spec and every point of the study, in training order."""
    spec = f"{os.path.join(REPO, CONFIG)}:{args.config_arg}"
    points = sweep_lib.sweep_points(spec)
    sweep_lib.check_overrides(spec, points, {})
    return spec, points


def jobs(argv: Optional[Sequence[str]] = None) -> list[_study.Job]:
    """Every point in training order, done or not, with its run folder and record path."""
    args = parse_args(argv)
    return jobs_of(args, *points_of(args))


def jobs_of(args: argparse.Namespace, spec: str, points: Sequence[sweep_lib.Point]) -> list[_study.Job]:
    """``jobs`` from parsed arguments and their ``points_of``."""
    return _study.study_jobs(spec, points, args.workdir, os.path.join(args.out, "points"))


def main(argv: Optional[Sequence[str]] = None) -> str:
    args = parse_args(argv)
    spec, points = points_of(args)
    failed = [] if args.report_only else _study.train_jobs(jobs_of(args, spec, points), args.train_script)
    base = sweep_lib.load_config_module(os.path.join(REPO, CONFIG)).get_config(args.config_arg)
    path = write_report(args.out, points, base, quick=args.quick, workdir=args.workdir)
    print(f"wrote {path}")
    if failed:
        print(f"[heads_depth] failed points: {failed}; rerun the same command to retry them", file=sys.stderr)
    return path


def write_report(out: str, points: Sequence[sweep_lib.Point], base, *, quick: bool, workdir: str) -> str:
    """The report from the records under ``<out>/points``."""
    recs = sweep_lib.read_records_dir(os.path.join(out, "points"))
    settings: dict[str, dict] = {}
    missing = []
    long_settings = {}  # (arch, "long") -> its steps
    for p in points:
        arch, variant, label = setting(p.overrides)
        if variant == "long":
            long_settings[(arch, variant)] = str(p.overrides["train.num_steps"])
        s = settings.setdefault(label, {"arch": arch, "variant": variant, "records": [], "expected": 0})
        s["expected"] += 1
        if p.name in recs:
            s["records"].append(recs[p.name])
        else:
            missing.append(p.name)
    archs = list(dict.fromkeys(s["arch"] for s in settings.values()))
    all_recs = list(recs.values())

    report = Report(out, "Heads vs depth (Liu, Liu & Han 2021) at CPU scale")
    report.text(environment_line() + (" Quick mode (tiny model, few steps)." if quick else ""))
    report.text(_study.trained_on_text(all_recs))
    report.text(
        f"Protocol: the Table 3 CPU-scale translation model (d_model {base.model.d_model}, {base.model.norm}-LN, "
        f"gradient clipping at norm {base.train.grad_clip_norm:g}, learning rate "
        f"{base.train.learning_rate:g}, {base.train.schedule} schedule with {base.train.warmup_steps} warmup steps, "
        f"batch {base.data.batch_size} packed rows, {base.train.num_steps} steps): {archs[0]} against "
        f"{', '.join(archs[1:])} (d_v = d_k). Liu et al.'s construction: each multi-head layer split into single-head "
        "layers sharing its attention and feed-forward widths, so attention and feed-forward weights are equal at "
        "every depth (`configs/heads_depth.py`; the parameters column counts LayerNorms and biases too), each "
        "pre-LN with QK-LayerNorm off and on, and post-LN (QK-LayerNorm off; LayerNorm after each sublayer, as in "
        "Vaswani et al., no stabiliser; the two 300-step pilots that motivated it: `pilot_post_ln.csv`), and "
        f"post-LN with a long warmup ({long_warmup_text(points)} warmup steps instead of "
        f"{base.train.warmup_steps}, the same peak learning rate; the pilots run before it: "
        "`pilot_post_ln_warmup.csv`, which also holds a depth control: 8 heads x 6+6 post-LN with the short "
        "warmup, not parameter-matched, still at validation NLL 6.16 at step 300, so the short-warmup post-LN "
        "failure follows depth, not the single head), and post-LN with Admin (Liu et al. 2020: each residual "
        "`LN(omega * x + f(x))` with omega set from one forward pass at initialisation, `model.norm=admin`; the "
        f"{base.train.warmup_steps} warmup steps; the two 300-step pilots run before it: `pilot_admin.csv`)"
        + (f", and a long-budget arm: {' and '.join(a for a in archs if (a, 'long') in long_settings)} pre-LN with "
           f"QK-LayerNorm off for {' / '.join(sorted(set(long_settings.values())))} steps (criterion 11)"
           if long_settings else "") + ". Validation NLL on the whole validation "
        f"split (every {base.train.eval_every} steps and at the end), greedy test BLEU on "
        f"{base.eval.split_examples or 'all'} test sentences.\n\n"
        f"Records: {len(all_recs)} of {len(points)} points (`points/<point>.json`, with the decoded test sentences "
        "beside each: `<point>.test.txt`, one line per test sentence in corpus order). Made by commit(s): "
        f"{', '.join(sorted({r.get('commit', 'unknown') for r in all_recs})) or '—'}. Run folders (not committed): "
        f"`{os.path.relpath(workdir, REPO)}/<point>`.")
    report.text(_study.runtime_text("python scripts/repro_heads_depth.py" + (" --quick" if quick else ""), all_recs))
    if missing:
        report.text(f"**Not finished yet ({len(missing)} points):** " + ", ".join(f"`{m}`" for m in missing)
                    + ". Everything below uses the finished points only.")

    report.section("Results per setting (mean ± std over seeds)")
    rows, runs = [], []
    for label, s in settings.items():
        rs = s["records"]
        params = next((r.get("params") for r in rs if r.get("params") is not None), None)
        rows.append([label, params, f"{len(rs)}/{s['expected']}"] + [mean_std(t3.values(rs, m)) for m in (
            "nll", "ppl", "bleu", "grad", "spikes", "jump", "logit", "warnings", "wall")])
        for r in rs:
            runs.append([r.get("point"), label, r.get("seed"), r.get("steps"), r.get("params")]
                        + [t3.metric(r, m) for m in ("nll", "ppl", "bleu", "chrf", "grad", "spikes", "jump", "logit",
                                                     "warnings")]
                        + [r.get("stability", {}).get("non_finite_step"), t3.metric(r, "wall"), t3.metric(r, "train"),
                           r.get("commit")])
    report.table(["setting", "parameters", "seeds done", "valid NLL", "valid perplexity", "test BLEU",
                  "max grad norm", "loss spikes", "max loss jump", "max attention logit", "health warnings",
                  "wall (min)"], rows, csv_name="settings.csv")
    report.text(f"Loss spike: a logged train loss more than {sweep_lib.SPIKE_NATS} nats above the median of the "
                f"previous {sweep_lib.SPIKE_WINDOW} logged losses; gradient norm before clipping, mean of each "
                f"{base.train.log_every}-step interval; attention logit: the largest of the logged statistics "
                f"(every {base.train.stats_every} steps, any group, layer and head); health warnings: the attention "
                "health monitor's (`engine/health.py`, the `health` defaults of `engine/config.py`), one each time "
                "a head enters a flagged state, descriptive only (no criterion uses them).")
    report.table(["point", "setting", "seed", "steps", "parameters", "valid NLL", "valid ppl", "test BLEU",
                  "test chrF", "max grad norm", "loss spikes", "max loss jump", "max attn logit", "health warnings",
                  "non-finite step", "wall (min)", "train (min)", "commit"], runs, csv_name="runs.csv", digits=4)

    report.section("Contrasts")
    report.text("Difference of means with 95% intervals: Welch's t, then the bootstrap over seeds.")
    by = {(s["arch"], s["variant"]): s["records"] for s in settings.values()}
    shallow = archs[0]
    deep_pairs = [(f"{deep} minus {shallow}, {name}", by.get((deep, v), []), by.get((shallow, v), []))
                  for deep in archs[1:] for v, name in VARIANTS.items() if (deep, v) in by]
    pairs = list(deep_pairs)
    for a in archs:
        if (a, "long") in by:
            pairs.append((f"long budget minus {base.train.num_steps} steps (QK-LN off), {a}", by[(a, "long")],
                          by.get((a, "off"), [])))
    for a in archs:
        pairs.append((f"QK-LN on minus off, {a}", by.get((a, "on"), []), by.get((a, "off"), [])))
        pairs.append((f"post-LN minus pre-LN (QK-LN off), {a}", by.get((a, "post"), []), by.get((a, "off"), [])))
        pairs.append((f"long minus short warmup (post-LN), {a}", by.get((a, "warm"), []), by.get((a, "post"), [])))
        pairs.append((f"Admin minus plain post-LN, {a}", by.get((a, "admin"), []), by.get((a, "post"), [])))
    c_rows, findings, paired_rows = [], [], []
    for name, a, b in pairs:
        row = [name, len(a), len(b)]
        cells = {}
        for m in ("nll", "bleu", "grad", "logit", "jump"):
            c = t3.contrast(a, b, m)
            cells[m] = c
            row.append(f"{c[0].text(3)} (bootstrap [{c[1].lo:+.3f}, {c[1].hi:+.3f}])"
                       if c and c[1].lo is not None else (c[0].text(3) if c else "—"))
        c_rows.append(row)
        findings.append((name, cells))
        for sa, sb, iv in t3.paired_bleu(a, b):
            paired_rows.append([name, sa, sb, iv.text(2), iv.p])
    report.table(["contrast", "n", "n other", "Δ valid NLL", "Δ test BLEU", "Δ max grad norm",
                  "Δ max attention logit", "Δ max loss jump"], c_rows, csv_name="contrasts.csv")
    report.text("Test BLEU per seed pair, paired bootstrap over test sentences (1,000 resamples):")
    report.table(["contrast", "seed", "other seed", "Δ BLEU [95%]", "p"], paired_rows, csv_name="paired_bleu.csv")

    if any(r.get("curve") for r in all_recs):
        fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
        groups = {label: s["records"] for label, s in settings.items()}
        t3.plot_curves(axes[0], axes[1], groups)
        for label, rs in groups.items():
            if not rs:
                continue
            per = []
            for r in rs:
                c = (r.get("stability") or {}).get("max_logit_curve") or {}
                gs = [g for g in c if g != "step"]
                per.append({s: max((c[g][i] for g in gs if c[g][i] is not None), default=np.nan)
                            for i, s in enumerate(c.get("step", []))})
            steps = sorted(set.intersection(*(set(p) for p in per))) if per else []
            axes[2].plot(steps, [np.nanmean([p[s] for p in per]) for s in steps], lw=1, label=label)
        axes[2].set_yscale("log")
        axes[2].set_xlabel("step")
        axes[2].set_title("largest attention logit (mean over seeds)", fontsize=9)
        axes[2].legend(fontsize=6)
        fig.tight_layout()
        report.figure(fig, "curves", "Train and validation NLL and the largest attention logit against step, mean "
                      "over seeds, per setting.")

    by_step = [(name, t3.contrasts_by_step(a, b)) for name, a, b in deep_pairs]
    steps_seen = sorted({st for _, cs in by_step for st, _ in cs})
    if steps_seen:
        report.section("Deep minus shallow against the training budget")
        report.text("Each deep single-head model minus 8 heads x 3+3, validation NLL at every validation step where "
                    "both sides have runs (one run of the full budget evaluated along the way, the same learning-"
                    "rate schedule at every step; n: seeds a side). Does the gap close as training goes on?")
        report.table(["contrast"] + [f"Δ NLL at {st}" for st in steps_seen],
                     [[name] + [f"{dict(cs)[st].text(3)} (n {dict(cs)[st].n_a}/{dict(cs)[st].n_b})"
                                if st in dict(cs) else "—" for st in steps_seen] for name, cs in by_step if cs],
                     csv_name="contrasts_by_step.csv")

    same = same_start_rows(by, archs, base.train.num_steps)
    if same:
        report.section("The long-budget runs' first steps against the QK-LN-off runs")
        report.text(f"The rsqrt schedule and the data order do not depend on the number of steps, so a long-budget "
                    f"run's first {base.train.num_steps:,} steps are the QK-LN-off run of the same architecture and "
                    "seed: their recorded curves (train loss in 100-step bins, validation NLL; 5 significant "
                    "digits) should agree to the rounding. A larger difference names a nondeterminism (a resume, "
                    "a changed kernel or library) that the long-budget contrast would carry.")
        report.table(["architecture", "seed", "common train-loss bins", "largest absolute Δ train loss",
                      "first train-loss step that differs", "common validation steps",
                      "largest absolute Δ valid NLL", "first validation step that differs",
                      "resumes (QK-LN off / long budget)", "commits (QK-LN off / long budget)"], same,
                     csv_name="same_start.csv", digits=5)
        report.text(same_start_text(same, by, base.train.num_steps))

    report.section("Verdicts")
    report.text("Pass criteria: the module docstring of `scripts/repro_heads_depth.py`, written before the sweep "
                "ran.")
    report.table(VERDICT_HEADERS, verdict_rows(by, archs), csv_name="verdicts.csv")

    report.section("What the data say")
    report.text(what_the_data_say(findings, settings, missing, all_recs, by_step))
    return report.write()


def same_start_rows(by: dict, archs: Sequence[str], steps: int) -> list[list]:
    """Per (architecture, seed) with both a long-budget and a QK-LN-off record: the number of train-loss bins up to
    ``steps`` that both curves hold, the largest absolute difference and the first step that differs; the same for
    the validation NLL; then the resumes and commits of the two records (QK-LN off / long budget)."""
    rows = []
    for arch in archs:
        short = {r.get("seed"): r for r in by.get((arch, "off"), [])}
        for r in sorted(by.get((arch, "long"), []), key=lambda r: r.get("seed")):
            s = short.get(r.get("seed"))
            if s is None:
                continue
            row = [arch, r.get("seed")]
            for step_key, value_key in (("step", "train_loss"), ("valid_step", "valid_nll")):
                a, b = (dict(zip(c.get(step_key, []), c.get(value_key, []))) for c in (r.get("curve") or {},
                                                                                        s.get("curve") or {}))
                common = [st for st in sorted(set(a) & set(b)) if st <= steps and None not in (a[st], b[st])]
                row += [len(common), max((abs(a[st] - b[st]) for st in common), default=None),
                        next((st for st in common if a[st] != b[st]), None)]
            row += [f"{s.get('resumes', 0)} / {r.get('resumes', 0)}", f"{s.get('commit')} / {r.get('commit')}"]
            rows.append(row)
    return rows


def same_start_text(rows: Sequence[list], by: dict, steps: int) -> str:
    """What the same-start table says: do the long-budget runs repeat the QK-LN-off runs, and if not, how large is
    the difference against the seed-to-seed spread of the QK-LN-off runs at ``steps``."""
    if not rows:
        return ""
    worst = max(rows, key=lambda row: row[6] or 0.0)
    if all(not row[3] and not row[6] for row in rows):
        return ("Every pair agrees to the rounding: the long-budget runs repeat the QK-LN-off runs, and their "
                "curves extend them.")
    firsts = sorted({row[4] for row in rows if row[4] is not None})
    spreads = []
    for arch in dict.fromkeys(row[0] for row in rows):
        finals = [dict(zip(c.get("valid_step", []), c.get("valid_nll", []))).get(steps)
                  for c in ((r.get("curve") or {}) for r in by.get((arch, "off"), []))]
        finals = [v for v in finals if v is not None]
        if len(finals) >= 2:
            spreads.append(f"{arch} {np.std(finals, ddof=1):.4f} (n={len(finals)})")
    long_commits = sorted({row[-1].split(" / ")[-1] for row in rows})
    resumed = [f"{row[0]} seed {row[1]}" for row in rows if row[-2] != "0 / 0"]
    return (f"The pairs do not repeat each other: the train-loss curves part from step "
            f"{'/'.join(str(f) for f in firsts)} on, and the largest validation-NLL difference is "
            f"{worst[6]:.4f} nats ({worst[0]}, seed {worst[1]}), against a seed-to-seed standard deviation of the "
            f"QK-LN-off runs' validation NLL at step {steps:,} of {', '.join(spreads) or 'n/a'}. "
            + (f"Resumed records (QK-LN off / long budget): {', '.join(resumed)}; " if resumed else
               "No record of these pairs was resumed; ")
            + "the pairs were made at different times, by different commits (last column) and, before records kept "
            "them, possibly on different CPUs or library builds: a float-level difference that training amplifies, "
            "not the data order or the schedule (the module docstring has the reruns that checked it). The "
            "long-budget contrast compares records made by "
            f"{', '.join(long_commits)}; it does not mix these runs with the QK-LN-off ones.")


def long_warmup_text(points: Sequence[sweep_lib.Point]) -> str:
    """The warmup steps of the long-warmup points, as text ("800"); "—" when there are none."""
    steps = sorted({p.overrides["train.warmup_steps"] for p in points if "train.warmup_steps" in p.overrides})
    return "/".join(str(s) for s in steps) or "—"


def _interval(a: Sequence[dict], b: Sequence[dict], metric: str) -> Optional[_stats.Interval]:
    """Welch interval of mean(a) - mean(b) of ``metric``; None with fewer than MIN_SEEDS values on a side."""
    va, vb = t3.values(a, metric), t3.values(b, metric)
    return _stats.welch_ci(va, vb) if min(len(va), len(vb)) >= MIN_SEEDS else None


def _nll_verdict(deep: Sequence[dict], shallow: Sequence[dict], claim: str, rules, otherwise: str,
                 contrast: str = "deep - shallow") -> list:
    """A verdict row on the Welch interval of ``deep`` - ``shallow`` validation NLL (named ``contrast`` in the
    row): the first of ``rules`` (predicate on the interval, verdict, reason) that holds, else undecided for the
    reason ``otherwise``."""
    iv = _interval(deep, shallow, "nll")
    if iv is None:
        return [claim, PAPER, f"{len(deep)} and {len(shallow)} finished seeds", "undecided",
                f"fewer than {MIN_SEEDS} seeds on a side"]
    measured = f"valid NLL {contrast} {iv.text(3)} nats"
    verdict, reason = next(((v, r) for holds, v, r in rules if holds(iv)), ("undecided", otherwise))
    return [claim, PAPER, measured, verdict, reason]


def _matches(deep: Sequence[dict], shallow: Sequence[dict], variant: str, deep_arch: str) -> list:
    """Criteria 1, 2, 7, 9 and 11: the verdict row of "``deep_arch`` matches the multi-head model" under
    ``variant``."""
    return _nll_verdict(deep, shallow, f"{deep_arch} matches the multi-head model ({VARIANTS[variant]})",
                        [(lambda iv: iv.hi < MARGIN, "reproduced", f"upper end below +{MARGIN:g}"),
                         (lambda iv: iv.lo > 0, "not reproduced", "the deep single-head model is significantly worse")],
                        f"the interval includes 0 and reaches +{MARGIN:g}")


def _post_ln_penalty(deep: Sequence[dict], shallow: Sequence[dict], deep_arch: str) -> list:
    """Criterion 5: the verdict row of "post-LN, ``deep_arch`` is worse than the multi-head model"."""
    return _nll_verdict(deep, shallow, f"without a stabiliser (post-LN) {deep_arch} is worse than the multi-head model",
                        [(lambda iv: iv.lo > MARGIN, "reproduced", f"lower end above +{MARGIN:g}"),
                         (lambda iv: iv.hi < MARGIN, "not reproduced", f"upper end below +{MARGIN:g}: it matches")],
                        f"the interval includes +{MARGIN:g}")


def _rescues(fixed: Sequence[dict], post: Sequence[dict], claim: str, contrast: str) -> list:
    """Criteria 8 and 10: the verdict row of ``claim``, "a stabiliser (``fixed``) lowers the NLL of the plain
    post-LN model (``post``) by more than MARGIN"; ``contrast`` names fixed - post in the row."""
    return _nll_verdict(fixed, post, claim,
                        [(lambda iv: iv.hi < -MARGIN, "reproduced", f"upper end below -{MARGIN:g}"),
                         (lambda iv: iv.lo > -MARGIN, "not reproduced", f"lower end above -{MARGIN:g}")],
                        f"the interval includes -{MARGIN:g}", contrast)


def _less_stable(deep: Sequence[dict], shallow: Sequence[dict], deep_arch: str) -> list:
    """Criterion 3: the verdict row of "without QK-LayerNorm ``deep_arch`` trains less stably"."""
    claim = f"without QK-LayerNorm {deep_arch} trains less stably"
    parts, above = [], 0
    for m, what in (("grad", "max grad norm"), ("jump", "max loss jump"), ("logit", "max attention logit")):
        iv = _interval(deep, shallow, m)
        if iv is None:
            return [claim, PAPER, "; ".join(parts) or "—", "undecided", f"fewer than {MIN_SEEDS} seeds on a side"]
        above += int(iv.lo > 0)
        parts.append(f"Δ {what} {iv.text(2)}")
    return [claim, PAPER, "; ".join(parts), "reproduced" if above else "not reproduced",
            f"higher (interval above 0) in {above} of 3 stability measures"]


def _explained(claim: str, penalty: list, shown: str, stabilised: list, reasons: Sequence[str]) -> list:
    """Criteria 4 and 6: is a penalty (the row ``penalty`` with verdict ``shown``) gone once training is stabilised
    (the row ``stabilised`` reproduced: the deep model matches)? ``reasons``: no penalty, gone, not gone."""
    measured = f"unstabilised: {penalty[2]}; stabilised: {stabilised[2]}"
    if "undecided" in (penalty[3], stabilised[3]):
        return [claim, PAPER, measured, "undecided", "a contrast is undecided"]
    if penalty[3] != shown:
        return [claim, PAPER, measured, "undecided", reasons[0]]
    if stabilised[3] == "reproduced":
        return [claim, PAPER, measured, "reproduced", reasons[1]]
    return [claim, PAPER, measured, "not reproduced", reasons[2]]


def verdict_rows(by: dict, archs: Sequence[str]) -> list[list]:
    """Rows (``VERDICT_HEADERS``) of the module docstring's criteria, ten per deep model and an eleventh for a
    deep model in the long-budget arm; ``by``: (architecture, variant (a key of VARIANTS)) -> records of every
    setting the sweep has (an empty list when none has finished), ``archs``: the shallow multi-head label, then
    the deep single-head ones."""
    if len(archs) < 2:
        return [["heads vs depth", PAPER, f"architectures {list(archs)}", "undecided",
                 "expected a shallow and at least one deep architecture"]]
    shallow, rows = archs[0], []
    for deep in archs[1:]:
        pair = {v: (by.get((deep, v), []), by.get((shallow, v), [])) for v in VARIANTS}
        off, on = (_matches(*pair[v], v, deep) for v in ("off", "on"))
        reading = _explained(
            f"the multi-head advantage is training stability: stabilised (QK-LayerNorm), {deep} matches",
            off, "not reproduced", on, ("no multi-head advantage without QK-LayerNorm to explain",
                                        "worse without QK-LayerNorm, matches with it",
                                        "the deep single-head model is worse even with QK-LayerNorm"))
        post = _post_ln_penalty(*pair["post"], deep)
        cured = _explained(f"the post-LN depth penalty is training stability: pre-LN {deep} matches",
                           post, "reproduced", off, ("no post-LN depth penalty to explain",
                                                     "worse post-LN, matches pre-LN",
                                                     "the deep single-head model is worse pre-LN too"))
        warm_matches = _matches(*pair["warm"], "warm", deep)
        rescued = _rescues(pair["warm"][0], pair["post"][0],
                           f"a long warmup trains post-LN {deep} (lower NLL than the short warmup)",
                           "long - short warmup")
        admin_matches = _matches(*pair["admin"], "admin", deep)
        admin_trains = _rescues(pair["admin"][0], pair["post"][0],
                                f"Admin trains post-LN {deep} (lower NLL than plain post-LN)",
                                "Admin - plain post-LN")
        rows += [off, on, _less_stable(*pair["off"], deep), reading, post, cured, warm_matches, rescued,
                 admin_matches, admin_trains]
        if (deep, "long") in by:
            rows.append(_matches(*pair["long"], "long", deep))
    return rows


def depth_trend(settings: dict) -> str:
    """Per arm, the mean validation NLL of each architecture in order of depth and how it moves from one depth to
    the next: up or down by more than MARGIN, or within it."""
    lines = []
    for v, name in VARIANTS.items():
        nlls = [(s["arch"], t3.values(s["records"], "nll")) for s in settings.values() if s["variant"] == v]
        means = [(arch, float(np.mean(vs))) for arch, vs in nlls if vs]
        if len(means) < 2:
            continue
        steps = [b - a for (_, a), (_, b) in zip(means, means[1:])]
        moves = [("up" if d > MARGIN else "down" if d < -MARGIN else f"within ±{MARGIN:g}") for d in steps]
        runs = [m for i, m in enumerate(moves) if i == 0 or m != moves[i - 1]]
        shape = f"{runs[0]} at every step" if len(runs) == 1 else ", then ".join(runs)
        lines.append(f"- {name}: " + ", ".join(f"{arch.split(',')[0]} {m:.3f}" for arch, m in means)
                     + f" (steps in depth {', '.join(f'{d:+.3f}' for d in steps)} nats: {shape}).")
    if not lines:
        return "Mean validation NLL by depth: no arm has two finished architectures yet."
    return "Mean validation NLL by depth, per arm (finished seeds only):\n" + "\n".join(lines)


def budget_trend(cs: Sequence[tuple[int, _stats.Interval]]) -> str:
    """How a contrast's mean difference moves over the validation steps: first to last, and whether its size
    shrinks (or grows) at every step; "" with fewer than two steps."""
    if len(cs) < 2:
        return ""
    sizes = [abs(iv.diff) for _, iv in cs]
    shape = (", narrowing at every step" if all(b < a for a, b in zip(sizes, sizes[1:])) else
             ", widening at every step" if all(b > a for a, b in zip(sizes, sizes[1:])) else "")
    values = [f"{iv.diff:+.3f}" for _, iv in cs]
    return (f"{values[0]} at step {cs[0][0]}, " + ", ".join(values[1:-1] + [f"{values[-1]} at {cs[-1][0]}"])
            + shape)


def health_text(settings: dict) -> str:
    """The health monitor's warnings per run for each setting (range and the validation NLL beside it), and the
    warnings' kinds over the records that keep them: how often the monitor flags runs that train well."""
    parts = []
    kinds: collections.Counter = collections.Counter()
    kept = total = 0
    resumed = []
    for label, s in settings.items():
        resumed += [f"{label}, seed {r.get('seed')}" for r in s["records"] if r.get("resumes")]
        counts = t3.values(s["records"], "warnings")
        if counts:
            nll = t3.values(s["records"], "nll")
            parts.append(f"{label}: {min(counts):g}-{max(counts):g} (validation NLL "
                         f"{min(nll):.2f}-{max(nll):.2f}, {len(counts)} run{'s' if len(counts) != 1 else ''})")
        for r in s["records"]:
            total += 1
            per_kind = (r.get("stability") or {}).get("health_warning_kinds")
            if per_kind is not None:
                kept += 1
                kinds.update(per_kind)
    if not parts:
        return ""
    from engine import config as config_lib

    records = [r for s in settings.values() for r in s["records"]]
    h, changed = _study.health_defaults(config_lib.base_config().health, records)
    text = ("Health-monitor warnings per run (`engine/health.py` with the `health` defaults of `engine/config.py` "
            f"when the runs were made: `max_logit` {h.max_logit:g}, `logit_std_high` {h.logit_std_high:g}, "
            f"`recover_margin` {h.recover_margin:g}{'; ' + changed if changed else ''}; "
            "a head that leaves a flagged state and enters it again counts again; no criterion uses them): "
            + "; ".join(parts) + ".")
    if kept:
        text += (f" By kind and attention group, over the records that keep it ({kept} of {total}): "
                 + ", ".join(f"{k} {v}" for k, v in kinds.most_common()) + ".")
    if resumed:
        text += (f" The counts are as logged; {len(resumed)} run{'s were' if len(resumed) != 1 else ' was'} resumed "
                 f"({'; '.join(resumed)}), and a run resumed before 2026-12-05 restarted the monitor's early "
                 "baselines at the resume, so its count can differ from an unbroken run's (the health calibration "
                 "report replays every attention trace as an unbroken run).")
    return text


def what_the_data_say(findings, settings, missing, records, by_step=()) -> str:
    """Generated from the intervals: does the deep single-head model match, is the difference stability, and
    (``by_step``: deep minus shallow per validation step) does the gap close with the budget."""
    intro = (f"Budget: {t3.budget(records)} per point. Liu, Liu & Han (2021): the multi-head advantage is mostly "
             "training stability, and deeper single-head models match or beat multi-head ones once they train. Their "
             "very deep single-head models needed stabilised training (the abstract: 'with recent advances in deep "
             "learning, we can successfully stabilize the training of the 384-layer Transformer'). Here the "
             "stabiliser is pre-LN (with gradient clipping, as in every arm): the post-LN arm is the unstabilised "
             "setting in which depth should cost the single-head model, the long-warmup post-LN arm tests the "
             "usual post-LN stabiliser, the Admin arm the one Liu, Liu & Han used (Liu et al. 2020's residual "
             "scales), and QK-LayerNorm off against on tests instability through the attention "
             "logits, at depths up to 24+24.")
    if not records:
        return "No point has finished yet: nothing can be said."
    lines = []
    for name, cells in findings:
        nll = cells.get("nll")
        if nll is None:
            lines.append(f"- {name}: not enough finished points.")
            continue
        w = nll[0]
        if w.lo is None:
            judged = "too few seeds for an interval"
        elif not w.excludes_zero():
            judged = "no difference resolved (the interval includes 0)"
        else:
            judged = "higher validation NLL (worse)" if w.diff > 0 else "lower validation NLL (better)"
        text = f"- {name}: Δ NLL {w.text(3)} nats (n = {w.n_a} vs {w.n_b}): {judged}"
        for m, what in (("grad", "max grad norm"), ("logit", "max attention logit"), ("jump", "max loss jump")):
            c = cells.get(m)
            if c is not None:
                text += f"; Δ {what} {c[0].text(2)}"
        lines.append(text + ".")
    paragraphs = [intro, depth_trend(settings), "\n".join(lines)]
    trends = [f"- {name}: {budget_trend(cs)}." for name, cs in by_step
              if len(cs) >= 2 and min(min(iv.n_a, iv.n_b) for _, iv in cs) >= t3.MIN_SEEDS]
    if trends:
        paragraphs.append("Against the budget, deep minus shallow validation NLL at each validation step (contrasts "
                          f"with {t3.MIN_SEEDS}+ seeds a side at every step; a gap that narrows at every step may "
                          "close with a longer budget, which these runs do not test):\n" + "\n".join(trends))
    spikes = {label: sum(t3.values(s["records"], "spikes")) for label, s in settings.items() if s["records"]}
    if spikes:
        paragraphs.append("Loss spikes summed over seeds: "
                          + ", ".join(f"{k}: {v:g}" for k, v in spikes.items()) + ".")
    health = health_text(settings)
    if health:
        paragraphs.append(health)
    if missing:
        paragraphs.append(f"{len(missing)} points have not finished; the statements above may change as they do.")
    return "\n\n".join(paragraphs)


if __name__ == "__main__":
    from engine import cli

    sys.exit(0 if cli.script(main) else 1)
