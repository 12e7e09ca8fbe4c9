"""Attention health monitor: turns classic attention failure symptoms into warnings.

Fed the per-layer, per-head attention summaries every ``train.stats_every`` steps (see ``engine.metrics``):

- entropy collapse: a head's mean entropy falls below ``collapse_ratio`` x its early entropy (the mean over
  the first ``baseline_checks`` observations) and below ``collapse_floor`` nats (Zhai et al. 2023);
- near-uniform attention: after ``uniform_after_step``, a head's entropy stays above ``uniform_ratio`` x
  log(number of visible keys) — the head attends to nothing in particular (e.g. a broken mask or scale);
- runaway logits: a head's max logit exceeds ``max_logit`` (Dehghani et al. 2023; Wortsman et al. 2023);
- logit spread too high (a missing or broken 1/sqrt(d_k) scale, or logit growth): a head's logit standard
  deviation exceeds ``logit_std_high``, or ``logit_std_ratio`` x its early value once that is above
  ``logit_std_floor`` — whichever is lower;
- logit spread too low (queries cannot tell keys apart): after ``uniform_after_step``, the std stays below
  ``logit_std_low``.

A warning is emitted when a head enters a bad state and again only after it has recovered and re-entered. A head
recovers once its value is back within the threshold, or with ``recover_margin`` m < 1 only once it is past
m x the threshold (upper bounds) or the threshold / m (lower bounds), so a head hovering at a threshold does not
warn at every other check.
"""
from __future__ import annotations

import dataclasses
import types
from typing import Iterable, Mapping

import ml_collections
import numpy as np

KINDS = ("entropy_collapse", "uniform_attention", "max_logit", "logit_spread_high", "logit_spread_low")
FIELDS = ("entropy", "norm_entropy", "max_logit", "logit_std")  # the summary fields the monitor reads


@dataclasses.dataclass(frozen=True)
class HealthWarning:
    step: int
    kind: str  # one of KINDS
    group: str  # encoder_self / decoder_self / cross
    layer: int
    head: int
    value: float
    threshold: float

    def message(self) -> str:
        what = {
            "entropy_collapse": "attention entropy collapsed",
            "uniform_attention": "attention is near uniform",
            "max_logit": "attention logits are running away",
            "logit_spread_high": "attention logits spread far too wide (scale missing or logit growth)",
            "logit_spread_low": "attention logits barely differ between keys (queries cannot tell keys apart)",
        }[self.kind]
        return (
            f"step {self.step}: {what} in {self.group} layer {self.layer} head {self.head} "
            f"({self.kind}: value {self.value:.4g}, threshold {self.threshold:.4g})"
        )


class HealthMonitor:
    """Stateful monitor; ``update`` returns the new warnings for one observation."""

    def __init__(self, cfg: ml_collections.ConfigDict):
        self.cfg = cfg
        # A plain snapshot of the thresholds: ConfigDict attribute reads dominate an offline replay's time.
        self._c = types.SimpleNamespace(**{"recover_margin": 1.0, **cfg.to_dict()})
        self._early: dict[str, list[np.ndarray]] = {}
        self._early_std: dict[str, list[np.ndarray]] = {}
        self._means: dict[tuple[int, str], np.ndarray] = {}  # (id of the early dict, group) -> its baseline
        self._active: dict[tuple[str, str], np.ndarray] = {}  # (kind, group) -> [L, H] heads in that bad state

    def baseline(self, group: str, early: dict[str, list[np.ndarray]] | None = None) -> np.ndarray | None:
        """Early value [L, H] of ``group`` (entropy by default) once ``baseline_checks`` observations exist."""
        early = self._early if early is None else early
        key = (id(early), group)
        if key not in self._means:
            seen = early.get(group, [])
            if len(seen) < self._c.baseline_checks:
                return None
            self._means[key] = np.mean(seen[: self._c.baseline_checks], axis=0)
        return self._means[key]

    def _observe(self, early: dict[str, list[np.ndarray]], group: str, value: np.ndarray) -> np.ndarray | None:
        seen = early.setdefault(group, [])
        if len(seen) < self._c.baseline_checks:
            seen.append(value)
        return self.baseline(group, early)

    def update(self, step: int, summary: Mapping[str, Mapping[str, np.ndarray]]) -> list[HealthWarning]:
        """summary: group -> {"entropy", "norm_entropy", "max_logit", optional "logit_std"} each [L, H] (host
        numpy)."""
        c = self._c
        out: list[HealthWarning] = []
        for group, s in summary.items():
            entropy = np.asarray(s["entropy"], np.float64)
            base = self._observe(self._early, group, entropy)
            # kind -> (value, threshold, True: bad above the threshold / False: bad below it), each [L, H]
            flags: dict[str, tuple[np.ndarray, np.ndarray, bool]] = {}
            if "logit_std" in s:
                std = np.asarray(s["logit_std"], np.float64)
                early_std = self._observe(self._early_std, group, std)
                thr = np.full_like(std, c.logit_std_high)
                if early_std is not None:
                    thr = np.minimum(thr, np.maximum(c.logit_std_ratio * early_std, c.logit_std_floor))
                flags["logit_spread_high"] = (std, thr, True)
                if step >= c.uniform_after_step:
                    flags["logit_spread_low"] = (std, np.full_like(std, c.logit_std_low), False)
            if base is not None:
                flags["entropy_collapse"] = (entropy, np.minimum(c.collapse_ratio * base, c.collapse_floor), False)
            if step >= c.uniform_after_step:
                ne = np.asarray(s["norm_entropy"], np.float64)
                flags["uniform_attention"] = (ne, np.full_like(ne, c.uniform_ratio), True)
            ml = np.asarray(s["max_logit"], np.float64)
            flags["max_logit"] = (ml, np.full_like(ml, c.max_logit), True)
            margin = float(c.recover_margin)
            for kind, (value, thr, above) in flags.items():
                bad = value > thr if above else value < thr
                still = value > thr * margin if above else value < thr / margin
                was = self._active.get((kind, group))
                if was is None or was.shape != bad.shape:
                    was = np.zeros_like(bad)
                new = bad & ~was
                for layer, head in np.argwhere(new) if new.any() else ():
                    out.append(HealthWarning(step, kind, group, int(layer), int(head), float(value[layer, head]),
                                             float(thr[layer, head])))
                self._active[(kind, group)] = bad | (was & still)
        return out

    def active_counts(self) -> dict[str, int]:
        """Heads currently in each bad state (``health/<kind>`` metrics)."""
        counts = dict.fromkeys(KINDS, 0)
        for (kind, _), bad in self._active.items():
            counts[kind] += int(bad.sum())
        return counts


Summary = Mapping[str, Mapping[str, np.ndarray]]


def replay(observations: Iterable[tuple[int, Summary]], cfg: ml_collections.ConfigDict,
           skip_groups: Iterable[str] = ()) -> list[HealthWarning]:
    """The warnings a fresh monitor with thresholds ``cfg`` gives over a run's logged attention summaries
    (``(step, group -> field -> [L, H])`` in step order), leaving out ``skip_groups`` as the training hook
    leaves out groups frozen to uniform attention. This is what the run's monitor said, for a resumed run too
    (the training hook rebuilds its monitor from the logged summaries at a resume; runs resumed before
    2026-12-05 restarted their early baselines at the resume instead)."""
    monitor = HealthMonitor(cfg)
    skip = frozenset(skip_groups)
    out: list[HealthWarning] = []
    for step, summary in observations:
        out.extend(monitor.update(step, {g: v for g, v in summary.items() if g not in skip}))
    return out
