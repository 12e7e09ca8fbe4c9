"""The command lines of the studies whose spec writes its own report (no ``STUDIES``): what
``python -m studies train <name> [arguments]`` runs for them, each with its own ``--help``, and the training and
measuring they orchestrate (induction, head importance, the doctor's calibration checkpoints); their specs keep
the claims, records and reports.

    python -m studies train induction --quick --out=/tmp/induction
    python -m studies train head_importance --out=/tmp/hi   # 3 seeds + 1 uniform x 12 min; reruns reuse its points/
    python -m studies train head_importance --pretrained=ckpt/opus-mt-es-en --out=/tmp/hi_marian   # a checkpoint
    python -m studies train explanation --pretrained=ckpt/bert-cls --out=/tmp/ex_bert   # forward-only tests
    python -m studies train diagnose --only=tr-main     # the doctor on some of its calibration checkpoints
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import subprocess
import sys
from typing import Any, Callable, Optional, Sequence

import numpy as np

from analysis import HeadScores, head_label, icl_score, phase_change_step, transition
from analysis.heads import ablate, icl_windows, score_rows, share_lost
from studies.inprocess import config_path, history, load, points, with_overrides
from studies.report import REPO, environment_line, write_csv
from studies.specs import diagnose, explanation, head_importance, induction


def _positive(args: argparse.Namespace, names: Sequence[str], lowest: int = 1) -> None:
    """Raise ValueError naming the first of ``names`` whose value in ``args`` is below ``lowest``."""
    for name in names:
        if getattr(args, name) < lowest:
            raise ValueError(f"--{name}={getattr(args, name)}; expected an int >= {lowest}")


# ------------------------------------------------------------------------------------------------ induction heads
def induction_run(spec: str, overrides: dict, early: tuple[int, int], late: tuple[int, int]) -> dict:
    """One training run through ``engine.run`` with the ``HeadScores`` hook, and its ablations: ``steps`` of the
    ICL ``scores``, ``final`` ICL score, ``phase`` change, ``window`` of the fall, head scores ``prev`` / ``prefix``
    ([steps, L, H]), ``ablation`` (condition, heads, ICL score) triples, and from the history ``train_step``,
    ``train_loss``, ``position_loss`` (final, [T]), ``accuracy``, ``params``, ``seconds``."""
    import engine

    config = with_overrides(load(spec), overrides)
    hook = HeadScores(int(config.train.eval_every))
    h = history(engine.run(config, hooks=[hook]), config)
    steps, final = h["position_loss_step"], h["eval_position_loss"]
    if hook.steps != steps:
        raise RuntimeError(f"head scores measured at steps {hook.steps}, the ICL score at {steps}; they must be the "
                           "same")
    scores = [icl_score(p, early, late) for p in h["position_loss"]]
    return {"steps": steps, "scores": scores, "final": math.nan if final is None else icl_score(final, early, late),
            "phase": phase_change_step(steps, scores), "window": transition(steps, scores),
            "prev": np.stack(hook.prev), "prefix": np.stack(hook.prefix), "ablation": ablate(hook, early, late),
            "train_step": h["step"], "train_loss": h["loss"], "position_loss": final,
            "accuracy": h["eval_accuracy"], "params": h["params"], "seconds": h["seconds"]}


def induction_measure(out: str, *, seeds: Sequence[int], steps: Optional[int] = None, quick: bool = False) -> None:
    """Train 1 and 2 layers x ``seeds`` and write the records into ``out``."""
    spec = config_path("repro_induction") + ":" + ",".join(
        x for x in ("quick" if quick else "", f"steps={steps}" if steps else "") if x)
    base = load(spec)
    if int(base.train.num_steps) < 2:
        raise ValueError(f"steps={base.train.num_steps}: the ICL score needs two measurements")
    early, late = icl_windows(base.data.seq_len)
    summary, scores, ablation, curves = [], [], [], []
    for layers in sorted({p.overrides["model.num_decoder_layers"] for p in points(spec)}):
        for seed in seeds:
            r = induction_run(spec, {"model.num_decoder_layers": layers, "seed": seed}, early, late)
            p, (lo, hi) = r["position_loss"], r["window"]
            summary.append([layers, seed, r["params"], r["scores"][0], r["final"], r["phase"],
                            None if lo is None else f"{lo}→{hi}", float(np.nanmean(p[late[0]:late[1]])),
                            float(np.nanmean(p[early[0]:early[1]])), r["accuracy"], round(r["seconds"])])
            scores += [[layers, seed, r["steps"][i], layer, head, p, q, r["scores"][i]]
                       for i, layer, head, p, q in score_rows(r["prev"], r["prefix"])]
            ablation += [[layers, seed, c, head_label(heads), icl, share_lost(r["ablation"], c)]
                         for c, heads, icl in r["ablation"]]
            curves += [[layers, seed, "train loss", s, v] for s, v in zip(r["train_step"], r["train_loss"])]
            curves += [[layers, seed, "held-out loss by position", t, float(v)] for t, v in enumerate(p)]
            print(f"{layers} layer(s), seed {seed}: final ICL score {r['final']:.3f}, phase change at {r['phase']}",
                  flush=True)
    os.makedirs(out, exist_ok=True)
    for name, headers, rows in (
            ("summary", ["parameters", "ICL score (start)", "ICL score (end)", "phase change at step",
                         "10%→90% of the fall (steps)", "loss late (end)", "loss early (end)",
                         "accuracy on repeats (end)", "seconds"], summary),
            ("scores", ["step", "layer", "head", "previous-token score", "prefix-matching score", "ICL score"], scores),
            ("ablation", ["masked", "head", "ICL score", "share of the drop lost"], ablation),
            ("curves", ["curve", "x", "value"], curves)):
        write_csv(os.path.join(out, f"{name}.csv"), ["attention layers", "seed"] + headers, rows)
    with open(os.path.join(out, "run.json"), "w") as f:
        json.dump({"seeds": list(seeds), "steps": int(base.train.num_steps), "quick": quick,
                   "measured": environment_line()}, f, indent=1)


def induction_main(argv: Optional[Sequence[str]] = None) -> str:
    """Induction heads (``studies/specs/induction.py``): measure 1 vs 2 attention-only layers, then the report;
    the README path."""
    parser = argparse.ArgumentParser(prog="python -m studies train induction", description=induction.OLSSON)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, runs in seconds (for tests)")
    parser.add_argument("--out", default=None, help="report folder (default docs/results/induction, or "
                        "runs/repro/induction_quick with --quick)")
    parser.add_argument("--seeds", default=None, help="comma-separated seeds (default 0,1,2; 0 with --quick)")
    parser.add_argument("--steps", type=int, default=None, help="training steps per run (default 1500; 4 quick)")
    parser.add_argument("--report_only", action="store_true", help="the report from the records in --out")
    args = parser.parse_args(argv)
    out = args.out or (os.path.join(REPO, "runs/repro/induction_quick") if args.quick else induction.OUT)
    if not args.report_only:
        try:
            seeds = [int(s) for s in (args.seeds or ("0" if args.quick else "0,1,2")).split(",")]
        except ValueError:
            raise ValueError(f"--seeds={args.seeds!r}; expected comma-separated ints")
        if args.steps is not None and args.steps < 2:
            raise ValueError(f"--steps={args.steps}; expected >= 2 (the ICL score needs two measurements)")
        induction_measure(out, seeds=seeds, steps=args.steps, quick=args.quick)
    path = induction.report(out)
    print(f"wrote {path}")
    return path


def _measure_then_report(a: argparse.Namespace, default_out: str, measure: Callable[[], Optional[str]],
                         report: Callable[[str], str]) -> str:
    """What the studies that also take a ``--pretrained`` checkpoint share: it needs ``--out`` (the default folder
    is the study's committed report); ``measure()`` unless ``--report_only`` (it returns the README path when it
    writes the report itself), else ``report(out)`` regenerates it from the records; the README path."""
    if a.pretrained and a.out is None:
        raise ValueError(f"--pretrained={a.pretrained} needs --out (the committed report folder is the study's)")
    a.out = a.out or default_out
    path = None if a.report_only else measure()
    path = path or report(a.out)
    print(f"wrote {path}")
    return path


def explanation_main(argv: Optional[Sequence[str]] = None) -> str:
    """Is attention explanation (``studies/specs/explanation.py``): train and measure the classifiers (or measure a
    pretrained checkpoint's forward tests), then the report; the README path."""
    ap = argparse.ArgumentParser(prog="python -m studies train explanation", description=explanation.JW)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--examples", type=int, default=200, help="test verses analysed per seed")
    ap.add_argument("--permutations", type=int, default=100)
    ap.add_argument("--epsilon", type=float, default=0.01, help="output TVD allowed for adversarial attention")
    ap.add_argument("--adv_steps", type=int, default=300)
    ap.add_argument("--quick", action="store_true", help="tiny sizes and a few steps (tests)")
    ap.add_argument("--pretrained", default="", help="a checkpoint (directory or hub id: BERT with a classification "
                    "head, GPT-2, Llama) measured instead of training; needs --out")
    ap.add_argument("--attention_impl", default="auto", help="attention backend of the --pretrained model")
    ap.add_argument("--out", default=None, help="report folder (default docs/results/explanation)")
    ap.add_argument("--report_only", action="store_true", help="the report from the records in --out; no training")
    a = ap.parse_args(argv)
    if a.pretrained and a.report_only:
        raise ValueError(f"--pretrained={a.pretrained} measures (no --report_only): its report has no records")

    def measure() -> Optional[str]:
        if a.pretrained:
            return explanation.run_pretrained(a.pretrained, a.out, examples=min(a.examples, 8) if a.quick else
                                              a.examples, permutations=a.permutations,
                                              attention_impl=a.attention_impl)
        if a.quick:
            a.seeds, a.examples, a.adv_steps = 1, min(a.examples, 8), 20
        _positive(a, ("seeds", "steps", "examples", "permutations", "adv_steps"))
        if a.permutations < 100 and not a.quick:
            raise ValueError(f"--permutations={a.permutations}; the protocol takes the median over >= 100")
        if not a.epsilon > 0:
            raise ValueError(f"--epsilon={a.epsilon}; expected a positive output TVD")
        explanation.measure(a.out, seeds=a.seeds, steps=a.steps, examples=a.examples, permutations=a.permutations,
                            epsilon=a.epsilon, adv_steps=a.adv_steps, quick=a.quick)
        return None

    return _measure_then_report(a, explanation.OUT, measure, explanation.report)


def head_importance_main(argv: Optional[Sequence[str]] = None) -> str:
    """Which heads matter (``studies/specs/head_importance.py``): train the translation models (or take a pretrained
    encoder-decoder) and measure their heads, then the report; the README path."""
    ap = argparse.ArgumentParser(prog="python -m studies train head_importance",
                                 description="Michel, Voita and Vashishth et al. on the translation model")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first_seed", type=int, default=0, help="seeds first_seed .. first_seed + seeds - 1 (and as "
                    "many uniform-baseline seeds from first_seed)")
    ap.add_argument("--uniform_seeds", type=int, default=None,
                    help="seeds of the uniform-cross-attention baseline (default 1; 0 with --quick)")
    ap.add_argument("--minutes", type=float, default=12.0, help="training time budget per run (0: none)")
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--eval_batches", type=int, default=4, help="validation batches (64 sentences) for NLL")
    ap.add_argument("--sentences", type=int, default=300, help="test sentences decoded for every BLEU")
    ap.add_argument("--workdir", default="", help="directory of the training runs (<workdir>/seed<s>, "
                    "uniform<s>): checkpoints, metrics.jsonl, W&B; an interrupted run resumes (default: in memory)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes and a few steps (tests)")
    ap.add_argument("--pretrained", default="", help="measure this encoder-decoder checkpoint (a directory in the "
                    "standard layout or a hub id, e.g. Helsinki-NLP/opus-mt-es-en) instead of training; needs --out")
    ap.add_argument("--attention_impl", default="auto", help="attention backend of the --pretrained model")
    ap.add_argument("--out", default=None, help="report folder; its points/ holds the records (a model with a "
                    "record is not measured again; default docs/results/head_importance)")
    ap.add_argument("--report_only", action="store_true", help="the report from the records in --out; no training")
    a = ap.parse_args(argv)

    def measure() -> None:
        if a.uniform_seeds is None:  # --quick: a second training would cost the test half its time
            a.uniform_seeds = 0 if a.quick else 1
        if a.quick:
            a.seeds, a.eval_batches, a.sentences = 1, 1, min(a.sentences, 8)
        _positive(a, ("seeds", "eval_batches", "steps", "sentences"))
        _positive(a, ("first_seed", "uniform_seeds"), lowest=0)
        if not a.minutes >= 0:
            raise ValueError(f"--minutes={a.minutes}; expected a number >= 0 (0: no time limit)")
        if a.pretrained:
            head_importance_pretrained(a.pretrained, a.out, eval_batches=a.eval_batches, sentences=a.sentences,
                                       quick=a.quick, attention_impl=a.attention_impl)
        else:
            head_importance_run(a)

    return _measure_then_report(a, head_importance.OUT, measure, head_importance.report_from_records)


HEAD_IMPORTANCE_CHECKPOINT_EVERY = 200  # steps between checkpoints of a head-importance run trained with --workdir


def _measured_now() -> dict[str, str]:
    """The commit of this process and the UTC minute now, as a measurement records them."""
    import time

    from studies.report import PROCESS_COMMIT

    return {"commit": PROCESS_COMMIT, "measured_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}


def head_importance_run(a: argparse.Namespace) -> None:
    """Train and measure every seed of ``a`` (``head_importance_main``'s arguments) and of the uniform baseline into
    records under ``a.out`` (a model with a record is skipped), with the settings in ``<a.out>/run.json``."""
    import time

    from analysis.importance import Probe, measure, record, trained_subject
    from studies.importance_summary import recorded
    from analysis.keep import train_kept
    from studies.inprocess import load, with_overrides

    hi = head_importance
    settings = {k: getattr(a, k) for k in ("seeds", "first_seed", "uniform_seeds", "minutes", "steps", "eval_batches",
                                           "sentences", "workdir", "quick")}
    settings["out"] = os.path.relpath(os.path.abspath(a.out), REPO)
    spec, tag, t0 = hi.spec_of(settings), "quick_" if a.quick else "", time.time()

    def log(msg: str) -> None:
        print(f"[{(time.time() - t0) / 60:5.1f} min] {msg}", flush=True)

    def trained(seed: int, kind: str, overrides: dict):
        config = with_overrides(load(os.path.join(REPO, spec)), {"seed": seed, **overrides})
        if a.workdir:
            config.train.checkpoint_every = HEAD_IMPORTANCE_CHECKPOINT_EVERY
        keep, info = train_kept(config, os.path.join(a.workdir, f"{tag}{kind}{seed}") if a.workdir else None)
        log(f"{kind} {seed}: {info['steps']} steps in {info['train_minutes']:.1f} min")
        return keep, dict(info, seed=seed, **_measured_now())

    def seed_run(s: int):
        keep, info = trained(s, "seed", {})
        subject = trained_subject(keep, a.eval_batches, a.sentences)
        m = dict(info, **measure(subject, s, hi.QUICK_FRACTIONS if a.quick else hi.FRACTIONS, log))
        return m, lambda m: record(m, f"{tag}seed{s}", spec, {"seed": s})

    def uniform_run(s: int):
        keep, info = trained(s, "uniform", {"model.uniform_attention_groups": ("cross",)})
        p = Probe(trained_subject(keep, a.eval_batches, a.sentences))
        info.update(base_nll=p.nll(None), base_bleu=p.bleu(None, keep_as="unmasked"), decoded=p.decoded)
        return info, lambda m: record(m, f"{tag}uniform{s}", spec,
                                      {"seed": s, "model.uniform_attention_groups": ["cross"]})

    for s in range(a.first_seed, a.first_seed + a.seeds):
        recorded(os.path.join(a.out, hi.POINTS, f"{tag}seed{s}.json"), os.path.join(a.out, hi.DECODED, f"seed{s}"),
                 lambda: seed_run(s))
    for s in range(a.first_seed, a.first_seed + a.uniform_seeds):
        recorded(os.path.join(a.out, hi.POINTS, f"{tag}uniform{s}.json"),
                 os.path.join(a.out, hi.DECODED, f"uniform_cross_seed{s}"), lambda: uniform_run(s))
    with open(os.path.join(a.out, hi.RUN), "w") as f:
        json.dump(settings, f, indent=1)


def head_importance_pretrained(source: str, out: str, *, eval_batches: int, sentences: int, quick: bool = False,
                               attention_impl: str = "auto") -> None:
    """Measure the pretrained encoder-decoder ``source`` (a checkpoint directory or hub id) into
    ``<out>/points/pretrained.json`` (kept: a rerun reports from it)."""
    from analysis.importance import measure, pretrained_subject, record
    from studies.importance_summary import recorded
    from pretrained import load as load_pretrained

    hi = head_importance

    def make():
        p = load_pretrained(source, attention_impl=attention_impl)
        subject = pretrained_subject(p, eval_batches, sentences, **({"batch_size": 8, "max_len": 12} if quick else {}))
        m = dict(measure(subject, 0, hi.QUICK_FRACTIONS if quick else hi.FRACTIONS), **_measured_now())
        return m, lambda m: dict(record(m, "pretrained", "", {}), pretrained=source, family=p.family,
                                 eval_batches=eval_batches, sentences=sentences, quick=quick)

    recorded(os.path.join(out, hi.POINTS, "pretrained.json"), os.path.join(out, hi.DECODED, "pretrained"), make)

# ------------------------------------------------------------------------------------ the doctor's calibration
DIAGNOSE_RECORDS = os.path.join(REPO, "docs", "results", "diagnose", "records")
DIAGNOSE_STEPS = 300  # healthy runs; planted faults train DIAGNOSE_FAULT_STEPS (the model settles on its fault)
DIAGNOSE_FAULT_STEPS = 200


def _faults(task: str, fault: str, d_model: int = 64, heads: int = 4, steps: int = DIAGNOSE_FAULT_STEPS) -> str:
    return f"configs/faults.py:task={task},d_model={d_model},heads={heads},steps={steps},fault={fault}"


# name -> (planted fault, "" for a healthy run; config; its --config.* overrides)
DIAGNOSE_CHECKPOINTS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "tr-main": ("", f"configs/translation.py:d_model=64,d_ff=256,layers=2,steps={DIAGNOSE_STEPS},minutes=0", {}),
    "tr-healthy": ("", _faults("translation", "healthy", steps=DIAGNOSE_STEPS), {}),
    "tr-healthy-h16": ("", _faults("translation", "healthy", heads=16, steps=DIAGNOSE_STEPS), {}),
    "tr-hard": ("", _faults("translation", "healthy", steps=DIAGNOSE_STEPS), {"model.attention_kind": "hard"}),
    "mqar-healthy": ("", _faults("mqar", "healthy", heads=2, steps=DIAGNOSE_STEPS), {}),
    "mqar-healthy-h16": ("", _faults("mqar", "healthy", d_model=128, heads=16, steps=DIAGNOSE_STEPS), {}),
    "induction-healthy": ("", _faults("induction", "healthy", heads=2, steps=DIAGNOSE_STEPS), {}),
    "cls-healthy": ("", f"configs/classification.py:steps={DIAGNOSE_STEPS}", {}),
    # trained to a solved state (one-hot attention): the settings whose committed records solved the task
    # (docs/results/health_calibration/points/qk_layernorm_*-learning_rate_*: accuracy 1.0 in 1,500 steps at lr
    # 3e-3 and 3e-2, seed 3, and with QK-LayerNorm at 3e-3, seed 4; docs/results/induction/: 2 layers, accuracy 1
    # on the repeats in 1,500 steps)
    "mqar-solved": ("", "configs/repro_entropy_collapse.py:lr=0.003,seed=3", {}),
    "mqar-solved-lr0.03": ("", "configs/repro_entropy_collapse.py:lr=0.03,seed=3", {}),
    "mqar-solved-qkln": ("", "configs/repro_entropy_collapse.py:lr=0.003,qk_layernorm=true,seed=4", {}),
    "induction-solved": ("", "configs/repro_induction.py:layers=2,seed=0", {}),
    **{f"tr-{f}": (f, _faults("translation", f), {}) for f in ("scale_missing", "scale_dk", "temperature_x10",
                                                              "no_padding_mask", "causal_leak")},
    **{f"mqar-{f}": (f, _faults("mqar", f, heads=2), {}) for f in ("scale_missing", "temperature_x10", "causal_leak",
                                                                   "logit_growth")},
}
DIAGNOSE_SPLIT_EXAMPLES = 16  # sentences decoded when a checkpoint's training ends (the doctor needs none)


def _flags(overrides: dict[str, Any]) -> list[str]:
    return [f"--config.{k}={v}" for k, v in overrides.items()]


def diagnose_checkpoint(name: str, runs: str, trained: dict) -> dict:
    """Run the doctor (``eval.py --diagnose``) on the trained checkpoint ``<runs>/<name>``, whose training record
    is ``trained`` (``studies.points.point_record``); return the calibration record."""
    from studies.records import Record
    from studies.report import PROCESS_COMMIT

    fault, config, extra = DIAGNOSE_CHECKPOINTS[name]
    workdir = os.path.join(runs, name)
    with open(os.path.join(runs, f"{name}.log"), "a") as log:
        subprocess.run([sys.executable, "eval.py", f"--config={config}", f"--workdir={workdir}", "--diagnose",
                        *_flags(extra)], cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO, WANDB_MODE="disabled"),
                       stdout=log, stderr=subprocess.STDOUT, check=True)
    report = sorted(glob.glob(os.path.join(workdir, "eval", "diagnose_step*", "report.json")))[-1]
    with open(report, encoding="utf-8") as f:
        r = json.load(f)
    minutes, validation = Record("", trained).wall_minutes, trained.get("validation", {})
    return {"name": name, "fault": fault, "config": config, "overrides": _flags(extra), "step": r["meta"]["step"],
            "summary": r["summary"], "commit": PROCESS_COMMIT,
            "train_minutes": None if minutes is None else round(minutes, 4),
            "validation_accuracy": validation.get("accuracy"), "validation_nll": validation.get("nll"),
            "findings": [[x["check"], x["group"], x["layer"], x["head"], x["value"], x["status"], x["cause"]]
                         for x in r["findings"]]}


def diagnose_main(argv: Optional[Sequence[str]] = None) -> str:
    """The attention doctor on its calibration checkpoints (``studies/specs/diagnose.py``): train each of
    ``DIAGNOSE_CHECKPOINTS`` not finished under ``--runs`` (``studies.runner.train_jobs``; training records in
    ``<runs>/records/``), run ``eval.py --diagnose`` on it, keep one record per checkpoint in
    ``docs/results/diagnose/records/``, then the report; the README path."""
    from studies.points import Point
    from studies.runner import Job, train_jobs

    p = argparse.ArgumentParser(prog="python -m studies train diagnose", description=diagnose.__doc__.splitlines()[0])
    p.add_argument("--only", default="", help="comma-separated checkpoint names (default: all)")
    p.add_argument("--runs", default="/tmp/attnlab-diagnose", help="where the workdirs live (a trained one is reused)")
    a = p.parse_args(argv)
    names = [n for n in a.only.split(",") if n] or list(DIAGNOSE_CHECKPOINTS)
    unknown = [n for n in names if n not in DIAGNOSE_CHECKPOINTS]
    if unknown:
        raise ValueError(f"--only: unknown checkpoints {unknown}; expected some of {list(DIAGNOSE_CHECKPOINTS)}")
    runs = os.path.abspath(a.runs)
    os.makedirs(DIAGNOSE_RECORDS, exist_ok=True)
    jobs = [Job(DIAGNOSE_CHECKPOINTS[n][1], Point(n, {"eval.split_examples": DIAGNOSE_SPLIT_EXAMPLES,
                                                       **DIAGNOSE_CHECKPOINTS[n][2]}),
                runs, os.path.join(runs, "records", f"{n}.json")) for n in names]

    def after(path: str, point: Point) -> None:
        with open(path, encoding="utf-8") as f:
            record = diagnose_checkpoint(point.name, runs, json.load(f))
        with open(os.path.join(DIAGNOSE_RECORDS, f"{point.name}.json"), "w", encoding="utf-8") as f:
            json.dump(record, f, indent=0)
            f.write("\n")
        print(f"{point.name}: {record['summary']}", flush=True)

    failed = train_jobs(jobs, after=after, group="diagnose")
    path = diagnose.generate()[0]
    print(f"wrote {path}")
    if failed:
        raise RuntimeError(f"diagnose: the training of {failed} failed; see their logs under {runs}")
    return path


COMMAND_LINES: dict[str, Callable[[Optional[Sequence[str]]], str]] = {
    "diagnose": diagnose_main, "explanation": explanation_main, "head_importance": head_importance_main,
    "induction": induction_main}
