"""The attention-variants MQAR study (``studies/specs/mqar_variants.py``): committed point records (written once,
never retrained), its rules against Zoology read from the records, and the config's errors.

Points are trained by a stand-in for train.py (below) that logs what engine/loop.py logs for an LM task, with
an accuracy that depends on the kind, the number of pairs and the width, so nothing here trains a model.
"""
import json
import os
import textwrap

import pytest

from reports import REPO, calls_of, install_stand_in

from studies import cli, specs
from studies.claims import judge_criteria

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
    train, calls = stand_in
    out, runs = tmp_path / "report", tmp_path / "runs"
    argv = ["--quick", f"--out={out}", f"--workdir={runs}", f"--train_script={train}"]
    assert cli.main(["train", "mqar_variants"] + argv) == 0
    names = sorted(n for n in os.listdir(out / "points") if n.endswith(".json"))
    assert names == sorted(f"attention_kind_{k}-mqar_num_kv_pairs_{n}.json"
                           for k in ("softmax", "linear", "additive", "hard") for n in (2, 4))
    assert len(calls_of(calls)) == 8
    rec = json.loads((out / "points" / "attention_kind_linear-mqar_num_kv_pairs_4.json").read_text())
    assert rec["config"].startswith("configs/mqar_variants.py:seeds=3,quick,seeds=1")
    assert rec["overrides"]["model.attention_kind"] == "linear" and rec["overrides"]["data.seq_len"] == 16
    assert rec["validation"]["accuracy"] == pytest.approx(0.2) and rec["steps"] == 200

    study = specs.study("mqar_variants")
    groups = {label: [r for _, r in members] for label, members in study.records(str(out)).items()}
    rows = {row[0]: row for row in judge_criteria(study.criteria, groups)}
    assert rows["softmax"][2:4] == ["2 of 2 cells solved (every seed >= 0.95)", "reproduced"]
    # d_model 16: linear solves 2 pairs (16 >= 8 * 2), not 4: growth only by the largest count failing
    assert rows["linear width"][2:4] == ["2 pairs: 16; 4 pairs: none up to 16", "unresolved"]

    for d, _, files in os.walk(runs):  # a second run trains nothing: every point has its record
        for f in files:
            os.remove(os.path.join(d, f))
    cli.main(["train", "mqar_variants"] + argv)
    assert len(calls_of(calls)) == 8


def test_linear_width_growth_is_read_from_solved_pair_counts_only():
    from studies.records import Record
    from studies.specs.mqar_variants import linear_width_grows

    def cell(acc):
        return [Record("r.json", {"validation": {"accuracy": acc}})] * 3

    grows = {"linear, 4 pairs, d_model 32": cell(1.0), "linear, 8 pairs, d_model 32": cell(0.5),
             "linear, 8 pairs, d_model 64": cell(1.0)}
    assert linear_width_grows(grows)[1] == "reproduced"
    falls = {"linear, 4 pairs, d_model 32": cell(0.5), "linear, 4 pairs, d_model 64": cell(1.0),
             "linear, 8 pairs, d_model 32": cell(1.0)}
    assert linear_width_grows(falls)[1] == "contradicted"


def test_committed_verdicts_read_softmax_and_linear_from_their_cells():
    study = specs.study("mqar_variants")
    groups = {label: [r for _, r in members] for label, members in study.records().items()}
    rows = {row[0]: row for row in judge_criteria(study.criteria, groups)}
    assert rows["softmax"][3] == "partial" and "16 pairs at d_model 32" in rows["softmax"][4]
    assert rows["linear width"][2] == "4 pairs: 64; 8 pairs: 64; 16 pairs: none up to 128"
    assert rows["linear width"][3] == "unresolved" and rows["linear width"][6].startswith("post-hoc")


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
