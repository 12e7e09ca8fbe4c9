"""Training the points of a study that have no record yet (``studies.points.run_point``: one committed record per
point) and the sentence of its report on where the points trained."""
from __future__ import annotations

import argparse
import collections
import dataclasses
import os
from typing import Any, Callable, Optional, Sequence

from studies import points as sweep_lib

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
