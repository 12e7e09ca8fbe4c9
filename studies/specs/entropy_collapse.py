"""Attention entropy collapse and training instability (Zhai et al. 2023), seen by the health monitor, with
QK-LayerNorm as the remedy.

Zhai et al. report that unstable Transformer training goes with "entropy collapse" (some heads' attention entropy
falls to near zero) and that keeping the attention logits in check prevents it. The small decoder of
``configs/repro_entropy_collapse.py`` on multi-query associative recall at a stable and at too-high peak learning
rates, QK-LayerNorm off and on, three seeds; the engine's health monitor checks every head every 5 steps and its
warnings are the *alarms*. Each record carries ``monitor`` (every warning, the logged training losses, the lowest
head entropy at every check), added after its point trains (``attach_monitor``).

*Event* of a run (its first): a non-finite loss; a loss spike (a logged 5-step mean loss more than SPIKE_NATS above
the lowest before it); or held-out accuracy below LEARNED at the end (dated at the last step). Precision: runs with
an alarm that have an event / runs with an alarm; recall: runs with an event whose first alarm is at or before it /
runs with an event; lead time: event step minus first alarm step. The definitions and the collapse and monitor rules
were committed with ``scripts/repro_entropy_collapse.py`` (aaf1938, 2026-12-01 20:48 UTC) before the first point
trained; the remedy claim is rewritten as a contrast of event rates on 2026-12-05 (post-hoc).
"""
from __future__ import annotations

import math
import os
from typing import Any, Optional, Sequence

import numpy as np

from analysis import divergence_step
from studies import points as points_lib
from studies.claims import CONTRADICTED, REPRODUCED, UNRESOLVED, Claim, Conditions, Criterion, Registration
from studies.derived import DerivedStudy
from studies.records import Record
from studies.study import Arm, Plot, Section

ARM = Arm("", "configs/repro_entropy_collapse.py", "seeds=3")
LEARNED = 0.9  # held-out accuracy below which a run failed to learn
SPIKE_NATS = 0.5  # a logged loss this far above the lowest before it is a loss spike
MIN_SEEDS = 3
STABLE, HIGH = 3e-3, (1e-2, 3e-2, 1e-1)  # the grid: the stable rate without QK-LayerNorm, and the higher ones
MAX_WARNINGS = 200  # warnings kept per record
SUDDEN = ("non-finite loss", "loss spike")  # events with a moment (a failure to learn is dated at the end)
SCRIPT = "scripts/repro_entropy_collapse.py"
COLLAPSE = Registration("aaf1938", SCRIPT, "the fraction with an entropy-collapse warning at or before the event")
MONITOR = Registration("aaf1938", SCRIPT, "recall >= 0.8, precision")
BASELINE = Registration("aaf1938", SCRIPT, "No verdict is drawn unless the stable learning rate")
COND = Conditions(lr="the grid 3e-3 to 0.1 (3e-3: the stable rate without QK-LayerNorm in the pilots)",
                  differences=("a 2-layer pre-LN decoder on MQAR (the paper: ViTs, translation and speech models)",
                               "QK-LayerNorm as the remedy (the paper: sigmaReparam); no weight decay or clipping"))


def monitor_trace(point_dir: str) -> dict:
    """From a run's metrics.jsonl: its health warnings (step, kind, layer, head, value, threshold; none a resume
    superseded), logged training losses, and the lowest head entropy and largest logit at every check."""
    records = points_lib.read_records(os.path.join(point_dir, points_lib.METRICS))
    r4 = lambda x: float(f"{x:.4g}") if isinstance(x, (int, float)) and math.isfinite(x) else None  # noqa: E731
    losses = {int(r["step"]): r["train/loss"] for r in records if "train/loss" in r and "event" not in r}
    warns = [[int(r.get("at_step", r.get("step"))), r.get("kind"), r.get("layer"), r.get("head"), r4(r.get("value")),
              r4(r.get("threshold"))] for r in points_lib.current_events(records, "health_warning")]
    checks = {int(r["attn/step"]): ([v for k, v in r.items() if "/entropy/L" in k and r4(v) is not None],
                                    [v for k, v in r.items() if "/max_logit/L" in k and r4(v) is not None])
              for r in records if "attn/step" in r}
    steps = sorted(checks)
    return {"warnings_fields": ["step", "kind", "layer", "head", "value", "threshold"],
            "warnings": warns[:MAX_WARNINGS], "warnings_total": len(warns), "loss_step": sorted(losses),
            "loss": [None if r4(losses[s]) is None else float(f"{losses[s]:.5g}") for s in sorted(losses)],
            "check_step": steps, "min_entropy": [r4(min(checks[s][0])) if checks[s][0] else None for s in steps],
            "max_logit": [r4(max(checks[s][1])) if checks[s][1] else None for s in steps]}


def attach_monitor(record: str, run_dir: str) -> None:
    """Add the monitor trace of run folder ``run_dir`` to its record (``STUDY.after``), unless the record has one or
    the run left no metrics."""
    rec = points_lib.read_record(record)
    if "monitor" not in rec and os.path.exists(os.path.join(run_dir, points_lib.METRICS)):
        points_lib.write_record(record, dict(rec, monitor=monitor_trace(run_dir)))


def derive(rec: Record, groups=None) -> dict[str, Any]:
    """A run's event (1 or 0) and its step, its first alarm (any kind, and entropy collapse), whether collapse
    was warned at or before the event, its lowest head entropy; None without a monitor trace."""
    mon = rec.raw.get("monitor") or {}
    keys = ("event", "event_step", "first_alarm", "first_collapse", "collapse_first", "min_entropy", "sudden")
    if not mon:
        return dict.fromkeys(keys)
    non_finite = rec.stability.non_finite_step
    spike = divergence_step(mon["loss_step"], [math.nan if v is None else v for v in mon["loss"]], SPIKE_NATS)
    events = [(int(non_finite), "non-finite loss")] if non_finite is not None else []
    events += [(spike, "loss spike")] if spike is not None else []
    if non_finite is None and (rec.valid_accuracy or 0.0) < LEARNED:
        events.append((rec.steps, "failed to learn"))
    step, kind = min(events) if events else (None, None)
    first = lambda k: min((w[0] for w in mon["warnings"] if k in (None, w[1])), default=None)  # noqa: E731
    ents = [e for e in mon["min_entropy"] if e is not None]
    collapse = first("entropy_collapse")
    return dict(zip(keys, (float(step is not None), step, first(None), collapse,
                           None if step is None else float(collapse is not None and collapse <= step),
                           min(ents) if ents else None, float(kind in SUDDEN))))


def setting(arm: str, rec: Record) -> str:
    return f"QK-LN {'on' if rec.override('model.qk_layernorm') else 'off'}, lr {rec.override('train.learning_rate'):g}"


def _runs(groups) -> list[Record]:
    return [r for rs in groups.values() for r in rs if r.metric("event") is not None]


def _baseline(groups) -> Optional[str]:
    """Why no rule is read (None when the stable rate without QK-LayerNorm is healthy in >= MIN_SEEDS seeds)."""
    base = groups.get(f"QK-LN off, lr {STABLE:g}", [])
    bad = sum(bool(r.metric("event")) for r in base)
    return None if len(base) >= MIN_SEEDS and not bad else (f"the stable rate without QK-LayerNorm has {len(base)} "
                                                            f"seed(s), {bad} with an event")


def collapse_rule(groups) -> tuple[str, str, str]:
    """Among unstable runs without QK-LayerNorm, the share warned of entropy collapse at or before the event:
    >= 0.8 reproduced, < 0.5 contradicted (before 2026-12-05: not reproduced), between unresolved (partial)."""
    ev = [r for r in _runs(groups) if r.metric("event") and not r.override("model.qk_layernorm")]
    hit = sum(bool(r.metric("collapse_first")) for r in ev)
    measured = f"{hit} of {len(ev)} unstable runs without QK-LayerNorm warned of collapse at or before the event"
    why = _baseline(groups) or (None if ev else "no run without QK-LayerNorm became unstable")
    if why:
        return measured, UNRESOLVED, why
    frac = hit / len(ev)
    return measured, REPRODUCED if frac >= 0.8 else CONTRADICTED if frac < 0.5 else UNRESOLVED, f"share {frac:.2f}"


def alarms(runs: Sequence[Record], kind: str = "first_alarm") -> dict:
    """Precision, recall and lead times of the first alarm ``kind`` over ``runs``."""
    alarmed = [r for r in runs if r.metric(kind) is not None]
    events = [r for r in runs if r.metric("event")]
    caught = [r for r in events if r.metric(kind) is not None and r.metric(kind) <= r.metric("event_step")]
    leads = [r.metric("event_step") - r.metric(kind) for r in caught]
    sudden = [r.metric("event_step") - r.metric(kind) for r in caught if r.metric("sudden")]
    true = sum(bool(r.metric("event")) for r in alarmed)
    return {"runs": len(runs), "alarmed": len(alarmed), "events": len(events), "true": true, "caught": len(caught),
            "precision": true / len(alarmed) if alarmed else None,
            "recall": len(caught) / len(events) if events else None,
            "lead": float(np.median(leads)) if leads else None,
            "sudden": f"{len(sudden)}/{sum(bool(r.metric('sudden')) for r in events)}",
            "sudden_lead": float(np.median(sudden)) if sudden else None}


def monitor_rule(groups) -> tuple[str, str, str]:
    """Recall and precision >= 0.8 with a positive median lead: reproduced; recall < 0.8: contradicted (before
    2026-12-05: not reproduced); recall alone: unresolved (partial)."""
    d = alarms(_runs(groups))
    f = lambda x: "—" if x is None else f"{x:.2f}"  # noqa: E731
    measured = (f"precision {f(d['precision'])}, recall {f(d['recall'])}, median lead {f(d['lead'])} steps over "
                f"{d['runs']} runs ({d['events']} with an event)")
    why = _baseline(groups) or (None if d["recall"] is not None else "no run had an event")
    if why:
        return measured, UNRESOLVED, why
    if d["recall"] < 0.8:
        return measured, CONTRADICTED, "recall < 0.8"
    ok = (d["precision"] or 0) >= 0.8 and (d["lead"] or 0) > 0
    return measured, REPRODUCED if ok else UNRESOLVED, "recall >= 0.8" + ("" if ok else "; precision < 0.8 or no lead")


def baseline_rule(groups) -> tuple[str, str, str]:
    why = _baseline(groups)
    return (why or "every seed healthy", UNRESOLVED if why else REPRODUCED,
            "the precondition of every other rule")


def monitor_table(groups) -> Optional[Section]:
    runs = [r for m in groups.values() for _, r in m if r.metric("event") is not None]
    if not runs:
        return None
    rows = [[name, *(alarms(runs, kind)[k] for k in ("runs", "alarmed", "events", "true", "caught", "precision",
                                                     "recall", "lead", "sudden", "sudden_lead"))]
            for name, kind in (("any", "first_alarm"), ("entropy_collapse", "first_collapse"))]
    return Section("The health monitor as an early warning, over all runs",
                   "A failure to learn is dated at the last step, so its lead time only says how early the monitor "
                   "knew; the last two columns count the events with a moment (a spike or a non-finite loss).",
                   ["alarm", "runs", "runs with alarm", "runs with event", "alarm runs with event", "events caught",
                    "precision", "recall", "lead median (steps)", "spike/non-finite caught", "their lead median"],
                   rows, "monitor.csv")


def events_table(groups) -> Optional[Section]:
    step = lambda r, k: None if r.metric(k) is None else int(r.metric(k))  # noqa: E731
    rows = [[label, r.seed, r.valid_accuracy, step(r, "event_step") if r.metric("event") else "none",
             step(r, "first_alarm"), step(r, "first_collapse"), r.stability.health_warnings, r.metric("min_entropy")]
            for label, m in groups.items() for _, r in m if r.metric("event") is not None]
    return Section("Events and alarms per run", "Event step: the step of the run's first event (none: healthy).",
                   ["setting", "seed", "held-out accuracy", "event step", "first warning (any)",
                    "first entropy-collapse warning", "warnings", "lowest head entropy"], rows, "events.csv")


STUDY = DerivedStudy(
    name="entropy_collapse", title="Entropy collapse and instability (Zhai et al. 2023), the health monitor, and "
    "QK-LayerNorm", out="docs/results/entropy_collapse",
    protocol=("Protocol: a 2-layer pre-LN decoder on multi-query associative recall (4 pairs, sequence 16, "
              "vocabulary 256, batch 64), AdamW (0.9, 0.95), linear warmup then cosine decay, peak learning rates "
              "3e-3, 1e-2, 3e-2, 0.1, QK-LayerNorm off/on, no weight decay or clipping "
              "(`configs/repro_entropy_collapse.py`); the health monitor checks every head every 5 steps with the "
              "defaults of `config.health` when the runs were made. Event: a non-finite loss, a loss spike (> 0.5 "
              "nats above the lowest logged loss before it) or held-out accuracy < 0.9 at the end (guessing among "
              "the 4 values in context gives 0.25). Zhai et al. give no rates for entropy collapse or for a "
              "monitor: the rules read directions and this project's thresholds, not the paper's values."),
    arms=(ARM,), setting=setting, derive=derive, metrics=("accuracy", "event", "min_entropy", "logit", "warnings"),
    claims=tuple(Claim(f"remedy lr {lr:g}", f"at lr {lr:g} QK-LayerNorm lowers the share of runs with an event "
                       "(on - off)", (f"QK-LN on, lr {lr:g}",), (f"QK-LN off, lr {lr:g}",), "remedy", COND,
                       sign=-1, margin=0.2, metric="event") for lr in HIGH),
    criteria=(Criterion("baseline", "the stable rate without QK-LayerNorm is healthy in every seed", baseline_rule,
                        COND, BASELINE),
              Criterion("collapse", "attention entropy collapses in unstable runs (Zhai et al. section 3)",
                        collapse_rule, COND, COLLAPSE),
              Criterion("monitor", "the health monitor warns before the event (any warning kind; this project)",
                        monitor_rule, COND, MONITOR)),
    notes=("Reading: an event includes a failure to learn, so a remedy contrast counts QK-LayerNorm runs that did "
           "not learn the task at a rate as events, instability or not; the events table tells which.",),
    sections=(events_table, monitor_table),
    plots=(Plot("accuracy_vs_lr", "accuracy", "train.learning_rate", "model.qk_layernorm"),
           Plot("entropy_vs_lr", "min_entropy", "train.learning_rate", "model.qk_layernorm")),
    margins_note=("The remedy contrasts (event shares, margin 0.2) were written on 2026-12-05 after the data, in "
                  "place of a rule on event counts: post-hoc."),
    after=attach_monitor,
)
STUDIES = (STUDY,)

