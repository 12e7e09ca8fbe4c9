"""The single-head follow-up's specs (issue 49): they register, every arm's config builds (quick and full size),
the learning-rate rule picks as written (ties, divergence, the edge extension and its cap) on synthetic records,
the long arms refuse to start without their rates, and the reports generate with no records and with some."""
import csv
import dataclasses
import math
import os
import re

import pytest

from engine import cli
from engine.cli import UsageError
from studies import claims as claims_lib
from studies import cli as studies_cli
from studies import points as points_lib
from studies import specs
from studies import study as study_lib
from studies.specs import single_head as sh
from studies.records import Record, records_in
from studies.specs import single_head_lr as lr

CONFIG = os.path.join(points_lib.REPO, lr.CONFIG)


def test_the_specs_register_with_their_claims_and_families():
    assert specs.study("single_head") is sh.STUDY and specs.study("single_head_lr") is lr.STUDY
    assert {c.family for c in sh.CLAIMS} == {sh.LONG, sh.PAPER_RECIPE, sh.HEADS_DEPTH, sh.NOISE}
    labels = {spec[5] for spec in sh.ARMS.values()}
    for c in sh.CLAIMS:  # every group a claim reads is the label of some arm (no typo leaves a claim empty)
        assert set(c.a + c.b) <= labels, c.id
    assert set(sh.KEY) <= {c.id for c in sh.CLAIMS}
    assert dict((c.id, c.paper) for c in sh.CLAIMS)["L h1x6"] == pytest.approx(math.log(5.29 / 4.92))
    # 6 rows x the 3-rate grid before any record, plus the extensions the committed records ask for; the long
    # arms' 42 points, each with a lr argument
    assert sum(len(c.grid) for c in lr.choices("/nonexistent").values()) == 18
    assert len(lr.STUDY.points()) == sum(len(c.grid) for c in lr.choices().values()) >= 18
    assert len(sh.STUDY.points()) == 42
    assert all(re.search(r",lr=[0-9.e-]+,", a.arg) for a in sh.STUDY.arms)
    # training order: the answer's arms, the recipe, rows h 2/32/(B), then the machine re-run before the rest
    arms = list(dict.fromkeys(arm.name for arm, _ in sh.STUDY.points()))
    assert arms[:6] == ["h1-s0", "h8-s0", "h1-s3", "h8-s3", "recipe-h1", "recipe-h8"]
    assert arms[6:10] == ["h2", "h32", "dk4", "replicate"] and arms[-1] == "h1_L24"


def _config(spec: str):
    path, arg = points_lib.split_config_spec(spec)
    return points_lib.load_config_module(path).get_config(arg)


@pytest.mark.parametrize("study", [lr.STUDY, sh.STUDY], ids=lambda s: s.name)
def test_every_arm_builds_its_config_quick_and_full_size(study):
    for arm in study.arms:
        row = re.search(r"row=(\w+)", arm.arg).group(1)
        points = points_lib.sweep_points(study.spec(arm, quick=True))
        assert len(points) == 1
        quick = _config(study.spec(arm, quick=True))
        assert quick.model.d_model == 64 and quick.train.num_steps <= 20  # the tiny model
        full = _config(f"{CONFIG}:{re.sub(r'lr=[^,]*', 'lr=0.003', arm.arg)}")
        m, t = full.model, full.train
        assert (m.d_model, t.eval_every, t.on_non_finite, m.qk_layernorm) == (128, 600, "stop", False)
        assert t.num_steps == (2400 if study is lr.STUDY else 7200)
        if row in ("h1_L6", "h1_L24"):
            k = {"h1_L6": 2, "h1_L24": 8}[row]
            assert (m.num_heads, m.num_encoder_layers, m.qk_dim, m.d_ff) == (1, 3 * k, 128 // k, 512 // k)
        else:
            assert (m.num_heads, m.qk_dim, m.v_dim) == {"h1": (1, 128, 128), "h2": (2, 64, 64), "h8": (8, 16, 16),
                                                        "h32": (32, 4, 4), "dk4": (8, 4, 16)}[row]
        if arm.arg.endswith(",recipe"):  # post-LN, dropout 0.1, 800 warmup steps, the pre-LN schedule's tail
            assert (m.norm, m.dropout_rate, t.warmup_steps) == ("post", 0.1, 800)
            assert t.learning_rate == pytest.approx(0.003 * math.sqrt(100 / 800))
        else:
            assert (m.norm, m.dropout_rate, t.warmup_steps, t.learning_rate) == ("pre", 0.0, 100, 0.003)


def test_the_long_arms_refuse_to_start_without_their_rates(tmp_path, monkeypatch, capsys):
    """The study's ready gate refuses before anything trains or is written: study.train raises the line, and
    ``python -m studies train single_head`` prints it as one ERROR line and exits 1."""
    line = "single_head: the learning-rate arm has not chosen the rate of ['h1'] yet"
    pending = dataclasses.replace(sh.STUDY, ready=lambda: line)
    fake = tmp_path / "train.py"
    fake.write_text("raise SystemExit('the gate let a point through')\n")
    where = dict(out=str(tmp_path / "out"), workdir=str(tmp_path / "runs"), train_script=str(fake))
    with pytest.raises(UsageError, match=re.escape(line)):
        study_lib.train(pending, **where)
    monkeypatch.setattr(specs, "study", lambda name: pending)
    with pytest.raises(SystemExit) as exited:
        cli.script(studies_cli.main, ["train", "single_head"] + [f"--{k}={v}" for k, v in where.items()])
    assert exited.value.code == 1
    assert capsys.readouterr().err.strip().splitlines() == [f"ERROR {line}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]  # no run folder, no record, no report
    assert study_lib.train(pending, quick=True, max_points=0, **where) == []  # the tiny points need no rates
    assert sh.STUDY.ready is sh.waiting
    assert (sh.waiting() is None) == all(c.rate is not None for c in sh.CHOICES.values())
    if sh.waiting():
        assert sh.waiting().startswith("single_head: the learning-rate arm has not chosen the rate of")


def _record(path, seed, nll, steps=2400, curve=None, **extra):
    steps_v = sorted(curve or {steps: nll})
    points_lib.write_record(str(path), {
        "schema": 1, "point": os.path.basename(str(path))[:-5], "seed": seed, "steps": steps, "batches_per_epoch": 950,
        "params": 1000, "commit": "abc", "first_logged_utc": "2030-01-01 00:00:00", "device": "cpu cpu x1",
        "validation": {"nll": nll}, "curve": {"step": steps_v, "train_loss": [3.0] * len(steps_v),
                                              "valid_step": steps_v, "valid_nll": [(curve or {steps: nll})[s]
                                                                                    for s in steps_v]}, **extra})


def _lr_records(out, row, nll_by_rate):
    for rate, nll in nll_by_rate.items():
        _record(out / lr.folder(row, rate) / "default.json", lr.LR_SEED, nll)  # one point a sweep: "default"


def test_the_lr_rule_picks_by_nll_with_ties_divergence_and_the_edge_extension(tmp_path):
    lo, mid, hi = lr.GRID
    assert lr.choose({lo: 3.0, mid: 2.9, hi: 2.95}) == mid
    assert lr.choose({lo: 2.895, mid: 2.90, hi: 3.0}) == mid  # within TIE of the best: the shared rate stays
    assert lr.choose({lo: 2.80, mid: 2.90, hi: 2.80}) == lo  # tied and as far from 3e-3: the smaller
    assert lr.choose({lo: 2.9, mid: None, hi: float("nan")}) == lo  # diverged counts as the worst
    out = tmp_path / "lr"
    _lr_records(out, "h1", {lo: 2.95, mid: 2.90})
    assert lr.choices(str(out))["h1"] == lr.Choice(None, "pending", lr.GRID)  # a grid rate without a record
    _lr_records(out, "h1", {hi: 2.93})
    assert lr.choices(str(out))["h1"] == lr.Choice(mid, "chosen", lr.GRID)
    # the lowest rate wins: the grid extends below it, and the rule reads the whole grid again
    _lr_records(out, "h2", {lo: 2.80, mid: 2.90, hi: 3.00})
    assert lr.choices(str(out))["h2"] == lr.Choice(None, "pending", (mid / 4, lo, mid, hi))
    _lr_records(out, "h2", {mid / 4: 2.86})
    assert lr.choices(str(out))["h2"] == lr.Choice(lo, "chosen", (mid / 4, lo, mid, hi))
    # upward, twice, then the cap: the edge rate is used and marked
    _lr_records(out, "h32", {lo: 3.0, mid: 2.9, hi: 2.8, 2 * hi: 2.7, 4 * hi: 2.6})
    assert lr.choices(str(out))["h32"] == lr.Choice(4 * hi, "edge", (lo, mid, hi, 2 * hi, 4 * hi))
    # every rate diverges: lower rates until the cap, then the row has no rate
    _lr_records(out, "dk4", {r: None for r in (mid / 8, mid / 4, lo, mid, hi)})
    assert lr.choices(str(out))["dk4"] == lr.Choice(None, "failed", (mid / 8, mid / 4, lo, mid, hi))
    # the lr study's arms follow the records: the extension rate is an arm of its own, trained after the grid
    assert lr.arm("h2", mid / 4).order == 1 and lr.arm("h2", mid).order == 0
    assert lr.arm("h2", mid / 4).records == "points/h2/lr_0.00075"


def test_the_reading_rule():
    u, c, r, n = claims_lib.UNRESOLVED, claims_lib.CONTRADICTED, claims_lib.REPRODUCED, claims_lib.NO_EFFECT
    assert sh.answer({}).startswith("Not answered yet")
    assert sh.answer({"L h1x6": c, "R h1": u}).startswith("Not answered yet")  # one unresolved leaves it open
    assert sh.answer({"L h1x6": c, "R h1": c}).startswith("Yes: one head beats eight")
    assert sh.answer({"L h1x6": c, "R h1": n}).startswith("Partly: one head beats eight with per-row rates")
    assert sh.answer({"L h1x6": r, "R h1": n}).startswith("No: ")
    assert sh.answer({"L h1x6": claims_lib.DIFFERS, "R h1": n}).startswith("Undecided")
    assert "Caveat" in sh.answer({"L h1x6": c, "R h1": c, "AA 9-11 vs 6-8": c})


def test_the_answer_is_marked_provisional_while_a_noise_floor_claim_lacks_its_seeds():
    from types import SimpleNamespace

    c, u = claims_lib.CONTRADICTED, claims_lib.UNRESOLVED
    def verdicts(kinds, short):
        return {i: SimpleNamespace(kind=kinds.get(i, u), interval=None if i in short else 1) for i in sh.KEY}

    decided = {"L h1x6": c, "R h1": c}
    assert sh.pending(verdicts(decided, ())) == ""  # every split has its seeds: the answer is final
    assert sh.pending(verdicts({"L h1x6": c}, ("M machines",))) == ""  # no answer yet: nothing to qualify
    assert sh.pending(verdicts(decided, ("M machines",))).startswith(" Provisional: M machines lacks its registered")
    assert sh.pending(verdicts(decided, sh.AA_IDS[-2:])).startswith(
        f" Provisional: {sh.AA_IDS[-2]}, {sh.AA_IDS[-1]} lack their registered seeds so far")


@pytest.mark.parametrize("study", [lr.STUDY, sh.STUDY], ids=lambda s: s.name)
def test_the_reports_generate_without_records(tmp_path, study):
    (verdicts,) = study_lib.evaluate([study], {study.name: str(tmp_path)}).values()
    assert all(v.kind == claims_lib.UNRESOLVED for v in verdicts)
    text = open(study_lib.write_report(study, verdicts, out=str(tmp_path))).read()
    assert f"Points recorded: 0 of {len(study.points())}" in text and "Provisional" not in text  # no answer yet
    if study.claims:  # registered before any record: the verdicts and the margins say so
        assert "post-hoc readings" not in text and f"were committed with the claims at {sh.COMMIT[:7]}" in text
        if claims_lib.commit_time(sh.COMMIT) is not None:
            assert all(v.registration == f"pre-registered (registered at {sh.COMMIT[:7]}, no record yet)"
                       for v in verdicts)


def test_the_older_studies_keep_their_post_hoc_margins():
    for name in ("table3", "table3_d256", "table3_d512", "heads_vs_depth", "mqar", "mqar_variants"):
        assert specs.study(name).margins_note == study_lib.POST_HOC_MARGINS, name
    text = open(os.path.join(points_lib.REPO, "docs/results/heads_vs_depth/README.md")).read()
    assert study_lib.POST_HOC_MARGINS in text and study_lib.MARGINS_WITH_CLAIMS not in text


def test_the_report_answers_from_records(tmp_path):
    """Synthetic records: h = 1 below h = 8 by 0.05 at 6 seeds a side and under the recipe; the re-run of seeds
    0-2 on the first run's machine is set apart ("same machine again")."""
    def arm_records(name, base, seeds):
        for i, seed in enumerate(seeds):
            nll = base + 0.004 * i
            _record(tmp_path / "points" / name / f"seed_{seed}.json", seed, nll, 7200,
                    {s: nll + 0.01 * (7200 - s) / 600 for s in range(600, 7201, 600)})

    for name, base, seeds in (("h1-s0", 2.50, (0, 1, 2)), ("h1-s3", 2.50, (3, 4, 5)), ("h8-s0", 2.55, (0, 1, 2)),
                              ("h8-s3", 2.55, (3, 4, 5)), ("recipe-h1", 2.40, (0, 1, 2)),
                              ("recipe-h8", 2.46, (0, 1, 2)), ("aa-s6", 2.55, (6, 7, 8)), ("aa-s9", 2.55, (9, 10, 11)),
                              ("replicate", 2.55, (0, 1, 2))):
        arm_records(name, base, seeds)
    groups = sh.STUDY.records(str(tmp_path))
    assert sh.SAME_MACHINE in groups and sh.A["replicate"] not in groups
    (verdicts,) = study_lib.evaluate([sh.STUDY], {"single_head": str(tmp_path)}).values()
    kinds = {v.claim.id: v.kind for v in verdicts}
    assert kinds["L h1x6"] == kinds["R h1"] == claims_lib.CONTRADICTED and kinds["M machines"] == claims_lib.UNRESOLVED
    text = open(study_lib.write_report(sh.STUDY, verdicts, out=str(tmp_path))).read()
    assert "**Does the single-head advantage survive per-row learning rates, 3x the budget and the paper's " \
           "recipe?** Yes: one head beats eight" in text
    # the re-run on the first runs' machine leaves M machines without its seeds: the answer says it may change
    assert "under the paper's recipe. Provisional: M machines lacks its registered seeds so far; one that differs " \
           "will add the rule's caveat. It follows" in text
    assert "## Noise floor: the A/A false-positive rate" in text and "## The same points on two machines" in text
    assert "0 of 48 contrasts (0%)" in text  # 4 A/A splits x 12 validation steps, identical sides


def test_the_machine_claim_reads_the_records_machine(tmp_path):
    """A re-run whose record names another machine is the replicate arm; one naming the first run's machine is
    "same machine again"; the machines table shows the records' machine fields."""
    box = {"name": "box-a", "cpu": "AMD EPYC", "device": "cpu cpu x1"}
    for seed in (0, 1, 2):
        _record(tmp_path / "points" / "h8-s0" / f"seed_{seed}.json", seed, 2.5, 7200, machine=box)
        _record(tmp_path / "points" / "replicate" / f"seed_{seed}.json", seed, 2.5, 7200,
                machine={**box, "name": "box-b"} if seed else box)
    groups = sh.STUDY.records(str(tmp_path))
    assert [r.seed for _, r in groups[sh.A["replicate"]]] == [1, 2]
    assert [r.seed for _, r in groups[sh.SAME_MACHINE]] == [0]
    rows = {row[0]: row[1:3] for row in sh.machine_section(groups).rows}
    assert rows["seed_1"] == ["box-a (AMD EPYC; cpu cpu x1), boot not recorded",
                              "box-b (AMD EPYC; cpu cpu x1), boot not recorded"]
    assert rows["seed_0"][0] == rows["seed_0"][1]


def test_machines_with_one_name_are_told_apart_by_their_boots(tmp_path):
    """Cloned machines share host name, CPU model and device: a re-run is on another machine only where both
    records know the boot of every training call and share none; the committed h8-s0 records (made before records
    kept boots) have theirs from the spec."""
    vm = {"name": "vm", "cpu": "AMD EPYC", "device": "cpu cpu x1"}
    replicate_boots = {0: ["bbbbbbbb"], 1: ["aaaaaaaa", "bbbbbbbb"], 2: [None, "bbbbbbbb"]}
    for seed in (0, 1, 2):
        _record(tmp_path / "points" / "h8-s0" / f"seed_{seed}.json", seed, 2.5, 7200,
                machine={**vm, "boots": ["aaaaaaaa"]})
        _record(tmp_path / "points" / "replicate" / f"seed_{seed}.json", seed, 2.5, 7200,
                machine={**vm, "boots": replicate_boots[seed]})
    groups = sh.STUDY.records(str(tmp_path))
    assert [r.seed for _, r in groups[sh.A["replicate"]]] == [0]  # 1 shares a boot; 2 has a call of unknown boot
    assert [r.seed for _, r in groups[sh.SAME_MACHINE]] == [1, 2]
    rows = {row[0]: row[1:3] for row in sh.machine_section(groups).rows}
    assert rows["seed_1"] == ["vm (AMD EPYC; cpu cpu x1), boot aaaaaaaa", "vm (AMD EPYC; cpu cpu x1), boot aaaaaaaa, "
                              "bbbbbbbb"]
    first = Record.load(os.path.join(points_lib.REPO, "docs/results/single_head/points/h8-s0/seed_0.json"))
    assert first.boots == () and sh.boots(first) == frozenset(["b9f938f4"])
    assert {sh.boots(r) for r in records_in(os.path.join(points_lib.REPO, "docs/results/single_head/points/h8-s0")
                                            ).values()} == {frozenset(["b9f938f4"])}


def test_a_claim_short_of_its_seeds_has_no_contrast_in_the_secondary_tables(tmp_path):
    """h = 8 at seeds 0-5 only: *AA 3-5 vs 0-2* (3 a side) has its by-step contrast; *AA odd vs even triples*
    (6 a side) reads the same six records, has no verdict, and so no by-step row, no BLEU contrast and no place in
    the A/A false-positive count either."""
    for name, seeds in (("h8-s0", (0, 1, 2)), ("h8-s3", (3, 4, 5))):
        for seed in seeds:
            nll = 2.5 + 0.01 * seed
            m = 10 + seed  # matches of each order in each 20-token sentence: BLEU rises with the seed
            _record(tmp_path / "points" / name / f"seed_{seed}.json", seed, nll, 7200,
                    {s: nll + 0.001 * (7200 - s) for s in range(600, 7201, 600)}, test={"bleu": 20.0 + seed},
                    bleu_sentence_stats={"rows": [[m, m - 1, m - 2, m - 3, 20, 19, 18, 17, 20, 20]] * 30})
    (verdicts,) = study_lib.evaluate([sh.STUDY], {"single_head": str(tmp_path)}).values()
    text = open(study_lib.write_report(sh.STUDY, verdicts, out=str(tmp_path))).read()
    by_step = text.split("## Contrasts against the training budget")[1].split("\n## ")[0]
    assert "| AA 3-5 vs 0-2 | +0.030 [" in by_step and "AA odd vs even" not in by_step
    floor = text.split("## Noise floor: the A/A false-positive rate")[1].split("\n## ")[0]
    assert re.search(r"Welch p < 0.05 in \d+ of 12 contrasts", floor) and "| AA odd vs even" not in floor  # not 24
    bleu = {line.split(" | ")[0]: line for line in text.split("## Test BLEU (secondary)")[1].split("\n## ")[0]
            .splitlines() if line.startswith("| AA")}
    assert bleu["| AA odd vs even triples"].endswith("| 3/3 (needs 6 a side) | — | — | — |")
    assert bleu["| AA 3-5 vs 0-2"].endswith("| +3.00 [+0.73, +5.27] | 3 | 3 | 0 |")  # 23-25 against 20-22


def test_the_claims_are_registered_by_the_commit_that_added_the_spec():
    if not sh.COMMIT:
        pytest.skip("the spec's registration commit is not filled in yet")
    for c in sh.CLAIMS:
        assert c.registered == claims_lib.Registration(sh.COMMIT, sh.SPEC, f'"{c.id}"')
    if claims_lib.commit_time(sh.COMMIT) is None:
        pytest.skip("no git history here")
    later = study_lib.Record("x.json", {"first_logged_utc": "2099-01-01 00:00:00"})
    assert all(claims_lib.registered_before(c.registered, [later]) for c in sh.CLAIMS)
    assert all(claims_lib.registration(c, [later]).startswith("pre-registered") for c in sh.CLAIMS)


def test_the_lr_report_shows_each_rows_choice_and_the_criterion(tmp_path):
    lo, mid, hi = lr.GRID
    _lr_records(tmp_path, "h1", {lo: 2.95, mid: 2.90, hi: 2.93})
    _lr_records(tmp_path, "h8", {lo: 2.80, mid: 2.90, hi: 3.00})  # at the lower edge: one more rate to train
    groups = lr.STUDY.records(str(tmp_path))
    assert {k: len(v) for k, v in groups.items()} == {f"h=1 (d_k=128), lr {lr.rate_text(r)}": 1 for r in lr.GRID} | {
        f"h=8 (d_k=16), lr {lr.rate_text(r)}": 1 for r in lr.GRID}
    table = {row[0]: row[1:] for row in lr.choice_table(groups).rows}
    assert table["h=1 (d_k=128)"] == ["0.0015: 2.9500, 0.003: 2.9000, 0.006: 2.9300", "chosen", "0.003"]
    assert table["h=8 (d_k=16)"][1:] == ["pending", "—"] and table["h=8 (d_k=16)"][0].startswith("0.00075: —")
    measured, verdict, reason = lr.inside({k: [r for _, r in v] for k, v in groups.items()})
    assert verdict == "pending" and "h1 0.003 (chosen)" in measured and "'h8'" in reason
    (verdicts,) = study_lib.evaluate([lr.STUDY], {lr.STUDY.name: str(tmp_path)}).values()
    text = open(study_lib.write_report(lr.STUDY, verdicts, out=str(tmp_path))).read()
    assert "## Each row's learning rate" in text and f"Points recorded: 6 of {len(lr.STUDY.points())}" in text


def test_the_results_index_marks_the_claims_it_retests_then_supersedes_them(monkeypatch, tmp_path):
    """docs/results/README.md: Table 3's and heads vs depth's re-tested claims are named with the claims that re-test
    them while those are open, and marked superseded, with the new verdicts, once they are resolved or the later
    study has every point (the record count is faked too, so the test holds whatever is committed)."""
    from types import SimpleNamespace

    from studies import index

    notes = index.retest_notes([sh])
    table3, depth = specs.study("table3").out, specs.study("heads_vs_depth").out
    points = f"{sum(len(m) for m in sh.STUDY.records().values())} of {len(sh.STUDY.points())} points"
    assert notes[table3].startswith(f"re-tested by [single_head](single_head/README.md) ({points}): ")
    assert "24+24 match off " in notes[depth]  # the committed records' verdicts decide the rest: faked below
    rows = [line for line in open(index.write(path=str(tmp_path / "README.md"))).read().splitlines()
            if "(table3/README.md)" in line]
    assert len(rows) == 1 and rows[0].endswith(f". Claims {notes[table3]} |")

    def verdict(cid: str, kind: str, interval=None):
        return SimpleNamespace(claim=SimpleNamespace(id=cid), reading=lambda: kind, interval=interval,
                               measured=lambda: "-0.012 [-0.037, +0.012]")

    resolved = {"single_head": [verdict("L h1x6", claims_lib.CONTRADICTED), verdict("R h1", claims_lib.NO_EFFECT),
                                verdict("L h2", claims_lib.UNRESOLVED), verdict("L h32", claims_lib.UNRESOLVED, 1)]}
    monkeypatch.setattr(index.study_lib, "evaluate", lambda studies: resolved)
    total = len(sh.STUDY.points())
    monkeypatch.setattr(type(sh.STUDY), "records", lambda self, out=None: {"arm": [None] * (total - 1)})  # one to go
    notes = index.retest_notes([sh])
    assert "d128 h1x6 superseded (L h1x6: contradicted, R h1: no effect)" in notes[table3]
    assert "d128 h2 by L h2;" in notes[table3]  # its re-test is still open, short of its seeds
    assert "d128 h32 by L h32 (-0.012 [-0.037, +0.012], unresolved);" in notes[table3]  # open with its seeds
    assert "24+24 match off by D 24+24=8x3+3" in notes[depth]  # no verdict at all: named only
    monkeypatch.setattr(type(sh.STUDY), "records", lambda self, out=None: {"arm": [None] * total})  # every point in
    notes = index.retest_notes([sh])
    assert f"({total} of {total} points)" in notes[table3] and " by L " not in notes[table3]
    assert "24+24 match off superseded (D 24+24=8x3+3: unresolved)" in notes[depth]
    assert "d128 h2 superseded (L h2: unresolved)" in notes[table3]  # the study is done: unresolved is its verdict


def test_the_contrasts_by_step_and_the_noise_floor_keep_a_step_that_one_record_lacks(tmp_path):
    """A record without a validation at some step (a run resumed there before the engine evaluated again on a
    resume) leaves that step in both tables with its side's n one short, not out of them."""
    for name, base, seeds in (("h1-s0", 2.45, (0, 1, 2)), ("h1-s3", 2.45, (3, 4, 5)), ("h8-s0", 2.50, (0, 1, 2)),
                              ("h8-s3", 2.50, (3, 4, 5))):
        for seed in seeds:
            c = {s: base + 0.004 * seed + 0.01 * (7200 - s) / 600 for s in range(600, 7201, 600)}
            if (name, seed) in (("h1-s0", 2), ("h8-s3", 4)):
                del c[4800]
            _record(tmp_path / "points" / name / f"seed_{seed}.json", seed, c[7200], 7200, c)
    (verdicts,) = study_lib.evaluate([sh.STUDY], {"single_head": str(tmp_path)}).values()
    study_lib.write_report(sh.STUDY, verdicts, out=str(tmp_path))
    for csv_name, claim, n_4800, n_4200, diff in (
            ("contrasts_by_step.csv", "L h1x6", ("5", "5"), ("6", "6"),
             2.45 + 0.004 * 13 / 5 - (2.50 + 0.004 * 11 / 5)),
            ("noise_floor.csv", "AA 3-5 vs 0-2", ("2/3",), ("3/3",), 0.004 * (3 + 5) / 2 - 0.004)):
        with open(tmp_path / csv_name, newline="") as f:
            rows = {(r.get("id") or r["claim"], int(r["step"])): r for r in csv.DictReader(f)}
        assert sorted(s for i, s in rows if i == claim) == list(range(600, 7201, 600)), csv_name
        n = lambda step: tuple(v for k, v in rows[claim, step].items() if k.startswith("n "))  # noqa: E731
        assert (n(4800), n(4200)) == (n_4800, n_4200), csv_name
        assert float(rows[claim, 4800]["Δ NLL"]) == pytest.approx(diff), csv_name
