"""Attention logit growth, learning-rate sensitivity and width (Wortsman et al. 2023, "Small-scale proxies for
large-scale Transformer training instabilities").

Small Transformers show the instabilities of large ones at high learning rates: attention logits grow without bound
and the loss degrades; the learning rate where training degrades falls as the model grows; QK-LayerNorm removes the
logit growth and lowers the learning-rate sensitivity. The small decoder of ``configs/repro_logit_growth.py`` on
multi-query associative recall over a learning-rate grid at two widths, QK-LayerNorm off and on, three seeds; every
point through ``train.py`` with a committed record in ``points/``.

A *sweep* is one (width, QK-LayerNorm, seed) over the grid. Its *best* run has the lowest final held-out loss (+inf
when the loss turned non-finite); it *learned* when that run's accuracy is >= LEARNED; its *degradation LR* is the
smallest grid LR above the best whose final loss is more than DEGRADE_NATS above the best (none: above the grid);
its *LR sensitivity* is Wortsman et al.'s mean over the grid of min(final loss, log V) minus the minimum. The
criteria were committed with ``scripts/repro_logit_growth.py`` (aaf1938, 2026-12-01 20:48 UTC) before the first point
trained; Holm's correction and the margins were added on 2026-12-05, after the data.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

from analysis import degradation_lr, lr_sensitivity
from studies.claims import CONTRADICTED, REPRODUCED, UNRESOLVED, Claim, Conditions, Criterion, Registration
from studies.derived import DerivedStudy
from studies.records import Record
from studies.study import POST_HOC_MARGINS, Arm, Plot, Section

ARM = Arm("", "configs/repro_logit_growth.py", "seeds=3")
LEARNED = 0.9  # held-out accuracy at which a sweep's best run has learned MQAR
DEGRADE_NATS = 0.5  # final loss this far above the sweep's best = degraded
MIN_SEEDS = 3
WIDTHS, ALL_LRS = (64, 128), (1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1)  # configs/repro_logit_growth.py's grid
TOP = ALL_LRS[-2:]  # the two largest learning rates
LOG_V = math.log(256)  # chance: uniform over the vocabulary
SCRIPT = "scripts/repro_logit_growth.py"
TREND = Registration("aaf1938", SCRIPT, "Width trend (Wortsman et al.: the learning rate at which training degrades")
GROWTH = Registration("aaf1938", SCRIPT, "the log10 of the largest attention logit")
SENSITIVITY = Registration("aaf1938", SCRIPT, "QK-LayerNorm lowers the LR sensitivity (Wortsman et al.'s metric")
COND = Conditions(lr="the grid 1e-3 to 3e-1 (the claim spans it; no rate tuned)",
                  differences=("2-layer, 2-head pre-LN decoders of d_model 64 and 128 on MQAR (the paper: GPT-2-style "
                               "language models of 10M to 1B parameters on C4)",
                               "no gradient clipping, weight decay or z-loss (the paper: clipping 1, weight decay "
                               "1e-4, z-loss 1e-4), so instability sets in at lower rates"))


def _key(rec: Record) -> tuple:
    return rec.override("model.d_model"), bool(rec.override("model.qk_layernorm")), rec.seed


def final_loss(rec: Record) -> float:
    """Held-out loss at the end; +inf when the run's loss became non-finite or none was recorded."""
    loss = rec.validation.get("loss")
    return math.inf if rec.stability.non_finite_step is not None or loss is None else float(loss)


def sweep(rec: Record, groups) -> Optional[dict]:
    """The measures of ``rec``'s sweep (its complete grid), None while a point of it has no record."""
    runs = {r.override("train.learning_rate"): r for m in groups.values() for _, r in m if _key(r) == _key(rec)}
    lrs = sorted(runs)
    if set(lrs) != {r.override("train.learning_rate") for m in groups.values() for _, r in m}:
        return None
    losses = [final_loss(runs[lr]) for lr in lrs]
    best = min(range(len(lrs)), key=lambda i: losses[i])
    learned = (runs[lrs[best]].valid_accuracy or 0.0) >= LEARNED
    return {"first": lrs[0], "best_lr": lrs[best], "learned": float(learned),
            "degrade_lr": degradation_lr(lrs, losses, DEGRADE_NATS), "lr_sensitivity": lr_sensitivity(losses, LOG_V)}


def derive(rec: Record, groups) -> dict:
    """Per run: the capped final loss and, at the two largest rates, log10 of the largest attention logit; on the
    first run of a complete sweep (one a sweep): its best and degradation LR (None: none in the grid), whether it
    learned, its LR sensitivity (``lr_sensitivity`` for learned sweeps only, the claims' metric)."""
    lr, logit = rec.override("train.learning_rate"), rec.stability.max_logit
    out = {"final_loss": min(final_loss(rec), LOG_V),
           "log10_logit": math.log10(logit) if lr in TOP and logit and logit > 0 else None,
           **dict.fromkeys(("best_lr", "learned", "degrade_lr", "lr_sensitivity", "sweep_sensitivity"))}
    s = sweep(rec, groups)
    if s is not None and s.pop("first") == lr:
        out.update(s, sweep_sensitivity=s["lr_sensitivity"],
                   lr_sensitivity=s["lr_sensitivity"] if s["learned"] else None)
    return out


def setting(arm: str, rec: Record) -> str:
    w, qk, _ = _key(rec)
    return f"d_model {w}, QK-LN {'on' if qk else 'off'}, lr {rec.override('train.learning_rate'):g}"


def _groups(w: int, qk: str, lrs: Sequence[float]) -> tuple[str, ...]:
    return tuple(f"d_model {w}, QK-LN {qk}, lr {lr:g}" for lr in lrs)


CLAIMS = tuple(
    Claim(f"logit d{w}", f"d_model {w}: at lr 0.1 and 0.3 the largest attention logit is higher without QK-LayerNorm "
          "(log10, off - on)", _groups(w, "off", TOP), _groups(w, "on", TOP), "logit growth", COND, sign=1,
          margin=0.1, metric="log10_logit", registered=GROWTH) for w in WIDTHS) + tuple(
    Claim(f"sensitivity d{w}", f"d_model {w}: QK-LayerNorm lowers the LR sensitivity (nats, off - on; learned "
          "sweeps)", _groups(w, "off", ALL_LRS), _groups(w, "on", ALL_LRS), "LR sensitivity", COND, sign=1,
          margin=0.05, metric="lr_sensitivity", registered=SENSITIVITY) for w in WIDTHS)


def _sweeps(groups, qk: bool) -> dict[tuple, Record]:
    """(width, QK-LayerNorm, seed) -> the first record of each learned sweep, from label -> records."""
    return {_key(r): r for rs in groups.values() for r in rs if r.metric("learned") and _key(r)[1] == qk}


def width_trend(groups) -> tuple[str, str, str]:
    """Without QK-LayerNorm the degradation LR of the wider model is below the narrower one's in every seed where
    both sweeps learned (>= MIN_SEEDS): reproduced; above in some seed and below in none: contradicted."""
    learned = _sweeps(groups, False)
    widths = sorted({w for w, _, _ in learned})
    if len(widths) < 2:
        return "one width", UNRESOLVED, "needs two widths"
    small, large = ({s: r.metric("degrade_lr") or math.inf for (w, _, s), r in learned.items() if w == x}
                    for x in (widths[0], widths[-1]))
    seeds = sorted(set(small) & set(large))
    pairs = [(small[s], large[s]) for s in seeds]
    measured = "; ".join(f"seed {s}: {a:g} -> {b:g}" for s, (a, b) in zip(seeds, pairs)) or "no seed"
    below, above = sum(b < a for a, b in pairs), sum(b > a for a, b in pairs)
    reason = f"lower at d_model {widths[-1]} in {below}, higher in {above} of {len(pairs)} seeds (inf: no degradation)"
    if len(pairs) < MIN_SEEDS:
        return measured, UNRESOLVED, f"{len(pairs)} seeds where both widths learned; {MIN_SEEDS} needed"
    return measured, REPRODUCED if below == len(pairs) else CONTRADICTED if above and not below else UNRESOLVED, reason


def sweeps_table(groups) -> Optional[Section]:
    rows = sorted([[*_key(r), r.metric("best_lr"), bool(r.metric("learned")), r.metric("degrade_lr") or math.inf,
                    r.metric("sweep_sensitivity")] for m in groups.values() for _, r in m
                   if r.metric("learned") is not None])
    return Section("Per sweep: best and degradation learning rate",
                   f"A sweep is one (d_model, QK-LayerNorm, seed) over the grid; learned: its best run has held-out "
                   f"accuracy >= {LEARNED:g}; degradation LR: the smallest grid LR above the best whose final loss "
                   f"is more than {DEGRADE_NATS:g} nats above the best, or non-finite (inf: none in the grid); LR "
                   f"sensitivity (learned sweeps): mean of min(final loss, log V = {LOG_V:.2f}) minus the minimum.",
                   ["d_model", "QK-LayerNorm", "seed", "best lr", "learned", "degradation lr", "LR sensitivity"],
                   rows, "sweeps.csv") if rows else None


STUDY = DerivedStudy(
    name="logit_growth", title="Attention logit growth, learning-rate sensitivity and width (Wortsman et al. 2023 "
    "proxies)", out="docs/results/logit_growth",
    protocol=("Protocol: a 2-layer pre-LN decoder (2 heads, d_k = d_model / 2, d_ff = 4 d_model; d_model 64 and "
              "128) on multi-query associative recall (4 pairs, sequence 16, vocabulary 256, batch 64), AdamW (0.9, "
              "0.95), 10% warmup then cosine decay, 1,500 steps, no weight decay or clipping "
              "(`configs/repro_logit_growth.py`); peak learning rates 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3; QK-LayerNorm "
              "off/on. A non-finite loss ends a run (final loss +inf, capped at log V = 5.55 in the tables). Final "
              "loss: held-out loss on the answers at the end; guessing among the 4 values in context gives log 4 = "
              "1.39. Max attention logit: the largest scaled logit of any layer and head at the logged steps. "
              "Wortsman et al. report directions and curves for much larger models: the claims take their "
              "directions without a value."),
    arms=(ARM,), setting=setting, derive=derive, claims=CLAIMS,
    metrics=("final_loss", "accuracy", "logit", "log10_logit"),
    criteria=(Criterion("width trend", "without QK-LayerNorm the LR where training degrades falls as width grows",
                        width_trend, COND, TREND),),
    sections=(sweeps_table,),
    plots=(Plot("loss_vs_lr", "final_loss", "train.learning_rate", "model.qk_layernorm", "model.d_model"),
           Plot("logit_vs_lr", "logit", "train.learning_rate", "model.qk_layernorm", "model.d_model")),
    margins_note=POST_HOC_MARGINS + " So was Holm's correction within each family (over the widths), 2026-12-05.",
)
STUDIES = (STUDY,)

