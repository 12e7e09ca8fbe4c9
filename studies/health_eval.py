"""Judging attention health warnings against what happened in a run: its events, whether the monitor caught them,
and precision, recall, lead time and false alarms over runs with Wilson intervals.

Definitions (the event rules were fixed on 2026-12-04, before the monitor of 2026-12-05 was written):
- *Event* of a run (its first): a non-finite loss; a *loss spike*, a logged training loss more than SPIKE_NATS
  (0.5) above the lowest logged loss before it; or a *failure to learn*, dated at the last step: for translation
  (a record with test BLEU) a validation NLL above FAIL_NLL (4.5 nats), for other tasks a validation accuracy
  below LEARNED (0.9). Fault-library runs are short (100-400 steps) and are not judged by learning: a planted
  fault is the run's label and its event step is its loss event, if any, else its last step.
- *Faulty*: a run with an event or a planted fault; otherwise *healthy*. *Alarm*: any warning; a faulty run is
  *caught* when its first alarm is at or before its event step. Precision: faulty runs among the alarmed runs.
  Recall: caught runs / faulty runs. Lead time: event step minus first alarm step. False alarms: warnings per
  healthy run. Intervals: Wilson 95% for proportions.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional, Sequence

import numpy as np

from analysis.curves import divergence_step
from studies.report import fmt

SPIKE_NATS = 0.5
FAIL_NLL = 4.5
LEARNED = 0.9
FAULTS_CONFIG = "configs/faults.py"


@dataclasses.dataclass
class Run:
    """One traced run: its family (the split unit), point name, record, the monitor's inputs and its event."""
    family: str
    point: str
    record: dict
    observations: list  # [(step, group -> field -> [L, H])]
    skip_groups: tuple
    event: Optional[str]
    event_step: Optional[int]
    losses: list = dataclasses.field(default_factory=list)  # [(step, loss)]
    fault: str = ""  # the planted fault of a fault-library run ("healthy": none)

    @property
    def faulty(self) -> bool:
        return self.event is not None or self.fault not in ("", "healthy")


def config_args(arg: str) -> dict[str, str]:
    """A config argument ``"task=mqar,fault=healthy,quick"`` as {key: value} (a bare key: "")."""
    return dict(part.partition("=")[::2] for part in arg.split(",") if part)


def planted_fault(record: dict) -> str:
    """The ``fault=`` of a fault-library record's config argument ("" for any other record)."""
    spec = record.get("config") or ""
    if not spec.split(":")[0].endswith(FAULTS_CONFIG):
        return ""
    return config_args(spec.partition(":")[2]).get("fault", "healthy")


def run_event(record: dict, trace: dict, judge_learning: bool = True) -> tuple[Optional[str], Optional[int]]:
    """The run's first event and its step (definitions in the module docstring), or (None, None)."""
    steps = int(record.get("steps") or 0)
    events = []
    non_finite = (record.get("stability") or {}).get("non_finite_step")
    if non_finite is not None:
        events.append((int(non_finite), "non-finite loss"))
    spike = divergence_step(trace.get("loss_step", []),
                            [math.nan if v is None else v for v in trace.get("loss", [])], SPIKE_NATS)
    if spike is not None:
        events.append((spike, "loss spike"))
    if non_finite is None and judge_learning:
        valid = record.get("validation") or {}
        if (record.get("test") or {}).get("bleu") is not None:
            if valid.get("nll") is None or valid["nll"] > FAIL_NLL:
                events.append((steps, "failed to learn"))
        elif valid.get("accuracy") is None or valid["accuracy"] < LEARNED:
            events.append((steps, "failed to learn"))
    if not events:
        return None, None
    step, kind = min(events)
    return kind, step


def traced_run(family: str, point: str, record: dict, trace: dict, observations: list) -> Run:
    """A ``Run`` from a point record and its attention trace (``observations``: the trace's summaries)."""
    fault = planted_fault(record)
    event, step = run_event(record, trace, judge_learning=not fault)
    if fault not in ("", "healthy") and event is None:
        step = int(record.get("steps") or 0)
    losses = [(s, v) for s, v in zip(trace.get("loss_step", []), trace.get("loss", [])) if v is not None]
    return Run(family, point, record, observations, tuple(trace.get("skip_groups") or ()), event, step, losses,
               fault)


def wilson(k: int, n: int, z: float = 1.96) -> tuple[Optional[float], Optional[float]]:
    """The Wilson 95% interval of k successes in n (None, None when n is 0)."""
    if n == 0:
        return None, None
    p = k / n
    d = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, mid - half), min(1.0, mid + half)


def interval(k: int, n: int) -> str:
    """'k/n = p [lo, hi]' with the Wilson interval; an em dash when n is 0."""
    lo, hi = wilson(k, n)
    return "—" if lo is None else f"{k}/{n} = {k / n:.2f} [{lo:.2f}, {hi:.2f}]"


def first_step(warnings: Sequence[Any]) -> Optional[int]:
    """The step of the first of ``warnings`` (None when there is none)."""
    return min((w.step for w in warnings), default=None)


def caught(run: Run, warnings: Sequence[Any]) -> bool:
    """A faulty run whose first warning is at or before its event step."""
    first = first_step(warnings)
    return run.faulty and first is not None and first <= run.event_step


def detection(runs: Sequence[Run], warnings: Sequence[Sequence[Any]]) -> dict[str, Any]:
    """Counts over ``runs`` (``warnings``: each run's warnings): runs, faulty, healthy, alarmed, true_alarmed,
    caught, leads (steps), healthy_alarmed, healthy_warnings."""
    firsts = [first_step(ws) for ws in warnings]
    healthy = [i for i, r in enumerate(runs) if not r.faulty]
    got = [i for i, (r, ws) in enumerate(zip(runs, warnings)) if caught(r, ws)]
    return {"runs": len(runs), "faulty": len(runs) - len(healthy), "healthy": len(healthy),
            "alarmed": sum(f is not None for f in firsts),
            "true_alarmed": sum(r.faulty and f is not None for r, f in zip(runs, firsts)), "caught": len(got),
            "leads": [runs[i].event_step - firsts[i] for i in got],
            "healthy_alarmed": sum(firsts[i] is not None for i in healthy),
            "healthy_warnings": sum(len(warnings[i]) for i in healthy)}


def collapse_low(run: Run, uniform_ratio: float) -> Optional[tuple[float, int, str, int]]:
    """The lowest ratio of a layer's median logit spread to its value at the run's first check, over the later
    checks at which every head of the layer has normalized entropy above ``uniform_ratio`` (the
    ``attention_collapse`` statistic), as (ratio, step, group, layer); None when no layer is ever near uniform."""
    first: dict[str, Any] = {}
    best = None
    for step, summary in run.observations:
        for group, s in summary.items():
            if group in run.skip_groups or "logit_std" not in s:
                continue
            med = np.median(np.asarray(s["logit_std"], np.float64), axis=1)
            if group not in first:
                first[group] = med
                continue
            ratio = med / np.maximum(first[group], 1e-12)
            for layer in np.flatnonzero((np.asarray(s["norm_entropy"]) > uniform_ratio).all(axis=1)):
                if best is None or ratio[layer] < best[0]:
                    best = (float(ratio[layer]), int(step), group, int(layer))
    return best


def outcome(run: Run, warnings: Sequence[Any]) -> str:
    """What the monitor did on ``run``: 'caught at step S (kind)', 'missed', 'silent' or 'alarmed at step S
    (kind)'."""
    if not warnings:
        return "missed" if run.faulty else "silent"
    first = min(warnings, key=lambda w: w.step)
    verb = "caught" if caught(run, warnings) else ("late" if run.faulty else "alarmed")
    return f"{verb} at step {first.step} ({first.kind})"


def summary_row(name: str, runs: Sequence[Run], warnings: Sequence[Sequence[Any]]) -> list:
    """A row of the split and family tables: name, runs, faulty, healthy, precision, recall, median lead,
    healthy runs alarmed, warnings per healthy run."""
    d = detection(runs, warnings)
    per = d["healthy_warnings"] / d["healthy"] if d["healthy"] else None
    return [name, d["runs"], d["faulty"], d["healthy"], interval(d["true_alarmed"], d["alarmed"]),
            interval(d["caught"], d["faulty"]), fmt(float(np.median(d["leads"]))) if d["leads"] else "—",
            interval(d["healthy_alarmed"], d["healthy"]),
            "—" if per is None else f"{per:.3f} ({d['healthy_warnings']} in {d['healthy']})"]


def kind_rows(splits: Sequence[str], runs: Sequence[Run], warnings: Sequence[Sequence[Any]],
              order: Sequence[str]) -> list[list]:
    """Per split (in ``order``) and kind/group of warning: faulty and healthy runs with it, its precision, its
    warnings."""
    kinds: dict[tuple[str, str], list[int]] = {}
    for s, r, ws in zip(splits, runs, warnings):
        for key in sorted({f"{w.kind}/{w.group}" for w in ws}):
            kinds.setdefault((s, key), [0, 0, 0])[0 if r.faulty else 1] += 1
        for w in ws:
            kinds[(s, f"{w.kind}/{w.group}")][2] += 1
    return [[s, k, v[0], v[1], interval(v[0], v[0] + v[1]), v[2]]
            for (s, k), v in sorted(kinds.items(), key=lambda kv: (list(order).index(kv[0][0]), kv[0][1]))]


def _first(ws: Sequence[Any]) -> str:
    return "none" if not ws else f"{ws[0].kind} at {ws[0].step}" + (f" ({ws[0].cause})" if ws[0].cause else "")


def fault_rows(splits: Sequence[str], runs: Sequence[Run], warnings: Sequence[Sequence[Any]],
               order: Sequence[str]) -> list[list]:
    """Per split and planted fault: runs, caught (healthy: alarmed), each run's first warning."""
    out = []
    for s in order:
        for f in sorted({r.fault for r, x in zip(runs, splits) if r.fault and x == s}):
            sub = [(r, ws) for r, ws, x in zip(runs, warnings, splits) if x == s and r.fault == f]
            out.append([s, f, len(sub), interval(sum(caught(r, ws) or (not r.faulty and bool(ws)) for r, ws in sub),
                                                 len(sub)),
                        "; ".join(f"{r.point}: {_first(ws)}" for r, ws in sub)])
    return out


def collapse_rows(splits: Sequence[str], runs: Sequence[Run], order: Sequence[str], uniform_ratio: float,
                  collapse_spread_ratio: float) -> list[list]:
    """Per split (in ``order``), healthy then faulty runs: runs, runs with a near-uniform layer below
    ``collapse_spread_ratio`` x its first-check spread, the lowest such ratio and where (``collapse_low``)."""
    lows = [collapse_low(r, uniform_ratio) for r in runs]
    out = []
    for s in order:
        for label, faulty in (("healthy", False), ("faulty", True)):
            idx = [i for i, r in enumerate(runs) if splits[i] == s and r.faulty == faulty]
            if not idx:
                continue
            seen = [i for i in idx if lows[i] is not None]
            j = min(seen, key=lambda i: lows[i][0]) if seen else None
            out.append([f"{s} ({label})", len(idx), sum(lows[i][0] < collapse_spread_ratio for i in seen),
                        "—" if j is None else f"{lows[j][0]:.3g} ({runs[j].point}, step {lows[j][1]}, "
                                              f"{lows[j][2]} {lows[j][3]})"])
    return out


def _range(runs: Sequence[Run], stat) -> str:
    """min-max over ``runs`` of ``stat(summary)`` at each run's last check."""
    vals = [float(stat(r.observations[-1][1])) for r in runs]
    return f"{fmt(min(vals))}-{fmt(max(vals))}"


def miss_rows(runs: Sequence[Run], missed: Sequence[Run]) -> list[list]:
    """Per family of a missed run that failed to learn, its failed and its healthy runs: the range of their
    largest layer-median logit std and lowest head normalized entropy at the last check."""
    out = []
    for fam in dict.fromkeys(r.family for r in missed if r.event == "failed to learn"):
        for label, keep in (("failed to learn", lambda r: r.event == "failed to learn"),
                            ("healthy", lambda r: not r.faulty)):
            sub = [r for r in runs if r.family == fam and keep(r)]
            if sub:
                out.append([f"{fam} ({label})", len(sub),
                            _range(sub, lambda s: max(np.median(v["logit_std"], axis=1).max() for v in s.values())),
                            _range(sub, lambda s: min(v["norm_entropy"].min() for v in s.values()))])
    return out
