"""Which heads matter? Michel et al. (2019), Voita et al. (2019) and Vashishth et al. (2019) on attnlab's
translation model with 8 heads per layer (``configs/repro_head_importance.py``): the study's measurements, claims
and report.

Per seed, ``run`` trains the model through ``engine.run`` and measures it with ``analysis.measure`` (single-head
masks, gradient importance, pruning curves, attention behaviour, cross-attention overrides), then trains
Wiegreffe & Pinter's uniform-cross-attention baseline; each run's measurements are kept in the raw folder (the
records; a run whose measurements exist is not retrained) and the settings in ``run.json``.
``report_from_records`` regenerates the report, CSVs and figures from them without training. The claims
(``claims``) are judged by ``studies.seedwise``: a t interval over seeds against each threshold, Holm within
each family.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import time
from typing import Optional

import numpy as np

from analysis import (GROUPS, POSITIONAL, SELF_GROUPS, KeepModel, Probe, head_list, measure, spearman,
                      within_layer_spearman)
from analysis import positional_fraction as _positional_fraction
from studies import seedwise
from studies.regenerate import regenerate
from studies.inprocess import load, with_overrides
from engine.evaluation import write_hypotheses
from engine.workdir import RunFinished
from studies.report import PROCESS_COMMIT, REPO, Report, markdown_table, mean_std, plt, write_csv

ROOT = REPO
RUN = "run.json"  # the settings of a report folder's measurements
SPEC = os.path.join(ROOT, "configs", "repro_head_importance.py")
OUT = os.path.join(ROOT, "docs", "results", "head_importance")
FRACTIONS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
QUICK_FRACTIONS = (0.0, 0.5, 0.9)
CHECKPOINT_EVERY = 200  # steps between checkpoints of a run trained with --workdir
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


def train(spec: str, overrides: dict, workdir: Optional[str] = None) -> tuple[KeepModel, dict]:
    """Train one model; with ``workdir`` it checkpoints every CHECKPOINT_EVERY steps there and a rerun resumes it
    (without one it trains in memory and an interrupted run starts again)."""
    import engine

    keep = KeepModel()
    if workdir:
        overrides = {**overrides, "train.checkpoint_every": CHECKPOINT_EVERY}
    config = with_overrides(load(spec), overrides)
    try:
        result = engine.run(config, workdir, hooks=[keep])
    except RunFinished:  # a finished run is never retrained: its last checkpoint is the model
        return restored(config, workdir)
    return keep, {"steps": result["step"], "engine_bleu": result.get("test/bleu"),
                  "train_minutes": result["wall_minutes"], "commit": PROCESS_COMMIT}


def restored(config, workdir: str) -> tuple[KeepModel, dict]:
    """The model of ``workdir``'s finished run, restored from its last checkpoint, with the results its final
    record holds (``train``'s second value)."""
    from engine import evaluation, restore, writer

    task, data, setup, state, step = restore.restore_run(config, workdir)
    keep = KeepModel()
    keep.params, keep.setup, keep.task, keep.data = state["params"], setup, task, data
    keep.evaluator = evaluation.for_task(setup, data, writer.MetricLogger(None, config, process_index=0), None)
    final: dict = {}
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        for line in f:
            if '"event": "final"' in line:
                final = json.loads(line)
    return keep, {"steps": step, "engine_bleu": final.get("test/bleu"), "train_minutes": final.get("wall_minutes", 0.0),
                  "commit": PROCESS_COMMIT}


def cached(raw_dir, name: str, make):
    """``make()``, stored as ``<raw_dir>/<name>.pkl`` and loaded from there when it exists (no raw_dir: always
    ``make()``)."""
    path = os.path.join(raw_dir, f"{name}.pkl") if raw_dir else None
    if path and os.path.exists(path):
        with open(path, "rb") as f:
            return pickle.load(f)
    value = make()
    if path:
        os.makedirs(raw_dir, exist_ok=True)
        with open(path, "wb") as f:
            pickle.dump(value, f)
    return value


def run(a: argparse.Namespace) -> None:
    """Train and measure every seed of ``a`` (the command line of ``scripts/repro_head_importance.py``), keeping
    each run's measurements in ``a.raw`` (reused when present) and the settings in ``<a.out>/run.json``."""
    spec = SPEC + (":quick" if a.quick else f":steps={a.steps},minutes={a.minutes},sentences={a.sentences}")
    t0 = time.time()

    def log(msg: str) -> None:
        print(f"[{(time.time() - t0) / 60:5.1f} min] {msg}", flush=True)

    def run_dir(name: str) -> Optional[str]:
        return os.path.join(a.workdir, f"{tag}{name}") if a.workdir else None

    def seed_run(seed: int) -> dict:
        keep, info = train(spec, {"seed": seed}, run_dir(f"seed{seed}"))
        log(f"seed {seed}: {info['steps']} steps in {info['train_minutes']:.1f} min, engine test BLEU "
            f"{info['engine_bleu']:.2f} on {a.sentences} sentences")
        return dict(info, seed=seed, measured_utc=time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                    **measure(keep, seed, a.eval_batches, a.sentences,
                                    QUICK_FRACTIONS if a.quick else FRACTIONS, log))

    def uniform_run(seed: int) -> dict:
        keep, info = train(spec, {"seed": seed, "model.uniform_attention_groups": ("cross",)},
                           run_dir(f"uniform{seed}"))
        p = Probe(keep, a.eval_batches, a.sentences)
        info.update(base_nll=p.nll(None), base_bleu=p.bleu(None, keep_as="unmasked"), decoded=p.decoded, seed=seed,
                    measured_utc=time.strftime("%Y-%m-%d %H:%M", time.gmtime()))
        log(f"uniform cross-attention seed {seed}: {info['steps']} steps, BLEU {info['base_bleu']:.2f}, "
            f"NLL {info['base_nll']:.4f}")
        return info

    tag = "quick_" if a.quick else ""
    seeds = range(a.first_seed, a.first_seed + a.seeds)
    runs = [cached(a.raw, f"{tag}seed{s}", lambda s=s: seed_run(s)) for s in seeds]
    uniform = [cached(a.raw, f"{tag}uniform{s}", lambda s=s: uniform_run(s))
               for s in range(a.first_seed, a.first_seed + a.uniform_seeds)]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, RUN), "w") as f:
        json.dump(dict(vars(a), out=_rel(a.out), raw=_rel(a.raw)), f, indent=1)




def _rel(path: str) -> str:
    return os.path.relpath(os.path.abspath(path), ROOT) if path else ""


def report_from_records(out: str = OUT) -> str:
    """The report of ``out`` regenerated from its records (``run.json`` and the measurements in its raw folder)."""
    path = os.path.join(out, RUN)
    if not os.path.isfile(path):
        raise ValueError(f"{path} not found: measure the study first (scripts/repro_head_importance.py)")
    with open(path) as f:
        a = argparse.Namespace(**json.load(f))
    a.recorded_out, a.out, raw = a.out, out, os.path.join(ROOT, a.raw) if not os.path.isabs(a.raw) else a.raw
    tag = "quick_" if a.quick else ""

    def load_raw(name: str) -> dict:
        file = os.path.join(raw, f"{tag}{name}.pkl")
        if not os.path.isfile(file):
            raise ValueError(f"{file} not found: the measurements of {name} are missing")
        with open(file, "rb") as f:
            return pickle.load(f)

    runs = [load_raw(f"seed{s}") for s in range(a.first_seed, a.first_seed + a.seeds)]
    uniform = [load_raw(f"uniform{s}") for s in range(a.first_seed, a.first_seed + a.uniform_seeds)]
    spec = SPEC + (":quick" if a.quick else f":steps={a.steps},minutes={a.minutes},sentences={a.sentences}")
    return report(a, runs, uniform, load(spec))


# ------------------------------------------------------------------------------------------------- report
def decoded_text(out: str, runs: list, uniform: list, sentences: int) -> str:
    """Write the kept decodes of every run to ``<out>/decoded/`` (one hypothesis per line, the first
    ``sentences`` test sentences in corpus order); the report's sentence about them."""
    files = []
    for prefix, group in (("seed", runs), ("uniform_cross_seed", uniform)):
        for i, m in enumerate(group):
            for condition, hyps in (m.get("decoded") or {}).items():
                name = f"{prefix}{m.get('seed', i)}_{condition.replace(', ', '_').replace(' ', '_')}.txt"
                os.makedirs(os.path.join(out, "decoded"), exist_ok=True)
                write_hypotheses(os.path.join(out, "decoded", name), hyps)
                files.append(name)
    if not files:
        return ("Decoded sentences: not kept by these measurements (made before the script kept them); the "
                "replication run keeps them.")
    return (f"Decoded test sentences behind the BLEU numbers (greedy, the first {sentences} test sentences in corpus "
            f"order, one per line): {len(files)} files in [decoded/](decoded/), per seed the unmasked model and "
            "cross-attention permuted / uniform in all layers at decode time, and each uniform-baseline model.")


def stack(runs, key, g):
    return np.stack([r[key][g] for r in runs])  # [seeds, L, H]


def positional_fraction(m: dict, g: str) -> np.ndarray:
    """[L, H]: the fraction of queries whose largest weight sits on the previous or the next token (the larger)."""
    return _positional_fraction(m["behaviour"][g])


def is_positional(m: dict, g: str, l: int, h: int) -> bool:
    return g in SELF_GROUPS and positional_fraction(m, g)[l, h] >= POSITIONAL


def is_confident(m: dict, g: str, l: int, h: int) -> bool:
    conf = m["behaviour"][g]["confidence"]
    return conf[l, h] >= np.quantile(conf, 0.75)


def _when(runs: list) -> str:
    """' (2026-12-05 00:22 to 02:07 UTC)': when the runs were measured, where they recorded it."""
    times = sorted(m["measured_utc"] for m in runs if m.get("measured_utc"))
    return f", {times[0]} to {times[-1]} UTC" if times else " (times not recorded)"


def measured_by(runs: list) -> str:
    return ", ".join(sorted({m.get("commit", "not recorded") for m in runs}))


def budget(config) -> str:
    steps, minutes = config.train.num_steps, config.train.max_minutes
    return f"{steps} steps" + (f" or {minutes:g} minutes (start-up included), whichever first" if minutes > 0 else
                               " (no time limit)")


def report(a, runs: list, uniform: list, config) -> str:
    shapes, fractions = runs[0]["shapes"], runs[0]["fractions"]
    H = shapes["cross"][1]
    n = len(runs)
    seeds = [m.get("seed", i) for i, m in enumerate(runs)]  # measurements before 2026-12-02 kept no seed: 0..n-1
    r = Report(a.out, "Which heads matter? Michel, Voita and Vashishth et al. on the translation model, 8 heads "
                      "per layer")
    r.text(f"""
Measurements made with commit {measured_by(runs + uniform)}{_when(runs + uniform)}. Wall time:
training {sum(m["train_minutes"] for m in runs + uniform):.0f} min ({len(runs) + len(uniform)} runs), analyses
{sum(m["measure_minutes"] for m in runs):.0f} min, as measured when each run was made.

`python scripts/repro_head_importance.py --seeds {a.seeds}{f' --first_seed {a.first_seed}' if a.first_seed else ''} \
--uniform_seeds {a.uniform_seeds} --minutes {a.minutes} --steps {a.steps} --eval_batches {a.eval_batches} \
--sentences {a.sentences}{' --quick' if a.quick else ''}{f' --raw {a.raw}' if a.raw else ''}\
{f' --out {a.recorded_out}' if a.recorded_out != _rel(OUT) else ''}\
{f' --workdir {a.workdir}' if a.workdir else ''}`

**Protocol.** `configs/repro_head_importance.py`: the main job (Spanish → English Bible verses, d_model
{config.model.d_model}, {config.model.num_encoder_layers}+{config.model.num_decoder_layers} layers, pre-LN,
QK-LayerNorm) with {H} heads per layer (head width {config.model.d_model // H}); training stops at
{budget(config)}; seeds {', '.join(map(str, seeds))}.
Interventions are `models.Interventions` passed to the model and to `models.greedy_decode` (through
`Evaluator.bleu(..., interventions=)`), in the encoder and at every KV-cache decoding step:
- **BLEU**: sacreBLEU on the first **{a.sentences} test sentences**, greedy decoding (the same sentences for every
  measurement and for the engine's final test BLEU).
- **NLL**: teacher-forced validation NLL (nats per target token) on the first {a.eval_batches} validation
  batches (64 sentences each).
- **Head mask** ξ_h multiplies head h's output before the output projection; ξ_h = 0 removes the head.
  Importance I_h = mean over batches of |∂NLL/∂ξ_h| at ξ = 1, l2-normalised per layer (Michel et al.);
  pruning removes the heads with the lowest normalised importance first (globally, or within one group).
- **Confidence** (Voita et al.): mean over non-padding queries of the head's largest attention weight;
  **previous / next-token** behaviour: the mean weight on the token at relative position -1 / +1 and the
  fraction of queries whose largest weight sits there (a head is *positional* when that fraction is
  ≥ {POSITIONAL}, Voita et al.'s threshold); measured on the same validation batches, teacher forced.
- **Cross-attention overrides** (Vashishth et al.): `WeightOverride("cross", layer, "permute" | "uniform")`,
  each row's weights shuffled among the source tokens (a fresh permutation per decoding step) or replaced by
  1/(source length); BLEU at decode time, and under teacher forcing the total variation distance between the
  next-token distributions of the modified and the unmodified model, per target token.
- **Uniform baseline** (Wiegreffe & Pinter): the same config with `model.uniform_attention_groups=("cross",)`,
  trained from scratch for the same budget, {len(uniform)} seed(s).
""")
    r.section("What the papers report")
    r.text(PAPER)

    r.section("Trained models")
    r.table(["seed", "steps", "train minutes", f"test BLEU ({a.sentences} sentences)",
             "the engine's final test BLEU (same sentences)", "validation NLL", "seconds per BLEU decode",
             "analysis minutes"],
            [[s, m["steps"], m["train_minutes"], m["base_bleu"], m["engine_bleu"], m["base_nll"],
              m["seconds_per_decode"], m["measure_minutes"]] for s, m in zip(seeds, runs)], csv_name="models.csv")
    r.text(decoded_text(a.out, runs, uniform, a.sentences))

    # -------------------------------------------------------------------------------- single heads
    r.section("Masking one head at a time")
    rows, seed0_rows, csv_rows = [], [], []
    for g in GROUPS:
        bleu = stack(runs, "single_bleu", g) - np.array([m["base_bleu"] for m in runs])[:, None, None]
        nll = stack(runs, "single_nll", g) - np.array([m["base_nll"] for m in runs])[:, None, None]
        conf = np.stack([m["behaviour"][g]["confidence"] for m in runs])
        for layer in range(shapes[g][0]):
            # heads are interchangeable between seeds, layers are not: per-layer summaries over seeds
            rows.append([g, layer, mean_std(bleu[:, layer].mean(1)), mean_std(bleu[:, layer].min(1)),
                         mean_std(bleu[:, layer].max(1)), mean_std(nll[:, layer].mean(1)),
                         mean_std(stack(runs, "raw", g)[:, layer].mean(1)), mean_std(conf[:, layer].mean(1))])
            seed0_rows.append([g, layer] + [f"{x:+.2f}" for x in bleu[0, layer]])
            for h in range(H):
                for s, m in enumerate(runs):
                    b = m["behaviour"][g]
                    csv_rows.append([seeds[s], g, layer, h, float(bleu[s, layer, h]), float(nll[s, layer, h]),
                                     float(m["raw"][g][layer, h]), float(m["norm"][g][layer, h]),
                                     m["order"].index((g, layer, h)) / len(m["order"]),
                                     float(b["confidence"][layer, h])]
                                    + ([float(b[k][layer, h]) for k in ("prev", "next", "prev_arg", "next_arg")]
                                       if g in SELF_GROUPS else [None] * 4))
    r.text(f"BLEU change when one head alone is masked, summarised per layer (heads are interchangeable between "
           f"seeds, layers are not), mean ± std over {n} seed(s); the unmasked BLEU is "
           f"{mean_std([m['base_bleu'] for m in runs])}:")
    r.table(["group", "layer", "mean over the layer's heads", "largest drop", "largest gain", "mean NLL change",
             "mean raw importance", "mean confidence"], rows, csv_name="per_layer.csv")
    r.text(f"Seed {seeds[0]}, every head (BLEU change when masked alone):")
    r.text(markdown_table(["group", "layer"] + [f"h{h}" for h in range(H)], seed0_rows))
    write_csv(os.path.join(a.out, "per_head.csv"),
              ["seed", "group", "layer", "head", "bleu_change_masked_alone", "nll_change_masked_alone",
               "importance_raw", "importance_norm", "pruned_at_fraction", "confidence", "prev_token_weight",
               "next_token_weight", "prev_token_argmax", "next_token_argmax"], csv_rows)
    r.text("Per head and seed (BLEU and NLL change, raw and normalised importance, when pruning removes it, "
           "confidence and positional behaviour): [per_head.csv](per_head.csv).")

    all_bleu = np.array([np.concatenate([(m["single_bleu"][g] - m["base_bleu"]).ravel() for g in GROUPS])
                         for m in runs])  # [seeds, heads], in head_list order
    all_nll = np.array([np.concatenate([(m["single_nll"][g] - m["base_nll"]).ravel() for g in GROUPS]) for m in runs])
    worst = [(float(all_bleu[s].min()), head_list(shapes)[int(all_bleu[s].argmin())]) for s in range(n)]
    r.text("Over all {} heads, per seed: {}.".format(all_bleu.shape[1], "; ".join(
        f"seed {seeds[s]}: {int((all_bleu[s] <= -1).sum())} heads lose ≥ 1 BLEU, {int((all_bleu[s] > 0).sum())} gain, "
        f"largest drop {w:+.2f} ({g} layer {l} head {h}), largest NLL increase {all_nll[s].max():+.3f}"
        for s, (w, (g, l, h)) in enumerate(worst))))

    group_rows = []
    for g in GROUPS:
        half = fractions.index(0.5)
        b = [float((m["single_bleu"][g] - m["base_bleu"]).mean()) for m in runs]
        w = [float((m["single_bleu"][g] - m["base_bleu"]).min()) for m in runs]
        nl = [float((m["single_nll"][g] - m["base_nll"]).mean()) for m in runs]
        at_half_b = [m["group_bleu"][g][half] - m["base_bleu"] for m in runs]
        at_half_n = [m["group_nll"][g][half] - m["base_nll"] for m in runs]
        at_90_b = [m["group_bleu"][g][-1] - m["base_bleu"] for m in runs]
        group_rows.append([g, mean_std(b), mean_std(w), mean_std(nl), mean_std(at_half_b), mean_std(at_half_n),
                           mean_std(at_90_b)])
    r.section("Per group: which is most sensitive?")
    r.table(["group", "mean BLEU change, one head masked", "largest single-head BLEU drop",
             "mean NLL change, one head masked", "BLEU change, 50% of the group pruned",
             "NLL change, 50% of the group pruned", f"BLEU change, {fractions[-1]:.0%} of the group pruned"],
            group_rows, csv_name="groups.csv")

    # ------------------------------------------------------------------------------------- pruning
    r.section("Progressive pruning by normalised importance")
    curve_rows = []
    for i, f in enumerate(fractions):
        curve_rows.append([f, mean_std([m["curve_bleu"][i] for m in runs]), mean_std([m["curve_nll"][i] for m in runs])]
                          + [mean_std([m["group_bleu"][g][i] for m in runs]) for g in GROUPS]
                          + [mean_std([m["group_nll"][g][i] for m in runs]) for g in GROUPS])
    r.table(["fraction pruned", "all heads: BLEU", "all heads: NLL"] + [f"{g} only: BLEU" for g in GROUPS]
            + [f"{g} only: NLL" for g in GROUPS], curve_rows, csv_name="pruning.csv")
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for ax, key, gkey, label in ((axes[0], "curve_bleu", "group_bleu", f"test BLEU ({a.sentences} sentences)"),
                                 (axes[1], "curve_nll", "group_nll", "validation NLL")):
        for name, ys, style in [("all heads", [m[key] for m in runs], "k-o")] + [
                (f"{g} only", [m[gkey][g] for m in runs], "-o") for g in GROUPS]:
            ys = np.array(ys)
            ax.errorbar(fractions, ys.mean(0), yerr=ys.std(0) if n > 1 else None, fmt=style, ms=3, capsize=2,
                        label=name)
        ax.set_xlabel("fraction of heads pruned")
        ax.set_ylabel(label)
    axes[0].legend(fontsize=7)
    r.figure(fig, "pruning", f"BLEU and NLL vs fraction of heads pruned by normalised importance (mean ± std over "
                             f"{n} seed(s)); per group, only that group's heads are pruned.")

    # ------------------------------------------------------------------------------------- Voita
    r.section("Confidence, positional heads and importance (Voita et al.)")
    behaviour_rows = []
    for g in GROUPS:
        conf = [m["behaviour"][g]["confidence"] for m in runs]
        row = [g, mean_std([float(c.mean()) for c in conf]), mean_std([float(c.max()) for c in conf]),
               mean_std([spearman(c, m["raw"][g]) for c, m in zip(conf, runs)]),
               mean_std([spearman(c, m["norm"][g]) for c, m in zip(conf, runs)]),
               mean_std([spearman(c, m["single_bleu"][g]) for c, m in zip(conf, runs)])]
        if g in SELF_GROUPS:
            pos = [positional_fraction(m, g) for m in runs]
            row += [mean_std([float((p >= POSITIONAL).sum()) for p in pos]),
                    mean_std([spearman(p, m["norm"][g]) for p, m in zip(pos, runs)])]
        else:
            row += ["—", "—"]
        behaviour_rows.append(row)
    r.table(["group", "mean confidence", "most confident head", "Spearman(confidence, raw importance)",
             "Spearman(confidence, normalised importance)", "Spearman(confidence, BLEU with the head masked)",
             f"positional heads (max at ±1 in ≥ {POSITIONAL:.0%} of queries)",
             "Spearman(positional fraction, normalised importance)"], behaviour_rows, csv_name="voita.csv")
    r.text("Spearman over the heads of a group, per seed, then mean ± std. A positive correlation with importance "
           "(a negative one with the BLEU of the masked model) means confident heads matter more, as Voita et al. "
           "found for encoder heads.")
    kinds = {"positional (self-attention)": is_positional, "top-quarter confidence in its group": is_confident,
             "neither": lambda m, g, l, h: not (is_positional(m, g, l, h) or is_confident(m, g, l, h))}
    survival_rows = []
    for label, pick in kinds.items():
        counts, when = [], []
        for m in runs:
            chosen = [i / len(m["order"]) for i, (g, l, h) in enumerate(m["order"]) if pick(m, g, l, h)]
            counts.append(len(chosen))
            when.append(float(np.mean(chosen)) if chosen else float("nan"))
        survival_rows.append([label, mean_std(counts), mean_std(when)])
    r.table(["heads", "count per seed", "mean fraction of all heads pruned before it is removed"], survival_rows,
            csv_name="survival.csv")
    r.text("Pruning order is the global normalised-importance order of the pruning curves; a head removed last "
           "has a value near 1, the average head about 0.49.")

    fig, axes = plt.subplots(1, 3, figsize=(10, 3))
    for ax, g in zip(axes, GROUPS):
        for s, (m, marker) in enumerate(zip(runs, "os^vD")):
            for layer in range(shapes[g][0]):
                ax.scatter(m["behaviour"][g]["confidence"][layer], m["raw"][g][layer], s=12, marker=marker,
                           color=f"C{layer}", label=f"layer {layer}" if s == 0 else None)
        ax.set_yscale("log")
        ax.set_title(g, fontsize=9)
        ax.set_xlabel("confidence (mean max weight)")
    axes[0].set_ylabel("raw importance |dNLL/dxi|")
    axes[0].legend(fontsize=6)
    r.figure(fig, "confidence", "Head confidence vs raw importance, every head of every seed (colour: layer; "
                                "marker: seed).")

    # ------------------------------------------------------------------------------------- Vashishth
    r.section("Permuted and uniform cross-attention at decode time (Vashishth et al.)")
    names = list(runs[0]["vashishth"])
    vrows = [["unmodified", mean_std([m["base_bleu"] for m in runs]), "0", "0",
              mean_std([m["base_nll"] for m in runs])]]
    for name in names:
        v = [m["vashishth"][name] for m in runs]
        vrows.append([name, mean_std([x["bleu"] for x in v]), mean_std([x["tvd_mean"] for x in v]),
                      mean_std([x["tvd_median"] for x in v]), mean_std([x["nll"] for x in v])])
    r.table(["cross-attention", f"test BLEU ({a.sentences} sentences)", "TVD of next-token distribution: mean",
             "TVD: median", "validation NLL"], vrows, csv_name="vashishth.csv")

    # ------------------------------------------------------------------------------------- uniform
    r.section("Uniform cross-attention trained from scratch (Wiegreffe & Pinter's baseline)")
    if uniform:
        r.table(["model", "seeds", "steps", f"test BLEU ({a.sentences} sentences)", "validation NLL"],
                [["normal (learned cross-attention)", n, mean_std([m["steps"] for m in runs]),
                  mean_std([m["base_bleu"] for m in runs]), mean_std([m["base_nll"] for m in runs])],
                 ["cross-attention frozen to uniform", len(uniform), mean_std([u["steps"] for u in uniform]),
                  mean_std([u["base_bleu"] for u in uniform]), mean_std([u["base_nll"] for u in uniform])]],
                csv_name="uniform_baseline.csv")
    else:
        r.text("Not run (`--uniform_seeds 0`).")
    numbers, verdicts = judged(runs, uniform)
    r.section("Verdicts")
    r.text("Each claim compares the mean over seeds (per-seed values of the same trained model) with its threshold "
           "by a 95% t interval, Holm-adjusted within its family (`michel`, `voita`, `weights`); kinds as in "
           "`studies.claims` (`studies/seedwise.py`). The thresholds come from criteria written on 2026-12-02, after "
           "the first run's measurements (2026-12-01) and before the replication's"
           + (f" (these were made {', '.join(sorted({m['measured_utc'] for m in runs + uniform}))} UTC)"
              if all(m.get("measured_utc") for m in runs + uniform) else "")
           + "; the interval rule, the per-group contrasts and the within-layer Voita claim were written on 2026-12-05 "
           "after all these data (post-hoc). The registration column says which.")
    r.table(seedwise.VERDICT_COLUMNS, seedwise.verdict_rows(verdicts), csv_name="verdicts.csv")
    r.section("What the data say")
    r.text(verdict(numbers, verdicts, a.sentences))
    return r.write()


def _ms(values, digits: int = 2) -> str:
    """'mean ± std' with ``digits`` decimals (the value alone for one seed)."""
    v = np.asarray([x for x in values if np.isfinite(x)], np.float64)
    if v.size == 0:
        return "—"
    return f"{v.mean():.{digits}f}" + (f" ± {v.std(ddof=1):.{digits}f}" if v.size > 1 else "")


def _finite_mean(values) -> float:
    """Mean of the finite values (NaN when there are none)."""
    v = np.asarray([x for x in values if np.isfinite(x)], np.float64)
    return float(v.mean()) if v.size else float("nan")


def _late(m: dict) -> Optional[float]:
    """Mean pruning position (0 first, 1 last) of a run's positional heads minus the other heads' (None: none)."""
    at = {True: [], False: []}
    for i, (g, l, h) in enumerate(m["order"]):
        at[is_positional(m, g, l, h)].append(i / len(m["order"]))
    return float(np.mean(at[True]) - np.mean(at[False])) if at[True] and at[False] else None


def claim_numbers(runs: list, uniform: list) -> dict:
    """The measurements the verdicts and the "What the data say" paragraph are computed from (per-seed arrays
    unless noted)."""
    n, fractions = len(runs), runs[0]["fractions"]
    drops = {g: np.stack([m["single_bleu"][g] - m["base_bleu"] for m in runs]) for g in GROUPS}  # [seeds, L, H]
    flat = np.concatenate([drops[g].reshape(n, -1) for g in GROUPS], axis=1)  # [seeds, heads]
    half = fractions.index(0.5)
    base = np.array([m["base_bleu"] for m in runs])
    at = {g: np.array([m["group_bleu"][g] for m in runs]) for g in GROUPS}  # [seeds, fractions]
    surv = {k: [] for k in ("pos", "conf", "other")}  # pruning positions pooled over seeds
    for m in runs:
        for i, (g, l, h) in enumerate(m["order"]):
            k = "pos" if is_positional(m, g, l, h) else "conf" if is_confident(m, g, l, h) else "other"
            surv[k].append(i / len(m["order"]))
    cross = list(runs[0]["vashishth"])
    return {
        "n": n, "fractions": fractions, "heads": flat.shape[1], "base": base,
        "base_nll": np.array([m["base_nll"] for m in runs]),
        "hurt": np.array([(flat[s] <= -HURT_BLEU).sum() for s in range(n)]),  # heads losing >= HURT_BLEU
        "gain": np.array([(flat[s] > 0).sum() for s in range(n)]),
        "worst": np.array([flat[s].min() for s in range(n)]),
        "worst_group": [GROUPS[int(np.argmin([drops[g][s].min() for g in GROUPS]))] for s in range(n)],
        "curve": np.array([m["curve_bleu"] for m in runs]),  # [seeds, fractions]
        "group_curve": at,
        "loss_half": {g: base - at[g][:, half] for g in GROUPS},
        "loss_end": {g: base - at[g][:, -1] for g in GROUPS},
        "rho": {g: [spearman(m["behaviour"][g]["confidence"], m["norm"][g]) for m in runs] for g in GROUPS},
        "rho_raw": {g: [spearman(m["behaviour"][g]["confidence"], m["raw"][g]) for m in runs] for g in GROUPS},
        "rho_within": [within_layer_spearman(m["behaviour"]["encoder_self"]["confidence"], m["raw"]["encoder_self"])
                       for m in runs],  # [seeds][L]
        "late": [_late(m) for m in runs], "seeds": [m.get("seed", i) for i, m in enumerate(runs)],
        "rho_bleu": {g: [spearman(m["behaviour"][g]["confidence"], m["single_bleu"][g]) for m in runs]
                     for g in GROUPS},
        "positional": {g: [float((positional_fraction(m, g) >= POSITIONAL).sum()) for m in runs]
                       for g in SELF_GROUPS},
        "survival": surv,
        "cross_bleu": {k: np.array([m["vashishth"][k]["bleu"] for m in runs]) for k in cross},
        "cross_tvd": {k: np.array([m["vashishth"][k]["tvd_mean"] for m in runs]) for k in cross},
        "uniform_bleu": np.array([u["base_bleu"] for u in uniform]),
        "uniform_nll": np.array([u["base_nll"] for u in uniform]),
    }


# ------------------------------------------------------------------------------------------------- claims
OLD = "threshold from the 2026-12-02 criteria ({}); interval rule of 2026-12-05 (issue 45): post-hoc"
NEW = "written 2026-12-05 (issue 45) after these data: post-hoc"
MICHEL = "Michel et al. 2019"


def claims(fresh: bool, end_fraction: float) -> list[seedwise.SeedClaim]:
    """The claims; ``fresh``: the measurements were made after the 2026-12-02 criteria (the replication)."""
    old = OLD.format("pre-registered for these measurements" if fresh else "written after these measurements")
    c = seedwise.SeedClaim
    groups = [c(f"cross_vs_{g}_{tag}", f"cross-attention loses more BLEU than {g} when {tag} of the group is pruned",
                f"{MICHEL}, abstract: self-attention can be pruned, encoder-decoder attention depends more on "
                "multi-headedness", f"BLEU lost, cross minus {g}, same model", "michel", NEW, threshold=0.0,
                side=seedwise.ABOVE, digits=2)
              for tag in ("50%", f"{end_fraction:.0%}") for g in SELF_GROUPS]
    return [
        c("single", f"at most {MAX_HURT_SHARE:.0%} of the heads lose >= {HURT_BLEU:g} BLEU when masked alone",
          f"{MICHEL} (Section 3.2, Table 1): 8 of 96 encoder heads change BLEU significantly masked alone",
          f"share of heads losing >= {HURT_BLEU:g} BLEU", "michel", old, threshold=MAX_HURT_SHARE),
        c("pruning", f"{PRUNABLE:.0%} of all heads can be pruned within {WITHIN_BLEU:g} BLEU",
          f"{MICHEL} (Section 4.2, Figure 3): 20% of the WMT model's heads pruned without noticeable loss",
          f"largest pruned fraction within {WITHIN_BLEU:g} BLEU (grid of 10%: above 0.15 = the 20% point reached)",
          "michel", old, threshold=PRUNABLE - 0.05, side=seedwise.ABOVE, digits=2),
        *groups,
        c("confidence", f"confident encoder heads are the important ones within a layer (Spearman > {CONFIDENCE_RHO:g})",
          "Voita et al. 2019, abstract: the most important and confident encoder heads play consistent roles",
          "mean over encoder layers of Spearman(confidence, raw importance) among a layer's heads", "voita", NEW,
          threshold=CONFIDENCE_RHO, side=seedwise.ABOVE),
        c("positional", "positional self-attention heads exist (at least one per model)",
          "Voita et al. 2019: positional heads (max at ±1 in >= 90% of queries)", "positional heads per model",
          "voita", old, threshold=0.5, side=seedwise.ABOVE, digits=1),
        c("positional_late", "positional heads are pruned later than the other heads",
          "Voita et al. 2019, abstract: specialized heads are last to be pruned",
          "mean pruning position of positional heads minus the other heads' (0 first, 1 last)", "voita", old,
          threshold=0.0, side=seedwise.ABOVE),
        c("permuted", f"permuting cross-attention at decode time leaves below {WRECKED:.0%} of the BLEU",
          "Vashishth et al. 2019: in translation the output depends on the attention weights",
          "BLEU with cross-attention permuted in all layers / unmodified BLEU", "weights", old, threshold=WRECKED),
        c("uniform_decode", f"uniform cross-attention at decode time leaves below {WRECKED:.0%} of the BLEU",
          "Vashishth et al. 2019: in translation the output depends on the attention weights",
          "BLEU with cross-attention uniform in all layers / unmodified BLEU", "weights", old, threshold=WRECKED),
        c("uniform_trained", f"a model trained with uniform cross-attention is more than {UNIFORM_GAP:g} BLEU worse",
          "Wiegreffe & Pinter 2019 (their test, on translation): attention matters if uniform attention does worse",
          "BLEU, learned minus uniform cross-attention, same seed", "weights", old, threshold=UNIFORM_GAP,
          side=seedwise.ABOVE, digits=2),
    ]


def _share(bleu: np.ndarray, base: np.ndarray) -> list[Optional[float]]:
    """bleu / base per seed (None where the unmodified model scores 0 BLEU)."""
    return [float(b / a) if a > 0 else None for b, a in zip(bleu, base)]


def measurements(c: dict, runs: list, uniform: list) -> dict:
    """{claim id: (per-seed values, None)} from ``claim_numbers`` and the runs."""
    fractions, base = c["fractions"], c["base"]
    kept = [max(f for f, b in zip(fractions, row) if b >= row[0] - WITHIN_BLEU) for row in c["curve"]]
    out = {"single": (c["hurt"] / c["heads"], None), "pruning": (kept, None),
           "confidence": ([float(np.nanmean(r)) for r in c["rho_within"]], None),
           "positional": ([sum(c["positional"][g][s] for g in SELF_GROUPS) for s in range(c["n"])], None),
           "positional_late": (c["late"], None),
           "permuted": (_share(c["cross_bleu"]["permute, all layers"], base), None),
           "uniform_decode": (_share(c["cross_bleu"]["uniform, all layers"], base), None),
           "uniform_trained": ([m["base_bleu"] - u["base_bleu"] for m, u in zip(runs, uniform)], None)}
    for tag, loss in (("50%", c["loss_half"]), (f"{fractions[-1]:.0%}", c["loss_end"])):
        for g in SELF_GROUPS:
            out[f"cross_vs_{g}_{tag}"] = (loss["cross"] - loss[g], None)
    return out


def judged(runs: list, uniform: list) -> tuple[dict, list]:
    """(claim_numbers, verdicts) of the runs."""
    c = claim_numbers(runs, uniform)
    fresh = all(m.get("measured_utc") for m in runs + uniform)
    return c, seedwise.judge_all(claims(fresh, c["fractions"][-1]), measurements(c, runs, uniform))

def verdict(c: dict, verdicts: list, sentences: int) -> str:
    """Sentences computed from the measurements (``claim_numbers``), each against the paper it tests, ending with
    the verdict ``rows`` in short."""
    n, fractions, heads, base = c["n"], c["fractions"], c["heads"], c["base"]
    lines = [f"All numbers are mean ± std over {n} seed(s); BLEU on {sentences} test sentences (unmasked "
             f"{_ms(base)}), so differences below ~1 BLEU are within the noise of the subset and the seeds."]

    lines.append(
        f"- **Michel et al., one head at a time.** {_ms(c['hurt'], 1)} of {heads} heads lose 1 BLEU or more when "
        f"masked alone, {_ms(c['gain'], 1)} gain; the largest single-head drop is "
        f"{_ms(c['worst'])} BLEU (in {', '.join(c['worst_group'])}, seed by seed). Michel et al. found 8 of 96 heads "
        f"with a significant change, half of them improvements; here no single head is indispensable either, but "
        f"masked heads cost BLEU more often than they help.")

    curve = c["curve"]
    ok = [max([f for f, b in zip(fractions, row) if b >= row[0] - WITHIN_BLEU]) for row in curve]
    half = fractions.index(0.5)
    lines.append(
        f"- **Michel et al., progressive pruning.** The largest pruned fraction (of all heads, by normalised "
        f"importance) at which BLEU stays within 1 point of the unpruned model is {_ms(np.array(ok) * 100, 0)}%; "
        f"BLEU is {_ms(curve[:, 1])} at {fractions[1]:.0%}, {_ms(curve[:, half])} at 50% and "
        f"{_ms(curve[:, -1])} at {fractions[-1]:.0%}. Michel et al. pruned 20% of the WMT model's heads (40% of "
        f"BERT's) without noticeable loss: this 8-head, 3+3-layer model (head width 16, trained for minutes) "
        f"has less to spare than their 16-head Transformer-large.")

    loss_half, loss_end = c["loss_half"], c["loss_end"]
    by = {v.claim.id: v for v in verdicts}
    contrasts = [v for v in verdicts if v.claim.id.startswith("cross_vs_")]
    lines.append(
        "- **Which group is most sensitive.** BLEU lost with 50% / 90% of one group's heads pruned: "
        + "; ".join(f"{g} {_ms(loss_half[g])} / {_ms(loss_end[g])}" for g in GROUPS)
        + ". Cross-attention against each self-attention group, same model: "
        + "; ".join("vs {} at {}".format(*v.claim.id.removeprefix("cross_vs_").rsplit("_", 1))
                    + f" {v.interval.text(2) if v.interval else '—'} ({v.kind})" for v in contrasts)
        + (". Cross-attention is the most sensitive group at both fractions, as in Michel et al."
           if all(v.kind == "reproduced" for v in contrasts) else
           ". So cross-attention is not resolved as the most sensitive group: at least one contrast's interval "
           "holds 0 (Michel et al. found encoder-decoder attention the most dependent on multi-headedness)."))
    enc = c["group_curve"]["encoder_self"]
    enc80 = enc[:, fractions.index(0.8)] if 0.8 in fractions else enc[:, -1]
    lines.append(
        f"- **Voita et al., pruning the encoder.** With {0.8 if 0.8 in fractions else fractions[-1]:.0%} of the "
        f"encoder self-attention heads masked (and none retrained) BLEU is {_ms(enc80)} against {_ms(base)}; "
        "Voita et al. pruned 38 of 48 encoder heads (79%, with fine-tuning under their L0 gates) for 0.15 BLEU.")

    rho, rho_raw, rho_bleu, pos = c["rho"], c["rho_raw"], c["rho_bleu"], c["positional"]
    mean = {k: (float(np.mean(v)) if v else float("nan")) for k, v in c["survival"].items()}
    lines.append(
        "- **Voita et al., confidence and position.** Spearman correlation of confidence with the normalised / "
        "raw importance / the BLEU of the model with the head masked, per group (normalised importance compares "
        "heads within a layer, raw importance across layers too): "
        + "; ".join(f"{g} {_ms(rho[g])} / {_ms(rho_raw[g])} / {_ms(rho_bleu[g])}" for g in GROUPS)
        + " (Voita et al. would predict positive / positive / negative). Positional heads (maximum on the previous/next token in ≥90% of queries): "
        + "; ".join(f"{g} {_ms(pos[g], 1)}" for g in SELF_GROUPS)
        + f" per seed. Mean pruning position (0 = removed first, 1 = last): positional heads "
        f"{_ms([mean['pos']])}, other top-quarter-confidence heads {_ms([mean['conf']])}, the rest "
        f"{_ms([mean['other']])}. "
        "Voita et al. found the important encoder heads to be the confident and specialised (positional, "
        "syntactic, rare-word) ones, and those to be pruned last. Raw importance differs mostly between layers; "
        "among the heads of one encoder layer the Spearman correlation of confidence with raw importance is "
        + "; ".join(f"seed {seed}: " + ", ".join(f"{x:+.2f}" for x in r) for seed, r in zip(c["seeds"], c["rho_within"]))
        + f" (layers 0..{len(c['rho_within'][0]) - 1}): the within-layer claim is **{by['confidence'].kind}**.")

    v, t = c["cross_bleu"], c["cross_tvd"]
    lines.append(
        f"- **Vashishth et al., cross-attention replaced at decode time.** Permuted in all layers BLEU falls from "
        f"{_ms(base)} to {_ms(v['permute, all layers'])} (next-token TVD {_ms(t['permute, all layers'])}); "
        f"uniform in all layers to {_ms(v['uniform, all layers'])} (TVD {_ms(t['uniform, all layers'])})"
        + ("; one layer at a time: " + "; ".join(f"{k} {_ms(x)}" for k, x in v.items() if "layer " in k)
           if any("layer " in k for k in v) else "")
        + ". Vashishth et al. report that in translation, unlike single-sequence classification, changing the "
        "attention weights changes the output drastically; the verse classifier of `docs/results/explanation/` "
        "(2 classes, attention pooling) moved by a median TVD of 0.023 under permuted attention, the translation "
        "model's next-token distribution (8,000 tokens) by the mean TVD above.")

    ub = c["uniform_bleu"]
    if len(ub):
        lines.append(
            f"- **Wiegreffe & Pinter's uniform baseline.** Trained from scratch with cross-attention frozen to "
            f"uniform ({len(ub)} seed(s)), the model reaches {_ms(ub)} BLEU against {_ms(base)} with learned "
            f"cross-attention (validation NLL {_ms(c['uniform_nll'])} vs {_ms(c['base_nll'])}): "
            + ("learned attention is needed for translation." if ub.mean() < base.mean() - UNIFORM_GAP else
               "no clear gap, so attention weights would not be shown to matter by this test."))

    lines.append("- **In short:** " + "; ".join(f"{v.claim.text} ({v.kind})" for v in verdicts) + ".")
    return "\n".join(lines)


if __name__ == "__main__":
    from engine import cli

    cli.script(main)


REPORTS = (OUT, os.path.join(OUT, "replication"))  # the committed reports: seeds 0-2, and the replication 3-5


def generate(into: Optional[str] = None) -> list[str]:
    """The registry's entry: the committed reports regenerated from their records (under ``into`` when given)."""
    return [regenerate(out, (RUN, "decoded"), report_from_records, into) for out in REPORTS]


def summary() -> list:
    """The rows of docs/results/README.md, from the records and the claims."""
    from studies.specs import Summary

    rows = []
    for out, title in zip(REPORTS, ("Which heads matter? (Michel, Voita, Vashishth et al.; seeds 0-2)",
                                    "Which heads matter? replication (seeds 3-5)")):
        with open(os.path.join(out, RUN)) as f:
            a = json.load(f)
        raw = os.path.join(ROOT, a["raw"])
        runs, uniform = ([pickle.load(open(os.path.join(raw, f"{kind}{s}.pkl"), "rb"))
                          for s in range(a["first_seed"], a["first_seed"] + n)]
                         for kind, n in (("seed", a["seeds"]), ("uniform", a["uniform_seeds"])))
        rows.append(Summary(os.path.relpath(out, ROOT), title,
                            f"{a['seeds']} seeds + {a['uniform_seeds']} uniform; verdicts: "
                            f"{seedwise.counts(judged(runs, uniform)[1])}"))
    return rows
