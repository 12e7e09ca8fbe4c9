"""Attention health monitor: turns classic attention failure symptoms into warnings.

Fed the per-layer, per-head attention summaries every ``train.stats_every`` steps (see ``engine.metrics``):

- entropy collapse: a head's mean entropy falls below ``collapse_ratio`` x its early entropy (the mean over
  the first ``baseline_checks`` observations) and below ``collapse_floor`` nats (Zhai et al. 2023);
- near-uniform attention: after ``uniform_after_step``, a head's entropy stays above ``uniform_ratio`` x
  log(number of visible keys) — the head attends to nothing in particular (e.g. a broken mask or scale);
- runaway logits: a head's max logit exceeds ``max_logit`` (Dehghani et al. 2023; Wortsman et al. 2023).

A warning is emitted when a head enters a bad state and again only after it has recovered and re-entered.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping

import ml_collections
import numpy as np

KINDS = ("entropy_collapse", "uniform_attention", "max_logit")


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
        }[self.kind]
        return (
            f"step {self.step}: {what} in {self.group} layer {self.layer} head {self.head} "
            f"({self.kind}: value {self.value:.4g}, threshold {self.threshold:.4g})"
        )


class HealthMonitor:
    """Stateful monitor; ``update`` returns the new warnings for one observation."""

    def __init__(self, cfg: ml_collections.ConfigDict):
        self.cfg = cfg
        self._early: dict[str, list[np.ndarray]] = {}
        self._active: set[tuple[str, str, int, int]] = set()

    def baseline(self, group: str) -> np.ndarray | None:
        """Early entropy [L, H] of ``group`` once ``baseline_checks`` observations exist."""
        seen = self._early.get(group, [])
        if len(seen) < self.cfg.baseline_checks:
            return None
        return np.mean(seen[: self.cfg.baseline_checks], axis=0)

    def update(self, step: int, summary: Mapping[str, Mapping[str, np.ndarray]]) -> list[HealthWarning]:
        """summary: group -> {"entropy", "norm_entropy", "max_logit"} each [L, H] (host numpy)."""
        c = self.cfg
        out: list[HealthWarning] = []
        for group, s in summary.items():
            entropy = np.asarray(s["entropy"], np.float64)
            early = self._early.setdefault(group, [])
            if len(early) < c.baseline_checks:
                early.append(entropy)
            base = self.baseline(group)
            flags: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
            if base is not None:
                thr = np.minimum(c.collapse_ratio * base, c.collapse_floor)
                flags["entropy_collapse"] = (entropy < thr, entropy, thr)
            if step >= c.uniform_after_step:
                ne = np.asarray(s["norm_entropy"], np.float64)
                flags["uniform_attention"] = (ne > c.uniform_ratio, ne, np.full_like(ne, c.uniform_ratio))
            ml = np.asarray(s["max_logit"], np.float64)
            flags["max_logit"] = (ml > c.max_logit, ml, np.full_like(ml, c.max_logit))
            for kind, (bad, value, thr) in flags.items():
                for layer, head in np.ndindex(bad.shape):
                    key = (kind, group, layer, head)
                    if bad[layer, head]:
                        if key not in self._active:
                            self._active.add(key)
                            out.append(
                                HealthWarning(step, kind, group, layer, head, float(value[layer, head]),
                                              float(thr[layer, head]))
                            )
                    else:
                        self._active.discard(key)
        return out

    def active_counts(self) -> dict[str, int]:
        """Heads currently in each bad state (``health/<kind>`` metrics)."""
        return {kind: sum(1 for k in self._active if k[0] == kind) for kind in KINDS}
