"""The learning-rate arm of the single-head follow-up (issue 49): each row's own rate, chosen before its long points.

Every row of ``configs/single_head.py`` that the long arms train with a rate of its own (h = 1, 2, 8, 32, rows (B)
at d_k 4, and 1 head x 6+6) trains at each rate of GRID for 2,400 steps with one seed (LR_SEED, a seed no long
point uses, so no long contrast reads the run its rate was picked on); ``choose`` picks the row's rate by the rule
below, fixed before any of these points trained, and a rate at the grid's edge extends the grid by one rate in
that direction (``plan``). 1 head x 24+24 takes the rate of the 8-head row its weights are split from (Liu, Liu &
Han train both models with one set of hyperparameters; a sweep at 24+24 is beyond the CPU).
"""
from __future__ import annotations

import dataclasses
import math
import os
from typing import Mapping, Optional

from studies.claims import Conditions, Criterion, Registration
from studies.records import Record, records_in
from studies.report import REPO
from studies.study import Arm, Section, Study

CONFIG = "configs/single_head.py"
OUT = "docs/results/single_head_lr"
ROWS = ("h1", "h2", "h8", "h32", "dk4", "h1_L6")
LABELS = {"h1": "h=1 (d_k=128)", "h2": "h=2 (d_k=64)", "h8": "h=8 (d_k=16)", "h32": "h=32 (d_k=4)",
          "dk4": "h=8, d_k=4 (B)", "h1_L6": "1 head x 6+6 (d_k=64)", "h1_L24": "1 head x 24+24 (d_k=16)"}
REFERENCE = 3e-3  # the rate every d_model-128 row trained at so far (configs/table3_heads.py)
FACTOR = 2.0  # the grid's spacing: the coarsest that still tells a row's rate from its neighbours' (x2 is the
# pilot spacing of table3_d512/pilot_lr.csv, where one step of x2 moved the NLL by 0.02-0.1 nats at 300 steps)
GRID = (REFERENCE / FACTOR, REFERENCE, REFERENCE * FACTOR)  # 1.5e-3, 3e-3, 6e-3: the shared rate and one step
# either side (the d_model-256 pilots chose the smallest of their grid, so both directions stay open)
MAX_EXTENSIONS = 2  # per direction: the grid can grow to 3e-3 / 8 .. 3e-3 x 8
TIE = 0.01  # nats: rates within TIE of the lowest NLL tie (one seed; the Table 3 claims' equivalence margin)
STEPS = 2400
LR_SEED = 100  # no long point, A/A ones included (seeds 0-11), shares it


def rate_text(rate: float) -> str:
    return f"{rate:.3g}"


@dataclasses.dataclass(frozen=True)
class Choice:
    """A row's learning rate: ``rate`` (None while ``status`` is "pending") and why."""

    rate: Optional[float]
    status: str  # "pending" (a rate of the grid has no record), "chosen", "edge" (the extension cap was reached),
    # "failed" (every rate up to the cap diverged: the row's long points never start)
    grid: tuple[float, ...]


def choose(nll: Mapping[float, Optional[float]]) -> float:
    """The rule: the rate with the lowest validation NLL at step 2,400 (a diverged or missing value counts as the
    worst); rates within TIE nats of the lowest tie, and among tied rates the one nearest REFERENCE on a log scale
    wins (a row leaves the shared rate only when another is better by more than TIE), then the smaller one."""
    if not nll:
        raise ValueError("choose: no rates")
    value = {r: (math.inf if v is None or not math.isfinite(v) else v) for r, v in nll.items()}
    best = min(value.values())
    tied = [r for r, v in value.items() if v <= best + TIE]
    return min(tied, key=lambda r: (round(abs(math.log(r / REFERENCE)), 9), r))


def plan(nll: Mapping[float, Optional[float]]) -> Choice:
    """The grid a row trains (GRID, plus one rate beyond an edge each time the chosen rate sits at that edge, at
    most MAX_EXTENSIONS a side) and its rate: ``nll`` maps each trained rate to its NLL (None: diverged)."""
    grid = sorted(GRID)
    while True:
        if any(not any(math.isclose(r, t) for t in nll) for r in grid):
            return Choice(None, "pending", tuple(grid))
        values = {r: next(v for t, v in nll.items() if math.isclose(r, t)) for r in grid}
        failed = all(v is None or not math.isfinite(v) for v in values.values())
        if failed:  # every rate diverged: go lower
            rate, down = grid[0], True
        else:
            rate = choose(values)
            down = math.isclose(rate, grid[0])
            if not down and not math.isclose(rate, grid[-1]):
                return Choice(rate, "chosen", tuple(grid))
        edge = grid[0] if down else grid[-1]
        if abs(math.log(edge / REFERENCE)) / math.log(FACTOR) >= 1 + MAX_EXTENSIONS - 1e-9:
            return Choice(None, "failed", tuple(grid)) if failed else Choice(rate, "edge", tuple(grid))
        grid = [edge / FACTOR] + grid if down else grid + [edge * FACTOR]


def folder(row: str, rate: float) -> str:
    return f"points/{row}/lr_{rate_text(rate)}"


def results(row: str, out: Optional[str] = None) -> dict[float, Optional[float]]:
    """rate -> validation NLL at step 2,400 (None: diverged) of every recorded point of ``row``."""
    base = os.path.join(out or os.path.join(REPO, OUT), "points", row)
    found = {}
    for name in sorted(os.listdir(base)) if os.path.isdir(base) else ():
        for rec in records_in(os.path.join(base, name)).values():
            found[float(name[len("lr_"):])] = rec.valid_nll
    return found


def choices(out: Optional[str] = None) -> dict[str, Choice]:
    """Every row's Choice from the committed records (under ``out``, default the study's folder)."""
    return {row: plan(results(row, out)) for row in ROWS}


def arm(row: str, rate: float) -> Arm:
    order = max(0, round(abs(math.log(rate / REFERENCE)) / math.log(FACTOR)) - 1)  # the grid, then extensions
    return Arm(f"{row}-lr_{rate_text(rate)}", CONFIG, f"row={row},lr={rate_text(rate)},steps={STEPS},seeds=1,"
               f"first_seed={LR_SEED}", order, records=folder(row, rate))


def setting(arm_name: str, rec: Record) -> str:
    row, rate = arm_name.split("-lr_")
    return f"{LABELS[row]}, lr {rate}"


def from_groups(groups) -> dict[str, dict[float, Optional[float]]]:
    """row -> rate -> validation NLL of the report's groups (label -> (arm, record)), as ``results``."""
    rows = {label: row for row, label in LABELS.items()}
    found: dict[str, dict[float, Optional[float]]] = {row: {} for row in ROWS}
    for label, members in groups.items():
        row, rate = label.rsplit(", lr ", 1)
        for _, rec in members:
            found[rows[row]][float(rate)] = rec.valid_nll
    return found


def choice_table(groups) -> Section:
    rows = []
    for row, nll in from_groups(groups).items():
        c = plan(nll)
        def cell(r: float) -> str:
            v = [x for t, x in nll.items() if math.isclose(r, t)]
            return "—" if not v else "diverged" if v[0] is None else f"{v[0]:.4f}"

        rows.append([LABELS[row], ", ".join(f"{rate_text(r)}: {cell(r)}" for r in c.grid), c.status,
                     "—" if c.rate is None else rate_text(c.rate)])
    return Section("Each row's learning rate", RULE, ["row", "validation NLL at 2,400 by rate", "status", "rate"],
                   rows, "choices.csv")


RULE = (f"The rule (`studies/specs/single_head_lr.py`, `choose` and `plan`, fixed before any of these points "
        f"trained): each row trains at {', '.join(rate_text(r) for r in GRID)} (the shared rate "
        f"{rate_text(REFERENCE)} and x{FACTOR:g} either side), 2,400 steps, seed {LR_SEED}; its rate is the one "
        f"with the lowest validation NLL at step 2,400 (a diverged point counts as the worst), rates within "
        f"{TIE} nats of the lowest tie and the tied rate nearest {rate_text(REFERENCE)} on a log scale wins, then "
        f"the smaller. A chosen rate at the grid's edge adds one rate x{FACTOR:g} beyond that edge (at most "
        f"{MAX_EXTENSIONS} a side) and the rule is applied again to the whole grid; at the cap the edge rate is "
        "used and marked \"edge\". 1 head x 24+24 takes the 8-head row's rate.")

def inside(groups) -> tuple[str, str, str]:
    """The criterion: every row's rate is chosen inside its grid (a rate at the capped edge is not shown to be the
    row's best)."""
    found = {row: plan(nll) for row, nll in from_groups({k: [(None, r) for r in v] for k, v in groups.items()}).items()}
    measured = "; ".join(f"{row} {'—' if c.rate is None else rate_text(c.rate)} ({c.status})"
                         for row, c in found.items())
    waiting = [row for row, c in found.items() if c.status == "pending"]
    if waiting:
        return measured, "pending", f"rows {waiting} wait for records"
    off = [row for row, c in found.items() if c.status != "chosen"]
    return (measured, "not met", f"rows {off} at the capped edge or without a rate") if off else (
        measured, "met", "every row's rate has a lower and a higher neighbour that trained worse (or tied)")


CRITERION = Criterion("inside", "each row's chosen rate lies inside its (extended) grid", inside,
                      Conditions("the lr arm's grid and rule", ("2,400 steps, one seed",)),
                      Registration("49cca9a1bfaf4806b8492dd0b3def44a52cb0018", "studies/specs/single_head_lr.py",
                                   "def plan("))  # the commit that added the rule, before any point trained
STUDY = Study(
    name="single_head_lr", title="Single head, settled: each row's learning rate (the lr arm)", out=OUT,
    protocol=("Protocol: the Table 3 CPU-scale model (d_model 128, pre-LN, no dropout, no QK-LayerNorm, rsqrt "
              "schedule with 100 warmup steps, batch 8 x 128 tokens) at rows h = 1, 2, 8, 32, rows (B) d_k 4 and "
              "1 head x 6+6, each at every rate of its grid for 2,400 steps, one seed, validation every 600 steps "
              f"(`{CONFIG}`). " + RULE),
    arms=tuple(arm(row, rate) for row, c in choices().items() for rate in c.grid),
    setting=setting, claims=(), criteria=(CRITERION,), metrics=("nll", "ppl", "bleu", "wall"), sections=(choice_table,),
    command="scripts/single_head.sh",
    quick=lambda a, p: math.isclose(float(a.name.split("-lr_")[1]), REFERENCE))
STUDIES = (STUDY,)
