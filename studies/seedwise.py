"""Claims on per-seed measurements that are not a record's metric (head-importance counts, explanation scores,
induction knockouts): each compares the mean over seeds with a threshold, or two groups of seeds, with a t
interval, Holm within its family, and the verdict kinds of ``studies.claims``.

A ``SeedClaim`` declares the claim, the paper it tests, the threshold (or the paper's value of a contrast), the
side the paper predicts, the minimum seeds and the family; ``judge_all`` gives one ``SeedVerdict`` each from
``{claim id: (values, reference values or None)}``:

- one-sample (``reference`` None): ``reproduced`` when the interval of mean - threshold lies on the paper's side
  (Holm-adjusted p < ALPHA), ``contradicted`` when it lies on the other side, else ``unresolved``;
- two-sample (values vs reference, Welch): ``studies.claims.judge`` against the paper's value and margin.

A separate addition beside the core (``studies.claims`` handles contrasts of records' metrics).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Optional, Sequence

import numpy as np
from scipy import stats as scipy_stats

from studies import stats as stats_lib
from studies.claims import ALPHA, CONTRADICTED, REPRODUCED, UNRESOLVED, holm_by_family, judge

BELOW, ABOVE = "below", "above"
VERDICT_COLUMNS = ["claim", "paper", "measured", "verdict", "verdict before Holm", "p", "p (Holm)", "criterion",
                   "registration"]


@dataclasses.dataclass(frozen=True)
class SeedClaim:
    """One claim on a per-seed measurement. One-sample: the paper predicts the mean lies ``side`` of
    ``threshold``. Two-sample (``paper`` set): the paper's value of mean(values) - mean(reference), with
    ``margin`` as the equivalence margin. ``registration``: where and when the criterion was written (printed)."""

    id: str
    text: str
    paper_text: str
    measure: str  # what the values are, with units
    family: str
    registration: str
    threshold: Optional[float] = None
    side: str = BELOW
    paper: Optional[float] = None
    margin: float = 0.0
    min_seeds: int = 3
    digits: int = 3

    def __post_init__(self):
        if (self.threshold is None) == (self.paper is None):
            raise ValueError(f"claim {self.id}: set exactly one of threshold (one-sample) and paper (two-sample)")
        if self.side not in (BELOW, ABOVE):
            raise ValueError(f"claim {self.id}: side={self.side!r}; expected {BELOW!r} or {ABOVE!r}")
        if self.min_seeds < 2:
            raise ValueError(f"claim {self.id}: min_seeds={self.min_seeds}; an interval needs >= 2")

    def criterion(self) -> str:
        if self.threshold is not None:
            return (f"mean over seeds {self.side} {self.threshold:g}: the 95% t interval of mean - {self.threshold:g} "
                    f"on that side (Holm-adjusted p < {ALPHA:g}); >= {self.min_seeds} seeds")
        return (f"Welch interval of the difference against the paper's {self.paper:+g} (margin {self.margin:g}), "
                f"Holm within the family; >= {self.min_seeds} seeds a side")


@dataclasses.dataclass(frozen=True)
class SeedVerdict:
    claim: SeedClaim
    values: tuple[float, ...]
    interval: Optional[stats_lib.Interval]
    p_adjusted: Optional[float]
    kind_raw: str
    kind: str

    @property
    def changed(self) -> bool:
        return self.kind != self.kind_raw

    def measured(self) -> str:
        c, d = self.claim, self.claim.digits
        per_seed = ", ".join(f"{v:.{d}f}" for v in self.values)
        if self.interval is None:
            return f"{c.measure}: {per_seed or 'none'} (fewer than {c.min_seeds} seeds)"
        if c.threshold is not None:
            mean, lo, hi = self.interval.diff + c.threshold, self.interval.lo + c.threshold, \
                self.interval.hi + c.threshold
            return f"{c.measure}: mean {mean:.{d}f} [{lo:.{d}f}, {hi:.{d}f}] (per seed {per_seed})"
        return f"{c.measure}: difference {self.interval.text(d)} (per seed {per_seed})"

    def row(self) -> list:
        c = self.claim
        p = None if self.interval is None else self.interval.p
        return [c.text, c.paper_text, self.measured(), self.kind, self.kind_raw, p, self.p_adjusted, c.criterion(),
                c.registration]


def one_sample(values: Sequence[float], reference: float) -> stats_lib.Interval:
    """mean(values) - reference with its 95% t interval and two-sided p (zero spread: a point interval, p 0 or 1)."""
    v = np.asarray(values, np.float64)
    if v.size < 2 or not np.all(np.isfinite(v)):
        raise ValueError(f"one_sample: expected >= 2 finite values; got {list(values)!r}")
    diff, se = float(v.mean() - reference), float(v.std(ddof=1) / math.sqrt(v.size))
    if se == 0:
        return stats_lib.Interval(diff, diff, diff, v.size, 0, "t (no spread)", p=0.0 if diff != 0 else 1.0)
    t = scipy_stats.t.ppf(0.975, v.size - 1)
    p = float(2 * scipy_stats.t.sf(abs(diff / se), v.size - 1))
    return stats_lib.Interval(diff, diff - t * se, diff + t * se, v.size, 0, "t", p=p)


def _one_sample_kind(interval: stats_lib.Interval, p: Optional[float], side: str) -> str:
    if p is None or p >= ALPHA:
        return UNRESOLVED
    on_paper_side = interval.diff < 0 if side == BELOW else interval.diff > 0
    return REPRODUCED if on_paper_side else CONTRADICTED


def judge_all(claims: Sequence[SeedClaim],
              measured: Mapping[str, tuple[Sequence[float], Optional[Sequence[float]]]]) -> list[SeedVerdict]:
    """The verdict of every claim from ``measured`` ({claim id: (values, reference values or None)}), Holm within
    each family."""
    ids = [c.id for c in claims]
    if len(set(ids)) != len(ids) or set(ids) != set(measured):
        raise ValueError(f"judge_all: claims {ids} and measurements {sorted(measured)}; expected the same ids once")
    found = []
    for c in claims:
        values, reference = measured[c.id]
        values = [float(x) for x in values if x is not None and math.isfinite(x)]
        interval = None
        if c.threshold is not None and len(values) >= c.min_seeds:
            interval = one_sample(values, c.threshold)
        elif c.paper is not None and len(values) >= c.min_seeds and len(reference or []) >= c.min_seeds:
            interval = stats_lib.welch_ci(values, reference)
        found.append((c, tuple(values), interval))
    adjusted = holm_by_family([(c, i) for c, _, i in found])
    out = []
    for c, values, interval in found:
        p = None if interval is None else interval.p
        if c.threshold is not None:
            raw = UNRESOLVED if interval is None else _one_sample_kind(interval, p, c.side)
            kind = UNRESOLVED if interval is None else _one_sample_kind(interval, adjusted[c.id], c.side)
        else:
            raw, _ = judge(interval, p, c.paper, c.margin)
            kind, _ = judge(interval, adjusted[c.id], c.paper, c.margin)
        out.append(SeedVerdict(c, values, interval, adjusted[c.id], raw, kind))
    return out


def verdict_rows(verdicts: Sequence[SeedVerdict]) -> list[list]:
    """The rows of a study's verdicts.csv (``VERDICT_COLUMNS``)."""
    return [v.row() for v in verdicts]


def counts(verdicts: Sequence[SeedVerdict]) -> str:
    """'3 reproduced, 2 unresolved': the verdict kinds of ``verdicts``, most frequent first."""
    n: dict[str, int] = {}
    for v in verdicts:
        n[v.kind] = n.get(v.kind, 0) + 1
    return ", ".join(f"{c} {k}" for k, c in sorted(n.items(), key=lambda kv: -kv[1]))
