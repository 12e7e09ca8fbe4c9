"""The MQAR stability studies (scale, logit growth, entropy collapse): their claims on the committed records and on
synthetic records, and each one's --quick points trained by a stand-in train.py into a report."""
import math
import os
import shutil
import textwrap

import pytest

from reports import REPO, calls_of, install_stand_in, read_csv
from studies import claims as claims_lib
from studies import cli
from studies import study as study_lib
from studies.records import Record
from studies.specs import entropy_collapse, logit_growth, scale

STAND_IN = textwrap.dedent('''
    # An MQAR run with attention statistics and the health monitor: unscaled attention (scale 1) does not learn;
    # lr >= 1 without QK-LayerNorm collapses (entropy warning at step 30) and turns non-finite at step 50.
    lr = float(args.get("config.train.learning_rate", 3e-3))
    qk = args.get("config.model.qk_layernorm") == "true"
    unscaled = float(args.get("config.model.attention_scale", 0.25)) == 1.0
    blowup = lr >= 1.0 and not qk
    acc = 0.3 if unscaled else 1.0
    recs = [{"step": 0, "event": "start", "params": 1000}]
    for step in range(10, 201, 10):
        if blowup and step >= 50:
            recs.append({"step": 50, "event": "non_finite", "at_step": 50})
            break
        ml = 100.0 * step if blowup else 8.0
        recs.append({"step": step, "train/loss": 1.4 if unscaled else max(0.01, 1.4 - step / 100)})
        recs.append({"step": step, "attn/step": step, "attn/decoder_self/max_logit/L0H0": ml,
                     "attn/decoder_self/entropy/L0H0": 0.01 if blowup and step >= 30 else 1.0,
                     "attn/decoder_self/max_logit": ml})
        if blowup and step == 30:
            recs.append({"step": step, "event": "health_warning", "kind": "entropy_collapse", "group": "decoder_self",
                         "layer": 0, "head": 0, "value": 0.01, "threshold": 0.25, "at_step": step})
    end = recs[-1]["step"]
    recs.append({"step": end, "event": "train_end", "reason": "non_finite" if blowup else "num_steps"})
    if not blowup:
        recs.append({"step": end, "validation/loss": 4.0 * (1 - acc), "validation/accuracy": acc})
''')


def _verdicts(study) -> dict[str, str]:
    return {v.claim.id: v.kind for v in study_lib.evaluate([study])[study.name]}


def _rules(study) -> dict[str, str]:
    groups = {k: [r for _, r in m] for k, m in study.records().items()}
    return {row[0]: row[3] for row in claims_lib.judge_criteria(study.criteria, groups)}


def test_committed_records_give_the_reported_verdicts():
    assert _verdicts(scale.STUDY) == {"1 accuracy": "reproduced", "1 steps": "unresolved",
                                      "1/d_k accuracy": "unresolved", "1/d_k steps": "unresolved"}
    assert _rules(scale.STUDY) == {"init": "reproduced", "baseline": "reproduced"}
    assert _verdicts(logit_growth.STUDY) == {"logit d64": "reproduced", "logit d128": "reproduced",
                                             "sensitivity d64": "unresolved", "sensitivity d128": "reproduced"}
    assert _rules(logit_growth.STUDY) == {"width trend": "reproduced"}
    assert _verdicts(entropy_collapse.STUDY) == {"remedy lr 0.01": "unresolved", "remedy lr 0.03": "unresolved",
                                                 "remedy lr 0.1": "no effect"}
    assert _rules(entropy_collapse.STUDY) == {"baseline": "reproduced", "collapse": "reproduced",
                                              "monitor": "contradicted"}


def test_claims_carry_family_conditions_and_registration():
    for study in (scale.STUDY, logit_growth.STUDY, entropy_collapse.STUDY):
        for v in study_lib.evaluate([study])[study.name]:
            assert v.claim.family and "1500 steps" in v.conditions and "learning rate" in v.conditions
            assert v.registration.startswith("pre-registered (aaf1938") or v.registration.startswith("post-hoc")
    remedy = study_lib.evaluate([entropy_collapse.STUDY])["entropy_collapse"]
    assert all(v.registration.startswith("post-hoc") for v in remedy)  # rewritten on 2026-12-05


def _record(name: str, **raw) -> Record:
    return Record(f"/synthetic/{name}.json", {"point": name, "steps": 1500, **raw})


def test_scale_steps_to_learn_from_the_curve():
    rec = _record("a", curve={"step": [100, 200, 300], "train_loss": [1.0, 0.2, 0.05]},
                  validation={"accuracy": 0.95})
    assert scale.metrics(rec) == {"steps_to_learn": 300, "learned": 1.0}
    never = _record("b", curve={"step": [100], "train_loss": [1.0]}, validation={"accuracy": 0.3})
    assert scale.metrics(never) == {"steps_to_learn": 1500, "learned": 0.0}  # the budget: a lower bound


def _sweep(width: int, qk: bool, seed: int, losses: dict, acc: float = 1.0) -> dict:
    return {f"{width}-{qk}-{lr}": [(None, _record(f"{width}-{qk}-{lr}-{seed}", seed=seed, validation={
        "loss": loss, "accuracy": acc}, overrides={"model.d_model": width, "model.qk_layernorm": qk, "seed": seed,
                                                  "train.learning_rate": lr}))] for lr, loss in losses.items()}


def test_logit_growth_sweep_measures_and_width_trend():
    groups = {**_sweep(64, False, 0, {0.01: 0.1, 0.1: 0.2, 0.3: 2.0}), **_sweep(128, False, 0, {0.01: 0.1, 0.1: 1.0,
                                                                                             0.3: 3.0})}
    first = {r.override("model.d_model"): logit_growth.derive(r, groups) for m in groups.values() for _, r in m
             if r.override("train.learning_rate") == 0.01}
    assert first[64]["degrade_lr"] == 0.3 and first[128]["degrade_lr"] == 0.1 and first[64]["learned"] == 1.0
    assert first[64]["lr_sensitivity"] == pytest.approx((0.1 + 0.2 + 2.0) / 3 - 0.1)
    with_metrics = {k: [Record(r.path, dict(r.raw, metrics=logit_growth.derive(r, groups))) for _, r in m]
                    for k, m in groups.items()}
    measured, verdict, reason = logit_growth.width_trend(with_metrics)
    assert verdict == "unresolved" and "1 seeds" in reason  # one seed: 3 needed
    assert "0.3 -> 0.1" in measured


def test_entropy_collapse_events_and_alarms():
    mon = {"warnings": [[30, "entropy_collapse", 0, 0, 0.01, 0.25]], "warnings_total": 1, "loss_step": [10, 20, 30],
           "loss": [2.0, 1.0, 1.8], "check_step": [10, 20], "min_entropy": [1.0, 0.01], "max_logit": [5.0, 50.0]}
    spike = _record("spike", monitor=mon, validation={"accuracy": 0.95})
    m = entropy_collapse.derive(spike)
    assert (m["event"], m["event_step"], m["first_alarm"], m["collapse_first"]) == (1.0, 30, 30, 1.0)
    healthy = _record("ok", monitor=dict(mon, warnings=[], loss=[2.0, 1.0, 0.5]), validation={"accuracy": 0.99})
    assert entropy_collapse.derive(healthy)["event"] == 0.0
    assert entropy_collapse.derive(_record("none"))["event"] is None  # no monitor trace: not counted
    runs = [Record(r.path, dict(r.raw, metrics=entropy_collapse.derive(r))) for r in (spike, healthy)]
    d = entropy_collapse.alarms(runs)
    assert (d["precision"], d["recall"], d["lead"]) == (1.0, 1.0, 0.0)


def _quick(study, tmp_path, monkeypatch, n_points: int) -> str:
    train, calls = install_stand_in(tmp_path, monkeypatch, STAND_IN)
    out, runs = tmp_path / "out", tmp_path / "runs"
    argv = ["train", study.name, "--quick", f"--out={out}", f"--workdir={runs}", f"--train_script={train}"]
    assert cli.main(argv) == 0  # what `python -m studies train <name> --quick` runs
    assert len(calls_of(calls)) == n_points and len(list((out / "points").glob("*[!z].json"))) == n_points
    cli.main(argv)
    assert len(calls_of(calls)) == n_points  # recorded points are never retrained
    for _, name, *_ in study.inputs:  # committed inputs (scale's init.csv) beside the quick records
        shutil.copy(os.path.join(REPO, study.out, name), out / name)
    verdicts = study_lib.evaluate([study], {study.name: str(out)})[study.name]
    readme = study_lib.write_report(study, verdicts, out=str(out), quick=True)
    text = open(readme).read()
    assert f"Points recorded: {n_points} of {n_points}" in text and "## Verdicts" in text
    return str(out)


@pytest.mark.slow
def test_scale_quick(tmp_path, monkeypatch):
    out = _quick(scale.STUDY, tmp_path, monkeypatch, 3)
    runs = {r["setting"]: r for r in read_csv(os.path.join(out, "runs.csv"))}
    assert float(runs["1"]["accuracy"]) == pytest.approx(0.3) and float(runs["1/sqrt(d_k)"]["steps_to_learn"]) == 200


@pytest.mark.slow
def test_logit_growth_quick(tmp_path, monkeypatch):
    out = _quick(logit_growth.STUDY, tmp_path, monkeypatch, 4)
    sweeps = {(r["QK-LayerNorm"], r["degradation lr"]) for r in read_csv(os.path.join(out, "sweeps.csv"))}
    assert sweeps == {("False", "1.0"), ("True", "inf")}


@pytest.mark.slow
def test_entropy_collapse_quick(tmp_path, monkeypatch):
    out = _quick(entropy_collapse.STUDY, tmp_path, monkeypatch, 4)
    blown = [r for r in read_csv(os.path.join(out, "events.csv")) if r["event step"] != "none"]
    assert [(r["setting"], r["event step"], r["first entropy-collapse warning"]) for r in blown] == [
        ("QK-LN off, lr 1", "50", "30")]
    assert not math.isnan(float(read_csv(os.path.join(out, "monitor.csv"))[0]["recall"]))
