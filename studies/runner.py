"""Studies whose points are training runs with a committed record each (``studies.points.run_point``): the command
line they share, the training of the points that have no record yet, and the runtime paragraph of their reports.

    study = open_study("scale", "configs/repro_scale.py", __doc__, argv)
    failed = [] if study.args.report_only else train_missing(study)
    path = write_report(study.out, study.points, study.base, ...)
    return finish(study, path, failed)

Records go to ``<out>/points/<point>.json`` (``out``: ``docs/results/<name>``, or ``runs/repro/<name>_quick``
with ``--quick``), run folders to ``runs/repro/<name>[_quick]/<point>``.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import statistics
import sys
from typing import Any, Callable, Optional, Sequence

from studies import points as sweep_lib
from studies.report import REPO


@dataclasses.dataclass
class Study:
    name: str
    args: argparse.Namespace  # quick, seeds, report_only, max_points, workdir, out, train_script
    spec: str  # "<config path>:<config arg>"
    points: list  # [sweep.Point], seed-major
    workdir: str  # run folders
    out: str  # report folder; records in <out>/points
    base: Any  # the config at the study's arguments (sizes for the report)
    command: str  # the command line that reproduces the report

    @property
    def records_dir(self) -> str:
        return os.path.join(self.out, "points")


_LOWEST = {"seeds": 1, "steps": 1, "d_model": 1, "max_points": 0, "minutes": 0, "test_examples": 0}


def check_args(args: argparse.Namespace) -> None:
    """Raise ValueError naming the first of ``--seeds --steps --d_model --max_points --minutes --test_examples``
    (those ``args`` has and sets) below its lowest meaningful value."""
    for name, lowest in _LOWEST.items():
        value = getattr(args, name, None)
        if value is not None and value < lowest:
            raise ValueError(f"--{name}={value:g}; expected a number >= {lowest}")


def open_study(name: str, config: str, doc: str, argv: Optional[Sequence[str]] = None) -> Study:
    """Parse the shared command line (``--quick --seeds --report_only --max_points --workdir --out
    --train_script``) of study ``name`` on ``config`` (a path relative to the repository)."""
    tag = f"{name}_quick"
    parser = argparse.ArgumentParser(prog=f"python -m studies train {name}", description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, a few steps, one seed (for tests)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--report_only", action="store_true", help="train nothing; the report from the records")
    parser.add_argument("--max_points", type=int, default=None, help="train at most this many unfinished points "
                        "(in sweep order, seed-major), then write the report")
    parser.add_argument("--workdir", default=None, help=f"run folders (default runs/repro/{name}[_quick])")
    parser.add_argument("--out", default=None, help=f"report and records folder (default docs/results/{name}, or "
                        f"runs/repro/{tag} with --quick)")
    parser.add_argument("--train_script", default=None, help="training entry point (default <repo>/train.py)")
    args = parser.parse_args(argv)
    check_args(args)
    config_arg = f"seeds={args.seeds}" + (",quick" if args.quick else "")
    spec = f"{os.path.join(REPO, config)}:{config_arg}"
    points = sweep_lib.sweep_points(spec)
    sweep_lib.check_overrides(spec, points, {})
    command = f"python -m studies train {name}" + (" --quick" if args.quick else "") + (
        f" --seeds={args.seeds}" if args.seeds != 3 else "")
    return Study(name=name, args=args, spec=spec, points=points,
                 workdir=os.path.abspath(args.workdir or os.path.join(REPO, "runs/repro", tag if args.quick else name)),
                 out=args.out or os.path.join(REPO, "runs/repro" if args.quick else "docs/results",
                                              tag if args.quick else name),
                 base=sweep_lib.load_config_module(os.path.join(REPO, config)).get_config(config_arg),
                 command=command)


@dataclasses.dataclass(frozen=True)
class Job:
    """One point of a study: its config spec, sweep point, the folder its run folder goes in, its record path."""
    spec: str
    point: Any  # sweep.Point
    workdir: str
    record: str
    label: str = ""  # how messages name it (default: the point's name)

    @property
    def name(self) -> str:
        return self.label or self.point.name


def study_jobs(spec: str, points: Sequence[sweep_lib.Point], workdir: str, records_dir: str) -> list[Job]:
    """The jobs of ``points`` of config ``spec``: run folders under ``workdir``, records
    ``<records_dir>/<point>.json``."""
    return [Job(spec, p, workdir, os.path.join(records_dir, f"{p.name}.json")) for p in points]


def train_jobs(jobs: Sequence[Job], train_script: Optional[str] = None, *, max_points: Optional[int] = None,
               after: Optional[Callable[[str, Any], None]] = None, in_process: bool = False,
               group: Optional[str] = None) -> list[str]:
    """Train each job that has no record yet, in the given order (at most ``max_points`` of them when given);
    ``after(record path, point)`` runs after each job that trained or already had a record. The names of the
    jobs that failed."""
    failed = []
    budget = max_points
    for j in jobs:
        if not os.path.exists(j.record):
            if budget is not None and budget <= 0:
                continue
            budget = None if budget is None else budget - 1
        if not sweep_lib.run_point(j.spec, j.workdir, j.point, {}, group=group or sweep_lib.sweep_name(j.spec),
                                   train_script=train_script, record=j.record, in_process=in_process):
            failed.append(j.name)
            continue
        if after is not None:
            after(j.record, j.point)
    return failed


def train_points(spec: str, points: Sequence[sweep_lib.Point], workdir: str, records_dir: str,
                 train_script: Optional[str] = None, *, max_points: Optional[int] = None,
                 after: Optional[Callable[[str, Any], None]] = None) -> list[str]:
    """``train_jobs`` over ``study_jobs(spec, points, workdir, records_dir)``."""
    return train_jobs(study_jobs(spec, points, workdir, records_dir), train_script, max_points=max_points,
                      after=after)


def train_missing(study: Study, after: Optional[Callable[[str, Any], None]] = None) -> list[str]:
    """``train_points`` over the study's points, with its ``--max_points`` and ``--train_script``."""
    return train_points(study.spec, study.points, study.workdir, study.records_dir, study.args.train_script,
                        max_points=study.args.max_points, after=after)


def finish(study: Study, path: str, failed: Sequence[str]) -> str:
    """Say where the report is and which points failed; ``path``."""
    print(f"wrote {path}")
    if failed:
        print(f"[studies] {study.name}: failed points: {list(failed)}; rerun the same command to retry them",
              file=sys.stderr)
    return path


def recorded(out: str, points: Sequence) -> tuple[list[tuple[Any, dict]], list[str]]:
    """(point, record) for every point with a record under ``<out>/points``, in sweep order, and the names of
    the points without one."""
    recs = sweep_lib.read_records_dir(os.path.join(out, "points"))
    return [(p, recs[p.name]) for p in points if p.name in recs], [p.name for p in points if p.name not in recs]


# engine/config.py's health defaults that changed: (UTC time of the change, the values before it, why), oldest
# first.
HEALTH_CHANGES = (("2026-12-05 03:53:47", {"logit_std_high": 8.0, "max_logit": 50.0, "recover_margin": 1.0},
                   "the health calibration's recommendation over 40 runs, 20 of them healthy"),
                  ("2026-12-05 23:00:00", {"collapse_ratio": 0.1, "collapse_floor": 0.25, "uniform_after_step": 1000,
                                           "max_logit": 100.0, "logit_std_high": 16.0, "logit_std_ratio": 10.0,
                                           "logit_std_floor": 6.0, "logit_std_low": 0.05},
                   "the per-layer monitor of issue 47 (docs/health.md)"),
                  ("2026-12-06 01:10:53", {"init_std_all_low": 0.2, "mask_leak_ratio": float("inf")},
                   "mask_leak and the all-groups init_spread_low (issue 47, held-out calibration)"))


def health_defaults(health: Any, records: Sequence[dict]) -> tuple[Any, str]:
    """``health`` (a config's ``health`` block, today's defaults) as the runs of ``records`` had it: the values
    before every change in HEALTH_CHANGES after the earliest run started (``first_logged_utc``), and a clause
    naming any change that falls between the runs' starts ("" when none)."""
    starts = sorted(r["first_logged_utc"] for r in records if r.get("first_logged_utc"))
    health = health.copy_and_resolve_references()
    between = []
    for when, before, _ in reversed(HEALTH_CHANGES):
        if starts and starts[0] < when:
            health.update(before)
            if starts[-1] >= when:
                between.append(f"runs started from {when} UTC on had the later defaults of `engine/config.py`")
    return health, "; ".join(between)


def wall_minutes(record: dict) -> Optional[float]:
    """A record's wall time in minutes: the larger of the sweep runner's time for the last ``train.py`` call and
    the logged time of all calls (both count any pause of the process); None when neither was recorded."""
    v = max([x for x in (record.get("wall_s"), record.get("logged_s")) if x is not None], default=None)
    return None if v is None else float(v) / 60


def train_minutes(record: dict) -> Optional[float]:
    """A record's steps times its median seconds per step, in minutes: the training cost with pauses and
    evaluation left out; None in records made before ``median_step_s`` was recorded."""
    step_s, steps = record.get("median_step_s"), record.get("steps")
    return None if step_s is None or not steps else float(step_s) * steps / 60


def runtime_text(command: str, records: Sequence[dict], *, queue: bool = True) -> str:
    """The report's paragraph on how it was run and what it cost: the command, the queue (``queue``: the points
    are the CPU queue's; else an accelerator's, ``scripts/gpu_sweeps.py``), and the wall and training time of
    ``records``."""
    accelerated = [r for r in records if r.get("execution")]
    records = [r for r in records if not r.get("execution")]
    walls = sorted(w for w in map(wall_minutes, records) if w is not None)
    trains = sorted(t for t in map(train_minutes, records) if t is not None)
    if not queue:
        text = (f"Command: `{command}`, one accelerator call, which trains the points without a record (`--collect` "
                "brings its records here; `--report_only` of this report's script rebuilds it from `points/`). ")
    else:
        text = (f"Command: `{command}` (resumable: finished points are skipped, an interrupted point resumes from "
                "its last checkpoint; `--report_only` rebuilds this report from `points/`)"
                + (". " if accelerated and not records else
                   ", run in the background queue `scripts/ablations.sh` at nice 19. "))
    if accelerated:
        text += accelerated_text(accelerated) + " "
    if not walls:
        return text + ("No point has finished on the CPU." if accelerated else "No point has finished yet.")
    text += (f"Wall time: {walls[0]:.1f} to {walls[-1]:.1f} minutes a point (median {statistics.median(walls):.1f}), "
             f"{sum(walls) / 60:.1f} hours over {_points(len(walls))}; it counts the time the queue was paused (it is "
             "stopped while CI runs) and shared the 2 cores with other work.")
    if trains:
        text += (f" Training time (steps x the point's median seconds per step, which pauses and evaluation do not "
                 f"inflate; recorded from commit e37b7f2 on): {trains[0]:.1f} to {trains[-1]:.1f} minutes a point, "
                 f"{sum(trains) / 60:.1f} hours over {_points(len(trains))}.")
    return text


def accelerated_text(records: Sequence[dict]) -> str:
    """The sentence on the points trained by ``scripts/gpu_sweeps.py`` (records with ``execution``): where, with
    which execution settings, and their wall time."""
    devices = sorted({str(r.get("device")) for r in records})
    settings = sorted({", ".join(f"{k} = {v}" for k, v in sorted(r["execution"].items())) for r in records})
    precisions = sorted({str(r.get("matmul_precision") or "not recorded") for r in records})
    walls = sorted(w for w in map(wall_minutes, records) if w is not None)
    text = (f"{_points(len(records))} trained on {' / '.join(devices)} by `scripts/gpu_sweeps.py` (same config, "
            f"overrides, step budget and data order as the CPU queue; execution: {'; '.join(settings)}; matmul "
            f"precision: {' / '.join(precisions)})")
    if walls:
        text += (f", {walls[0]:.1f} to {walls[-1]:.1f} wall minutes a point with several points sharing the "
                 "device; the times below are the CPU points'")
    return text + "."


def trained_on_text(records: Sequence[dict]) -> str:
    """Where the points behind a report trained (each record's ``device``, with its CPU model and jax version
    where the engine logged them; its ``host`` where the engine did not log the device yet), apart from the
    machine that built the report from them."""
    def where(r: dict) -> str:
        jax_version = (r.get("software") or {}).get("jax")
        extra = [x for x in (r.get("cpu"), jax_version and f"jax {jax_version}") if x]
        return ((r.get("device") or f"device not recorded, host {r.get('host') or 'not recorded'}")
                + (f" on {', '.join(extra)}" if extra else ""))

    counts = collections.Counter(where(r) for r in records)
    if not counts:
        return "No point is recorded yet; the line above names the machine that built this report."
    return ("The line above names the machine that built this report from the records; the points trained on: "
            + "; ".join(f"{where} ({_points(n)})" for where, n in sorted(counts.items())) + ".")


def _points(n: int) -> str:
    return f"{n} point" + ("" if n == 1 else "s")
