"""The head-importance study's --quick mode trains through the engine and writes a complete report (a file of
its own, so pytest-xdist's --dist loadfile runs it beside the explanation study)."""
import csv
import json
import math
import os
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))

import repro_head_importance  # noqa: E402

VERDICTS = {"reproduced", "partial", "not reproduced", "undecided"}


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_repro_head_importance_quick(tmp_path):
    runs = tmp_path / "runs"
    repro_head_importance.main(["--quick", "--first_seed", "2", "--out", str(tmp_path), "--workdir", str(runs)])
    # --workdir: the model trains in <workdir>/quick_seed2 with checkpoints, and a rerun resumes it
    assert sorted(os.listdir(runs / "quick_seed2" / "checkpoints")) == ["4"]
    spec = repro_head_importance.SPEC + ":quick"
    _, info = repro_head_importance.train(spec, {"seed": 2}, str(runs / "quick_seed2"))
    starts = [json.loads(line) for line in open(runs / "quick_seed2" / "metrics.jsonl")
              if '"event": "start"' in line]
    assert info["steps"] == 4 and [s["resumed"] for s in starts] == [False, True] and starts[1]["step"] == 4
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
    with open(tmp_path / "verdicts.csv") as f:
        assert next(csv.reader(f)) == ["claim", "paper", "measured", "verdict", "reason"]
    verdicts = _rows(tmp_path / "verdicts.csv")
    assert len(verdicts) == 7 and all(r["verdict"] in VERDICTS for r in verdicts)
    assert verdicts[1]["verdict"] == "undecided"  # the quick pruning grid (0, 0.5, 0.9) has no 20% point
    assert verdicts[-1]["verdict"] == "undecided"  # no uniform baseline with --quick
    text = (tmp_path / "README.md").read_text()
    assert "## Verdicts" in text and "test the criteria on fresh models" in text and "--first_seed 2" in text
    assert {r["seed"] for r in rows} == {"2"} and [r["seed"] for r in _rows(tmp_path / "models.csv")] == ["2"]
    decoded = sorted(os.listdir(tmp_path / "decoded"))
    assert decoded == ["seed2_cross_permute_all_layers.txt", "seed2_cross_uniform_all_layers.txt",
                       "seed2_unmasked.txt"]
    for name in decoded:
        assert len((tmp_path / "decoded" / name).read_text().split("\n")) == 8 + 1  # 8 sentences, final newline


def test_verdict_rows_follow_the_criteria():
    """Each row function on hand-made numbers, on both sides of its threshold."""
    h = repro_head_importance
    assert h.single_head_row([1, 2, 3], 72, [-1.2, -1.0, -1.5])[3] == "reproduced"
    assert h.single_head_row([20, 20, 20], 72, [-3.0, -3.0, -3.0])[3] == "not reproduced"
    fractions = (0.0, 0.1, 0.2, 0.3)
    assert h.pruning_row(fractions, [[20, 19.8, 19.5, 17], [20, 20, 19.2, 18]])[3] == "reproduced"
    assert h.pruning_row(fractions, [[20, 18.5, 17, 15], [20, 19.5, 18, 16]])[3] == "not reproduced"
    assert h.pruning_row((0.0, 0.5, 0.9), [[20, 10, 2]])[3] == "undecided"
    half = {"encoder_self": [1.0, 1.2], "decoder_self": [5.0, 6.0], "cross": [9.0, 8.0]}
    end = {"encoder_self": [2.0, 2.0], "decoder_self": [11.0, 12.0], "cross": [17.0, 18.0]}
    assert h.group_row(half, end, 0.9)[3] == "reproduced"
    assert h.group_row(dict(half, encoder_self=[30.0, 30.0]), end, 0.9)[3] == "not reproduced"
    assert h.confidence_row([0.5, 0.6], [0.4, 0.35])[3] == "reproduced"
    assert h.confidence_row([0.5, 0.6], [-0.1, -0.2])[3] == "partial"
    assert h.confidence_row([0.1, 0.2], [-0.1, -0.2])[3] == "not reproduced"
    assert h.confidence_row([float("nan")], [0.5])[3] == "undecided"
    none = {"encoder_self": [0.0, 0.0], "decoder_self": [0.0, 0.0]}
    some = {"encoder_self": [2.0, 1.0], "decoder_self": [0.0, 0.0]}
    assert h.positional_row(none, [], [0.1, 0.5, 0.9])[3] == "not reproduced"
    assert h.positional_row(some, [0.9, 0.8, 0.95], [0.1, 0.5, 0.4])[3] == "reproduced"
    assert h.positional_row(some, [0.1, 0.2, 0.05], [0.1, 0.5, 0.4])[3] == "partial"
    base, tvd = [18.0, 19.0], [0.4, 0.5]
    assert h.replaced_row(base, [2.0, 3.0], [2.5, 2.0], tvd, tvd)[3] == "reproduced"
    assert h.replaced_row(base, [2.0, 3.0], [15.0, 16.0], tvd, tvd)[3] == "partial"
    assert h.replaced_row(base, [17.0, 18.0], [15.0, 16.0], tvd, tvd)[3] == "not reproduced"
    assert h.uniform_row(base, [6.0, 6.5])[3] == "reproduced"
    assert h.uniform_row(base, [18.0, 18.2])[3] == "not reproduced"
    assert h.uniform_row(base, [])[3] == "undecided"
    for row in (h.single_head_row([0], 8, [-0.5]), h.uniform_row(base, [6.0])):
        assert len(row) == 5 and all(isinstance(c, str) and c for c in row)
