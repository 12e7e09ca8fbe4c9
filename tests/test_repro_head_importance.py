"""The head-importance study's --quick mode trains through the engine and writes a complete report (a file of
its own, so pytest-xdist's --dist loadfile runs it beside the explanation study)."""
import csv
import math
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
    for name in ("pruning.png", "confidence.png", "README.md"):
        assert (tmp_path / name).exists(), name
    rows = _rows(tmp_path / "per_head.csv")
    assert len(rows) == 3 * 8  # 1+1 layers in the quick model: encoder_self, decoder_self, cross, 8 heads each
    for r in rows:
        assert math.isfinite(float(r["bleu_change_masked_alone"])) and math.isfinite(float(r["nll_change_masked_alone"]))
        assert np.isfinite(float(r["importance_raw"])) and float(r["importance_raw"]) >= 0
        assert 0 < float(r["confidence"]) <= 1 + 1e-6
        assert (r["prev_token_weight"] == "") == (r["group"] == "cross")  # positional scores: self-attention only
    assert sorted(float(r["pruned_at_fraction"]) for r in rows) == [i / 24 for i in range(24)]
    pruning = _rows(tmp_path / "pruning.csv")
    assert len(pruning) == len(repro_head_importance.QUICK_FRACTIONS)
    assert {r["cross-attention"] for r in _rows(tmp_path / "vashishth.csv")} == {
        "unmodified", "permute, all layers", "uniform, all layers"}
    assert not (tmp_path / "uniform_baseline.csv").exists()  # --quick trains no uniform baseline (time)
    assert len(_rows(tmp_path / "voita.csv")) == 3 and len(_rows(tmp_path / "survival.csv")) == 3
    assert "What the data say" in (tmp_path / "README.md").read_text()
