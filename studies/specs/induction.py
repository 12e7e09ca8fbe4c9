"""Induction heads and the in-context-learning phase change (Olsson et al. 2022): the study's runs, records,
claims and report.

Attention-only decoders (``configs/repro_induction.py``) with 1 and 2 layers learn sequences of a random block of
tokens repeated (``induction_layout="repeat"``); ``analysis.HeadScores`` tracks every head's previous-token and
prefix-matching score on held-out sequences, the evaluation hook the ICL score, and at the end single heads and
groups of heads are masked (``analysis.ablation_heads``). ``python -m studies train induction``
(``studies.commands.induction_measure``) trains every run through ``engine.run`` and writes the records
(``run.json``, ``summary.csv``, ``scores.csv``, ``ablation.csv``, ``curves.csv``); ``report`` regenerates everything
else from them, without training.
"""
from __future__ import annotations

import json
import math
import os
from typing import Optional, Sequence

import numpy as np

from analysis.heads import (HEAD_SUMMARY, head_summaries, icl_windows, induction_lags, parse_heads, score_arrays,
                            share_lost)
from studies import seedwise
from studies.regenerate import regenerate
from studies.inprocess import config_path, load
from studies.report import REPO, Panel, Report, line_panels, mean_std, number, read_csv

OUT = os.path.join(REPO, "docs", "results", "induction")
HEAD_THRESHOLD = 0.5  # final score that makes a head an induction / previous-token head
ABRUPT = 0.1  # the 10%->90% fall within this fraction of the training steps
MOST = 0.5  # share of the ICL drop a knockout must remove
OLSSON = "Olsson et al. 2022, In-context Learning and Induction Heads"
OLD = "threshold from the 2026-12-02 criteria (after the 2026-12-01 runs: post hoc); interval rule 2026-12-05: post-hoc"
CLAIMS = [seedwise.SeedClaim(i, text, OLSSON, measure, "olsson", OLD, threshold=t, side=side, digits=d)
          for i, text, measure, t, side, d in [
    ("abrupt", "the ICL score falls abruptly (a phase change) in the 2-layer model",
     "10%→90% of the fall as a share of the training steps, 2 layers", ABRUPT, seedwise.BELOW, 3),
    ("formed", "induction and previous-token heads form during the phase change (2 layers)",
     "largest |half-final step - steepest fall| of the heads scoring >= 0.5, in evaluation intervals", 2.0,
     seedwise.BELOW, 2),
    ("one_no_heads", "a 1-layer model forms no induction head", "highest end-of-training prefix-matching score, "
     "1 layer", HEAD_THRESHOLD, seedwise.BELOW, 3),
    ("one_no_fall", "a 1-layer model has no abrupt fall", "10%→90% of the fall as a share of the training steps, "
     "1 layer (1 when it never falls)", ABRUPT, seedwise.ABOVE, 3),
    ("one_worse", "a 1-layer model learns less in context (a higher final ICL score)",
     "final ICL score, 1 layer minus 2 layers, same seed (nats)", 0.0, seedwise.ABOVE, 3),
    ("knockout_top", "knocking out the top induction head removes most in-context learning (2 layers)",
     "share of the ICL drop lost with the top prefix-matching head masked", MOST, seedwise.ABOVE, 3),
    ("knockout_all", "knocking out every layer-1 head removes most in-context learning (2 layers)",
     "share of the ICL drop lost with all layer-1 heads masked", MOST, seedwise.ABOVE, 3)]]
RECORDS = ("run.json", "summary.csv", "scores.csv", "ablation.csv", "curves.csv")


def load_runs(out: str) -> tuple[dict, list[dict], dict]:
    """(run.json, summary rows, {(layers, seed): run}) from the records in ``out``; each run has what
    ``studies.commands.induction_run`` returns but ``params`` and ``seconds``, with the training curves None where
    the records do not have them."""
    if not os.path.isfile(path := os.path.join(out, "run.json")):
        raise ValueError(f"{path} not found: measure the study first (python -m studies train induction)")
    with open(path) as f:
        run = json.load(f)
    summary, scores, ablation = (read_csv(out, n, "python -m studies train induction")
                                 for n in ("summary.csv", "scores.csv", "ablation.csv"))
    curves = read_csv(out, "curves.csv", "") if os.path.isfile(os.path.join(out, "curves.csv")) else []
    of = lambda rows, key: [x for x in rows if (int(x["attention layers"]), int(x["seed"])) == key]  # noqa: E731
    runs = {}
    for row in summary:
        key = (int(row["attention layers"]), int(row["seed"]))
        mine = of(scores, key)
        steps = sorted({int(s["step"]) for s in mine})
        prev, prefix = score_arrays([(steps.index(int(s["step"])), int(s["layer"]), int(s["head"]),
                                      float(s["previous-token score"]), float(s["prefix-matching score"]))
                                     for s in mine])
        icl = {int(s["step"]): float(s["ICL score"]) for s in mine}
        train, by_position = ([(float(x["x"]), float(x["value"])) for x in of(curves, key) if x["curve"] == c]
                              for c in ("train loss", "held-out loss by position"))
        window = row["10%→90% of the fall (steps)"]
        runs[key] = {"steps": steps, "scores": [icl[s] for s in steps], "final": float(row["ICL score (end)"]),
                     "phase": int(row["phase change at step"]) if row["phase change at step"] else None,
                     "window": tuple(map(int, window.split("→"))) if "→" in window else (None, None),
                     "prev": prev, "prefix": prefix, "ablation": [(a["masked"], parse_heads(a["head"]),
                                                                   float(a["ICL score"])) for a in of(ablation, key)],
                     "train_step": [int(x) for x, _ in train] or None, "train_loss": [v for _, v in train] or None,
                     "position_loss": np.array([v for _, v in by_position]) if by_position else None,
                     "accuracy": float(row["accuracy on repeats (end)"])}
    return run, summary, runs


def measurements(runs: dict, seeds: Sequence[int], every: int, steps: int) -> dict:
    """{claim id: (per-seed values, None)} from the runs."""
    two, one = ([runs[layers, s] for s in seeds] for layers in (2, 1))
    width = lambda r: 1.0 if r["window"][0] is None else (r["window"][1] - r["window"][0]) / steps  # noqa: E731

    def lag(r) -> Optional[float]:
        ind, prev = lags(r)
        return None if not ind or not prev or None in ind + prev else max(abs(t) for t in ind + prev) / every

    H = two[0]["prefix"].shape[2]
    return {k: (v, None) for k, v in {
        "abrupt": [width(r) for r in two], "formed": [lag(r) for r in two],
        "one_no_heads": [float(r["prefix"][-1].max()) for r in one], "one_no_fall": [width(r) for r in one],
        "one_worse": [a["final"] - b["final"] for a, b in zip(one, two)],
        "knockout_top": [share_lost(r["ablation"], "top prefix-matching head") for r in two],
        "knockout_all": [share_lost(r["ablation"], f"top {H} prefix-matching heads") for r in two]}.items()}


def lags(r: dict) -> tuple[list, list]:
    """A run's ``induction_lags`` (induction heads, previous-token heads) at ``HEAD_THRESHOLD``."""
    return induction_lags(r["steps"], r["prev"], r["prefix"], r["phase"], HEAD_THRESHOLD)


def config_of(run: dict):
    """The config the records of ``run`` (run.json) were measured with."""
    return load(config_path("repro_induction") + (":quick" if run["quick"] else f":steps={run['steps']}"))


def report(out: str = OUT) -> str:
    """The report, CSVs and figures of ``out`` regenerated from its records."""
    run, summary, runs = load_runs(out)
    seeds, steps, base = run["seeds"], run["steps"], config_of(run)
    every, T, vocab, batch, n_hi = (int(base.train.eval_every), base.data.seq_len, base.data.vocab_size,
                                    base.data.batch_size, base.data.induction_segment_len)
    early, late = icl_windows(T)
    n_lo = max(2, n_hi // 2)
    report = Report(out, "Induction heads: in-context-learning score, head scores and ablations, 1 vs 2 "
                    "attention-only layers")
    report.text(run["measured"] + (" Quick mode (tiny sizes)." if run["quick"] else ""))
    report.text(
        f"Attention-only decoders (`model.attention_only`: no MLP blocks; pre-LN, untied output projection, rotary "
        f"positions), d_model {base.model.d_model}, {base.model.num_heads} heads, 1 or 2 layers. Data: `BOS` then a "
        f"block of n distinct random tokens, n uniform in [{n_lo}, {n_hi}] per sequence, repeated until the sequence "
        f"(length {T}, vocabulary {vocab}) is full (`data.build_synthetic`, task `induction`, "
        f"`induction_layout=\"repeat\"`; config `configs/repro_induction.py`, run through `engine.run`). "
        f"Trained as a language model on every token (`train.loss_on=\"all\"`): AdamW lr {base.train.learning_rate:g}, "
        f"warmup then cosine decay, {steps} steps of batch {batch}, seeds {', '.join(map(str, seeds))}.\n\n"
        f"**ICL score** (Olsson et al.: loss at a late token minus loss at an early token) = mean held-out loss "
        f"over positions {late[0]}-{late[1] - 1} minus mean over positions {early[0]}-{early[1] - 1}, on "
        f"{int(base.data.num_eval_batches) * batch} held-out sequences, every {every} steps. The early positions are "
        f"always inside the first block (nothing to copy: loss about log({vocab - 5}) = "
        f"{math.log(vocab - 5):.2f}); the late ones are always in a repeat, predictable by an induction "
        f"head. A perfect induction model scores about {-math.log(vocab - 5):.2f}; a model that only "
        f"spreads its bet over the tokens already seen scores about log(n) - log({vocab - 5}) "
        f"(≈ {math.log((n_lo + n_hi) / 2) - math.log(vocab - 5):.2f} at the mean n). **Phase change** "
        "= the step where the score falls fastest between two measurements; the 10%→90% window is where the "
        "score covers 10% and 90% of its total fall. Accuracy: argmax on the targets inside the repeats."
    )
    report.table(list(summary[0]), [[number(x) for x in row.values()] for row in summary])
    report.text("(CSV, a record of the runs: [summary.csv](summary.csv))")

    curves = all(r["train_loss"] is not None for r in runs.values())
    style = {(layers, seed): dict(color={1: "tab:blue", 2: "tab:red"}[layers], alpha=1.0 if k == 0 else 0.6,
                                  linestyle=("-", "--", ":", "-.")[k % 4]) for layers, seed in runs
             for k in [list(seeds).index(seed)]}
    lines = lambda x, y: [(f"{k[0]} layer(s), seed {k[1]}", r[x] if x else np.arange(len(r[y])), r[y],  # noqa: E731
                           style[k]) for k, r in runs.items()]
    panels = [Panel("ICL score (late - early held-out loss)", "step", "nats", lines("steps", "scores"))]
    if curves:
        panels += [Panel("training loss (every token)", "step", "", lines("train_step", "train_loss")),
                   Panel("held-out loss by position (end of training)", "position", "", lines(None, "position_loss"),
                         spans=[(a - 0.5, b - 0.5) for a, b in (early, late)])]
    report.figure(line_panels(panels, len(panels)), "icl_score", "In-context-learning score over training" + (
        ", training loss, and the held-out loss per position at the end (grey: the early and late windows of the "
        "score)" if curves else " (the training loss and per-position curves were not recorded by these runs)")
        + ", for 1- and 2-layer attention-only models.")
    head_sections(report, runs, seeds)
    measured = measurements(runs, seeds, every, steps)
    verdicts = seedwise.judge_all(CLAIMS, measured)
    report.section("Verdicts")
    report.text("Each claim compares the mean over seeds with its threshold by a 95% t interval, Holm-adjusted "
                "within the family `olsson` (`studies/seedwise.py`). The thresholds were written on 2026-12-02, after "
                "the runs of 2026-12-01 (post hoc); the interval rule on 2026-12-05 (post-hoc).")
    report.table(seedwise.VERDICT_COLUMNS, seedwise.verdict_rows(verdicts), csv_name="verdicts.csv")
    report.section("What the data say")
    report.text(what_the_data_say(runs, seeds, every, measured))
    return report.write()


def head_sections(report: Report, runs: dict, seeds: Sequence[int]) -> None:
    """The head-score tables, CSVs and figure, and the ablation tables."""
    report.section("Which heads do it: previous-token and prefix-matching scores")
    report.text(
        "Measured by the `HeadScores` hook on the same held-out sequences and at the same steps as the ICL score, "
        "from the attention weights of the `reference` backend (the run's parameters in the same model). "
        "**Previous-token score** of a head = its mean attention weight from position t to t - 1 (t ≥ 1). "
        "**Prefix-matching score** = its mean attention mass from a token that occurred before (token[j] = "
        "token[t], j < t; every position of a repeat) onto the positions j + 1 right after those earlier "
        "occurrences (summed over them when the block occurred more than once), averaged over such positions. "
        "Olsson et al. (2022) use the same two scores on repeated random tokens. Uniform attention over the "
        "context gives each about 1/(t + 1) per key. Heads are named L<layer>H<head>. **Half-final step** = the "
        "first measured step at which a score reaches half of its end-of-training value (— when the first "
        "measurement already did: the score did not rise).")
    report.text("Every head:")
    report.table(["attention layers", "seed"] + HEAD_SUMMARY + ["phase change at step"],
                 [list(key) + h + [r["phase"]] for key, r in runs.items()
                  for h in head_summaries(r["steps"], r["prev"], r["prefix"])], csv_name="heads.csv")
    report.text("Every measurement over training (per step, layer and head, with the ICL score): "
                "[scores.csv](scores.csv).")

    panels = []
    for (layers, seed), r in sorted(runs.items()):
        steps, last = r["steps"], r["prefix"].shape[1] - 1
        right = [(f"{name} L{layer}H{h}", steps, score[:, layer, h], dict(color=f"C{h}", lw=lw, ls=ls))
                 for h in range(r["prefix"].shape[2])
                 for name, score, layer, lw, ls in (("prefix", r["prefix"], last, 1.2, "-"),
                                                    ("prev", r["prev"], 0, 1.0, ":"))]
        panels.append(Panel(f"{layers} layer(s), seed {seed}", "step", "ICL score (nats, black)",
                            [("ICL score", steps, r["scores"], dict(color="black", lw=2.0))], right, "head score",
                            [r["phase"]] if r["phase"] is not None else []))
    report.figure(line_panels(panels, len(seeds), legend="below"), "head_scores", "Black: the ICL score (left "
                  "axis). Solid: the prefix-matching score of each head of the last layer; dotted: the previous-token "
                  "score of each head of layer 0 (same colour = same head index; right axis). Grey line: the phase "
                  "change (steepest ICL fall).")

    report.section("Ablation: the ICL score with heads masked (end of training)")
    report.text(
        "The trained model on the same held-out sequences with the output of the named heads multiplied by 0 "
        "(`models.Interventions(head_mask={\"decoder_self\": mask})`), chosen from the end-of-training scores: "
        "the top prefix-matching head, as a control the lowest prefix-matching head of the same layer, then the "
        "top k heads by prefix-matching score together; the top previous-token head of layer 0, as a control "
        "the lowest one of layer 0, then the top k of layer 0 together. **Share of the drop lost** = 1 − "
        "(ICL score masked) / (ICL score unmasked): 0 = masking changes nothing, 1 = the context no longer "
        "helps at all, above 1 = late tokens are predicted worse than early ones. In a 1-layer model both "
        "rankings are of the same layer 0.")
    report.text(f"Over seeds {', '.join(map(str, seeds))} (mean ± std; per run with the heads: "
                "[ablation.csv](ablation.csv)):")
    report.table(["attention layers", "masked", "ICL score", "share of the drop lost"],
                 [[layers, c, mean_std([runs[layers, s]["ablation"][k][2] for s in seeds]),
                   mean_std([share_lost(runs[layers, s]["ablation"], c) for s in seeds])]
                  for layers in sorted({layers for layers, _ in runs})
                  for k, (c, _, _) in enumerate(next(iter(runs.values()))["ablation"])])


def what_the_data_say(runs: dict, seeds: Sequence[int], every: int, measured: dict) -> str:
    """Per depth the ICL score, accuracy and phase change; then Olsson et al.'s three claims against the numbers
    (``measured``: what ``measurements`` returns)."""
    two, one = ([runs[layers, s] for s in seeds] for layers in (2, 1))
    gap = np.nanmean([r["final"] for r in two]) - np.nanmean([r["final"] for r in one])
    lines = [f"- {layers} layer(s): final ICL score {mean_std([r['final'] for r in rs])}; accuracy on the repeats "
             f"{mean_std([r['accuracy'] for r in rs])}; steepest fall at step(s) "
             f"{', '.join(str(r['phase']) for r in rs)}; 10%→90% of the fall between steps "
             + ", ".join("—" if r["window"][0] is None else "{}→{}".format(*r["window"]) for r in rs) + "."
             for layers, rs in ((1, one), (2, two))]
    lines.append(f"- End-of-training difference (2 layers minus 1 layer): {gap:.3f} nats.")
    H = two[0]["prefix"].shape[2]
    n_ind, n_prev = ([int(np.sum(r[k][-1, layer] >= HEAD_THRESHOLD)) for r in two] for k, layer in (("prefix", 1),
                                                                                                     ("prev", 0)))
    lag = [[x for r in two for x in lags(r)[i] if x is not None] for i in (0, 1)]
    span = lambda v: f"{min(v):+d} to {max(v):+d}" if v else "—"  # noqa: E731
    inside = bool(lag[0]) and max(abs(x) for v in lag for x in v) <= 2 * every
    lost = lambda rs, c: mean_std([share_lost(r["ablation"], c) for r in rs])  # noqa: E731
    single, one_prefix = measured["knockout_top"][0], max(measured["one_no_heads"][0])
    lines += ["", (
        "**Against Olsson et al. (2022).** (1) Induction heads (prefix matching in a later layer, built on a "
        "previous-token head in an earlier one) form during a phase change, in the window in which the ICL score "
        f"drops: here {', '.join(map(str, n_ind))} of the {H} layer-1 heads end with a prefix-matching score ≥ "
        f"{HEAD_THRESHOLD:g} and {', '.join(map(str, n_prev))} of the layer-0 heads with a previous-token score ≥ "
        f"{HEAD_THRESHOLD:g} (seeds {', '.join(map(str, seeds))}); their scores reach half their final value "
        f"{span(lag[0])} and {span(lag[1])} steps from the steepest fall (measured every "
        f"{every} steps): " + ("inside the phase-change window. " if inside else "not all inside the window. ")
        + f"(2) One layer forms none: its highest prefix-matching score is {one_prefix:.2f} and its ICL score "
        f"ends at {mean_std([r['final'] for r in one])}. (3) Knocking the induction heads out removes most in-context "
        f"learning: masking the top prefix-matching head loses {mean_std(single)} of the drop, "
        + ", ".join(f"the top {k} together {lost(two, f'top {k} prefix-matching heads')}" for k in range(2, H + 1))
        + ("; every layer-1 head is an induction head and they back each other up, so only masking all of them "
           "removes the in-context learning" if min(n_ind) == H and not np.all(np.asarray(single) >= 0.5) else "")
        + f". Masking all of layer 0's heads loses {lost(two, f'top {H} previous-token heads of layer 0')} (the "
        f"top previous-token head alone {lost(two, 'top previous-token head of layer 0')}). The task is "
        "synthetic (repeated random blocks: every late token predictable by copying), so the ICL score here "
        "measures copying alone.")]
    return "\n".join(lines)


def generate(into: Optional[str] = None) -> list[str]:
    """The registry's entry: the committed report regenerated from its records (under ``into`` when given)."""
    return [regenerate(OUT, RECORDS, report, into)]


def summary() -> list:
    """The study's row of docs/results/README.md."""
    from studies.specs import Summary

    run, _, runs = load_runs(OUT)
    every = int(config_of(run).train.eval_every)
    verdicts = seedwise.judge_all(CLAIMS, measurements(runs, run["seeds"], every, run["steps"]))
    return [Summary(os.path.relpath(OUT, REPO), "Induction heads and the ICL phase change (Olsson et al.)",
                    f"1 and 2 layers x {len(run['seeds'])} seeds; verdicts: {seedwise.counts(verdicts)}")]
