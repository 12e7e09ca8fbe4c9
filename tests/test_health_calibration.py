"""studies/health_eval.py and the health calibration study: events from records and traces, fault-library labels,
intervals, detection, the report's splits, and Table 3 d128 retrained with traces."""
import json
import os
import shutil

import numpy as np
import pytest

from studies import health_eval
from engine import config as config_lib
from studies.specs import health_calibration


def test_events_follow_the_written_definitions():
    trace = {"loss_step": [10, 20, 30], "loss": [3.0, 2.0, 2.6]}
    assert health_eval.run_event({"steps": 30, "validation": {"accuracy": 1.0}}, trace) == ("loss spike", 30)
    calm = {"loss_step": [10, 20], "loss": [3.0, 2.0]}
    assert health_eval.run_event({"steps": 30, "validation": {"accuracy": 1.0}}, calm) == (None, None)
    assert health_eval.run_event({"steps": 30, "validation": {"accuracy": 0.5}}, calm) == ("failed to learn", 30)
    assert health_eval.run_event({"steps": 30, "validation": {"accuracy": 0.5}}, calm,
                                 judge_learning=False) == (None, None)
    assert health_eval.run_event({"steps": 30, "stability": {"non_finite_step": 20}}, trace) == ("non-finite loss", 20)


def test_fault_library_records_carry_their_planted_fault():
    assert health_eval.planted_fault({"config": "configs/faults.py:task=mqar,fault=scale_missing,d_model=64"}) == \
        "scale_missing"
    assert health_eval.planted_fault({"config": "configs/table3_heads.py:seeds=3"}) == ""


def test_wilson_interval_and_detection():
    lo, hi = health_eval.wilson(0, 33)
    assert lo == 0.0 and 0.09 < hi < 0.11
    assert health_eval.interval(17, 17) == "17/17 = 1.00 [0.82, 1.00]"
    one = lambda v: np.array([[v]], np.float32)  # noqa: E731
    cross = {"entropy": one(1.0), "norm_entropy": one(0.3), "max_logit": one(5.0), "logit_std": one(5.0)}
    faulty = health_eval.Run("faults/mqar", "mqar-scale_missing-d64-h2", {"steps": 10}, [(0, {"cross": cross})], (),
                             None, 10, [], "scale_missing")
    healthy = health_eval.Run("x/points", "p", {"steps": 10}, [(0, {"cross": {**cross, "logit_std": one(0.8),
                                                                               "norm_entropy": one(0.9)}})], (),
                              None, None)
    cfg = config_lib.base_config().health
    ws = [health_calibration.replay(faulty, cfg), health_calibration.replay(healthy, cfg)]
    d = health_eval.detection([faulty, healthy], ws)
    assert (d["caught"], d["faulty"], d["healthy_alarmed"], d["true_alarmed"], d["alarmed"]) == (1, 1, 0, 1, 1)
    assert health_eval.caught(faulty, ws[0]) and not health_eval.caught(healthy, ws[1])


def test_the_fault_library_splits_by_task_and_the_held_out_runs_are_their_own_split():
    assert health_calibration._family("health_calibration/heldout", ".", "mqar-lr_high-d96-h3") == \
        ("health_calibration/heldout/mqar", "mqar-lr_high-d96-h3")
    assert health_calibration._family("health_calibration/heldout2", ".", "translation-healthy-d80-h4") == \
        ("health_calibration/heldout2/translation", "translation-healthy-d80-h4")
    assert health_calibration._family("health_calibration/points", ".", "qk_layernorm_true-x") == \
        ("health_calibration/points", "qk_layernorm_true-x")
    assert health_calibration._family("table3_d256/points", "A", "num_heads_1-seed_0") == \
        ("table3_d256/points/A", "num_heads_1-seed_0")
    family, point = health_calibration._family("single_head_lr/points", "h1/lr_0.003", "default")
    assert family.startswith("single_head_lr/points/h1 (Table 3 d128") and point == "lr_0.003/default"
    splits = dict(health_calibration.SPLITS)
    for name, folder in (("held out", "health_calibration/heldout"), ("held out 2", "health_calibration/heldout2")):
        assert splits[name] == (folder,) and not any(
            folder in folders for split, folders in health_calibration.SPLITS if split != name)


def test_the_collapse_statistic_and_outcomes():
    one = lambda std, ne: {"cross": {"entropy": np.ones((1, 1)), "norm_entropy": np.full((1, 1), ne),  # noqa: E731
                                     "max_logit": np.ones((1, 1)), "logit_std": np.full((1, 1), std)}}
    run = health_eval.Run("f", "p", {"steps": 20}, [(0, one(0.5, 0.9)), (10, one(0.01, 0.99)), (20, one(0.005, 0.9))],
                          (), None, 20, [], "post_ln_deep")
    assert health_eval.collapse_low(run, 0.98) == (pytest.approx(0.02), 10, "cross", 0)
    cfg = config_lib.base_config().health
    ws = health_calibration.replay(run, cfg)
    assert health_eval.outcome(run, ws) == "caught at step 10 (attention_collapse)"
    assert health_eval.outcome(run, []) == "missed"


def test_table3_d128_is_retrained_with_traces_beside_its_originals(tmp_path):
    """Every Table 3 d128 point once, each configuration's first seed first, its record mirroring the original's path
    under table3_d128/ and its run folder apart from the original's (resuming a finished original would train
    nothing); the report's rows set each retrained run against its original."""
    jobs = health_calibration.jobs(str(tmp_path / "runs"), str(tmp_path / "out"), ["table3_d128"])
    assert len(jobs) == 33 and len({j.record for j in jobs}) == 33
    assert [j.name for j in jobs[:3]] == ["table3 A/num_heads_1-seed_0", "table3 A/num_heads_2-seed_0",
                                          "table3 A/num_heads_4-seed_0"]
    first = [j.name.split("/")[0] for j in jobs[:11]]
    assert sorted(set(first)) == ["table3 A", "table3 A1", "table3 A1dk", "table3 AA", "table3 B"]
    assert all(j.workdir.startswith(str(tmp_path / "runs" / "table3_d128")) for j in jobs)
    originals = os.path.join(health_calibration.REPO, "docs", "results", health_calibration.TABLE3_D128)
    for j in jobs:
        assert os.path.exists(os.path.join(originals, os.path.relpath(j.record, tmp_path / "out" / "table3_d128")))
    results = tmp_path / "results"
    shutil.copytree(originals, results / health_calibration.TABLE3_D128)
    again = tmp_path / "out" / "table3_d128" / "A"
    again.mkdir(parents=True)
    for name, shift in (("num_heads_1-seed_0", 0.0), ("num_heads_2-seed_1", 0.25)):
        record = json.loads((results / health_calibration.TABLE3_D128 / "A" / f"{name}.json").read_text())
        nll = record["validation"]["nll"]
        record["validation"]["nll"] = nll + shift
        (again / f"{name}.json").write_text(json.dumps(record))
    rows = health_calibration.retrain_rows(str(tmp_path / "out"), str(results))
    assert [r[0] for r in rows] == ["A/num_heads_1-seed_0", "A/num_heads_2-seed_1"]
    assert rows[0][3] == 0.0 and rows[1][3] == pytest.approx(0.25)


def test_the_named_healthy_studies_count_traced_healthy_runs_and_their_warnings(tmp_path):
    """Per study the issue names: all its runs (records on disk), the traced ones, the healthy ones among those, and
    only the healthy runs' warnings (a run that failed to learn is a faulty run); solved MQAR runs by accuracy."""
    run = lambda family, point, record, event=None: health_eval.Run(  # noqa: E731
        family, point, record, [], (), event, None)
    runs = [run("heads_vs_depth/points", "a", {}), run("heads_vs_depth/points", "b", {}, "failed to learn"),
            run("health_calibration/points", "solved", {"validation": {"accuracy": 1.0}}),
            run("health_calibration/points", "not solved", {"validation": {"accuracy": 0.4}})]
    warnings = [[], ["w", "w"], ["w"], ["w"]]
    depth = tmp_path / "heads_vs_depth" / "points"
    depth.mkdir(parents=True)
    for name in ("a", "b", "c"):
        (depth / f"{name}.json").write_text("{}")
    rows = {r[0]: r[1:] for r in health_calibration.named_rows(runs, warnings, str(tmp_path))}
    assert rows["heads vs depth"] == [3, 2, 1, 0, 0]
    assert rows["MQAR solved (entropy-collapse runs)"] == [1, 1, 1, 1, 1]
    assert rows["Table 3, d_model 256"] == [0, 0, 0, 0, 0]
