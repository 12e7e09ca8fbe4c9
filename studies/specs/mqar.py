"""Multi-query associative recall (Arora et al. 2023, "Zoology") over num_heads x qk_dim: a 2-layer decoder,
d_model 64, 4 key-value pairs, 3,000 steps a cell, 3 seeds (``configs/mqar_grid.py``, in-process through
``engine.run``). The committed runs predate point records: their per-run table ``grid.csv`` is the data the report
reads (a point trained again by ``python -m studies train mqar`` leaves a record in ``points/``, which wins).
"""
from __future__ import annotations

import csv
import os

from studies.claims import Claim, Conditions, Criterion, Registration
from studies.records import Record, records_in
from studies.study import POST_HOC_MARGINS, Arm, Plot, Study

SCRIPT = "scripts/repro_mqar.py"
RULES = Registration("35c0da9", SCRIPT, "more heads learn faster")  # both criteria, 2026-12-01
ARM = Arm("", "configs/mqar_grid.py", "seeds=3")
HEADS, QK_DIMS, STEPS, SOLVED, LEARNED_LOSS = (1, 2, 4), (2, 8, 32), 3000, 0.95, 0.5
COND = Conditions(lr="0.003 for every cell (not tuned per cell)",
                  differences=("4 pairs in 32 tokens, vocabulary 64, d_model 64 (Zoology: more pairs, wider models, a "
                               "learning-rate sweep per point)",))


def _learned_at(steps, losses) -> int | None:
    """The first logged step whose mean training loss is below LEARNED_LOSS nats (None: never)."""
    return next((int(s) for s, v in zip(steps, losses) if v is not None and v < LEARNED_LOSS), None)


def source(out: str) -> list[tuple[Arm, Record]]:
    """The committed runs: ``grid.csv`` rows as records, replaced by a point's record in ``points/`` where one
    exists (its steps to learn from its learning curve, in 100-step bins)."""
    found = {}
    with open(os.path.join(out, "grid.csv"), newline="") as f:
        for row in csv.DictReader(f):
            h, dk, seed = int(row["num_heads"]), int(row["qk_dim"]), int(row["seed"])
            name = f"num_heads_{h}-qk_dim_{dk}-seed_{seed}"
            learned = row["steps to learn"]
            found[name] = Record(f"{out}/grid.csv#{name}", {
                "point": name, "seed": seed, "steps": STEPS, "params": int(row["parameters"]),
                "overrides": {"model.num_heads": h, "model.qk_dim": dk, "model.v_dim": int(row["v_dim"]), "seed": seed},
                "validation": {"loss": float(row["eval loss"]), "accuracy": float(row["eval accuracy"])},
                "wall_s": float(row["seconds"]), "commit": "not recorded (grid.csv)",
                "metrics": {"steps_to_learn": int(learned) if learned else None}})
    for name, rec in records_in(os.path.join(out, "points")).items():
        raw = dict(rec.raw, metrics={"steps_to_learn": _learned_at(rec.curve.step, rec.curve.train_loss)})
        found[name] = Record(rec.path, raw)
    return [(ARM, rec) for rec in found.values()]


def setting(arm: str, rec: Record) -> str:
    return f"h={rec.override('model.num_heads')}, d_k={rec.override('model.qk_dim')}"


def every_cell(groups) -> tuple[str, str, str]:
    cells = [f"h={h}, d_k={dk}" for h in HEADS for dk in QK_DIMS]
    solved = [c for c in cells if groups.get(c) and min(r.valid_accuracy or 0 for r in groups[c]) >= SOLVED]
    verdict = "reproduced" if len(solved) == len(cells) else "partial" if solved else "not reproduced"
    missing = [c for c in cells if c not in solved]
    return (f"{len(solved)} of {len(cells)} cells solved (every seed >= {SOLVED})", verdict,
            f"not solved: {', '.join(missing)}" if missing else "every cell solved")


STUDY = Study(
    name="mqar", title="Multi-query associative recall: accuracy over num_heads x qk_dim", out="docs/results/mqar",
    protocol=("Protocol: 2-layer pre-LN decoder, d_model 64, v_dim = d_model / num_heads, learned positions; MQAR "
              "with 4 key-value pairs, sequence 32, vocabulary 64; AdamW lr 0.003 with warmup and cosine decay, "
              "3,000 steps of batch 32 (`configs/mqar_grid.py`, each cell through `engine.run`), seeds 0-2. "
              "Accuracy: exact match of the value token at the answer positions of 256 held-out sequences. Steps to "
              f"learn: the first logged step whose mean training loss is below {LEARNED_LOSS} nats."),
    arms=(ARM,), setting=setting, source=source, runner="in_process", metrics=("accuracy", "steps_to_learn", "wall"),
    claims=(Claim("h1 slower", "1 head learns slower than 4 heads (steps to learn, every d_k)",
                  tuple(f"h=1, d_k={dk}" for dk in QK_DIMS), tuple(f"h=4, d_k={dk}" for dk in QK_DIMS), "mqar", COND,
                  metric="steps_to_learn", sign=1, margin=75, registered=RULES),),
    criteria=(Criterion("solves", "attention solves MQAR at every (heads, d_k) cell (Zoology)", every_cell, COND,
                        RULES),),
    keep=("grid.csv",),  # the committed runs (see source)
    margins_note=POST_HOC_MARGINS,
    plots=(Plot("accuracy_grid", "accuracy", "model.qk_dim", "model.num_heads"),
           Plot("steps_to_learn", "steps_to_learn", "model.qk_dim", "model.num_heads")),
)
STUDIES = (STUDY,)
