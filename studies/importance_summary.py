"""Summaries of head-importance measurements (``analysis.importance.measure`` results, one per model or seed):
the tables and figures of a head-importance report and the per-seed numbers its claims are judged on; the
measurements' records (``recorded``, ``recorded_runs``).

Every function takes ``runs``, a list of ``measure`` results of models with the same head shapes; tables come as
``(headers, rows)`` with cells as ``studies.report.mean_std`` strings over the runs (or numbers), figures as
matplotlib figures.
"""
from __future__ import annotations

import os
from typing import Callable, Optional, Sequence

import numpy as np

from analysis.importance import (GROUPS, POSITIONAL, SELF_GROUPS, from_record, head_list, spearman,
                                 within_layer_spearman)
from analysis.importance import positional_fraction as _positional_fraction
from engine.evaluation import write_hypotheses
from studies.points import read_record, write_record
from studies.report import Report, markdown_table, mean_std, plt, write_csv

Table = tuple[list[str], list[list]]
PER_HEAD_COLUMNS = ["seed", "group", "layer", "head", "bleu_change_masked_alone", "nll_change_masked_alone",
                    "importance_raw", "importance_norm", "pruned_at_fraction", "confidence", "prev_token_weight",
                    "next_token_weight", "prev_token_argmax", "next_token_argmax"]


def seeds_of(runs: Sequence[dict]) -> list:
    """Each run's seed (its index where the run kept none)."""
    return [m.get("seed", i) for i, m in enumerate(runs)]


def positional_fraction(m: dict, g: str) -> np.ndarray:
    """[L, H]: the fraction of queries whose largest weight sits on the previous or the next token (the larger)."""
    return _positional_fraction(m["behaviour"][g])


def is_positional(m: dict, g: str, l: int, h: int) -> bool:
    return g in SELF_GROUPS and positional_fraction(m, g)[l, h] >= POSITIONAL


def is_confident(m: dict, g: str, l: int, h: int) -> bool:
    conf = m["behaviour"][g]["confidence"]
    return conf[l, h] >= np.quantile(conf, 0.75)


def late(m: dict) -> Optional[float]:
    """Mean pruning position (0 first, 1 last) of a run's positional heads minus the other heads' (None: none)."""
    at = {True: [], False: []}
    for i, (g, l, h) in enumerate(m["order"]):
        at[is_positional(m, g, l, h)].append(i / len(m["order"]))
    return float(np.mean(at[True]) - np.mean(at[False])) if at[True] and at[False] else None


def _stack(runs, key, g):
    return np.stack([r[key][g] for r in runs])  # [seeds, L, H]


def single_head_tables(runs: Sequence[dict]) -> tuple[Table, Table, list[list]]:
    """Masking one head at a time: the per-layer table over seeds, the first seed's every head (BLEU change) and
    the rows of per_head.csv (``PER_HEAD_COLUMNS``)."""
    shapes, seeds = runs[0]["shapes"], seeds_of(runs)
    H = shapes["cross"][1]
    rows, seed0_rows, csv_rows = [], [], []
    for g in GROUPS:
        bleu = _stack(runs, "single_bleu", g) - np.array([m["base_bleu"] for m in runs])[:, None, None]
        nll = _stack(runs, "single_nll", g) - np.array([m["base_nll"] for m in runs])[:, None, None]
        conf = np.stack([m["behaviour"][g]["confidence"] for m in runs])
        for layer in range(shapes[g][0]):
            # heads are interchangeable between seeds, layers are not: per-layer summaries over seeds
            rows.append([g, layer, mean_std(bleu[:, layer].mean(1)), mean_std(bleu[:, layer].min(1)),
                         mean_std(bleu[:, layer].max(1)), mean_std(nll[:, layer].mean(1)),
                         mean_std(_stack(runs, "raw", g)[:, layer].mean(1)), mean_std(conf[:, layer].mean(1))])
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
    per_layer = (["group", "layer", "mean over the layer's heads", "largest drop", "largest gain", "mean NLL change",
                  "mean raw importance", "mean confidence"], rows)
    return per_layer, (["group", "layer"] + [f"h{h}" for h in range(H)], seed0_rows), csv_rows


def single_head_text(runs: Sequence[dict]) -> str:
    """Per seed over all heads: heads losing >= 1 BLEU masked alone, heads gaining, the largest drop."""
    seeds = seeds_of(runs)
    all_bleu = np.array([np.concatenate([(m["single_bleu"][g] - m["base_bleu"]).ravel() for g in GROUPS])
                         for m in runs])  # [seeds, heads], in head_list order
    all_nll = np.array([np.concatenate([(m["single_nll"][g] - m["base_nll"]).ravel() for g in GROUPS]) for m in runs])
    worst = [(float(all_bleu[s].min()), head_list(runs[0]["shapes"])[int(all_bleu[s].argmin())])
             for s in range(len(runs))]
    return "Over all {} heads, per seed: {}.".format(all_bleu.shape[1], "; ".join(
        f"seed {seeds[s]}: {int((all_bleu[s] <= -1).sum())} heads lose ≥ 1 BLEU, {int((all_bleu[s] > 0).sum())} gain, "
        f"largest drop {w:+.2f} ({g} layer {l} head {h}), largest NLL increase {all_nll[s].max():+.3f}"
        for s, (w, (g, l, h)) in enumerate(worst)))


def group_table(runs: Sequence[dict]) -> Table:
    """Per group: single-head BLEU/NLL changes and the changes with 50% and the largest fraction pruned."""
    fractions = runs[0]["fractions"]
    half = fractions.index(0.5)
    rows = []
    for g in GROUPS:
        b = [float((m["single_bleu"][g] - m["base_bleu"]).mean()) for m in runs]
        w = [float((m["single_bleu"][g] - m["base_bleu"]).min()) for m in runs]
        nl = [float((m["single_nll"][g] - m["base_nll"]).mean()) for m in runs]
        at_half_b = [m["group_bleu"][g][half] - m["base_bleu"] for m in runs]
        at_half_n = [m["group_nll"][g][half] - m["base_nll"] for m in runs]
        at_90_b = [m["group_bleu"][g][-1] - m["base_bleu"] for m in runs]
        rows.append([g, mean_std(b), mean_std(w), mean_std(nl), mean_std(at_half_b), mean_std(at_half_n),
                     mean_std(at_90_b)])
    return (["group", "mean BLEU change, one head masked", "largest single-head BLEU drop",
             "mean NLL change, one head masked", "BLEU change, 50% of the group pruned",
             "NLL change, 50% of the group pruned", f"BLEU change, {fractions[-1]:.0%} of the group pruned"], rows)


def pruning_table(runs: Sequence[dict]) -> Table:
    """BLEU and NLL at each pruned fraction: all heads, and each group alone."""
    rows = []
    for i, f in enumerate(runs[0]["fractions"]):
        rows.append([f, mean_std([m["curve_bleu"][i] for m in runs]), mean_std([m["curve_nll"][i] for m in runs])]
                    + [mean_std([m["group_bleu"][g][i] for m in runs]) for g in GROUPS]
                    + [mean_std([m["group_nll"][g][i] for m in runs]) for g in GROUPS])
    return (["fraction pruned", "all heads: BLEU", "all heads: NLL"] + [f"{g} only: BLEU" for g in GROUPS]
            + [f"{g} only: NLL" for g in GROUPS], rows)


def pruning_figure(runs: Sequence[dict], bleu_label: str) -> "plt.Figure":
    """BLEU (``bleu_label``) and NLL against the fraction pruned, mean ± std over the runs."""
    fractions, n = runs[0]["fractions"], len(runs)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for ax, key, gkey, label in ((axes[0], "curve_bleu", "group_bleu", bleu_label),
                                 (axes[1], "curve_nll", "group_nll", "validation NLL")):
        for name, ys, style in [("all heads", [m[key] for m in runs], "k-o")] + [
                (f"{g} only", [m[gkey][g] for m in runs], "-o") for g in GROUPS]:
            ys = np.array(ys)
            ax.errorbar(fractions, ys.mean(0), yerr=ys.std(0) if n > 1 else None, fmt=style, ms=3, capsize=2,
                        label=name)
        ax.set_xlabel("fraction of heads pruned")
        ax.set_ylabel(label)
    axes[0].legend(fontsize=7)
    return fig


def voita_table(runs: Sequence[dict]) -> Table:
    """Per group: confidence, its Spearman correlations with importance and masked BLEU, positional heads."""
    rows = []
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
        rows.append(row)
    return (["group", "mean confidence", "most confident head", "Spearman(confidence, raw importance)",
             "Spearman(confidence, normalised importance)", "Spearman(confidence, BLEU with the head masked)",
             f"positional heads (max at ±1 in ≥ {POSITIONAL:.0%} of queries)",
             "Spearman(positional fraction, normalised importance)"], rows)


def survival_table(runs: Sequence[dict]) -> Table:
    """When pruning removes positional, confident and the other heads (0 first, 1 last)."""
    kinds = {"positional (self-attention)": is_positional, "top-quarter confidence in its group": is_confident,
             "neither": lambda m, g, l, h: not (is_positional(m, g, l, h) or is_confident(m, g, l, h))}
    rows = []
    for label, pick in kinds.items():
        counts, when = [], []
        for m in runs:
            chosen = [i / len(m["order"]) for i, (g, l, h) in enumerate(m["order"]) if pick(m, g, l, h)]
            counts.append(len(chosen))
            when.append(float(np.mean(chosen)) if chosen else float("nan"))
        rows.append([label, mean_std(counts), mean_std(when)])
    return ["heads", "count per seed", "mean fraction of all heads pruned before it is removed"], rows


def confidence_figure(runs: Sequence[dict]) -> "plt.Figure":
    """Head confidence against raw importance, every head of every run (colour: layer; marker: run)."""
    fig, axes = plt.subplots(1, 3, figsize=(10, 3))
    for ax, g in zip(axes, GROUPS):
        for s, (m, marker) in enumerate(zip(runs, "os^vD")):
            for layer in range(runs[0]["shapes"][g][0]):
                ax.scatter(m["behaviour"][g]["confidence"][layer], m["raw"][g][layer], s=12, marker=marker,
                           color=f"C{layer}", label=f"layer {layer}" if s == 0 else None)
        ax.set_yscale("log")
        ax.set_title(g, fontsize=9)
        ax.set_xlabel("confidence (mean max weight)")
    axes[0].set_ylabel("raw importance |dNLL/dxi|")
    axes[0].legend(fontsize=6)
    return fig


def vashishth_table(runs: Sequence[dict], bleu_label: str) -> Table:
    """BLEU, next-token TVD and NLL with cross-attention permuted / uniform at decode time."""
    rows = [["unmodified", mean_std([m["base_bleu"] for m in runs]), "0", "0", mean_std([m["base_nll"] for m in runs])]]
    for name in runs[0]["vashishth"]:
        v = [m["vashishth"][name] for m in runs]
        rows.append([name, mean_std([x["bleu"] for x in v]), mean_std([x["tvd_mean"] for x in v]),
                     mean_std([x["tvd_median"] for x in v]), mean_std([x["nll"] for x in v])])
    return (["cross-attention", bleu_label, "TVD of next-token distribution: mean", "TVD: median",
             "validation NLL"], rows)


def claim_numbers(runs: Sequence[dict], uniform: Sequence[dict], hurt_bleu: float, within_bleu: float) -> dict:
    """The per-seed numbers claims and prose read (arrays over seeds unless noted); ``hurt_bleu``: the BLEU
    drop at which a head masked alone counts as hurting, ``within_bleu``: the BLEU loss pruning may cost."""
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
        "hurt": np.array([(flat[s] <= -hurt_bleu).sum() for s in range(n)]),
        "gain": np.array([(flat[s] > 0).sum() for s in range(n)]),
        "worst": np.array([flat[s].min() for s in range(n)]),
        "worst_group": [GROUPS[int(np.argmin([drops[g][s].min() for g in GROUPS]))] for s in range(n)],
        "curve": np.array([m["curve_bleu"] for m in runs]),  # [seeds, fractions]
        "kept": [max(f for f, b in zip(fractions, m["curve_bleu"]) if b >= m["curve_bleu"][0] - within_bleu)
                 for m in runs],  # the largest fraction pruned within within_bleu of the unpruned BLEU
        "group_curve": at,
        "loss_half": {g: base - at[g][:, half] for g in GROUPS},
        "loss_end": {g: base - at[g][:, -1] for g in GROUPS},
        "rho": {g: [spearman(m["behaviour"][g]["confidence"], m["norm"][g]) for m in runs] for g in GROUPS},
        "rho_raw": {g: [spearman(m["behaviour"][g]["confidence"], m["raw"][g]) for m in runs] for g in GROUPS},
        "rho_within": [within_layer_spearman(m["behaviour"]["encoder_self"]["confidence"], m["raw"]["encoder_self"])
                       for m in runs],  # [seeds][L]
        "late": [late(m) for m in runs], "seeds": seeds_of(runs),
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


def write_tables(r: Report, runs: Sequence[dict], uniform: Sequence[dict], sentences: int, trained: bool = True
                 ) -> None:
    """Add the measurement sections of a head-importance report to ``r``: the models, single heads, groups,
    pruning, Voita's and Vashishth's measures and the uniform baseline (``trained``: models attnlab trained)."""
    n, bleu_label = len(runs), f"test BLEU ({sentences} sentences)"
    r.section("Trained models" if trained else "The model")
    r.table(["seed", "steps", "train minutes", bleu_label, "the engine's final test BLEU (same sentences)",
             "validation NLL", "seconds per BLEU decode", "analysis minutes"],
            [[s, m.get("steps"), m.get("train_minutes"), m["base_bleu"], m.get("engine_bleu"), m["base_nll"],
              m["seconds_per_decode"], m["measure_minutes"]] for s, m in zip(seeds_of(runs), runs)],
            csv_name="models.csv")
    r.text(decoded_text(os.path.join(r.out_dir, "decoded"), sentences))
    r.section("Masking one head at a time")
    (per_layer, seed0, per_head) = single_head_tables(runs)
    r.text(f"BLEU change when one head alone is masked, summarised per layer (heads are interchangeable between "
           f"seeds, layers are not), mean ± std over {n} seed(s); the unmasked BLEU is "
           f"{mean_std([m['base_bleu'] for m in runs])}:")
    r.table(*per_layer, csv_name="per_layer.csv")
    r.text(f"Seed {seeds_of(runs)[0]}, every head (BLEU change when masked alone):")
    r.text(markdown_table(*seed0))
    write_csv(os.path.join(r.out_dir, "per_head.csv"), PER_HEAD_COLUMNS, per_head)
    r.text("Per head and seed (BLEU and NLL change, raw and normalised importance, when pruning removes it, "
           "confidence and positional behaviour): [per_head.csv](per_head.csv).")
    r.text(single_head_text(runs))
    r.section("Per group: which is most sensitive?")
    r.table(*group_table(runs), csv_name="groups.csv")
    r.section("Progressive pruning by normalised importance")
    r.table(*pruning_table(runs), csv_name="pruning.csv")
    r.figure(pruning_figure(runs, bleu_label), "pruning", f"BLEU and NLL vs fraction of heads pruned by "
             f"normalised importance (mean ± std over {n} seed(s)); per group, only that group's heads are pruned.")
    r.section("Confidence, positional heads and importance (Voita et al.)")
    r.table(*voita_table(runs), csv_name="voita.csv")
    r.text("Spearman over the heads of a group, per seed, then mean ± std. A positive correlation with importance "
           "(a negative one with the BLEU of the masked model) means confident heads matter more, as Voita et al. "
           "found for encoder heads.")
    r.table(*survival_table(runs), csv_name="survival.csv")
    r.text("Pruning order is the global normalised-importance order of the pruning curves; a head removed last "
           "has a value near 1, the average head about 0.49.")
    r.figure(confidence_figure(runs), "confidence", "Head confidence vs raw importance, every head of every "
             "seed (colour: layer; marker: seed).")
    r.section("Permuted and uniform cross-attention at decode time (Vashishth et al.)")
    r.table(*vashishth_table(runs, bleu_label), csv_name="vashishth.csv")
    r.section("Uniform cross-attention trained from scratch (Wiegreffe & Pinter's baseline)")
    if uniform:
        r.table(["model", "seeds", "steps", bleu_label, "validation NLL"],
                [["normal (learned cross-attention)", n, mean_std([m["steps"] for m in runs]),
                  mean_std([m["base_bleu"] for m in runs]), mean_std([m["base_nll"] for m in runs])],
                 ["cross-attention frozen to uniform", len(uniform), mean_std([u["steps"] for u in uniform]),
                  mean_std([u["base_bleu"] for u in uniform]), mean_std([u["base_nll"] for u in uniform])]],
                csv_name="uniform_baseline.csv")
    else:
        r.text("Not run (`--uniform_seeds 0`)." if trained else "Not run: it trains the model from scratch.")


def decoded_text(folder: str, sentences: int) -> str:
    """The report's sentence about the decodes kept in ``folder``."""
    files = os.listdir(folder) if os.path.isdir(folder) else []
    if not files:
        return ("Decoded sentences: not kept by these measurements (made before the script kept them); the "
                "replication run keeps them.")
    return (f"Decoded test sentences behind the BLEU numbers (greedy, the first {sentences} test sentences in corpus "
            f"order, one per line): {len(files)} files in [decoded/](decoded/), per seed the unmasked model and "
            "cross-attention permuted / uniform in all layers at decode time, and each uniform-baseline model.")


def _ms(values, digits: int = 2) -> str:
    """'mean ± std' with ``digits`` decimals (the value alone for one seed)."""
    v = np.asarray([x for x in values if np.isfinite(x)], np.float64)
    if v.size == 0:
        return "—"
    return f"{v.mean():.{digits}f}" + (f" ± {v.std(ddof=1):.{digits}f}" if v.size > 1 else "")


def reading(c: dict, verdicts: Sequence, sentences: int, uniform_gap: float) -> str:
    """The head-importance study's "What the data say": sentences computed from ``claim_numbers`` ``c``, each
    against the paper it tests, ending with the ``verdicts`` (``studies.seedwise.SeedVerdict``) in short;
    ``uniform_gap``: the uniform baseline's tolerance."""
    n, fractions, heads, base = c["n"], c["fractions"], c["heads"], c["base"]
    lines = [f"All numbers are mean ± std over {n} seed(s); BLEU on {sentences} test sentences (unmasked "
             f"{_ms(base)}), so differences below ~1 BLEU are within the noise of the subset and the seeds."]

    lines.append(
        f"- **Michel et al., one head at a time.** {_ms(c['hurt'], 1)} of {heads} heads lose 1 BLEU or more when "
        f"masked alone, {_ms(c['gain'], 1)} gain; the largest single-head drop is "
        f"{_ms(c['worst'])} BLEU (in {', '.join(c['worst_group'])}, seed by seed). Michel et al. found 8 of 96 heads "
        f"with a significant change, half of them improvements; here no single head is indispensable either, but "
        f"masked heads cost BLEU more often than they help.")

    curve, kept = c["curve"], np.array(c["kept"])
    half = fractions.index(0.5)
    lines.append(
        f"- **Michel et al., progressive pruning.** The largest pruned fraction (of all heads, by normalised "
        f"importance) at which BLEU stays within 1 point of the unpruned model is {_ms(kept * 100, 0)}%; "
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
            + ("learned attention is needed for translation." if ub.mean() < base.mean() - uniform_gap else
               "no clear gap, so attention weights would not be shown to matter by this test."))

    lines.append("- **In short:** " + "; ".join(f"{v.claim.text} ({v.kind})" for v in verdicts) + ".")
    return "\n".join(lines)


def recorded(path: str, decoded: str, make: Callable[[], tuple[dict, Callable[[dict], dict]]]) -> None:
    """Write record ``path`` unless it exists: ``make()`` gives the measurements and a function from them to the
    record (``record``); the decodes they kept (``decoded``) go to ``<decoded>_<condition>.txt``, one per line."""
    if os.path.exists(path):
        return
    m, as_record = make()
    os.makedirs(os.path.dirname(decoded) or ".", exist_ok=True)
    for condition, hyps in m.pop("decoded", {}).items():
        write_hypotheses(f"{decoded}_{condition.replace(', ', '_').replace(' ', '_')}.txt", hyps)
    write_record(path, as_record(m))


def recorded_runs(points: str, names: Sequence[str]) -> list[dict]:
    """The measurements (``from_record``) of the records ``<points>/<name>.json`` of ``names``, in order
    (ValueError naming any missing)."""
    missing = [x for x in names if not os.path.isfile(os.path.join(points, f"{x}.json"))]
    if missing:
        raise ValueError(f"{points}: no record of {', '.join(missing)}; measure it first")
    return [from_record(read_record(os.path.join(points, f"{x}.json"))) for x in names]
