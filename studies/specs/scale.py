"""Reproduction 2: why attention logits are scaled by 1/sqrt(d_k) (Vaswani et al. 2017, section 3.2.1).

At initialization, queries and keys have unit-variance entries, so q.k has variance d_k. For d_k in
{16, 64, 256} and logit scales 1, 1/sqrt(d_k) and 1/d_k this measures, through ``attention.attention``
(reference backend, with its statistics and full weights) and ``jax.grad``:

- the standard deviation of the scaled logits,
- the mean of each query's largest attention weight and the mean entropy against log(num keys),
- how many keys receive gradient: per query, the keys whose gradient norm dL/dk_j is at least 1% of the
  largest one, and the effective number exp(H(g)) of the normalized gradient norms,
- the root-mean-square gradient reaching the queries.

Then the training comparison: the small decoder of ``configs/repro_scale.py`` on multi-query associative
recall with the three scales (``model.attention_scale``), three seeds each. Every point trains with train.py
through ``scripts/sweep.py`` and leaves a committed record in ``<out>/points/<point>.json``; a point with a
record is never trained again, and ``--report_only`` rebuilds the report from the records (listing the points
not finished yet). The initialization part is recomputed each time (seconds, deterministic).

    python scripts/repro_scale.py                  # 9 points (3 scales x 3 seeds), records, report
                                                   #   -> docs/results/scale/
    python scripts/repro_scale.py --report_only    # the report from the committed records
    python scripts/repro_scale.py --quick          # tiny model, a few steps, one seed; for tests

Pass criteria (fixed before the sweep ran):
- A run has *learned* when its held-out accuracy (answer positions, 8 held-out batches) is at least LEARNED
  (0.9; guessing among the 4 values in context gives 0.25). Its *steps to learn* is the first 100-step bin
  whose mean training loss is at most LEARNED_LOSS (0.1 nats); a run that never gets there counts as the
  budget (a lower bound, so the comparison can only understate a slow scale's delay).
- No comparison is drawn unless the 1/sqrt(d_k) baseline has learned in every one of at least MIN_SEEDS (3)
  seeds; otherwise the verdict is "undecided".
- An alternative scale (1 or 1/d_k) is *worse* than 1/sqrt(d_k) when its mean held-out accuracy is lower or its
  mean steps to learn is larger, with the 95% Welch interval of the difference over seeds excluding 0.
  Since 2026-12-05 (issue 45, post-hoc): "excluding 0" is Welch's p, Holm-adjusted over the four comparisons
  (two alternatives x accuracy and steps to learn), below 0.05.
- Vaswani et al.'s claim (scaling by 1/sqrt(d_k) is what makes dot-product attention train well at this d_k):
  reproduced when both alternatives are worse; partial when one is; not reproduced when neither is.
- Initialization (the paper's variance argument): reproduced when the unscaled logit std is within 15% of
  sqrt(d_k) and the 1/sqrt(d_k) std within 15% of 1 at every d_k.
"""
from __future__ import annotations

import csv
import math
import os
from typing import Optional, Sequence

from analysis import SCALES, first_step_at_most, init_statistics, scale_name, scale_value
from studies import points as sweep_lib
from studies import runner as _study
from studies import stats as _stats
from studies.regenerate import regenerate
from studies.report import REPO, Report, environment_line, mean_std, plt

TITLE = "Why 1/sqrt(d_k): attention logit scale at initialization and in training"
CONFIG = "configs/repro_scale.py"
LEARNED = 0.9  # held-out accuracy at which a run has learned MQAR
LEARNED_LOSS = 0.1  # mean training loss of a 100-step bin at which a run has learned (steps to learn)
MIN_SEEDS = 3  # seeds of the baseline a comparison needs


INIT_FIELDS = ("logit_std", "max_weight", "entropy", "keys_with_grad", "effective_keys", "q_grad_rms")


def init_rows(out: str, d_ks: Sequence[int], num_queries: int, num_keys: int, seed: int) -> list[dict]:
    """The initialization statistics per d_k and scale: read from ``<out>/init.csv`` when it is there (a record:
    the last digits depend on the XLA build and flags), else computed with ``analysis.init_statistics``."""
    path = os.path.join(out, "init.csv")
    if os.path.isfile(path):
        with open(path) as f:
            rows = list(csv.reader(f))[1:]
        return [{"d_k": int(r[0]), "scale": r[1], **{k: float(v) for k, v in zip(INIT_FIELDS, r[2:])}} for r in rows]
    return [{"d_k": d_k, "scale": name, **init_statistics(d_k, scale_value(name, d_k), num_queries=num_queries,
                                                          num_keys=num_keys, num_heads=4, seed=seed)}
            for d_k in d_ks for name in SCALES]


def run_init(report: Report, d_ks: Sequence[int], num_queries: int, num_keys: int, seed: int) -> list[dict]:
    rows = init_rows(report.out_dir, d_ks, num_queries, num_keys, seed)
    report.section("At initialization")
    report.text(
        f"Random unit-variance q, k, v (what LeCun-initialized projections of LayerNorm'd inputs give), "
        f"{num_keys} keys per query, {num_queries} queries x 4 heads per cell, reference backend. "
        f"Uniform attention has entropy log({num_keys}) = {math.log(num_keys):.3f} nats and max weight "
        f"1/{num_keys} = {1 / num_keys:.4f}. 'Keys with gradient': keys whose dL/dk_j norm is at least 1% of "
        "the query's largest, for L = sum(out * g) with random g; 'effective keys': exp of the entropy of the "
        "normalized gradient norms."
    )
    report.table(
        ["d_k", "scale", "logit std", "mean max weight", "entropy (nats)", "keys with gradient",
         "effective keys", "dL/dq RMS"],
        [[r["d_k"], r["scale"], r["logit_std"], r["max_weight"], r["entropy"], r["keys_with_grad"],
          r["effective_keys"], r["q_grad_rms"]] for r in rows],
        csv_name="init.csv",
    )
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    for name, marker in zip(SCALES, ("o", "s", "^")):
        sub = [r for r in rows if r["scale"] == name]
        x = [r["d_k"] for r in sub]
        axes[0].plot(x, [r["logit_std"] for r in sub], marker=marker, label=f"scale {name}")
        axes[1].plot(x, [r["max_weight"] for r in sub], marker=marker, label=f"scale {name}")
        axes[2].plot(x, [r["keys_with_grad"] for r in sub], marker=marker, label=f"scale {name}")
    for ax, title in zip(axes, ("logit std", "mean max attention weight", f"keys with gradient (of {num_keys})")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("d_k")
        ax.set_title(title, fontsize=9)
    axes[0].set_yscale("log")
    axes[2].set_yscale("log")
    axes[0].legend(fontsize=7)
    report.figure(fig, "init", "Attention at initialization vs d_k for three logit scales.")
    return rows


def verdict_init(rows: list[dict], num_keys: int) -> str:
    """What the init measurements say, computed from them."""
    by = {(r["d_k"], r["scale"]): r for r in rows}
    d_ks = sorted({r["d_k"] for r in rows})
    lines = []
    std_sqrt = [by[(d, "1/sqrt(d_k)")]["logit_std"] for d in d_ks]
    std_one = [by[(d, "1")]["logit_std"] for d in d_ks]
    lines.append(
        f"- With 1/sqrt(d_k) the logit std stays at {min(std_sqrt):.2f}-{max(std_sqrt):.2f} for every d_k; "
        f"unscaled it grows like sqrt(d_k) ({', '.join(f'{s:.1f}' for s in std_one)} for d_k = "
        f"{', '.join(map(str, d_ks))})."
    )
    big = d_ks[-1]
    one, sq, lin = by[(big, "1")], by[(big, "1/sqrt(d_k)")], by[(big, "1/d_k")]
    lines.append(
        f"- At d_k = {big}, unscaled attention is nearly one-hot (mean max weight {one['max_weight']:.2f}, "
        f"{one['keys_with_grad']:.1f} of {num_keys} keys get gradient, dL/dq RMS {one['q_grad_rms']:.3g}); "
        f"1/sqrt(d_k) keeps {sq['keys_with_grad']:.0f} keys in play (max weight {sq['max_weight']:.3f}); "
        f"1/d_k is almost uniform (entropy {lin['entropy']:.3f} of {math.log(num_keys):.3f}, max weight "
        f"{lin['max_weight']:.4f}) and the gradient reaching q shrinks to RMS {lin['q_grad_rms']:.3g} "
        f"(1/sqrt(d_k): {sq['q_grad_rms']:.3g})."
    )
    return "\n".join(lines)



def init_verdict(rows: list[dict]) -> tuple[str, str]:
    """(verdict, reason) of the variance argument from the initialization rows (criterion in the docstring)."""
    by = {(r["d_k"], r["scale"]): r["logit_std"] for r in rows}
    d_ks = sorted({r["d_k"] for r in rows})
    ok_one = all(abs(by[(d, "1")] / math.sqrt(d) - 1) <= 0.15 for d in d_ks)
    ok_sqrt = all(abs(by[(d, "1/sqrt(d_k)")] - 1) <= 0.15 for d in d_ks)
    measured = ", ".join(f"d_k {d}: {by[(d, '1')]:.2f} / {by[(d, '1/sqrt(d_k)')]:.2f}" for d in d_ks)
    verdict = "reproduced" if ok_one and ok_sqrt else "not reproduced"
    return verdict, f"logit std unscaled / 1/sqrt(d_k): {measured} (expected sqrt(d_k) / 1, within 15%)"


# ------------------------------------------------------------------------------------------- training
def accuracy(record: dict) -> Optional[float]:
    v = (record.get("validation") or {}).get("accuracy")
    return None if v is None else float(v)


def steps_to_learn(record: dict) -> tuple[int, bool]:
    """(step, reached): the first 100-step bin whose mean training loss is at most LEARNED_LOSS, else (the
    run's steps, False)."""
    c = record.get("curve") or {}
    step = first_step_at_most(c.get("step", []), c.get("train_loss", []), LEARNED_LOSS)
    return (step, True) if step is not None else (int(record.get("steps") or 0), False)


def max_logit(record: dict) -> Optional[float]:
    vals = [v for v in ((record.get("stability") or {}).get("max_attention_logit") or {}).values() if v is not None]
    return max(vals) if vals else None


ALPHA = 0.05  # Holm-adjusted over the four comparisons (2 alternatives x accuracy, steps to learn)


def _p(p) -> str:
    return "—" if p is None else f"{p:.2g}"


def compare(rows_by_scale: dict[str, list[dict]]) -> tuple[list[list], str, str]:
    """Per alternative scale: accuracy and steps-to-learn differences against 1/sqrt(d_k) with Welch 95%
    intervals; the verdict and its reason (criteria in the module docstring)."""
    base = rows_by_scale.get("1/sqrt(d_k)", [])
    table, worse = [], {}
    if len(base) < MIN_SEEDS:
        return table, "undecided", f"the 1/sqrt(d_k) baseline has {len(base)} of the {MIN_SEEDS} seeds needed"
    unlearned = [r["seed"] for r in base if not r["learned"]]
    if unlearned:
        return table, "undecided", (f"the 1/sqrt(d_k) baseline did not learn (accuracy < {LEARNED:g}) in seed(s) "
                                    f"{unlearned}: nothing to compare against")
    tests = {}  # (alt, what) -> Welch interval of the difference, positive = worse than 1/sqrt(d_k)
    for alt in ("1", "1/d_k"):
        rows = rows_by_scale.get(alt, [])
        if len(rows) < 2:
            worse[alt] = None
            continue
        tests[alt, "accuracy"] = _stats.welch_ci([r["accuracy"] for r in base], [r["accuracy"] for r in rows])
        tests[alt, "steps"] = _stats.welch_ci([r["steps_to_learn"] for r in rows], [r["steps_to_learn"] for r in base])
    adjusted = dict(zip(tests, _stats.holm([iv.p for iv in tests.values()])))

    def worse_in(alt, what) -> bool:
        iv, p = tests[alt, what], adjusted[alt, what]
        return p is not None and p < ALPHA and iv.diff > 0

    for alt in ("1", "1/d_k"):
        if worse.get(alt, True) is None:
            table.append([alt, len(rows_by_scale.get(alt, [])), "—", "—", "not enough seeds"])
            continue
        w_acc, w_steps = worse_in(alt, "accuracy"), worse_in(alt, "steps")
        worse[alt] = w_acc or w_steps
        acc, steps = tests[alt, "accuracy"], tests[alt, "steps"]
        table.append([alt, len(rows_by_scale[alt]),
                      f"{acc.text(3)} (p {_p(acc.p)}, Holm {_p(adjusted[alt, 'accuracy'])})",
                      f"{steps.text(0)} (p {_p(steps.p)}, Holm {_p(adjusted[alt, 'steps'])})",
                      ", ".join(x for x, w in (("lower accuracy", w_acc), ("slower", w_steps)) if w) or
                      "not shown worse (Holm-adjusted p >= 0.05, or the difference favours it)"])
    if any(v is None for v in worse.values()):
        return table, "undecided", "an alternative scale has fewer than 2 finished seeds"
    n = sum(worse.values())
    verdict = {2: "reproduced", 1: "partial", 0: "not reproduced"}[n]
    reason = ("worse than 1/sqrt(d_k): " + (", ".join(a for a, w in worse.items() if w) or "neither") + "; not "
              "shown worse: " + (", ".join(a for a, w in worse.items() if not w) or "none"))
    return table, verdict, reason


def run(argv: Optional[Sequence[str]] = None) -> str:
    """The study\'s command line (``scripts/repro_scale.py``): train the points without a record, then the report."""
    study = _study.open_study("scale", CONFIG, __doc__, argv)
    failed = [] if study.args.report_only else _study.train_missing(study)
    path = write_report(study.out, study.points, study.base, quick=study.args.quick, workdir=study.workdir,
                        command=study.command)
    return _study.finish(study, path, failed)


def write_report(out: str, points: Sequence[sweep_lib.Point], base, *, quick: bool, workdir: str,
                 command: str) -> str:
    """The report: initialization measurements (recomputed) and the training comparison from the records."""
    report = Report(out, TITLE)
    report.text(environment_line() + (" Quick mode (tiny sizes)." if quick else ""))
    num_keys = 32 if quick else 128
    init_rows = run_init(report, (16, 64, 256), num_queries=16 if quick else 512, num_keys=num_keys, seed=0)
    report.section("What the initialization data say")
    report.text(verdict_init(init_rows, num_keys))

    recs, missing = _study.recorded(out, points)
    d_k = base.model.qk_dim
    rows = []
    for p, r in recs:
        steps, reached = steps_to_learn(r)
        acc = accuracy(r)
        rows.append({"point": p.name, "scale": scale_name(p.overrides["model.attention_scale"], d_k),
                     "seed": r.get("seed"), "steps": r.get("steps"), "accuracy": acc,
                     "learned": acc is not None and acc >= LEARNED, "valid_loss": (r.get("validation") or {}).get(
                         "loss"), "steps_to_learn": steps, "reached": reached, "max_logit": max_logit(r),
                     "wall_s": r.get("wall_s"), "commit": r.get("commit"), "curve": r.get("curve") or {}})
    by_scale = {s: [r for r in rows if r["scale"] == s and r["accuracy"] is not None] for s in SCALES}

    m, d, t = base.model, base.data, base.train
    report.section("Training comparison")
    wall = sum(r["wall_s"] or 0.0 for r in rows)
    report.text(
        f"Protocol: a {m.num_decoder_layers}-layer pre-LN decoder (d_model {m.d_model}, {m.num_heads} head(s), d_k = "
        f"{d_k}, d_v = {m.v_dim}, d_ff {m.d_ff}) on multi-query associative recall ({d.mqar_num_kv_pairs} key-value "
        f"pairs, sequence {d.seq_len}, vocabulary {d.vocab_size}, batch {d.batch_size}), AdamW (0.9, 0.95) lr "
        f"{t.learning_rate:g}, {t.warmup_steps} warmup steps then cosine decay, {t.num_steps} steps, no weight decay "
        f"or clipping (`{CONFIG}`, every point through `train.py` / `engine.run`); only `model.attention_scale` "
        f"changes (1, 1/sqrt({d_k}) = {d_k ** -0.5:g}, 1/{d_k}). Accuracy: exact match of the value at the answer "
        f"positions of {d.num_eval_batches} held-out batches at the end; guessing among the {d.mqar_num_kv_pairs} "
        f"values in context gives {1 / d.mqar_num_kv_pairs:g}. Learned: accuracy >= {LEARNED:g}. Steps to learn: "
        f"first 100-step bin with mean training loss <= {LEARNED_LOSS:g} (budget if never; marked *).\n\n"
        f"Command: `{command}` (resumable; `--report_only` rebuilds this report from `points/`). Records: "
        f"{len(rows)} of {len(points)} points; training wall time of the recorded points {wall / 60:.1f} min "
        f"(sum of per-point train.py wall times, on the host named in each record). Made by commit(s): "
        f"{', '.join(sorted({str(r['commit']) for r in rows})) or '—'}.")
    if missing:
        report.text(f"**Not finished yet ({len(missing)} points):** " + ", ".join(f"`{n}`" for n in missing)
                    + ". Everything below uses the finished points only.")
    report.table(["point", "scale", "seed", "steps", "held-out accuracy", "learned", "valid loss", "steps to learn",
                  "max attention logit", "wall (s)", "commit"],
                 [[r["point"], r["scale"], r["seed"], r["steps"], r["accuracy"], r["learned"], r["valid_loss"],
                   f"{r['steps_to_learn']}{'' if r['reached'] else '*'}", r["max_logit"], r["wall_s"], r["commit"]]
                  for r in rows], csv_name="runs.csv", digits=4)
    report.table(["scale", "seeds", "held-out accuracy", "steps to learn", "learned"],
                 [[s, len(v), mean_std([r["accuracy"] for r in v]), mean_std([r["steps_to_learn"] for r in v]),
                   f"{sum(r['learned'] for r in v)}/{len(v)}"] for s, v in by_scale.items()])
    if rows:
        _training_figure(report, rows, d_k)
    table, verdict, reason = compare(by_scale)
    if table:
        report.text("Against 1/sqrt(d_k) (95% Welch intervals over seeds with Welch's p and its Holm adjustment over "
                    "the four comparisons; accuracy: baseline minus alternative, steps: alternative minus baseline; "
                    "positive = the alternative is worse):")
        report.table(["alternative", "seeds", "Δ accuracy", "Δ steps to learn", "reading"], table,
                     csv_name="contrasts.csv")

    i_verdict, i_reason = init_verdict(init_rows)
    report.section("Verdicts")
    report.table(["claim", "paper", "measured", "verdict", "reason"], [
        ["q.k variance grows with d_k; 1/sqrt(d_k) keeps the logit std at 1", "Var(q.k) = d_k (section 3.2.1 "
         "footnote)", "init.csv", i_verdict, i_reason],
        ["1/sqrt(d_k) trains better than no scale and than 1/d_k", "argument only, no measurement",
         "runs.csv, contrasts.csv" if table else "runs.csv", verdict,
         reason + " (Holm over the four comparisons added 2026-12-05 after the data: post-hoc)"]],
                 csv_name="verdicts.csv")
    report.section("What the data say")
    report.text(what_the_data_say(init_rows, by_scale, verdict, reason, missing, d_k, num_keys))
    return report.write()


def _training_figure(report: Report, rows: list[dict], d_k: int) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.2))
    for i, s in enumerate(SCALES):
        for j, r in enumerate(x for x in rows if x["scale"] == s):
            pts = [(a, b) for a, b in zip(r["curve"].get("step", []), r["curve"].get("train_loss", []))
                   if b is not None]
            if pts:
                axes[0].plot(*zip(*pts), color=f"C{i}", lw=1, label=f"scale {s}" if j == 0 else None)
        accs = [r["accuracy"] for r in rows if r["scale"] == s and r["accuracy"] is not None]
        axes[1].scatter([i] * len(accs), accs, color=f"C{i}")
    axes[0].set_yscale("log")
    axes[0].set_xlabel("step")
    axes[0].set_title("training loss on the answers (100-step means), every seed", fontsize=9)
    axes[0].legend(fontsize=7)
    axes[1].axhline(LEARNED, color="gray", ls="--", lw=0.8)
    axes[1].set_xticks(range(len(SCALES)), SCALES)
    axes[1].set_ylim(-0.02, 1.02)
    axes[1].set_title("held-out accuracy per seed (dashed: learned)", fontsize=9)
    report.figure(fig, "training", f"Training with the three logit scales at d_k = {d_k}.")


def what_the_data_say(init_rows, by_scale, verdict, reason, missing, d_k, num_keys) -> str:
    by = {(r["d_k"], r["scale"]): r for r in init_rows}
    one = by[(64, "1")]
    paras = [f"Vaswani et al. (2017, section 3.2.1) give an argument, not a measurement: with unit-variance q "
             f"and k the dot product has variance d_k, which pushes the softmax into regions of tiny gradients; "
             f"scaling by 1/sqrt(d_k) counters it. The initialization measurements agree with the argument's "
             f"numbers (unscaled logit std {one['logit_std']:.2f} at d_k 64, sqrt(64) = 8; "
             f"{one['keys_with_grad']:.1f} of the {num_keys} keys get gradient unscaled against "
             f"{by[(64, '1/sqrt(d_k)')]['keys_with_grad']:.0f} with 1/sqrt(d_k))."]
    lines = []
    for s, v in by_scale.items():
        if v:
            lines.append(f"- scale {s}: held-out accuracy {mean_std([r['accuracy'] for r in v])}, learned in "
                         f"{sum(r['learned'] for r in v)} of {len(v)} seeds, steps to learn "
                         f"{mean_std([r['steps_to_learn'] for r in v])}.")
    if lines:
        paras.append(f"Training at d_k = {d_k}:\n" + "\n".join(lines))
    paras.append(f"Verdict on training: **{verdict}** ({reason}). The paper reports no training comparison of "
                 "scales, so there is no number to disagree with; a scale that is not worse here means that at "
                 f"d_k = {d_k}, with AdamW (which rescales every parameter's update) and a learned query/key "
                 "projection that can absorb a constant factor, the missing or extra factor was compensated "
                 "within the budget, not that the variance argument is wrong."
                 if verdict != "undecided" else f"Verdict on training: **undecided** ({reason}).")
    if missing:
        paras.append(f"{len(missing)} training points have not finished; the statements above may change as they do.")
    return "\n\n".join(paras)


def generate(into: Optional[str] = None) -> list[str]:
    """The registry's entry: the committed report regenerated from its records (no training; under ``into`` when
    given)."""
    return [regenerate(os.path.join(REPO, "docs", "results", "scale"), ("points", "attempt_1head", "init.csv"),
                       lambda out: run(["--report_only", f"--out={out}"]), into)]


def summary() -> list:
    """The study's row of docs/results/README.md: its records and the verdicts of its generated report."""
    from studies.specs import Summary

    out = os.path.join(REPO, "docs", "results", "scale")
    with open(os.path.join(out, "verdicts.csv")) as f:
        kinds = [row["verdict"] for row in csv.DictReader(f)]
    records = len([f for f in os.listdir(os.path.join(out, "points")) if f.endswith(".json")])
    return [Summary(os.path.relpath(out, REPO), TITLE, f"{records} points recorded; verdicts: "
                    + ", ".join(f"{kinds.count(k)} {k}" for k in dict.fromkeys(kinds)))]
