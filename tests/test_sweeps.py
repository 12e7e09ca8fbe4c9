"""python -m studies sweep (studies.points, studies.sweeps): points from a config's sweep(), sequential resumable runs, aggregation, W&B sweep files.

The runner is exercised end to end with a stand-in training script that writes metrics.jsonl records in
engine/loop.py's format (so these tests take seconds); the table3 sweep configs are checked for their
points against the real configs.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from studies import points as sweep
from studies import sweeps
from tests.reports import FAKE_TRAIN, TINY_CONFIG


@pytest.fixture
def setup(tmp_path, monkeypatch):
    cfg = tmp_path / "tiny_sweep.py"
    cfg.write_text(TINY_CONFIG)
    train = FAKE_TRAIN
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("CALLS_FILE", str(calls))
    return cfg, train, calls, tmp_path / "sweepdir"


def _run(cfg, train, workdir, *extra):
    return sweeps.main([f"--config={cfg}", f"--workdir={workdir}", f"--train_script={train}", *extra])


def test_points_are_named_by_what_varies(setup):
    cfg, _, _, _ = setup
    points = sweep.sweep_points(str(cfg))
    assert [p.name for p in points] == ["num_heads_1", "num_heads_8"]
    assert points[0].overrides == {"model.num_heads": 1, "model.qk_dim": 64, "seed": 0}
    assert sweep.varying_fields(points) == ["model.num_heads", "model.qk_dim"]


def test_runs_aggregates_and_skips_finished_points(setup):
    cfg, train, calls, workdir = setup
    assert _run(cfg, train, workdir, "--set=train.num_steps=3") == 0
    lines = calls.read_text().split()
    assert len(lines) == 2
    for name in ("num_heads_1", "num_heads_8"):
        marker = json.loads((workdir / name / "sweep_point.json").read_text())
        assert marker["status"] == "done" and marker["overrides"]["train.num_steps"] == "3"
        assert "--config.wandb.group=tiny_sweep" in marker["command"]
    csv_lines = (workdir / "results.csv").read_text().splitlines()
    header = csv_lines[0].split(",")
    assert header[:3] == ["point", "num_heads", "qk_dim"]
    row = dict(zip(header, csv_lines[2].split(",")))
    assert float(row["test BLEU"]) == 40.0 + 1.0 and float(row["valid perplexity"]) == 1.25 + 0.125
    assert int(row["parameters"]) == 1008 and float(row["tokens/s"]) == 500.0
    assert float(row["H decoder_self L1"]) == pytest.approx(0.2 * 4.5)  # mean over 8 heads of 0.2 * (k + 1)
    readme = (workdir / "README.md").read_text()
    assert "2 of 2 points done" in readme and "| num_heads_8 |" in readme
    assert (workdir / "metrics.png").stat().st_size > 0
    assert (workdir / "entropy_heatmaps.png").stat().st_size > 0

    assert _run(cfg, train, workdir, "--set=train.num_steps=3") == 0  # rerun: both done, nothing trained again
    assert len(calls.read_text().split()) == 2
    with pytest.raises(ValueError, match=r"num_heads_1 .*trained with other settings .*'train.num_steps': '3'.* "
                                         r"but this study asks"):
        _run(cfg, train, workdir)  # other settings in the same folder: refused, the finished point is kept
    assert len(calls.read_text().split()) == 2
    full = os.path.join(REPO, "configs/translation.py:heads=4")
    assert sweep.same_file_spec("configs/translation.py:heads=4") == sweep.same_file_spec(full) == full


def test_failed_or_interrupted_points_rerun(setup, monkeypatch):
    cfg, train, calls, workdir = setup
    monkeypatch.setenv("FAIL_POINT", "num_heads_8")
    assert _run(cfg, train, workdir) == 1
    assert not (workdir / "num_heads_8" / "sweep_point.json").exists()
    monkeypatch.delenv("FAIL_POINT")
    monkeypatch.setenv("END_REASON", "SIGTERM")  # train.py exits 0 when stopped by a signal: not finished
    assert _run(cfg, train, workdir) == 1
    monkeypatch.setenv("END_REASON", "num_steps")
    assert _run(cfg, train, workdir) == 0
    names = [os.path.basename(p) for p in calls.read_text().split()]
    assert names == ["num_heads_1", "num_heads_8", "num_heads_8", "num_heads_8"]
    assert "2 of 2 points done" in (workdir / "README.md").read_text()


def test_records_keep_finished_points_without_their_run_folders(setup, tmp_path):
    """A finished point writes a record; with the record, the point is never trained again (here: the run
    folders deleted, as in a fresh checkout); a finished run without a record gets one without retraining."""
    cfg, train, calls, workdir = setup
    records = tmp_path / "records"
    assert _run(cfg, train, workdir, "--point=num_heads_1", "--set=train.num_steps=3") == 0  # no records yet
    assert _run(cfg, train, workdir, f"--records={records}", "--set=train.num_steps=3") == 0
    assert [os.path.basename(p) for p in calls.read_text().split()] == ["num_heads_1", "num_heads_8"]
    rec = sweep.read_record(str(records / "num_heads_1.json"))
    assert rec["point"] == "num_heads_1" and rec["config"] == str(cfg)  # outside the repository: absolute path
    assert rec["overrides"] == {"train.num_steps": "3", "model.num_heads": 1, "model.qk_dim": 64, "seed": 0}
    assert rec["steps"] == 10 and rec["params"] == 1001 and rec["end_reason"] == "num_steps"
    assert rec["settings_sha"] == sweep.settings_hash(str(cfg), rec["overrides"])
    assert rec["validation"] == {"perplexity": 11.0} and rec["test"] == {"bleu": 13.0}
    assert rec["curve"]["step"] == [10] and rec["curve"]["train_loss"] == [2.0]
    assert rec["bleu_sentence_stats"] == {"rows": None, "reason": "no decoded hypotheses logged"}
    assert rec["commit"] and rec["wall_s"] is not None and rec["median_step_s"] == 0.25
    assert rec["device"] == "cpu cpu x1" and rec["matmul_precision"] == "default"
    assert rec["cpu"] == "Fake CPU" and rec["software"] == {"python": "3.11.0", "jax": "0.0.1"}

    shutil.rmtree(workdir)
    assert _run(cfg, train, workdir, f"--records={records}", "--set=train.num_steps=3") == 0
    assert len(calls.read_text().split()) == 2
    with pytest.raises(ValueError, match=r"sweep point num_heads_1 \(record .*num_heads_1.json\) was trained with other "
                                         r"settings .*"
                       r"'train.num_steps': '3'.* move that record away"):
        _run(cfg, train, workdir, f"--records={records}", "--set=train.num_steps=4")
    assert len(calls.read_text().split()) == 2


def test_only_selected_points_and_list(setup, capsys):
    cfg, train, calls, workdir = setup
    assert _run(cfg, train, workdir, "--point=num_heads_8") == 0
    assert [os.path.basename(p) for p in calls.read_text().split()] == ["num_heads_8"]
    assert "1 of 2 points done" in (workdir / "README.md").read_text()
    assert _run(cfg, train, workdir, "--list") == 0
    out = capsys.readouterr().out
    assert "--config.model.num_heads=1" in out and "--config.model.qk_dim=64" in out
    with pytest.raises(ValueError, match="not points of this sweep"):
        _run(cfg, train, workdir, "--point=nope")


def test_bad_override_field_is_named(setup):
    cfg, train, _, workdir = setup
    with pytest.raises(ValueError, match="no field 'train.num_stepz'"):
        _run(cfg, train, workdir, "--set=train.num_stepz=3")


def test_set_of_a_field_the_points_set_is_refused_before_training(setup):
    """A --set the points override themselves would be silently ignored: refused, naming field and point."""
    cfg, train, calls, workdir = setup
    with pytest.raises(ValueError, match=r"--set model.qk_dim=8: point num_heads_1 sets model.qk_dim=64 itself"):
        _run(cfg, train, workdir, "--set=model.qk_dim=8")
    assert not calls.exists()
    cli = subprocess.run([sys.executable, "-m", "studies", "sweep", f"--config={cfg}", f"--workdir={workdir}",
                          "--point=num_heads_8", "--set=model.qk_dim=4"], capture_output=True, text=True,
                         timeout=120, cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO))
    assert cli.returncode == 1 and cli.stderr.strip().splitlines() == [
        "ERROR --set model.qk_dim=4: point num_heads_8 sets model.qk_dim=8 itself, and a point's own value wins; "
        "change it through the config argument or drop the --set"]


def test_wandb_sweep_file(setup, tmp_path):
    cfg, train, calls, workdir = setup
    out = tmp_path / "sweep.yaml"
    assert _run(cfg, train, workdir, f"--wandb_sweep={out}", "--set=train.num_steps=3") == 0
    text = out.read_text()
    assert "method: grid" in text and "-m\n  - studies\n  - sweep" in text and "name: tiny_sweep" in text
    assert '"num_heads_1"' in text and '"--set=train.num_steps=3"' in text and "${args}" in text
    assert not calls.exists()


def test_wandb_agent_run_id_is_handed_to_train(setup, monkeypatch):
    cfg, train, _, workdir = setup
    monkeypatch.setenv("WANDB_SWEEP_ID", "abc")
    monkeypatch.setenv("WANDB_RUN_ID", "run123")
    assert _run(cfg, train, workdir, "--point=num_heads_1") == 0
    assert (workdir / "num_heads_1" / "wandb_run_id").read_text() == "run123"


@pytest.mark.parametrize("name,arg,expected", [
    ("table3_heads.py", "", {(h, 128 // h, 128 // h, s) for h in (1, 2, 4, 8, 16, 32) for s in (0, 1, 2)}),
    ("table3_heads.py", "aa", {(8, 16, 16, s) for s in (3, 4, 5)}),  # the A/A control row
    ("table3_heads.py", "more_h1", {(1, 128, 128, s) for s in (3, 4, 5)}),  # the single-head extension row
    ("table3_heads.py", "h1_base_dk", {(1, 16, 128, s) for s in (0, 1, 2)}),  # one head at the base's d_k
    ("table3_dk.py", "", {(None, dk, None, s) for dk in (8, 4) for s in (0, 1, 2)}),
    ("table3_heads.py", "d_model=256,seeds=1", {(h, 256 // h, 256 // h, 0) for h in (1, 2, 4, 8, 16, 32)}),
    ("table3_dk.py", "d_model=256,seeds=1", {(None, dk, None, 0) for dk in (16, 8)}),
    ("table3_heads.py", "quick", {(1, 64, 64, 0), (8, 8, 8, 0)}),  # quick: two points, not 18
])
def test_table3_sweeps(name, arg, expected):
    spec = os.path.join(REPO, "configs", name) + (f":{arg}" if arg else "")
    points = sweep.sweep_points(spec)
    got = {(p.overrides.get("model.num_heads"), p.overrides["model.qk_dim"], p.overrides.get("model.v_dim"),
            p.overrides["seed"]) for p in points}
    assert got == expected
    sweep.check_overrides(spec, points, {})
    config = sweep.load_config_module(os.path.join(REPO, "configs", name)).get_config("seed=1")
    assert config.seed == 1 and config.model.num_heads == 8 and config.model.v_dim == 16
    assert config.model.qk_dim == 16  # both default to h = 8, d_k = d_model / 8 at CPU scale (d_model 128)
    assert config.train.num_steps == 2400 and config.eval.split_examples == 0 and not config.model.qk_layernorm
    assert config.train.eval_every == 600 and config.eval.bleu_examples == 0  # validation curve, no decoding
    wide = sweep.load_config_module(os.path.join(REPO, "configs", name)).get_config("d_model=256")
    assert wide.model.d_model == 256 and wide.model.d_ff == 1024 and wide.model.qk_dim == 32

def test_table3_dk_refuses_the_aa_argument():
    with pytest.raises(ValueError, match="aa .* rows \\(A\\) argument"):
        sweep.sweep_points(os.path.join(REPO, "configs", "table3_dk.py") + ":aa")
    with pytest.raises(ValueError, match="more_h1 .* rows \\(A\\) argument"):
        sweep.sweep_points(os.path.join(REPO, "configs", "table3_dk.py") + ":more_h1")
    with pytest.raises(ValueError, match="h1_base_dk .* rows \\(A\\) argument"):
        sweep.sweep_points(os.path.join(REPO, "configs", "table3_dk.py") + ":h1_base_dk")
    with pytest.raises(ValueError, match="at most one of aa, more_h1, h1_base_dk"):
        sweep.sweep_points(os.path.join(REPO, "configs", "table3_heads.py") + ":aa,more_h1")
    module = sweep.load_config_module(os.path.join(REPO, "configs", "table3_heads.py"))
    one = module.get_config("heads=1,qk_dim=16")
    assert (one.model.num_heads, one.model.qk_dim, one.model.v_dim) == (1, 16, 128)
    with pytest.raises(ValueError, match="qk_dim=-4"):
        module.get_config("heads=1,qk_dim=-4")


def test_heads_depth_sweep_is_parameter_matched():
    spec = os.path.join(REPO, "configs", "heads_depth.py")
    points = sweep.sweep_points(spec)
    sweep.check_overrides(spec, points, {})
    got = {(p.overrides["model.num_heads"], p.overrides["model.num_encoder_layers"],
            p.overrides["model.num_decoder_layers"], p.overrides["model.qk_layernorm"],
            p.overrides.get("model.norm", "pre"), p.overrides.get("train.warmup_steps", 100), p.overrides["seed"])
           for p in points}
    archs = ((8, 3), (1, 6), (1, 12), (1, 24))
    variants = ((False, "pre", 100), (True, "pre", 100), (False, "post", 100), (False, "post", 800),
                (False, "admin", 100))
    assert len(points) == 66
    assert got == {(h, n, n, q, norm, w, s) for h, n in archs for q, norm, w in variants for s in (0, 1, 2)}
    # the long-budget arm after Admin: 8 heads x 3+3 and 1 head x 6+6, pre-LN, QK-LN off, 3 x 2,400 steps
    long = points[48:54]
    assert all(p.overrides["train.num_steps"] == 7200 and not p.overrides["model.qk_layernorm"]
               and "model.norm" not in p.overrides for p in long)
    assert [(p.overrides["model.num_heads"], p.overrides["model.num_encoder_layers"], p.overrides["seed"])
            for p in long] == [(h, n, s) for s in (0, 1, 2) for h, n in ((8, 3), (1, 6))]
    assert all("train.num_steps" not in p.overrides for p in points[:48] + points[54:])
    # the Admin arm, the long-budget arm, then the long-warmup arm come after the first three, so the points that
    # ran before keep their order
    assert all(p.overrides.get("model.norm") == "admin" for p in points[36:48])
    assert all("train.warmup_steps" in p.overrides for p in points[54:])
    # pre-LN points keep their names; post-LN points add the norm
    names = {p.name for p in points}
    assert {"num_encoder_layers_24-qk_layernorm_false-seed_2",
            "num_encoder_layers_24-qk_layernorm_false-seed_2-norm_post",
            "num_encoder_layers_24-qk_layernorm_false-seed_2-norm_post-warmup_steps_800",
            "num_encoder_layers_24-qk_layernorm_false-seed_2-norm_admin"} <= names
    module = sweep.load_config_module(spec)
    for qkln in ("", ",qkln"):
        shallow = module.get_config("arch=h8_L3" + qkln)
        assert (shallow.model.num_heads, shallow.model.qk_dim, shallow.model.d_ff) == (8, 16, 512)
        assert shallow.train.num_steps == 2400 and shallow.model.d_model == 128
        n_shallow = module.layer_params(shallow)
        for arch, d_k, d_ff in (("h1_L6", 64, 256), ("h1_L12", 32, 128), ("h1_L24", 16, 64)):
            deep = module.get_config(f"arch={arch}" + qkln)
            assert (deep.model.num_heads, deep.model.qk_dim, deep.model.v_dim, deep.model.d_ff) == (1, d_k, d_k, d_ff)
            assert deep.model.qk_layernorm == shallow.model.qk_layernorm == bool(qkln)
            # heads x d_k x layers and d_ff x layers as in the shallow model: only LayerNorms and biases grow
            assert d_k * deep.model.num_encoder_layers == 8 * 16 * 3 and d_ff * deep.model.num_decoder_layers == 512 * 3
            assert 0 < module.layer_params(deep) - n_shallow <= 0.035 * n_shallow  # 24+24 with QK-LN: +3.05%
    with pytest.raises(ValueError, match="arch='h2_L4'"):
        module.get_config("arch=h2_L4")
    post = module.get_config("arch=h1_L24,post")
    assert post.model.norm == "post" and not post.model.qk_layernorm and module.get_config().model.norm == "pre"
    assert module.get_config("arch=h1_L6,long").train.num_steps == 7200
    assert module.get_config("arch=h1_L6,long").train.eval_every == 600  # the 2,400-step points' cadence
    with pytest.raises(ValueError, match="with long and another arm"):
        module.get_config("arch=h1_L6,long,qkln")
    with pytest.raises(ValueError, match="both post and qkln"):
        module.get_config("arch=h1_L24,post,qkln")
    warm = module.get_config("arch=h1_L24,post,warmup=800")
    assert warm.train.warmup_steps == 800 and warm.model.norm == "post" and post.train.warmup_steps == 100
    with pytest.raises(ValueError, match="warmup=-1"):
        module.get_config("arch=h1_L24,post,warmup=-1")
    admin = module.get_config("arch=h1_L24,admin")
    assert admin.model.norm == "admin" and not admin.model.qk_layernorm and admin.train.warmup_steps == 100
    assert module.layer_params(admin) - module.layer_params(post) == 128 * (2 * 24 + 3 * 24)  # one scale a sublayer
    with pytest.raises(ValueError, match="admin and post"):
        module.get_config("arch=h1_L24,admin,post")


def test_attention_trace_replays_the_online_health_monitor(tmp_path):
    """A real run's committed attention trace, replayed through the health monitor with the run's thresholds,
    gives the warnings the monitor logged during training, value for value; other thresholds give others."""
    import engine
    import ml_collections
    from studies.inprocess import load
    from engine import health as health_lib

    c = load(os.path.join(REPO, "configs", "mqar_grid.py") + ":quick")
    c.train.update(num_steps=16, log_every=1, stats_every=1, warmup_steps=1, learning_rate=3e-2)
    # Thresholds at the run's own early values, so heads enter and leave bad states while it trains.
    c.health.update(baseline_checks=1, init_std_high=0.0, max_logit=0.0, growth_floor=0.0, growth_ratio=0.0,
                    growth_rate=0.0, growth_window=1, loss_rise=-1e9)
    workdir = tmp_path / "run"
    engine.run(c, str(workdir))
    logged = [r for r in sweep.read_records(str(workdir / sweep.METRICS)) if r.get("event") == "health_warning"]
    assert len({(r["kind"], r["at_step"]) for r in logged}) >= 3

    record = tmp_path / "points" / "p.json"
    path = sweep.save_attention_trace(str(record), str(workdir))
    assert path == sweep.attention_trace_path(str(record)) and path.endswith("p.attention.json.gz")
    trace = sweep.read_attention_trace(path)
    assert trace["steps"] == list(range(16)) and len(trace["loss"]) == len(trace["loss_step"]) == 16
    replayed = health_lib.replay(sweep.trace_observations(trace), ml_collections.ConfigDict(trace["health"]),
                                 trace["skip_groups"], list(zip(trace["loss_step"], trace["loss"])))
    assert [(w.step, w.kind, w.group, w.layer, w.head, w.value, w.threshold) for w in replayed] == [
        (r["at_step"], r["kind"], r["group"], r["layer"], r["head"], r["value"], r["threshold"]) for r in logged]
    defaults = health_lib.replay(sweep.trace_observations(trace), config_defaults_health())
    assert len(defaults) < len(replayed)


def config_defaults_health():
    from engine import config as config_lib

    return config_lib.base_config().health


def test_a_resume_supersedes_the_killed_runs_later_warnings():
    """A run killed after logging warnings at steps 200 and 210 resumes from its step-200 checkpoint and warns
    again at 210: the record counts the resumed run's warnings once, and keeps the killed run's earlier ones."""
    def warn(at, kind="max_logit"):
        return {"event": "health_warning", "kind": kind, "group": "cross", "at_step": at, "step": at + 5}

    records = [{"event": "start", "step": 0}, warn(100), warn(200), warn(210, "entropy_collapse"),
               {"event": "start", "step": 200, "resumed": True}, warn(210), warn(300)]
    got = sweep.current_events(records, "health_warning")
    assert [(w["at_step"], w["kind"]) for w in got] == [(100, "max_logit"), (210, "max_logit"), (300, "max_logit")]
    st = sweep.stability(records)
    assert st["health_warnings"] == 3 and st["health_warning_kinds"] == {"max_logit/cross": 3}
