"""Is attention explanation? Jain & Wallace (NAACL 2019) and Wiegreffe & Pinter (EMNLP 2019) on attnlab's
classification task (``configs/repro_explanation.py``), through the engine and the model's interventions.

Per seed: train the attention-pooling classifier and, from scratch, the same model with the pooling attention
frozen to uniform (``model.uniform_attention_groups=("pool",)``). On ``--examples`` test verses evenly spaced through the test split:
(a) Kendall tau between the pooling weights and two token importances: gradient x input on the token
embeddings of the predicted class's probability, and leave-one-out (total variation distance, TVD, between
the output distributions with and without the token); (b) the median TVD of the output over ``--permutations``
random permutations of the pooling weights among the verse's tokens; (c) adversarial attention: the pooling
distribution with the largest Jensen-Shannon divergence (JSD, natural log, at most ln 2 = 0.693) from the
original found by Adam whose output stays within TVD ``--epsilon``.

    python scripts/repro_explanation.py                  # 3 seeds x 2000 steps -> docs/results/explanation/
    python scripts/repro_explanation.py --seeds 1 --steps 300 --examples 200
    python scripts/repro_explanation.py --quick          # seconds: tiny sizes, for tests
    python scripts/repro_explanation.py --verdicts_only  # verdicts.csv and the README's Verdicts section from
                                                         #   the per-seed CSVs already in --out (no training)

Pass criteria. Written on 2026-12-02, after the measurements of 2026-12-01 committed in docs/results/explanation
(b761717), so the verdicts on those measurements are post hoc. Each claim needs MIN_SEEDS (3) seeds, else it is
undecided. Per-seed claims: reproduced when every seed passes, partial when some do, not reproduced when none does.
- (J&W-1) Attention agrees only weakly with other importance measures: a seed passes when its mean Kendall tau
  (over verses) between alpha and gradient x input, and between alpha and leave-one-out, are both below
  TAU_WEAK (0.5, i.e. fewer than 75% of token pairs ordered alike).
- (J&W-2) Permuting attention barely changes the output: a seed passes when the median over verses of the
  per-verse median output TVD is below PERM_SMALL (0.05).
- (J&W-2b) Permutation changes the output more where attention is peaked: a seed passes when the per-verse
  median TVD of the verses with max alpha >= PEAKED (0.75) is larger than that of the verses with max alpha <
  FLAT (0.25), one-sided Mann-Whitney U p < 0.05; undecided when a seed has fewer than MIN_BIN (5) verses in
  either group.
- (J&W-3) Attention far from the original keeps the output: a seed passes when at least ADV_FRAC (half) of its
  verses have an adversarial alpha' with JSD(alpha, alpha') > ADV_JSD (0.5 nats; max ln 2 = 0.693) and output
  TVD <= --epsilon.
- (W&P) Learned attention gives no significant accuracy gain over uniform attention: learned minus uniform test
  accuracy over seeds, 95% Welch interval. Not reproduced when the interval lies above 0 (a significant gain);
  reproduced when it contains 0 (or lies below it) and its upper end is below GAIN_MARGIN (0.05: a gain of 5
  accuracy points or more is ruled out); partial when it contains 0 but reaches GAIN_MARGIN.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
from flax import nnx
from scipy import stats as scipy_stats

import engine
from _report import (VERDICT_HEADERS, Report, environment_line, fmt, markdown_table, mean_std, read_csv,
                     splice_section, write_csv)
from _runs import load, with_overrides
from _stats import welch_ci
from analysis import KeepModel, explanation_measures

SPEC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "repro_explanation.py")
OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "results", "explanation")
MAX_ATTENTION_BINS = (0.0, 0.25, 0.5, 0.75, 1.0001)
# pass criteria (module docstring)
MIN_SEEDS, TAU_WEAK, PERM_SMALL, FLAT, PEAKED, MIN_BIN = 3, 0.5, 0.05, 0.25, 0.75, 5
ADV_JSD, ADV_FRAC, GAIN_MARGIN, P_VALUE = 0.5, 0.5, 0.05, 0.05
CRITERIA_NOTE = ("Pass criteria: the module docstring of `scripts/repro_explanation.py`. They were written on "
                 "2026-12-02, after the measurements of 2026-12-01 (commit b761717), so the verdicts on those "
                 "measurements are post hoc.")
PAPERS = """
- Jain & Wallace, *Attention is not Explanation*, NAACL 2019 (arXiv:1902.10186): BiLSTM and CNN encoders with
  additive attention on text classification, QA and NLI; "learned attention weights are frequently uncorrelated
  with gradient-based measures of feature importance, and one can identify very different attention
  distributions that nonetheless yield equivalent predictions" (abstract). They report that random permutations
  of the attention often change the output little, and their adversarial histograms reach JSD up to about
  0.69 (= ln 2, the maximum; NAACL slides, slideplayer.com/17114161) with the output kept within a small ε.
- Wiegreffe & Pinter, *Attention is not not Explanation*, EMNLP 2019 (arXiv:1908.04626): a uniform-weights
  baseline reveals cases where learned attention gives no significant improvement over uniform weights; where
  attention is not needed for accuracy, Jain & Wallace's manipulations say little about it.
We did not retrieve the papers' per-dataset table values (mean Kendall τ, the uniform baseline's F1, the
exact ε), so the comparison here is with these qualitative results, not with table entries.
"""


def train(spec: str, overrides: dict) -> tuple[dict, nnx.Module, object]:
    """engine.run of the config; returns (final metrics, trained model, data)."""
    keep = KeepModel()
    result = engine.run(with_overrides(load(spec), overrides), hooks=[keep])
    return result, keep.setup.model(keep.params), keep.data


def summarise(measures: list[dict]) -> dict[str, list[float]]:
    """Per-seed scalar summaries of ``explanation_measures`` outputs."""
    keys = ("tau_grad", "tau_loo", "sig_grad", "sig_loo", "perm_median_tvd", "adv_jsd")
    out = {f"mean_{k}": [float(np.nanmean(m[k])) for m in measures] for k in keys}
    out["median_perm_median_tvd"] = [float(np.median(m["perm_median_tvd"])) for m in measures]
    out[f"frac_perm_below_{PERM_SMALL:g}"] = [float(np.mean(m["perm_median_tvd"] < PERM_SMALL)) for m in measures]
    out[f"frac_adv_jsd_above_{ADV_JSD:g}"] = [float(np.mean(m["adv_jsd"] > ADV_JSD)) for m in measures]
    return out


def _seeds(values) -> str:
    return ", ".join(fmt(v) for v in values)


def _per_seed_row(claim: str, paper: str, measured: str, passed: list[bool], what: str) -> list:
    """Verdict row of a claim tested in every seed (criteria in the module docstring)."""
    n, k = len(passed), sum(passed)
    if n < MIN_SEEDS:
        return [claim, paper, measured, "undecided", f"{n} seed(s); {MIN_SEEDS} needed"]
    verdict = "reproduced" if k == n else ("partial" if k else "not reproduced")
    return [claim, paper, measured, verdict, f"{what} in {k} of {n} seeds"]


def verdict_rows(s: dict[str, list[float]], accuracy: list[float], uniform_accuracy: list[float],
                 alpha_max: list[np.ndarray], perm_tvd: list[np.ndarray]) -> list[list]:
    """Rows [claim, paper, measured, verdict, reason], one per claim, under the module docstring's pass criteria.

    ``s``: ``summarise`` output (measure -> one value per seed); ``accuracy``, ``uniform_accuracy``: test accuracy
    per seed; ``alpha_max``, ``perm_tvd``: per seed, [N] max pooling weight and median permutation TVD per verse.
    """
    jw = "Jain & Wallace 2019"
    tau_g, tau_l = s["mean_tau_grad"], s["mean_tau_loo"]
    rows = [_per_seed_row(
        "attention correlates only weakly with gradient x input and leave-one-out importance",
        f"{jw}: attention weights frequently uncorrelated with gradient-based and leave-one-out importance",
        f"mean Kendall tau per seed: gradient x input {_seeds(tau_g)}; leave-one-out {_seeds(tau_l)}",
        [max(g, l) < TAU_WEAK for g, l in zip(tau_g, tau_l)], f"both below {TAU_WEAK:g}")]
    med = s["median_perm_median_tvd"]
    rows.append(_per_seed_row(
        "permuting attention barely changes the output", f"{jw}: random permutations often change the output little",
        f"median over verses of the per-verse median output TVD per seed: {_seeds(med)} (fraction of verses below "
        f"{PERM_SMALL:g}: {_seeds(s[f'frac_perm_below_{PERM_SMALL:g}'])})",
        [x < PERM_SMALL for x in med], f"below {PERM_SMALL:g}"))
    parts, passed, small = [], [], 0
    for seed, (amax, tvd_) in enumerate(zip(alpha_max, perm_tvd)):
        hi, lo = tvd_[amax >= PEAKED], tvd_[amax < FLAT]
        if min(len(hi), len(lo)) < MIN_BIN:
            small += 1
            parts.append(f"seed {seed}: {len(hi)} vs {len(lo)} verses")
            continue
        p = float(scipy_stats.mannwhitneyu(hi, lo, alternative="greater").pvalue)
        passed.append(bool(np.median(hi) > np.median(lo) and p < P_VALUE))
        parts.append(f"seed {seed}: {fmt(np.median(hi))} (n={len(hi)}) vs {fmt(np.median(lo))} (n={len(lo)}), "
                     f"p={fmt(p, 2)}")
    row = _per_seed_row("permutation changes the output more where attention is peaked",
                        f"{jw}: permutation output change against max attention",
                        f"per-verse median TVD, median for max alpha >= {PEAKED:g} vs < {FLAT:g} (one-sided "
                        f"Mann-Whitney): " + "; ".join(parts), passed, f"larger with p < {P_VALUE:g}")
    if small:
        row[3:] = ["undecided", f"{small} seed(s) with fewer than {MIN_BIN} verses in a group"]
    rows.append(row)
    frac = s[f"frac_adv_jsd_above_{ADV_JSD:g}"]
    rows.append(_per_seed_row(
        "attention far from the original (adversarial, by JSD) keeps the output within TVD epsilon",
        f"{jw}: very different attention distributions yield equivalent predictions (JSD up to about 0.69)",
        f"fraction of verses with an adversarial alpha' at JSD > {ADV_JSD:g} per seed: {_seeds(frac)} (mean JSD "
        f"{_seeds(s['mean_adv_jsd'])}; max ln 2 = 0.693)", [f >= ADV_FRAC for f in frac],
        f"at least {ADV_FRAC:g} of the verses"))
    claim = "learned attention gives no significant accuracy gain over uniform attention"
    paper = "Wiegreffe & Pinter 2019: uniform-weights baseline, no significant gain on some tasks"
    n = min(len(accuracy), len(uniform_accuracy))
    if n < MIN_SEEDS:
        measured = f"test accuracy per seed: learned {_seeds(accuracy)}; uniform {_seeds(uniform_accuracy)}"
        return rows + [[claim, paper, measured, "undecided", f"{n} seed(s); {MIN_SEEDS} needed"]]
    iv = welch_ci(accuracy, uniform_accuracy)
    measured = (f"test accuracy learned - uniform {iv.text(3)} (95% Welch; learned {fmt(np.mean(accuracy))}, "
                f"uniform {fmt(np.mean(uniform_accuracy))}, {len(accuracy)} and {len(uniform_accuracy)} seeds)")
    if iv.lo > 0:
        verdict, reason = "not reproduced", "interval above 0: learned attention is significantly better"
    elif iv.hi < GAIN_MARGIN:
        verdict, reason = "reproduced", f"no significant gain; the upper end is below {GAIN_MARGIN:g}"
    else:
        verdict, reason = "partial", f"no significant gain, but the upper end reaches {GAIN_MARGIN:g}"
    return rows + [[claim, paper, measured, verdict, reason]]


def write_verdicts(out: str, rows: list[list], note: str = "") -> str:
    """Writes ``<out>/verdicts.csv``; returns the report's Verdicts section (Markdown)."""
    write_csv(os.path.join(out, "verdicts.csv"), VERDICT_HEADERS, rows)
    return "\n\n".join(["## Verdicts", f"{CRITERIA_NOTE} {note}".strip(), markdown_table(VERDICT_HEADERS, rows),
                         "(CSV: [verdicts.csv](verdicts.csv))"])


def verdicts_only(out: str) -> list[list]:
    """Verdict rows from the per-seed CSVs in ``out``; writes verdicts.csv and puts the Verdicts section into
    README.md (replacing an existing one, before "## What the data say" or at the end)."""
    summary, acc, per_example = (read_csv(out, name, "scripts/repro_explanation.py")
                                 for name in ("summary.csv", "accuracy.csv", "per_example.csv"))
    readme = os.path.join(out, "README.md")
    if not os.path.isfile(readme):
        raise SystemExit(f"--verdicts_only: {readme} not found; expected the report of a full run in --out")
    try:
        acc = [r for r in acc if r["seed"].isdigit()]
        seeds = [int(r["seed"]) for r in acc]
        if seeds != list(range(len(seeds))) or sorted({int(r["seed"]) for r in per_example}) != seeds:
            raise ValueError(f"seeds {seeds} in accuracy.csv; expected 0..n-1, the same as in per_example.csv")
        s = {r["measure"]: [float(r[f"seed {i}"]) for i in seeds] for r in summary}
        by_seed = [[r for r in per_example if int(r["seed"]) == i] for i in seeds]
        rows = verdict_rows(s, [float(r["test accuracy (learned α)"]) for r in acc],
                            [float(r["test accuracy (uniform α)"]) for r in acc],
                            [np.array([float(r["max_alpha"]) for r in b]) for b in by_seed],
                            [np.array([float(r["perm_median_tvd"]) for r in b]) for b in by_seed])
    except (KeyError, ValueError) as e:
        raise SystemExit(f"--verdicts_only: the CSVs in {out} are not those of a full run ({type(e).__name__}: {e})")
    section = write_verdicts(out, rows, "Rebuilt from the committed CSVs with `--verdicts_only` (no retraining).")
    splice_section(readme, "Verdicts", section.split("\n\n", 1)[1], before="What the data say")
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--examples", type=int, default=200, help="test verses analysed per seed")
    ap.add_argument("--permutations", type=int, default=100)
    ap.add_argument("--epsilon", type=float, default=0.01, help="output TVD allowed for adversarial attention")
    ap.add_argument("--adv_steps", type=int, default=300)
    ap.add_argument("--quick", action="store_true", help="tiny sizes and a few steps (tests)")
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--verdicts_only", action="store_true",
                    help="verdicts.csv and the README's Verdicts section from the CSVs in --out; no training")
    a = ap.parse_args(argv)
    if a.verdicts_only:
        for row in verdicts_only(a.out):
            print(f"{row[3]}: {row[0]} ({row[4]})")
        return
    if a.quick:
        a.seeds, a.examples, a.permutations, a.adv_steps = 1, min(a.examples, 8), min(a.permutations, 100), 20
    for name in ("seeds", "steps", "examples", "permutations", "adv_steps"):
        if getattr(a, name) < 1:
            raise SystemExit(f"--{name}={getattr(a, name)}; expected a positive int")
    if a.permutations < 100 and not a.quick:
        raise SystemExit(f"--permutations={a.permutations}; the protocol takes the median over >= 100")
    spec = SPEC + (":quick" if a.quick else f":steps={a.steps}")

    t0 = time.time()
    measures, accuracy, uniform_accuracy, label = [], [], [], ""
    for seed in range(a.seeds):
        result, model, data = train(spec, {"seed": seed})
        accuracy.append(result["test/accuracy"])
        uniform_accuracy.append(train(spec, {"seed": seed, "model.uniform_attention_groups": ("pool",)})[0]["test/accuracy"])
        n_test = len(data.ids["test"])
        chosen = np.unique(np.linspace(0, n_test - 1, min(a.examples, n_test)).round().astype(int))
        batch = data.make_batch("test", chosen.tolist(), len(chosen))
        measures.append(explanation_measures(model, batch, permutations=a.permutations, epsilon=a.epsilon,
                                             adv_steps=a.adv_steps, seed=seed))
        label = data.config.label
        print(f"seed {seed}: test accuracy {accuracy[-1]:.3f} (uniform pooling {uniform_accuracy[-1]:.3f}); "
              f"{time.time() - t0:.0f}s", flush=True)
    s = summarise(measures)
    config = load(spec)

    r = Report(a.out, "Is attention explanation? Jain & Wallace and Wiegreffe & Pinter on verse classification")
    r.text(f"""
{environment_line()} Total {(time.time() - t0) / 60:.1f} min.

`python scripts/repro_explanation.py --seeds {a.seeds} --steps {config.train.num_steps} --examples {a.examples}
--permutations {a.permutations} --epsilon {a.epsilon} --adv_steps {a.adv_steps}{' --quick' if a.quick else ''}`

**Protocol.** Task: `configs/repro_explanation.py` — English Bible verses labelled by {label}
(`data/classification.py`; splits are whole chapters), a {config.model.num_encoder_layers}-layer pre-LN encoder
(d_model {config.model.d_model}, {config.model.num_heads} heads) and an attention-pooling classifier (one learned
query, one head, softmax over the verse's tokens), {config.train.num_steps} steps of AdamW, seeds 0..{a.seeds - 1}.
The explanation is the pooling distribution α. On {a.examples} test verses evenly spaced through the test
split (which is ordered by book, so both classes appear), per seed:
- **Kendall τ** between α and (i) gradient × input of the predicted class's probability on each token
  embedding (absolute value; for one-hot inputs this is Jain & Wallace's gradient with respect to the
  token), (ii) leave-one-out: TVD between the output distributions with and without the token (the token is
  deleted, later tokens move up). Significance: scipy's Kendall test, p < 0.05.
- **Permutation:** {a.permutations} random permutations of α among the verse's tokens (`WeightOverride("pool",
  0, "permute")`); per verse the median TVD of the output; Jain & Wallace report it against max α.
- **Adversarial attention:** α' = softmax(z) over the verse's tokens, z from log α plus N(0, 1) noise, Adam
  (lr 0.1, {a.adv_steps} steps) on −JSD(α, α') + 100·max(0, TVD(output) − ε), ε = {a.epsilon}; the largest JSD
  (nats, max ln 2 = 0.693) seen among the iterates whose output stayed within ε (0 if none).
- **Uniform baseline (Wiegreffe & Pinter):** the same model trained from scratch with the pooling frozen to
  uniform (`model.uniform_attention_groups=("pool",)`), test accuracy on the whole test split.
""")
    r.section("What the papers report")
    r.text(PAPERS)
    r.section("Accuracy: learned vs uniform pooling attention")
    r.table(["seed", "test accuracy (learned α)", "test accuracy (uniform α)"],
            [[i, accuracy[i], uniform_accuracy[i]] for i in range(a.seeds)]
            + [["mean ± std", mean_std(accuracy), mean_std(uniform_accuracy)]], csv_name="accuracy.csv")
    r.section("Summary per seed")
    names = list(s)
    r.table(["measure"] + [f"seed {i}" for i in range(a.seeds)] + ["mean ± std"],
            [[n] + s[n] + [mean_std(s[n])] for n in names], csv_name="summary.csv")
    r.section("Permutation: median output TVD by max attention (all seeds)")
    amax = np.concatenate([m["alpha_max"] for m in measures])
    perm = np.concatenate([m["perm_median_tvd"] for m in measures])
    adv = np.concatenate([m["adv_jsd"] for m in measures])
    rows = []
    for lo, hi in zip(MAX_ATTENTION_BINS[:-1], MAX_ATTENTION_BINS[1:]):
        sel = (amax >= lo) & (amax < hi)
        rows.append([f"[{lo:.2f}, {min(hi, 1.0):.2f}]", int(sel.sum()),
                     float(np.median(perm[sel])) if sel.any() else None,
                     float(np.mean(adv[sel])) if sel.any() else None])
    r.table(["max α", "verses", "median of per-verse median TVD", "mean adversarial JSD"], rows,
            csv_name="by_max_attention.csv")
    per_example = []
    for seed, m in enumerate(measures):
        for i in range(len(m["length"])):
            per_example.append([seed, i, int(m["length"][i]), bool(m["correct"][i]), m["alpha_max"][i],
                                m["tau_grad"][i], m["tau_loo"][i], m["perm_median_tvd"][i], m["adv_jsd"][i]])
    write_csv(os.path.join(a.out, "per_example.csv"),
              ["seed", "example", "tokens", "correct", "max_alpha", "tau_grad", "tau_loo", "perm_median_tvd",
               "adv_jsd"], per_example)
    r.text("Per-verse values: [per_example.csv](per_example.csv).")
    r.text(write_verdicts(a.out, verdict_rows(s, accuracy, uniform_accuracy, [m["alpha_max"] for m in measures],
                                              [m["perm_median_tvd"] for m in measures])))
    r.write()
    print(f"wrote {a.out}/README.md; mean tau_grad {fmt(np.mean(s['mean_tau_grad']))}, "
          f"tau_loo {fmt(np.mean(s['mean_tau_loo']))}, median perm TVD {fmt(np.mean(s['median_perm_median_tvd']))}, "
          f"mean adv JSD {fmt(np.mean(s['mean_adv_jsd']))}")


if __name__ == "__main__":
    from engine import cli

    cli.script(main)
