"""Each reproduction's --quick mode runs and writes its Markdown report with figures."""
import math

import pytest

from reports import read_csv as _csv, read_report as _report


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
