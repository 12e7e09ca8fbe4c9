"""Attention health monitor: warnings about whole attention layers, relative to the model's own early state.

Fed the per-layer, per-head attention summaries every ``train.stats_every`` steps (see ``engine.metrics``) and,
optionally, the logged training losses. A sharp healthy head (a cross-attention head that aligns words, an MQAR
head that retrieves one key) is not a fault; what a fault does is move a whole layer at once, or move it against
the run's own early values while the loss gets worse. The checks, each per attention group and layer:

- ``init_spread_high``: at the first check, the layer's median logit standard deviation is above
  ``init_std_high``. A 1/sqrt(d_k) scale keeps a freshly initialized model's logit spread near 1 (0.4-2.5 over
  every committed healthy run) whatever d_k is; a missing scale gives ~sqrt(d_k) times that and a 10x
  temperature 10x. Cause named ("scale missing or too large?") when every head of the layer is above it and
  the layer's attention is already sharp (mean normalized entropy below ``init_sharp``).
- ``init_spread_low``: at the first check, every layer of the group has a median logit spread below
  ``init_std_low``, or every layer of every group below ``init_std_all_low`` (a 1/d_k scale gives ~1/sqrt(d_k)
  of the usual spread everywhere; one low layer is depth, not scale: post-LN's top decoder layers start near
  0.1); cause named ("scale too small?") in the second case.
- ``logit_growth``: the layer's median logit spread is above ``growth_floor`` and ``growth_ratio`` x its early
  value (the mean over the first ``baseline_checks`` checks), has grown ``growth_rate`` x over the last
  ``growth_window`` checks, and the training loss is ``loss_rise`` nats above its lowest value so far (logits
  running away while the loss gets worse: Wortsman et al. 2023; Zhai et al. 2023). Cause named ("learning rate
  too high or logit growth?"). Without losses the loss condition is skipped and only the symptom is described.
- ``runaway_logits``: a head's max scaled logit is above ``max_logit`` (far beyond any healthy run).
- ``uniform_attention``: from the ``uniform_after_checks``-th check on, every head of the layer attends almost
  uniformly (normalized entropy above ``uniform_ratio``), in at least a ``uniform_layers`` fraction of the
  group's layers: the layers have not learned to attend. Cause named
  ("scale too small?") only when the layer's init spread was low.
- ``attention_collapse``: a layer's median logit spread has fallen below ``collapse_spread_ratio`` x its value at the
  first check while every head of it attends almost uniformly (normalized entropy above ``uniform_ratio``):
  training has flattened the layer's logits, within tens of steps and long before ``uniform_attention`` can
  look. Every calibration run that does this is a deep post-LN stack (6 to 24 layers: without warmup, or at 12+
  layers with warmup), and the same collapse, weaker, follows a 30x learning rate in translation, so that cause
  is named ("post-LN without (enough) warmup, or learning rate too high?"). One problem per group: layers that
  join a collapse already warned about do not warn again.
- ``mask_leak``: a head's normalized entropy is above ``mask_leak_ratio`` (entropy over log of the keys the mask
  lets a query see is at most 1, so above it the attention reaches keys its mask should hide). Cause named by
  where: decoder self-attention alone ("causal mask leaking?"), or any encoder or cross layer ("padding mask
  missing?").

One alert per problem: a problem is a (check, group, layer); it warns when it starts and not again until it has
cleared (its value back past ``recover_margin`` x its threshold, or the threshold / ``recover_margin`` for a lower
bound). Layers of one group that start the same problem at the same check are one warning naming the layers.
"""
from __future__ import annotations

import dataclasses
import types
from typing import Any, Iterable, Mapping, Optional, Sequence

import ml_collections
import numpy as np

KINDS = ("init_spread_high", "init_spread_low", "logit_growth", "runaway_logits", "uniform_attention",
         "attention_collapse", "mask_leak")
GROUP_KINDS = ("attention_collapse",)  # kinds that are one problem per group: later layers joining do not warn
FIELDS = ("entropy", "norm_entropy", "max_logit", "logit_std")  # the summary fields the monitor reads
CAUSES = {
    "init_spread_high": "scale missing or too large?",
    "init_spread_low": "scale too small (1/d_k?)",
    "logit_growth": "learning rate too high or logit growth?",
    "uniform_attention": "scale too small?",
    "attention_collapse": "post-LN without (enough) warmup, or learning rate too high?",
    "mask_leak": "padding mask missing?",
}
CAUSAL_LEAK = "causal mask leaking?"  # the mask_leak cause when decoder self-attention alone leaks
SYMPTOMS = {
    "init_spread_high": "attention logits spread far wider at initialization than a 1/sqrt(d_k) scale gives",
    "init_spread_low": "attention logits barely differ at initialization",
    "logit_growth": "attention logits growing fast",
    "runaway_logits": "attention logits running away",
    "uniform_attention": "attention stays near uniform",
    "attention_collapse": "training collapsed attention to uniform (logit spread far below its first check)",
    "mask_leak": "attention reaches keys its mask should hide",
}

Summary = Mapping[str, Mapping[str, np.ndarray]]


@dataclasses.dataclass(frozen=True)
class HealthWarning:
    """One problem: ``kind`` in ``group`` at ``layers``; ``heads`` of ``of_heads`` heads past ``threshold``
    (``value``: the layer statistic, the worst over ``layers``); ``cause``: the likely cause, or "" when the
    evidence does not single one out; ``evidence``: the numbers behind the warning."""
    step: int
    kind: str  # one of KINDS
    group: str  # encoder_self / decoder_self / cross / pool
    layers: tuple
    heads: int
    of_heads: int
    value: float
    threshold: float
    cause: str = ""
    evidence: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def layer(self) -> int:
        """The first layer of the problem."""
        return int(self.layers[0])

    @property
    def head(self) -> int:
        """-1: a warning is about a layer, not one head."""
        return -1

    def message(self) -> str:
        where = (f"{self.group} layer {self.layers[0]}" if len(self.layers) == 1
                 else f"{self.group} layers {', '.join(map(str, self.layers))}")
        heads = f"{'every' if self.heads == self.of_heads else f'{self.heads} of'} {self.of_heads} head(s)"
        cause = f": {self.cause}" if self.cause else ""
        return (f"step {self.step}: {SYMPTOMS[self.kind]} in {where} ({heads}; {self.kind}: value "
                f"{self.value:.4g}, threshold {self.threshold:.4g}){cause}")

    def record(self) -> dict[str, Any]:
        """The JSONL ``health_warning`` event's fields."""
        return {"kind": self.kind, "group": self.group, "layer": self.layer, "head": self.head,
                "layers": list(self.layers), "heads": self.heads, "of_heads": self.of_heads, "value": self.value,
                "threshold": self.threshold, "cause": self.cause, "evidence": dict(self.evidence),
                "message": self.message()}


class HealthMonitor:
    """Stateful monitor; ``observe_loss`` feeds logged training losses, ``update`` returns the new warnings for
    one attention summary."""

    def __init__(self, cfg: ml_collections.ConfigDict):
        self.cfg = cfg
        # A plain snapshot of the thresholds: ConfigDict attribute reads dominate an offline replay's time.
        self._c = types.SimpleNamespace(**cfg.to_dict())
        self._checks: dict[str, int] = {}  # group -> checks seen
        self._early: dict[str, list[np.ndarray]] = {}  # group -> first baseline_checks layer-median spreads [L]
        self._history: dict[str, list[np.ndarray]] = {}  # group -> recent layer-median spreads [L]
        self._init_low: dict[str, np.ndarray] = {}  # group -> [L] bool: the layer's init spread was low
        self._active: dict[tuple[str, str], np.ndarray] = {}  # (kind, group) -> [L] bool
        self._min_loss = float("inf")
        self._loss: Optional[float] = None

    def observe_loss(self, step: int, loss: float) -> None:
        """A logged training loss (call in step order, before ``update`` of the same or a later step)."""
        if loss is not None and np.isfinite(loss):
            self._loss = float(loss)
            self._min_loss = min(self._min_loss, float(loss))

    def update(self, step: int, summary: Summary) -> list[HealthWarning]:
        """summary: group -> {"entropy", "norm_entropy", "max_logit", optional "logit_std"}, each [L, H]."""
        c = self._c
        out: list[HealthWarning] = []
        # Cause of a low init spread named only when every layer of every group starts low (a scale, not depth).
        all_low = all(self._checks.get(g, 0) == 0 and "logit_std" in s
                      and bool((np.median(np.asarray(s["logit_std"]), axis=1) < c.init_std_all_low).all())
                      for g, s in summary.items())
        leaking = {g for g, s in summary.items() if float(np.max(s["norm_entropy"])) > c.mask_leak_ratio}
        for group, s in summary.items():
            n = self._checks.get(group, 0)
            self._checks[group] = n + 1
            ne = np.asarray(s["norm_entropy"], np.float64)
            L, H = ne.shape
            # kind -> (bad [L], still bad with the recovery margin [L], value [L], threshold, heads past [L],
            #          cause [L] bool, evidence)
            flags: dict[str, tuple] = {}
            if "logit_std" in s:
                std = np.asarray(s["logit_std"], np.float64)
                med = np.median(std, axis=1)
                if n == 0:
                    low_thr = c.init_std_all_low if all_low else c.init_std_low
                    high, low = std > c.init_std_high, std < low_thr
                    sharp = ne.mean(axis=1) < c.init_sharp
                    flags["init_spread_high"] = (med > c.init_std_high, med > c.init_std_high, med,
                                                 c.init_std_high, high.sum(1), high.all(1) & sharp,
                                                 {"mean_norm_entropy": ne.mean(axis=1)})
                    # A scale acts on every layer; one low layer is depth (post-LN's top layers start low).
                    group_low = np.full(L, bool((med < low_thr).all()))
                    flags["init_spread_low"] = (group_low, group_low, med, low_thr, low.sum(1),
                                                np.full(L, all_low), {})
                    self._init_low[group] = group_low & all_low
                elif self._early.get(group):  # the first check's spreads: the collapse baseline
                    first = self._early[group][0]
                    ratio = med / np.maximum(first, 1e-12)
                    uni = ne > c.uniform_ratio
                    least = ne.min(axis=1)
                    thr = c.collapse_spread_ratio
                    flags["attention_collapse"] = (
                        (ratio < thr) & uni.all(1),
                        (ratio < thr / c.recover_margin) & (least > c.uniform_ratio * c.recover_margin),
                        ratio, thr, uni.sum(1), np.ones(L, bool),
                        {"first_check_median": first, "median": med, "lowest_norm_entropy": least})
                early = self._early.setdefault(group, [])
                if len(early) < c.baseline_checks:
                    early.append(med)
                hist = self._history.setdefault(group, [])
                hist.append(med)
                del hist[: max(0, len(hist) - c.growth_window - 1)]
                if len(early) >= c.baseline_checks and len(hist) > c.growth_window:
                    base = np.mean(early, axis=0)
                    thr = np.maximum(c.growth_ratio * base, c.growth_floor)
                    rate = med / np.maximum(hist[0], 1e-9)
                    rise = self._loss - self._min_loss if self._loss is not None else None
                    loss_bad = True if rise is None else rise >= c.loss_rise
                    bad = (med > thr) & (rate >= c.growth_rate) & loss_bad
                    grown = std > thr[:, None]
                    # The problem lasts while the spread stays high and keeps growing (both within the margin).
                    still = (med > thr * c.recover_margin) & (rate >= c.growth_rate * c.recover_margin)
                    flags["logit_growth"] = (bad, still, med, thr, grown.sum(1),
                                             np.full(L, rise is not None),
                                             {"early_median": base, "growth_over_window": rate,
                                              "loss_above_min": rise})
            ml = np.asarray(s["max_logit"], np.float64)
            worst = ml.max(axis=1)
            flags["runaway_logits"] = (worst > c.max_logit, worst > c.max_logit * c.recover_margin, worst,
                                       c.max_logit, (ml > c.max_logit).sum(1), np.zeros(L, bool), {})
            if n >= c.uniform_after_checks:
                uni = ne > c.uniform_ratio
                least = ne.min(axis=1)
                layer_uni = uni.all(1)  # a group-wide symptom: one idle layer of a healthy stack is not one
                layer_uni &= layer_uni.mean() >= c.uniform_layers
                flags["uniform_attention"] = (layer_uni, least > c.uniform_ratio * c.recover_margin, least,
                                              c.uniform_ratio, uni.sum(1),
                                              self._init_low.get(group, np.zeros(L, bool)), {})
            leak = ne.max(axis=1)
            flags["mask_leak"] = (leak > c.mask_leak_ratio, leak > 1.0, leak, c.mask_leak_ratio,
                                  (ne > c.mask_leak_ratio).sum(1), np.ones(L, bool), {})
            causes = dict(CAUSES, mask_leak=CAUSAL_LEAK if leaking == {"decoder_self"} else CAUSES["mask_leak"])
            for kind, (bad, still, value, thr, count, cause, evidence) in flags.items():
                was = self._active.get((kind, group))
                if was is None or was.shape != bad.shape:
                    was = np.zeros_like(bad)
                new = bad & ~was
                if kind in GROUP_KINDS and was.any():
                    new = np.zeros_like(bad)
                self._active[(kind, group)] = bad | (was & still)
                if not new.any():
                    continue
                layers = [int(i) for i in np.flatnonzero(new)]
                thr_l = np.broadcast_to(np.asarray(thr, np.float64), value.shape)
                pick = max(layers, key=lambda i: abs(value[i] - thr_l[i]))
                named = all(bool(cause[i]) for i in layers)
                ev = {"layer_values": {str(i): round(float(value[i]), 5) for i in layers}}
                for k, v in evidence.items():
                    if v is not None:
                        ev[k] = ({str(i): round(float(np.asarray(v)[i]), 5) for i in layers}
                                 if np.ndim(v) else round(float(v), 5))
                out.append(HealthWarning(step, kind, group, tuple(layers), int(max(count[i] for i in layers)), H,
                                         float(value[pick]), float(thr_l[pick]), causes.get(kind, "") if named
                                         else "", ev))
        return out

    def active_counts(self) -> dict[str, int]:
        """Layers currently in each bad state (``health/<kind>`` metrics)."""
        counts = dict.fromkeys(KINDS, 0)
        for (kind, _), bad in self._active.items():
            counts[kind] += int(bad.sum())
        return counts


def replay(observations: Iterable[tuple[int, Summary]], cfg: ml_collections.ConfigDict,
           skip_groups: Iterable[str] = (), losses: Sequence[tuple[int, float]] = ()) -> list[HealthWarning]:
    """The warnings a fresh monitor with thresholds ``cfg`` gives over a run's logged attention summaries
    (``(step, group -> field -> [L, H])`` in step order) and logged training losses (``(step, loss)``, each fed
    before the first summary at or after its step, as the training hook feeds them), leaving out
    ``skip_groups`` as the training hook leaves out groups frozen to uniform attention."""
    monitor = HealthMonitor(cfg)
    skip = frozenset(skip_groups)
    pending = sorted(losses, key=lambda x: x[0])
    i = 0
    out: list[HealthWarning] = []
    for step, summary in observations:
        while i < len(pending) and pending[i][0] <= step:
            monitor.observe_loss(*pending[i])
            i += 1
        out.extend(monitor.update(step, {g: v for g, v in summary.items() if g not in skip}))
    return out
