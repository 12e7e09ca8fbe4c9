"""The attention doctor (``eval.py --diagnose``, ``engine/doctor.py``) on the calibration checkpoints (issue 47).

``python -m studies train diagnose`` (``studies.commands``) trains each of ``DIAGNOSE_CHECKPOINTS`` (healthy runs
that are hard for the doctor: the main job's configuration at a quick size, LM and classification tasks, 16 heads,
one-hot MQAR solutions, ``hard`` attention; and the fault library's planted checkpoint faults, ``configs/faults.py``), runs the
doctor on it and keeps one record in ``docs/results/diagnose/records/``. This report is generated from them:

    python -m studies train diagnose           # train what is missing, diagnose, records
    python -m studies report diagnose          # this report from the committed records

Rules (fixed before the records were made): a healthy checkpoint must give 0 fail and 0 warn; a planted fault the
doctor claims to check (``CLAIMS``) is *caught* when at least one finding warns or fails naming one of the causes
listed for it. Faults it does not claim (the learning rate, logit growth: training dynamics, not a property of the
checkpoint's attention) are listed with what the doctor said. The doctor's ``score_std`` rule was changed after
the solved checkpoints were diagnosed (``POST_HOC``; the report says which data it saw).
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Optional

import numpy as np

from engine.doctor_report import STATUSES, default_thresholds
from studies.report import REPO, markdown_table, write_csv
from studies.study import GENERATED

TITLE = "The attention doctor on healthy and planted-fault checkpoints"
OUT = os.path.join(REPO, "docs", "results", "diagnose")
CHECKS = ("padding_weight", "padding_invariance", "two_token_padding", "causal_weight", "causal_leakage",
          "two_token_causal", "head_permutation", "scale", "score_std", "entropy", "special_mass", "sink")
# planted fault -> the causes (``engine.doctor_report.ADVICE`` keys) a flag must name to catch it
CLAIMS = {"no_padding_mask": {"padding"}, "causal_leak": {"causal"}, "scale_missing": {"score_high"},
          "temperature_x10": {"score_high"}, "scale_dk": {"score_low", "entropy"}}
# Healthy configurations whose attention did not learn at the calibration budget: the doctor's flags on them are
# findings, not false alarms, so they are shown but not held to the quiet rule. Straight-through hard attention
# learns slowly here (docs/results/mqar_variants/: hard attention stays far from solving MQAR in 3,000 steps).
NOT_LEARNED = {"tr-hard": "hard attention, whose cross-attention had not learned to align at this budget"}
# The score_std rule before it was changed after seeing the solved checkpoints (commit 93765d6): a head failed above
# score_std_fail_high whatever the rest of the model, and warned above score_std_warn_high when its layer's median did.
POST_HOC = ("commit 93765d6 (engine/doctor.py `score_std_status`, `score_std_fail_saturated` in "
            "engine/doctor_report.py)", ("mqar-solved-lr0.03", "induction-solved"))
# threshold fields -> (what they bound, check, statistic over a checkpoint, the planted faults they must flag)
BOUNDS = (
    (("padding_weight_fail",), "largest weight on a padding key", "padding_weight", "max", ("no_padding_mask",)),
    (("invariance_warn", "invariance_fail"), "padding swapped or added: relative logit change",
     "padding_invariance", "max", ("no_padding_mask",)),
    (("causal_weight_fail",), "largest weight on a later key", "causal_weight", "max", ("causal_leak",)),
    (("invariance_warn", "invariance_fail"), "future tokens swapped: relative logit change", "causal_leakage",
     "max", ("causal_leak",)),
    (("exact_warn", "exact_fail"), "heads permuted: relative change", "head_permutation", "max", ()),
    (("exact_warn", "exact_fail"), "two tokens, one masked: relative error", "two_token_padding", "max", ()),
    (("scale_ratio_warn_high",), "logit scale x sqrt(d_k), largest module", "scale", "max",
     ("scale_missing", "temperature_x10")),
    (("scale_ratio_warn_low",), "logit scale x sqrt(d_k), smallest module", "scale", "min", ("scale_dk",)),
    (("score_std_warn_high", "score_std_fail_high"), "score std, smallest median of a layer's heads over the "
     "model's layers (above it, heads warn / fail)", "score_std", "layer_floor", ("scale_missing", "temperature_x10")),
    (("score_std_fail_saturated",), "score std, largest head", "score_std", "max", ("logit_growth",)),
    (("score_std_warn_low", "score_std_fail_low"), "score std, smallest head", "score_std", "min", ("scale_dk",)),
    (("entropy_warn", "entropy_fail"), "entropy / log(visible keys), median of a layer's heads", "entropy",
     "layer_median", ("scale_dk",)),
    (("special_mass_warn",), "mass on special keys, median of a layer's heads", "special_mass", "layer_median", ()),
    (("sink_warn",), "mass on key 0, median of a layer's heads", "sink", "layer_median", ()),
)


def separates(healthy: Optional[float], fault: Optional[float], threshold: float, how: str) -> str:
    """Whether ``threshold`` lies between the healthy extreme and the least flagrant fault ("—" without both)."""
    if healthy is None or fault is None:
        return "—"
    if how == "min":
        return "yes" if fault < threshold <= healthy else "no"
    return "yes" if healthy <= threshold < fault else "no"


def records(out: str = OUT) -> list[dict]:
    """The committed records, healthy checkpoints first, each group by name."""
    folder = os.path.join(out, "records")
    recs = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            recs.append(json.load(f))
    return sorted(recs, key=lambda r: (bool(r["fault"]), r["name"]))


def _findings(rec: dict, check: str) -> list[dict]:
    keys = ("check", "group", "layer", "head", "value", "status", "cause")
    return [dict(zip(keys, f)) for f in rec["findings"] if f[0] == check]


def _value(f: dict) -> float:
    return float("inf") if f["value"] is None else float(f["value"])  # non-finite values are stored as None


def statistic(rec: dict, check: str, how: str) -> Optional[float]:
    """One checkpoint's ``how`` ("max", "min", "layer_median": the largest median over a layer's heads,
    "layer_floor": the smallest) of ``check``'s values; None when the check did not run."""
    found = _findings(rec, check)
    if not found:
        return None
    if how in ("layer_median", "layer_floor"):
        layers: dict[tuple, list[float]] = {}
        for f in found:
            layers.setdefault((f["group"], f["layer"]), []).append(_value(f))
        return (max if how == "layer_median" else min)(float(np.median(v)) for v in layers.values())
    return (max if how == "max" else min)(_value(f) for f in found)


def status(rec: dict, check: str) -> str:
    """The worst status of ``check`` in ``rec`` ("—" when it did not run)."""
    found = {f["status"] for f in _findings(rec, check)}
    return max(found, key=STATUSES.index) if found else "—"


def causes(rec: dict) -> list[str]:
    """The causes the doctor named (warn or fail), sorted."""
    return sorted({f[6] for f in rec["findings"] if f[5] != "ok" and f[6]})


def previous_score_std_flags(rec: dict, th) -> list[float]:
    """The score stds of ``rec``'s heads that the ``score_std`` rule before ``POST_HOC`` flagged (above
    ``score_std_fail_high``, or above ``score_std_warn_high`` in a layer whose median is too), largest first."""
    layers: dict[tuple, list[float]] = {}
    for f in _findings(rec, "score_std"):
        layers.setdefault((f["group"], f["layer"]), []).append(_value(f))
    return sorted((v for heads in layers.values() for v in heads if v > th.score_std_fail_high
                   or (v > th.score_std_warn_high and np.median(heads) > th.score_std_warn_high)), reverse=True)


def _post_hoc(recs: Sequence[dict], th) -> str:
    """The report's paragraph on the change made after seeing the solved checkpoints."""
    where, seen = POST_HOC
    before = [f"{r['name']} ({len(v)} heads, score std {', '.join(f'{x:.3g}' for x in v)}; logit scale x "
              f"sqrt(d_k) {statistic(r, 'scale', 'max'):.3g})" for r in recs if not r["fault"]
              for v in [previous_score_std_flags(r, th)] if v]
    caught = [r for r in recs if r["fault"] in CLAIMS and previous_score_std_flags(r, th)]
    now = sum(verdict(r) == "caught" for r in caught)
    return (f"**A change made after seeing data (post hoc).** The `score_std` rule was changed in {where} after "
            f"{' and '.join(seen)} were diagnosed. Before, a head failed above `score_std_fail_high` whatever the rest "
            f"of the model (and warned above `score_std_warn_high` when its layer's median did): on these records "
            f"that flags the healthy {'; '.join(before) or 'none'}. Their scale is the standard one; they are sharp "
            f"because a solved task attends one-hot. Now a high score std warns or fails only "
            f"when every layer of the model has its median above `score_std_warn_high` (a wrong scale multiplies "
            f"every module's scores; a solved task sharpens the layers whose job needs it), or above "
            f"`score_std_fail_saturated` whatever the model (the softmax zeroes visible keys in float32). The old "
            f"rule also flagged the planted {', '.join(r['name'] for r in caught) or 'none'} through `score_std`; "
            f"{now} of these {len(caught)} are caught now (their rows above).")


def verdict(rec: dict) -> str:
    """quiet / NOT quiet (healthy; "flagged: not learned" for ``NOT_LEARNED``), caught / MISSED (claimed fault),
    not claimed."""
    if not rec["fault"]:
        quiet = all(f[5] == "ok" for f in rec["findings"])
        if rec["name"] in NOT_LEARNED:
            return "quiet" if quiet else "flagged: not learned"
        return "quiet" if quiet else "NOT quiet"
    if rec["fault"] not in CLAIMS:
        return "not claimed"
    return "caught" if CLAIMS[rec["fault"]] & set(causes(rec)) else "MISSED"


def extreme(recs: Sequence[dict], check: str, how: str, flagrant: bool) -> tuple[Optional[float], str]:
    """(value, checkpoint) of ``recs``' most flagrant (``flagrant``) or least flagrant ``how`` statistic of
    ``check``; (None, "") when none has it."""
    vals = [(statistic(r, check, how), r["name"]) for r in recs]
    vals = [(v, n) for v, n in vals if v is not None]
    if not vals:
        return None, ""
    return (min if (how == "min") == flagrant else max)(vals)


def _cell(value: Optional[float], name: str) -> str:
    return "—" if value is None else f"{value:.3g} ({name})"


def _bound_row(recs: Sequence[dict], healthy: Sequence[dict], th, names, what, check, how, faults) -> list:
    h = extreme(healthy, check, how, flagrant=True)
    f = extreme([r for r in recs if r["fault"] in faults], check, how, flagrant=False)
    return [" / ".join(f"`{n}`" for n in names), " / ".join(f"{th[n]:g}" for n in names), what, _cell(*h),
            _cell(*f), separates(h[0], f[0], th[names[0]], how)]


def report(out: str = OUT) -> tuple[list[str], list[list]]:
    """(README lines, CSV rows) from the records in ``out``."""
    recs, th = records(out), default_thresholds()
    healthy = [r for r in recs if not r["fault"] and r["name"] not in NOT_LEARNED]
    rows = [[r["name"], r["fault"] or "—", r["step"], r.get("validation_accuracy"), r["summary"]]
            + [status(r, c) for c in CHECKS] + [", ".join(causes(r)) or "—", verdict(r)] for r in recs]
    headers = (["checkpoint", "planted fault", "step", "val. accuracy", "doctor"] + list(CHECKS)
               + ["causes named", "verdict"])
    quiet = sum(verdict(r) == "quiet" for r in healthy)
    claimed = [r for r in recs if r["fault"] in CLAIMS]
    caught = sum(verdict(r) == "caught" for r in claimed)
    lines = [f"# {TITLE}", "",
             "Generated by `python -m studies report diagnose` from `records/` (one per checkpoint, written by "
             "`python -m studies train diagnose`; spec `studies/specs/diagnose.py`). Each checkpoint trains "
             "with `train.py` and is diagnosed with `eval.py --diagnose` on its validation split.", "",
             f"**{quiet} of {len(healthy)} healthy checkpoints quiet (0 fail, 0 warn); {caught} of {len(claimed)} "
             f"planted faults the doctor claims caught with their cause.**", "",
             "## Checkpoints", "",
             "*val. accuracy*: validation accuracy at the end of training (its training record). A check's column is its "
             "worst status over its groups, layers and heads (— : it does not apply). "
             "*causes named*: the `engine.doctor_report.ADVICE` keys of the warnings and failures.", "",
             markdown_table(headers, rows), "",
             *[f"{n}: {why} (so classified after the doctor flagged it); it is not counted among the healthy checkpoints; its mask, permutation and "
               f"two-token checks are what show the doctor handles a sampling attention kind." for n, why in
               NOT_LEARNED.items() if any(r["name"] == n for r in recs)], "",
             "Causes the doctor must name to catch a planted fault: "
             + "; ".join(f"{k}: {' or '.join(sorted(v))}" for k, v in CLAIMS.items()) + ".", "",
             "## Thresholds and the data that justify them", "",
             "The thresholds are the fields of `engine.doctor_report.default_thresholds()` (`config.doctor`). For "
             "each, the most extreme healthy checkpoint (it must stay on the ok side) and the least flagrant "
             "checkpoint of the planted faults the threshold must flag (it must be on the other side).", "",
             markdown_table(["threshold", "value", "bounds", "healthy: most extreme",
                             "planted fault: least flagrant", "the (first) threshold separates them"],
                            [_bound_row(recs, healthy, th, *b) for b in BOUNDS]), "",
             "A *no* means that check alone cannot tell that fault from the healthy checkpoints at its threshold; "
             "the checkpoint's row above shows which other check caught it.", "",
             _post_hoc(recs, th), "",
             "Records: " + ", ".join(sorted({f"{r['name']} at {r['commit']}" for r in recs})) + ".", ""]
    main = os.path.join(out, "main_job", "report.json")
    if os.path.exists(main):
        with open(main, encoding="utf-8") as f:
            m = json.load(f)
        lines += [f"The main job's full-length checkpoint (`configs/translation.py`, step {m['meta']['step']}): "
                  f"**{m['summary']}** ([main_job/report.md](main_job/report.md)).", ""]
    return lines, [headers] + rows


def generate(into: Optional[str] = None) -> list[str]:
    """Write README.md, checkpoints.csv and generated.txt (into ``<into>/diagnose`` when given); the README path."""
    target = os.path.join(into, "diagnose") if into else OUT
    os.makedirs(target, exist_ok=True)
    lines, table = report()
    with open(os.path.join(target, "README.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    write_csv(os.path.join(target, "checkpoints.csv"), table[0], table[1:])
    with open(os.path.join(target, GENERATED), "w") as f:
        f.write("\n".join(sorted(["README.md", "checkpoints.csv", GENERATED])) + "\n")
    return [os.path.join(target, "README.md")]


def summary() -> list:
    """The study's row of docs/results/README.md."""
    from studies.specs import Summary

    recs = records()
    healthy = [r for r in recs if not r["fault"] and r["name"] not in NOT_LEARNED]
    claimed = [r for r in recs if r["fault"] in CLAIMS]
    return [Summary(os.path.relpath(OUT, REPO), TITLE,
                    f"{len(recs)} checkpoints; healthy quiet: {sum(verdict(r) == 'quiet' for r in healthy)} of "
                    f"{len(healthy)}; planted faults caught: {sum(verdict(r) == 'caught' for r in claimed)} of "
                    f"{len(claimed)}")]
