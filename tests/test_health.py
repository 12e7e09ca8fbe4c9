"""engine/health.py: the per-layer monitor on committed traces (healthy runs silent, planted/real faults caught
with their cause), on synthetic summaries (one warning per problem) and in short planted-fault trainings;
engine/health_wandb.py read back from a real offline W&B run."""
import collections
import glob
import json
import os
import struct

import numpy as np
import pytest

from engine import config as config_lib
from engine import health as health_lib
from engine import health_wandb
from studies import points as sweep_lib
from studies.report import REPO

RESULTS = os.path.join(REPO, "docs", "results")
HEALTHY = ["table3_d256/points/A/num_heads_32-seed_0", "table3_d256/points/A/num_heads_1-seed_0",
           "table3_d256/points/B/qk_dim_8-seed_0", "heads_vs_depth/points/num_encoder_layers_6-qk_layernorm_false-"
           "seed_2-num_steps_7200", "health_calibration/points/qk_layernorm_false-learning_rate_0.03-seed_4",
           "health_calibration/heldout/mqar-healthy-d128-h32", "health_calibration/heldout/translation-healthy-d96-h6",
           "heads_vs_depth/points/num_encoder_layers_6-qk_layernorm_false-seed_0-norm_post-warmup_steps_800",
           "health_calibration/heldout2/translation-healthy-post_ln-d80-h4",
           "health_calibration/heldout2/translation-healthy-post_ln-d112-h7", "single_head_lr/points/h1/lr_0.006/default",
           "health_calibration/main/main_job-steps_3050",
           "health_calibration/table3_d128/A/num_heads_1-seed_0"]


def _replay(point):
    trace = sweep_lib.read_attention_trace(os.path.join(RESULTS, point + ".attention.json.gz"))
    return health_lib.replay(sweep_lib.trace_observations(trace), config_lib.base_config().health,
                             trace.get("skip_groups") or (), list(zip(trace["loss_step"], trace["loss"])))


@pytest.mark.parametrize("point", HEALTHY)
def test_committed_healthy_runs_are_silent(point):
    """32 heads, one head of d_k 256, d_k 8, 7,200 steps, MQAR solved with near one-hot attention, two held-out
    runs (32 heads of d_k 4; translation at d_model 96 with 6 heads), the healthy runs whose near-uniform layer falls
    furthest below its first-check spread (calibration: 6+6 post-LN with warmup; held out 2: 2+2 post-LN translation
    with warmup at d_model 80 and 112, the latter within 1.5x of collapse_spread_ratio), Table 3 d128's one-head row
    at its highest learning rate, the main job at 3,050 steps and Table 3 d128's one-head run retrained with its
    trace."""
    assert _replay(point) == []


def test_logit_growth_is_caught_before_the_loss_spike_with_its_cause():
    ws = _replay("health_calibration/points/qk_layernorm_false-learning_rate_0.1-seed_4")
    first = ws[0]
    assert (first.kind, first.group, first.layers) == ("logit_growth", "decoder_self", (0, 1))
    assert first.cause == "learning rate too high or logit growth?" and first.step < 90  # the spike: step 90
    assert "every 2 head(s)" in first.message() or "of 2 head(s)" in first.message()


@pytest.mark.parametrize("point,groups", [
    ("health_calibration/faults/mqar-post_ln_deep-d64-h2", {"decoder_self"}),
    ("health_calibration/heldout/translation-post_ln_deep-d96-h6", {"cross", "decoder_self", "encoder_self"})])
def test_deep_post_ln_collapse_is_caught_at_the_second_check_with_its_cause(point, groups):
    """Deep post-LN without warmup (8 and 6+6 layers): attention collapses to uniform within 10 steps."""
    ws = [w for w in _replay(point) if w.kind == "attention_collapse"]
    assert {w.group for w in ws if w.step == 10} == groups, [w.message() for w in ws]
    assert all(w.cause == health_lib.CAUSES["attention_collapse"] and w.value < 0.05 for w in ws)


def _summary(std, ne=0.8, max_logit=5.0):
    std = np.asarray(std, np.float64)
    return {"cross": {"entropy": np.full(std.shape, 1.0), "norm_entropy": np.full(std.shape, ne),
                      "max_logit": np.full(std.shape, max_logit), "logit_std": std}}


def test_a_missing_scale_lifts_the_whole_layer_and_is_named_one_sharp_head_is_not():
    cfg = config_lib.base_config().health
    m = health_lib.HealthMonitor(cfg)
    ws = m.update(0, _summary([[4.5, 4.2, 4.8, 5.0], [0.8, 0.7, 9.0, 0.9]], ne=0.3))
    assert [(w.kind, w.layers, w.heads, w.of_heads) for w in ws] == [("init_spread_high", (0,), 4, 4)]
    assert ws[0].cause == "scale missing or too large?" and ws[0].evidence["layer_values"] == {"0": 4.65}
    assert "every 4 head(s)" in ws[0].message()


def test_one_warning_per_problem_hovering_and_many_layers():
    cfg = config_lib.base_config().health
    m = health_lib.HealthMonitor(cfg)
    out = []
    for step, v in enumerate([5.0, 5.0, 1200.0, 990.0, 1100.0, 950.0, 1300.0]):  # hovering at max_logit 1000
        out += m.update(step, _summary(np.full((3, 2), 0.8), max_logit=v))
    runaway = [w for w in out if w.kind == "runaway_logits"]
    assert len(runaway) == 1 and runaway[0].layers == (0, 1, 2) and runaway[0].step == 2
    assert runaway[0].cause == ""  # symptom only: nothing singles out a cause


def test_attention_collapse_needs_a_fall_and_uniform_heads_and_warns_once_per_group():
    cfg = config_lib.base_config().health
    m = health_lib.HealthMonitor(cfg)
    out = m.update(0, _summary(np.full((3, 2), 0.5)))
    out += m.update(1, _summary([[0.02, 0.02], [0.5, 0.5], [0.02, 0.02]], ne=0.9))  # fell, but not uniform
    assert out == []
    out += m.update(2, _summary([[0.02, 0.02], [0.5, 0.5], [0.5, 0.5]], ne=0.99))  # layer 0 collapsed
    out += m.update(3, _summary([[0.01, 0.01], [0.5, 0.5], [0.01, 0.01]], ne=0.99))  # layer 2 joins
    assert [(w.kind, w.layers, w.heads, w.step) for w in out] == [("attention_collapse", (0,), 2, 2)]
    assert out[0].evidence["first_check_median"] == {"0": 0.5} and out[0].value == pytest.approx(0.04)


@pytest.mark.parametrize("bad", [0.0, 1.5])
def test_a_collapse_threshold_outside_0_1_is_refused_by_name(bad):
    import attention
    from studies.inprocess import load

    c = load(os.path.join(REPO, "configs", "faults.py") + ":task=mqar,quick")
    config_lib.validate(c, 8, attention.available_backends())
    c.health.collapse_spread_ratio = bad
    with pytest.raises(config_lib.ConfigError, match=rf"config.health.collapse_spread_ratio={bad}; expected"):
        config_lib.validate(c, 8, attention.available_backends())


def test_mask_leak_names_the_causal_mask_alone_and_padding_elsewhere():
    cfg = config_lib.base_config().health
    ok = {"entropy": np.ones((2, 2)), "norm_entropy": np.full((2, 2), 0.9), "max_logit": np.full((2, 2), 5.0),
          "logit_std": np.full((2, 2), 0.8)}
    leak = {**ok, "norm_entropy": np.array([[0.9, 0.9], [1.03, 0.9]])}
    ws = health_lib.HealthMonitor(cfg).update(0, {"decoder_self": leak, "cross": ok})
    assert [(w.kind, w.group, w.layers, w.heads, w.cause) for w in ws] == [
        ("mask_leak", "decoder_self", (1,), 1, "causal mask leaking?")]
    ws = health_lib.HealthMonitor(cfg).update(0, {"decoder_self": leak, "cross": leak})
    assert {(w.group, w.cause) for w in ws} == {("decoder_self", "padding mask missing?"),
                                                ("cross", "padding mask missing?")}


def test_a_scale_too_small_everywhere_is_named_one_low_group_is_only_described():
    cfg = config_lib.base_config().health
    low = _summary(np.full((2, 2), 0.28))["cross"]
    ws = health_lib.HealthMonitor(cfg).update(0, {"cross": low, "decoder_self": low})
    assert {(w.kind, w.cause) for w in ws} == {("init_spread_low", "scale too small (1/d_k?)")}
    ws = health_lib.HealthMonitor(cfg).update(0, {"cross": low, "decoder_self": _summary(np.full((2, 2), 0.9))["cross"]})
    assert ws == []  # 0.28 in one group: post-LN depth, not a scale
    ws = health_lib.HealthMonitor(cfg).update(0, {"cross": _summary(np.full((2, 2), 0.1))["cross"],
                                                  "decoder_self": _summary(np.full((2, 2), 0.9))["cross"]})
    assert [(w.kind, w.group, w.cause) for w in ws] == [("init_spread_low", "cross", "")]


def _quick_run(fault, workdir, task="mqar", steps=12, **wandb):
    """A short planted-fault training (configs/faults.py at quick sizes, ``steps`` steps); its result dict."""
    import engine
    from studies.inprocess import load

    c = load(os.path.join(REPO, "configs", "faults.py") + f":task={task},fault={fault},steps={steps},quick")
    c.wandb.update(wandb)
    return engine.run(c, str(workdir))


PLANTED = [pytest.param("mqar", "temperature_x10", "init_spread_high", "scale missing or too large?", id="temperature"),
           pytest.param("mqar", "scale_dk", "init_spread_low", "scale too small (1/d_k?)", id="scale_dk"),
           pytest.param("mqar", "causal_leak", "mask_leak", "causal mask leaking?", id="causal_leak"),
           pytest.param("mqar", "post_ln_deep", "attention_collapse", health_lib.CAUSES["attention_collapse"],
                        id="post_ln_deep", marks=pytest.mark.slow),  # ~22 s: 12 post-LN layers at d_model 64
           pytest.param("translation", "no_padding_mask", "mask_leak", "padding mask missing?", id="no_padding_mask",
                        marks=pytest.mark.slow)]  # the translation data and decoding: minutes on 2 cores


@pytest.mark.parametrize("task,fault,kind,cause", PLANTED)
def test_a_planted_fault_is_caught_in_training_with_its_cause(task, fault, kind, cause, tmp_path):
    """Each fault the monitor names a cause for, planted in a short run at quick sizes (MQAR ~5 s each; deep post-LN
    ~20 s at d_model 64): its first warning. Logit growth is asserted on a committed trace above."""
    ws = _quick_run(fault, tmp_path / "run", task)["health_warnings"]
    assert ws and (ws[0].kind, ws[0].cause) == (kind, cause), [w.message() for w in ws]


def _wandb_records(path):
    """The records of a W&B transaction log (``run-<id>.wandb``), parsed with wandb's own protobuf ``Record``: the
    file is a LevelDB log (32 KiB blocks of 7-byte-headed chunks) after a 7-byte ``:W&B`` header."""
    from wandb.proto import wandb_internal_pb2

    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b":W&B", path
    records, pos, chunks = [], 7, b""
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:  # a block's zero trailer
            pos += left
            continue
        length, kind = struct.unpack("<HB", data[pos + 4: pos + 7])
        chunks += data[pos + 7: pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL, LAST
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunks)
            records.append(record)
            chunks = b""
    return records


def test_an_offline_wandb_run_plots_attention_against_its_step_alerts_once_and_tables_warnings(tmp_path,
                                                                                              monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    ws = _quick_run("temperature_x10", tmp_path / "run", steps=6, mode="offline")["health_warnings"]
    assert ws
    path, = glob.glob(str(tmp_path / "run" / "wandb" / "offline-run-*" / "run-*.wandb"))
    records = _wandb_records(path)
    kinds = collections.Counter(r.WhichOneof("record_type") for r in records)
    metrics = {r.metric.glob_name or r.metric.name: r.metric.step_metric for r in records
               if r.WhichOneof("record_type") == "metric"}
    assert metrics.get("attn/*") == health_wandb.STEP_METRIC and metrics.get("health/*") == health_wandb.STEP_METRIC
    rows = [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
            for r in records if r.WhichOneof("record_type") == "history"]
    series = [row for row in rows if any(k.startswith(("attn/", "health/")) for k in row)]
    assert series and all(health_wandb.STEP_METRIC in row for row in series)
    first = series[0]
    assert first[health_wandb.STEP_METRIC] == 0 and first["_step"] > 0  # measured at step 0, logged later
    assert kinds["alert"] == 1  # rate-limited: the run's first warning only
    alert, = [r.alert for r in records if r.WhichOneof("record_type") == "alert"]
    assert alert.text == ws[0].message()
    table, = [row for row in rows if f"{health_wandb.TABLE_KEY}/_type" in row]
    assert table[f"{health_wandb.TABLE_KEY}/_type"] == "table-file"
    assert table[f"{health_wandb.TABLE_KEY}/nrows"] == len(ws)
