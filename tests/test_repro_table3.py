"""The Table 3 and heads-vs-depth studies (``studies/specs/table3.py``, ``heads_depth.py``): committed point records
(written once, never retrained), the verdicts, magnitudes and conditions their reports carry, and the statistics
behind them, checked against scipy and sacreBLEU.

Points are trained by a stand-in for train.py (written below) that logs what engine/loop.py logs, including
a ``bleu`` event and the hypotheses file in ``outputs/``; the references come from a fixed list instead of
the corpus (``studies.points.split_references`` is patched), so nothing here trains a model.
"""
import json
import math
import os
import shutil
import textwrap

import numpy as np
import pytest

from reports import calls_of, install_stand_in

from studies import cli as studies_cli
from studies import points as sweep
from studies import runner as _study
from studies import specs
from studies import stats as _stats
from studies import study as study_lib

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
    train, calls = stand_in
    out, runs = tmp_path / "report", tmp_path / "runs"
    argv = ["--quick", f"--out={out}", f"--workdir={runs}", f"--train_script={train}"]
    assert studies_cli.main(["train", "table3"] + argv) == 0
    names = sorted(os.path.relpath(os.path.join(d, f), out / "points") for d, _, fs in os.walk(out / "points")
                   for f in fs)
    # quick: tiny model, one seed (no seed in the names), rows (A) h = 1 and 8 and rows (B); each record with its
    # decoded test sentences and its attention trace beside it
    points = ["A/num_heads_1", "A/num_heads_8", "B/qk_dim_2", "B/qk_dim_4"]
    assert names == sorted(f"{p}{ext}" for p in points for ext in (".json", ".test.txt", ".attention.json.gz"))
    hyps = [" ".join(r.split()[:-1]) if i % 3 == 0 else r for i, r in enumerate(REFS)]
    committed = out / "points" / "A" / "num_heads_1.test.txt"
    assert committed.read_text() == "\n".join(hyps) + "\n"
    committed.unlink()  # a record whose sentences are missing gets them back from its run folder
    studies_cli.main(["train", "table3"] + argv)
    assert committed.read_text() == "\n".join(hyps) + "\n" and len(calls_of(calls)) == 4
    assert [os.path.basename(os.path.dirname(c)) for c in calls_of(calls)] == ["A", "A", "B", "B"]

    path = out / "points" / "A" / "num_heads_1.json"
    rec = json.loads(path.read_text())
    assert rec["config"].startswith("configs/table3_heads.py:seeds=3,steps=2400") and "quick,seeds=1" in rec["config"]
    assert rec["overrides"] == {"model.num_heads": 1, "model.qk_dim": 64, "model.v_dim": 64, "seed": 0}
    assert rec["steps"] == 200 and rec["batches_per_epoch"] == 100 and rec["settings_sha"]
    assert rec["validation"]["nll"] == pytest.approx(2.0 + 0.1 + 0.064)
    assert rec["stability"]["loss_spikes"] == 1 and rec["stability"]["max_attention_logit"]["cross"] == 21.0
    import sacrebleu

    bs = rec["bleu_sentence_stats"]
    assert _stats.corpus_bleu(np.asarray(bs["rows"])) == pytest.approx(sacrebleu.corpus_bleu(hyps, [REFS]).score)

    shutil.rmtree(runs)  # a fresh checkout: only the committed records; nothing trains again
    before = {p: p.read_bytes() for p in (out / "points").rglob("*.json")}
    studies_cli.main(["train", "table3"] + argv)
    assert len(calls_of(calls)) == 4 and {p: p.read_bytes() for p in (out / "points").rglob("*.json")} == before

    rec["overrides"]["seed"] = 7  # a record made with other settings is refused, naming the point
    path.write_text(json.dumps(rec))
    with pytest.raises(ValueError, match=r"sweep point num_heads_1 \(record .*\) was trained with other settings"):
        studies_cli.main(["train", "table3"] + argv)


def _verdicts(module: str) -> dict:
    found = study_lib.evaluate(specs.find(module).STUDIES)
    return {v.claim.id: v for vs in found.values() for v in vs}


def test_table3_points_are_the_committed_records():
    for name, recorded in (("table3", 33), ("table3_d256", 33), ("table3_d512", 0)):
        study = specs.study(name)
        have = {(a.name, r.name) for ms in study.records().values() for a, r in ms}
        assert len(study.points()) == 33 and len(have) == recorded
        assert have <= {(a.name, p.name) for a, p in study.points()}


def test_table3_verdicts_carry_magnitude_correction_and_conditions():
    v = _verdicts("table3")
    h32 = v["d128 h32"]
    assert h32.kind == "direction only" and h32.reading().startswith("direction only (6.4x [4.8, 8.0]")
    assert v["d256 h32"].reading().startswith("direction only (5.5x [3.6, 7.3]")
    assert v["d256 dk/4"].kind == v["d256 dk/2"].kind == v["d128 dk/4"].kind == "direction only"
    for cid in ("d256 h1", "d256 h4", "d256 h16", "d128 h1x6", "d256 h1x6", "d256 h1@dk"):
        assert v[cid].changed and v[cid].kind == "unresolved", cid  # Holm: these do not survive
    assert v["d128 h16"].kind == "contradicted" and v["d128 h1"].kind == "unresolved"
    assert v["d256 h1"].p_adjusted > 0.05 > v["d256 h1"].interval.p
    assert v["d256 h1"].conditions == (
        "2400 steps (2.5 epochs); learning rate 0.0015 (300-step pilots of the base point h = 8 only; the smallest "
        "candidate won, the grid's edge); pre-LN without dropout (the paper: post-LN, dropout 0.1); embedded "
        "Spanish->English corpus, 8k BPE (the paper: WMT14 EN-DE, newstest2013); d_model 256, 3+3 layers, d_ff 1024 "
        "(the paper: 512, 6+6, 2048)")
    assert all(x.kind == "unresolved" and x.interval is None for k, x in v.items() if k.startswith("d512"))


def test_heads_depth_verdicts_name_the_dk_confound_and_the_paper():
    v = _verdicts("heads_depth")
    assert specs.study("heads_vs_depth").title == "Heads vs depth (Liu, Liu & Han 2021) at CPU scale"
    assert v["6+6 long budget"].kind == "reproduced"
    assert "single head d_k 64 against the 8-head model's 16 (4x): depth and d_k confounded" in (
        v["6+6 long budget"].conditions)
    assert "Liu, Liu & Han's construction" in v["24+24 match off"].conditions
    assert v["24+24 qkln"].kind == "unresolved" and v["24+24 qkln"].interval.hi > 0  # includes zero
    assert v["6+6 match off"].changed  # contradicted before Holm, unresolved after


def test_trained_on_text_counts_devices_and_names_hosts_of_older_records():
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
