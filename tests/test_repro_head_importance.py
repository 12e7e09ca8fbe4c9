"""The head-importance study's --quick mode trains through the engine and writes a complete report (a file of
its own, so pytest-xdist's --dist loadfile runs it beside the explanation study)."""
import csv
import os
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))

import repro_head_importance  # noqa: E402


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_repro_head_importance_quick(tmp_path):
    repro_head_importance.main(["--quick", "--out", str(tmp_path)])
    assert (tmp_path / "pruning.png").exists()
    rows = _rows(tmp_path / "per_head.csv")
    assert len(rows) == 3 * 8  # 1+1 layers in the quick model: encoder_self, decoder_self, cross, 8 heads each
    assert all(np.isfinite(float(r["importance_raw"])) and float(r["importance_raw"]) >= 0 for r in rows)
    pruning = _rows(tmp_path / "pruning.csv")
    assert len(pruning) == len(repro_head_importance.FRACTIONS)
