"""Claims fixed before the data, and their verdicts with magnitude and a family-wise correction.

A ``Claim`` names its contrast (groups of points ``a`` against ``b``, their labels resolved by the study), the
metric (validation NLL first, Welch over seeds), the paper's value of ``a - b`` where there is one, an equivalence
margin, the minimum seeds a side, the family it is corrected within, the conditions it holds under, and where its
criterion was first committed (``Registration``; None: written after its data, post-hoc).

``evaluate(claims, groups)`` gives one ``Verdict`` per claim: Welch's interval and p, Holm's adjusted p within the
claim's family, the verdict before and after the correction, the ratio to the paper's value where only the
direction holds, the budget its records trained for, and whether it was pre-registered. The verdict kinds:

- ``reproduced``: the interval excludes 0 with the paper's sign and reaches the paper's value (within the margin);
  for a "no worse" claim (paper 0 with a ``sign``), the interval stays within the margin on the worse side;
- ``direction only``: the paper's sign, another size: the ratio measured / paper with its interval is printed;
- ``no effect``: the interval lies inside +- margin (when the paper has no effect, that agrees with it);
- ``contradicted``: the interval excludes 0 with the other sign (or any sign where the paper has no effect);
- ``differs from 0``: a contrast without a paper value whose interval excludes 0;
- ``unresolved``: none of these (the interval holds 0 and reaches past the margin), or fewer seeds than needed.

"Excludes 0" is decided by the p-value against ``ALPHA``: raw for the verdict before correction, Holm-adjusted
for the verdict reported.
"""
from __future__ import annotations

import collections
import dataclasses
import datetime
import subprocess
from typing import Callable, Mapping, Optional, Sequence

from studies import stats as stats_lib
from studies.records import Record, values
from studies.report import REPO

ALPHA = 0.05
REPRODUCED, DIRECTION, NO_EFFECT, CONTRADICTED, DIFFERS, UNRESOLVED = (
    "reproduced", "direction only", "no effect", "contradicted", "differs from 0", "unresolved")
KINDS = (REPRODUCED, DIRECTION, NO_EFFECT, CONTRADICTED, DIFFERS, UNRESOLVED)


@dataclasses.dataclass(frozen=True)
class Conditions:
    """What a verdict holds under, printed with it: the learning rate's provenance and the differences from the
    paper's setup (normalization, dropout, data, scale). The budget (steps, epochs) is read from the records."""

    lr: str
    differences: tuple[str, ...] = ()

    def text(self, budget: str) -> str:
        return "; ".join([budget, f"learning rate {self.lr}", *self.differences])


@dataclasses.dataclass(frozen=True)
class Registration:
    """Where a claim's criterion was first committed: ``marker`` is a string that ``path`` held at ``commit``
    (the test reads it back from git history)."""

    commit: str
    path: str
    marker: str


@dataclasses.dataclass(frozen=True)
class Claim:
    """One pre-declared contrast. ``paper``: the paper's value of mean(a) - mean(b) in the metric's units (0 when
    the paper found no effect; None when it has no such row). ``margin``: differences within +- margin count as
    no effect, and an interval within the margin of the paper's value reaches it."""

    id: str
    text: str
    a: tuple[str, ...]
    b: tuple[str, ...]
    family: str
    conditions: Conditions
    paper: Optional[float] = None
    sign: int = 0  # paper None: the direction the paper reports without a value (+1 / -1); paper 0: the paper says
    # a - b is no worse than 0 in this direction (non-inferiority: -1 "not higher", +1 "not lower")
    margin: float = 0.01
    metric: str = "nll"
    min_seeds: int = 3
    registered: Optional[Registration] = None

    def __post_init__(self):
        if self.margin < 0:
            raise ValueError(f"claim {self.id}: margin={self.margin}; expected >= 0")
        if self.sign not in (-1, 0, 1) or (self.sign and self.paper not in (None, 0.0)):
            raise ValueError(f"claim {self.id}: sign={self.sign}; expected -1, 0 or 1, and only with paper None or 0")
        if self.min_seeds < 2:
            raise ValueError(f"claim {self.id}: min_seeds={self.min_seeds}; Welch's interval needs >= 2")

    def sides(self, groups: Mapping[str, Sequence[Record]]) -> tuple[list[Record], list[Record]]:
        """The records of side a and side b: the members of the claim's groups, in ``groups`` (label -> records)."""
        missing = [g for g in self.a + self.b if g not in groups]
        if missing:
            raise ValueError(f"claim {self.id}: groups {missing} are not the study's; "
                             f"expected some of {sorted(groups)}")
        return [r for g in self.a for r in groups[g]], [r for g in self.b for r in groups[g]]

    def has_seeds(self, a: Sequence[Record], b: Sequence[Record]) -> bool:
        """Whether both sides have ``min_seeds`` records with the claim's metric (else the claim has no interval)."""
        return min(len(values(a, self.metric)), len(values(b, self.metric))) >= self.min_seeds


@dataclasses.dataclass(frozen=True)
class Criterion:
    """A pre-declared rule without a test statistic (e.g. "every cell reaches accuracy 0.95"): ``rule`` maps the
    study's groups (label -> records) to (measured, verdict, reason). No family-wise correction applies."""

    id: str
    text: str
    rule: Callable[[Mapping[str, Sequence[Record]]], tuple[str, str, str]]
    conditions: Conditions
    registered: Optional[Registration] = None


@dataclasses.dataclass(frozen=True)
class Verdict:
    claim: Claim
    interval: Optional[stats_lib.Interval]  # Welch, a - b
    p_adjusted: Optional[float]  # Holm within the claim's family
    kind_raw: str  # before the correction
    kind: str  # after it
    ratio: Optional[tuple[float, float, float]]  # measured / paper (estimate, lo, hi) for "direction only"
    budget: str
    registration: str  # "pre-registered (...)" or "post-hoc (...)"
    counts: tuple[int, int] = (0, 0)  # records with the metric, a side and b side (the interval needs min_seeds each)
    family_size: tuple[int, int] = (1, 0)  # claims in the family Holm ran over, and how many of them had no p (p = 1)
    machines: str = ""  # "" when the records name one machine, else how many of each side trained on which

    @property
    def changed(self) -> bool:
        return self.kind != self.kind_raw

    @property
    def conditions(self) -> str:
        return self.claim.conditions.text("; ".join(x for x in (self.budget, self.machines) if x))

    def measured(self) -> str:
        """``+0.099 [+0.065, +0.133]``: 3 decimals, 1 for metrics measured in larger units (margin >= 1)."""
        return "—" if self.interval is None else self.interval.text(3 if self.claim.margin < 1 else 1)

    def reading(self) -> str:
        """The verdict with its magnitude: ``direction only (x5.5 [3.6, 7.4] the paper's)``."""
        if self.ratio is not None:
            est, lo, hi = self.ratio
            return f"{self.kind} ({est:.1f}x [{lo:.1f}, {hi:.1f}] the paper's)"
        return self.kind


def judge(interval: Optional[stats_lib.Interval], p: Optional[float], paper: Optional[float], margin: float,
          sign: int = 0) -> tuple[str, Optional[tuple[float, float, float]]]:
    """The verdict kind of ``interval`` (a - b) whose zero test gave ``p``, against the paper's value (or, without
    one, the paper's direction ``sign``) and the equivalence margin; with the ratio to the paper's value for
    ``direction only``."""
    if interval is None or interval.lo is None or interval.hi is None or p is None:
        return UNRESOLVED, None
    lo, hi = interval.lo, interval.hi
    significant = p < ALPHA
    inside = -margin <= lo and hi <= margin
    if paper is None:
        if not significant:
            return (NO_EFFECT if inside else UNRESOLVED), None
        if sign == 0:
            return DIFFERS, None
        return (REPRODUCED if (interval.diff > 0) == (sign > 0) else CONTRADICTED), None
    if paper == 0 and sign:  # non-inferiority: a - b is not beyond the margin against ``sign``
        if (interval.hi <= margin) if sign < 0 else (interval.lo >= -margin):
            return REPRODUCED, None
        against = interval.diff > 0 if sign < 0 else interval.diff < 0
        return (CONTRADICTED if significant and against else UNRESOLVED), None
    if abs(paper) <= margin:  # the paper found no effect
        return (CONTRADICTED if significant else NO_EFFECT if inside else UNRESOLVED), None
    if not significant:
        return (NO_EFFECT if inside else UNRESOLVED), None
    if (interval.diff > 0) != (paper > 0):
        return CONTRADICTED, None
    if lo - margin <= paper <= hi + margin:
        return REPRODUCED, None
    a, b = lo / paper, hi / paper
    return DIRECTION, (interval.diff / paper, min(a, b), max(a, b))


def budget_text(records: Sequence[Record]) -> str:
    """``2400 steps (2.5 epochs)``: the training budget of ``records`` (every distinct one)."""
    budgets = sorted({(r.steps, None if r.epochs is None else round(r.epochs, 1)) for r in records})
    if not budgets:
        return "no records"
    return " / ".join(f"{s} steps" + (f" ({e:g} epochs)" if e is not None else "") for s, e in budgets)


def machines_text(a: Sequence[Record], b: Sequence[Record]) -> str:
    """"" when the records that name their machine name one; else how many of each side trained on which:
    ``records from 2 machines: a side 2 on vm (AMD EPYC) and 1 on vm (AMD EPYC, family 26 ...), b side 3 on vm
    (AMD EPYC, family 26 ...)`` (a machine effect would then be part of the contrast; records that name no machine
    are counted apart)."""
    known = {r.machine_cpu for r in list(a) + list(b)} - {None}
    if len(known) < 2:
        return ""

    def side(name: str, records: Sequence[Record]) -> str:
        counts = collections.Counter(r.machine_cpu or "a machine not recorded" for r in records)
        return f"{name} side " + " and ".join(f"{n} on {m}" for m, n in sorted(counts.items())) if records else ""

    return f"records from {len(known)} machines: " + ", ".join(x for x in (side("a", a), side("b", b)) if x)


def holm_by_family(tested: Sequence[tuple]) -> dict[str, Optional[float]]:
    """Holm-adjusted p-value of each claim id, within its family: ``tested`` is (claim with ``id`` and ``family``,
    interval with ``p`` or None when untested) pairs; an untested claim gets None. The family is the one declared:
    an untested member counts as p = 1, so the correction runs over every claim of the family and a verdict read
    while some members still lack data can only strengthen when their p-values arrive (Holm's adjusted p-values
    never rise when an input falls)."""
    adjusted: dict[str, Optional[float]] = {}
    for family in dict.fromkeys(c.family for c, _ in tested):
        members = [(c, None if i is None else i.p) for c, i in tested if c.family == family]
        for (c, p), q in zip(members, stats_lib.holm([1.0 if p is None else p for _, p in members])):
            adjusted[c.id] = None if p is None else q
    return adjusted


def evaluate(claims: Sequence[Claim], groups: Mapping[str, Sequence[Record]]) -> list[Verdict]:
    """The verdict of every claim over ``groups`` (label -> records), Holm-corrected within each family."""
    ids = [c.id for c in claims]
    if len(set(ids)) != len(ids):
        raise ValueError(f"claims: duplicate ids {sorted({i for i in ids if ids.count(i) > 1})}")
    found = []
    for c in claims:
        a, b = c.sides(groups)
        va, vb = values(a, c.metric), values(b, c.metric)
        found.append((c, a, b, stats_lib.welch_ci(va, vb) if c.has_seeds(a, b) else None, (len(va), len(vb))))
    adjusted = holm_by_family([(c, i) for c, _, _, i, _ in found])
    members = collections.Counter(c.family for c, *_ in found)
    untested = collections.Counter(c.family for c, *_ in found if adjusted[c.id] is None)  # Holm's p = 1
    out = []
    for c, a, b, interval, counts in found:
        raw_kind, _ = judge(interval, None if interval is None else interval.p, c.paper, c.margin, c.sign)
        kind, ratio = judge(interval, adjusted[c.id], c.paper, c.margin, c.sign)
        out.append(Verdict(c, interval, adjusted[c.id], raw_kind, kind, ratio, budget_text(a + b),
                           registration(c, a + b), counts, (members[c.family], untested[c.family]),
                           machines_text(a, b)))
    return out


def judge_criteria(criteria: Sequence[Criterion], groups: Mapping[str, Sequence[Record]]) -> list[list[str]]:
    """One row per criterion: id, claim, measured, verdict, reason, conditions, registration."""
    rows = []
    for c in criteria:
        measured, verdict, reason = c.rule(groups)
        records = [r for rs in groups.values() for r in rs]
        rows.append([c.id, c.text, measured, verdict, reason, c.conditions.text(budget_text(records)),
                     registration(c, records)])
    return rows


# ------------------------------------------------------------------------------------------ pre-registration
def _git(*args: str) -> Optional[str]:
    try:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def commit_time(commit: str) -> Optional[datetime.datetime]:
    """The commit's committer time (UTC), None when git or the commit is not available."""
    out = _git("show", "-s", "--format=%ct", commit)
    if not out or not out.strip():
        return None
    return datetime.datetime.fromtimestamp(int(out.strip()), datetime.timezone.utc)


def first_start(records: Sequence[Record]) -> Optional[str]:
    """The earliest training start of ``records`` ("YYYY-MM-DD HH:MM:SS" UTC), None when none is recorded."""
    starts = [r.first_logged_utc for r in records if r.first_logged_utc]
    return min(starts) if starts else None


def registered_before(reg: Registration, records: Sequence[Record]) -> Optional[bool]:
    """True when ``reg.path`` held ``reg.marker`` at ``reg.commit`` and that commit precedes the start of every
    record (with no record: when the commit is an ancestor of this checkout); False when it does not; None when
    git history is not available (no checkout) or a record carries no start time."""
    when = commit_time(reg.commit)
    text = _git("show", f"{reg.commit}:{reg.path}")
    if when is None or text is None:
        return None
    if reg.marker not in text:
        return False
    if not records:
        return _git("merge-base", "--is-ancestor", reg.commit, "HEAD") is not None
    first = first_start(records)
    return None if first is None else when.strftime("%Y-%m-%d %H:%M:%S") < first


def registration(claim: "Claim | Criterion", records: Sequence[Record]) -> str:
    """``pre-registered (<commit>, <time>)`` when the claim's criterion was committed before every record it
    reads (``pre-registered (registered at <commit>, no record yet)`` before its first record); else ``post-hoc``
    with why."""
    reg = claim.registered
    if reg is None:
        return "post-hoc (written after its records)"
    ok = registered_before(reg, records)
    when = commit_time(reg.commit)
    at = f"{reg.commit[:7]}, {when:%Y-%m-%d %H:%M} UTC" if when else reg.commit[:7]
    if ok is None:
        why = "git history not available" if when is None else "its records carry no start time"
        return f"registered at {at} ({why}: pre-registration not checked)"
    if not records:
        return (f"pre-registered (registered at {reg.commit[:7]}, no record yet)" if ok else
                f"post-hoc (no record yet; {reg.path} at {reg.commit[:7]} does not hold its criterion, or that "
                "commit is not an ancestor of this checkout)")
    if ok:
        return f"pre-registered ({at})"
    stamp = when.strftime("%Y-%m-%d %H:%M:%S")
    before = sum(1 for r in records if r.first_logged_utc and r.first_logged_utc < stamp)
    return (f"post-hoc (criterion committed {at}; {before} of the {len(records)} records it reads started "
            f"before, the first {first_start(records)[:16]} UTC)")
