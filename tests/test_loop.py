"""engine.run in-process: tasks, hooks, config options that used to live in a private loop, variants."""
import io
import logging
import os
import sys

import jax
import numpy as np
import pytest

import engine
from engine import config as config_lib
from engine import hooks as hooks_lib
from studies.inprocess import load

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def mqar_config(steps: int = 4, **model):
    c = load(os.path.join(REPO, "configs", "mqar_grid.py") + ":quick")
    c.train.update(num_steps=steps, log_every=1, stats_every=2, warmup_steps=1)
    c.model.update(model)
    return c


def test_in_process_run_writes_nothing_and_returns_history(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = engine.run(mqar_config())
    assert os.listdir(tmp_path) == []
    assert r["step"] == 4 and r["stop_reason"] == "num_steps"
    assert [h["step"] for h in r["history"] if "train/loss" in h and "event" not in h] == [1, 2, 3, 4]
    assert [s for s, _ in r["attention"]] == [0, 2, 3]
    assert r["attention"][0][1]["decoder_self"]["entropy"].shape == (1, 2)
    assert 0.0 <= r["validation/accuracy"] <= 1.0


class Recorder(hooks_lib.Hook):
    def __init__(self):
        self.calls = []

    def start(self, run):
        self.calls.append(("start", run.step))

    def before_step(self, run, batch):
        self.calls.append(("before", run.step))

    def after_step(self, run):
        self.calls.append(("after", run.step))
        if run.step == 2:
            run.log({"custom/metric": 7.0})

    def end(self, run):
        self.calls.append(("end", run.stop_reason))

    def close(self, run):
        self.calls.append(("close", None))


def test_custom_hook_sees_every_step_and_can_log():
    rec = Recorder()
    r = engine.run(mqar_config(steps=3), hooks=[rec])
    assert rec.calls == [("start", 0), ("before", 0), ("after", 1), ("before", 1), ("after", 2), ("before", 2),
                         ("after", 3), ("end", "num_steps"), ("close", None)]
    assert [h["custom/metric"] for h in r["history"] if "custom/metric" in h] == [7.0]


def test_early_stopping_ends_training_on_a_metric():
    c = mqar_config(steps=20)
    c.train.update(eval_every=2, early_stop_metric="validation/accuracy", early_stop_value=0.0)
    r = engine.run(c)
    assert r["stop_reason"] == "early_stop" and r["step"] == 2


def test_freeze_regex_keeps_matching_parameters():
    c = mqar_config(steps=3)
    c.train.freeze = "mlp"
    seen = {}

    class Snapshot(hooks_lib.Hook):
        def before_step(self, run, batch):
            seen.setdefault("first", jax.device_get(run.state["params"]))

        def end(self, run):
            seen["after"] = jax.device_get(run.state["params"])

    engine.run(c, hooks=[Snapshot()])
    flat0 = dict(jax.tree_util.tree_flatten_with_path(seen["first"])[0])
    flat1 = dict(jax.tree_util.tree_flatten_with_path(seen["after"])[0])
    frozen = [k for k in flat0 if "mlp" in jax.tree_util.keystr(k)]
    trained = [k for k in flat0 if "query" in jax.tree_util.keystr(k)]
    assert frozen and trained
    for k in frozen:
        np.testing.assert_array_equal(flat0[k], flat1[k])
    assert any(not np.array_equal(flat0[k], flat1[k]) for k in trained)


def test_freeze_that_matches_nothing_is_a_config_error():
    c = mqar_config()
    c.train.freeze = "no_such_parameter"
    with pytest.raises(config_lib.ConfigError, match="matches no parameter"):
        engine.run(c)


def test_loss_on_all_targets_counts_more_positions_than_answers():
    c = load(os.path.join(REPO, "configs", "repro_induction.py") + ":quick")
    c.train.update(num_steps=1, eval_every=0)
    b = engine.run(c)
    c.train.loss_on = "answers"
    a = engine.run(c)
    # The loss covers every real target in b, only the answers in a; evaluation scores the answers in both.
    assert b["train/loss"] != pytest.approx(a["train/loss"])
    assert b["validation/loss"] == pytest.approx(a["validation/loss"], rel=0.2)


def test_non_finite_stop_reports_the_step_instead_of_raising():
    c = mqar_config(steps=6)
    c.train.update(on_non_finite="stop", learning_rate=1e30, schedule="constant", warmup_steps=0)
    r = engine.run(c)
    assert r["stop_reason"] == "non_finite" and r["diverged_step"] <= r["step"] <= 6
    c.train.on_non_finite = "raise"
    with pytest.raises(engine.loop.NonFiniteError, match="non-finite"):
        engine.run(c)


def test_position_loss_is_logged_per_position():
    c = mqar_config(steps=2)
    c.eval.position_loss = True
    r = engine.run(c)
    per_pos = r["validation/position_loss"]
    assert len(per_pos) == c.data.seq_len and np.isfinite(np.nanmean(per_pos))


@pytest.mark.parametrize("kind", ["additive", "linear", "hard"])
def test_attention_variants_train_through_the_engine(kind):
    c = mqar_config(steps=2, attention_kind=kind)
    r = engine.run(c)
    assert np.isfinite(r["train/loss"]) and np.isfinite(r["validation/loss"])
    groups = {g for _, rec in r["attention"] for g in rec}
    assert groups == (set() if kind == "linear" else {"decoder_self"})


def test_attention_only_models_have_no_mlp():
    c = mqar_config(steps=1, attention_only=True)
    r = engine.run(c)
    c2 = mqar_config(steps=1)
    assert r["params"] < engine.run(c2)["params"]


def test_classification_task_trains_and_reports_accuracy():
    c = load(os.path.join(REPO, "configs", "classification.py") + ":quick")
    c.train.num_steps = 3
    r = engine.run(c)
    assert 0.0 <= r["test/accuracy"] <= 1.0 and 0.0 <= r["validation/accuracy"] <= 1.0
    groups = {g for _, rec in r["attention"] for g in rec}
    assert groups == {"encoder_self", "pool"}


def test_linear_attention_cannot_translate():
    c = load(os.path.join(REPO, "configs", "translation.py") + ":runlocal")
    c.model.attention_kind = "linear"
    with pytest.raises(config_lib.ConfigError, match="linear"):
        engine.run(c)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal", [False, True])
def test_progress_is_a_bar_on_a_terminal_and_sparse_log_lines_in_a_file(tmp_path, monkeypatch, terminal):
    stderr = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    logger = logging.getLogger("attnlab")
    lines = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: lines.append(record.getMessage())
    level = logger.level
    logger.setLevel(logging.INFO)  # setLevel, not the attribute: it clears the logger's enabled-for cache
    logger.addHandler(handler)
    try:
        engine.run(mqar_config(steps=4), workdir=str(tmp_path / "run"))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    progress = [line.split(":")[0] for line in lines if line.startswith("train step")]
    if terminal:
        assert progress == [] and "\r" in stderr.getvalue() and "4/4" in stderr.getvalue()
    else:
        # The first flush, then none within 30 s, then the last step once.
        assert progress == ["train step 1/4", "train step 4/4"] and "\r" not in stderr.getvalue()
