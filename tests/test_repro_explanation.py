"""The explanation study's --quick mode trains through the engine and writes a complete report; its verdicts
follow the pass criteria and can be rebuilt from the committed CSVs without training."""

import os
import shutil

import numpy as np
import pytest

from reports import REPO
from reports import read_csv as _rows

import repro_explanation  # noqa: E402  (scripts/ is on the path once reports is imported)

VERDICTS = {"reproduced", "partial", "not reproduced", "undecided"}
COMMITTED = os.path.join(REPO, "docs", "results", "explanation")


@pytest.mark.slow
def test_repro_explanation_quick(tmp_path):
    repro_explanation.main(["--quick", "--out", str(tmp_path)])
    text = (tmp_path / "README.md").read_text()
    assert "Kendall" in text and "uniform" in text and "## Verdicts" in text
    rows = _rows(tmp_path / "per_example.csv")
    assert len(rows) == 8
    for row in rows:
        assert 0.0 <= float(row["perm_median_tvd"]) <= 1.0
        assert 0.0 <= float(row["adv_jsd"]) <= np.log(2) + 1e-6
        assert -1.0 <= float(row["tau_grad"]) <= 1.0 or np.isnan(float(row["tau_grad"]))
    acc = _rows(tmp_path / "accuracy.csv")[0]
    assert 0.0 <= float(acc["test accuracy (uniform α)"]) <= 1.0
    verdicts = _rows(tmp_path / "verdicts.csv")
    assert list(verdicts[0]) == ["claim", "paper", "measured", "verdict", "reason"]
    assert len(verdicts) == 5 and len({v["claim"] for v in verdicts}) == 5
    assert {v["verdict"] for v in verdicts} <= VERDICTS


def _summary(tau=(0.2, 0.3, 0.25), med=(0.01, 0.1, 0.1), frac_adv=(0.1, 0.2, 0.3)) -> dict[str, list[float]]:
    return {"mean_tau_grad": list(tau), "mean_tau_loo": [0.1] * len(tau), "median_perm_median_tvd": list(med),
            "frac_perm_below_0.05": [0.5] * len(med), "frac_adv_jsd_above_0.5": list(frac_adv),
            "mean_adv_jsd": [0.3] * len(frac_adv)}


def _verdicts(rows) -> list[str]:
    assert all(len(r) == 5 for r in rows) and len(rows) == 5
    return [r[3] for r in rows]


def test_verdict_rows_hand_made():
    rng = np.random.default_rng(0)
    flat, peaked = np.full(20, 0.1), np.full(20, 0.9)
    alpha_max = [np.concatenate([flat, peaked])] * 3
    # peaked verses clearly more sensitive in every seed; a uniform model far less accurate
    sensitive = [np.concatenate([rng.uniform(0, 0.01, 20), rng.uniform(0.1, 0.2, 20)]) for _ in range(3)]
    rows = repro_explanation.verdict_rows(_summary(), [0.90, 0.91, 0.92], [0.60, 0.62, 0.61], alpha_max, sensitive)
    assert _verdicts(rows) == ["reproduced", "partial", "reproduced", "not reproduced", "not reproduced"]
    assert "0.2, 0.3, 0.25" in rows[0][2] and "+0.300 [" in rows[4][2]
    # only 3 peaked verses per seed: undecided; a noisy, small accuracy difference: partial
    few = [np.concatenate([flat, np.full(3, 0.9)])] * 3
    rows = repro_explanation.verdict_rows(_summary(tau=(0.6, 0.7, 0.2), frac_adv=(0.9, 0.8, 0.7)),
                                          [0.90, 0.70, 0.80], [0.75, 0.80, 0.70], few, [rng.uniform(0, 1, 23)] * 3)
    assert _verdicts(rows) == ["partial", "partial", "undecided", "reproduced", "partial"]
    # uniform as accurate within a tight interval: reproduced; fewer than 3 seeds: undecided
    rows = repro_explanation.verdict_rows(_summary(), [0.80, 0.81, 0.82], [0.81, 0.80, 0.82], alpha_max, sensitive)
    assert _verdicts(rows)[4] == "reproduced"
    two = {k: v[:2] for k, v in _summary().items()}
    rows = repro_explanation.verdict_rows(two, [0.8, 0.9], [0.8, 0.9], alpha_max[:2], sensitive[:2])
    assert set(_verdicts(rows)) == {"undecided"}


def test_verdicts_only_rebuilds_committed(tmp_path, capsys):
    for name in ("README.md", "summary.csv", "accuracy.csv", "by_max_attention.csv", "per_example.csv"):
        shutil.copy(os.path.join(COMMITTED, name), tmp_path / name)
    readme = (tmp_path / "README.md").read_text()
    repro_explanation.main(["--verdicts_only", "--out", str(tmp_path)])
    assert (tmp_path / "verdicts.csv").read_text() == open(os.path.join(COMMITTED, "verdicts.csv")).read()
    text = (tmp_path / "README.md").read_text()
    assert text == readme  # the committed README already holds exactly this Verdicts section
    assert text.count("## Verdicts") == 1 and text.index("## Verdicts") < text.index("## What the data say")
    assert "post hoc" in text
    # without a Verdicts section it is inserted before "What the data say"; the rest of the report is kept
    start, end = readme.index("## Verdicts"), readme.index("## What the data say")
    (tmp_path / "README.md").write_text(readme[:start] + readme[end:])
    repro_explanation.main(["--verdicts_only", "--out", str(tmp_path)])
    assert (tmp_path / "README.md").read_text() == readme
    assert "partial: permutation changes the output more where attention is peaked" in capsys.readouterr().out
    (tmp_path / "summary.csv").unlink()
    with pytest.raises(SystemExit, match="summary.csv not found"):
        repro_explanation.main(["--verdicts_only", "--out", str(tmp_path)])
