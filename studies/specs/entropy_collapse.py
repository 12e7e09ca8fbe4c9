"""Reproduction 4: attention entropy collapse and training instability (Zhai et al. 2023), seen by the health
monitor, with QK-LayerNorm as the remedy.

Zhai et al. report that unstable Transformer training goes with "entropy collapse": the attention entropy of
some heads falls to near zero (one-hot attention) as the loss becomes unstable, and that keeping the
attention logits in check (their sigmaReparam) prevents it. This trains the small decoder of
``configs/repro_entropy_collapse.py`` on multi-query associative recall at a stable and at two too-high peak
learning rates, with and without QK-LayerNorm (``model.qk_layernorm``, the remedy tested here), three
seeds. The engine's health monitor (``engine.health``, defaults of ``config.health``) checks every head every
5 steps; its warnings are the *alarms*. Every point trains with train.py through ``scripts/sweep.py`` and
leaves a committed record in ``<out>/points/<point>.json`` (the sweep record plus ``monitor``: every warning,
the logged training losses and the lowest head entropy at every check); a point with a record is never trained
again, and ``--report_only`` rebuilds the report from the records (listing the points not finished yet).

    python scripts/repro_entropy_collapse.py                 # 24 points, records, report
                                                             #   -> docs/results/entropy_collapse/
    python scripts/repro_entropy_collapse.py --report_only   # the report from the committed records
    python scripts/repro_entropy_collapse.py --quick         # tiny model, a few steps; for tests

Definitions and pass criteria (fixed before the sweep ran):
- *Event* of a run (its first): a non-finite loss (the run stops there); a *loss spike*, a logged training loss
  (5-step mean) more than SPIKE_NATS (0.5) above the lowest logged loss before it; or a *failure to learn*,
  held-out accuracy below LEARNED (0.9) at the end (event step: the last step). A run without any is healthy.
- *Alarm*: a health-monitor warning (any kind, and each kind on its own); the run's first alarm step is the
  step of its first warning. Precision: runs with an alarm that have an event / runs with an alarm. Recall:
  runs with an event whose first alarm is at or before the event step / runs with an event. Lead time: event
  step minus first alarm step, over the runs counted in recall.
- No verdict is drawn unless the stable learning rate without QK-LayerNorm learned (no event) in every one of
  at least MIN_SEEDS (3) seeds.
- Entropy collapse goes with instability (Zhai et al.): among the runs without QK-LayerNorm that have an event,
  the fraction with an entropy-collapse warning at or before the event; reproduced at >= 0.8, partial at
  >= 0.5, not reproduced below.
- QK-LayerNorm as the remedy. *Too-high* learning rates: those above the stable one at which the runs
  without QK-LayerNorm have an event in at least 2/3 of at least MIN_SEEDS seeds. Judged only when, in every
  one of at least MIN_SEEDS seeds, QK-LayerNorm learned (no event) at some learning rate below the lowest
  too-high one (otherwise a failure at a high learning rate cannot be told from QK-LayerNorm not learning the
  task at all: undecided). Then: at each too-high learning rate, fewer runs with an event with QK-LayerNorm
  than without, and QK-LayerNorm learns (no event) in at least 2/3 of its too-high-LR runs: reproduced; fewer
  events over the too-high learning rates together: partial; otherwise not reproduced.
- The monitor as an early warning (this project's claim for it, any warning kind): recall >= 0.8, precision
  >= 0.8 and median lead time > 0: reproduced; recall >= 0.8 alone: partial; otherwise not reproduced.
"""
from __future__ import annotations

import csv
import math
import os
from typing import Any, Callable, Optional, Sequence

import numpy as np

from analysis import divergence_step
from studies import points as sweep_lib
from studies import runner as _study
from studies.regenerate import regenerate
from studies.report import REPO, Report, environment_line, mean_std, plt

TITLE = "Entropy collapse and instability (Zhai et al. 2023), the health monitor, and QK-LayerNorm"
CONFIG = "configs/repro_entropy_collapse.py"
LEARNED = 0.9  # held-out accuracy below which a run failed to learn
SPIKE_NATS = 0.5  # a logged loss this far above the lowest before it is a loss spike
MIN_SEEDS = 3
MAX_WARNINGS = 200  # warnings kept per record
SUDDEN = ("non-finite loss", "loss spike")  # events with a moment (a failure to learn is dated at the end)


def _rounded(x, digits: int = 4) -> Optional[float]:
    """``x`` with ``digits`` significant digits; None for a missing or non-finite value."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(f"{float(x):.{digits}g}")


def monitor_trace(point_dir: str) -> dict:
    """What the report needs beyond the sweep record, from the run's metrics.jsonl: every health warning
    (step, kind, layer, head, value, threshold; none a resume superseded), the logged training losses (a resumed run's rerun steps
    replace the killed run's) and the lowest head entropy and largest logit at every check."""
    records = sweep_lib.read_records(os.path.join(point_dir, sweep_lib.METRICS))
    losses = {int(r["step"]): r["train/loss"] for r in records if "train/loss" in r and "event" not in r}
    warns = [[int(r.get("at_step", r.get("step"))), r.get("kind"), r.get("layer"), r.get("head"),
              _rounded(r.get("value")), _rounded(r.get("threshold"))]
             for r in sweep_lib.current_events(records, "health_warning")]
    checks: dict[int, tuple] = {}
    for r in records:
        if "attn/step" in r:
            ent = [v for k, v in r.items() if "/entropy/L" in k and _rounded(v) is not None]
            ml = [v for k, v in r.items() if "/max_logit/L" in k and _rounded(v) is not None]
            checks[int(r["attn/step"])] = (_rounded(min(ent)) if ent else None, _rounded(max(ml)) if ml else None)
    steps = sorted(checks)
    return {"warnings_fields": ["step", "kind", "layer", "head", "value", "threshold"],
            "warnings": warns[:MAX_WARNINGS], "warnings_total": len(warns),
            "loss_step": sorted(losses), "loss": [_rounded(losses[s], 5) for s in sorted(losses)],
            "check_step": steps, "min_entropy": [checks[s][0] for s in steps],
            "max_logit": [checks[s][1] for s in steps]}


def add_monitor_trace(workdir: str) -> Callable[[str, Any], None]:
    """``after`` for ``_study.train_missing``: adds the monitor trace of the point's run folder under
    ``workdir`` to its record when the record has none."""
    def after(record: str, point) -> None:
        rec = sweep_lib.read_record(record)
        point_dir = os.path.join(workdir, point.name)
        if "monitor" not in rec and os.path.exists(os.path.join(point_dir, sweep_lib.METRICS)):
            rec["monitor"] = monitor_trace(point_dir)
            sweep_lib.write_record(record, rec)
    return after


def run(argv: Optional[Sequence[str]] = None) -> str:
    """The study\'s command line (``scripts/repro_entropy_collapse.py``): train the points without a record, then the report."""
    study = _study.open_study("entropy_collapse", CONFIG, __doc__, argv)
    failed = [] if study.args.report_only else _study.train_missing(study, add_monitor_trace(study.workdir))
    path = write_report(study.out, study.points, study.base, quick=study.args.quick, command=study.command)
    return _study.finish(study, path, failed)


# --------------------------------------------------------------------------------------------- analysis
def run_summary(record: dict) -> dict:
    """Event, alarms and headline numbers of one run from its record (definitions in the module docstring)."""
    mon = record.get("monitor") or {}
    steps = int(record.get("steps") or 0)
    acc = (record.get("validation") or {}).get("accuracy")
    non_finite = (record.get("stability") or {}).get("non_finite_step")
    losses = [math.nan if v is None else v for v in mon.get("loss", [])]
    spike = divergence_step(mon.get("loss_step", []), losses, SPIKE_NATS)
    events = []
    if non_finite is not None:
        events.append((int(non_finite), "non-finite loss"))
    if spike is not None:
        events.append((spike, "loss spike"))
    if non_finite is None and (acc is None or acc < LEARNED):
        events.append((steps, "failed to learn"))
    event_step, event = min(events) if events else (None, None)
    first: dict[str, int] = {}
    for w in mon.get("warnings", []):
        first[w[1]] = min(first.get(w[1], w[0]), w[0])
    first_any = min(first.values()) if first else None
    ents = [e for e in mon.get("min_entropy", []) if e is not None]
    mls = [x for x in mon.get("max_logit", []) if x is not None]
    return {"steps": steps, "accuracy": acc, "event": event, "event_step": event_step, "first": first,
            "first_any": first_any, "warnings": mon.get("warnings_total"),
            "min_entropy_end": ents[-1] if ents else None, "min_entropy_low": min(ents) if ents else None,
            "max_logit": max(mls) if mls else None, "has_monitor": bool(mon)}


def detection(runs: Sequence[dict], kind: Optional[str]) -> dict:
    """Precision, recall and lead times of the alarm ``kind`` (None: any warning) over ``runs``."""
    def first(r):
        return r["first_any"] if kind is None else r["first"].get(kind)
    alarmed = [r for r in runs if first(r) is not None]
    events = [r for r in runs if r["event"] is not None]
    caught = [r for r in events if first(r) is not None and first(r) <= r["event_step"]]
    leads = [r["event_step"] - first(r) for r in caught]
    sudden = [r["event_step"] - first(r) for r in caught if r["event"] in SUDDEN]
    return {"kind": kind or "any", "runs": len(runs), "alarmed": len(alarmed), "events": len(events),
            "true_alarms": sum(r["event"] is not None for r in alarmed), "caught": len(caught),
            "precision": (sum(r["event"] is not None for r in alarmed) / len(alarmed)) if alarmed else None,
            "recall": (len(caught) / len(events)) if events else None,
            "lead_median": float(np.median(leads)) if leads else None,
            "lead_min": min(leads) if leads else None, "lead_max": max(leads) if leads else None,
            "sudden_caught": len(sudden), "sudden_events": sum(r["event"] in SUDDEN for r in events),
            "sudden_lead_median": float(np.median(sudden)) if sudden else None}


def verdicts(rows: list[dict], stable_lr: float, high_lrs: Sequence[float]) -> list[list]:
    """[claim, paper, measured, verdict, reason] rows (criteria in the module docstring)."""
    base = [r for r in rows if not r["qk_ln"] and r["lr"] == stable_lr]
    ok_base = len(base) >= MIN_SEEDS and all(r["event"] is None for r in base)
    why_not = (f"the stable LR without QK-LayerNorm has {len(base)} finished seed(s), "
               f"{sum(r['event'] is not None for r in base)} with an event; needs {MIN_SEEDS} healthy seeds")
    out = []
    claim = "attention entropy collapses in unstable runs"
    paper = "Zhai et al. 2023, section 3 (entropy collapse with training instability)"
    ev = [r for r in rows if not r["qk_ln"] and r["event"] is not None]
    col = [r for r in ev if r["first"].get("entropy_collapse") is not None
           and r["first"]["entropy_collapse"] <= r["event_step"]]
    measured = (f"{len(col)} of {len(ev)} unstable runs without QK-LayerNorm had an entropy-collapse warning at or "
                f"before the event; lowest head entropy in them " + mean_std([r["min_entropy_low"] for r in ev])
                + " nats")
    if not ok_base:
        out.append([claim, paper, measured, "undecided", why_not])
    elif not ev:
        out.append([claim, paper, measured, "undecided", "no run without QK-LayerNorm became unstable"])
    else:
        frac = len(col) / len(ev)
        out.append([claim, paper, measured, "reproduced" if frac >= 0.8 else ("partial" if frac >= 0.5 else
                    "not reproduced"), f"fraction {frac:.2f} (reproduced >= 0.8, partial >= 0.5)"])

    claim = "QK-LayerNorm removes the instability at too-high learning rates"
    paper = "Zhai et al. 2023 (sigmaReparam); QK-LayerNorm: Dehghani et al. 2023, Wortsman et al. 2023"
    too_high = []
    for lr in high_lrs:
        off = [r for r in rows if not r["qk_ln"] and r["lr"] == lr]
        if len(off) >= MIN_SEEDS and sum(r["event"] is not None for r in off) >= 2 * len(off) / 3:
            too_high.append(lr)
    per_lr, fewer_each, on_healthy, on_total = [], True, 0, 0
    for lr in too_high:
        off = [r for r in rows if not r["qk_ln"] and r["lr"] == lr]
        on = [r for r in rows if r["qk_ln"] and r["lr"] == lr]
        e_off, e_on = sum(r["event"] is not None for r in off), sum(r["event"] is not None for r in on)
        fewer_each &= bool(off and on) and e_on < e_off
        on_healthy += len(on) - e_on
        on_total += len(on)
        per_lr.append(f"lr {lr:g}: events {e_off}/{len(off)} without, {e_on}/{len(on)} with")
    e_off_all = sum(r["event"] is not None for r in rows if not r["qk_ln"] and r["lr"] in too_high)
    e_on_all = on_total - on_healthy
    below = min(too_high) if too_high else math.inf
    on_seeds = {r["seed"] for r in rows if r["qk_ln"]}
    learned_seeds = {r["seed"] for r in rows if r["qk_ln"] and r["lr"] < below and r["event"] is None}
    measured = ("; ".join(per_lr) + f"; QK-LayerNorm learned below lr {below:g} in {len(learned_seeds)} of "
                f"{len(on_seeds)} seeds") if too_high else "no too-high learning rate (yet)"
    if not ok_base:
        out.append([claim, paper, measured, "undecided", why_not])
    elif not too_high:
        out.append([claim, paper, measured, "undecided", "no learning rate gave events without QK-LayerNorm in 2/3 of "
                    f"at least {MIN_SEEDS} seeds"])
    elif len(learned_seeds) < MIN_SEEDS or learned_seeds != on_seeds:
        out.append([claim, paper, measured, "undecided", f"QK-LayerNorm did not learn below lr {below:g} in every "
                    f"one of at least {MIN_SEEDS} seeds, so its failures at high learning rates say nothing about "
                    "stability"])
    elif fewer_each and on_total and on_healthy >= 2 * on_total / 3:
        out.append([claim, paper, measured, "reproduced", f"fewer events at every too-high LR; QK-LayerNorm healthy "
                    f"in {on_healthy}/{on_total}"])
    elif e_on_all < e_off_all:
        out.append([claim, paper, measured, "partial", f"fewer events over the too-high LRs together ({e_on_all} vs "
                    f"{e_off_all}), not at each or not healthy in 2/3"])
    else:
        out.append([claim, paper, measured, "not reproduced", f"events with QK-LayerNorm {e_on_all}, without "
                    f"{e_off_all}"])

    claim = "the health monitor warns before the event (any warning kind)"
    paper = "this project (engine/health.py); no paper number"
    d = detection(rows, None)
    measured = (f"precision {_f(d['precision'])}, recall {_f(d['recall'])}, median lead {_f(d['lead_median'])} "
                f"steps over {d['runs']} runs ({d['events']} with an event)")
    if not ok_base:
        out.append([claim, paper, measured, "undecided", why_not])
    elif d["recall"] is None:
        out.append([claim, paper, measured, "undecided", "no run had an event"])
    elif d["recall"] >= 0.8 and (d["precision"] or 0) >= 0.8 and (d["lead_median"] or 0) > 0:
        out.append([claim, paper, measured, "reproduced", "recall and precision >= 0.8, warnings ahead of the event"])
    elif d["recall"] >= 0.8:
        out.append([claim, paper, measured, "partial", "recall >= 0.8 but precision < 0.8 or no lead"])
    else:
        out.append([claim, paper, measured, "not reproduced", "recall < 0.8"])
    return out


def _f(x, digits: int = 2) -> str:
    return "—" if x is None else (f"{x:.{digits}f}" if isinstance(x, float) else str(x))


# ---------------------------------------------------------------------------------------------- report
def write_report(out: str, points, base, *, quick: bool, command: str) -> str:
    """The report from the records under ``<out>/points``."""
    recs, missing = _study.recorded(out, points)
    rows = []
    for p, r in recs:
        rows.append({"point": p.name, "qk_ln": bool(p.overrides["model.qk_layernorm"]),
                     "lr": float(p.overrides["train.learning_rate"]), "seed": r.get("seed"),
                     "wall_s": r.get("wall_s"), "commit": r.get("commit"), "monitor": r.get("monitor") or {},
                     **run_summary(r)})
    lrs = sorted({float(p.overrides["train.learning_rate"]) for p in points})
    stable_lr, high_lrs = lrs[0], lrs[1:]

    report = Report(out, TITLE)
    report.text(environment_line() + (" Quick mode (tiny sizes)." if quick else ""))
    m, d, t = base.model, base.data, base.train
    h, changed = _study.health_defaults(base.health, [r for _, r in recs])
    wall = sum(r["wall_s"] or 0.0 for r in rows)
    report.text(
        f"Protocol: a {m.num_decoder_layers}-layer pre-LN decoder (d_model {m.d_model}, {m.num_heads} head(s), d_ff "
        f"{m.d_ff}) on multi-query associative recall ({d.mqar_num_kv_pairs} pairs, sequence {d.seq_len}, vocabulary "
        f"{d.vocab_size}, batch {d.batch_size}), AdamW (0.9, 0.95), {t.warmup_steps} linear warmup steps then cosine "
        f"decay to {t.final_lr_fraction:g}x, peak learning rates {', '.join(f'{x:g}' for x in lrs)} ({stable_lr:g} is "
        f"the stable one without QK-LayerNorm), "
        f"{t.num_steps} steps, no weight decay, no clipping, QK-LayerNorm off/on (`{CONFIG}`, every point through "
        f"`train.py` / `engine.run`). The health monitor checks every head every {t.stats_every} steps with the "
        f"defaults of `config.health` when the runs were made (entropy collapse: entropy < min({h.collapse_ratio:g} "
        f"x early entropy, {h.collapse_floor:g} nats); max logit > {h.max_logit:g}; logit spread: std > "
        f"{h.logit_std_high:g} or > {h.logit_std_ratio:g} x early once above {h.logit_std_floor:g}; near-uniform "
        f"and low spread from step {h.uniform_after_step}; `recover_margin` {h.recover_margin:g}"
        f"{'; ' + changed if changed else ''}). Events and alarms as defined in the docstring of "
        f"`scripts/repro_entropy_collapse.py`: non-finite loss, a loss spike (> {SPIKE_NATS:g} nats above the lowest "
        f"logged loss before it), or held-out accuracy < {LEARNED:g} at the end (guessing among the "
        f"{d.mqar_num_kv_pairs} values in context gives {1 / d.mqar_num_kv_pairs:g}).\n\nCommand: `{command}` "
        f"(resumable; `--report_only` rebuilds this report from `points/`). Records: {len(rows)} of {len(points)} "
        f"points; training wall time of the recorded points {wall / 60:.1f} min. Made by commit(s): "
        f"{', '.join(sorted({str(r['commit']) for r in rows})) or '—'}.")
    if missing:
        report.text(f"**Not finished yet ({len(missing)} points):** " + ", ".join(f"`{n}`" for n in missing)
                    + ". Everything below uses the finished points only.")

    report.section("Every run")
    kinds = sorted({k for r in rows for k in r["first"]})
    report.table(["point", "QK-LayerNorm", "lr", "seed", "steps", "held-out accuracy", "event", "event step",
                  "first warning (any)"] + [f"first {k}" for k in kinds] +
                 ["warnings", "lowest head entropy", "head entropy at end (min)", "max logit", "wall (s)", "commit"],
                 [[r["point"], r["qk_ln"], r["lr"], r["seed"], r["steps"], r["accuracy"], r["event"] or "none",
                   r["event_step"], r["first_any"]] + [r["first"].get(k) for k in kinds] +
                  [r["warnings"], r["min_entropy_low"], r["min_entropy_end"], r["max_logit"], r["wall_s"],
                   r["commit"]] for r in rows], csv_name="runs.csv", digits=4)

    report.section("The health monitor as an early warning, over all runs")
    report.text("A failure to learn is dated at the last step, so its lead time only says how early the monitor "
                "knew; the last two columns count the events that happen at a moment (a loss spike or a non-finite "
                "loss) on their own.")
    det = [detection(rows, None)] + [detection(rows, k) for k in kinds]
    report.table(["alarm", "runs", "runs with alarm", "runs with event", "alarm runs with event", "events caught "
                  "(alarm at or before)", "precision", "recall", "lead time median (steps)", "lead min", "lead max",
                  "spike/non-finite events caught", "their lead median"],
                 [[x["kind"], x["runs"], x["alarmed"], x["events"], x["true_alarms"], x["caught"], x["precision"],
                   x["recall"], x["lead_median"], x["lead_min"], x["lead_max"],
                   f"{x['sudden_caught']}/{x['sudden_events']}", x["sudden_lead_median"]] for x in det],
                 csv_name="monitor.csv")
    if rows:
        _figure(report, rows, lrs)
    v = verdicts(rows, stable_lr, high_lrs)
    report.section("Verdicts")
    report.text("Criteria: see the docstring of `scripts/repro_entropy_collapse.py` (fixed before the sweep ran).")
    report.table(["claim", "paper", "measured", "verdict", "reason"], v, csv_name="verdicts.csv")
    report.section("What the data say")
    report.text(what_the_data_say(rows, lrs, v, missing))
    return report.write()


def _figure(report: Report, rows, lrs) -> None:
    fig, axes = plt.subplots(2, 2 * len(lrs), figsize=(3.0 * 2 * len(lrs), 5.0), sharex=True, squeeze=False)
    for col, (qk_ln, lr) in enumerate((q, lr) for q in (False, True) for lr in lrs):
        for r in (x for x in rows if x["qk_ln"] == qk_ln and x["lr"] == lr):
            mon = r["monitor"]
            c = f"C{int(r['seed'] or 0)}"
            axes[0, col].plot(mon.get("loss_step", []), [math.nan if v is None else v for v in mon.get("loss", [])],
                              color=c, lw=0.8)
            axes[1, col].plot(mon.get("check_step", []), [math.nan if v is None else v
                                                          for v in mon.get("min_entropy", [])], color=c, lw=0.8)
            for ax in axes[:, col]:
                if r["event_step"] is not None:
                    ax.axvline(r["event_step"], color=c, ls="--", lw=0.8)
                if r["first_any"] is not None:
                    ax.axvline(r["first_any"], color=c, ls=":", lw=1.2)
        axes[0, col].set_title(f"QK-LN {'on' if qk_ln else 'off'}, lr {lr:g}", fontsize=8)
        axes[0, col].set_yscale("log")
        axes[1, col].set_xlabel("step")
    axes[0, 0].set_ylabel("train loss (5-step mean)")
    axes[1, 0].set_ylabel("lowest head entropy (nats)")
    fig.tight_layout()
    report.figure(fig, "entropy_collapse", "Training loss (top) and the lowest head entropy (bottom) per run, one "
                  "colour per seed; dashed: the run's event, dotted: its first health warning.")


def what_the_data_say(rows, lrs, verdict_rows, missing) -> str:
    if not rows:
        return "No point has finished yet: nothing can be said."
    paras = ["Zhai et al. (2023) train ViTs, machine translation and speech models and report that unstable runs "
             "(high learning rate, no warmup, or removed LayerNorm) show attention entropy falling towards zero in "
             "some heads as the loss becomes unstable, and that bounding the spectral norm of the attention logits "
             "(sigmaReparam) prevents both. They give no precision or recall for entropy collapse as a predictor; "
             "the numbers below are the first such numbers for this monitor, on a 2-layer model and a synthetic "
             "task, so only the direction of each effect can be compared with the paper."]
    lines = []
    for q in (False, True):
        for lr in lrs:
            sub = [r for r in rows if r["qk_ln"] == q and r["lr"] == lr]
            if sub:
                ev = [f"{r['event']} at {r['event_step']}" for r in sub if r["event"]]
                lines.append(f"- QK-LayerNorm {'on' if q else 'off'}, lr {lr:g}: held-out accuracy "
                             f"{mean_std([r['accuracy'] for r in sub if r['accuracy'] is not None])}; events: "
                             f"{', '.join(ev) or 'none'}; lowest head entropy "
                             f"{mean_std([r['min_entropy_low'] for r in sub])} nats; largest logit "
                             f"{mean_std([r['max_logit'] for r in sub])}.")
    paras.append("\n".join(lines))
    on = [r for r in rows if r["qk_ln"] and r["lr"] == lrs[0]]
    off = [r for r in rows if not r["qk_ln"] and r["lr"] == lrs[0]]
    if on and off:
        paras.append(
            f"At the stable learning rate {lrs[0]:g}, QK-LayerNorm learned in {sum(r['event'] is None for r in on)} of "
            f"{len(on)} seeds (without: {sum(r['event'] is None for r in off)} of {len(off)}), with largest logit "
            f"{mean_std([r['max_logit'] for r in on])} against {mean_std([r['max_logit'] for r in off])}. Where it "
            "did not learn, this disagrees with Wortsman et al., where QK-LayerNorm models reach about the same loss "
            "as the others at their best learning rate: on this task, at this budget, bounding the logits also "
            "slows the sharp key matching that MQAR needs, so a failure with QK-LayerNorm at a high learning rate "
            "is not evidence of instability.")
    paras.append("\n".join(f"- {v[0]}: **{v[3]}** ({v[4]}); {v[2]}." for v in verdict_rows))
    if missing:
        paras.append(f"{len(missing)} points have not finished; the statements above may change as they do.")
    return "\n\n".join(paras)


def generate(into: Optional[str] = None) -> list[str]:
    """The registry's entry: the committed report regenerated from its records (no training; under ``into`` when
    given)."""
    return [regenerate(os.path.join(REPO, "docs", "results", "entropy_collapse"), ("points", "attempt_1head"),
                       lambda out: run(["--report_only", f"--out={out}"]), into)]


def summary() -> list:
    """The study's row of docs/results/README.md: its records and the verdicts of its generated report."""
    from studies.specs import Summary

    out = os.path.join(REPO, "docs", "results", "entropy_collapse")
    with open(os.path.join(out, "verdicts.csv")) as f:
        kinds = [row["verdict"] for row in csv.DictReader(f)]
    records = len([f for f in os.listdir(os.path.join(out, "points")) if f.endswith(".json")])
    return [Summary(os.path.relpath(out, REPO), TITLE, f"{records} points recorded; verdicts: "
                    + ", ".join(f"{kinds.count(k)} {k}" for k in dict.fromkeys(kinds)))]
