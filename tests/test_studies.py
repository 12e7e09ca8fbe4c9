"""A tiny study end to end: its points train (a stand-in train.py, and the real engine in-process), leave records
with the study's settings hash, are never retrained, refuse a changed setting naming the point, and the report
carries the claims' verdicts; the running sweep's progress line; the study command line's errors."""
import dataclasses
import json
import os
import subprocess
import threading
import time
import warnings

import pytest

from engine import runtime
from engine import workdir as workdir_lib
from engine.workdir import Lock
from studies import cli, commands, points, runner, specs
from studies import study as study_lib
from studies.claims import Claim, Conditions
from studies.records import records_in
from studies.study import Arm, Study
from tests.reports import FAKE_TRAIN, TINY_CONFIG

def tiny_study(tmp_path, arg="seeds=3") -> Study:
    config = tmp_path / "tiny.py"
    config.write_text(TINY_CONFIG)
    claim = Claim("h1", "one head has the higher perplexity", ("h=1",), ("h=8",), "tiny", Conditions(lr="fixed"),
                  metric="ppl", sign=1, margin=0.5)
    return Study(name="tiny", title="A tiny study", out=str(tmp_path / "out"), protocol="Protocol: a stand-in.",
                 arms=(Arm("A", str(config), arg),), setting=lambda arm, r: f"h={r.override('model.num_heads')}",
                 claims=(claim,), metrics=("ppl", "bleu"))


def test_a_tiny_study_trains_once_records_and_reports(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CALLS_FILE", str(tmp_path / "calls.txt"))
    seen = []  # the study's after hook: (record, run folder) of every point that trained or had a record
    study = dataclasses.replace(tiny_study(tmp_path), after=lambda record, run: seen.append((record, run)))
    out, runs = str(tmp_path / "out"), str(tmp_path / "runs")
    assert study_lib.train(study, out=out, workdir=runs, train_script=FAKE_TRAIN) == []
    assert len((tmp_path / "calls.txt").read_text().split()) == 6
    assert [(os.path.basename(r), os.path.basename(d)) for r, d in seen] == [
        (f"{p.name}.json", p.name) for _, p in study.points()]
    assert all(os.path.isfile(r) and os.path.isfile(os.path.join(d, points.METRICS)) for r, d in seen)
    assert {os.path.dirname(d) for _, d in seen} == {os.path.join(runs, "A")}
    recs = records_in(os.path.join(out, "points", "A"))
    assert sorted(recs) == sorted(f"num_heads_{h}-seed_{s}" for h in (1, 8) for s in range(3))  # qk_dim follows h
    rec = recs["num_heads_1-seed_2"]
    assert rec.settings_sha == points.settings_hash(study.spec(study.arms[0]), rec.overrides)
    assert rec.valid_ppl == 10.0 + 1 + 2 and rec.test_bleu == 5.0 + 8 + 2  # fake_train's formulas

    assert study_lib.train(study, out=out, workdir=str(tmp_path / "fresh"), train_script=FAKE_TRAIN) == []
    assert len((tmp_path / "calls.txt").read_text().split()) == 6  # every point has a record: nothing trains
    assert len(seen) == 12 and {os.path.dirname(d) for _, d in seen[6:]} == {str(tmp_path / "fresh" / "A")}

    (v,) = study_lib.evaluate([study], out={"tiny": out})["tiny"]
    assert (v.kind, v.interval.diff) == ("reproduced", pytest.approx((10 + 1) - (10 / 8 + 8 / 64)))
    readme = study_lib.write_report(study, [v], out=out)
    text = open(readme).read()
    assert "| h1 | one head has the higher perplexity | tiny | valid perplexity | 3/3 | higher |" in text
    assert "Points recorded: 6 of 6." in text and "10 steps; learning rate fixed" in text
    with open(os.path.join(out, "generated.txt")) as f:
        assert {"README.md", "verdicts.csv", "settings.csv", "runs.csv"} <= set(f.read().split())

    changed = tiny_study(tmp_path, "seeds=3,warmup=5")  # another setting, the same points: refused, naming one
    with pytest.raises(ValueError, match=r"sweep point num_heads_1-seed_0 \(record .*\) was trained with "
                                         r"other settings"):
        study_lib.train(changed, out=out, workdir=runs, train_script=FAKE_TRAIN)


def test_a_point_a_live_worker_claimed_is_skipped_and_a_dead_workers_claim_is_taken_over(tmp_path, monkeypatch,
                                                                                       capsys):
    monkeypatch.setenv("CALLS_FILE", str(tmp_path / "calls.txt"))
    study, out, runs = tiny_study(tmp_path), str(tmp_path / "out"), str(tmp_path / "runs")
    other = subprocess.Popen(["sleep", "60"])  # the other worker, alive
    claim = Lock(os.path.join(runs, "A", "num_heads_8-seed_1"), runner.CLAIM_FILE)
    claim.me["pid"] = other.pid
    claim.acquire()
    try:
        assert study_lib.train(study, out=out, workdir=runs, train_script=FAKE_TRAIN) == []  # skipped, not failed
    finally:
        other.kill()
        other.wait()
    skipped = f"[sweep] A/num_heads_8-seed_1: claimed by another worker (pid {other.pid} on host "
    assert skipped in capsys.readouterr().out
    assert sorted(records_in(os.path.join(out, "points", "A"))) == sorted(
        f"num_heads_{h}-seed_{s}" for h in (1, 8) for s in range(3) if (h, s) != (8, 1))
    assert study_lib.train(study, out=out, workdir=runs, train_script=FAKE_TRAIN) == []  # its worker is gone
    calls = (tmp_path / "calls.txt").read_text().split()
    assert len(calls) == 6 and calls[-1].endswith("num_heads_8-seed_1") and not os.path.exists(claim.path)


def test_a_record_keeps_the_config_changes_of_its_run_and_the_report_names_them(tmp_path, monkeypatch):
    """A point whose config changed on a resume (``config_history.jsonl``, written by the engine's workdir
    record) keeps the change in its record, and the report's header names the point, the step and the fields;
    records without the field are counted as predating it."""
    monkeypatch.setenv("CALLS_FILE", str(tmp_path / "calls.txt"))
    study, out, runs = tiny_study(tmp_path), str(tmp_path / "out"), str(tmp_path / "runs")
    assert study_lib.train(study, out=out, workdir=runs, train_script=FAKE_TRAIN) == []
    text = open(study_lib.write_report(study, [], out=out)).read()
    assert "Config changed on a resume: in no run (6 of 6 records keep such changes)." in text
    run = os.path.join(runs, "A", "num_heads_1-seed_0")
    workdir_lib.write_record({"train": {"eval_every": 10}}, run, {}, 0)
    workdir_lib.write_record({"train": {"eval_every": 5}}, run, {"train.eval_every": [10, 5]}, 4)
    record = os.path.join(out, "points", "A", "num_heads_1-seed_0.json")
    os.remove(record)
    assert study_lib.train(study, out=out, workdir=runs, train_script=FAKE_TRAIN) == []  # from the run folder
    assert len((tmp_path / "calls.txt").read_text().split()) == 6
    assert points.read_record(record)["config_changes"] == [{"step": 4, "changes": {"train.eval_every": [10, 5]}}]
    older = os.path.join(out, "points", "A", "num_heads_8-seed_0.json")
    points.write_record(older, {k: v for k, v in points.read_record(older).items() if k != "config_changes"})
    text = open(study_lib.write_report(study, [], out=out)).read()
    assert ("Config changed on a resume: A/num_heads_1-seed_0 from step 4: train.eval_every 10 -> 5 (5 of 6 "
            "records keep such changes; the others predate the field).") in text


def test_two_workers_share_a_study_and_train_each_point_once(tmp_path, monkeypatch):
    monkeypatch.setenv("CALLS_FILE", str(tmp_path / "calls.txt"))
    monkeypatch.setenv("SLEEP_S", "1")
    study, out, runs = tiny_study(tmp_path), str(tmp_path / "out"), str(tmp_path / "runs")
    failed = {}
    first = threading.Thread(target=lambda: failed.setdefault(
        "first", study_lib.train(study, out=out, workdir=runs, train_script=FAKE_TRAIN)))
    first.start()
    for _ in range(200):  # the second worker starts while the first trains its first point
        if (tmp_path / "calls.txt").exists():
            break
        time.sleep(0.05)
    failed["second"] = study_lib.train(study, out=out, workdir=runs, train_script=FAKE_TRAIN)
    first.join()
    assert failed == {"first": [], "second": []}
    calls = (tmp_path / "calls.txt").read_text().split()
    assert sorted(calls) == sorted({*calls}) and len(calls) == 6  # every point trained, none twice
    assert len(records_in(os.path.join(out, "points", "A"))) == 6


def test_a_tiny_study_trains_in_process_through_the_engine(tmp_path, monkeypatch):
    """The real engine, in-process: configs/mqar_grid.py's --quick points (1-layer d_model 16, 5 steps); each
    record names the machine ($ATTNLAB_MACHINE), its CPU model and the device the run logged."""
    monkeypatch.setenv(points.MACHINE_ENV, "lab-a")
    study = Study(name="mqar_tiny", title="MQAR, tiny", out=str(tmp_path / "out"), protocol="Protocol: tiny.",
                  arms=(Arm("", "configs/mqar_grid.py", "seeds=1"),), runner="in_process",
                  setting=lambda arm, r: f"h={r.override('model.num_heads')}", claims=(), metrics=("accuracy",))
    assert study_lib.train(study, quick=True, out=str(tmp_path / "out"), workdir=str(tmp_path / "runs")) == []
    recs = records_in(str(tmp_path / "out" / "points"))
    assert sorted(recs) == ["num_heads_1", "num_heads_2"]
    assert all(0.0 <= r.valid_accuracy <= 1.0 and r.steps == 5 and r.settings_sha for r in recs.values())
    m = recs["num_heads_1"].raw["machine"]
    assert m["name"] == "lab-a" and m["device"].startswith("cpu ") and m["device"] == recs["num_heads_1"].device
    assert recs["num_heads_1"].machine == "lab-a (" + "; ".join(x for x in (m["cpu"], m["device"]) if x) + ")"
    assert m["boots"] == [runtime.boot_id() or None] and recs["num_heads_1"].boots == (runtime.boot_id() or None,)
    assert all(0 < r.raw["cpu_s"] < 600 for r in recs.values())  # this run's CPU, not the test process's
    readme = study_lib.write_report(study, [], out=str(tmp_path / "out"), quick=True)
    assert "Points recorded: 2 of 2." in open(readme).read()
    assert "CPU time 0.0 hours in all (2 of 2 records; every thread" in open(readme).read()


def test_a_record_counts_the_cpu_time_of_each_training_call_and_not_its_pauses(tmp_path):
    """Two calls (a resume): each call's CPU from its start event on; a call logged before ``cpu_s`` existed
    leaves the total unknown rather than short."""
    run = tmp_path / "p"
    run.mkdir()
    calls = [[{"event": "start", "time": 0.0, "cpu_s": 4.0}, {"time": 50.0, "cpu_s": 34.0},
              {"event": "bleu", "time": 900.0, "cpu_s": 40.0}],  # 850 s paused before the decode: no CPU
             [{"event": "start", "time": 1000.0, "cpu_s": 3.0}, {"time": 1020.0, "cpu_s": 13.0}]]
    with open(run / "metrics.jsonl", "w") as f:
        for r in (r for call in calls for r in call):
            f.write(json.dumps(dict({"step": 1}, **r)) + "\n")
    rec = points.point_record(str(run), "configs/translation.py", {}, name="p")
    assert rec["cpu_s"] == 36.0 + 10.0 and rec["logged_s"] == 920.0
    with open(run / "metrics.jsonl", "w") as f:
        f.write(json.dumps({"step": 1, "event": "start", "time": 0.0}) + "\n")  # an older engine
        for r in calls[1]:
            f.write(json.dumps(dict({"step": 1}, **r)) + "\n")
    assert points.point_record(str(run), "configs/translation.py", {}, name="p")["cpu_s"] is None


def test_the_progress_line_gives_settings_step_loss_and_time_left(tmp_path):
    run = tmp_path / "p"
    run.mkdir()
    assert "starting" in points.progress_line("p", {"model.num_heads": 4}, str(run), 0.0, 100)
    with open(run / "metrics.jsonl", "w") as f:
        for step, loss in ((10, 3.0), (20, 2.5)):
            f.write(json.dumps({"step": step, "train/loss": loss, "time": 1.0}) + "\n")
    line = points.progress_line("p", {"model.num_heads": 4, "seed": 1}, str(run), time.time() - 60, 110)
    assert line.startswith("[sweep] p (num_heads=4 seed=1): step 20/110, loss 2.5000, 1.0 min elapsed, ~")
    assert line.endswith(" min left")
    started = time.time() - 60  # a resumed point: 100 steps in this call's minute, 1000 before it
    with open(run / "metrics.jsonl", "a") as f:
        for step, t in ((1000, started - 5), (1100, started + 60)):
            f.write(json.dumps({"step": step, "train/loss": 2.0, "time": t}) + "\n")
    line = points.progress_line("p", {}, str(run), started, 2100)
    assert line.startswith("[sweep] p (): step 1100/2100, loss 2.0000, 1.0 min elapsed, ~10.0 min left"), line


def test_the_study_command_line_names_bad_input():
    with pytest.raises(ValueError, match=r"study 'nope' is not registered; expected one of \[.*'table3'"):
        cli.main(["train", "nope"])
    with pytest.raises(ValueError, match=r"--max_points=-1; expected a number >= 0"):
        cli.main(["train", "table3", "--max_points=-1"])
    with pytest.raises(SystemExit):
        cli.main(["train", "table3", "--bogus"])
    with pytest.raises(ValueError, match=r"^--report_only with --quick; --report_only writes the committed reports"):
        cli.main(["train", "entropy_collapse", "--report_only", "--quick"])
    with pytest.raises(ValueError, match=r"--steps=1; expected >= 2"):
        cli.main(["train", "induction", "--steps=1"])  # a spec with its own report: its own command line


def test_list_and_train_take_every_spec_module(monkeypatch):
    """Every spec module is listed (its STUDIES, or its own report's rows) and ``train`` reaches it."""
    names = [line.split(":", 1)[0] for line in cli.listing()]
    for module in specs.modules():
        name = module.__name__.rsplit(".", 1)[1]
        assert name in names or {s.name for s in module.STUDIES} <= set(names), name
        if not hasattr(module, "STUDIES"):
            assert cli.command_line(module) is not None, name
    seen = []
    monkeypatch.setitem(commands.COMMAND_LINES, "induction", seen.append)
    assert cli.main(["train", "induction", "--quick", "--max_points=0"]) == 0
    assert seen == [["--quick", "--max_points=0"]]
    for module in specs.modules():  # every STUDIES module trains through the generic command line
        assert hasattr(module, "STUDIES") == (cli.command_line(module) is None), module.__name__
    assert specs.study("entropy_collapse").after is not None  # its monitor traces: the Study's after hook


def test_every_registered_study_knows_its_points():
    for module in specs.modules():
        for study in getattr(module, "STUDIES", ()):
            assert study.points(), study.name
            assert len(study.claims) + len(study.criteria) > 0, study.name


def test_a_plot_whose_metric_no_record_has_is_an_empty_panel_without_a_warning(tmp_path):
    from studies.records import Record
    from studies.report import Report

    rec = Record(str(tmp_path / "p.json"), {"point": "p", "seed": 0, "overrides": {"model.num_heads": 1},
                                            "validation": {"nll": 2.5}})
    report = Report(str(tmp_path), "t")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        study_lib._plot(report, study_lib.Plot("acc", "accuracy", "model.num_heads", "seed"),
                        {"h=1": [(Arm("", "c.py", ""), rec)]})
    assert (tmp_path / "acc.png").stat().st_size > 0
