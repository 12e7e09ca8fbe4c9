"""Unit tests of engine/: config parsing and validation, schedules, health monitor, metrics, logging,
sharding and checkpoint helpers. Each runs in well under a second or two."""
import glob
import json
import os
import re
import signal
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import attention
from engine import checkpoint as ckpt_lib
from engine import cli
from engine import config as config_lib
from engine import writer as logging_lib
from engine import metrics as metrics_lib
from engine import optim
from engine import sharding as sharding_lib


def tiny_config() -> ml_collections.ConfigDict:
    c = config_lib.base_config()
    c.model = ml_collections.ConfigDict(dict(
        d_model=32, num_heads=4, num_kv_heads=ml_collections.config_dict.placeholder(int),
        qk_dim=ml_collections.config_dict.placeholder(int), v_dim=ml_collections.config_dict.placeholder(int),
        d_ff=64, num_encoder_layers=1, num_decoder_layers=1, dropout_rate=0.0, attention_dropout_rate=0.0,
        norm="pre", position="sinusoidal", max_len=32, attention_impl="auto", dtype="float32"))
    c.data = ml_collections.ConfigDict(dict(batch_size=8))
    return c


# ------------------------------------------------------------------------------------------------ config
def test_parse_arg_types_flags_and_unknown_keys():
    a = config_lib.parse_arg("heads=8,qk_dim=32,lr=0.5,runlocal,name=x", heads=4, qk_dim=0, lr=1.0, runlocal=False,
                             name="")
    assert (a.heads, a.qk_dim, a.lr, a.runlocal, a.name) == (8, 32, 0.5, True, "x")
    assert isinstance(a.heads, int) and isinstance(a.lr, float)
    assert config_lib.parse_arg(None, heads=4).heads == 4
    with pytest.raises(ValueError, match="unknown config arg 'head'.*heads"):
        config_lib.parse_arg("head=3", heads=4)
    with pytest.raises(ValueError, match="heads='x'.*int"):
        config_lib.parse_arg("heads=x", heads=4)


def test_config_name_and_default_workdir():
    assert config_lib.config_name("configs/translation.py:heads=4,qk_dim=8") == "translation-heads=4_qk_dim=8"
    c = tiny_config()
    c.name = "run1"
    assert config_lib.default_workdir("configs/lm_copy.py", c) == os.path.join("runs", "lm_copy-run1")


@pytest.mark.parametrize("change, message", [
    (lambda c: c.model.update(d_model=30, num_heads=4), r"config.model: .*d_model=30 is not divisible by num_heads=4"),
    (lambda c: c.model.update(num_heads=4, num_kv_heads=3), r"config.model: .*num_heads=4 must be a multiple of num_kv_heads=3"),
    (lambda c: c.model.update(attention_kind="sparse"), r"config.model: .*attention_kind must be one of"),
    (lambda c: c.train.update(loss_on="everything"), r"config.train.loss_on='everything'"),
    (lambda c: c.train.update(freeze="(unclosed"), r"config.train.freeze='\(unclosed' is not a valid regular"),
    (lambda c: c.model.update(attention_impl="nope"), r"attention_impl='nope' is not a registered attention backend"),
    (lambda c: c.update(task="vision"), r"config.task='vision'; expected one of"),
    (lambda c: c.data.update(batch_size=12), r"batch_size=12 is not divisible by the 8 data-parallel devices"),
    (lambda c: c.mesh.update(model=3), r"config.mesh.model=3 does not divide the 8 available devices"),
    (lambda c: c.mesh.update(data=4, model=4), r"needs 16 devices; 8 available"),
    (lambda c: c.train.update(schedule="linear"), r"config.train.schedule='linear'"),
    (lambda c: c.model.update(position="rope", qk_dim=7), r"config.model: .*rope.*even qk_dim"),
    (lambda c: c.eval.update(decode="sample"), r"config.eval.decode='sample'"),
    (lambda c: c.eval.update(split_examples=-1), r"config.eval.split_examples=-1; expected a number >= 0"),
    (lambda c: c.wandb.update(mode="sometimes"), r"config.wandb.mode='sometimes'"),
    (lambda c: c.health.update(recover_margin=1.5), r"config.health.recover_margin=1.5; expected a number in \(0, 1\]"),
])
def test_validation_errors_name_the_field(change, message):
    c = tiny_config()
    config_lib.validate(c, 8, attention.available_backends())
    change(c)
    with pytest.raises(config_lib.ConfigError, match=message):
        config_lib.validate(c, 8, attention.available_backends())


def test_config_files_load_and_validate():
    import importlib.util

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = sorted(f for f in glob.glob(os.path.join(root, "configs", "*.py"))
                   if not os.path.basename(f).startswith("_"))  # _presets.py: helpers, not an experiment
    assert any(f.endswith("translation.py") for f in files)
    for path in files:
        spec = importlib.util.spec_from_file_location("cfg_" + os.path.basename(path)[:-3], path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for arg in (None, "runlocal", "quick"):
            try:
                c = module.get_config(arg)
            except cli.UsageError as e:  # a config whose points need an argument (single_head's chosen rate)
                assert arg is None and os.path.basename(path) in str(e), str(e)
                continue
            except ValueError as e:  # a config without a runlocal argument
                assert "unknown config arg" in str(e) and arg in ("runlocal", "quick")
                continue
            devices = c.mesh.get("context", 1) * c.mesh.model  # a context-parallel config needs its ring
            config_lib.validate(c, devices, attention.available_backends())


# ------------------------------------------------------------------------------------------------ optim
def _train_cfg(**kw):
    c = config_lib.base_config().train
    c.update(kw)
    return c


def test_rsqrt_schedule_peaks_at_warmup_then_decays_as_inverse_sqrt():
    s = optim.make_schedule(_train_cfg(schedule="rsqrt", learning_rate=1e-3, warmup_steps=100))
    assert float(s(50)) == pytest.approx(5e-4)
    assert float(s(100)) == pytest.approx(1e-3)
    assert float(s(400)) == pytest.approx(5e-4)  # sqrt(100 / 400) = 1/2
    # Vaswani et al.: d^-0.5 * min(step^-0.5, step * warmup^-1.5) with learning_rate = (d * warmup)^-0.5.
    d, w = 512, 4000
    s = optim.make_schedule(_train_cfg(schedule="rsqrt", learning_rate=(d * w) ** -0.5, warmup_steps=w))
    for step in (100, 4000, 20000):
        assert float(s(step)) == pytest.approx(d ** -0.5 * min(step ** -0.5, step * w ** -1.5), rel=1e-5)


def test_cosine_and_constant_schedules():
    s = optim.make_schedule(_train_cfg(schedule="cosine", learning_rate=1.0, warmup_steps=10, num_steps=110,
                                       final_lr_fraction=0.1))
    assert float(s(10)) == pytest.approx(1.0)
    assert float(s(110)) == pytest.approx(0.1)
    s = optim.make_schedule(_train_cfg(schedule="constant", learning_rate=2.0, warmup_steps=4))
    assert float(s(2)) == pytest.approx(1.0) and float(s(50)) == pytest.approx(2.0)


def test_optimizer_clips_and_adamw_decays_only_matrices():
    params = {"w": jnp.ones((2, 2)), "b": jnp.ones((2,))}
    tx, _ = optim.make_optimizer(_train_cfg(optimizer="adamw", schedule="constant", learning_rate=0.1,
                                            warmup_steps=0, weight_decay=0.5, grad_clip_norm=1.0))
    zero = jax.tree.map(jnp.zeros_like, params)
    updates, _ = jax.jit(tx.update)(zero, tx.init(params), params)
    assert np.allclose(updates["w"], -0.1 * 0.5) and np.allclose(updates["b"], 0.0)
    assert len(optim.make_optimizer(_train_cfg(grad_clip_norm=1.0))[0].init(params)) == 2  # clip, then adam
    assert len(optim.make_optimizer(_train_cfg(grad_clip_norm=0.0))[0].init(params)) == 1


# ------------------------------------------------------------------------------------------------ metrics
def test_attention_summary_uniform_attention_has_normalized_entropy_one():
    B, T, H, D = 2, 6, 3, 4
    seg = jnp.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])

    @jax.jit
    def summary(k, seg):
        q = jnp.zeros((B, T, H, D))  # all logits equal: uniform over the visible keys
        mask = attention.Mask(q_segment_ids=seg, kv_segment_ids=seg)
        _, stats = attention.attention(q, k, k, mask, implementation="reference", return_stats=True)
        batch = {"inputs_segmentation": seg, "targets_segmentation": seg,
                 "targets_position": jnp.broadcast_to(jnp.arange(T), (B, T))}
        from engine.tasks import TranslationTask

        vis = TranslationTask(tiny_config()).visible_keys(batch)
        return metrics_lib.attention_summary({"encoder_self": [stats, stats]}, vis)["encoder_self"]

    s = summary(jax.random.normal(jax.random.key(0), (B, T, H, D)), seg)
    assert s["entropy"].shape == (2, H)
    np.testing.assert_allclose(s["norm_entropy"], 1.0, rtol=1e-5)
    expected = (4 * np.log(4) + 6 * np.log(6)) / 10  # mean over the 10 real query rows
    np.testing.assert_allclose(s["entropy"], expected, rtol=1e-5)
    np.testing.assert_allclose(s["sink"], (4 * 0.25 + 6 / 6) / 10, rtol=1e-5)
    flat = metrics_lib.flatten_summary({"encoder_self": jax.tree.map(np.asarray, s)})
    assert "attn/encoder_self/entropy/L1H2" in flat and "attn/encoder_self/max_logit/L0" in flat
    assert "h2" in metrics_lib.format_table({"encoder_self": jax.tree.map(np.asarray, s)})


def test_peak_flops_is_measured_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_CACHE_DIR", str(tmp_path))
    mesh = sharding_lib.make_mesh(ml_collections.ConfigDict(dict(data=2, model=1)))
    peak = metrics_lib.measure_peak_flops(mesh, "float32", size=128, reps=2)
    assert peak > 0
    cached = json.load(open(tmp_path / "peak_flops.json"))
    assert list(cached.values()) == [peak]
    assert metrics_lib.measure_peak_flops(mesh, "float32", size=128, reps=2) == peak


# ------------------------------------------------------------------------------------------------ logging
def test_wandb_mode_resolution(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    assert logging_lib.resolve_wandb_mode("auto") == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert logging_lib.resolve_wandb_mode("auto") == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert logging_lib.resolve_wandb_mode("auto") == "disabled"
    assert logging_lib.resolve_wandb_mode("offline") == "offline"
    with pytest.raises(ValueError, match="config.wandb.mode='x'"):
        logging_lib.resolve_wandb_mode("x")


def test_logger_writes_jsonl_and_offline_wandb(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    c = tiny_config()
    c.wandb.update(project="p", group="g", tags=("a", "b"), name="n")
    lg = logging_lib.MetricLogger(str(tmp_path), c)
    assert lg.mode == "offline"
    lg.log(3, {"attn/cross/entropy/L0H1": 1.25, "train/loss": np.float32(2.0), "note": "text"})
    lg.log_event(3, "health_warning", kind="max_logit")
    lg.close()
    records = logging_lib.read_jsonl(str(tmp_path / "metrics.jsonl"))
    assert records[0]["step"] == 3 and records[0]["attn/cross/entropy/L0H1"] == 1.25
    assert records[1]["event"] == "health_warning"
    assert 0 < records[0]["cpu_s"] <= records[1]["cpu_s"] == pytest.approx(time.process_time(), abs=5.0)
    assert wandb_offline_has(str(tmp_path), b"attn/cross/entropy/L0H1")
    assert os.path.exists(tmp_path / "wandb_run_id")


def test_a_line_cut_short_by_a_kill_is_skipped_and_the_next_run_appends_on_a_new_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "train/loss": 2.5}\n{"step": 2, "train/lo', encoding="utf-8")
    assert logging_lib.read_jsonl(str(path)) == [{"step": 1, "train/loss": 2.5}]
    c = tiny_config()
    c.wandb.mode = "disabled"
    lg = logging_lib.MetricLogger(str(tmp_path), c)
    lg.log(2, {"train/loss": 2.25})
    lg.close()
    assert [r["step"] for r in logging_lib.read_jsonl(str(path))] == [1, 2]
    assert path.read_text(encoding="utf-8").splitlines()[1] == '{"step": 2, "train/lo'


def wandb_offline_has(workdir: str, key: bytes, timeout: float = 30.0) -> bool:
    """Whether the W&B offline run file under ``workdir`` mentions ``key`` (W&B's writer process flushes the
    file shortly after ``finish()`` returns, so poll)."""
    deadline = time.time() + timeout
    while True:
        runs = glob.glob(os.path.join(workdir, "wandb", "offline-run-*", "run-*.wandb"))
        if len(runs) == 1 and key in open(runs[0], "rb").read():
            return True
        if time.time() > deadline:
            return False
        time.sleep(0.2)


# ------------------------------------------------------------------------------------------------ sharding
def test_model_axis_shards_heads_and_mlp():
    mesh = sharding_lib.make_mesh(ml_collections.ConfigDict(dict(data=-1, model=2)))
    assert dict(mesh.shape) == {"data": 4, "model": 2}
    from engine.state import DEFAULT_RULES

    tree = {"encoder": {"layers": {"0": {
        "self_attention": {"query": {"kernel": jnp.zeros((8, 4, 2))}, "out": {"kernel": jnp.zeros((4, 2, 8))}},
        "mlp": {"wi": {"kernel": jnp.zeros((8, 16))}, "wo": {"kernel": jnp.zeros((16, 8))}}}}},
        "source_embed": {"embedding": jnp.zeros((10, 8))}}
    sh = sharding_lib.tree_shardings(tree, mesh, DEFAULT_RULES)
    layer = sh["encoder"]["layers"]["0"]
    assert layer["self_attention"]["query"]["kernel"].spec == P(None, "model", None)
    assert layer["self_attention"]["out"]["kernel"].spec == P("model", None, None)
    assert layer["mlp"]["wi"]["kernel"].spec == P(None, "model")
    assert layer["mlp"]["wo"]["kernel"].spec == P("model", None)
    assert sh["source_embed"]["embedding"].spec == P()
    with pytest.raises(ValueError, match="cannot be sharded"):
        sharding_lib.spec_for("a/query/kernel", (8, 3, 2), mesh, DEFAULT_RULES)


def test_shard_batch_splits_rows_and_rejects_uneven():
    mesh = sharding_lib.make_mesh(ml_collections.ConfigDict(dict(data=-1, model=1)))
    out = sharding_lib.shard_batch({"x": np.arange(16).reshape(8, 2)}, mesh)
    assert len(out["x"].sharding.device_set) == 8
    with pytest.raises(ValueError, match="not divisible by the 8 data-parallel devices"):
        sharding_lib.shard_batch({"x": np.zeros((6, 2))}, mesh)


# ------------------------------------------------------------------------------------------------ checkpoint
def test_checkpointer_round_trip_with_bytes_data_state(tmp_path):
    ck = ckpt_lib.Checkpointer(str(tmp_path / "ck"), max_to_keep=2, async_save=False)
    state = {"w": jnp.arange(4.0), "step": jnp.asarray(3)}
    ck.save(3, state, b"\x00grain-state")
    ck.save(5, jax.tree.map(lambda x: x + 1, state), {"epoch": 1, "batch": 7})
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state)
    restored, data_state, step = ck.restore(abstract)
    assert step == 5 and data_state == {"epoch": 1, "batch": 7}
    np.testing.assert_array_equal(restored["w"], np.arange(4.0) + 1)
    restored, data_state, step = ck.restore(abstract, step=3)
    assert data_state == b"\x00grain-state" and int(restored["step"]) == 3
    with pytest.raises(ValueError, match="no checkpoint at step 4"):
        ck.restore(abstract, step=4)
    ck.close()


def test_stop_request_turns_sigterm_into_a_flag():
    before = signal.getsignal(signal.SIGTERM)
    from engine import watchdog

    with watchdog.StopRequest() as stop:
        assert stop.check(deadline=time.time() + 60) is None
        assert stop.check(deadline=time.time() - 1) == "max_minutes"
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested() and stop.check() == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_train_loops_stop_is_announced_once_by_check_when_the_watcher_has_not_run(monkeypatch, caplog):
    from engine import watchdog

    monkeypatch.setattr(watchdog.StopRequest, "_watch", lambda self, read_fd: None)  # the watcher never reads
    with caplog.at_level("WARNING", logger="attnlab"), watchdog.StopRequest() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.check() == "SIGTERM" and stop.check() == "SIGTERM"
        stop.announce("SIGTERM")  # as the watcher would, late
    said = [r.getMessage() for r in caplog.records if "received" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("SIGTERM received: saving a checkpoint and stopping"), said


def test_the_watchdog_does_not_count_time_the_process_was_stopped():
    """A run paused with SIGSTOP (a queue pausing its workers) and continued after its watchdog limit goes on; a
    phase that outlasts the limit while the process runs is still a hang (exit 1, one line naming it)."""
    import subprocess
    import sys

    child = ("import logging, sys, time\nfrom engine import watchdog\nlogging.basicConfig(level=logging.INFO)\n"
             "watchdog.TICK_SECONDS = 0.1\n"
             "wd = watchdog.Watchdog(3.0)\nwith wd.phase('work'):\n    print('in phase', flush=True)\n"
             "    for _ in range(int(sys.argv[1])):\n        time.sleep(0.2)\nprint('done', flush=True)\n")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paused = subprocess.Popen([sys.executable, "-c", child, "2"], cwd=repo, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)  # 0.4 s of work in a 3 s limit
    assert paused.stdout.readline() == "in phase\n"
    os.kill(paused.pid, signal.SIGSTOP)
    time.sleep(6.0)  # twice the limit, stopped
    os.kill(paused.pid, signal.SIGCONT)
    out, err = paused.communicate(timeout=60)
    assert (paused.returncode, out) == (0, "done\n"), err
    assert re.search(r"the watchdog did not run for [56] s \(the process was stopped, or held up\)", err), err
    hung = subprocess.run([sys.executable, "-c", child, "100"], cwd=repo, capture_output=True, text=True, timeout=60)
    assert hung.returncode == 1 and "work did not finish within 3 s (train.watchdog_seconds): a hang" in hung.stderr


def test_multi_process_launch_detection(monkeypatch):
    from engine import runtime

    for key in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE",
                "TPU_WORKER_HOSTNAMES"):
        monkeypatch.delenv(key, raising=False)
    assert not runtime.multi_process_launch()
    assert not runtime.maybe_initialize_distributed("auto")
    monkeypatch.setenv("SLURM_NTASKS", "1")
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "localhost")
    assert not runtime.multi_process_launch()
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    assert runtime.multi_process_launch()
    monkeypatch.delenv("OMPI_COMM_WORLD_SIZE")
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "h0,h1")
    assert runtime.multi_process_launch()
    with pytest.raises(ValueError, match="--distributed='maybe'"):
        runtime.maybe_initialize_distributed("maybe")


def test_the_boot_id_is_the_kernels_first_8_hex_digits_or_empty(tmp_path):
    from engine import runtime

    path = tmp_path / "boot_id"
    path.write_text("b9f938f4-c4d7-4a19-801a-01644218616e\n")
    assert runtime.boot_id(str(path)) == "b9f938f4"
    assert runtime.boot_id(str(tmp_path / "none")) == ""


def test_logged_summaries_rebuild_the_monitor_input_and_keep_a_rerun_step_last():
    from engine import metrics as metrics_lib

    def logged(step, entropy):
        summary = {"cross": {"entropy": np.array([[entropy, 1.0]], np.float32),
                             "max_logit": np.array([[3.0, 4.0]], np.float32)}}
        return {"step": step + 5, "attn/step": step, **metrics_lib.flatten_summary(summary)}

    records = [logged(0, 2.0), logged(10, 0.5), {"step": 11, "train/loss": 1.0}, logged(10, 0.25), logged(5, 1.5)]
    out = metrics_lib.logged_summaries(records, ("entropy", "max_logit"))
    assert [s for s, _ in out] == [0, 5, 10]
    assert out[2][1]["cross"]["entropy"].tolist() == [[0.25, 1.0]]
    assert out[0][1]["cross"]["max_logit"].tolist() == [[3.0, 4.0]]


def test_the_cpu_model_names_its_generation_and_vector_instructions(tmp_path, monkeypatch):
    """Cloud CPUs share a generic model name ("AMD EPYC") across generations: family, model, stepping and the
    widest vector instruction set tell them apart; only the first processor's block is read."""
    from engine import runtime

    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\n"
                   "stepping\t: 1\nflags\t\t: fpu sse avx avx2 avx512f avx512bw\n\n"
                   "processor\t: 1\ncpu family\t: 25\nmodel name\t: Other\nflags\t\t: avx\n")
    assert runtime.cpu_model(str(x86)) == "AMD EPYC, family 26 model 2 stepping 1, avx512f"
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nBogoMIPS\t: 243.75\nFeatures\t: fp asimd sve sve2\nCPU part\t: 0xd4f\n")
    monkeypatch.setattr(runtime.platform, "processor", lambda: "aarch64")
    assert runtime.cpu_model(str(arm)) == "aarch64, sve2"
    assert runtime.cpu_model(str(tmp_path / "none")) == "aarch64"
