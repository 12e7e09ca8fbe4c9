"""Vaswani et al. (2017) Table 3 rows (A) and (B) at CPU scale, at d_model 128, 256 and 512.

Rows (A) vary the number of heads at constant compute (d_k = d_v = d_model / h); rows (B) reduce d_k from the
base's (to 1/2 and 1/4) at 8 heads with d_v kept; the A/A control trains the base point again with other seeds;
the single-head extension (A1) trains h = 1 at the A/A seeds, and the d_k control (A1dk) h = 1 at the base's
d_k. The paper's values (newstest2013, base h = 8, d_k 64: perplexity 4.92) are the change in log perplexity per
wordpiece, the same units as our validation NLL per BPE token on different data and at another scale.
"""
from __future__ import annotations

import math

import numpy as np

from studies.claims import Claim, Conditions, Registration
from studies.records import Record
from studies import stats
from studies.records import values
from studies.study import POST_HOC_MARGINS, Arm, Section, Study

SCRIPT = "scripts/repro_table3.py"
MAIN = Registration("a2e6db3", SCRIPT, "math.log(5.29 / 4.92)")  # PAPER and verdict(), 2026-12-01
AA = Registration("a2e6db3", SCRIPT, "A/A control")
EXTENSION = Registration("02d8e2b", SCRIPT, "def extension_reading")  # 2026-12-03, before A1 ran
DK_CONTROL = Registration("d02c3fc", SCRIPT, "def dk_control_reading")  # 2026-12-03, before A1dk ran
EQUAL_DK = Registration("324bbea", SCRIPT, "equal_dk")  # 2026-12-02


def paper(ppl: float) -> float:
    """The paper's change in log perplexity against the base's 4.92."""
    return math.log(ppl / 4.92)


MARGIN = 0.005  # nats: repro_table3.py's NO_EFFECT since a2e6db3 (paper effects below it count as none)
FOLLOW_UPS = "Table 3 follow-ups (single head, equal d_k), every width"  # one Holm family across the widths

LR = {128: "0.003 (the CPU translation config's rate, for every row; not tuned per row)",
      256: "0.0015 (300-step pilots of the base point h = 8 only; the smallest candidate won, the grid's edge)",
      512: "0.00075 (300-step pilots of the base point h = 8 only; the smallest candidate won, the grid's edge)"}
DIFFERENCES = ("pre-LN without dropout (the paper: post-LN, dropout 0.1)",
               "embedded Spanish->English corpus, 8k BPE (the paper: WMT14 EN-DE, newstest2013)")


def conditions(d_model: int) -> Conditions:
    return Conditions(lr=LR[d_model], differences=DIFFERENCES + (f"d_model {d_model}, 3+3 layers, d_ff "
                                                                 f"{4 * d_model} (the paper: 512, 6+6, 2048)",))


def setting(arm: str, rec: Record) -> str:
    h, dk, dv = (rec.override(f"model.{k}") for k in ("num_heads", "qk_dim", "v_dim"))
    return {"A": f"h={h} (d_k={dk})", "B": f"h=8, d_k={dk} (B)", "AA": "h=8 A/A seeds",
            "A1": "h=1 more seeds", "A1dk": f"h=1, d_k={dk}, d_v={dv}"}[arm]


def spread(groups) -> Section:
    """Each setting's seed spread of validation NLL against the base's (h = 8): the F test of equal variances, a
    guide only with 3 seeds (it assumes normal values)."""
    base = next((label for label in groups if label.startswith("h=8 (")), None)
    rows = []
    for label, members in groups.items():
        nll = values([r for _, r in members], "nll")
        ratio, p = stats.variance_ratio(nll, values([r for _, r in groups[base]], "nll")) if base else (None, None)
        rows.append([label, len(nll), float(np.std(nll, ddof=1)) if len(nll) > 1 else None, ratio, p])
    return Section("Seed spread against the base", "Standard deviation of validation NLL over seeds, and its variance "
                   "against the base's (h = 8) with the two-sided F test's p: with 3 seeds a side, a guide only.",
                   ["setting", "seeds", "std NLL", "variance / base's", "F test p"], rows, "spread.csv")


def width(d_model: int, name: str, title: str, command: str = "", inputs=()) -> Study:
    arg = f"seeds=3,steps=2400,minutes=0,test_examples=0,d_model={d_model}"
    dk = d_model // 8
    base = f"h=8 (d_k={dk})"
    both = (base, "h=8 A/A seeds")
    cond = conditions(d_model)
    family = f"Table 3 rows (A), (B), A/A at d_model {d_model}"
    head = lambda h: f"h={h} (d_k={d_model // h})"  # noqa: E731
    rows_b = lambda k: f"h=8, d_k={dk // k} (B)"  # noqa: E731
    claim = lambda cid, text, a, b, fam, reg, **kw: Claim(  # noqa: E731
        f"d{d_model} {cid}", text, a, b, fam, cond, registered=reg, **{"margin": MARGIN, **kw})
    single = FOLLOW_UPS
    claims = (
        claim("h1", "h = 1 is worse than h = 8", (head(1),), (base,), family, MAIN, paper=paper(5.29)),
        claim("h2", "h = 2 against h = 8 (no paper row)", (head(2),), (base,), family, MAIN),
        claim("h4", "h = 4 is worse than h = 8", (head(4),), (base,), family, MAIN, paper=paper(5.00)),
        claim("h16", "h = 16 is as good as h = 8", (head(16),), (base,), family, MAIN, paper=paper(4.91)),
        claim("h32", "h = 32 is worse than h = 8", (head(32),), (base,), family, MAIN, paper=paper(5.01)),
        claim("dk/2", "d_k halved is worse (rows B)", (rows_b(2),), (base,), family, MAIN, paper=paper(5.01)),
        claim("dk/4", "d_k quartered is worse (rows B)", (rows_b(4),), (base,), family, MAIN, paper=paper(5.16)),
        claim("A/A", "the base against itself (other seeds): no effect", ("h=8 A/A seeds",), (base,), family, AA,
              paper=0.0),
        claim("h1x6", "h = 1 is worse than h = 8, 6 seeds each", (head(1), "h=1 more seeds"), both, single,
              EXTENSION, paper=paper(5.29), min_seeds=6),
        claim("h1@dk", f"h = 1 minus h = 8 at equal d_k {dk} (head count)", (f"h=1, d_k={dk}, d_v={d_model}",),
              both, single, DK_CONTROL),
        claim("dk@h1", f"h = 1: d_k {d_model} minus d_k {dk} (d_k at one head)", (head(1), "h=1 more seeds"),
              (f"h=1, d_k={dk}, d_v={d_model}",), single, DK_CONTROL),
        claim("h16=B", "rows (A) h = 16 minus rows (B) at its d_k (head count at equal d_k)", (head(16),),
              (rows_b(2),), FOLLOW_UPS, EQUAL_DK),
        claim("h32=B", "rows (A) h = 32 minus rows (B) at its d_k (head count at equal d_k)", (head(32),),
              (rows_b(4),), FOLLOW_UPS, EQUAL_DK),
    )
    protocol = (
        f"Protocol: embedded Spanish->English corpus, d_model {d_model}, 3+3 layers, d_ff {4 * d_model}, pre-LN, no "
        f"dropout, no QK-LayerNorm, rsqrt schedule with 100 warmup steps, batch 8 packed rows of 128 tokens, 2,400 "
        "steps a point; validation NLL on the whole validation split every 600 steps; greedy decoding of every test "
        f"sentence at the end (sacreBLEU). Rows (A): h with d_k = d_v = {d_model} / h. Rows (B): h = 8, d_v = {dk}, "
        f"d_k {dk // 2} and {dk // 4}. A/A: the base (h = 8, d_k = {dk}) at seeds 3-5 against seeds 0-2. A1: h = 1 "
        f"at seeds 3-5. A1dk: h = 1 with d_k = {dk}, d_v = {d_model}. Configs: `configs/table3_heads.py`, "
        "`configs/table3_dk.py`. Paper values: Vaswani et al. 2017, Table 3, log(perplexity / 4.92).")
    return Study(name=name, title=title, out=f"docs/results/{name}", protocol=protocol, setting=setting,
                 arms=(Arm("A", "configs/table3_heads.py", arg), Arm("B", "configs/table3_dk.py", arg),
                       Arm("AA", "configs/table3_heads.py", arg + ",aa", 1),
                       Arm("A1", "configs/table3_heads.py", arg + ",more_h1", 2),
                       Arm("A1dk", "configs/table3_heads.py", arg + ",h1_base_dk", 3)),
                 claims=claims, metrics=("nll", "ppl", "bleu", "chrf", "wall"), command=command, inputs=inputs,
                 quick=quick, sections=(spread,), margins_note=POST_HOC_MARGINS)


def quick(arm: Arm, point) -> bool:
    """The --quick points (tiny models, one seed): rows (A) h = 1 and 8, and rows (B)."""
    return arm.name == "B" or (arm.name == "A" and point.overrides["model.num_heads"] in (1, 8))


PILOTS = (("Learning-rate pilots (the base point h = 8, validation NLL at step 300)", "../table3_d512/pilot_lr.csv",
           "valid_nll_at_300"),)
STUDIES = (
    width(128, "table3", "Vaswani et al. Table 3 rows (A) and (B) at CPU scale, d_model 128"),
    width(256, "table3_d256", "Vaswani et al. Table 3 rows (A) and (B) at CPU scale, d_model 256", inputs=PILOTS),
    width(512, "table3_d512", "Vaswani et al. Table 3 rows (A) and (B) at d_model 512 (an accelerator's points)",
          command="python scripts/gpu_sweeps.py --studies=table3_d512", inputs=PILOTS),
)
