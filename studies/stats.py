"""Statistics for the sweep reports: differences of means with confidence intervals over seeds, and paired
bootstrap of corpus BLEU over test sentences from sacreBLEU's per-sentence sufficient statistics.

- ``welch_ci(a, b)``: mean(a) - mean(b) with Welch's t interval (unequal variances).
- ``bootstrap_ci(a, b)``: the same difference with a percentile interval, resampling seeds within each group.
- ``sentence_stats(hyps, refs)``: per sentence ``[m1, m2, m3, m4, t1, t2, t3, t4, hyp_len, ref_len]``
  (n-gram matches, n-gram totals, tokenized lengths) exactly as sacreBLEU's corpus BLEU sums them.
- ``corpus_bleu(stats)``: sacreBLEU's corpus BLEU from summed statistics (default settings).
- ``paired_bootstrap_bleu(stats_a, stats_b)``: BLEU(a) - BLEU(b) with a percentile interval and a p-value,
  resampling test sentences with the same indices for both systems (Koehn 2004).
- ``holm(p_values)``: Holm's step-down adjusted p-values within a family of claims.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import numpy as np

STAT_FIELDS = ("m1", "m2", "m3", "m4", "t1", "t2", "t3", "t4", "hyp_len", "ref_len")


@dataclasses.dataclass(frozen=True)
class Interval:
    """A difference (a - b) with a two-sided confidence interval; ``lo``/``hi`` are None when undefined."""

    diff: float
    lo: Optional[float]
    hi: Optional[float]
    n_a: int
    n_b: int
    method: str
    p: Optional[float] = None  # two-sided p-value where the method gives one

    def excludes_zero(self) -> bool:
        return self.lo is not None and self.hi is not None and (self.lo > 0 or self.hi < 0)

    def text(self, digits: int = 3) -> str:
        """'+0.073 [+0.010, +0.136]' (or '+0.073 [n/a]' when the interval is undefined)."""
        d = f"{self.diff:+.{digits}f}"
        if self.lo is None or self.hi is None:
            return f"{d} [n/a]"
        return f"{d} [{self.lo:+.{digits}f}, {self.hi:+.{digits}f}]"


def _finite(values: Sequence[float], name: str) -> np.ndarray:
    v = np.asarray([x for x in values if x is not None], dtype=np.float64)
    if v.ndim != 1 or not np.all(np.isfinite(v)):
        raise ValueError(f"{name}: expected a list of finite numbers; got {list(values)!r}")
    if v.size == 0:
        raise ValueError(f"{name}: expected at least one value; got none")
    return v


def welch_ci(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> Interval:
    """mean(a) - mean(b) with Welch's t interval; lo/hi None unless both groups have >= 2 values.

    Standard error sqrt(s_a^2/n_a + s_b^2/n_b) (sample variances), Welch-Satterthwaite degrees of freedom.
    Two groups with zero variance give a zero-width interval at the difference.
    """
    from scipy import stats as sps

    va, vb = _finite(a, "welch_ci a"), _finite(b, "welch_ci b")
    diff = float(va.mean() - vb.mean())
    if va.size < 2 or vb.size < 2:
        return Interval(diff, None, None, va.size, vb.size, "welch")
    qa, qb = va.var(ddof=1) / va.size, vb.var(ddof=1) / vb.size
    se = math.sqrt(qa + qb)
    if se == 0.0:
        return Interval(diff, diff, diff, va.size, vb.size, "welch", 1.0 if diff == 0 else 0.0)
    df = (qa + qb) ** 2 / (qa ** 2 / (va.size - 1) + qb ** 2 / (vb.size - 1))
    half = float(sps.t.ppf(0.5 + level / 2, df)) * se
    p = float(2 * sps.t.sf(abs(diff) / se, df))
    return Interval(diff, diff - half, diff + half, va.size, vb.size, "welch", p)


def variance_ratio(a: Sequence[float], b: Sequence[float]) -> tuple[float, Optional[float]]:
    """var(a) / var(b) (sample variances) and the two-sided p of the F test that they are equal (None when a
    group has fewer than 2 values or a variance is zero). Assumes normal values: with few seeds, a guide only."""
    from scipy import stats as sps

    va, vb = _finite(a, "variance_ratio a"), _finite(b, "variance_ratio b")
    if va.size < 2 or vb.size < 2:
        return math.nan, None
    sa, sb = float(va.var(ddof=1)), float(vb.var(ddof=1))
    if sa == 0.0 or sb == 0.0:
        return (math.inf if sb == 0.0 and sa > 0 else math.nan if sa == sb else 0.0), None
    f = sa / sb
    tail = min(float(sps.f.cdf(f, va.size - 1, vb.size - 1)), float(sps.f.sf(f, va.size - 1, vb.size - 1)))
    return f, min(1.0, 2 * tail)


def bootstrap_ci(a: Sequence[float], b: Sequence[float], level: float = 0.95, resamples: int = 10_000,
                 seed: int = 0) -> Interval:
    """mean(a) - mean(b) with a percentile bootstrap interval: each group's values (seeds) resampled with
    replacement, independently. With 3 values per group there are only 10 distinct resampled means, so the
    interval is coarse and too narrow; it is a check on Welch's, not a replacement."""
    va, vb = _finite(a, "bootstrap_ci a"), _finite(b, "bootstrap_ci b")
    diff = float(va.mean() - vb.mean())
    if va.size < 2 or vb.size < 2:
        return Interval(diff, None, None, va.size, vb.size, "bootstrap")
    rng = np.random.default_rng(seed)
    ma = va[rng.integers(0, va.size, (resamples, va.size))].mean(axis=1)
    mb = vb[rng.integers(0, vb.size, (resamples, vb.size))].mean(axis=1)
    d = ma - mb
    lo, hi = np.quantile(d, [0.5 - level / 2, 0.5 + level / 2])
    return Interval(diff, float(lo), float(hi), va.size, vb.size, "bootstrap")


# ------------------------------------------------------------------------------------------------- BLEU
def sentence_stats(hypotheses: Sequence[str], references: Sequence[str]) -> np.ndarray:
    """[N, 10] int64: per sentence n-gram matches (n = 1..4), n-gram totals, hypothesis and reference length
    (sacreBLEU's default 13a tokenization), the statistics corpus BLEU sums."""
    from sacrebleu.metrics import BLEU

    if len(hypotheses) != len(references):
        raise ValueError(f"sentence_stats: {len(hypotheses)} hypotheses for {len(references)} references")
    bleu = BLEU(effective_order=True)  # counts are the same; effective_order only silences the warning
    rows = []
    for h, r in zip(hypotheses, references):
        s = bleu.sentence_score(h, [r])
        rows.append(list(s.counts) + list(s.totals) + [s.sys_len, s.ref_len])
    return np.asarray(rows, dtype=np.int64).reshape(-1, len(STAT_FIELDS))


def corpus_bleu(stats: np.ndarray) -> float:
    """sacreBLEU's corpus BLEU (default: 13a, exp smoothing, order 4) from [N, 10] sentence statistics."""
    from sacrebleu.metrics import BLEU

    s = np.asarray(stats, dtype=np.int64)
    if s.ndim != 2 or s.shape[1] != len(STAT_FIELDS):
        raise ValueError(f"corpus_bleu: stats must be [N, {len(STAT_FIELDS)}] ({', '.join(STAT_FIELDS)}); "
                         f"got shape {s.shape}")
    t = s.sum(axis=0)
    return float(BLEU.compute_bleu([int(x) for x in t[0:4]], [int(x) for x in t[4:8]], int(t[8]), int(t[9]),
                                   smooth_method="exp").score)


def _bleu_of_sums(t: Sequence[int]) -> float:
    """sacreBLEU's corpus BLEU (``BLEU.compute_bleu`` with exp smoothing, order 4) from the 10 summed statistics,
    the same arithmetic without its result object (the bootstrap calls it thousands of times)."""
    correct, total, sys_len, ref_len = t[0:4], t[4:8], t[8], t[9]
    bp = 1.0
    if sys_len < ref_len:
        bp = math.exp(1 - ref_len / sys_len) if sys_len > 0 else 0.0
    if not any(correct):
        return 0.0
    precisions = [0.0] * 4
    smooth = 1.0
    for n in range(4):
        if total[n] == 0:
            break
        if correct[n] == 0:
            smooth *= 2
            precisions[n] = 100. / (smooth * total[n])
        else:
            precisions[n] = 100. * correct[n] / total[n]
    return bp * math.exp(sum([math.log(p) if p != 0.0 else -9999999999 for p in precisions]) / 4)


def paired_bootstrap_bleu(stats_a: np.ndarray, stats_b: np.ndarray, level: float = 0.95, resamples: int = 1000,
                          seed: int = 0) -> Interval:
    """BLEU(a) - BLEU(b) on the same test sentences, with a percentile interval from resampling sentences
    (the same indices for both systems) and the two-sided p-value of a zero difference (twice the smaller
    tail fraction of resampled differences on either side of zero)."""
    a, b = np.asarray(stats_a, np.int64), np.asarray(stats_b, np.int64)
    if a.shape != b.shape or a.ndim != 2 or a.shape[1] != len(STAT_FIELDS) or a.shape[0] == 0:
        raise ValueError(f"paired_bootstrap_bleu: both stats must be [N, {len(STAT_FIELDS)}] over the same N > 0 "
                         f"sentences; got {a.shape} and {b.shape}")
    rng = np.random.default_rng(seed)
    n = a.shape[0]
    idx = rng.integers(0, n, (resamples, n))  # the same draws as one row at a time
    weights = np.bincount((np.arange(resamples)[:, None] * n + idx).ravel(), minlength=resamples * n)
    weights = weights.reshape(resamples, n).astype(np.float64)
    sums_a = np.rint(weights @ a.astype(np.float64)).astype(np.int64).tolist()  # exact: counts far below 2^53
    sums_b = np.rint(weights @ b.astype(np.float64)).astype(np.int64).tolist()
    diffs = np.asarray([_bleu_of_sums(x) - _bleu_of_sums(y) for x, y in zip(sums_a, sums_b)])
    lo, hi = np.quantile(diffs, [0.5 - level / 2, 0.5 + level / 2])
    p = min(1.0, 2 * min(float(np.mean(diffs <= 0)), float(np.mean(diffs >= 0))))
    return Interval(corpus_bleu(a) - corpus_bleu(b), float(lo), float(hi), n, n, "paired bootstrap", p)


# ------------------------------------------------------------------------------------ multiple comparisons
def holm(p_values: Sequence[Optional[float]]) -> list[Optional[float]]:
    """Holm's step-down adjusted p-values (family-wise error control), in the order given; None stays None and
    does not count toward the family size. Sorted ascending, the i-th of m p-values (i from 0) becomes
    max over j <= i of min(1, (m - j) * p_j)."""
    present = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    for p, _ in present:
        if not (0.0 <= p <= 1.0) or math.isnan(p):
            raise ValueError(f"holm: p-values must lie in [0, 1]; got {p!r}")
    m = len(present)
    out: list[Optional[float]] = [None] * len(p_values)
    running = 0.0
    for j, (p, i) in enumerate(present):
        running = max(running, min(1.0, (m - j) * p))
        out[i] = running
    return out
