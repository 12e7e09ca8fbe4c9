"""studies.claims: each verdict kind on synthetic records, Holm against a hand-worked example, the correction
changing a verdict, conditions and registration carried with every verdict, and typed record access."""
import math

import pytest

from studies import stats
from studies.claims import (CONTRADICTED, DIFFERS, DIRECTION, NO_EFFECT, REPRODUCED, UNRESOLVED, Claim, Conditions,
                            Criterion, Registration, evaluate, judge, judge_criteria)
from studies.records import Record

COND = Conditions(lr="0.003, tuned for the base only", differences=("pre-LN, no dropout",))


def group(name, nlls, steps=2400, per_epoch=960, start="2026-12-05 10:00:00"):
    return [Record(f"{name}-{i}.json", {"point": f"{name}-{i}", "seed": i, "steps": steps,
                                        "batches_per_epoch": per_epoch, "first_logged_utc": start,
                                        "validation": {"nll": v}}) for i, v in enumerate(nlls)]


def verdict_of(a, b, **kw):
    claim = Claim("c", "a claim", ("a",), ("b",), "f", COND, **kw)
    (v,) = evaluate([claim], {"a": group("a", a), "b": group("b", b)})
    return v


BASE = [2.782, 2.779, 2.752]
TIGHT = [2.780, 2.781, 2.779]


def test_reproduced_when_the_interval_reaches_the_papers_value():
    v = verdict_of([2.810, 2.811, 2.809], TIGHT, paper=0.03, margin=0.01)
    assert v.kind == REPRODUCED and v.ratio is None
    assert v.interval.lo - 0.01 <= 0.03 <= v.interval.hi + 0.01


def test_direction_only_prints_the_ratio_with_its_interval():
    v = verdict_of([2.870, 2.861, 2.880], BASE, paper=0.018, margin=0.01)  # Table 3 d_model 256, h = 32
    assert v.kind == DIRECTION
    est, lo, hi = v.ratio
    assert est == pytest.approx(v.interval.diff / 0.018) and lo == pytest.approx(v.interval.lo / 0.018)
    assert hi == pytest.approx(v.interval.hi / 0.018) and lo > 1
    assert v.reading() == f"direction only ({est:.1f}x [{lo:.1f}, {hi:.1f}] the paper's)"


def test_no_effect_when_the_interval_lies_inside_the_margin():
    v = verdict_of([2.771, 2.772, 2.770], [2.770, 2.771, 2.772], paper=0.05, margin=0.01)
    assert v.kind == NO_EFFECT


def test_contradicted_by_the_other_sign_or_an_effect_where_the_paper_has_none():
    assert verdict_of([2.70, 2.71, 2.69], BASE, paper=0.073).kind == CONTRADICTED
    assert verdict_of([2.82, 2.83, 2.82], BASE, paper=-0.002, margin=0.01).kind == CONTRADICTED


def test_unresolved_when_wide_and_with_too_few_seeds():
    assert verdict_of([2.70, 2.90, 2.80], BASE, paper=0.073).kind == UNRESOLVED
    v = verdict_of([2.80, 2.81], BASE, paper=0.03)  # 2 seeds, 3 needed
    assert v.kind == UNRESOLVED and v.interval is None and v.measured() == "—"


def test_a_contrast_without_a_paper_value_differs_or_not():
    assert verdict_of([2.70, 2.71, 2.69], BASE).kind == DIFFERS
    assert verdict_of([2.70, 2.71, 2.69], BASE, sign=-1).kind == REPRODUCED  # the paper's direction, no value
    assert verdict_of([2.70, 2.71, 2.69], BASE, sign=1).kind == CONTRADICTED


def test_no_worse_claims_are_one_sided():
    assert verdict_of([2.70, 2.71, 2.69], TIGHT, paper=0.0, sign=-1, margin=0.05).kind == REPRODUCED  # better
    assert verdict_of([2.79, 2.791, 2.789], TIGHT, paper=0.0, sign=-1, margin=0.05).kind == REPRODUCED  # within
    assert verdict_of([2.95, 2.96, 2.94], TIGHT, paper=0.0, sign=-1, margin=0.05).kind == CONTRADICTED
    assert verdict_of([2.80, 2.90, 2.85], TIGHT, paper=0.0, sign=-1, margin=0.05).kind == UNRESOLVED


def test_judge_needs_an_interval_and_a_p_value():
    assert judge(None, None, 0.1, 0.01) == (UNRESOLVED, None)
    half = stats.Interval(0.1, None, None, 1, 1, "welch")
    assert judge(half, 0.01, 0.1, 0.01) == (UNRESOLVED, None)


def test_holm_matches_a_hand_worked_example():
    # p sorted: 0.005 (x4 = 0.02), 0.01 (x3 = 0.03), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04 -> 0.06, monotone)
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([0.2, None, 0.01]) == pytest.approx([0.2, None, 0.02])
    assert stats.holm([]) == []
    with pytest.raises(ValueError, match=r"holm: p-values must lie in \[0, 1\]; got 1.5"):
        stats.holm([0.1, 1.5])


def test_the_correction_runs_within_a_family_and_can_change_a_verdict():
    groups = {"base": group("base", TIGHT), "x": group("x", [2.83, 2.84, 2.82]),
              **{f"null{i}": group(f"null{i}", [2.77, 2.79, 2.78]) for i in range(4)}}
    x = Claim("x", "x", ("x",), ("base",), "family", COND)
    nulls = [Claim(f"n{i}", "n", (f"null{i}",), ("base",), "other", COND) for i in range(4)]
    alone = evaluate([x] + nulls, groups)[0]  # x's family has one member: Holm changes nothing
    assert alone.interval.p < 0.05 and alone.p_adjusted == pytest.approx(alone.interval.p)
    assert alone.kind == alone.kind_raw == DIFFERS and not alone.changed
    together = evaluate([x] + [dataclasses_replace(c, family="family") for c in nulls], groups)
    v = together[0]  # the smallest of 5 p-values: x 5
    assert v.p_adjusted == pytest.approx(5 * v.interval.p) and v.p_adjusted > 0.05
    assert (v.kind_raw, v.kind, v.changed) == (DIFFERS, UNRESOLVED, True)
    assert all(w.p_adjusted >= v.p_adjusted for w in together[1:])  # step-down: monotone


def test_the_correction_runs_over_the_declared_family_while_members_lack_data():
    # x differs (p about 0.003); y reads groups without records. Holm counts y as p = 1: x's p is doubled, not
    # left alone, so the interim verdict is no stronger than any final one (y's p can only lower x's adjusted p).
    groups = {"base": group("base", TIGHT), "x": group("x", [2.83, 2.84, 2.82]), "y": [],
              "y_done": group("y_done", [2.779, 2.781, 2.780])}
    x = Claim("x", "x", ("x",), ("base",), "family", COND)
    y = Claim("y", "y", ("y",), ("base",), "family", COND)
    v, untested = evaluate([x, y], groups)
    assert untested.interval is None and untested.p_adjusted is None and untested.kind == UNRESOLVED
    assert (v.counts, untested.counts) == ((3, 3), (0, 3))
    assert v.family_size == untested.family_size == (2, 1)
    assert v.p_adjusted == pytest.approx(2 * v.interval.p)
    done = evaluate([x, dataclasses_replace(y, a=("y_done",))], groups)[0]
    assert done.p_adjusted <= v.p_adjusted
    alone = evaluate([x, dataclasses_replace(y, family="other")], groups)[0]
    assert alone.p_adjusted == pytest.approx(v.interval.p)


def dataclasses_replace(claim, **kw):
    import dataclasses

    return dataclasses.replace(claim, **kw)


def test_every_verdict_carries_its_budget_and_conditions():
    v = verdict_of([2.870, 2.861, 2.880], BASE, paper=0.018)
    assert v.budget == "2400 steps (2.5 epochs)"
    assert v.conditions == "2400 steps (2.5 epochs); learning rate 0.003, tuned for the base only; pre-LN, no dropout"
    assert v.registration == "post-hoc (written after its records)"


def test_the_report_states_shared_conditions_once_and_each_claims_own_after_them():
    from studies.study import conditions_text

    recipe = Conditions(lr="0.003, tuned for the base only", differences=("post-LN, dropout 0.1",))
    groups = {"a": group("a", BASE), "b": group("b", TIGHT), "long": group("long", TIGHT, steps=7200), "none": []}
    claims = [Claim("x", "x", ("a",), ("b",), "f", COND), Claim("y", "y", ("long",), ("b",), "f", COND),
              Claim("z", "z", ("a",), ("b",), "f", recipe), Claim("w", "w", ("none",), ("b",), "f", COND)]
    text = conditions_text(evaluate(claims, groups))
    assert text == ("Conditions of every verdict (budget from the records, the rest from the spec). Common to all: "
                    "learning rate 0.003, tuned for the base only.\n\nAnd per claim:\n\n"
                    "- x, w: 2400 steps (2.5 epochs); pre-LN, no dropout\n"
                    "- y: 2400 steps (2.5 epochs) / 7200 steps (7.5 epochs); pre-LN, no dropout\n"
                    "- z: 2400 steps (2.5 epochs); post-LN, dropout 0.1")
    alone = conditions_text(evaluate(claims[:1], groups))  # one set of conditions: stated whole
    assert alone.endswith(":\n\n- x: 2400 steps (2.5 epochs); learning rate 0.003, tuned for the base only; "
                          "pre-LN, no dropout")


def test_the_verdicts_table_says_how_many_seeds_a_claim_short_of_its_minimum_has():
    from studies.study import verdict_rows

    groups = {"a": group("a", BASE), "b": group("b", TIGHT[:2]), "none": []}
    claims = [Claim("six", "6 a side", ("a",), ("b",), "f", COND, min_seeds=6),
              Claim("none", "no records", ("none",), ("none",), "f", COND),
              Claim("two", "2 a side", ("a",), ("b",), "f", COND, min_seeds=2)]
    n = [row[4] for row in verdict_rows(evaluate(claims, groups))]
    assert n == ["3/2 (needs 6 a side)", "—", "3/2"]


def test_the_report_says_how_many_of_a_changed_verdicts_family_still_lack_records():
    from studies.study import correction_text

    groups = {"base": group("base", TIGHT), "x": group("x", [2.793, 2.80, 2.807]), "y": []}  # x: p about 0.036
    claims = [Claim("x", "x", ("x",), ("base",), "family", COND), Claim("y", "y", ("y",), ("base",), "family", COND)]
    assert correction_text(evaluate(claims, groups)) == (
        "Changed by the correction: x (differs from 0 -> unresolved; Holm over the 2 claims of its family, 1 of them "
        "without enough records yet, counted p = 1).")
    assert correction_text(evaluate(claims[:1], groups)) == "Changed by the correction: none."


def test_bad_claims_and_unknown_groups_are_named():
    with pytest.raises(ValueError, match=r"claim c: margin=-1; expected >= 0"):
        Claim("c", "t", ("a",), ("b",), "f", COND, margin=-1)
    with pytest.raises(ValueError, match=r"claim c: sign=1; expected -1, 0 or 1, and only with paper None or 0"):
        Claim("c", "t", ("a",), ("b",), "f", COND, paper=0.1, sign=1)
    with pytest.raises(ValueError, match=r"claim c: groups \['z'\] are not the study's"):
        evaluate([Claim("c", "t", ("z",), ("b",), "f", COND)], {"b": group("b", BASE)})
    with pytest.raises(ValueError, match=r"duplicate ids \['c'\]"):
        evaluate([Claim("c", "t", ("b",), ("b",), "f", COND)] * 2, {"b": group("b", BASE)})


def test_criteria_give_their_rule_and_registration():
    rule = Criterion("all", "every group learns", lambda g: (f"{len(g)} groups", "reproduced", "all learned"), COND,
                     Registration("0" * 40, "nowhere.py", "x"))
    (row,) = judge_criteria([rule], {"a": group("a", BASE)})
    assert row[:5] == ["all", "every group learns", "1 groups", "reproduced", "all learned"]
    assert row[6].startswith("registered at 0000000 (git history not available")


def test_record_fields_are_typed_and_missing_ones_read_none():
    rec = Record("x.json", {"seed": 1, "steps": 2400, "batches_per_epoch": 950, "validation": {"nll": 2.5},
                            "stability": {"max_attention_logit": {"enc": 30.0, "dec": None}, "max_grad_norm": "nan"},
                            "curve": {"valid_step": [600, 1200], "valid_nll": [3.0, 2.8]},
                            "metrics": {"steps_to_learn": 450}, "wall_s": 120.0, "logged_s": 60.0})
    assert rec.valid_nll == 2.5 and rec.test_bleu is None and rec.valid_ppl is None
    assert rec.epochs == pytest.approx(2400 / 950) and rec.wall_minutes == 2.0 and rec.train_minutes is None
    assert rec.stability.max_logit == 30.0 and rec.stability.max_grad_norm is None
    assert rec.valid_nll_at(1200) == 2.8 and rec.valid_nll_at(1800) is None
    assert rec.metric("steps_to_learn") == 450 and rec.bleu_rows is None and rec.trace() is None
    assert rec.metric("cpu") is None and Record("z.json", {"cpu_s": 4086.0}).metric("cpu") == pytest.approx(68.1)
    with pytest.raises(ValueError, match=r"record metric 'speed' of x; expected one of"):
        rec.metric("speed")
    assert math.isclose(Record("y.json", {}).steps, 0) and Record("y.json", {}).name == "y"


def test_a_verdict_says_when_its_records_come_from_more_than_one_machine():
    def on(records, cpu):
        return [Record(r.path, {**r.raw, "machine": {"name": "vm", "cpu": cpu, "boots": ["b1"]}}) for r in records]

    old, new = "AMD EPYC", "AMD EPYC, family 26 model 2 stepping 1, avx512f"
    claim = Claim("c", "a claim", ("a",), ("b",), "f", COND)
    a = on(group("a", BASE)[:2], old) + on(group("a", BASE)[2:], new)
    (v,) = evaluate([claim], {"a": a, "b": on(group("b", TIGHT), new)})
    assert v.conditions.startswith(f"2400 steps (2.5 epochs); records from 2 machines: a side 2 on vm ({old}) and 1 on "
                                   f"vm ({new}), b side 3 on vm ({new}); learning rate 0.003")
    assert v.budget == "2400 steps (2.5 epochs)" and v.machines.startswith("records from 2 machines: a side 2 on")
    unnamed = group("b", TIGHT)  # records that name no machine are not another machine
    for b in (on(group("b", TIGHT), old), unnamed):
        (v,) = evaluate([claim], {"a": on(group("a", BASE), old), "b": b})
        assert "machines" not in v.conditions and v.machines == ""


def test_a_claim_names_its_sides_and_whether_each_has_its_seeds():
    claim = Claim("c", "a claim", ("a", "a2"), ("b",), "f", COND, min_seeds=4)
    groups = {"a": group("a", BASE), "a2": group("a2", BASE)[:1], "b": group("b", TIGHT)}
    a, b = claim.sides(groups)
    assert [r.path for r in a] == [r.path for r in groups["a"] + groups["a2"]] and b == groups["b"]
    assert not claim.has_seeds(a, b)  # 4 a side, 3 b side
    assert claim.has_seeds(a, b + group("b2", TIGHT)[:1])
    no_metric = [Record(r.path, {k: v for k, v in r.raw.items() if k != "validation"}) for r in a]
    assert not claim.has_seeds(no_metric, b + b)  # records without the metric do not count
    with pytest.raises(ValueError, match=r"claim c: groups \['a2'\] are not the study's"):
        claim.sides({"a": [], "b": []})
