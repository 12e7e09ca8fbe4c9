"""The Table 3 and heads-vs-depth reproductions: committed point records (written once, never retrained), the
report built from records alone (partial sweeps included), and the statistics behind it, checked against
scipy and sacreBLEU.

Points are trained by a stand-in for train.py (written below) that logs what engine/loop.py logs, including
a ``bleu`` event and the hypotheses file in ``outputs/``; the references come from a fixed list instead of
the corpus (``sweep.split_references`` is patched), so nothing here trains a model.
"""
import json
import math
import os
import re
import shutil
import textwrap

import numpy as np
import pytest

from reports import REPO, calls_of, install_stand_in, read_csv as _csv

import _stats  # noqa: E402
import sweep  # noqa: E402

REFS = [f"the {w} of the land went out to {v} on the day of the feast"
        for w in ("king", "people", "sons", "priests", "elders", "men")
        for v in ("battle", "pray", "work", "rest", "sea")]

STAND_IN = textwrap.dedent('''
    # recs: the metrics.jsonl records engine/loop.py writes, plus outputs/test_step200.txt.
    os.makedirs(os.path.join(workdir, "outputs"), exist_ok=True)
    h = int(args.get("config.model.num_heads", 8))
    dk = int(args.get("config.model.qk_dim", 8))
    seed = int(args.get("config.seed", 0))
    refs = json.load(open(os.environ["REFS_FILE"]))
    # h = 1 drops the last word of every third sentence; other settings keep every reference
    hyps = [" ".join(r.split()[:-1]) if h == 1 and i % 3 == 0 else r for i, r in enumerate(refs)]
    with open(os.path.join(workdir, "outputs", "test_step200.txt"), "w") as f:
        f.write("\\n".join(hyps) + "\\n")
    recs = [{"step": 0, "event": "start", "params": 1000 + h, "data_stats": {"batches": {"per_epoch": 100}}}]
    for step in range(10, 201, 10):
        loss = 5.0 - step / 100 + (1.0 if (h == 1 and step == 150) else 0.0)  # h = 1: one loss spike
        recs.append({"step": step, "train/loss": loss, "train/nll": loss - 0.5, "train/grad_norm": step / 100})
    for step in (50, 100, 150, 200):
        recs.append({"step": step, "attn/step": step - 1, "attn/cross/max_logit": step / 10.0 + h,
                     "attn/decoder_self/max_logit": 1.0})
    nll = 2.0 + 0.1 * (h == 1) + dk / 1000 + 0.01 * seed
    recs.append({"step": 100, "validation/nll": nll + 1, "validation/loss": nll + 1.2})
    recs.append({"step": 200, "event": "train_end", "reason": "num_steps", "minutes": 0.1})
    recs.append({"step": 200, "event": "bleu", "split": "test", "sentences": len(hyps), "bleu": 50.0, "chrf": 60.0,
                 "bleu_signature": "sig", "chrf_signature": "csig",
                 "hypotheses": os.path.join(workdir, "outputs", "test_step200.txt")})
    recs.append({"step": 200, "validation/nll": nll, "validation/loss": nll + 0.2,
                 "validation/perplexity": 2.718 ** nll, "test/bleu": 50.0, "test/chrf": 60.0})
''')


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    refs = tmp_path / "refs.json"
    refs.write_text(json.dumps(REFS))
    monkeypatch.setenv("REFS_FILE", str(refs))
    monkeypatch.setattr(sweep, "split_references", lambda point_dir, split: list(REFS))
    return install_stand_in(tmp_path, monkeypatch, STAND_IN)


def test_quick_writes_records_and_never_retrains_recorded_points(tmp_path, stand_in):
    import repro_table3

    train, calls = stand_in
    out, runs = tmp_path / "report", tmp_path / "runs"
    argv = ["--quick", f"--out={out}", f"--workdir={runs}", f"--train_script={train}"]
    repro_table3.main(argv)
    names = sorted(os.path.relpath(os.path.join(d, f), out / "points") for d, _, fs in os.walk(out / "points")
                   for f in fs)
    # quick: d_model 64, one seed (so no seed in the names); the A/A row is the base point with seed 1, the
    # single-head extension h = 1 with seed 1, the d_k control h = 1 at d_k 8 with seed 0; each record has its
    # decoded test sentences and its attention trace beside it
    points = ["A/num_heads_1", "A/num_heads_8", "A1/default", "A1dk/default", "AA/default", "B/qk_dim_2",
              "B/qk_dim_4"]
    assert names == sorted(f"{p}{ext}" for p in points for ext in (".json", ".test.txt", ".attention.json.gz"))
    hyps = [" ".join(r.split()[:-1]) if i % 3 == 0 else r for i, r in enumerate(REFS)]
    committed = out / "points" / "A" / "num_heads_1.test.txt"
    assert committed.read_text() == "\n".join(hyps) + "\n"
    committed.unlink()  # a record whose sentences are missing gets them back from its run folder
    repro_table3.main(argv + ["--rows=A"])
    assert committed.read_text() == "\n".join(hyps) + "\n" and len(calls_of(calls)) == 7
    # seed-major order: rows (A) and (B) of seed 0 first, then the A/A row, the single-head rows last
    assert [os.path.basename(os.path.dirname(c)) for c in calls_of(calls)] == [
        "A", "A", "B", "B", "AA", "A1", "A1dk"]

    path = out / "points" / "A" / "num_heads_1.json"
    assert path.stat().st_size < 60_000
    rec = json.loads(path.read_text())
    assert rec["config"].startswith("configs/table3_heads.py:seeds=1,quick")
    assert rec["overrides"] == {"model.num_heads": 1, "model.qk_dim": 64, "model.v_dim": 64, "seed": 0}
    assert rec["seed"] == 0 and rec["steps"] == 200 and rec["params"] == 1001 and rec["batches_per_epoch"] == 100
    assert rec["validation"]["nll"] == pytest.approx(2.0 + 0.1 + 0.064)
    assert rec["test"]["bleu"] == 50.0 and rec["test"]["chrf"] == 60.0 and rec["end_reason"] == "num_steps"
    curve = rec["curve"]
    assert curve["step"] == [100, 200] and curve["valid_step"] == [100, 200]
    assert curve["train_loss"][0] == pytest.approx(np.mean([5.0 - s / 100 for s in range(10, 101, 10)]))
    assert curve["grad_norm"] == [1.0, 2.0]
    st = rec["stability"]
    assert st["loss_spikes"] == 1 and st["max_grad_norm"] == 2.0
    assert st["max_attention_logit"] == {"cross": 21.0, "decoder_self": 1.0}
    assert st["max_logit_curve"]["step"] == [49, 99, 149, 199]
    bs = rec["bleu_sentence_stats"]
    assert bs["sentences"] == len(REFS) and len(bs["rows"]) == len(REFS)
    import sacrebleu

    assert _stats.corpus_bleu(np.asarray(bs["rows"])) == pytest.approx(
        sacrebleu.corpus_bleu(hyps, [REFS]).score, abs=1e-9)
    text = (out / "README.md").read_text()
    assert "Records: 7 of 7 points" in text and "## What the data say" in text and "Not finished" not in text
    assert "more seeds: h=1, d_k=64" in text and "## Single head with more seeds (extension)" in text
    assert "h=1, d_k=8, d_v=64" in text and "## Single head at the base's d_k (control)" in text
    assert "too few seeds" in text  # one seed per setting: no interval
    for fig in ("table3", "contrasts", "learning_curves"):
        assert (out / f"{fig}.png").stat().st_size > 0 and f"]({fig}.png)" in text

    # a fresh checkout: no run folders, only the committed records -> nothing is trained again
    shutil.rmtree(runs)
    before = {p: p.read_bytes() for p in (out / "points").rglob("*.json")}
    repro_table3.main(argv)
    assert len(calls_of(calls)) == 7
    assert {p: p.read_bytes() for p in (out / "points").rglob("*.json")} == before

    # a record made with other settings is refused, naming it
    rec["overrides"]["seed"] = 7
    path.write_text(json.dumps(rec))
    with pytest.raises(ValueError, match=r"num_heads_1.json was trained as"):
        repro_table3.main(argv)
    # a missing record (unfinished point): the report still builds, and says what is missing
    path.unlink()
    repro_table3.main(argv + ["--report_only"])
    assert len(calls_of(calls)) == 7
    text = (out / "README.md").read_text()
    assert "Not finished yet (1 points, in training order):** `A/num_heads_1`" in text and "Records: 6 of 7" in text


def test_report_compares_head_counts_at_equal_dk(tmp_path):
    """Rows (A) h = 32 (d_k 4) against rows (B) d_k 4 at 8 heads: the equal-d_k table with scipy's interval."""
    import repro_table3
    from scipy import stats as sps

    out = tmp_path / "report"
    stats = _stats.sentence_stats(REFS, REFS)
    nll = {("A", "num_heads_32"): [3.05, 3.06, 3.07], ("B", "qk_dim_4"): [3.06, 3.065, 3.05],
           ("A", "num_heads_8"): [2.94, 2.95, 2.93]}
    specs = {"A": "table3_heads.py", "B": "table3_dk.py"}
    for (row, prefix), values in nll.items():
        points = {p.name: p for p in sweep.sweep_points(os.path.join(REPO, "configs", specs[row]))}
        for s, v in enumerate(values):
            p = points[f"{prefix}-seed_{s}"]
            sweep.write_record(str(out / "points" / row / f"{p.name}.json"),
                               _record(row, p.name, p.overrides, s, v, stats))
    repro_table3.main([f"--out={out}", f"--workdir={tmp_path / 'runs'}", "--report_only"])
    rows = _csv(out / "equal_dk.csv")
    assert [r["contrast"] for r in rows] == ["h=32 (d_k=4, d_v=4) minus h=8 (d_k=4, d_v=16)"]
    ci = sps.ttest_ind(nll[("A", "num_heads_32")], nll[("B", "qk_dim_4")], equal_var=False).confidence_interval(0.95)
    assert rows[0]["Δ NLL [Welch 95%]"] == f"+0.002 [{ci.low:+.3f}, {ci.high:+.3f}]"
    assert rows[0]["reading (NLL)"] == "no difference resolved"
    assert "## Head count at equal d_k" in (out / "README.md").read_text()


def _record(row, point, overrides, seed, nll, bleu_stats):
    return {"schema": 1, "point": point, "config": "x", "overrides": overrides, "seed": seed, "steps": 2400,
            "batches_per_epoch": 950, "params": 1, "commit": "abc", "wall_s": 600.0,
            "validation": {"nll": nll, "perplexity": math.exp(nll)},
            "test": {"bleu": _stats.corpus_bleu(bleu_stats), "chrf": 40.0},
            "curve": {"step": [100, 200], "train_nll": [5.0, 4.0], "valid_step": [100, 200],
                      "valid_nll": [nll + 0.5 + 0.1 * (overrides.get("model.num_heads") == 1), nll]},
            "stability": {"max_grad_norm": 1.0, "loss_spikes": 0, "max_loss_jump": 0.1,
                          "max_attention_logit": {"cross": 5.0}},
            "bleu_sentence_stats": {"rows": bleu_stats.tolist()}}


def test_report_from_partial_records_with_intervals(tmp_path):
    """Records for h = 1, the base and the A/A row (3 seeds each) and nothing else: contrasts with Welch
    intervals equal to scipy's, verdicts, paired bootstrap rows, the missing points listed."""
    import repro_table3
    from scipy import stats as sps

    out = tmp_path / "report"
    good = _stats.sentence_stats(REFS, REFS)
    worse = _stats.sentence_stats([" ".join(r.split()[:5]) for r in REFS], REFS)
    nll = {"h1": [2.30, 2.32, 2.31], "h8": [2.20, 2.21, 2.19], "aa": [2.205, 2.19, 2.20]}
    for s in range(3):
        for row, point, ov, key, st in (
                ("A", f"num_heads_1-seed_{s}", {"model.num_heads": 1, "model.qk_dim": 128, "model.v_dim": 128,
                                               "seed": s}, "h1", worse),
                ("A", f"num_heads_8-seed_{s}", {"model.num_heads": 8, "model.qk_dim": 16, "model.v_dim": 16,
                                               "seed": s}, "h8", good),
                ("AA", f"seed_{s + 3}", {"model.num_heads": 8, "model.qk_dim": 16, "model.v_dim": 16,
                                         "seed": s + 3}, "aa", good)):
            seed = ov["seed"]
            sweep.write_record(str(out / "points" / row / f"{point}.json"),
                               _record(row, point, ov, seed, nll[key][s], st))
    repro_table3.main([f"--out={out}", f"--workdir={tmp_path / 'runs'}", "--report_only"])
    text = (out / "README.md").read_text()
    assert "Records: 9 of 33 points" in text
    listed = re.search(r"Not finished yet \(24 points, in training order\):\*\* (.*?)\. Everything", text).group(1)
    listed = [name.strip("`") for name in listed.split(", ")]
    trained_next = [j.label for j in repro_table3.jobs([f"--out={out}"]) if not os.path.exists(j.record)]
    assert listed == trained_next and len(listed) == 24
    assert listed[4:7] == ["B/qk_dim_8-seed_0", "B/qk_dim_4-seed_0", "A/num_heads_2-seed_1"]
    assert listed[-1] == "A1dk/seed_2"
    ext = _csv(out / "single_head_extension.csv")
    assert len(ext) == 1 and ext[0]["reading"] == "waiting for 6 seeds a side"
    assert ext[0]["seeds h=1"] == "[0, 1, 2]" and ext[0]["seeds h=8"] == "[0, 1, 2, 3, 4, 5]"
    rows = {r["contrast"]: r for r in _csv(out / "contrasts.csv")}
    h1 = rows["h=1 (d_k=128) vs h=8"]
    ci = sps.ttest_ind(nll["h1"], nll["h8"], equal_var=False).confidence_interval(0.95)
    assert h1["Δ NLL [Welch 95%]"] == f"+0.110 [{ci.low:+.3f}, {ci.high:+.3f}]"
    assert h1["verdict (NLL)"] == "reproduced" and h1["verdict (BLEU)"] == "reproduced"
    assert float(h1["paper Δ log-ppl"]) == pytest.approx(0.073, abs=1e-3) and float(h1["paper Δ BLEU"]) == -0.9
    assert rows["h=32 (d_k=4) vs h=8"]["verdict (NLL)"] == "missing"
    by_step = {r["contrast"]: r for r in _csv(out / "contrasts_by_step.csv")}
    assert by_step["h=1 (d_k=128) vs h=8"]["Δ NLL at 200"] == h1["Δ NLL [Welch 95%]"] + " (n 3/3)"
    assert by_step["h=1 (d_k=128) vs h=8"]["Δ NLL at 100"].startswith("+0.210 [")  # 0.1 more at step 100
    assert by_step["h=32 (d_k=4) vs h=8"]["Δ NLL at 100"] == "—" and "contrasts_by_step.png" in text
    assert "every contrast keeps its sign at every validation step" in text
    aa = next(r for name, r in rows.items() if name.startswith("A/A"))
    assert aa["verdict (NLL)"] == "no difference resolved"
    paired = _csv(out / "paired_bleu.csv")
    h1_pairs = [r for r in paired if r["contrast"].startswith("h=1")]
    assert [(r["seed"], r["base seed"]) for r in h1_pairs] == [("0", "0"), ("1", "1"), ("2", "2")]
    assert all(float(r["p"]) < 0.01 for r in h1_pairs)
    assert [(r["seed"], r["base seed"]) for r in paired if r["contrast"].startswith("A/A")] == [
        ("3", "0"), ("4", "1"), ("5", "2")]
    assert "**reproduced**" in text and "A/A control" in text and "d_k = 4" in text


def test_single_head_extension_reading_follows_the_written_rule():
    import repro_table3

    def iv(lo, hi, n=6):
        return _stats.Interval((lo + hi) / 2, lo, hi, n, n, "welch")

    read = lambda i: repro_table3.extension_reading(i, 0.073, 6)  # noqa: E731
    assert read(iv(0.08, 0.20)) == "a single-head penalty larger than the paper's +0.073"
    assert read(iv(0.01, 0.20)) == "a single-head penalty"
    assert read(iv(0.01, 0.05)) == "a single-head penalty, smaller than the paper's +0.073"
    assert read(iv(-0.20, -0.01)) == "single head better (the paper's penalty contradicted)"
    assert read(iv(-0.10, 0.05)) == "no penalty resolved; the paper's +0.073 ruled out"
    assert read(iv(-0.10, 0.10)) == "undecided: the interval holds 0 and the paper's +0.073"
    assert read(iv(-0.10, 0.05, n=3)) == read(None) == "waiting for 6 seeds a side"


def test_single_head_dk_control_reading_follows_the_written_rule():
    import repro_table3

    def iv(lo, hi, n=3):
        return _stats.Interval((lo + hi) / 2, lo, hi, n, n, "welch")

    read = repro_table3.dk_control_reading  # (head count at equal d_k, d_k at one head)
    assert read(iv(-0.02, 0.03), iv(-0.10, -0.02)) == "the single head's advantage goes with its d_k"
    assert read(iv(-0.10, -0.02), iv(-0.02, 0.03)) == "the single head's advantage goes with the head count"
    assert read(iv(-0.10, -0.02), iv(-0.10, -0.02)).startswith("both")
    assert read(iv(-0.02, 0.03), iv(0.01, 0.05)) == "neither resolved"
    assert read(iv(-0.02, 0.03, n=2), iv(-0.10, -0.02)) == read(None, None) == "waiting for 3 seeds a side"


def test_runtime_text_separates_wall_from_training_time():
    """Wall time counts pauses (the larger of the runner's and the logged time); training time is steps x the
    median step time and only for records that have it."""
    import _study

    recs = [{"wall_s": 600.0, "logged_s": 1200.0, "steps": 2400, "median_step_s": 0.25},
            {"wall_s": 300.0, "steps": 2400}]
    assert [_study.wall_minutes(r) for r in recs] == [20.0, 5.0]
    assert [_study.train_minutes(r) for r in recs] == [10.0, None]
    text = _study.runtime_text("python scripts/x.py", recs)
    assert text.startswith("Command: `python scripts/x.py`")
    assert "5.0 to 20.0 minutes a point (median 12.5), 0.4 hours over 2 points" in text
    assert "10.0 to 10.0 minutes a point, 0.2 hours over 1 point." in text
    assert "Training time" not in _study.runtime_text("c", recs[1:])
    assert _study.runtime_text("c", []).endswith("No point has finished yet.")


def test_runtime_text_names_the_points_trained_on_an_accelerator_apart():
    import _study

    gpu = {"wall_s": 120.0, "steps": 2400, "median_step_s": 0.01, "device": "gpu NVIDIA H200 x1",
           "execution": {"model.attention_impl": "xla"}, "matmul_precision": "highest"}
    cpu = {"wall_s": 600.0, "steps": 2400, "median_step_s": 0.25}
    text = _study.runtime_text("c", [gpu, cpu, dict(gpu, wall_s=180.0)])
    assert ("2 points trained on gpu NVIDIA H200 x1 by `scripts/gpu_sweeps.py` (same config, overrides, step budget "
            "and data order as the CPU queue; execution: model.attention_impl = xla; matmul precision: highest), "
            "2.0 to 3.0 wall minutes a point") in text
    unrecorded = _study.accelerated_text([dict(gpu, matmul_precision=None)])
    assert "matmul precision: not recorded)" in unrecorded  # records made before the engine logged it
    assert "10.0 to 10.0 minutes a point (median 10.0), 0.2 hours over 1 point" in text  # the CPU point alone
    only_gpu = _study.runtime_text("c", [gpu])
    assert only_gpu.endswith("No point has finished on the CPU.") and "ablations.sh" not in only_gpu
    elsewhere = _study.runtime_text("python scripts/gpu_sweeps.py --studies=table3_d512", [], queue=False)
    assert elsewhere.startswith("Command: `python scripts/gpu_sweeps.py --studies=table3_d512`, one accelerator call")
    assert "ablations.sh" not in elsewhere


def test_trained_on_text_counts_devices_and_names_hosts_of_older_records():
    import _study

    gpu, cpu = {"device": "gpu NVIDIA H200 x1"}, {"device": "cpu cpu x1"}
    old = {"host": "Linux x86_64, 2 CPU cores"}
    text = _study.trained_on_text([gpu, cpu, gpu, old])
    assert text.endswith("the points trained on: cpu cpu x1 (1 point); device not recorded, host Linux x86_64, "
                         "2 CPU cores (1 point); gpu NVIDIA H200 x1 (2 points).")
    assert _study.trained_on_text([]).startswith("No point is recorded yet")
    new = dict(cpu, cpu="AMD EPYC", software={"python": "3.11.7", "jax": "0.10.2"})
    assert _study.trained_on_text([new, cpu]).endswith(
        "trained on: cpu cpu x1 (1 point); cpu cpu x1 on AMD EPYC, jax 0.10.2 (1 point).")


# ---------------------------------------------------------------------------------------------- stats
def test_welch_matches_scipy():
    from scipy import stats as sps

    a, b = [2.1, 2.5, 2.3], [2.0, 1.9, 2.05, 2.2]
    iv = _stats.welch_ci(a, b)
    ref = sps.ttest_ind(a, b, equal_var=False)
    ci = ref.confidence_interval(0.95)
    assert iv.diff == pytest.approx(np.mean(a) - np.mean(b))
    assert (iv.lo, iv.hi) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert iv.p == pytest.approx(ref.pvalue)
    # by hand: a = [1, 2, 3], b = [4, 5, 7]: se^2 = 1/3 + 7/9, df = se^4 / ((1/3)^2/2 + (7/9)^2/2) = 3.448
    iv = _stats.welch_ci([1, 2, 3], [4, 5, 7])
    se = math.sqrt(1 / 3 + 7 / 9)
    half = sps.t.ppf(0.975, (1 / 3 + 7 / 9) ** 2 / ((1 / 3) ** 2 / 2 + (7 / 9) ** 2 / 2)) * se
    assert (1 / 3 + 7 / 9) ** 2 / ((1 / 3) ** 2 / 2 + (7 / 9) ** 2 / 2) == pytest.approx(3.448, abs=1e-3)
    assert (iv.lo, iv.hi) == (pytest.approx(-10 / 3 - half), pytest.approx(-10 / 3 + half))
    assert not _stats.welch_ci([1.0], [2.0, 3.0]).excludes_zero() and _stats.welch_ci([1.0], [2.0, 3.0]).lo is None
    with pytest.raises(ValueError, match="finite"):
        _stats.welch_ci([1.0, float("nan")], [1.0, 2.0])


def test_seed_bootstrap_against_exact_cases():
    # a = [0, 1], b = [0, 0]: resampled mean(a) is 0, 0.5, 1 with probability 1/4, 1/2, 1/4
    iv = _stats.bootstrap_ci([0.0, 1.0], [0.0, 0.0])
    assert iv.diff == 0.5 and (iv.lo, iv.hi) == (0.0, 1.0)
    iv = _stats.bootstrap_ci([1.0, 1.0, 1.0], [0.0, 0.0, 0.0])
    assert (iv.diff, iv.lo, iv.hi) == (1.0, 1.0, 1.0) and iv.excludes_zero()
    # a = [0, 3], b = [1, 1]: P(diff = -1) = 1/4, so the 2.5% quantile is -1 and the 97.5% one 2
    iv = _stats.bootstrap_ci([0.0, 3.0], [1.0, 1.0], resamples=20_000)
    assert (iv.lo, iv.hi) == (-1.0, 2.0) and not iv.excludes_zero()


def test_corpus_bleu_from_sentence_stats_is_sacrebleu():
    import sacrebleu

    hyps = ["the king went out", "", "a b c d e f", "the people of the land went out to battle on the day"]
    refs = ["the king went out to battle", "nothing here", "a b c d e f", "the people went to the sea"]
    stats = _stats.sentence_stats(hyps, refs)
    assert stats.shape == (4, 10) and list(stats[2]) == [6, 5, 4, 3, 6, 5, 4, 3, 6, 6]
    assert _stats.corpus_bleu(stats) == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score, abs=1e-12)
    with pytest.raises(ValueError, match=r"\[N, 10\]"):
        _stats.corpus_bleu(stats[:, :9])


def test_paired_bootstrap_bleu_is_resampled_corpus_bleu():
    import sacrebleu

    a_hyps = [r if i % 2 else " ".join(r.split()[:6]) for i, r in enumerate(REFS)]
    b_hyps = [" ".join(r.split()[:8]) for r in REFS]
    sa, sb = _stats.sentence_stats(a_hyps, REFS), _stats.sentence_stats(b_hyps, REFS)
    iv = _stats.paired_bootstrap_bleu(sa, sb, resamples=30, seed=3)
    rng, diffs = np.random.default_rng(3), []
    for _ in range(30):  # the same resamples, scored by sacreBLEU on the resampled sentence lists
        idx = rng.integers(0, len(REFS), len(REFS))
        refs = [REFS[i] for i in idx]
        diffs.append(sacrebleu.corpus_bleu([a_hyps[i] for i in idx], [refs]).score
                     - sacrebleu.corpus_bleu([b_hyps[i] for i in idx], [refs]).score)
    assert iv.diff == pytest.approx(sacrebleu.corpus_bleu(a_hyps, [REFS]).score
                                    - sacrebleu.corpus_bleu(b_hyps, [REFS]).score)
    assert (iv.lo, iv.hi) == (pytest.approx(np.quantile(diffs, 0.025)), pytest.approx(np.quantile(diffs, 0.975)))
    same = _stats.paired_bootstrap_bleu(sa, sa, resamples=50)
    assert (same.diff, same.lo, same.hi, same.p) == (0.0, 0.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="same N"):
        _stats.paired_bootstrap_bleu(sa, sb[:-1])


def test_learning_curve_and_stability_from_records():
    recs = [{"step": s, "train/loss": 3.0, "train/nll": 2.5, "train/grad_norm": 1.0} for s in range(10, 160, 10)]
    recs += [{"step": s, "train/loss": 2.0, "train/nll": 1.5, "train/grad_norm": 0.5} for s in range(110, 210, 10)]
    recs.append({"step": 190, "train/loss": 2.6, "train/nll": 2.1, "train/grad_norm": 9.0})  # after a resume
    recs.append({"step": 200, "event": "non_finite", "at_step": 197})
    recs += [{"step": s, "event": "health_warning", "kind": k, "group": g}
             for s, k, g in ((50, "max_logit", "cross"), (60, "entropy_collapse", "decoder_self"),
                             (90, "max_logit", "cross"))]
    curve = sweep.learning_curve(recs)
    assert curve["step"] == [100, 200]
    assert curve["train_loss"] == [3.0, pytest.approx((2.0 * 9 + 2.6) / 10)]  # resumed steps replace the old
    assert curve["grad_norm"] == [1.0, 9.0]
    assert sweep.loss_spikes([2.0] * 10 + [2.2, 2.5, 2.0]) == (1, pytest.approx(0.5))
    assert sweep.loss_spikes([2.0] * 10 + [float("nan")])[0] == 1
    st = sweep.stability(recs)
    assert st["loss_spikes"] == 1 and st["max_grad_norm"] == 9.0 and st["non_finite_step"] == 197
    assert st["health_warnings"] == 3
    assert st["health_warning_kinds"] == {"entropy_collapse/decoder_self": 1, "max_logit/cross": 2}


def test_heads_depth_quick_writes_records(tmp_path, stand_in):
    import repro_heads_depth

    train, calls = stand_in
    out = tmp_path / "hd"
    argv = ["--quick", f"--out={out}", f"--workdir={tmp_path / 'runs'}", f"--train_script={train}"]
    repro_heads_depth.main(argv)
    names = sorted(p.name for p in (out / "points").glob("*.json"))
    # 3 architectures x (QK-LayerNorm off, on; post-LN; post-LN with Admin; post-LN with a long warmup), and the
    # long-budget arm's 2 architectures
    assert len(names) == 17 and len(calls_of(calls)) == 17
    rec = json.loads((out / "points" / names[0]).read_text())
    assert rec["stability"]["max_attention_logit"]["cross"] > 0 and "model.qk_layernorm" in rec["overrides"]
    text = (out / "README.md").read_text()
    assert "QK-LN on minus off" in text and "## What the data say" in text and "curves.png" in text
    verdicts = _csv(out / "verdicts.csv")
    assert [r["verdict"] for r in verdicts] == ["undecided"] * 21  # 10 per deep model, 11 for the one in the
    # long-budget arm (1 head x 2+2); one seed decides nothing
    assert verdicts[10]["claim"] == ("1 head x 2+2, d_k 32, d_ff 64 matches the multi-head model "
                                     "(QK-LN off, long budget)")
    assert "long budget minus 20 steps (QK-LN off), 4 heads x 1+1" in text
    assert "1 head x 4+4, d_k 16, d_ff 32 minus 4 heads x 1+1, d_k 16, d_ff 128, QK-LN off" in text
    assert "1 head x 4+4, d_k 16, d_ff 32 minus 4 heads x 1+1, d_k 16, d_ff 128, post-LN" in text
    assert "post-LN minus pre-LN (QK-LN off), 1 head x 2+2" in text
    assert "long minus short warmup (post-LN), 1 head x 4+4" in text and "post-LN, long warmup" in text
    assert "Admin minus plain post-LN, 1 head x 4+4" in text and "1 head x 2+2, d_k 32, d_ff 64, post-LN, Admin" in text
    admin = [json.loads(p.read_text()) for p in (out / "points").glob("*norm_admin.json")]
    assert len(admin) == 3 and all(r["overrides"]["model.norm"] == "admin" for r in admin)
    post = [json.loads(p.read_text()) for p in (out / "points").glob("*norm_post*.json")]
    assert len(post) == 6 and all(r["overrides"]["model.norm"] == "post" for r in post)
    warm = [r for r in post if "train.warmup_steps" in r["overrides"]]
    assert len(warm) == 3 and all(r["overrides"]["train.warmup_steps"] == 6 for r in warm)  # a third of 20 steps
    shutil.rmtree(tmp_path / "runs")
    repro_heads_depth.main(argv)
    assert len(calls_of(calls)) == 17


def _hd_records(nlls, grad=1.0):
    return [{"validation": {"nll": n}, "stability": {"max_grad_norm": grad + 0.01 * i, "max_loss_jump": 0.1,
                                                    "max_attention_logit": {"cross": 5.0 + 0.01 * i}}}
            for i, n in enumerate(nlls)]


def test_heads_depth_verdicts_follow_the_criteria():
    import repro_heads_depth

    archs = ("8 heads", "1 head")
    shallow = _hd_records([2.00, 2.01, 2.02])

    def rows(deep_off, deep_on, grad=1.0, deep_post=(2.00, 2.01, 2.02), deep_warm=(2.00, 2.01, 2.02),
             deep_admin=(2.00, 2.01, 2.02), upto=6):
        by = {("8 heads", v): shallow for v in ("off", "on", "post", "warm", "admin")}
        by.update({("1 head", "off"): _hd_records(deep_off, grad), ("1 head", "on"): _hd_records(deep_on),
                   ("1 head", "post"): _hd_records(deep_post), ("1 head", "warm"): _hd_records(deep_warm),
                   ("1 head", "admin"): _hd_records(deep_admin)})
        return [r[3] for r in repro_heads_depth.verdict_rows(by, archs)][:upto]

    # worse and less stable without QK-LN, matching with it: Li et al.'s reading; no post-LN penalty
    assert rows([2.20, 2.21, 2.22], [2.00, 2.01, 2.02], grad=3.0) == [
        "not reproduced", "reproduced", "reproduced", "reproduced", "not reproduced", "undecided"]
    # worse either way, equally stable; worse post-LN as well, so pre-LN does not remove the penalty
    assert rows([2.20, 2.21, 2.22], [2.20, 2.21, 2.22], deep_post=[6.2, 6.21, 6.22]) == [
        "not reproduced"] * 4 + ["reproduced", "not reproduced"]
    # the post-LN penalty removed by pre-LN; no multi-head advantage (pre-LN) to explain; too few seeds
    got = rows([2.00, 2.01, 2.02], [2.00, 2.01, 2.02], deep_post=[6.2, 6.21, 6.22])
    assert got[3] == "undecided" and got[4:] == ["reproduced", "reproduced"]
    assert rows([2.00, 2.01, 2.02], [2.0, 2.01, 2.02], deep_post=[2.0, 2.1, 2.2])[4:] == ["undecided"] * 2
    assert rows([2.0, 2.1], [2.0, 2.1], deep_post=[6.2, 6.3]) == ["undecided"] * 6
    # criteria 7-8: a long warmup trains the post-LN deep model (to the multi-head level; not quite; not at all)
    stuck = [6.2, 6.21, 6.22]
    assert rows([2.0, 2.01, 2.02], [2.0, 2.01, 2.02], deep_post=stuck, upto=8)[6:] == ["reproduced", "reproduced"]
    assert rows([2.0, 2.01, 2.02], [2.0, 2.01, 2.02], deep_post=stuck, deep_warm=[2.3, 2.31, 2.32],
                upto=8)[6:] == ["not reproduced", "reproduced"]
    assert rows([2.0, 2.01, 2.02], [2.0, 2.01, 2.02], deep_post=stuck, deep_warm=[6.19, 6.2, 6.21],
                upto=8)[6:] == ["not reproduced", "not reproduced"]
    assert rows([2.0, 2.01, 2.02], [2.0, 2.01, 2.02], deep_post=stuck, deep_warm=[2.0, 2.01],
                upto=8)[6:] == ["undecided", "undecided"]
    # criteria 9-10: Admin trains the post-LN deep model (to the multi-head level; not quite; not at all)
    assert rows([2.0, 2.01, 2.02], [2.0, 2.01, 2.02], deep_post=stuck, upto=10)[8:] == ["reproduced", "reproduced"]
    assert rows([2.0, 2.01, 2.02], [2.0, 2.01, 2.02], deep_post=stuck, deep_admin=[2.3, 2.31, 2.32],
                upto=10)[8:] == ["not reproduced", "reproduced"]
    assert rows([2.0, 2.01, 2.02], [2.0, 2.01, 2.02], deep_post=stuck, deep_admin=[6.19, 6.2, 6.21],
                upto=10)[6:] == ["reproduced", "reproduced", "not reproduced", "not reproduced"]
    assert rows([2.0, 2.01, 2.02], [2.0, 2.01, 2.02], deep_post=stuck, deep_admin=[2.0],
                upto=10)[8:] == ["undecided", "undecided"]
    # each deep model is judged on its own: ten rows per deep model, in the order of ``archs``
    by = {("8 heads", v): shallow for v in ("off", "on", "post", "warm", "admin")}
    by.update({("6+6", "off"): _hd_records([2.00, 2.01, 2.02]), ("6+6", "on"): _hd_records([2.00, 2.01, 2.02]),
               ("24+24", "off"): _hd_records([2.20, 2.21, 2.22], 3.0), ("24+24", "on"): _hd_records([2.0, 2.01, 2.02]),
               ("24+24", "post"): _hd_records([6.2, 6.21, 6.22]), ("24+24", "warm"): _hd_records([2.0, 2.01, 2.02]),
               ("24+24", "admin"): _hd_records([2.2, 2.21, 2.22])})
    got = repro_heads_depth.verdict_rows(by, ("8 heads", "6+6", "24+24"))
    assert [r[3] for r in got] == ["reproduced", "reproduced", "not reproduced", "undecided", "undecided",
                                   "undecided", "undecided", "undecided", "undecided", "undecided",
                                   "not reproduced", "reproduced", "reproduced", "reproduced",
                                   "reproduced", "not reproduced", "reproduced", "reproduced",
                                   "not reproduced", "reproduced"]
    assert got[0][0].startswith("6+6 matches") and got[10][0].startswith("24+24 matches")
    assert got[14][0].startswith("without a stabiliser (post-LN) 24+24 is worse")
    assert got[17][0].startswith("a long warmup trains post-LN 24+24")
    assert got[17][2].startswith("valid NLL long - short warmup -4.")
    assert got[16][2].startswith("valid NLL deep - shallow ")
    assert got[18][0] == "24+24 matches the multi-head model (post-LN, Admin)"
    assert got[19][0].startswith("Admin trains post-LN 24+24")
    assert got[19][2].startswith("valid NLL Admin - plain post-LN -4.")
    # criterion 11, only for a deep model the long-budget arm trains
    by.update({("8 heads", "long"): _hd_records([1.90, 1.91, 1.92]), ("6+6", "long"): _hd_records([1.91, 1.92, 1.93])})
    got = repro_heads_depth.verdict_rows(by, ("8 heads", "6+6", "24+24"))
    assert len(got) == 21 and got[10][0] == "6+6 matches the multi-head model (QK-LN off, long budget)"
    assert got[10][3] == "reproduced" and got[11][0].startswith("24+24 matches")
    by[("6+6", "long")] = _hd_records([2.00, 2.01, 2.02])
    assert repro_heads_depth.verdict_rows(by, ("8 heads", "6+6", "24+24"))[10][3] == "not reproduced"


def test_same_start_rows_compare_the_long_runs_first_steps_with_the_short_runs():
    import repro_heads_depth

    def rec(seed, steps, losses, valid_steps, nlls, commit="abc", resumes=0):
        return {"seed": seed, "commit": commit, "resumes": resumes,
                "curve": {"step": steps, "train_loss": losses, "valid_step": valid_steps, "valid_nll": nlls}}

    short = [rec(0, [100, 200], [7.0, 5.5], [200], [4.0]), rec(1, [100, 200], [7.1, 5.6], [200], [4.1])]
    long = [rec(1, [100, 200, 300], [7.1, 5.6, 5.0], [200, 300], [4.1, 3.9], commit="def"),
            rec(0, [100, 200, 300], [7.0, 5.25, 5.0], [200, 300], [4.0, 3.8], commit="def", resumes=2),
            rec(2, [100], [7.2], [], [])]  # no short run of seed 2: no row
    by = {("8 heads", "off"): short, ("8 heads", "long"): long, ("1 head", "off"): short}
    rows = repro_heads_depth.same_start_rows(by, ("8 heads", "1 head"), 200)
    assert rows == [["8 heads", 0, 2, pytest.approx(0.25), 200, 1, 0.0, None, "0 / 2", "abc / def"],
                    ["8 heads", 1, 2, 0.0, None, 1, 0.0, None, "0 / 0", "abc / def"]]
    text = repro_heads_depth.same_start_text(rows, by, 200)
    assert "part from step 200 on" in text and "8 heads seed 0" in text and "made by def" in text
    assert "8 heads 0.0707 (n=2)" in text  # std of the short runs' validation NLL at step 200: 4.0 and 4.1
    rows[0][3] = 0.0
    assert repro_heads_depth.same_start_text(rows, by, 200).startswith("Every pair agrees to the rounding")
    assert repro_heads_depth.same_start_text([], by, 200) == ""


def test_heads_depth_health_text_gives_each_settings_warnings_and_the_kinds_kept():
    import repro_heads_depth

    runs = _hd_records([2.9, 3.1])
    for r, n in zip(runs, (4, 40)):
        r["stability"]["health_warnings"] = n
    runs[1]["stability"]["health_warning_kinds"] = {"max_logit/cross": 30, "entropy_collapse/decoder_self": 10}
    quiet = _hd_records([2.8])
    quiet[0]["stability"]["health_warnings"] = 0
    settings = {"8 heads, off": {"records": runs}, "8 heads, on": {"records": quiet},
                "1 head, on": {"records": []}}
    text = repro_heads_depth.health_text(settings)
    assert "8 heads, off: 4-40 (validation NLL 2.90-3.10, 2 runs); 8 heads, on: 0-0 (validation NLL 2.80-2.80, " \
           "1 run)." in text and "1 head, on" not in text
    assert text.endswith("over the records that keep it (1 of 3): max_logit/cross 30, "
                         "entropy_collapse/decoder_self 10.")
    assert repro_heads_depth.health_text({"a": {"records": _hd_records([2.9])}}) == ""  # no record counts them
    runs[1].update(seed=1, resumes=1)
    assert repro_heads_depth.health_text(settings).endswith(
        "1 run was resumed (8 heads, off, seed 1), and a run resumed before 2026-12-05 restarted the monitor's "
        "early baselines at the resume, so its count can differ from an unbroken run's (the health calibration "
        "report replays every attention trace as an unbroken run).")


def test_heads_depth_trend_reads_each_step_in_depth_against_the_margin():
    import repro_heads_depth

    def setting(arch, variant, nlls):
        return {"arch": arch, "variant": variant, "records": _hd_records(nlls)}

    settings = {"a": setting("8 heads x 3+3, d_k 16", "off", [2.9, 2.9]),
                "b": setting("1 head x 6+6, d_k 64", "off", [3.0, 3.0]),
                "c": setting("1 head x 12+12, d_k 32", "off", [3.2, 3.2]),
                "d": setting("8 heads x 3+3, d_k 16", "post", [3.3]),
                "e": setting("1 head x 6+6, d_k 64", "post", [6.2]),
                "f": setting("1 head x 12+12, d_k 32", "post", [6.19]),
                "g": setting("8 heads x 3+3, d_k 16", "on", []), "h": setting("1 head x 6+6, d_k 64", "on", [2.9])}
    text = repro_heads_depth.depth_trend(settings)
    assert "- QK-LN off: 8 heads x 3+3 2.900, 1 head x 6+6 3.000, 1 head x 12+12 3.200 (steps in depth +0.100, " \
           "+0.200 nats: up at every step)." in text
    assert "- post-LN: 8 heads x 3+3 3.300, 1 head x 6+6 6.200, 1 head x 12+12 6.190 (steps in depth +2.900, " \
           "-0.010 nats: up, then within ±0.05)." in text
    assert "QK-LN on" not in text  # one finished architecture: no step to read
    assert "no arm" in repro_heads_depth.depth_trend({"a": setting("8 heads x 3+3", "off", [2.9])})


def test_what_the_data_say_tells_whether_the_paper_value_is_ruled_out():
    import repro_table3

    wide = _stats.welch_ci([2.80, 2.95, 3.00], [2.90, 2.91, 2.92])  # -0.06 [-0.31, +0.19]
    narrow = _stats.welch_ci([3.00, 3.01, 3.02], [2.90, 2.91, 2.92])  # +0.10 [+0.08, +0.12]
    verdicts = [("h=1 (d_k=128) vs h=8", "A", (wide, None), None, "not reproduced", "", 0.073, -0.9),
                ("h=32 (d_k=4) vs h=8", "A", (narrow, None), None, "reproduced", "", 0.018, -0.4)]
    text = repro_table3.what_the_data_say(verdicts, {}, {}, "h=8, d_k=16", [], 128, [{"steps": 2400}])
    assert "**not reproduced** (the paper's +0.073 is inside our interval: not ruled out)" in text
    assert "**reproduced** (the paper's +0.018 is below our interval)" in text


def test_what_the_data_say_names_contrasts_whose_sign_changes_with_the_budget():
    """A sign change no step resolves is called seed noise; one resolved both ways reverses; one resolved one
    way is said to be; contrasts that keep their sign are not named."""
    import repro_table3

    w = _stats.welch_ci
    by_step = [("h=1 (d_k=128) vs h=8", [(600, w([3.03, 3.2, 2.9], [3.0, 3.1, 2.95])),
                                         (2400, w([2.8, 2.9, 2.75], [2.9, 2.85, 2.95]))]),
               ("h=2 (d_k=64) vs h=8", [(600, w([3.10, 3.11, 3.12], [3.0, 3.01, 3.02])),
                                        (2400, w([2.80, 2.81, 2.82], [2.9, 2.91, 2.92]))]),
               ("h=4 (d_k=32) vs h=8", [(600, w([3.01, 3.2, 2.9], [3.0, 3.1, 2.95])),
                                        (2400, w([2.80, 2.81, 2.82], [2.9, 2.91, 2.92]))]),
               ("h=32 (d_k=4) vs h=8", [(600, w([3.1], [3.0])), (2400, w([3.0], [2.9]))]),
               ("h=16 (d_k=8) vs h=8", [(600, w([3.1], [3.0])), (2400, w([2.8], [2.9]))])]
    text = repro_table3.what_the_data_say([], {}, {}, "h=8, d_k=64", [], 512, [{"steps": 2400}], by_step)
    assert "reverses with the budget for h=2 (d_k=64) (+0.100 at step 600, -0.100 at 2400) (resolved" in text
    assert "changes for h=4 (d_k=32) (+0.020 at step 600, -0.100 at 2400), resolved only below zero (at step 2400)" \
        in text
    assert "changes for h=1 (d_k=128) (+0.027 at step 600, -0.083 at 2400), but no validation step resolves" in text
    assert "h=32" not in text.split("Against the training budget")[1]
    assert ("changes for h=16 (d_k=8) (+0.100 at step 600, -0.100 at 2400), with fewer than 3 seeds a side at every "
            "step: no interval yet") in text
    assert "h=16" not in text.split("within seed noise")[0].split("Against the training budget")[1]


def test_what_the_data_say_warns_when_the_paired_bootstrap_flags_aa_pairs():
    import repro_table3

    nll = _stats.welch_ci([2.90, 2.95, 2.92], [2.91, 2.93, 2.94])
    bleu = _stats.welch_ci([20.0, 21.0, 19.5], [20.5, 20.2, 19.8])
    name = "A/A: seeds [3, 4, 5] vs [0, 1, 2]"
    verdicts = [(name, None, [nll], [bleu], "no difference resolved", "no difference resolved", None, None)]
    flagged = _stats.Interval(diff=1.1, lo=0.5, hi=1.6, n_a=1, n_b=1, method="paired bootstrap")
    quiet = _stats.Interval(diff=-0.2, lo=-0.7, hi=0.3, n_a=1, n_b=1, method="paired bootstrap")
    text = repro_table3.what_the_data_say(verdicts, {name: [quiet, flagged, quiet]}, {}, "h=8, d_k=16", [], 128,
                                          [{"steps": 2400}])
    assert "as it should" in text and "flags 1 of 3 A/A seed pairs" in text
    text = repro_table3.what_the_data_say(verdicts, {name: [quiet] * 3}, {}, "h=8, d_k=16", [], 128,
                                          [{"steps": 2400}])
    assert "as it should" in text and "A/A seed pairs" not in text


def test_spread_reading_flags_settings_whose_seed_variance_differs_from_the_base():
    import repro_table3
    from scipy import stats as sps

    def setting(nlls, row="A"):
        return {"row": row, "records": [{"validation": {"nll": v}} for v in nlls]}

    wide, base = [2.80, 2.88, 2.94], [2.939, 2.940, 2.946]
    settings = {"h=8": setting(base), "h=1": setting(wide), "h=2": setting([2.85, 2.857, 2.86]),
                "A/A": setting([2.0, 3.0, 4.0], row="AA"), "h=4": setting([2.9, 2.91])}
    text = repro_table3.spread_reading(settings, "h=8")
    f = np.var(wide, ddof=1) / np.var(base, ddof=1)
    p = 2 * sps.f.sf(f, 2, 2)
    assert f"h=1 (std {np.std(wide, ddof=1):.3f}" in text and f"p = {p:.3f}" in text and p < 0.05
    assert "h=2 (" not in text and "A/A" not in text and "2 settings tested" in text
    assert "no setting's variance differs" in repro_table3.spread_reading({"h=8": setting(base),
                                                                          "h=2": setting(base)}, "h=8")
    assert repro_table3.spread_reading({"h=8": setting(base[:2])}, "h=8") == ""
    assert _stats.variance_ratio([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]) == (1.0, 1.0)


def test_verdicts_need_three_seeds_a_side():
    import repro_table3

    two = _stats.welch_ci([2.30, 2.31], [2.20, 2.21])
    three = _stats.welch_ci([2.30, 2.31, 2.32], [2.20, 2.21, 2.22])
    assert two.lo is not None and two.excludes_zero()
    assert repro_table3.verdict(two, 0.073, 0.005) == "too few seeds"
    assert repro_table3.verdict(three, 0.073, 0.005) == "reproduced"
    assert repro_table3.verdict(three, -0.073, 0.005) == "contradicted"
    assert repro_table3.verdict(None, 0.073, 0.005) == "missing"


def test_learning_rate_falls_as_one_over_width_and_the_report_shows_its_pilots(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("t3h", os.path.join(REPO, "configs/table3_heads.py"))
    t3h = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(t3h)
    assert [t3h.get_config(f"d_model={d}").train.learning_rate for d in (128, 256, 512)] == [3e-3, 1.5e-3, 7.5e-4]
    pilots = tmp_path / "pilot_lr.csv"
    head = ("d_model,learning_rate,step,train_loss,train_nll,grad_norm,max_logit_step,max_logit_encoder_self,"
            "max_logit_decoder_self,max_logit_cross,valid_nll_at_300\n")
    pilots.write_text(head + "512,0.00075,300,4.9,4.3,1.0,300,44.3,45.4,37.3,4.43\n"
                      "512,0.003,300,5.2,4.6,0.9,300,665.6,480.3,701.0,4.69\n"
                      "512,0.003,250,5.3,4.7,0.9,260,1,2,3,\n256,0.003,300,5.1,4.4,0.7,300,87.5,122.5,66.0,4.53\n")
    import repro_table3 as rt3
    assert rt3.lr_pilots(512, str(pilots)) == [[0.003, 5.2, 4.69, "665.6 / 480.3 / 701.0"],
                                               [0.00075, 4.9, 4.43, "44.3 / 45.4 / 37.3"]]
    assert rt3.lr_pilots(128, str(pilots)) == [] and rt3.lr_pilots(512, str(tmp_path / "none.csv")) == []


def test_heads_depth_budget_trend_says_whether_a_gap_closes_at_every_step():
    import _stats
    import repro_heads_depth as hd

    def cs(*diffs):
        return [(600 * (i + 1), _stats.Interval(d, d - 0.01, d + 0.01, 3, 3, "welch")) for i, d in enumerate(diffs)]

    assert hd.budget_trend(cs(0.120, 0.103, 0.087, 0.050)) == ("+0.120 at step 600, +0.103, +0.087, +0.050 at 2400, "
                                                              "narrowing at every step")
    assert hd.budget_trend(cs(0.29, 0.335, 0.302)) == "+0.290 at step 600, +0.335, +0.302 at 1800"
    assert hd.budget_trend(cs(-0.1, 0.2)) == "-0.100 at step 600, +0.200 at 1200, widening at every step"
    assert hd.budget_trend(cs(0.1)) == ""
