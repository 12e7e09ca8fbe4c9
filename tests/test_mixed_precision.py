"""Mixed precision: ``model.dtype="bfloat16"`` (parameters float32) on a tiny decoder-only copy task.

- the first 20 training steps' losses track float32 within ``LOSS_TOL`` (same seed, data and init);
- attention statistics stay float32 in bfloat16, from every backend and through the model;
- the NaN guard catches a non-finite loss in bfloat16 and keeps the parameters;
- the health monitor sees the same warnings from the bfloat16 statistics as from the float32 ones.

The long-run comparison on the main config (300 steps) is in docs/results/mixed_precision/.
"""
from __future__ import annotations

import csv
import importlib.util
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention
from attention import Mask
from engine import health as health_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 20
# Largest |loss_bf16 - loss_f32| over the first STEPS steps (losses ~4.3 -> ~3.7 nats). Measured with jax 0.10.2:
# 0.0051 at the worst step, 0.0013 on average; the tolerance leaves 6x room for other jax versions and CPUs.
LOSS_TOL = 0.03


# ------------------------------------------------------------------------------------------------ engine
class TinyRun:
    """The copy task of configs/lm_copy.py (runlocal size) trained for a few steps on one device in ``dtype``.

    The only code here that knows the engine's layout (engine.tasks.get_task, engine.state.build,
    engine.steps' make_train_step, make_stats_step, to_device, non_finite_message; engine.sharding.make_mesh)."""

    def __init__(self, dtype: str, tmp_dir: str, **health):
        from engine import sharding, state, steps, tasks

        spec = importlib.util.spec_from_file_location("lm_copy_config", os.path.join(REPO, "configs", "lm_copy.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        config = module.get_config("runlocal")
        config.model.dtype = dtype
        config.mesh.update(data=1, model=1)
        config.health.update(health)
        self.config, self.steps, self.task = config, steps, tasks.get_task(config)
        self.mesh = sharding.make_mesh(config.mesh, devices=jax.devices()[:1])
        data = self.task.build_data(tmp_dir, 0, 1)
        self.setup, init = state.build(config, self.task, self.mesh, data.vocab_size)
        self.state = init()
        self.train_step = steps.make_train_step(self.setup)
        self.stats_step = steps.make_stats_step(self.setup, deterministic=True)
        it = data.train_iter()
        self.batches = [steps.to_device(next(it), self.mesh) for _ in range(STEPS)]

    def losses(self, steps: int) -> np.ndarray:
        out = []
        for batch in self.batches[:steps]:
            self.state, m = self.train_step(self.state, batch)
            out.append(float(m["loss_sum"]) / max(float(m["weight_sum"]), 1.0))
        return np.asarray(out)

    def params(self) -> list[np.ndarray]:
        return [np.asarray(x) for x in jax.tree.leaves(self.state["params"])]

    def poison_first_param(self) -> None:
        leaves, tree = jax.tree.flatten(self.state["params"])
        leaves[0] = jnp.full_like(leaves[0], jnp.nan)
        self.state = dict(self.state, params=jax.tree.unflatten(tree, leaves))

    def guard(self) -> tuple[int, int, str]:
        host = jax.device_get({k: self.state[k] for k in ("bad_step", "bad_code", "bad_leaves")})
        return int(host["bad_step"]), int(host["bad_code"]), self.steps.non_finite_message(
            host, self.setup.leaf_paths, None, "ckpt")

    def summary(self) -> dict:
        return jax.tree.map(np.asarray, jax.device_get(self.stats_step(self.state, self.batches[0])))

    def model_stats(self) -> list:
        """Every layer's AttentionStats of a forward pass with return_stats=True."""
        model = self.setup.model(self.state["params"])
        _, stats = self.task.forward(model, self.batches[0], deterministic=True, return_stats=True)
        return [s for layers in stats.values() for s in layers]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return {dt: TinyRun(dt, str(tmp_path_factory.mktemp(dt))) for dt in ("float32", "bfloat16")}


# ------------------------------------------------------------------------------------------------ tests
def test_bfloat16_losses_track_float32(runs):
    f32 = runs["float32"].losses(STEPS)
    bf16 = runs["bfloat16"].losses(STEPS)
    gap = np.abs(bf16 - f32)
    assert np.all(np.isfinite(bf16))
    assert gap.max() <= LOSS_TOL, f"max |bf16 - f32| = {gap.max():.4f} (per step {np.round(gap, 4)})"
    assert f32[-1] < f32[0] - 0.2 and bf16[-1] < bf16[0] - 0.2  # both learn, not only agree
    # parameters and optimizer state stay float32 under bfloat16 compute
    assert {x.dtype for x in runs["bfloat16"].params()} == {np.dtype(np.float32)}


@pytest.mark.parametrize("backend", ["reference", "xla", "chunked", "pallas"])
def test_attention_statistics_are_float32_for_bfloat16_inputs(backend):
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.standard_normal((2, 64, 4, 32)), jnp.bfloat16) for _ in range(3))
    out, stats = attention.attention(q, k, v, Mask(causal=True), implementation=backend, return_stats=True)
    assert out.dtype == jnp.bfloat16
    fields = {"entropy": stats.entropy, "max_logit": stats.max_logit, "lse": stats.lse, "sink": stats.sink}
    assert {name: x.dtype for name, x in fields.items()} == {name: jnp.float32 for name in fields}
    assert stats.valid.dtype == jnp.bool_
    ref_out, ref = attention.attention(*(x.astype(jnp.float32) for x in (q, k, v)), Mask(causal=True),
                                       implementation="reference", return_stats=True)
    np.testing.assert_allclose(stats.entropy, ref.entropy, atol=0.02)  # bf16 inputs, float32 statistics


def test_model_statistics_are_float32_in_bfloat16(runs):
    for s in runs["bfloat16"].model_stats():
        for name in ("entropy", "max_logit", "lse", "sink"):
            assert getattr(s, name).dtype == jnp.float32, name


def test_health_monitor_sees_the_same_in_bfloat16(runs, tmp_path):
    s32, s16 = runs["float32"].summary(), runs["bfloat16"].summary()
    for group in s32:
        for field in s32[group]:
            assert s16[group][field].dtype == np.float32
            np.testing.assert_allclose(s16[group][field], s32[group][field], atol=0.05, rtol=0.03,
                                       err_msg=f"{group}/{field}")
    cfg = runs["float32"].config.health
    # Default thresholds, then a max_logit threshold in the widest gap between the heads' values (some heads
    # above it, some below): the same heads warn.
    values = np.sort(s32["decoder_self"]["max_logit"].ravel())
    widest = int(np.argmax(np.diff(values)))
    for max_logit in (cfg.max_logit, float(values[widest] + values[widest + 1]) / 2):
        kinds = []
        for summary in (s32, s16):
            thresholds = cfg.copy_and_resolve_references()
            thresholds.max_logit = max_logit
            monitor = health_lib.HealthMonitor(thresholds)
            warnings = [monitor.update(step, summary) for step in range(3)]
            kinds.append([(w.kind, w.group, w.layer, w.head) for ws in warnings for w in ws])
        assert kinds[0] == kinds[1]


def test_nan_guard_in_bfloat16(runs):
    run = runs["bfloat16"]
    saved = jax.tree.map(jnp.copy, run.state)  # the other tests' run continues from here afterwards
    try:
        run.losses(1)
        assert run.guard()[0] == -1
        step = int(run.state["step"])
        run.poison_first_param()
        before = run.params()
        run.losses(1)
        bad_step, bad_code, message = run.guard()
        assert bad_step == step and bad_code in (1, 3)
        assert "non-finite" in message and f"at step {step}" in message
        for a, b in zip(run.params(), before):  # the bad update was not applied
            np.testing.assert_array_equal(a, b)
    finally:
        run.state = saved


def _load_make_report():
    path = os.path.join(REPO, "docs", "results", "mixed_precision", "make_report.py")
    spec = importlib.util.spec_from_file_location("mixed_precision_make_report", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fake_run(root, name: str, seed: int, gap: float, warnings: int = 0) -> str:
    """A workdir with config.json and metrics.jsonl: losses 5.0 - 0.01 step every 5 steps, plus ``gap``."""
    d = root / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"seed": seed}))
    lines = [{"event": "start", "step": 0, "time": 0.0}]
    lines += [{"event": "health_warning", "step": 5, "time": 1.0}] * warnings
    lines += [{"step": s, "time": float(s), "train/loss": 5.0 - 0.01 * s + gap * (s == 30), "train/grad_norm": 1.0,
               "perf/tokens_per_sec": 100.0} for s in range(5, 35, 5)]
    lines += [{"step": 10, "attn/step": 10, "attn/cross/entropy": 2.0 + gap}]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return str(d)


def test_make_report_compares_each_seed_pair_against_the_tolerance(tmp_path):
    """seeds.csv has one row per pair, flags the seed whose largest loss gap passes the tolerance, and counts
    health warnings; unpaired or mismatched directories end with one line."""
    mr = _load_make_report()
    runs = [_fake_run(tmp_path, "f0", 0, 0.0), _fake_run(tmp_path, "b0", 0, 0.004, warnings=2),
            _fake_run(tmp_path, "f1", 1, 0.0), _fake_run(tmp_path, "b1", 1, 0.02)]
    out = tmp_path / "out"
    out.mkdir()
    mr.main(runs + ["--out", str(out)])
    rows = list(csv.DictReader(open(out / "seeds.csv")))
    assert [r["seed"] for r in rows] == ["0", "1"]
    assert float(rows[0]["max_abs_loss_gap"]) == pytest.approx(0.004) and rows[0]["within_tolerance"] == "True"
    assert float(rows[1]["max_abs_loss_gap"]) == pytest.approx(0.02) and rows[1]["within_tolerance"] == "False"
    assert rows[1]["at_step"] == "30" and rows[0]["health_warnings_bf16"] == "2"
    assert float(rows[1]["max_abs_entropy_gap"]) == pytest.approx(0.02)
    assert (out / "loss.png").exists() and (out / "curves.csv").exists()
    with pytest.raises(SystemExit, match="expected pairs"):
        mr.main(runs[:3] + ["--out", str(out)])
    with pytest.raises(SystemExit, match="expected pairs of the same seed"):
        mr.main([runs[0], runs[3], "--out", str(out)])
