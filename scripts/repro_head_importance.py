"""Which heads matter? Michel, Voita and Vashishth et al. on the translation model, 8 heads per layer.

The study is ``studies/specs/head_importance.py`` (measurements, claims, report); this is its command line.

    python scripts/repro_head_importance.py --out /tmp/hi   # 3 seeds + 1 uniform x 12 min; a rerun reuses /tmp/hi/points
    python scripts/repro_head_importance.py --report_only    # docs/results/head_importance/ from its records
    python scripts/repro_head_importance.py --report_only --out docs/results/head_importance/replication
    python scripts/repro_head_importance.py --quick --out /tmp/hi_quick   # seconds: tiny sizes, for tests
    python scripts/repro_head_importance.py --pretrained ckpt/opus-mt-es-en --out /tmp/hi_marian  # a checkpoint
"""
from __future__ import annotations

import argparse

from studies.specs import head_importance as study


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
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
    if a.pretrained and a.out is None:
        raise SystemExit(f"--pretrained={a.pretrained} needs --out (the committed report folder is the study's)")
    a.out = a.out or study.OUT
    if a.report_only:
        path = study.report_from_records(a.out)
        print(f"wrote {path}")
        return path
    if a.uniform_seeds is None:  # --quick: a second training would cost the test half its time
        a.uniform_seeds = 0 if a.quick else 1
    if a.quick:
        a.seeds, a.eval_batches, a.sentences = 1, 1, min(a.sentences, 8)
    for name in ("seeds", "eval_batches", "steps", "sentences"):
        if getattr(a, name) < 1:
            raise SystemExit(f"--{name}={getattr(a, name)}; expected a positive int")
    for name in ("first_seed", "uniform_seeds"):
        if getattr(a, name) < 0:
            raise SystemExit(f"--{name}={getattr(a, name)}; expected an int >= 0")
    if not a.minutes >= 0:
        raise SystemExit(f"--minutes={a.minutes}; expected a number >= 0 (0: no time limit)")
    if a.pretrained:
        path = study.run_pretrained(a.pretrained, a.out, eval_batches=a.eval_batches, sentences=a.sentences,
                                    quick=a.quick, attention_impl=a.attention_impl)
    else:
        study.run(a)
        path = study.report_from_records(a.out)
    print(f"wrote {path}")
    return path


if __name__ == "__main__":
    from engine import cli

    cli.script(main)
