"""The induction-head reproduction: its --quick report (ICL score, head scores, ablations), the score
functions on hand-made attention, and the data layout it trains on."""
import math
import os
import shutil

import numpy as np
import pytest

from reports import REPO, read_csv as _csv

from studies import commands, seedwise
from studies.report import write_csv
from studies.specs import induction

COMMITTED = os.path.join(REPO, "docs", "results", "induction")
RECORDS = ("run.json", "summary.csv", "scores.csv", "ablation.csv")


@pytest.mark.slow
def test_induction_quick(tmp_path):
    commands.induction_main(["--quick", f"--out={tmp_path}"])
    text = open(tmp_path / "README.md").read()
    for fig in ("icl_score", "head_scores"):
        assert os.path.getsize(tmp_path / f"{fig}.png") > 0 and f"]({fig}.png)" in text
    rows = _csv(tmp_path / "summary.csv")
    assert [(r["attention layers"], r["seed"]) for r in rows] == [("1", "0"), ("2", "0")]
    for r in rows:
        assert math.isfinite(float(r["ICL score (start)"])) and math.isfinite(float(r["ICL score (end)"]))
        assert 0.0 <= float(r["accuracy on repeats (end)"]) <= 1.0
    assert "ICL score" in text and "## What the data say" in text and "2 layers minus 1 layer" in text

    heads = _csv(tmp_path / "heads.csv")
    assert [(r["attention layers"], r["layer"]) for r in heads] == [("1", "0")] * 4 + [("2", "0")] * 4 + [("2", "1")] * 4
    for r in heads:
        for k in ("previous-token score (first)", "previous-token score (end)", "prefix-matching score (first)",
                  "prefix-matching score (end)"):
            assert 0.0 <= float(r[k]) <= 1.0, (k, r)
    series = _csv(tmp_path / "scores.csv")
    assert len(series) == 12 * 2  # quick: measured at steps 2 and 4, like the ICL score
    assert sorted({int(r["step"]) for r in series}) == [2, 4]

    ablation = _csv(tmp_path / "ablation.csv")
    assert set(ablation[0]) == {"attention layers", "seed", "masked", "head", "ICL score", "share of the drop lost"}
    conditions = [r["masked"] for r in ablation if r["attention layers"] == "2"]
    assert conditions[:3] == ["no mask", "top prefix-matching head", "lowest prefix-matching head of that layer"]
    assert {"top 4 prefix-matching heads", "top previous-token head of layer 0",
            "lowest previous-token head of layer 0", "top 4 previous-token heads of layer 0"} <= set(conditions)
    assert len(ablation) == 2 * 11 and all(math.isfinite(float(r["ICL score"])) for r in ablation)
    top4 = next(r for r in ablation if r["attention layers"] == "2" and r["masked"] == "top 4 prefix-matching heads")
    assert len(top4["head"].split("+")) == 4
    # Unmasked, the ablation's ICL score is the engine's final evaluation of the same sequences.
    for layers, summary in zip(("1", "2"), rows):
        unmasked = next(r for r in ablation if r["attention layers"] == layers and r["masked"] == "no mask")
        assert float(unmasked["ICL score"]) == pytest.approx(float(summary["ICL score (end)"]), abs=1e-4)
    assert "## Ablation" in text and "prefix-matching" in text
    verdicts = _csv(tmp_path / "verdicts.csv")
    assert list(verdicts[0]) == seedwise.VERDICT_COLUMNS and len(verdicts) == len(induction.CLAIMS)
    assert {r["verdict"] for r in verdicts} == {"unresolved"}  # one seed
    assert text.index("## Verdicts") < text.index("## What the data say")
    assert "training loss" in text  # the quick run recorded its curves (curves.csv): the full figure
    os.remove(tmp_path / "README.md")
    commands.induction_main([f"--out={tmp_path}", "--report_only"])
    assert (tmp_path / "README.md").read_text() == text


def test_report_regenerates_the_committed_report(tmp_path):
    for name in RECORDS:
        shutil.copy(os.path.join(COMMITTED, name), tmp_path / name)
    induction.report(str(tmp_path))
    for name in ("README.md", "verdicts.csv", "heads.csv"):
        assert (tmp_path / name).read_text() == open(os.path.join(COMMITTED, name)).read(), name
    verdicts = {r["claim"]: r["verdict"] for r in _csv(tmp_path / "verdicts.csv")}
    assert verdicts["knocking out the top induction head removes most in-context learning (2 layers)"] == \
        "contradicted"
    os.remove(tmp_path / "run.json")
    with pytest.raises(ValueError, match="run.json not found"):
        induction.report(str(tmp_path))


def test_knockout_claims_follow_the_share_lost(tmp_path):
    for name in RECORDS:
        shutil.copy(os.path.join(COMMITTED, name), tmp_path / name)
    rows = _csv(os.path.join(COMMITTED, "ablation.csv"))
    for top, expected in ((-0.4, "reproduced"), (0.0, "unresolved"), (0.4, "contradicted")):
        for r in rows:  # the unmasked ICL score is negative: ICL masked = (1 - share) x unmasked
            if r["masked"] == "top prefix-matching head":
                base = next(float(b["ICL score"]) for b in rows if (b["attention layers"], b["seed"], b["masked"])
                            == (r["attention layers"], r["seed"], "no mask"))
                r["ICL score"] = str((1 - (0.5 - top + 0.01 * int(r["seed"]))) * base)
        write_csv(str(tmp_path / "ablation.csv"), list(rows[0]), [list(r.values()) for r in rows])
        run, _, runs = induction.load_runs(str(tmp_path))
        kinds = {v.claim.id: v.kind for v in seedwise.judge_all(
            induction.CLAIMS, induction.measurements(runs, run["seeds"], 25, run["steps"]))}
        assert kinds["knockout_top"] == expected, top


def test_induction_repeat_layout_is_a_tiled_block():
    """The layout the induction reproduction trains on: every masked target is what followed the current
    token at its previous occurrence, and the block length varies between rows."""
    import data
    from data import synthetic

    cfg = data.default_synthetic_config()
    cfg.update(task="induction", induction_layout="repeat", vocab_size=40, seq_len=32, induction_segment_len=12,
               batch_size=16, batch_multiple=1, prefetch=0)
    b = data.build_synthetic(cfg, seed=3).batch(0)
    periods = set()
    for inp, tgt, mask in zip(b["inputs"], b["targets"], b["loss_mask"]):
        assert inp[0] == synthetic.BOS_ID and inp[1:].min() >= synthetic.FIRST_TOKEN
        n = int(np.flatnonzero(inp[2:] == inp[1])[0]) + 1  # period: where the first token comes back
        periods.add(n)
        assert 6 <= n <= 12 and len(set(inp[1:n + 1])) == n
        np.testing.assert_array_equal(np.flatnonzero(mask), np.arange(n + 1, 32))
        for t in np.flatnonzero(mask):
            assert inp[t - n] == inp[t] and inp[t - n + 1] == tgt[t]
    assert len(periods) > 1
    cfg.induction_layout = "tiled"
    with pytest.raises(ValueError, match="induction_layout"):
        data.build_synthetic(cfg, seed=3)


def test_share_lost_and_formation_lags():
    from analysis.heads import formation_lags, share_lost

    ablation = [("no mask", (), -4.0), ("top prefix-matching head", ((1, 0),), -3.0), ("all", ((1, 0), (1, 1)), 1.0)]
    assert share_lost(ablation, "top prefix-matching head") == pytest.approx(0.25)
    assert share_lost(ablation, "all") == pytest.approx(1.25)  # late tokens predicted worse than early ones
    assert math.isnan(share_lost([("no mask", (), 0.5)], "no mask"))  # nothing learned in context
    with pytest.raises(ValueError, match="condition 'x'"):
        share_lost(ablation, "x")
    steps = [10, 20, 30, 40]
    scores = np.array([[0.0, 0.1], [0.1, 0.1], [0.8, 0.1], [0.9, 0.1]])  # head 0 rises at step 30; head 1 never
    assert formation_lags(steps, scores, phase=20, threshold=0.5) == [10]
    assert formation_lags(steps, scores, phase=None, threshold=0.5) == []
    flat = np.array([[0.9, 0.1]] * 4)  # at its final value from the first measurement: did not rise
    assert formation_lags(steps, flat, phase=20, threshold=0.5) == [None]


def test_head_labels_and_score_rows_round_trip():
    from analysis.heads import head_label, parse_heads, score_arrays, score_rows

    assert parse_heads(head_label([(1, 3), (1, 0)])) == ((1, 3), (1, 0)) and parse_heads("—") == ()
    prev, prefix = np.random.default_rng(0).random((2, 3, 2, 4))
    back = score_arrays(score_rows(prev, prefix))
    np.testing.assert_array_equal(back[0], prev)
    np.testing.assert_array_equal(back[1], prefix)
