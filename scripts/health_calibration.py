"""How well the attention health monitor's warnings foretell failed training, over every committed run that
keeps an attention trace, and which thresholds would warn less in runs that train well without missing more.

The monitor (``engine/health.py``, thresholds ``config.health``) checks every head every ``train.stats_every``
steps during training; its warnings are the *alarms*. Since 2026-12-04 every point record written by
``scripts/sweep.py --records`` keeps the run's attention trace beside it (``<point>.attention.json.gz``: the
monitor's inputs at every check and the logged training losses), so the monitor can be replayed offline with
any thresholds; ``health.replay`` over a trace with the run's own thresholds gives exactly the warnings the
run logged (tests/test_sweeps.py). Records made before then have no trace and are not counted here.

This script (1) trains the calibration runs that have no record yet: the entropy-collapse study's set-up
(``configs/repro_entropy_collapse.py``: 4 learning rates x QK-LayerNorm off/on) on fresh seeds 3-5, 24 runs
of which some diverge, records in ``<out>/points/``; then (2) replays the monitor over every trace under
``--traces`` (default ``docs/results``: the calibration runs and whatever the other studies have recorded
since, translation runs among them) at the defaults and over a grid of thresholds, and writes the report.

    python scripts/health_calibration.py                # train what is missing, then the report
                                                        #   -> docs/results/health_calibration/
    python scripts/health_calibration.py --report_only  # the report from the committed records and traces
    python scripts/health_calibration.py --quick        # tiny runs, a few steps; for tests

Definitions and the choice rule (fixed before any trace was replayed):
- *Event* of a run (its first): a non-finite loss; a *loss spike*, a logged training loss more than SPIKE_NATS
  (0.5) above the lowest logged loss before it (the entropy-collapse study's rule); or a *failure to learn*,
  dated at the last step: for translation (a record with test BLEU) a validation NLL above FAIL_NLL (4.5 nats:
  the unigram level of the Bible corpus is about 6.2 and every translation run that trained so far ended below
  3.5), for other tasks a validation accuracy below LEARNED (0.9). A run without any is *healthy*.
- *Alarm*: a warning of any kind; a run is *caught* when its first alarm is at or before its event step.
  Precision: alarmed runs with an event / alarmed runs. Recall: caught runs / runs with an event. Lead time:
  event step minus first alarm step over the caught runs. *False alarms*: the healthy runs with any warning,
  and the warnings per healthy run.
- Settings: the defaults of ``engine/config.py`` and a grid over the thresholds of the logit warnings that fire
  in healthy translation runs: ``logit_std_floor`` x ``logit_std_high`` x ``max_logit`` (GRID). A head's spread
  threshold is min(logit_std_high, max(logit_std_ratio x its early spread, logit_std_floor)), so a floor above
  ``logit_std_high`` acts as ``logit_std_high`` unless that is raised too. Added after the
  first replay (24 calibration runs, 2026-12-04), not fixed before it: ``recover_margin``, how far past its
  threshold a head must come back before it can warn again. That replay showed higher floors giving *more*
  warnings per healthy run, not fewer: a head hovering at its threshold warned at every re-entry (one head 18
  times in one run at floor 8, against 3 at 6). The choice rule is unchanged.
- Choice: a setting is *eligible* when it catches every event run the defaults catch, its first alarm at most
  one check later than the defaults'. Among the eligible, the one with the fewest healthy runs alarmed, then
  the fewest warnings per healthy run, then the fewest thresholds changed, then the lowest thresholds. It is
  *recommended* only with at least MIN_EVENTS (5) event runs and MIN_HEALTHY (20) healthy runs from at least
  MIN_STUDIES (2) studies; otherwise the report says what is missing. The defaults in ``engine/config.py``
  change only after a recommendation, by a commit of their own.
- Added after 53 replays (2026-12-05), not part of the choice rule: each warning kind/group left out in turn at
  the defaults, to show which kinds carry the caught events and which only warn in healthy runs (the data for a
  threshold per attention group, which the grid cannot express).
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import os
import sys
from typing import Any, Optional, Sequence

import ml_collections
import numpy as np

from _report import Report, environment_line, fmt, plt
import _study
import sweep as sweep_lib
from repro_entropy_collapse import divergence_step

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = "configs/repro_entropy_collapse.py"
FIRST_SEED = 3  # fresh seeds: the entropy-collapse study trained 0-2
SPIKE_NATS = 0.5
FAIL_NLL = 4.5
LEARNED = 0.9
MIN_EVENTS, MIN_HEALTHY, MIN_STUDIES = 5, 20, 2
GRID = {"logit_std_floor": (6.0, 8.0, 10.0, 12.0, 16.0), "logit_std_high": (8.0, 12.0, 16.0),
        "max_logit": (50.0, 100.0), "recover_margin": (1.0, 0.9, 0.8)}
TRACE_SUFFIX = ".attention.json.gz"


@dataclasses.dataclass
class Run:
    study: str  # the records folder, relative to --traces (e.g. heads_vs_depth/points)
    point: str
    record: dict
    observations: list  # [(step, group -> field -> [L, H])]
    skip_groups: tuple
    event: Optional[str]
    event_step: Optional[int]

    @property
    def check_every(self) -> int:
        """The monitor's check interval (``train.stats_every``; the last step is checked off the interval)."""
        steps = [s for s, _ in self.observations]
        gaps = [b - a for a, b in zip(steps, steps[1:]) if b > a]
        return max(set(gaps), key=gaps.count) if gaps else 1


def run_event(record: dict, trace: dict) -> tuple[Optional[str], Optional[int]]:
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
    if non_finite is None:
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


def load_runs(root: str) -> list[Run]:
    """Every run with a trace and a record under ``root``, in path order."""
    runs = []
    for folder, _, files in sorted(os.walk(root)):
        for name in sorted(files):
            if not name.endswith(TRACE_SUFFIX):
                continue
            record_path = os.path.join(folder, name[: -len(TRACE_SUFFIX)] + ".json")
            if not os.path.exists(record_path):
                continue
            record = sweep_lib.read_record(record_path)
            trace = sweep_lib.read_attention_trace(os.path.join(folder, name))
            event, step = run_event(record, trace)
            runs.append(Run(os.path.relpath(folder, root), name[: -len(TRACE_SUFFIX)], record,
                            sweep_lib.trace_observations(trace), tuple(trace.get("skip_groups") or ()), event, step))
    return runs


def defaults() -> ml_collections.ConfigDict:
    from engine import config as config_lib

    return config_lib.base_config().health


def settings() -> list[dict[str, float]]:
    """The changes from the defaults of each setting: the defaults ({}) first, then the grid."""
    base = defaults()
    out: list[dict[str, float]] = [{}]
    for values in itertools.product(*GRID.values()):
        change = {k: v for k, v in zip(GRID, values) if float(base[k]) != v}
        if change and change not in out:
            out.append(change)
    return out


def label(change: dict[str, float]) -> str:
    return "defaults" if not change else ", ".join(f"{k} {v:g}" for k, v in change.items())


@dataclasses.dataclass(frozen=True)
class Alarms:
    """One run's warnings under one setting: how many of each kind/group and the step of each one's first."""
    kinds: dict[str, int]
    firsts: dict[str, int]

    @property
    def first(self) -> Optional[int]:
        """The step of the run's first warning (None: no warning)."""
        return min(self.firsts.values(), default=None)

    @property
    def count(self) -> int:
        return sum(self.kinds.values())

    def without(self, key: str) -> Alarms:
        """These alarms as if the warning kind/group ``key`` had never fired."""
        return Alarms({k: n for k, n in self.kinds.items() if k != key},
                      {k: s for k, s in self.firsts.items() if k != key})


def first_alarms(runs: Sequence[Run], change: dict[str, float]) -> list[Alarms]:
    """Per run: the monitor's warnings replayed at the defaults with ``change`` applied."""
    from engine import health as health_lib

    cfg = defaults()
    cfg.update(change)
    out = []
    for r in runs:
        kinds: dict[str, int] = {}
        firsts: dict[str, int] = {}
        for w in health_lib.replay(r.observations, cfg, r.skip_groups):
            key = f"{w.kind}/{w.group}"
            kinds[key] = kinds.get(key, 0) + 1
            firsts[key] = min(firsts.get(key, w.step), w.step)
        out.append(Alarms(kinds, firsts))
    return out


def left_out(runs: Sequence[Run], alarms: Sequence[Alarms]) -> list[tuple[str, dict[str, Any], int]]:
    """Per warning kind/group that fired: its name, the detection without it, and how many runs caught with it
    are missed without it."""
    base = detection(runs, alarms)
    out = []
    for key in sorted({k for a in alarms for k in a.kinds}):
        d = detection(runs, [a.without(key) for a in alarms])
        out.append((key, d, len(base["caught_set"] - d["caught_set"])))
    return out


def detection(runs: Sequence[Run], alarms: Sequence[Alarms]) -> dict[str, Any]:
    """Precision, recall, lead times and false alarms of one setting."""
    alarmed = [i for i, a in enumerate(alarms) if a.first is not None]
    events = [i for i, r in enumerate(runs) if r.event is not None]
    caught = [i for i in events if alarms[i].first is not None and alarms[i].first <= runs[i].event_step]
    healthy = [i for i, r in enumerate(runs) if r.event is None]
    leads = [runs[i].event_step - alarms[i].first for i in caught]
    return {"runs": len(runs), "events": len(events), "healthy": len(healthy), "alarmed": len(alarmed),
            "caught": len(caught), "caught_set": set(caught),
            "precision": sum(runs[i].event is not None for i in alarmed) / len(alarmed) if alarmed else None,
            "recall": len(caught) / len(events) if events else None,
            "lead_median": float(np.median(leads)) if leads else None,
            "healthy_alarmed": sum(alarms[i].first is not None for i in healthy),
            "warnings_per_healthy": float(np.mean([alarms[i].count for i in healthy])) if healthy else None}


EVENT_KINDS = ("loss spike", "non-finite loss", "failed to learn")


def caught_by_event(runs: Sequence[Run], d: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Per event kind present in ``runs``: (runs caught, runs with it) at the setting ``d`` describes."""
    out = {}
    for kind in EVENT_KINDS:
        idx = [i for i, r in enumerate(runs) if r.event == kind]
        if idx:
            out[kind] = (sum(i in d["caught_set"] for i in idx), len(idx))
    return out


def kind_totals(runs: Sequence[Run], alarms: Sequence[Alarms]) -> dict[str, tuple[int, int, int, int]]:
    """Per warning kind/group: (healthy runs with it, its warnings in healthy runs, event runs with it, its
    warnings in event runs)."""
    out = {}
    for k in sorted({k for a in alarms for k in a.kinds}):
        healthy = [a.kinds.get(k, 0) for r, a in zip(runs, alarms) if r.event is None]
        event = [a.kinds.get(k, 0) for r, a in zip(runs, alarms) if r.event is not None]
        out[k] = (sum(x > 0 for x in healthy), sum(healthy), sum(x > 0 for x in event), sum(event))
    return out


def choose(runs: Sequence[Run],
           results: list[tuple[dict, list[Alarms], dict]]) -> tuple[Optional[dict], list[bool], str]:
    """The chosen change (None: none eligible beyond the defaults), each setting's eligibility, and whether the
    data suffice for a recommendation (the reason when they do not)."""
    base_alarms, base = results[0][1], results[0][2]
    eligible = []
    for change, alarms, d in results:
        ok = all(alarms[i].first is not None and alarms[i].first <= base_alarms[i].first + runs[i].check_every
                 for i in base["caught_set"])
        eligible.append(ok)

    def key(item):
        change, _, d = item[1]
        return (d["healthy_alarmed"], d["warnings_per_healthy"] or 0.0, len(change), sorted(change.values()))

    best = min((item for item in enumerate(results) if eligible[item[0]]), key=key)
    studies = {r.study for r in runs}
    missing = []
    if base["events"] < MIN_EVENTS:
        missing.append(f"{base['events']} event runs (needs {MIN_EVENTS})")
    if base["healthy"] < MIN_HEALTHY:
        missing.append(f"{base['healthy']} healthy runs (needs {MIN_HEALTHY})")
    if len(studies) < MIN_STUDIES:
        missing.append(f"runs from {len(studies)} records folder(s) (needs {MIN_STUDIES})")
    return best[1][0], eligible, "; ".join(missing)


def final_text(run: Run) -> str:
    """"<point>: validation accuracy 0.713" (NLL for translation): where a run ended."""
    valid = run.record.get("validation") or {}
    key = "nll" if (run.record.get("test") or {}).get("bleu") is not None else "accuracy"
    return f"{run.point}: validation {key} {fmt(valid.get(key))}"


def findings(runs: Sequence[Run], results: list[tuple[dict, list[Alarms], dict]],
             eligible: Sequence[bool]) -> list[str]:
    """Sentences on what the defaults miss, where their false alarms come from, which settings the rule drops,
    and which single threshold changes warn more in healthy runs instead of less."""
    base_alarms, d = results[0][1], results[0][2]
    out = []
    by_event = caught_by_event(runs, d)
    missed = {k: n - c for k, (c, n) in by_event.items() if c < n}
    if d["events"]:
        whole = sorted(k for k, (c, n) in by_event.items() if c == n)
        out.append(f"At the defaults the monitor misses {sum(missed.values())} of {d['events']} event runs"
                   + (f" ({', '.join(f'{k} {n}' for k, n in sorted(missed.items()))})" if missed else "")
                   + (f" and catches every {' and every '.join(whole)}" if whole else "") + ".")
        failed = [r for i, r in enumerate(runs) if r.event == "failed to learn" and i not in d["caught_set"]]
        if failed:
            out.append(f"The missed runs that failed to learn end at {'; '.join(final_text(r) for r in failed)} "
                       f"(learned: validation accuracy {LEARNED:g} or more; translation: NLL {FAIL_NLL:g} or less).")
    healthy_kinds = {k: t[1] for k, t in kind_totals(runs, base_alarms).items() if t[1]}
    total = sum(healthy_kinds.values())
    if total:
        top = sorted(healthy_kinds.items(), key=lambda kv: (-kv[1], kv[0]))[:2]
        out.append(f"Its {total} warnings in healthy runs come mostly from "
                   + " and ".join(f"{k} ({n})" for k, n in top) + ".")
    quiet = [(k, dd) for k, dd, lost in left_out(runs, base_alarms)
             if not lost and dd["warnings_per_healthy"] is not None and d["warnings_per_healthy"] is not None
             and dd["warnings_per_healthy"] < d["warnings_per_healthy"]]
    if quiet:
        k, dd = min(quiet, key=lambda kv: (kv[1]["healthy_alarmed"], kv[1]["warnings_per_healthy"], kv[0]))
        out.append(f"Left out alone, {k} costs no caught event and leaves {dd['healthy_alarmed']} of "
                   f"{dd['healthy']} healthy runs alarmed with {fmt(dd['warnings_per_healthy'])} warnings per "
                   f"healthy run (defaults {d['healthy_alarmed']}, {fmt(d['warnings_per_healthy'])}); a reading "
                   f"after the fact for a per-group threshold, not a recommendation.")
    dropped = sum(not e for e in eligible)
    if dropped:
        out.append(f"{dropped} of {len(results)} settings are not eligible: in at least one run the defaults "
                   f"catch, their first alarm comes more than one check later or not at all.")
    def healthy_warnings(dd: dict) -> int:
        return round((dd["warnings_per_healthy"] or 0.0) * dd["healthy"])

    base = defaults()
    raised = [(c, dd) for c, _, dd in results if len(c) == 1
              and all(k != "recover_margin" and v > float(base[k]) for k, v in c.items())]
    worse = [(c, dd) for c, dd in raised if healthy_warnings(dd) > healthy_warnings(d)]
    if worse:
        same: dict[tuple[str, int], list[float]] = {}
        for c, dd in worse:
            (name, value), = c.items()
            same.setdefault((name, healthy_warnings(dd)), []).append(value)
        out.append("A higher threshold does not always mean fewer false alarms: "
                   + "; ".join(f"{name} {', '.join(f'{v:g}' for v in values)} "
                               f"give{'s' if len(values) == 1 else ''} {n} warnings in healthy runs"
                               for (name, n), values in same.items())
                   + f" against {healthy_warnings(d)} at the defaults (a head that leaves the bad state "
                     f"and comes back warns again each time; see recover_margin).")
    return out


def write_report(out: str, root: str, runs: list[Run], command: str, train_cmd: str) -> str:
    report = Report(out, "Calibrating the attention health monitor")
    report.text(environment_line())
    report.text(__doc__.split("\n\n")[0].replace("\n", " "))
    report.section("Protocol")
    report.text(__doc__[__doc__.index("Definitions and the choice rule"):].strip())
    base = defaults()
    report.text("GRID: " + "; ".join(f"`{k}` in {{{', '.join(f'{v:g}' for v in vs)}}}" for k, vs in GRID.items())
                + f" (defaults: " + ", ".join(f"`{k}` {float(base[k]):g}" for k in GRID) + ").")
    own = [r.record for r in runs if r.study.startswith(os.path.relpath(out, root))]
    walls = [w for w in map(_study.wall_minutes, own) if w is not None]
    report.text(f"Command: `{command}` (resumable: a calibration run with a record is not trained again; "
                f"`--report_only` rebuilds this report). The calibration runs train `{train_cmd}`"
                + (f", {sum(walls):.0f} wall minutes over {len(walls)} runs on 2 CPU cores. " if walls else ". ")
                + f"Traces are read from every `*{TRACE_SUFFIX}` under `{os.path.relpath(root, REPO)}/`. "
                + _study.trained_on_text([r.record for r in runs]))
    report.section("Runs")
    if not runs:
        report.text("No run with an attention trace yet.")
        return report.write()
    per_study: dict[str, list[Run]] = {}
    for r in runs:
        per_study.setdefault(r.study, []).append(r)
    report.table(["records folder", "runs", "healthy", "loss spike", "non-finite loss", "failed to learn",
                  "monitor checks every (steps)"],
                 [[s, len(rs), sum(r.event is None for r in rs), sum(r.event == "loss spike" for r in rs),
                   sum(r.event == "non-finite loss" for r in rs), sum(r.event == "failed to learn" for r in rs),
                   "/".join(str(x) for x in sorted({r.check_every for r in rs}))] for s, rs in per_study.items()])
    results = []
    for change in settings():
        alarms = first_alarms(runs, change)
        results.append((change, alarms, detection(runs, alarms)))
    base_alarms = results[0][1]
    report.table(["records folder", "point", "steps", "event", "event step", "first alarm (defaults)",
                  "warnings (defaults)", "warnings by kind/group (defaults)"],
                 [[r.study, r.point, r.record.get("steps"), r.event or "healthy", r.event_step, a.first, a.count,
                   "; ".join(f"{k} {n}" for k, n in sorted(a.kinds.items()))] for r, a in zip(runs, base_alarms)],
                 csv_name="runs.csv")

    report.section("The monitor at its defaults")
    d = results[0][2]
    by_event = [f"{kind} {c} of {n}" for kind, (c, n) in caught_by_event(runs, d).items()]
    report.text(f"Over {d['runs']} runs ({d['events']} with an event, {d['healthy']} healthy): precision "
                f"{fmt(d['precision'])}, recall {fmt(d['recall'])} (caught: {', '.join(by_event) or 'no events'}), "
                f"median lead {fmt(d['lead_median'])} steps; {d['healthy_alarmed']} of {d['healthy']} healthy runs "
                f"get a warning, {fmt(d['warnings_per_healthy'])} warnings per healthy run.")
    for when, old, why in _study.HEALTH_CHANGES:
        change = {k: v for k, v in old.items() if float(base[k]) != v}
        p = detection(runs, first_alarms(runs, change))
        report.text(f"The defaults before {when} UTC ({label(change)}; replaced by {why}): precision "
                    f"{fmt(p['precision'])}, recall {fmt(p['recall'])}, {p['healthy_alarmed']} of {p['healthy']} "
                    f"healthy runs alarmed, {fmt(p['warnings_per_healthy'])} warnings per healthy run.")
    rows = [[k, *t] for k, t in kind_totals(runs, base_alarms).items()]
    report.table(["kind/group", "healthy runs with it", "its warnings in healthy runs", "event runs with it",
                  "its warnings in event runs"], rows, csv_name="kinds_at_defaults.csv")
    report.text("Each kind/group left out in turn, the rest at the defaults (added after 53 replays, not part of "
                "the choice rule): the caught events that only it caught, and the false alarms left without it.")
    report.table(["left out", "caught events lost", "recall", "precision", "median lead (steps)",
                  "healthy runs alarmed", "warnings per healthy run"],
                 [[k, lost, dd["recall"], dd["precision"], dd["lead_median"],
                   f"{dd['healthy_alarmed']}/{dd['healthy']}", dd["warnings_per_healthy"]]
                  for k, dd, lost in left_out(runs, base_alarms)],
                 csv_name="left_out_at_defaults.csv")

    report.section("Thresholds")
    best, eligible, missing = choose(runs, results)
    report.table(["setting", "eligible", "precision", "recall", "median lead (steps)", "healthy runs alarmed",
                  "warnings per healthy run", "alarmed runs"],
                 [[label(c), "yes" if e else "no", dd["precision"], dd["recall"], dd["lead_median"],
                   f"{dd['healthy_alarmed']}/{dd['healthy']}", dd["warnings_per_healthy"], dd["alarmed"]]
                  for (c, _, dd), e in zip(results, eligible)], csv_name="settings.csv")
    report.section("What the data say")
    report.text(" ".join(findings(runs, results, eligible)))
    chosen = next(dd for c, _, dd in results if c == best)
    if missing:
        verdict = (f"No recommendation yet: {missing}. By the rule the best setting on these runs is "
                   f"**{label(best)}** ({chosen['healthy_alarmed']} of {chosen['healthy']} healthy runs alarmed, "
                   f"against {d['healthy_alarmed']} at the defaults), which says nothing until the runs suffice.")
    elif not best:
        verdict = "Recommendation: keep the defaults (no eligible setting alarms fewer healthy runs)."
    else:
        verdict = (f"Recommendation: **{label(best)}**: {chosen['healthy_alarmed']} of {chosen['healthy']} healthy "
                   f"runs alarmed against {d['healthy_alarmed']} at the defaults, "
                   f"{fmt(chosen['warnings_per_healthy'])} warnings per healthy run against "
                   f"{fmt(d['warnings_per_healthy'])}, recall {fmt(chosen['recall'])} against {fmt(d['recall'])}.")
    report.text(verdict)
    singles = [(c, dd) for c, _, dd in results if len(c) == 1]
    if singles:
        report.text("One threshold changed at a time (warnings per healthy run, healthy runs alarmed, recall; "
                    f"defaults {fmt(d['warnings_per_healthy'])}, {d['healthy_alarmed']}/{d['healthy']}, "
                    f"{fmt(d['recall'])}): " + "; ".join(
                        f"{label(c)}: {fmt(dd['warnings_per_healthy'])}, {dd['healthy_alarmed']}/{dd['healthy']}, "
                        f"{fmt(dd['recall'])}" for c, dd in singles) + ".")
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [dd["healthy_alarmed"] / max(dd["healthy"], 1) for _, _, dd in results]
    ys = [dd["recall"] if dd["recall"] is not None else math.nan for _, _, dd in results]
    ax.scatter(xs, ys, c=["tab:red" if not c else ("tab:green" if c == best else "tab:blue")
                          for c, _, _ in results], s=18)
    ax.set_xlabel("fraction of healthy runs alarmed")
    ax.set_ylabel("recall (event runs caught)")
    ax.set_title("each point a threshold setting (red: defaults, green: chosen)")
    report.figure(fig, "settings", "False alarms against recall for every threshold setting.")
    return report.write()


def main(argv: Optional[Sequence[str]] = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny runs, a few steps (for tests)")
    parser.add_argument("--report_only", action="store_true", help="train nothing; the report from the records")
    parser.add_argument("--traces", default=None, help="folder searched for traces (default docs/results, or the "
                        "--out folder with --quick)")
    parser.add_argument("--workdir", default=None, help="run folders (default runs/repro/health_calibration[_quick])")
    parser.add_argument("--out", default=None, help="report folder, records in <out>/points (default "
                        "docs/results/health_calibration, or runs/repro/health_calibration_quick with --quick)")
    parser.add_argument("--train_script", default=None, help="training entry point (default <repo>/train.py)")
    args = parser.parse_args(argv)
    tag = "health_calibration_quick" if args.quick else "health_calibration"
    out = os.path.abspath(args.out or os.path.join(REPO, "runs/repro" if args.quick else "docs/results", tag))
    root = os.path.abspath(args.traces or (out if args.quick else os.path.join(REPO, "docs/results")))
    if args.traces is not None and not os.path.isdir(root):
        raise ValueError(f"--traces={root}: not a folder; expected the folder the point records are under")
    workdir = os.path.abspath(args.workdir or os.path.join(REPO, "runs/repro", tag))
    config_arg = f"first_seed={FIRST_SEED}" + (",quick" if args.quick else "")
    spec = f"{os.path.join(REPO, CONFIG)}:{config_arg}"
    points = sweep_lib.sweep_points(spec)
    failed = [] if args.report_only else _study.train_points(spec, points, workdir, os.path.join(out, "points"),
                                                              args.train_script)
    command = "python scripts/health_calibration.py" + (" --quick" if args.quick else "")
    path = write_report(out, root, load_runs(root) if os.path.isdir(root) else [], command, f"{CONFIG}:{config_arg}")
    print(f"wrote {path}")
    if failed:
        print(f"[health_calibration] failed points: {failed}; rerun the same command to retry them", file=sys.stderr)
    return path


if __name__ == "__main__":
    from engine import cli

    sys.exit(0 if cli.script(main) else 1)
