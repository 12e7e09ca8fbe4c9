"""The attention-variants MQAR reproduction: committed point records (written once, never retrained), the
report built from records alone, the verdicts against Zoology, and the config's errors.

Points are trained by a stand-in for train.py (below) that logs what engine/loop.py logs for an LM task, with
an accuracy that depends on the kind, the number of pairs and the width, so nothing here trains a model.
"""
import csv
import json
import os
import textwrap

import pytest

from reports import REPO, calls_of, install_stand_in

import sweep  # noqa: E402

STAND_IN = textwrap.dedent('''
    # recs: the metrics.jsonl records engine/loop.py writes for the MQAR LM task.
    kind = args["config.model.attention_kind"]
    pairs = int(args["config.data.mqar_num_kv_pairs"])
    d = int(args["config.model.d_model"])
    seed = int(args["config.seed"])
    # softmax always solves; linear solves only when d_model >= 8 * pairs; the others sit at 0.5
    acc = {"softmax": 1.0, "linear": 1.0 if d >= 8 * pairs else 0.2}.get(kind, 0.5) - 0.001 * seed
    recs = [{"step": 0, "event": "start", "params": 100 * d}]
    for step in range(10, 201, 10):
        recs.append({"step": step, "train/loss": 4.0 * (1 - acc) + 1.0 / step, "train/grad_norm": 1.0})
    recs.append({"step": 200, "event": "train_end", "reason": "num_steps", "minutes": 0.1})
    recs.append({"step": 200, "validation/loss": 4.0 * (1 - acc), "validation/nll": 4.0 * (1 - acc),
                 "validation/accuracy": acc})
''')


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    return install_stand_in(tmp_path, monkeypatch, STAND_IN)


def test_quick_writes_records_and_report_and_never_retrains(tmp_path, stand_in):
    import repro_mqar_variants as rmv

    train, calls = stand_in
    out, runs = tmp_path / "report", tmp_path / "runs"
    argv = ["--quick", f"--out={out}", f"--workdir={runs}", f"--train_script={train}"]
    (out).mkdir()
    (out / "timing.md").write_text("STATIC TIMING TABLE\n")
    rmv.main(argv)
    names = sorted(n for n in os.listdir(out / "points") if n.endswith(".json"))
    assert names == sorted(f"attention_kind_{k}-mqar_num_kv_pairs_{n}.json"
                           for k in ("softmax", "linear", "additive", "hard") for n in (2, 4))
    assert len(calls_of(calls)) == 8
    rec = json.loads((out / "points" / "attention_kind_linear-mqar_num_kv_pairs_4.json").read_text())
    assert rec["config"].startswith("configs/mqar_variants.py:seeds=1,quick")
    assert rec["overrides"]["model.attention_kind"] == "linear" and rec["overrides"]["data.seq_len"] == 16
    assert rec["validation"]["accuracy"] == pytest.approx(0.2) and rec["steps"] == 200

    text = (out / "README.md").read_text()
    assert "STATIC TIMING TABLE" in text and "## What the data say" in text and "Not finished yet" not in text
    assert (out / "accuracy_vs_pairs.png").exists() and (out / "train_loss.png").exists()
    with open(out / "cells.csv") as f:
        cells = {(r["kind"], r["pairs"]): float(r["mean accuracy"]) for r in csv.DictReader(f)}
    assert cells[("softmax", "2")] == 1.0 and cells[("linear", "4")] == pytest.approx(0.2)
    # d_model 16: linear solves 2 pairs (16 >= 8 * 2), not 4, so the width needed grows with the pairs
    with open(out / "verdicts.csv") as f:
        verdicts = {r["claim"]: r["verdict"] for r in csv.DictReader(f)}
    assert verdicts == {"softmax attention solves MQAR at every width": "reproduced",
                        "linear attention needs a width that grows with the number of pairs": "reproduced"}
    assert "## Verdicts" in text and "solves MQAR at every width (Zoology): **reproduced**" in text

    # a second run trains nothing: every point has its record, even without the run folders
    for d, _, files in os.walk(runs):
        for f in files:
            os.remove(os.path.join(d, f))
    rmv.main(argv)
    assert len(calls_of(calls)) == 8


def test_softmax_verdict_reads_failures_of_finished_cells_only():
    """With cells missing, failures at the smallest width alone leave the verdict open (partial is possible);
    failures at the fewest pairs and at the largest width settle it; a complete grid gets a final verdict."""
    import repro_mqar_variants as m

    pairs, widths = (4, 8), (32, 64)

    def verdict(acc):
        return m.verdict_rows(["softmax"], pairs, widths, acc)[0][3:]

    acc = {("softmax", 4, 32): [0.58], ("softmax", 4, 64): [1.0], ("softmax", 8, 32): [0.3]}
    v, why = verdict(acc)
    assert v == "undecided" and "fails 4 pairs at d_model 32 (0.58), 8 pairs at d_model 32 (0.30)" in why
    assert verdict({**acc, ("softmax", 8, 64): [1.0]}) == [
        "partial", "softmax attention solves every number of pairs at d_model 64; it fails 4 pairs at d_model 32 "
        "(0.58), 8 pairs at d_model 32 (0.30)"]
    assert verdict({**acc, ("softmax", 8, 64): [0.2]})[0] == "not reproduced"
    assert verdict({("softmax", 4, 32): [1.0]}) == ["undecided", "softmax attention solves every finished cell "
                                                    "(not every cell has finished)"]
    assert verdict({k: [1.0] for k in [("softmax", n, w) for n in pairs for w in widths]})[0] == "reproduced"


def test_what_the_data_say_reads_softmax_within_zoologys_widths_apart():
    """d_model 32 is below Zoology's narrowest width: the report adds the softmax rule over the widths Zoology
    measured, marked as outside the pass criteria, and leaves the pre-registered verdict as it is."""
    import repro_mqar_variants as m

    pairs, widths = (4,), (32, 64)
    acc = {("softmax", 4, 32): [0.5, 0.6, 0.55], ("softmax", 4, 64): [1.0, 1.0, 0.99]}
    text = m.what_the_data_say(["softmax"], pairs, widths, acc, [], [], [{"steps": 3000}])
    assert "every width (Zoology): **partial**" in text
    assert "d_model 32 is below the range" in text and "Over d_model 64 only, the same rule reads **reproduced**" in text
    assert "below the range" not in m.what_the_data_say(["softmax"], pairs, (64,), acc, [], [], [{"steps": 3000}])


def test_what_the_data_say_names_cells_that_fail_at_a_larger_width_than_one_that_solves():
    import repro_mqar_variants as m

    acc = {("linear", 4, 32): [1.0], ("linear", 4, 64): [0.97], ("linear", 4, 128): [0.77],
           ("linear", 8, 32): [0.2], ("linear", 8, 64): [0.3], ("linear", 8, 128): [0.99]}
    records = [{"overrides": {"model.d_model": w, "train.learning_rate": lr}} for w, lr in ((32, 1e-2), (128, 3e-3))]
    text = m.what_the_data_say(["linear"], (4, 8), (32, 64, 128), acc, [], [], records)
    assert "Not monotonic in width: linear at 4 pairs (solved at d_model 32, 0.77 at d_model 128)." in text
    assert "(d_model 32: 0.01, d_model 128: 0.003)" in text and "8 pairs (solved" not in text
    acc[("linear", 4, 128)] = [0.99]
    assert "Not monotonic" not in m.what_the_data_say(["linear"], (4, 8), (32, 64, 128), acc, [], [], records)


def test_lr_probe_rows_put_probed_cells_beside_the_sweeps_run(tmp_path):
    import repro_mqar_variants as m
    import sweep

    def rec(lr, acc, seed=0, pairs=4):
        return {"schema": 1, "point": "p", "seed": seed, "train": {"learning_rate": lr},
                "validation": {"accuracy": acc},
                "overrides": {"model.attention_kind": "linear", "data.mqar_num_kv_pairs": pairs, "model.d_model": 128}}

    assert m.lr_probe(str(tmp_path), {}) == []
    for lr, acc in ((0.01, 0.69), (0.001, 0.63)):
        sweep.write_record(str(tmp_path / "lr_probe" / f"lr_{lr}" / "a.json"), rec(lr, acc))
    sweep_recs = {"a": rec(0.003, 0.96), "b": rec(0.003, 0.5, seed=1), "c": rec(0.003, 0.4, pairs=8)}
    rows = m.lr_probe(str(tmp_path), sweep_recs)
    assert [(r[4], r[5], r[6]) for r in rows] == [(0.001, 0.63, "lr_probe/lr_0.001"), (0.003, 0.96, "the sweep"),
                                                  (0.01, 0.69, "lr_probe/lr_0.01")]
    assert m.lr_probe_reading(rows) == ("Reading: linear, 4 pairs, d_model 128, seed 0 (0.001: 0.63, 0.003: 0.96, "
                                        "0.01: 0.69): best at 0.003, solved.")


def test_report_only_lists_unfinished_points(tmp_path, stand_in):
    import repro_mqar_variants as rmv

    train, calls = stand_in
    out, runs = tmp_path / "report", tmp_path / "runs"
    spec = os.path.join(REPO, "configs/mqar_variants.py") + ":seeds=1,quick"
    points = sweep.sweep_points(spec)
    for p in points[:3]:  # softmax 2, softmax 4, linear 2
        assert sweep.run_point(spec, str(runs), p, {}, group="g", train_script=str(train),
                               record=str(out / "points" / f"{p.name}.json"))
    rmv.main(["--quick", "--report_only", f"--out={out}", f"--workdir={runs}", f"--train_script={train}"])
    assert len(calls_of(calls)) == 3
    text = (out / "README.md").read_text()
    assert "**Not finished yet (5 points):**" in text and "`attention_kind_hard-mqar_num_kv_pairs_4`" in text
    assert "**undecided**: not every linear cell has finished" in text
    assert "Not measured yet: `python scripts/bench_variants.py --markdown" in text


def test_sweep_grid_and_point_shapes():
    import importlib.util

    spec = importlib.util.spec_from_file_location("mv", os.path.join(REPO, "configs/mqar_variants.py"))
    mv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mv)
    points = list(mv.sweep("seeds=3"))
    assert len(points) == len(mv.KINDS) * len(mv.PAIRS) * len(mv.WIDTHS) * 3
    assert [p["seed"] for p in points[:3]] == [0, 0, 0] and points[-1]["seed"] == 2  # seed-major
    for p in points:
        n = p["data.mqar_num_kv_pairs"]
        assert p["data.seq_len"] >= 4 * n and p["model.max_len"] == p["data.seq_len"]
        assert p["data.batch_size"] * n == 256  # the same number of answers per step at every N
    c = mv.get_config("kind=additive,pairs=16,d_model=32")
    assert (c.model.attention_kind, c.data.mqar_num_kv_pairs, c.data.seq_len, c.model.d_model, c.model.d_ff) == (
        "additive", 16, 64, 32, 128)


@pytest.mark.parametrize("arg, message", [
    ("pairs=16,seq_len=32", "seq_len=32 is too short for pairs=16; MQAR needs at least 4 * pairs = 64 tokens"),
    ("kind=sparse", "kind='sparse'; expected a registered attention kind, one of ('softmax', 'linear', "),
    ("pairs=200", "vocab=256 leaves 125 distinct keys; pairs=200 needs vocab >= 405"),
    ("heads=3", "heads=3 must be a positive divisor of d_model=64"),
    ("pairs=16,queries=40", "queries=40 must be a positive multiple of pairs=16"),
])
def test_config_errors_are_one_line(arg, message):
    import importlib.util

    spec = importlib.util.spec_from_file_location("mv", os.path.join(REPO, "configs/mqar_variants.py"))
    mv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mv)
    with pytest.raises(ValueError) as e:
        mv.get_config(arg)
    assert message in str(e.value) and "\n" not in str(e.value)
