"""Events on training curves: phase changes, transitions, divergence, learning-rate sensitivity.

Every function takes plain sequences (steps and values, ascending steps), so studies call them on records and
users on anything they logged."""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np


def phase_change_step(steps: Sequence[int], scores: Sequence[float]) -> Optional[int]:
    """The step where ``scores`` fall fastest between two consecutive measurements (None if they never fall)."""
    if len(scores) < 2:
        return None
    drops = np.diff(np.asarray(scores, np.float64))
    i = int(np.argmin(drops))
    return int(steps[i + 1]) if drops[i] < 0 else None


def transition(steps: Sequence[int], scores: Sequence[float], lo: float = 0.1,
               hi: float = 0.9) -> tuple[Optional[int], Optional[int]]:
    """First steps at which ``scores`` have covered ``lo`` and ``hi`` of their total fall from the first
    measurement to the lowest one ((None, None) if they never fall). A small gap = an abrupt change."""
    s = np.asarray(scores, np.float64)
    if len(s) < 2 or not np.all(np.isfinite(s)) or s.min() >= s[0]:
        return None, None
    fall = (s[0] - s) / (s[0] - s.min())
    return int(steps[int(np.argmax(fall >= lo))]), int(steps[int(np.argmax(fall >= hi))])


def half_final_step(steps: Sequence[int], values: Sequence[float]) -> Optional[int]:
    """The first step at which ``values`` reach half of their last value; None when the first measurement
    already does (a score that did not rise from below half of where it ended) or a value is not finite."""
    v = np.asarray(values, np.float64)
    if v.size == 0 or not np.all(np.isfinite(v)):
        return None
    i = int(np.argmax(v >= 0.5 * v[-1]))
    return int(steps[i]) if i > 0 else None


def divergence_step(steps: Sequence[int], losses: Sequence[float], spike: float) -> Optional[int]:
    """First step whose loss is non-finite or exceeds the running minimum before it by more than ``spike``
    (None when there is none)."""
    if not spike > 0:
        raise ValueError(f"divergence_step: spike={spike!r}; expected a positive number of nats")
    best = math.inf
    for s, x in zip(steps, losses):
        if not math.isfinite(x) or x > best + spike:
            return int(s)
        best = min(best, x)
    return None


def first_step_at_most(steps: Sequence[int], values: Sequence[Optional[float]],
                       threshold: float) -> Optional[int]:
    """The first step whose value is at most ``threshold`` (missing values skipped); None if none is."""
    for step, v in zip(steps, values):
        if v is not None and v <= threshold:
            return int(step)
    return None


def lr_sensitivity(losses: Sequence[float], init_loss: float) -> float:
    """Wortsman et al. (2023)'s learning-rate sensitivity over a grid: the mean of min(loss, init_loss) minus
    the best of them (non-finite losses count as ``init_loss``)."""
    capped = [min(x, init_loss) if math.isfinite(x) else init_loss for x in losses]
    if not capped:
        raise ValueError("lr_sensitivity: no losses")
    return float(np.mean(capped) - min(capped))


def degradation_lr(lrs: Sequence[float], losses: Sequence[float], nats: float) -> Optional[float]:
    """The smallest learning rate above the best one whose loss is more than ``nats`` above the best
    (non-finite counts); None when no grid point degrades. ``lrs`` ascending, one loss each."""
    if len(lrs) != len(losses) or not lrs:
        raise ValueError(f"degradation_lr: {len(lrs)} learning rates and {len(losses)} losses; expected the same, > 0")
    finite = [x if math.isfinite(x) else math.inf for x in losses]
    best = int(np.argmin(finite))
    for lr, loss in zip(lrs[best + 1:], finite[best + 1:]):
        if not math.isfinite(loss) or loss > finite[best] + nats:
            return float(lr)
    return None
