"""The attention doctor against the calibration set (issue 47): quiet on healthy models that are hard for it (hard
attention, many heads), each planted checkpoint fault of the fault library (``models.TransformerConfig.fault``,
``attention_scale``) flagged with its cause, and the committed calibration records (``docs/results/diagnose/``)
holding to the report's rules."""
import pytest

from engine import doctor
from studies.specs import diagnose as spec
from tests.test_doctor import eval_batches, problems, train_tiny


def _not_ok(findings):
    return [(f.check, f.where, f.value, f.cause) for f in findings if f.status != "ok"]


def test_hard_attention_model_is_quiet():
    """``hard`` attention samples one key per query with noise laid out by head and position: the invariance
    checks compare its softmax twin, so a healthy model gives no fail (the permutation moved the noise before)."""
    model = train_tiny(attention_kind="hard")
    findings = doctor.diagnose(model, eval_batches())
    assert not _not_ok(findings), _not_ok(findings)
    perm = next(f for f in findings if f.check == "head_permutation" and f.group is None)
    assert "softmax twin" in perm.detail and perm.value < 1e-4


def test_sixteen_heads_are_quiet():
    model = train_tiny(d_model=64, num_heads=16)
    findings = doctor.diagnose(model, eval_batches())
    assert not _not_ok(findings), _not_ok(findings)


@pytest.mark.parametrize("kind,fault,cause", [("translation", "no_padding_mask", "padding"),
                                              ("lm", "causal_leak", "causal"),
                                              ("translation", "causal_leak", "causal")])
def test_planted_mask_fault_of_the_library_is_flagged_with_its_cause(kind, fault, cause):
    """The fault library's own mask faults (``TransformerConfig.fault``: planted in the model's stacks, not at
    the attention API), trained in."""
    findings = doctor.diagnose(train_tiny(kind, fault=fault), eval_batches(kind))
    fails = {f.cause for f in findings if f.status == "fail"}
    assert cause in fails, _not_ok(findings)


@pytest.mark.parametrize("scale,cause", [(1.0, "score_high"), (10.0 / 8, "score_high")])
def test_planted_scale_faults_are_flagged_with_their_cause(scale, cause):
    """scale_missing (1) and temperature_x10 (10/sqrt(d_k)) at d_k 64: the scores' spread lifts every head."""
    model = train_tiny(attention_scale=scale, d_model=64, num_heads=1, qk_dim=64, v_dim=64)
    findings = doctor.diagnose(model, eval_batches())
    assert cause in {f.cause for f in findings if f.status == "fail"}, _not_ok(findings)


def test_committed_calibration_records_hold_to_the_rules():
    recs = spec.records()
    if not recs:
        pytest.skip("no calibration records committed (python -m studies train diagnose)")
    healthy = [r for r in recs if not r["fault"] and r["name"] not in spec.NOT_LEARNED]
    assert healthy and all(spec.verdict(r) == "quiet" for r in healthy), [
        (r["name"], r["summary"], spec.causes(r)) for r in healthy if spec.verdict(r) != "quiet"]
    claimed = [r for r in recs if r["fault"] in spec.CLAIMS]
    assert {r["fault"] for r in claimed} == set(spec.CLAIMS)
    assert all(spec.verdict(r) == "caught" for r in claimed), [  # each with the cause CLAIMS names
        (r["name"], r["summary"], spec.causes(r)) for r in claimed if spec.verdict(r) != "caught"]


def test_solved_checkpoints_are_among_the_quiet_healthy_ones():
    """The hard healthy case of one-hot attention: checkpoints that solved their task (MQAR, induction)."""
    recs = spec.records()
    if not recs:
        pytest.skip("no calibration records committed (python -m studies train diagnose)")
    solved = {r["name"]: spec.verdict(r) for r in recs if not r["fault"] and (r["validation_accuracy"] or 0) >= 0.99}
    assert {"mqar-solved", "mqar-solved-lr0.03", "induction-solved"} <= set(solved), solved
    assert set(solved.values()) == {"quiet"}, solved


def test_per_head_symptoms_flag_a_layer_not_one_head():
    th = doctor.default_thresholds()
    status = lambda e, median: doctor.layer_status(e, median, th.entropy_warn, th.entropy_fail)[0]  # noqa: E731
    assert status(0.995, 0.6) == "ok"  # one dozing head among sharp ones: a head the model does not use
    assert status(0.995, 0.97) == "fail" and status(0.96, 0.97) == "warn"  # the whole layer blurred
    assert status(float("nan"), 0.5) == "fail"
