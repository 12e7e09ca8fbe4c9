"""The explanation study: --quick trains and reports, the claims' measurements on hand-made verses, and the
committed report regenerated from its records."""
import os
import shutil

import numpy as np
import pytest

from reports import REPO
from reports import read_csv as _rows
from studies import seedwise
from studies.specs import explanation

COMMITTED = os.path.join(REPO, "docs", "results", "explanation")
RECORDS = ("run.json", "per_example.csv", "accuracy.csv")


@pytest.mark.slow
def test_repro_explanation_quick(tmp_path):
    from studies.commands import explanation_main

    explanation_main(["--quick", "--out", str(tmp_path)])
    text = (tmp_path / "README.md").read_text()
    assert "Kendall" in text and "uniform" in text and "## Verdicts" in text
    for fig in ("explanation", "accuracy"):
        assert os.path.getsize(tmp_path / f"{fig}.png") > 0 and f"]({fig}.png)" in text
    rows = _rows(tmp_path / "per_example.csv")
    assert len(rows) == 8
    for row in rows:
        assert 0.0 <= float(row["perm_median_tvd"]) <= 1.0
        assert 0.0 <= float(row["adv_jsd"]) <= np.log(2) + 1e-6
        assert -1.0 <= float(row["tau_grad"]) <= 1.0 or np.isnan(float(row["tau_grad"]))
    verdicts = _rows(tmp_path / "verdicts.csv")
    assert list(verdicts[0]) == seedwise.VERDICT_COLUMNS and len(verdicts) == len(explanation.CLAIMS)
    assert {v["verdict"] for v in verdicts} == {"unresolved"}  # one seed: no interval


def _per_example(seed, amax, tvd, tau=0.2, adv=0.6):
    return [{"seed": str(seed), "max_alpha": str(a), "perm_median_tvd": str(t), "tau_grad": str(tau),
             "tau_loo": str(tau / 2), "adv_jsd": str(adv)} for a, t in zip(amax, tvd)]


def test_measurements_and_verdicts_on_hand_made_verses():
    """Three seeds whose peaked verses are clearly more sensitive, with small permutation changes, weak tau,
    adversarial JSD above 0.5 and learned attention 30 points above uniform."""
    rng = np.random.default_rng(0)
    amax = np.r_[np.full(20, 0.1), np.full(20, 0.9)]
    per = [row for s in range(3) for row in _per_example(
        s, amax, np.r_[rng.uniform(0, 0.01, 20), rng.uniform(0.02, 0.03, 20)], tau=0.2 + 0.01 * s)]
    acc = [{"seed": str(s), "test accuracy (learned α)": str(0.9 + 0.01 * s),
            "test accuracy (uniform α)": str(0.6 - 0.01 * s)} for s in range(3)]
    m = explanation.measurements(per, acc)
    assert m["seeds"] == [0, 1, 2]
    assert m["claims"]["tau_grad"][0] == pytest.approx([0.2, 0.21, 0.22])
    assert all(0.015 < x < 0.03 for x in m["claims"]["peaked"][0])
    kinds = {v.claim.id: v.kind for v in seedwise.judge_all(explanation.CLAIMS, m["claims"])}
    assert kinds == {"tau_grad": "reproduced", "tau_loo": "reproduced", "permutation": "reproduced",
                     "peaked": "reproduced", "adversarial": "reproduced", "uniform": "contradicted"}
    few = [r for r in per if float(r["max_alpha"]) < 0.5 or r is per[-1]]  # one peaked verse: no contrast
    assert None in explanation.measurements(few, acc)["claims"]["peaked"][0]


def test_report_regenerates_the_committed_report(tmp_path):
    for name in RECORDS:
        shutil.copy(os.path.join(COMMITTED, name), tmp_path / name)
    explanation.report(str(tmp_path))
    for name in ("README.md", "summary.csv", "by_max_attention.csv", "verdicts.csv"):
        assert (tmp_path / name).read_text() == open(os.path.join(COMMITTED, name)).read(), name
    for fig in ("explanation.png", "accuracy.png"):
        assert os.path.getsize(tmp_path / fig) > 0
    (tmp_path / "run.json").unlink()
    with pytest.raises(ValueError, match="run.json not found"):
        explanation.report(str(tmp_path))
