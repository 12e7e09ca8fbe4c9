"""Training the points of a study that have no record yet (``studies.points.run_point``: one committed record per
point) and the sentence of its report on where the points trained.

Several workers may train one study at once (two queues on one machine, each on its own cores; or hosts sharing the
run folders): each point without a record is claimed first (``<run folder>/sweep.claim``, the rules of the run
lock, ``engine.workdir.Lock``), and a point another live worker claimed is skipped, neither trained nor failed. A
claim left by a worker that died is taken over with a warning."""
from __future__ import annotations

import argparse
import collections
import dataclasses
import os
from typing import Any, Callable, Optional, Sequence

from engine.errors import WorkdirError
from engine.workdir import Lock
from studies import points as sweep_lib

CLAIM_FILE = "sweep.claim"
_LOWEST = {"seeds": 1, "steps": 1, "d_model": 1, "max_points": 0, "minutes": 0, "test_examples": 0}


def check_args(args: argparse.Namespace) -> None:
    """Raise ValueError naming the first of ``--seeds --steps --d_model --max_points --minutes --test_examples``
    (those ``args`` has and sets) below its lowest meaningful value."""
    for name, lowest in _LOWEST.items():
        value = getattr(args, name, None)
        if value is not None and value < lowest:
            raise ValueError(f"--{name}={value:g}; expected a number >= {lowest}")


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


def train_jobs(jobs: Sequence[Job], train_script: Optional[str] = None, *, max_points: Optional[int] = None,
               after: Optional[Callable[[str, Any], None]] = None, in_process: bool = False,
               group: Optional[str] = None) -> list[str]:
    """Train each job that has no record yet, in the given order (at most ``max_points`` of them when given),
    skipping those another live worker has claimed; ``after(record path, point)`` runs after each job that
    trained or already had a record. The names of the jobs that failed."""
    failed = []
    budget = max_points
    for j in jobs:
        claim = None
        if not os.path.exists(j.record):
            if budget is not None and budget <= 0:
                continue
            claim = Lock(os.path.join(j.workdir, j.point.name), CLAIM_FILE)
            try:
                claim.acquire()
            except WorkdirError:
                who = claim.holder()
                by = (f"pid {who.get('pid')} on host {who.get('host')} since {who.get('since')}" if who
                      else "which has just let it go")
                print(f"[sweep] {j.name}: claimed by another worker ({by}; {claim.path}), skipped", flush=True)
                continue
            budget = None if budget is None else budget - 1
        try:
            done = sweep_lib.run_point(j.spec, j.workdir, j.point, {}, group=group or sweep_lib.sweep_name(j.spec),
                                       train_script=train_script, record=j.record, in_process=in_process)
        finally:
            if claim is not None:
                claim.release()
        if not done:
            failed.append(j.name)
            continue
        if after is not None:
            after(j.record, j.point)
    return failed


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
            + "; ".join(f"{where} ({points_text(n)})" for where, n in sorted(counts.items())) + ".")


def points_text(n: int, noun: str = "point") -> str:
    """"1 point", "3 points" (``noun`` for another word)."""
    return f"{n} {noun}" + ("" if n == 1 else "s")
