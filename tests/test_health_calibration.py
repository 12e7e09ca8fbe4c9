"""scripts/health_calibration.py: events from records and traces, fault-library labels, intervals, detection."""
import os
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))

import health_calibration as hc  # noqa: E402


def test_events_follow_the_written_definitions():
    trace = {"loss_step": [10, 20, 30], "loss": [3.0, 2.0, 2.6]}
    assert hc.run_event({"steps": 30, "validation": {"accuracy": 1.0}}, trace) == ("loss spike", 30)
    calm = {"loss_step": [10, 20], "loss": [3.0, 2.0]}
    assert hc.run_event({"steps": 30, "validation": {"accuracy": 1.0}}, calm) == (None, None)
    assert hc.run_event({"steps": 30, "validation": {"accuracy": 0.5}}, calm) == ("failed to learn", 30)
    assert hc.run_event({"steps": 30, "validation": {"accuracy": 0.5}}, calm, judge_learning=False) == (None, None)
    assert hc.run_event({"steps": 30, "stability": {"non_finite_step": 20}}, trace) == ("non-finite loss", 20)


def test_fault_library_records_carry_their_planted_fault():
    assert hc.planted_fault({"config": "configs/faults.py:task=mqar,fault=scale_missing,d_model=64"}) == \
        "scale_missing"
    assert hc.planted_fault({"config": "configs/table3_heads.py:seeds=3"}) == ""


def test_wilson_interval_and_detection():
    lo, hi = hc.wilson(0, 33)
    assert lo == 0.0 and 0.09 < hi < 0.11
    one = lambda v: np.array([[v]], np.float32)  # noqa: E731
    obs = [(0, {"cross": {"entropy": one(1.0), "norm_entropy": one(0.3), "max_logit": one(5.0),
                          "logit_std": one(s)}}) for s in (5.0,)]
    faulty = hc.Run("faults", "mqar-scale_missing-d64-h2", {"steps": 10}, obs, (), None, 10, [], "scale_missing")
    healthy = hc.Run("x/points", "p", {"steps": 10}, [(0, {"cross": {**obs[0][1]["cross"], "logit_std": one(0.8),
                                                                      "norm_entropy": one(0.9)}})], (), None, None)
    cfg = hc.defaults()
    d = hc.detection([faulty, healthy], [hc.replay_run(faulty, cfg), hc.replay_run(healthy, cfg)])
    assert (d["caught"], d["faulty"], d["healthy_alarmed"], d["true_alarmed"], d["alarmed"]) == (1, 1, 0, 1, 1)
    assert faulty.family == "faults/mqar" and healthy.family == "x/points"
