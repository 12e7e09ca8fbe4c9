"""engine/health.py: the per-layer monitor on committed traces (healthy runs silent, planted/real faults caught
with their cause) and on synthetic summaries (one warning per problem); engine/health_wandb.py's W&B calls."""
import os
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))

import sweep as sweep_lib  # noqa: E402
from engine import config as config_lib  # noqa: E402
from engine import health as health_lib  # noqa: E402
from engine import health_wandb  # noqa: E402

RESULTS = os.path.join(REPO, "docs", "results")
HEALTHY = ["table3_d256/points/A/num_heads_32-seed_0", "table3_d256/points/A/num_heads_1-seed_0",
           "table3_d256/points/B/qk_dim_8-seed_0", "heads_vs_depth/points/num_encoder_layers_6-qk_layernorm_false-"
           "seed_2-num_steps_7200", "health_calibration/points/qk_layernorm_false-learning_rate_0.03-seed_4"]


def _replay(point):
    trace = sweep_lib.read_attention_trace(os.path.join(RESULTS, point + ".attention.json.gz"))
    return health_lib.replay(sweep_lib.trace_observations(trace), config_lib.base_config().health,
                             trace.get("skip_groups") or (), list(zip(trace["loss_step"], trace["loss"])))


@pytest.mark.parametrize("point", HEALTHY)
def test_committed_healthy_runs_are_silent(point):
    """32 heads, one head of d_k 256, d_k 8, 7,200 steps, and MQAR solved with near one-hot attention."""
    assert _replay(point) == []


def test_logit_growth_is_caught_before_the_loss_spike_with_its_cause():
    ws = _replay("health_calibration/points/qk_layernorm_false-learning_rate_0.1-seed_4")
    first = ws[0]
    assert (first.kind, first.group, first.layers) == ("logit_growth", "decoder_self", (0, 1))
    assert first.cause == "learning rate too high or logit growth?" and first.step < 90  # the spike: step 90
    assert "every 2 head(s)" in first.message() or "of 2 head(s)" in first.message()


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


def test_reporter_defines_step_metrics_alerts_once_and_tables_every_warning(monkeypatch):
    import wandb

    class FakeRun:
        def __init__(self):
            self.calls = []

        def define_metric(self, *a, **k):
            self.calls.append(("define_metric", a, k))

        def alert(self, **k):
            self.calls.append(("alert", k))

        def log(self, d, step):
            self.calls.append(("log", d, step))

    run = FakeRun()
    rep = health_wandb.HealthReporter(run, min_alert_s=3600)
    assert ("define_metric", ("attn/*",), {"step_metric": "attn/step"}) in run.calls
    w = health_lib.HealthWarning(5, "runaway_logits", "cross", (0,), 1, 2, 1200.0, 1000.0)
    assert rep.warn(w) and not rep.warn(w)  # rate-limited: one alert
    assert sum(c[0] == "alert" for c in run.calls) == 1
    monkeypatch.setattr(wandb, "Table", lambda columns, data: ("table", columns, data))
    rep.finish(10)
    (_, logged, step), = [c for c in run.calls if c[0] == "log"]
    assert step == 10 and len(logged[health_wandb.TABLE_KEY][2]) == 2


@pytest.mark.slow
def test_a_planted_missing_scale_is_caught_in_training(tmp_path):
    """A short planted-fault run (configs/faults.py, quick sizes) warns at its first check, naming the cause."""
    import engine
    from _runs import load

    c = load(os.path.join(REPO, "configs", "faults.py") + ":task=mqar,fault=temperature_x10,quick")
    ws = engine.run(c, str(tmp_path / "run"))["health_warnings"]
    assert ws and ws[0].kind == "init_spread_high" and ws[0].cause == "scale missing or too large?"


def test_fault_switches_plant_what_they_say():
    """model.fault: causal_leak lets a position see the next token; no_padding_mask lets it see padding."""
    import jax.numpy as jnp
    from flax import nnx

    import models

    def outputs(fault, tokens):
        cfg = models.TransformerConfig(vocab_size=50, d_model=32, num_heads=2, d_ff=64, num_encoder_layers=0,
                                       num_decoder_layers=1, dropout_rate=0.0, fault=fault)
        out = models.DecoderOnly(cfg, rngs=nnx.Rngs(0))(tokens)
        return out[0] if isinstance(out, tuple) else out

    x = jnp.arange(3, 11)[None]
    y = x.at[0, 5].set(40)
    for fault, sees_next in (("", False), ("causal_leak", True)):
        changed = jnp.abs(outputs(fault, x)[0, 4] - outputs(fault, y)[0, 4]).max() > 1e-6
        assert bool(changed) == sees_next, fault
    with pytest.raises(ValueError, match="fault"):
        models.TransformerConfig(vocab_size=50, fault="no_scale")
