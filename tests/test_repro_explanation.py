"""The explanation study's --quick mode trains through the engine and writes a complete report."""

import numpy as np

from reports import read_csv as _rows

import repro_explanation  # noqa: E402  (scripts/ is on the path once reports is imported)


def test_repro_explanation_quick(tmp_path):
    repro_explanation.main(["--quick", "--out", str(tmp_path)])
    text = (tmp_path / "README.md").read_text()
    assert "Kendall" in text and "uniform" in text
    rows = _rows(tmp_path / "per_example.csv")
    assert len(rows) == 8
    for row in rows:
        assert 0.0 <= float(row["perm_median_tvd"]) <= 1.0
        assert 0.0 <= float(row["adv_jsd"]) <= np.log(2) + 1e-6
        assert -1.0 <= float(row["tau_grad"]) <= 1.0 or np.isnan(float(row["tau_grad"]))
    acc = _rows(tmp_path / "accuracy.csv")[0]
    assert 0.0 <= float(acc["test accuracy (uniform α)"]) <= 1.0
