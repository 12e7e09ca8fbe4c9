"""Which heads matter? Michel et al. (2019), Voita et al. (2019) and Vashishth et al. (2019) on attnlab's
translation model with 8 heads per layer (``configs/repro_head_importance.py``), or on a pretrained
encoder-decoder checkpoint: the study's settings, claims and report, regenerated from the JSON records in
``<out>/points/`` that ``python -m studies train head_importance`` (``studies.commands``) measures.
"""
from __future__ import annotations

import json
import os
from typing import Optional

import numpy as np

from studies import importance_summary as summ
from analysis.importance import POSITIONAL, SELF_GROUPS, from_record
from studies import seedwise
from studies.inprocess import load
from studies.points import read_record
from studies.regenerate import regenerate
from studies.report import REPO, Report
from studies.specs import Summary

RUN, POINTS, DECODED = "run.json", "points", "decoded"  # in a report folder: settings, records, decodes
SPEC = os.path.join(REPO, "configs", "repro_head_importance.py")
OUT = os.path.join(REPO, "docs", "results", "head_importance")
FRACTIONS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
QUICK_FRACTIONS = (0.0, 0.5, 0.9)
# Thresholds of the claims (from the 2026-12-02 criteria: after the first run's data, before the replication's)
HURT_BLEU = 1.0  # a head masked alone "hurts" when BLEU falls by at least this much
MAX_HURT_SHARE = 0.15  # single heads: at most this share of the heads hurts on average
WITHIN_BLEU = 1.0  # pruning: "without noticeable loss" = within this much BLEU of the unpruned model
PRUNABLE = 0.2  # pruning: fraction of all heads that must be prunable within WITHIN_BLEU
CONFIDENCE_RHO = 0.3  # Voita et al.: Spearman(confidence, importance) above this counts as correlated
WRECKED = 0.5  # Vashishth et al.: replaced cross-attention below this fraction of the unmodified BLEU
UNIFORM_GAP = 1.0  # Wiegreffe & Pinter: uniform cross-attention more than this much BLEU below learned
PAPER = """
- **Michel, Levy & Neubig**, *Are Sixteen Heads Really Better than One?*, NeurIPS 2019 (arXiv:1905.10650), on a
  WMT'14 En-Fr Transformer-large (6+6 layers, 16 heads). Abstract: "a large percentage of attention heads can
  be removed at test time without significantly impacting performance", "some layers can even be reduced to a
  single head", and "the self-attention layers can be significantly pruned, while the encoder-decoder layers
  are more dependent on multi-headedness". In the body (checked against a page-referenced summary of the
  paper, not the PDF): only 8 of the 96 encoder self-attention heads change BLEU significantly (p < 0.01)
  when masked alone, half of them for the better (Section 3.2, Table 1); pruning by |dL/dxi_h| (l2-normalised
  per layer) removes 20% of the WMT model's heads (40% of BERT's) without noticeable loss (Section 4.2,
  Figure 3); pruning more than 60% of the encoder-decoder heads is catastrophic, while the self-attention
  groups keep around 30 BLEU with 20% of their heads (Section 5, Figure 4).
- **Voita, Talbot, Moiseev, Sennrich & Titov**, *Analyzing Multi-Head Self-Attention: Specialized Heads Do the
  Heavy Lifting, the Rest Can Be Pruned*, ACL 2019 (arXiv:1905.09418). Abstract: in the encoder, "the most
  important and confident heads play consistent and often linguistically-interpretable roles"; with
  stochastic gates and a relaxed L0 penalty "specialized heads are last to be pruned", and on WMT En-Ru
  "pruning 38 out of 48 encoder heads results in a drop of only 0.15 BLEU". Confidence is a head's mean
  maximum attention weight; a head is positional when its maximum sits at one relative position (in practice
  -1 or +1) in at least 90% of cases.
- **Vashishth, Upadhyay, Tomar & Faruqui**, *Attention Interpretability Across NLP Tasks*, 2019
  (arXiv:1909.11218): in single-sequence classification attention acts as a gate and permuting or changing
  its weights barely moves the output, while in pair-sequence tasks and generation (translation) the output
  depends on the weights. (Their per-dataset BLEU tables could not be retrieved in this session; the
  comparison below is with this qualitative claim.)
- **Wiegreffe & Pinter**, *Attention is not not Explanation*, EMNLP 2019: attention can only be claimed to
  matter for a task if a model with attention frozen to uniform, trained from scratch, does worse; they ran
  it on classification. Here the same test on translation's cross-attention.
"""


def spec_of(a: dict) -> str:
    """The config spec of run settings ``a`` (``run.json``)."""
    return os.path.relpath(SPEC, REPO) + (
        ":quick" if a["quick"] else f":steps={a['steps']},minutes={a['minutes']},sentences={a['sentences']}")


def report_from_records(out: str = OUT) -> str:
    """The report of ``out`` regenerated from its records: the study's (``run.json`` and ``points/``) or a
    pretrained checkpoint's (``points/pretrained.json``); the README path."""
    pretrained = os.path.join(out, POINTS, "pretrained.json")
    if not os.path.isfile(os.path.join(out, RUN)):
        if os.path.isfile(pretrained):
            raw = read_record(pretrained)
            return report(out, [from_record(raw)], [], _pretrained_intro(raw), raw["sentences"], verdicts=False)
        raise ValueError(f"{os.path.join(out, RUN)} not found: measure the study first "
                         "(python -m studies train head_importance)")
    a, runs, uniform = _records(out)
    return report(out, runs, uniform, _intro(a, runs, uniform, load(os.path.join(REPO, spec_of(a)))), a["sentences"])


def _records(out: str) -> tuple[dict, list[dict], list[dict]]:
    """(settings, measurements per seed, of the uniform baseline per seed) of the study in ``out``."""
    with open(os.path.join(out, RUN)) as f:
        a = json.load(f)
    tag, first = "quick_" if a["quick"] else "", a["first_seed"]
    return a, *(summ.recorded_runs(os.path.join(out, POINTS), [f"{tag}{kind}{s}" for s in range(first, first + a[n])])
                for kind, n in (("seed", "seeds"), ("uniform", "uniform_seeds")))


def _intro(a: dict, runs: list, uniform: list, config) -> str:
    times = sorted(m["measured_utc"] for m in runs + uniform if m.get("measured_utc"))
    H, steps, minutes = config.model.num_heads, config.train.num_steps, config.train.max_minutes
    flags = "".join(f" --{k} {a[k]}" for k in ("first_seed", "out", "workdir")
                    if a[k] and a[k] != os.path.relpath(OUT, REPO))
    batches = f"the first {a['eval_batches']} validation batches (64 sentences each)"
    return f"""
Measurements made with commit {', '.join(sorted({m.get('commit', 'not recorded') for m in runs + uniform}))}\
{f', {times[0]} to {times[-1]} UTC' if times else ' (times not recorded)'}. Wall time:
training {sum(m["train_minutes"] for m in runs + uniform):.0f} min ({len(runs) + len(uniform)} runs), analyses
{sum(m["measure_minutes"] for m in runs):.0f} min, as measured when each run was made.

`python -m studies train head_importance --seeds {a['seeds']} --uniform_seeds {a['uniform_seeds']} --minutes \
{a['minutes']} --steps {a['steps']} --eval_batches {a['eval_batches']} --sentences {a['sentences']}\
{' --quick' if a['quick'] else ''}{flags}` (records: [points/](points/), one JSON per model; regenerated by \
`python -m studies report head_importance`). On a pretrained encoder-decoder checkpoint (Marian, e.g. \
`Helsinki-NLP/opus-mt-es-en`; a local directory or a hub id) the same measurements run with \
`python -m studies train head_importance --pretrained DIR --out FOLDER`, on our Bible corpus in its own token ids.

**Protocol.** `configs/repro_head_importance.py`: the main job (Spanish → English Bible verses, d_model
{config.model.d_model}, {config.model.num_encoder_layers}+{config.model.num_decoder_layers} layers, pre-LN,
QK-LayerNorm) with {H} heads per layer (head width {config.model.d_model // H}); training stops at
{steps} steps{f' or {minutes:g} minutes (start-up included), whichever first' if minutes > 0 else ' (no time limit)'}\
; seeds {', '.join(map(str, summ.seeds_of(runs)))}.
{PROTOCOL.format(sentences=a['sentences'], batches=batches)}
- **Uniform baseline** (Wiegreffe & Pinter): the same config with `model.uniform_attention_groups=("cross",)`,
  trained from scratch for the same budget, {len(uniform)} seed(s).
"""


def _pretrained_intro(raw: dict) -> str:
    batches = f"{raw['eval_batches']} batches of {8 if raw['quick'] else 64} validation verses"
    return f"""
The pretrained {raw['family']} checkpoint `{raw['pretrained']}` measured with commit {raw['commit']} on \
{raw['measured_utc']} UTC, on our Bible corpus (Spanish → English) in the checkpoint's own token ids:
`python -m studies train head_importance --pretrained {raw['pretrained']} --eval_batches {raw['eval_batches']} \
--sentences {raw['sentences']}{' --quick' if raw['quick'] else ''} --out <this folder>` (record: \
[points/pretrained.json](points/pretrained.json); a rerun reports from it without measuring again). Decoding is \
`models.greedy_decode` on the checkpoint itself, so there is no engine test BLEU and no training time. The \
study's claims are judged on >= 3 seeds of attnlab's own model (`docs/results/head_importance/`); one checkpoint \
has no interval, so here the tables are measurements only.

{PROTOCOL.format(sentences=raw['sentences'], batches=batches)}
"""


PROTOCOL = """Interventions are `models.Interventions` passed to the model and to `models.greedy_decode` (through
`Evaluator.bleu(..., interventions=)`), in the encoder and at every KV-cache decoding step:
- **BLEU**: sacreBLEU on the first **{sentences} test sentences**, greedy decoding (the same sentences for every
  measurement and for the engine's final test BLEU).
- **NLL**: teacher-forced validation NLL (nats per target token) on {batches}.
- **Head mask** ξ_h multiplies head h's output before the output projection; ξ_h = 0 removes the head.
  Importance I_h = mean over batches of |∂NLL/∂ξ_h| at ξ = 1, l2-normalised per layer (Michel et al.);
  pruning removes the heads with the lowest normalised importance first (globally, or within one group).
- **Confidence** (Voita et al.): mean over non-padding queries of the head's largest attention weight;
  **previous / next-token** behaviour: the mean weight on the token at relative position -1 / +1 and the
  fraction of queries whose largest weight sits there (a head is *positional* when that fraction is
  ≥ """ + str(POSITIONAL) + """, Voita et al.'s threshold); measured on the same validation batches, teacher forced.
- **Cross-attention overrides** (Vashishth et al.): `WeightOverride("cross", layer, "permute" | "uniform")`,
  each row's weights shuffled among the source tokens (a fresh permutation per decoding step) or replaced by
  1/(source length); BLEU at decode time, and under teacher forcing the total variation distance between the
  next-token distributions of the modified and the unmodified model, per target token."""


def report(out: str, runs: list, uniform: list, intro: str, sentences: int, verdicts: bool = True) -> str:
    """Write the README, CSVs and figures of ``runs`` (and the ``uniform`` baseline) into ``out``."""
    r = Report(out, "Which heads matter? Michel, Voita and Vashishth et al. on the translation model, 8 heads "
                    "per layer" if verdicts else f"Which heads matter? {runs[0]['shapes']['cross'][1]} heads per layer")
    r.text(intro)
    r.section("What the papers report")
    r.text(PAPER)
    summ.write_tables(r, runs, uniform, sentences, trained=verdicts)
    if not verdicts:
        return r.write()
    numbers, judged_verdicts = judged(runs, uniform)
    r.section("Verdicts")
    r.text("Each claim compares the mean over seeds (per-seed values of the same trained model) with its threshold "
           "by a 95% t interval, Holm-adjusted within its family (`michel`, `voita`, `weights`; a claim without a "
           "value counts as p = 1); kinds as in "
           "`studies.claims` (`studies/seedwise.py`). The thresholds come from criteria written on 2026-12-02, after "
           "the first run's measurements (2026-12-01) and before the replication's"
           + (f" (these were made {', '.join(sorted({m['measured_utc'] for m in runs + uniform}))} UTC)"
              if all(m.get("measured_utc") for m in runs + uniform) else "")
           + "; the interval rule, the per-group contrasts and the within-layer Voita claim were written on 2026-12-05 "
           "after all these data (post-hoc). The registration column says which.")
    r.table(seedwise.VERDICT_COLUMNS, seedwise.verdict_rows(judged_verdicts), csv_name="verdicts.csv")
    r.section("What the data say")
    r.text(summ.reading(numbers, judged_verdicts, sentences, UNIFORM_GAP))
    return r.write()


OLD = "threshold from the 2026-12-02 criteria ({}); interval rule of 2026-12-05 (issue 45): post-hoc"
NEW = "written 2026-12-05 (issue 45) after these data: post-hoc"
MICHEL = "Michel et al. 2019"


def claims(fresh: bool, end_fraction: float) -> list[seedwise.SeedClaim]:
    """The claims; ``fresh``: the measurements were made after the 2026-12-02 criteria (the replication)."""
    old = OLD.format("pre-registered for these measurements" if fresh else "written after these measurements")
    c, above = seedwise.SeedClaim, seedwise.ABOVE
    vashishth = "Vashishth et al. 2019: in translation the output depends on the attention weights"
    return [
        c("single", f"at most {MAX_HURT_SHARE:.0%} of the heads lose >= {HURT_BLEU:g} BLEU when masked alone",
          f"{MICHEL} (Section 3.2, Table 1): 8 of 96 encoder heads change BLEU significantly masked alone",
          f"share of heads losing >= {HURT_BLEU:g} BLEU", "michel", old, threshold=MAX_HURT_SHARE),
        c("pruning", f"{PRUNABLE:.0%} of all heads can be pruned within {WITHIN_BLEU:g} BLEU",
          f"{MICHEL} (Section 4.2, Figure 3): 20% of the WMT model's heads pruned without noticeable loss",
          f"largest pruned fraction within {WITHIN_BLEU:g} BLEU (grid of 10%: above 0.15 = the 20% point reached)",
          "michel", old, threshold=PRUNABLE - 0.05, side=above, digits=2),
        *[c(f"cross_vs_{g}_{tag}", f"cross-attention loses more BLEU than {g} when {tag} of the group is pruned",
            f"{MICHEL}, abstract: self-attention can be pruned, encoder-decoder attention depends more on "
            "multi-headedness", f"BLEU lost, cross minus {g}, same model", "michel", NEW, threshold=0.0, side=above,
            digits=2) for tag in ("50%", f"{end_fraction:.0%}") for g in SELF_GROUPS],
        c("confidence", f"confident encoder heads are the important ones within a layer (Spearman > {CONFIDENCE_RHO:g})",
          "Voita et al. 2019, abstract: the most important and confident encoder heads play consistent roles",
          "mean over encoder layers of Spearman(confidence, raw importance) among a layer's heads", "voita", NEW,
          threshold=CONFIDENCE_RHO, side=above),
        c("positional", "positional self-attention heads exist (at least one per model)",
          "Voita et al. 2019: positional heads (max at ±1 in >= 90% of queries)", "positional heads per model",
          "voita", old, threshold=0.5, side=above, digits=1),
        c("positional_late", "positional heads are pruned later than the other heads",
          "Voita et al. 2019, abstract: specialized heads are last to be pruned",
          "mean pruning position of positional heads minus the other heads' (0 first, 1 last)", "voita", old,
          threshold=0.0, side=above),
        *[c(key, f"{how} cross-attention at decode time leaves below {WRECKED:.0%} of the BLEU", vashishth,
            f"BLEU with cross-attention {kind} in all layers / unmodified BLEU", "weights", old, threshold=WRECKED)
          for key, how, kind in (("permuted", "permuting", "permuted"), ("uniform_decode", "uniform", "uniform"))],
        c("uniform_trained", f"a model trained with uniform cross-attention is more than {UNIFORM_GAP:g} BLEU worse",
          "Wiegreffe & Pinter 2019 (their test, on translation): attention matters if uniform attention does worse",
          "BLEU, learned minus uniform cross-attention, same seed", "weights", old, threshold=UNIFORM_GAP,
          side=above, digits=2)]


def judged(runs: list, uniform: list) -> tuple[dict, list]:
    """(claim_numbers, verdicts) of the runs: each claim judged on its per-seed values."""
    c = summ.claim_numbers(runs, uniform, HURT_BLEU, WITHIN_BLEU)
    share = {k: [float(b / a) if a > 0 else None for b, a in zip(c["cross_bleu"][f"{k}, all layers"], c["base"])]
             for k in ("permute", "uniform")}  # of the unmodified BLEU (None where it is 0)
    values = {"single": c["hurt"] / c["heads"], "pruning": c["kept"],
              "confidence": [float(np.nanmean(r)) for r in c["rho_within"]],
              "positional": [sum(c["positional"][g][s] for g in SELF_GROUPS) for s in range(c["n"])],
              "positional_late": c["late"], "permuted": share["permute"], "uniform_decode": share["uniform"],
              "uniform_trained": [m["base_bleu"] - u["base_bleu"] for m, u in zip(runs, uniform)],
              **{f"cross_vs_{g}_{tag}": loss["cross"] - loss[g] for g in SELF_GROUPS
                 for tag, loss in (("50%", c["loss_half"]), (f"{c['fractions'][-1]:.0%}", c["loss_end"]))}}
    fresh = all(m.get("measured_utc") for m in runs + uniform)
    return c, seedwise.judge_all(claims(fresh, c["fractions"][-1]), {k: (v, None) for k, v in values.items()})


REPORTS = (OUT, os.path.join(OUT, "replication"))  # the committed reports: seeds 0-2, and the replication 3-5


def generate(into: Optional[str] = None) -> list[str]:
    """The registry's entry: the committed reports regenerated from their records (under ``into`` when given)."""
    return [regenerate(out, (RUN, POINTS, DECODED), report_from_records, into) for out in REPORTS]


def summary() -> list:
    """The rows of docs/results/README.md, from the records and the claims."""
    titles = ("Which heads matter? (Michel, Voita, Vashishth et al.; seeds 0-2)",
              "Which heads matter? replication (seeds 3-5)")
    return [Summary(os.path.relpath(out, REPO), title, f"{a['seeds']} seeds + {a['uniform_seeds']} uniform; verdicts: "
                    f"{seedwise.counts(judged(runs, uniform)[1])}")
            for out, title in zip(REPORTS, titles) for a, runs, uniform in [_records(out)]]
