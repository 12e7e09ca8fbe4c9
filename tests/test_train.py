"""End-to-end training on a tiny config: train, checkpoint, kill, resume; 1 vs 8 devices; NaN guard; W&B
offline entropy keys; eval restores and decodes; a synthetic decoder-only task; train.py's CLI errors.

Runs use 300 real verse pairs of the embedded corpus as a bring-your-own TSV, a 1+1-layer model of width 32
and a few steps. Compiled programs are cached on disk for the module, so repeated runs compile once.
"""
import json
import os
import platform
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

import data
import models
from data.builders import bible_es_en
from engine import checkpoint as ckpt_lib
from engine import config as config_lib
from engine import loop, restore, runtime, state, tasks
from engine import writer as logging_lib
from kill_at import KillAt
from test_engine import wandb_offline_has

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 8


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rows = bible_es_en.read_pairs(bible_es_en.CORPUS_PATH)[:300]
    path = tmp_path_factory.mktemp("corpus") / "pairs.tsv"
    path.write_text("".join(f"{r[3]}\t{r[4]}\n" for r in rows), encoding="utf-8")
    return str(path)


def tiny_translation_config(corpus: str, cache: str, *, devices: int = 1) -> ml_collections.ConfigDict:
    c = config_lib.base_config()
    c.task = "translation"
    c.data = data.default_translation_config()
    c.data.update(source="text_files", train_files=corpus, cache_dir=cache, vocab_size=200, max_source_len=24,
                  max_target_len=24, batch_size=8, eval_batch_size=8, batch_multiple=8, validation_fraction=0.05,
                  test_fraction=0.05, prefetch=0)
    c.model = ml_collections.ConfigDict(dict(
        d_model=32, num_heads=2, d_ff=64, num_encoder_layers=1, num_decoder_layers=1, dropout_rate=0.1,
        attention_dropout_rate=0.0, norm="pre", position="sinusoidal", max_len=32, dtype="float32",
        attention_impl="auto"))
    c.mesh.data = devices
    c.train.update(learning_rate=3e-3, warmup_steps=4, num_steps=STEPS, log_every=1, stats_every=4,
                   checkpoint_every=4, eval_every=0, async_checkpoint=False, peak_flops=1e12)
    c.eval.update(decode="greedy", decode_batch_size=8, length_bucket=32, max_decode_extra=4, num_samples=2,
                  heatmap_examples=1, at_end=False)
    c.health.uniform_after_checks = 0
    c.wandb.mode = "disabled"
    return c


BUILD_DATA = tasks.TranslationTask.build_data


def killing_data_at(at: int):
    """A ``TranslationTask.build_data`` whose training iterator sends this process SIGTERM at batch ``at``."""
    def build_data(self, wd, process_index, process_count):
        d = BUILD_DATA(self, wd, process_index, process_count)
        train_iter = d.train_iter
        d.train_iter = lambda: KillAt(train_iter(), at=at)
        return d
    return build_data


def losses(workdir: str) -> dict[int, float]:
    return {r["step"]: r["train/loss"] for r in logging_lib.read_jsonl(os.path.join(workdir, "metrics.jsonl"))
            if "train/loss" in r}


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, corpus):
    """An uninterrupted run on one device, W&B offline, evaluated at the end."""
    root = tmp_path_factory.mktemp("baseline")
    c = tiny_translation_config(corpus, str(root / "cache"))
    c.wandb.mode = "offline"
    c.eval.at_end = True
    c.train.eval_every = 4  # one evaluation during training: validation loss, BLEU on a subset, heatmaps
    c.eval.bleu_examples = 4
    workdir = str(root / "run")
    final = loop.run(c, workdir)
    return c, workdir, final


def test_uninterrupted_run_logs_metrics_health_and_evaluates(baseline):
    c, workdir, final = baseline
    assert final["step"] == STEPS and final["stop_reason"] == "num_steps"
    records = logging_lib.read_jsonl(os.path.join(workdir, "metrics.jsonl"))
    start = next(r for r in records if r.get("event") == "start")
    assert start["device"] == "cpu cpu x8" and start["matmul_precision"] == "default"  # what a record keeps
    assert start["cpu"] == runtime.cpu_model() and start["software"]["jax"] == jax.__version__
    assert start["host"] == platform.node() and start["boot"] == runtime.boot_id()
    assert set(start["software"]) >= {"python", "jax", "jaxlib", "flax", "optax", "numpy"}
    keys = set().union(*records)
    for key in ("train/loss", "train/perplexity", "train/learning_rate", "train/grad_norm", "perf/tokens_per_sec",
                "perf/mfu", "validation/perplexity", "validation_subset/bleu", "test/bleu", "test/chrf",
                "health/logit_growth", "attn/step"):
        assert key in keys, key
    for group in ("encoder_self", "decoder_self", "cross"):
        for field in ("entropy", "max_logit", "sink", "norm_entropy"):
            assert f"attn/{group}/{field}/L0H1" in keys
    stats_steps = sorted(r["attn/step"] for r in records if "attn/cross/entropy/L0H0" in r)
    assert stats_steps == [0, 4, STEPS - 1]
    assert losses(workdir)[STEPS] < losses(workdir)[1]
    bleu = [r for r in records if r.get("event") == "bleu"][-1]
    assert bleu["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    hyps = open(bleu["hypotheses"], encoding="utf-8").read().splitlines()
    assert len(hyps) == bleu["sentences"] == len(tasks.get_task(c).build_data(workdir, 0, 1).examples("test"))
    assert sorted(os.listdir(os.path.join(workdir, "heatmaps"))) == sorted(
        [f"step{s}_validation0_{g}.png" for s in (4, 8) for g in ("cross", "decoder_self", "encoder_self")]
        + [f"step{s}_validation0.html" for s in (4, 8)])
    page = open(os.path.join(workdir, "heatmaps", "step8_validation0.html"), encoding="utf-8").read()
    assert "<script" in page and "cross" in page and "http" not in page.split("<script", 1)[1]
    assert [list(r["paths"]) for r in records if r.get("event") == "html"] == [["explorer/validation0"]] * 2
    assert ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints")).all_steps() == [4, 8]
    assert wandb_offline_has(workdir, b"attn/cross/entropy/L0H1")


def test_kill_and_resume_matches_the_uninterrupted_run(baseline, tmp_path, corpus, monkeypatch):
    c, base_dir, _ = baseline
    c = tiny_translation_config(corpus, c.data.cache_dir)
    workdir = str(tmp_path / "run")
    monkeypatch.setattr(tasks.TranslationTask, "build_data", killing_data_at(5))
    first = loop.run(c, workdir)
    assert first["stop_reason"] == "SIGTERM" and first["step"] == 6  # the step in flight completes
    assert ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints")).latest_step() == 6
    monkeypatch.setattr(tasks.TranslationTask, "build_data", BUILD_DATA)
    second = loop.run(c, workdir)
    assert second["step"] == STEPS
    resumed, uninterrupted = losses(workdir), losses(base_dir)
    assert sorted(resumed) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        assert resumed[step] == pytest.approx(uninterrupted[step], abs=1e-6), step


def test_a_run_stopped_in_the_evaluation_of_its_saved_step_evaluates_it_on_resume(baseline, tmp_path, corpus,
                                                                                  monkeypatch):
    """Checkpoints are saved before the evaluation of the same step: a run stopped during that evaluation resumes
    at the step and evaluates it first (the resume supersedes what the stopped run logged there), and an early
    stop that evaluation meets ends the run there, as it would have the unbroken run; without one, training goes
    on and the first step after the resume (it compiles) is left out of the throughput, as after any resume."""
    import shutil

    from engine import evaluation

    c, _, _ = baseline
    c = tiny_translation_config(corpus, c.data.cache_dir)
    c.train.update(eval_every=4, stats_every=0, early_stop_metric="validation/perplexity", early_stop_value=1e9,
                   early_stop_mode="min")
    workdir = str(tmp_path / "run")
    evaluate = evaluation.Evaluator.evaluate

    def stopped(self, params, step, *, final):
        raise KeyboardInterrupt(f"stopped in the evaluation of step {step}")

    monkeypatch.setattr(evaluation.Evaluator, "evaluate", stopped)
    with pytest.raises(KeyboardInterrupt):
        loop.run(c, workdir)
    assert ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints")).latest_step() == 4
    monkeypatch.setattr(evaluation.Evaluator, "evaluate", evaluate)
    shutil.copytree(workdir, tmp_path / "no_early_stop")
    final = loop.run(c, workdir)
    assert (final["step"], final["stop_reason"]) == (4, "early_stop")

    def after_resume(workdir):
        records = logging_lib.read_jsonl(os.path.join(workdir, "metrics.jsonl"))
        return [r for r in records[max(i for i, r in enumerate(records) if r.get("event") == "start"):]
                if "event" not in r]

    assert [r["step"] for r in after_resume(workdir) if "validation/perplexity" in r] == [4]
    c.train.early_stop_metric = ""
    assert loop.run(c, str(tmp_path / "no_early_stop"), allow_config_change=True)["step"] == STEPS
    records = after_resume(str(tmp_path / "no_early_stop"))
    assert [r["step"] for r in records if "validation/perplexity" in r] == [4]
    trained = [r for r in records if "train/loss" in r]
    assert trained[0]["step"] == 5 and "perf/tokens_per_sec" not in trained[0]
    assert all("perf/tokens_per_sec" in r for r in trained[1:])


def test_a_resumed_run_warns_as_the_unbroken_run(baseline, tmp_path, corpus, monkeypatch):
    """The health monitor after a resume keeps its early baselines (rebuilt from metrics.jsonl): with thresholds
    relative to those baselines, the resumed run logs and returns the unbroken run's warnings."""
    c, _, _ = baseline
    c = tiny_translation_config(corpus, c.data.cache_dir)
    c.train.stats_every = 1
    # Logit growth flagged whenever a layer's spread grew since the last check (thresholds at zero), and cleared
    # as soon as it did not: layers enter and leave the state, with warnings after the resume.
    c.health.update(growth_ratio=0.0, growth_floor=0.0, growth_rate=1.0, growth_window=1, loss_rise=-1e9,
                    max_logit=1e9, init_std_high=1e9, init_std_low=0.0, uniform_after_checks=10**6,
                    recover_margin=1.0)

    def logged(workdir):
        records = logging_lib.read_jsonl(os.path.join(workdir, "metrics.jsonl"))
        return [(r["at_step"], r["kind"], r["group"], r["layer"], r["head"]) for r in records
                if r.get("event") == "health_warning"]

    unbroken = loop.run(c, str(tmp_path / "unbroken"))
    workdir = str(tmp_path / "resumed")
    monkeypatch.setattr(tasks.TranslationTask, "build_data", killing_data_at(5))
    assert loop.run(c, workdir)["step"] == 6
    monkeypatch.setattr(tasks.TranslationTask, "build_data", BUILD_DATA)
    resumed = loop.run(c, workdir)
    want = logged(str(tmp_path / "unbroken"))
    assert any(step >= 6 for step, *_ in want)  # warnings after the resume step, against the early baselines
    assert logged(workdir) == want
    assert [(w.step, w.kind, w.group, w.layer, w.head) for w in resumed["health_warnings"]] == want
    assert [s for s, _ in resumed["attention"]] == [s for s, _ in unbroken["attention"]] == list(range(STEPS))


def test_eight_devices_give_the_same_loss_curve(baseline, tmp_path, corpus):
    c, base_dir, _ = baseline
    workdir = str(tmp_path / "run")
    c8 = tiny_translation_config(corpus, c.data.cache_dir, devices=8)
    c8.train.update(stats_every=0, checkpoint_every=0)
    c8.eval.update(at_end=True, split_examples=3, heatmap_examples=0)  # decoding on 8 devices, capped test set
    final = loop.run(c8, workdir)
    eight, one = losses(workdir), losses(base_dir)
    for step in range(1, STEPS + 1):
        assert eight[step] == pytest.approx(one[step], rel=1e-4, abs=1e-5), step
    bleu = [r for r in logging_lib.read_jsonl(os.path.join(workdir, "metrics.jsonl")) if r.get("event") == "bleu"]
    assert [b["sentences"] for b in bleu] == [3] and 0 <= final["test/bleu"] <= 100
    assert len(open(bleu[0]["hypotheses"], encoding="utf-8").read().splitlines()) == 3


def test_nan_guard_names_step_and_quantity_and_keeps_last_checkpoint(baseline, tmp_path, corpus, monkeypatch):
    c, _, _ = baseline
    c = tiny_translation_config(corpus, c.data.cache_dir)
    c.train.stats_every = 0
    workdir = str(tmp_path / "run")
    task = tasks.get_task(c)
    it = task.build_data(workdir, 0, 1).train_iter()
    poisoned = [next(it) for _ in range(6)][5]  # the batch of step 5
    marker = int(poisoned["inputs"].sum())
    loss_terms = tasks.TranslationTask.loss_terms

    def nan_on_marked_batch(self, logits, batch, smoothing, weights=None):
        terms = loss_terms(self, logits, batch, smoothing, weights)
        hit = jnp.sum(batch["inputs"]) == marker
        return dict(terms, loss_sum=terms["loss_sum"] * jnp.where(hit, jnp.nan, 1.0))

    monkeypatch.setattr(tasks.TranslationTask, "loss_terms", nan_on_marked_batch)
    with pytest.raises(loop.NonFiniteError, match=r"non-finite loss and gradient norm at step 5.*"
                                                      r"last good checkpoint is step 4"):
        loop.run(c, workdir)
    ck = ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints"))
    assert ck.all_steps() == [4]
    # The kept checkpoint is the state after step 4, bit for bit: the same program run for 4 steps only (the
    # baseline compiles another program, which XLA may round differently, and Adam's first steps turn
    # rounding-level gradient differences into lr-sized updates).
    clean_dir = str(tmp_path / "four_steps")
    c.train.num_steps = 4
    loop.run(c, clean_dir)
    clean = ckpt_lib.Checkpointer(os.path.join(clean_dir, "checkpoints"))
    raw = lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype)  # noqa: E731
    setup, init = state.build(c, task, loop.sharding_lib.make_mesh(c.mesh), 200)
    abstract = jax.tree.map(raw, jax.eval_shape(init))
    mine, _, _ = ck.restore(abstract)
    theirs, _, _ = clean.restore(abstract, step=4)
    for a, b in zip(jax.tree.leaves(mine["params"]), jax.tree.leaves(theirs["params"])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    ck.close()
    clean.close()


def test_eval_restores_and_decodes(baseline):
    c, workdir, final = baseline
    c = tiny_translation_config(c.data.train_files, c.data.cache_dir)
    r = restore.evaluate_checkpoint(c, workdir, step=4, split="validation", heatmap_examples=(0,))
    assert r["step"] == 4 and r["split"] == "validation"
    assert np.isfinite(r["validation/perplexity"]) and 0 <= r["validation/bleu"] <= 100
    assert os.path.exists(r["hypotheses_path"]) and len(r["heatmaps"]) == 3
    assert "encoder_self entropy" in r["tables"] and "cross max_logit" in r["tables"]
    assert np.asarray(r["attention"]["decoder_self"]["entropy"]).shape == (1, 2)
    assert os.path.exists(os.path.join(r["out_dir"], "results.json"))


def test_eval_takes_the_runs_recorded_config_and_explains_a_differing_one(baseline):
    c, workdir, _ = baseline
    config, notes = restore.eval_config(workdir, None)
    assert config.model.d_model == 32 and notes == [f"config: the run's own, {os.path.join(workdir, 'config.json')}"]
    r = restore.evaluate_checkpoint(config, workdir, step=8, split="validation")
    assert r["decoding"] == "greedy search" and 0 <= r["validation/bleu"] <= 100
    other = tiny_translation_config(c.data.train_files, c.data.cache_dir)
    other.model.d_model = 64
    other.eval.beam_size = 8
    with pytest.raises(config_lib.ConfigError) as e:
        restore.eval_config(workdir, other)
    message = str(e.value)
    assert "1 model/data field(s): model.d_model: 32 in the run, 64 in --config" in message
    assert "\n" not in message and "eval.beam_size" not in message
    other.model.d_model = 32
    _, notes = restore.eval_config(workdir, other)
    assert "config: eval.beam_size: 4 in the run, 8 in --config (using --config's)" in notes


def test_synthetic_decoder_only_task_reports_masked_accuracy(tmp_path, monkeypatch):
    c = config_lib.base_config()
    c.task = "lm"
    c.data = data.default_synthetic_config()
    c.data.update(task="copy", vocab_size=16, seq_len=16, batch_size=8, min_items=2, max_items=6,
                  num_eval_batches=1, prefetch=0)
    c.model = ml_collections.ConfigDict(dict(
        d_model=32, num_heads=2, d_ff=64, num_encoder_layers=0, num_decoder_layers=1, dropout_rate=0.0,
        attention_dropout_rate=0.0, norm="pre", position="learned", max_len=16, dtype="float32",
        attention_impl="auto"))
    c.mesh.data = 1
    c.train.update(learning_rate=3e-3, warmup_steps=2, num_steps=4, log_every=2, stats_every=2,
                   checkpoint_every=0, async_checkpoint=False, peak_flops=1e12)
    c.wandb.mode = "disabled"
    built = []  # every TransformerConfig made (validated) during the run
    post_init = models.TransformerConfig.__post_init__
    monkeypatch.setattr(models.TransformerConfig, "__post_init__", lambda self: (built.append(1), post_init(self)))
    final = loop.run(c, str(tmp_path / "run"))
    assert len(built) == 1  # by engine.config.validate; the data's vocabulary and other backends are bound to it
    assert 0.0 <= final["validation/accuracy"] <= 1.0 and np.isfinite(final["validation/perplexity"])
    records = logging_lib.read_jsonl(str(tmp_path / "run" / "metrics.jsonl"))
    assert any("attn/decoder_self/entropy/L0H1" in r for r in records)
    assert not any("attn/cross/entropy/L0H0" in r for r in records)


def test_train_py_reports_config_errors_clearly(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    cmd = [sys.executable, os.path.join(REPO, "train.py"), "--config=" + os.path.join(REPO, "configs", "translation.py"),
           f"--workdir={tmp_path / 'run'}", "--config.model.num_heads=3"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if "num_heads" in line]  # validated once: one line
    assert len(errors) == 1 and "ERROR" in errors[0], proc.stderr
    assert "d_model=128 is not divisible by num_heads=3" in errors[0]
    assert "Traceback" not in proc.stderr


def test_diagnose_checkpoint_writes_the_doctor_report(baseline):
    c, workdir, _ = baseline
    c = tiny_translation_config(c.data.train_files, c.data.cache_dir)
    c.doctor.update(max_batches=1, rows_per_batch=4)
    d = restore.diagnose_checkpoint(c, workdir, step=8, split="validation")
    assert d["step"] == 8 and d["out_dir"].endswith(os.path.join("eval", "diagnose_step8"))
    assert re.fullmatch(r"\d+ fail, \d+ warn, \d+ ok", d["summary"])
    report = open(os.path.join(d["out_dir"], "report.md"), encoding="utf-8").read()
    assert d["summary"] in report and "padding_invariance" in report
    records = json.load(open(os.path.join(d["out_dir"], "report.json"), encoding="utf-8"))
    assert {"padding_weight", "causal_leakage", "score_std", "head_permutation"} <= {
        r["check"] for r in (records["findings"] if isinstance(records, dict) else records)}
