"""The attention doctor's findings and report: thresholds, ``Finding``, statuses, advice in the words of the
practitioner's checklist, and the writers of ``report.md`` / ``report.json`` (``engine.doctor`` runs the checks).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import ml_collections

STATUSES = ("ok", "warn", "fail")

ADVICE = {
    "padding": (
        "Worse than no attention: the padding mask is not applied. Build the mask from the padding (segment ids "
        "or lengths) and pass it to every attention call (encoder self, cross, decoder self); padding keys must "
        "get zero weight and changing the padding must not change real outputs."
    ),
    "causal": (
        "Outputs see the future: the causal mask is missing or reversed. Decoder self-attention must use "
        "kv_pos <= q_pos (Mask(causal=True)); perturb future tokens and check that earlier outputs do not move."
    ),
    "score_high": (
        "Loss oscillates or turns NaN: the 1/sqrt(d_k) scale is probably missing (or the learning rate is too "
        "high). Check attention_scale; pre-softmax scores with std near 1 are healthy, 8-10 means the scale is "
        "missing. QK-LayerNorm or a lower learning rate bounds them."
    ),
    "score_low": (
        "Queries and keys are too alike to tell positions apart (score std ~0.1): the scale is too small or "
        "applied twice, or Q/K projections collapsed. Check attention_scale and the Q/K initialisation."
    ),
    "entropy": (
        "Blurry attention, a model that dozes: entropy near its maximum log(n). Temperature too high or a bad "
        "initialisation: check the logit scale (1/sqrt(d_k), not smaller), the Q/K init, and that the head "
        "trains at all (learning rate, gradients reaching it)."
    ),
    "special": (
        "Attention piled on BOS/EOS or other special tokens: the head has nothing to attend to (a no-op head) or "
        "special tokens dominate the keys. Harmless for a few heads; if many do it, check the mask and the "
        "scale, or try fewer heads."
    ),
    "sink": (
        "Attention piled on key 0 (an attention sink). Harmless in moderation; if many heads do it, check that "
        "the mask does not leave key 0 as the only visible key and that the scale is right."
    ),
    "permutation": (
        "Heads split or merged in the wrong order: the reshape/transpose between [B, T, H*D] and [B, T, H, D] "
        "or the output projection mixes heads. Check the split and merge axes with random inputs."
    ),
    "two_token": (
        "The mask does not reach the attention module: with one of two tokens masked, the output must be the "
        "other token's value. Check how the module builds and passes its mask, and the backend's mask handling."
    ),
}


def default_thresholds() -> ml_collections.ConfigDict:
    """The doctor's thresholds and sample sizes (``config.doctor``), each with its justification."""
    c = ml_collections.ConfigDict()
    # Masked keys get exactly zero weight in every backend (-inf before the softmax, or skipped blocks); any
    # weight above float32 rounding means the mask does not reach the softmax.
    c.padding_weight_fail = 1e-6
    # Outputs compared across padding / future perturbations, as max |change| / max |logit| over the compared
    # positions. The same computation on the same real tokens differs only by float32 summation order
    # (~1e-6 relative); a leaking mask moves logits by percents.
    c.invariance_warn = 1e-4
    c.invariance_fail = 1e-2
    # Weight on a later key in causal self-attention: exactly zero when the mask is applied (as padding).
    c.causal_weight_fail = 1e-6
    # Score std per head. The checklist: near 1 is healthy, 8-10 means the 1/sqrt(d_k) scale is missing (the
    # std grows by sqrt(d_k), 8 for d_k = 64); ~0.1 means queries and keys are too alike to separate keys.
    # Trained heads reach 2-4, single sharp cross-attention heads 5-6.2 (the main job's checkpoint) and the
    # retrieval layer of a solved MQAR or induction task 8-24 (one-hot attention; docs/results/diagnose/), so a
    # high std warns from 5 and fails from 8 only when every layer of the model has its median above 5 (a wrong
    # scale multiplies every module's scores; see doctor.score_std_status). Whatever the rest of the model, it
    # fails above 52: a std s spans at least 2s (Popoviciu), and a gap of 104 gives the lowest key a weight below
    # e^-104 < 1.4e-45, float32's smallest subnormal, so the softmax zeroes visible keys (logit growth). Warn below
    # 0.3 (the softmax is within ~5% of uniform) and fail below 0.1.
    c.score_std_warn_high = 5.0
    c.score_std_fail_high = 8.0
    c.score_std_fail_saturated = 52.0
    c.score_std_warn_low = 0.3
    c.score_std_fail_low = 0.1
    # The logit scale of each attention module against the standard 1/sqrt(d_k): scale * sqrt(d_k). The planted
    # faults put it at sqrt(d_k) (scale missing: 4-8 at d_k 16-64), 10 (temperature x10) or 1/sqrt(d_k) (1/d_k:
    # 1/4-1/8); warn outside a factor 2 either way, naming the direction. A warning only: a deliberate other
    # scale (QK-LayerNorm models, muP's 1/d_k) is legitimate, and the score checks judge what it does.
    c.scale_ratio_warn_low = 0.5
    c.scale_ratio_warn_high = 2.0
    # Entropy / log(visible keys) per head. Scores of std s over n keys give about 1 - s^2 / (2 log n): 0.95 is
    # s ~ 0.7 at n = 30 (attention barely above uniform), 0.99 is s ~ 0.3: a head that dozes. A head warns or
    # fails only when its layer's median is above 0.95 too (doctor.layer_status): a blurring fault moves the whole
    # layer, one dozing head among working ones is unused capacity. The healthy and planted-fault checkpoints of
    # docs/results/diagnose/ (its thresholds table) show the margins on both sides.
    c.entropy_warn = 0.95
    c.entropy_fail = 0.99
    # Mean mass on special keys per head: a sink / no-op head puts most of its mass there. More than half is worth
    # a look (warn) when the layer's median is above half too (a few no-op heads are normal; single heads of
    # healthy checkpoints reach it, docs/results/diagnose/); a fail only at nearly all (0.9) and if fail_on_special.
    c.special_mass_warn = 0.5
    c.special_mass_fail = 0.9
    # Mean mass on key 0 per head, the same bounds (key 0 is often BOS, an attention sink).
    c.sink_warn = 0.5
    c.sink_fail = 0.9
    # Sinks are a known trait of healthy trained Transformers (Xiao et al. 2023): report them as warnings only.
    c.fail_on_special = False
    # Rows that see fewer visible (non-special, for special_mass) keys say little about a head's habits (a causal
    # row at position 0 sees only BOS and must put all its mass there): they are left out of the per-head checks.
    c.min_keys = 4
    # Head permutation and the two-token test: exact in exact arithmetic; float32 summation order gives ~1e-6.
    c.exact_warn = 1e-4
    c.exact_fail = 1e-2
    # Sample sizes: batches and rows per batch taken from the given batches, cut points per row for the causal
    # check, padding columns added for the "amount" check.
    c.max_batches = 2
    c.rows_per_batch = 16
    c.extra_padding = 8
    c.seed = 0
    return c


# ------------------------------------------------------------------------------------------------ findings
@dataclasses.dataclass(frozen=True)
class Finding:
    """One checked quantity. ``group``/``layer``/``head`` are None where the check is about the whole model."""

    check: str
    group: Optional[str]
    layer: Optional[int]
    head: Optional[int]
    value: float
    threshold: str  # the rule the status came from, e.g. "warn > 5, fail > 8"
    status: str  # ok / warn / fail
    advice: str  # what to try (empty when ok)
    detail: str = ""
    cause: str = ""  # the likely cause, a key of ADVICE (empty when ok)

    @property
    def where(self) -> str:
        parts = [self.group or "model"]
        if self.layer is not None:
            parts.append(f"L{self.layer}")
        if self.head is not None:
            parts.append(f"H{self.head}")
        return " ".join(parts)

    def record(self) -> dict[str, Any]:
        """The report.json record: check, group, layer, head, value, status (and threshold, detail, cause)."""
        return {"check": self.check, "group": self.group, "layer": self.layer, "head": self.head,
                "value": _json_float(self.value), "status": self.status, "threshold": self.threshold,
                "detail": self.detail, "cause": self.cause}


def _json_float(x: float) -> Optional[float]:
    return float(x) if math.isfinite(x) else None


def status_above(value: float, warn: Optional[float], fail: float) -> str:
    if not value <= fail:  # NaN fails
        return "fail"
    return "warn" if warn is not None and value > warn else "ok"


def rule_above(warn: Optional[float], fail: float) -> str:
    return f"fail > {fail:g}" if warn is None else f"warn > {warn:g}, fail > {fail:g}"


def make_finding(check, group, layer, head, value, threshold, status, advice_key, detail="") -> Finding:
    flagged = status != "ok"
    return Finding(check, group, None if layer is None else int(layer), None if head is None else int(head),
                   float(value), threshold, status, ADVICE[advice_key] if flagged else "", detail,
                   advice_key if flagged else "")


def summary_line(findings: Sequence[Finding]) -> str:
    """"N fail, M warn, K ok"."""
    n = {s: sum(f.status == s for f in findings) for s in STATUSES}
    return f"{n['fail']} fail, {n['warn']} warn, {n['ok']} ok"


# ------------------------------------------------------------------------------------------------ reports
def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    return f"{x:.3g}" if 1e-3 <= abs(x) < 1e4 else f"{x:.2e}"


def _table(findings: Sequence[Finding]) -> list[str]:
    lines = ["| check | layer/head | value | threshold | status | what to try |", "|---|---|---|---|---|---|"]
    for f in findings:
        value = _fmt(f.value) + (f" ({f.detail})" if f.detail else "")
        status = f"**{f.status}**" if f.status != "ok" else f.status
        lines.append(f"| {f.check} | {f.where} | {value} | {f.threshold} | {status} | {f.advice} |")
    return lines


PER_HEAD = {
    "score_std": "standard deviation of the scaled pre-softmax scores over visible keys (healthy near 1)",
    "entropy": "entropy / log(visible keys) (1 = uniform)",
    "special_mass": "attention mass on BOS/EOS/special/punctuation keys",
    "sink": "attention mass on key 0",
}


def _head_matrix(findings: Sequence[Finding], check: str, what: str) -> list[str]:
    """A group/layer x head table of one per-head check (empty when the check has no findings)."""
    cells: dict[str, dict[int, Finding]] = {}
    for f in findings:
        if f.check == check and f.head is not None:
            cells.setdefault(f"{f.group} L{f.layer}", {})[f.head] = f
    if not cells:
        return []
    heads = sorted({h for row in cells.values() for h in row})
    mark = {"ok": "", "warn": " !", "fail": " !!"}
    lines = [f"**{check}**: {what}", "", "| | " + " | ".join(f"H{h}" for h in heads) + " |",
             "|---|" + "---|" * len(heads)]
    for where, row in cells.items():
        lines.append(f"| {where} | " + " | ".join(
            (_fmt(row[h].value) + mark[row[h].status]) if h in row else "" for h in heads) + " |")
    return lines + [""]


def write_report(findings: Sequence[Finding], out_dir: str, *, title: str = "Attention doctor",
                 meta: Optional[Mapping[str, Any]] = None) -> dict[str, str]:
    """Write ``report.md`` (summary line, the problems, then every finding) and ``report.json`` (one record per
    finding) into ``out_dir``; returns {"md": path, "json": path}."""
    os.makedirs(out_dir, exist_ok=True)
    summary = summary_line(findings)
    problems = [f for f in findings if f.status != "ok"]
    problems.sort(key=lambda f: (f.status != "fail", f.check))
    lines = [f"# {title}", "", f"**{summary}**", ""]
    for k, v in (meta or {}).items():
        lines.append(f"- {k}: {v}")
    if meta:
        lines.append("")
    lines += ["## Problems", ""]
    lines += _table(problems) if problems else ["None: every check is ok."]
    lines += ["", "## Per head", "", "Rows: group and layer; columns: heads. `!` marks a warn, `!!` a fail.", ""]
    for check, what in PER_HEAD.items():
        lines += _head_matrix(findings, check, what)
    lines += ["## All findings", ""] + _table(findings) + [""]
    md = os.path.join(out_dir, "report.md")
    with open(md, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    js = os.path.join(out_dir, "report.json")
    with open(js, "w", encoding="utf-8") as f:
        json.dump({"summary": summary, "meta": {k: str(v) for k, v in (meta or {}).items()},
                   "findings": [x.record() for x in findings]}, f, indent=1)
    return {"md": md, "json": js}
