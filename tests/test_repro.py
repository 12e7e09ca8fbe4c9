"""Each reproduction's --quick mode runs and writes its Markdown report with figures."""
import csv
import math
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))


def _report(out_dir, *figures):
    text = open(os.path.join(out_dir, "README.md")).read()
    for fig in figures:
        assert os.path.getsize(os.path.join(out_dir, f"{fig}.png")) > 0
        assert f"]({fig}.png)" in text
    return text


def _csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_scale_quick(tmp_path):
    import repro_scale

    repro_scale.main(["--quick", f"--out={tmp_path}"])
    text = _report(tmp_path, "init", "training")
    rows = _csv(tmp_path / "init.csv")
    assert len(rows) == 9 and {r["scale"] for r in rows} == {"1", "1/sqrt(d_k)", "1/d_k"}
    cell = {(int(r["d_k"]), r["scale"]): {k: float(v) for k, v in r.items() if k not in ("d_k", "scale")}
            for r in rows}
    s1, s2, s3 = cell[(256, "1")], cell[(256, "1/sqrt(d_k)")], cell[(256, "1/d_k")]
    assert s1["logit std"] == pytest.approx(16.0, rel=0.15)  # sqrt(d_k)
    assert s2["logit std"] == pytest.approx(1.0, rel=0.15)
    assert s1["mean max weight"] > 0.7 and s1["keys with gradient"] < 6  # saturated: few keys get gradient
    assert s3["entropy (nats)"] == pytest.approx(math.log(32), rel=0.01)  # 1/d_k: near uniform over 32 keys
    assert s2["keys with gradient"] > 3 * s1["keys with gradient"]
    assert len(_csv(tmp_path / "training.csv")) == 3
    assert "What the initialization data say" in text


def test_logit_growth_quick(tmp_path):
    import repro_logit_growth

    repro_logit_growth.main(["--quick", f"--out={tmp_path}"])
    _report(tmp_path, "loss_vs_lr", "max_logit")
    rows = _csv(tmp_path / "runs.csv")
    assert {r["QK-LayerNorm"] for r in rows} == {"on", "off"}
    assert repro_logit_growth.lr_sensitivity([1.0, 2.0, 9.0], init_loss=3.0) == pytest.approx(1.0)


def test_entropy_collapse_quick(tmp_path):
    import repro_entropy_collapse

    repro_entropy_collapse.main(["--quick", f"--out={tmp_path}"])
    _report(tmp_path, "entropy_collapse")
    assert [r["run"] for r in _csv(tmp_path / "summary.csv")] == ["stable", "high", "very high"]
    div = repro_entropy_collapse.divergence_step
    assert div([1, 2, 3, 4], [5.0, 3.0, 3.5, 4.5], spike=1.0) == 4
    assert div([1, 2, 3], [5.0, float("nan"), 1.0], spike=1.0) == 2
    assert div([1, 2], [5.0, 4.0], spike=1.0) is None


def test_mqar_quick(tmp_path):
    import repro_mqar

    repro_mqar.main(["--quick", f"--out={tmp_path}"])
    text = _report(tmp_path, "accuracy_grid")
    rows = _csv(tmp_path / "grid.csv")
    assert [(r["num_heads"], r["qk_dim"], r["seed"]) for r in rows] == [("1", "8", "0"), ("2", "8", "0")]
    assert all(0.0 <= float(r["eval accuracy"]) <= 1.0 for r in rows)
    assert all(math.isfinite(float(r["eval loss"])) and float(r["eval loss"]) > 0 for r in rows)
    assert "## What the data say" in text and "Steps to learn" in text and "Mean accuracy by d_k" in text
    assert repro_mqar.solve_step([10, 20, 30, 40], [3.0, 0.7, 0.4, 0.1]) == 30
    assert repro_mqar.solve_step([10, 20], [3.0, 2.0]) is None


def test_table3_quick_report_with_seed_spread(tmp_path):
    """The Table 3 reproduction over its real sweep configs, trained by the stand-in (train.py is tested
    on its own; a real point takes minutes)."""
    import repro_table3
    import sweep as sweep_lib

    repro_table3.main(["--quick", f"--out={tmp_path / 'report'}", f"--workdir={tmp_path / 'runs'}",
                       f"--train_script={os.path.join(REPO, 'tests', 'fake_train.py')}"])
    text = _report(tmp_path / "report", "table3")
    rows_a = _csv(tmp_path / "report" / "rows_A.csv")
    assert [r["num_heads"] for r in rows_a] == ["1", "8"]
    assert rows_a[0]["test BLEU"].startswith("13 ")  # stand-in: 5 h + d_k / 8 + seed, d_model 64 in quick mode
    assert sorted(int(r["qk_dim"]) for r in _csv(tmp_path / "report" / "rows_B.csv")) == [2, 4, 8]  # 8: the base
    assert (tmp_path / "runs" / "A" / "README.md").exists()
    assert "Test BLEU, heads 1 vs 8: 13 vs 41" in text

    groups = {1: [10.0, 11.0], 8: [12.0, 12.5]}
    shared = repro_table3.shared_points(
        [(sweep_lib.Point("num_heads_8-seed_1", {"model.num_heads": 8, "seed": 1}), {"status": "done"}),
         (sweep_lib.Point("num_heads_1-seed_1", {"model.num_heads": 1, "seed": 1}), {"status": "done"})], 256)
    assert [(p.overrides, s) for p, s in shared] == [({"model.qk_dim": 32, "seed": 1}, {"status": "done"})]
    assert "1 is worse" in repro_table3.compare(groups, 1, 8, "BLEU, heads", higher_is_better=True)
    assert "do not overlap" in repro_table3.compare(groups, 1, 8, "BLEU, heads", higher_is_better=True)
