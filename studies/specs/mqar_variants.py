"""Attention variants on multi-query associative recall (Arora et al. 2023, "Zoology") at CPU scale: softmax,
linear (elu+1), additive and hard attention over the number of key-value pairs and the model width
(``configs/mqar_variants.py``), 3 seeds; and a learning-rate probe of linear attention at d_model 128.
"""
from __future__ import annotations

import re

from studies.claims import Claim, Conditions, Criterion, Registration
from studies.records import Record
from studies.study import POST_HOC_MARGINS, Arm, Plot, Study

SCRIPT = "scripts/repro_mqar_variants.py"
RULES = Registration("88e9f49", SCRIPT, "solves MQAR at every width")  # 2026-12-01, before the sweep
PAIRS, WIDTHS, SOLVED = (4, 8, 16), (32, 64, 128), 0.95  # a cell is solved when every seed reaches SOLVED
COND = Conditions(lr="one per width from softmax pilots (0.01 at d_model 32 and 64, 0.003 at 128; Zoology takes "
                  "the best of a sweep per point)",
                  differences=("1 head, 2 layers, 3,000 steps of 256 answers (Zoology: larger models and a "
                               "learning-rate sweep per point)",))
PROBE = tuple(f"attention_kind_linear-mqar_num_kv_pairs_{n}-d_model_128" for n in (4, 8))  # the probed cells


def setting(arm: str, rec: Record) -> str:
    label = (f"{rec.override('model.attention_kind')}, {rec.override('data.mqar_num_kv_pairs')} pairs, "
             f"d_model {rec.override('model.d_model')}")
    return label + (f", lr {rec.override('train.learning_rate')}" if arm.startswith("lr") else "")


def _grid(groups, kind: str) -> tuple[list[int], list[int]]:
    """The pair counts and widths of ``kind``'s cells in the groups (the sweep's, ``--quick`` included)."""
    cells = [re.fullmatch(rf"{kind}, (\d+) pairs, d_model (\d+)", label) for label in groups]
    return (sorted({int(m[1]) for m in cells if m}), sorted({int(m[2]) for m in cells if m}))


def _solved(groups, kind: str, pairs: int, width: int) -> bool:
    acc = [r.valid_accuracy for r in groups.get(f"{kind}, {pairs} pairs, d_model {width}", ())]
    return bool(acc) and None not in acc and min(acc) >= SOLVED


def softmax_everywhere(groups) -> tuple[str, str, str]:
    pair_counts, widths = _grid(groups, "softmax")
    cells = [(p, w) for p in pair_counts for w in widths]
    solved = [c for c in cells if _solved(groups, "softmax", *c)]
    failed = ", ".join(f"{p} pairs at d_model {w}" for p, w in cells if (p, w) not in solved)
    verdict = "reproduced" if len(solved) == len(cells) else "partial" if solved else "not reproduced"
    return (f"{len(solved)} of {len(cells)} cells solved (every seed >= {SOLVED})", verdict,
            f"not solved: {failed}" if failed else "every cell solved")


def linear_width_grows(groups) -> tuple[str, str, str]:
    pair_counts, widths = _grid(groups, "linear")
    smallest = {p: next((w for w in widths if _solved(groups, "linear", p, w)), None) for p in pair_counts}
    text = "; ".join(f"{p} pairs: {w if w else f'none up to {widths[-1]}'}" for p, w in smallest.items())
    solved = [(p, w) for p, w in smallest.items() if w]
    steps = list(zip(solved, solved[1:]))
    if any(b[1] < a[1] for a, b in steps) or (solved and any(w is None for p, w in smallest.items()
                                                             if p < solved[-1][0])):
        return text, "contradicted", "the smallest solving width falls as the pairs grow"
    if any(b[1] > a[1] for a, b in steps):
        return text, "reproduced", "the smallest solving width grows between pair counts solved in the grid"
    return text, "unresolved", ("no growth between pair counts solved within the grid; the only sign is the "
                                "largest count failing at every width, which the grid cannot size")


CLAIMS = tuple(
    Claim(f"s-l {p}/{w}", f"softmax minus linear accuracy, {p} pairs, d_model {w}",
          (f"softmax, {p} pairs, d_model {w}",), (f"linear, {p} pairs, d_model {w}",), "softmax minus linear", COND,
          metric="accuracy", margin=0.05, registered=RULES) for p in PAIRS for w in WIDTHS)

STUDY = Study(
    name="mqar_variants", title="Attention variants on multi-query associative recall (Zoology) at CPU scale",
    out="docs/results/mqar_variants",
    protocol=("Protocol: a 2-layer pre-LN decoder with 1 head (d_k = d_v = d_model, Zoology's attention baseline), "
              "d_ff 4 d_model, learned positions, no dropout, on MQAR with N key-value pairs then the N keys queried "
              "(sequence 4 N, 256 answers per step), vocabulary 256; AdamW, 10% warmup then cosine decay, 3,000 "
              "steps; validation accuracy (exact match of the value at the answer positions) on 8 held-out batches "
              "at the end. Kinds: softmax, linear (elu+1), additive (Bahdanau), hard (straight-through Gumbel); "
              f"pairs {PAIRS}; d_model {WIDTHS}; seeds 0-2 (`configs/mqar_variants.py`). Learning-rate probe: linear "
              "attention at d_model 128 with 4 and 8 pairs at 0.001 and 0.01, seed 0."),
    arms=(Arm("", "configs/mqar_variants.py", "seeds=3"),
          Arm("lr 0.001", "configs/mqar_variants.py", "seeds=1,lr=0.001", 1, "lr_probe/lr_0.001", PROBE),
          Arm("lr 0.01", "configs/mqar_variants.py", "seeds=1,lr=0.01", 1, "lr_probe/lr_0.01", PROBE)),
    setting=setting, claims=CLAIMS, metrics=("accuracy", "nll", "wall"),
    criteria=(Criterion("softmax", "softmax attention solves MQAR at every width (Zoology)", softmax_everywhere, COND,
                        RULES),
              Criterion("linear width", "linear attention needs a width that grows with the pairs (Zoology)",
                        linear_width_grows, COND)),
    plots=(Plot("accuracy_vs_pairs", "accuracy", "data.mqar_num_kv_pairs", "model.attention_kind", "model.d_model"),),
    inputs=(("Time and memory per step (measured by the study's benchmark)", "timing.csv"),
            ("Softmax pilots that sized the grid", "pilot.csv"), ("Pilot cost", "pilot_cost.csv")),
    keep=("timing.md",),  # scripts/bench_variants.py's table
    margins_note=POST_HOC_MARGINS,
)
STUDIES = (STUDY,)
