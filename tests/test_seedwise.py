"""Claims on per-seed measurements: the one-sample interval, each verdict kind, and Holm within a family."""
import math

import pytest
from scipy import stats as scipy_stats

from studies import seedwise


def _claim(id, **kw):
    return seedwise.SeedClaim(id, f"claim {id}", "paper", "value", kw.pop("family", "f"), "post-hoc", **kw)


def test_one_sample_matches_scipy():
    values = [0.2, 0.25, 0.31, 0.22]
    iv = seedwise.one_sample(values, 0.5)
    assert iv.p == pytest.approx(scipy_stats.ttest_1samp(values, 0.5).pvalue)
    assert iv.lo < iv.diff < iv.hi < 0 and iv.diff == pytest.approx(sum(values) / 4 - 0.5)
    assert seedwise.one_sample([1.0, 1.0], 1.0).p == 1.0
    with pytest.raises(ValueError, match="one_sample"):
        seedwise.one_sample([1.0], 0.0)


def test_each_verdict_kind():
    claims = [_claim("below", threshold=0.5), _claim("above", threshold=0.5, side=seedwise.ABOVE, family="g"),
              _claim("wide", threshold=0.5, family="h"), _claim("few", threshold=0.5, family="i"),
              _claim("none", paper=0.0, margin=0.05, family="j"), _claim("gain", paper=0.1, margin=0.02, family="k")]
    got = seedwise.judge_all(claims, {
        "below": ([0.1, 0.12, 0.11], None), "above": ([0.1, 0.12, 0.11], None), "wide": ([0.1, 0.9, 0.5], None),
        "few": ([0.1, math.nan, 0.1], None), "none": ([0.80, 0.81, 0.82], [0.81, 0.80, 0.82]),
        "gain": ([0.9, 0.91, 0.92], [0.6, 0.61, 0.62])})
    assert [v.kind for v in got] == ["reproduced", "contradicted", "unresolved", "unresolved", "no effect",
                                     "direction only"]
    assert "fewer than 3 seeds" in got[3].measured() and len(got[0].row()) == len(seedwise.VERDICT_COLUMNS)


def test_holm_within_a_family_can_change_a_verdict():
    """p = 0.031 alone is significant; with a second claim at p = 0.040 in its family Holm makes both 0.062."""
    claims = [_claim("a", threshold=0.0, side=seedwise.ABOVE), _claim("b", threshold=0.0, side=seedwise.ABOVE)]
    a, b = [0.69, 1.0, 1.31], [0.643, 1.0, 1.357]
    alone = seedwise.judge_all(claims[:1], {"a": (a, None)})[0]
    assert alone.kind == "reproduced" and alone.p_adjusted == alone.interval.p == pytest.approx(0.031, abs=0.001)
    both = seedwise.judge_all(claims, {"a": (a, None), "b": (b, None)})
    assert both[1].interval.p == pytest.approx(0.040, abs=0.001)
    assert [v.p_adjusted for v in both] == pytest.approx([2 * alone.interval.p] * 2)
    assert [(v.kind_raw, v.kind, v.changed) for v in both] == [("reproduced", "unresolved", True)] * 2
    other = seedwise.judge_all([claims[0], _claim("b", threshold=0.0, side=seedwise.ABOVE, family="g")],
                               {"a": (a, None), "b": (b, None)})
    assert [v.kind for v in other] == ["reproduced", "reproduced"]  # separate families: no correction


def test_bad_claims_are_refused():
    with pytest.raises(ValueError, match="exactly one"):
        _claim("x")
    with pytest.raises(ValueError, match="side"):
        _claim("x", threshold=1.0, side="left")
    with pytest.raises(ValueError, match="expected the same ids"):
        seedwise.judge_all([_claim("x", threshold=1.0)], {})
