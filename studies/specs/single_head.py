"""The single-head follow-up (issue 49), pre-registered: does Table 3's single-head advantage at d_model 128 (one
head better than eight by -0.069 nats at 2,400 steps, 6 seeds a side) survive each row's own learning rate, 3x the
budget and the paper's recipe; heads against depth with d_k held apart; and the noise floor those verdicts sit on.

Every arm trains 7,200 steps (3x Table 3's) with validation every 600 steps, at the rate the learning-rate arm
(``studies/specs/single_head_lr.py``) chose for its row; until every row has its rate the arms are "lr=0" and the
study's train gate (``waiting``, its ``ready``) refuses to train them in one line. The claims, their families, the
reading rule of the answer (``answer``) and the A/A and machine checks were committed before any point of either
study trained.
"""
from __future__ import annotations

import collections
import math
import os
from typing import Mapping, Sequence

from studies import claims as claims_lib
from studies.claims import Claim, Conditions, Registration
from studies.records import Record
from studies.specs import single_head_lr as lr_arm
from studies.study import Arm, Section, Study, contrasts_by_step

SPEC = "studies/specs/single_head.py"
COMMAND = "scripts/single_head.sh"  # the queue: the lr arm until it trains nothing, then this study
COMMIT = "49cca9a1bfaf4806b8492dd0b3def44a52cb0018"  # the commit that first added this spec: the claims' registration
STEPS = 7200
L = lr_arm.LABELS
CHOICES = lr_arm.choices()
RATES = {row: c.rate for row, c in CHOICES.items()}
RATES["h1_L24"] = RATES["h8"]  # Liu et al.'s construction shares the 8-head model's hyperparameters


def rate(row: str) -> str:
    return "0" if RATES[row] is None else lr_arm.rate_text(RATES[row])


# name -> (row, first seed, seeds, recipe, order, label); labels are the claims' groups. The arms the answer reads
# (L h1x6, R h1) train first; until 2026-12-07 (2 points recorded) rows h 2/32 and (B) came before h1-s3 and h8-s3.
# The replicate arm trained last until 2026-12-07 (20 points recorded, none of it); it now follows rows h 2/32 and
# (B): from h2 on, points train on another machine than the h8-s0 and h8-s3 records they are compared with, and the
# replicate measures that machine's effect on the same points.
ARMS = {
    "h1-s0": ("h1", 0, 3, False, 0, f"{L['h1']}, seeds 0-2"), "h8-s0": ("h8", 0, 3, False, 0, f"{L['h8']}, seeds 0-2"),
    "h1-s3": ("h1", 3, 3, False, 1, f"{L['h1']}, seeds 3-5"), "h8-s3": ("h8", 3, 3, False, 1, f"{L['h8']}, seeds 3-5"),
    "recipe-h1": ("h1", 0, 3, True, 2, f"{L['h1']}, paper's recipe"),
    "recipe-h8": ("h8", 0, 3, True, 2, f"{L['h8']}, paper's recipe"),
    "h2": ("h2", 0, 3, False, 3, L["h2"]), "h32": ("h32", 0, 3, False, 3, L["h32"]),
    "dk4": ("dk4", 0, 3, False, 3, L["dk4"]),
    "replicate": ("h8", 0, 3, False, 4, f"{L['h8']}, seeds 0-2, another machine"),
    "h1_L6": ("h1_L6", 0, 3, False, 5, L["h1_L6"]),
    "aa-s6": ("h8", 6, 3, False, 6, f"{L['h8']}, seeds 6-8"), "aa-s9": ("h8", 9, 3, False, 6, f"{L['h8']}, seeds 9-11"),
    "h1_L24": ("h1_L24", 0, 3, False, 7, L["h1_L24"]),
}
SAME_MACHINE = f"{L['h8']}, seeds 0-2, same machine again"


def arm(name: str) -> Arm:
    row, first, seeds, recipe, order, _ = ARMS[name]
    return Arm(name, lr_arm.CONFIG, f"row={row},lr={rate(row)},steps={STEPS},seeds={seeds},first_seed={first}"
               + (",recipe" if recipe else ""), order)


def machine(rec: Record) -> str:
    """The machine a record trained on: its ``machine`` (name, CPU model and device; ``Record.machine``) where the
    record has one, else its device, CPU model, jax version and host as the engine logged them."""
    if rec.machine:
        return rec.machine
    jax_version = (rec.raw.get("software") or {}).get("jax")
    return "; ".join(str(x) for x in (rec.device, rec.raw.get("cpu"), jax_version and f"jax {jax_version}",
                                      rec.raw.get("host")) if x) or "not recorded"


def original(rec: Record) -> Record | None:
    """The h = 8 seeds-0-2 record a replicate record re-runs (the same point name in ``points/h8-s0``)."""
    path = os.path.join(os.path.dirname(os.path.dirname(rec.path)), "h8-s0", os.path.basename(rec.path))
    return Record.load(path) if os.path.exists(path) else None


# The boot of the h8-s0 records (point, recorded_utc), which predate boot ids in records. Added 2026-12-07 after
# they were recorded and before any replicate point trained: every training call of the three ran on the machine
# that holds their run folders, up without a reboot from 2026-12-06 19:07 UTC (before their first step, 2026-12-07
# 04:43 UTC) until after this entry's commit.
FIRST_RUN_BOOTS = {("seed_0", "2026-12-07 07:33:19"): "b9f938f4", ("seed_1", "2026-12-07 08:02:16"): "b9f938f4",
                   ("seed_2", "2026-12-07 10:08:53"): "b9f938f4"}


def boots(rec: Record) -> frozenset[str] | None:
    """The boot ids a record's training calls ran on; None where a call's is unknown (``FIRST_RUN_BOOTS`` for the
    h8-s0 records made before records kept them)."""
    if rec.boots and all(rec.boots):
        return frozenset(rec.boots)
    known = FIRST_RUN_BOOTS.get((rec.name, rec.raw.get("recorded_utc")))
    return frozenset([known]) if known else None


def setting(arm_name: str, rec: Record) -> str:
    if arm_name == "replicate":  # a re-run on the machine of the run it repeats is no machine contrast
        first = original(rec)
        if first is not None and machine(first) == machine(rec):  # same name, CPU model and device
            a, b = boots(first), boots(rec)
            if a is None or b is None or a & b:  # another machine only where every call's boot is known, none shared
                return SAME_MACHINE
    return ARMS[arm_name][5]


def machine_text(rec: Record) -> str:
    """``machine`` with the boot ids of the record's training calls."""
    b = boots(rec)
    return machine(rec) + (f", boot {', '.join(sorted(b))}" if b else ", boot not recorded")


def lr_text() -> str:
    def one(c: lr_arm.Choice) -> str:
        return "not chosen yet" if c.rate is None else lr_arm.rate_text(c.rate) + (
            "" if c.status == "chosen" else f" ({c.status})")

    return (f"per-row, from the lr arm (docs/results/single_head_lr, 2,400 steps, seed {lr_arm.LR_SEED}): "
            + ", ".join(f"{L[row]} {one(c)}" for row, c in CHOICES.items()) + "; 1 head x 24+24 the 8-head row's rate")


DATA = "embedded Spanish->English corpus, 8k BPE (the paper: WMT14 EN-DE, newstest2013)"
SIZE = "d_model 128, d_ff 512, 3+3 layers (the paper: 512, 2048, 6+6)"
PRE = Conditions(lr_text(), ("pre-LN without dropout (the paper: post-LN, dropout 0.1)", SIZE, DATA))
RECIPE = Conditions(lr_text() + "; the recipe's peak is the row's rate x sqrt(100 / 800)", (
    "post-LN, dropout 0.1, 800 warmup steps with the row's pre-LN schedule after them (the paper: 4,000 of 100,000)",
    SIZE, DATA))
DEPTH = Conditions(lr_text(), ("pre-LN, QK-LN off, without dropout (Liu, Liu & Han: post-LN with Admin)",
                               "Liu et al.'s construction: each 8-head layer split into single-head layers", DATA))
LONG, PAPER_RECIPE, HEADS_DEPTH, NOISE = ("single head at 7,200 steps, per-row rates", "the paper's recipe",
                                          "heads vs depth, d_k apart, 7,200 steps", "noise floor: A/A and machines")
H1, H8 = (ARMS["h1-s0"][5], ARMS["h1-s3"][5]), (ARMS["h8-s0"][5], ARMS["h8-s3"][5])


def paper(ppl: float) -> float:
    return math.log(ppl / 4.92)


def c(cid: str, text: str, a: Sequence[str], b: Sequence[str], family: str, cond: Conditions, **kw) -> Claim:
    reg = Registration(COMMIT, SPEC, f'"{cid}"') if COMMIT else None
    return Claim(cid, text, tuple(a), tuple(b), family, cond, registered=reg, **kw)


A = {name: spec[5] for name, spec in ARMS.items()}
CLAIMS = (
    c("L h1x6", "h = 1 is worse than h = 8 (6 seeds a side)", H1, H8, LONG, PRE, paper=paper(5.29), min_seeds=6),
    c("L h2", "h = 2 against h = 8 (no paper row)", (A["h2"],), H8, LONG, PRE),
    c("L h32", "h = 32 is worse than h = 8", (A["h32"],), H8, LONG, PRE, paper=paper(5.01)),
    c("L dk4", "d_k quartered is worse (rows B)", (A["dk4"],), H8, LONG, PRE, paper=paper(5.16)),
    c("R h1", "with the paper's recipe, h = 1 is worse than h = 8", (A["recipe-h1"],), (A["recipe-h8"],),
      PAPER_RECIPE, RECIPE, paper=paper(5.29)),
    c("R h8", "h = 8: the paper's recipe minus pre-LN (seeds 0-2)", (A["recipe-h8"],), (A["h8-s0"],), PAPER_RECIPE,
      RECIPE),
    c("D 6+6=2x3+3", "1 head x 6+6 matches 2 heads x 3+3 at equal d_k 64 (depth at equal d_k)", (A["h1_L6"],),
      (A["h2"],), HEADS_DEPTH, DEPTH, paper=0.0, sign=-1, margin=0.05),
    c("D 6+6=8x3+3", "1 head x 6+6 (d_k 64) matches 8 heads x 3+3 (d_k 16)", (A["h1_L6"],), H8, HEADS_DEPTH,
      DEPTH, paper=0.0, sign=-1, margin=0.05),
    c("D 24+24=8x3+3", "1 head x 24+24 matches 8 heads x 3+3 at equal d_k 16 (Liu et al.'s case)",
      (A["h1_L24"],), H8, HEADS_DEPTH, DEPTH, paper=0.0, sign=-1, margin=0.05),
    c("AA 3-5 vs 0-2", "h = 8, seeds 3-5 against 0-2: no effect", (A["h8-s3"],), (A["h8-s0"],), NOISE, PRE, paper=0.0),
    c("AA 9-11 vs 6-8", "h = 8, seeds 9-11 against 6-8: no effect", (A["aa-s9"],), (A["aa-s6"],), NOISE, PRE,
      paper=0.0),
    c("AA 6-11 vs 0-5", "h = 8, seeds 6-11 against 0-5: no effect", (A["aa-s6"], A["aa-s9"]), H8, NOISE, PRE,
      paper=0.0, min_seeds=6),
    c("AA odd vs even triples", "h = 8, seeds 3-5 and 9-11 against 0-2 and 6-8: no effect", (A["h8-s3"], A["aa-s9"]),
      (A["h8-s0"], A["aa-s6"]), NOISE, PRE, paper=0.0, min_seeds=6),
    c("M machines", "h = 8, seeds 0-2 re-run on another machine: no effect", (A["replicate"],), (A["h8-s0"],),
      NOISE, PRE, paper=0.0),
)
AA_IDS = tuple(x.id for x in CLAIMS if x.family == NOISE)
KEY = ("L h1x6", "R h1", *AA_IDS)
# The earlier claims these re-test (docs/results/README.md marks them): Table 3 at d_model 128, and heads vs depth's
# budget effect and Liu et al.'s case, whose 1-head arms confounded depth with d_k.
RETESTS = (("table3", "d128 h1", ("L h1x6", "R h1")), ("table3", "d128 h1x6", ("L h1x6", "R h1")),
           ("table3", "d128 h2", ("L h2",)), ("table3", "d128 h32", ("L h32",)), ("table3", "d128 dk/4", ("L dk4",)),
           ("heads_vs_depth", "6+6 long budget", ("D 6+6=2x3+3", "D 6+6=8x3+3")),
           ("heads_vs_depth", "24+24 match off", ("D 24+24=8x3+3",)))


def answer(kinds: Mapping[str, str]) -> str:
    """The reading rule, fixed with the claims: does the single-head advantage survive per-row learning rates, 3x
    the budget and the paper's recipe? ``kinds``: claim id -> verdict kind after Holm (``L h1x6``, ``R h1`` and the
    noise-floor claims). "Survives" is h = 1 below h = 8 with the interval excluding 0 after the correction (the
    paper's penalty contradicted); the paper's penalty or no difference within the margin is "does not survive"."""
    long, recipe = kinds.get("L h1x6", claims_lib.UNRESOLVED), kinds.get("R h1", claims_lib.UNRESOLVED)
    better = lambda k: k == claims_lib.CONTRADICTED  # noqa: E731  (the paper's sign is h = 1 worse)
    gone = lambda k: k in (claims_lib.REPRODUCED, claims_lib.DIRECTION, claims_lib.NO_EFFECT)  # noqa: E731
    if long == claims_lib.UNRESOLVED or recipe == claims_lib.UNRESOLVED:
        text = (f"Not answered yet: per-row rates at 7,200 steps read {long}, the paper's recipe {recipe} (an "
                "unresolved verdict, or too few seeds, leaves the answer open).")
    elif better(long) and better(recipe):
        text = "Yes: one head beats eight with per-row rates at 7,200 steps, and under the paper's recipe."
    elif better(long):
        text = (f"Partly: one head beats eight with per-row rates at 7,200 steps (pre-LN), but not under the paper's "
                f"recipe ({recipe}).")
    elif better(recipe):
        text = f"Partly: under the paper's recipe one head beats eight, but not pre-LN with per-row rates ({long})."
    elif gone(long) and gone(recipe):
        text = (f"No: with per-row rates at 7,200 steps ({long}) and under the paper's recipe ({recipe}) the single "
                "head's advantage is gone.")
    else:
        text = f"Undecided: per-row rates at 7,200 steps read {long}, the paper's recipe {recipe}."
    false = [i for i in AA_IDS if kinds.get(i) == claims_lib.CONTRADICTED]
    if false:
        text += (f" Caveat: the noise floor is not what Welch assumes: {', '.join(false)} differ(s) where nothing "
                 "should.")
    return text


def _labels(groups) -> dict[str, list[Record]]:
    out = {label: [r for _, r in members] for label, members in groups.items()}
    for claim in CLAIMS:
        for g in claim.a + claim.b:
            out.setdefault(g, [])
    return out


def pending(verdicts: Mapping[str, claims_lib.Verdict]) -> str:
    """The sentence that marks an answer provisional while a noise-floor claim, which can add the rule's caveat,
    lacks its registered seeds ("" when none does or the answer is not given yet)."""
    short = [i for i in AA_IDS if verdicts[i].interval is None]
    if not short or any(verdicts[i].kind == claims_lib.UNRESOLVED for i in KEY[:2]):
        return ""
    verb = "lacks its" if len(short) == 1 else "lack their"
    return (f" Provisional: {', '.join(short)} {verb} registered seeds so far; one that differs will add the rule's "
            "caveat.")


def answer_section(groups) -> Section:
    verdicts = {v.claim.id: v for v in claims_lib.evaluate(CLAIMS, _labels(groups))}
    return Section("The answer", "**Does the single-head advantage survive per-row learning rates, 3x the budget "
                   "and the paper's recipe?** " + answer({i: v.kind for i, v in verdicts.items()}) + pending(verdicts)
                   + " It follows " + READING + ".", ["claim", "measured Δ", "verdict (Holm)"],
                   [[i, verdicts[i].measured(), verdicts[i].kind] for i in KEY], "answer.csv")


def floor_section(groups) -> Section:
    """The A/A false-positive rate: every noise-floor contrast with its registered seeds a side (a claim with its
    verdict), at every validation step both sides evaluated."""
    groups = _labels(groups)
    rows, hits = [], collections.Counter()
    for claim in (x for x in CLAIMS if x.family == NOISE):
        a, b = claim.sides(groups)
        if not claim.has_seeds(a, b):
            continue
        for step, iv in contrasts_by_step(a, b):
            hits["all"] += 1
            hits["hit"] += int(iv.p is not None and iv.p < claims_lib.ALPHA)
            rows.append([claim.id, step, f"{iv.n_a}/{iv.n_b}", f"{iv.diff:+.4f}", iv.text(3), f"{iv.p:.3g}"])
    rate = (f"Welch p < {claims_lib.ALPHA} in {hits['hit']} of {hits['all']} contrasts "
            f"({hits['hit'] / hits['all']:.0%})" if hits["all"] else "no contrast yet")
    return Section("Noise floor: the A/A false-positive rate", "Every A/A split and the machine re-run, where no "
                   "difference exists, once it has its registered seeds a side (as its verdict), at every validation "
                   "step both sides evaluated (at least 2 records a side there): "
                   f"{rate}; the nominal rate is 5% (steps of one run are not independent). The verdicts above give "
                   "the same contrasts at 7,200 steps with Holm's correction within their family.",
                   ["claim", "step", "n a/b", "Δ NLL", "Welch 95%", "p"], rows, "noise_floor.csv")


def machine_section(groups) -> Section:
    rows = []
    for _, rec in list(groups.get(A["replicate"], ())) + list(groups.get(SAME_MACHINE, ())):
        first = original(rec)
        diffs = [abs(rec.valid_nll_at(s) - first.valid_nll_at(s)) for s in rec.curve.valid_step
                 if first is not None and None not in (rec.valid_nll_at(s), first.valid_nll_at(s))]
        rows.append([rec.name, machine_text(first) if first else "not recorded", machine_text(rec),
                     max(diffs) if diffs else None, rec.commit, first.commit if first else None])
    return Section("The same points on two machines", "Each re-run against the run it repeats (same config, seed and "
                   "data order): the machines, and the largest |Δ validation NLL| over the validation steps.",
                   ["point", "machine (first run)", "machine (re-run)", "largest |Δ NLL|", "commit (re-run)",
                    "commit (first)"], rows, "machines.csv")


def waiting() -> str | None:
    """Why the long arms cannot start yet (one line), None when every row has its rate."""
    pending = [row for row, c in CHOICES.items() if c.rate is None]
    return None if not pending else (f"single_head: the learning-rate arm has not chosen the rate of {pending} "
                                     "yet: run `python -m studies train single_head_lr` until it trains nothing")


READING = ("the reading rule, `answer` in `studies/specs/single_head.py`, fixed before the data: *L h1x6* "
           "and *R h1* after Holm; h = 1 below h = 8 with the interval excluding 0 is \"survives\", the paper's "
           "penalty or no difference within the margin is \"gone\"; an A/A split that differs is a caveat")
STUDY = Study(
    name="single_head", title="Single head, settled: per-row rates, 3x the budget, the paper's recipe, d_k apart",
    out="docs/results/single_head", arms=tuple(arm(name) for name in ARMS), setting=setting, claims=CLAIMS,
    retests=RETESTS,
    protocol=(
        "Protocol (`configs/single_head.py`): the Table 3 CPU-scale model (d_model 128, d_ff 512, 3+3 layers, pre-LN "
        "without dropout or QK-LayerNorm, rsqrt schedule with 100 warmup steps, batch 8 x 128 tokens) for 7,200 "
        "steps (3x Table 3's; 7.6 epochs), validation NLL every 600 steps, every test sentence decoded at the end. "
        "Rows h = 1, 2, 8, 32 (d_k = 128 / h) and rows (B) d_k 4, each at its own rate from the lr arm; h = 1 and "
        "h = 8 at seeds 0-5, the others 0-2. The paper's recipe: h = 1 and 8 post-LN, dropout 0.1, 800 warmup "
        "steps (seeds 0-2). Heads vs depth: 1 head x 6+6 (d_k 64, against 2 heads x 3+3 at the same d_k) and 1 "
        "head x 24+24 (d_k 16, Liu et al.'s construction; the longest budget that keeps the 8-head comparison: "
        "about 1.1 h a point, estimated at registration from heads_vs_depth's 24+24 points at 2,400 steps). Noise "
        "floor: h = 8 at seeds 6-11 (four A/A splits) and seeds 0-2 re-run on another machine "
        "(`points/replicate`, trained after rows h = 2, 32 and (B))."),
    metrics=("nll", "ppl", "bleu", "chrf", "wall", "cpu"), command=COMMAND, notes=(
        "The answer follows " + READING + ".",
        "Running: `scripts/single_head.sh` (nice 19, resumable; one copy, or named workers that share the points: "
        "docs/studies.md) trains the lr arm until it trains nothing, then this study; `python -m studies train "
        "single_head` refuses in one line while a row has no rate. The arms the answer reads train first (h = 1 and "
        "8 at seeds 0-5, then the paper's recipe), then rows h = 2, 32 and (B), the replicate arm (until "
        "2026-12-07 it came last; rows h = 2, 32 and (B) were the first to train on another machine than the h = 8 "
        "records they are compared with), heads vs depth and the A/A seeds. A re-run on its first runs' machine is "
        "set apart (\"same machine again\") and leaves *M machines* unresolved. A machine is "
        "its record's name (`ATTNLAB_MACHINE=<name>`, default the host name), CPU (model name, generation and vector "
        "instructions, in records since 2026-12-07) and device, and the boot "
        "id of each training call: machines cloned from one image share the rest, so a re-run is on another "
        "machine only where both records know every call's boot and share none (a reboot of one machine also "
        "reads as another; the h8-s0 records' boot was added to the spec after they were recorded: "
        "`FIRST_RUN_BOOTS`)."),
    sections=(answer_section, floor_section, machine_section),
    margins_note=(f"The equivalence margins (each claim's, in the spec), the magnitude rule (`judge` in "
                  f"`studies/claims.py`) and the reading rule of the answer were committed with the claims at "
                  f"{COMMIT[:7]}, before any point of this study or its lr arm trained: the sizes are pre-registered "
                  "readings too, as far as each claim's registration holds."),
    quick=lambda a, p: a.name in ("h1-s0", "h8-s0", "recipe-h1", "h1_L6", "h1_L24", "aa-s6"), ready=waiting)
STUDIES = (STUDY,)
