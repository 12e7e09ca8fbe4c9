"""Is attention explanation? Jain & Wallace (2019) and Wiegreffe & Pinter (2019) on verse classification.

The study is ``studies/specs/explanation.py`` (claims, records, report); this is its command line.

    python scripts/repro_explanation.py                  # 3 seeds x 2000 steps -> docs/results/explanation/
    python scripts/repro_explanation.py --report_only    # the report from the committed records (no training)
    python scripts/repro_explanation.py --quick --out /tmp/explanation   # seconds: tiny sizes, for tests
    python scripts/repro_explanation.py --pretrained ckpt/bert-sst2 --out /tmp/bert   # a checkpoint (forward-only tests)
"""
from __future__ import annotations

import argparse

from studies.specs import explanation


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
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
    if a.pretrained:
        if a.out is None or a.report_only:
            raise SystemExit(f"--pretrained={a.pretrained} needs --out and measures (no --report_only)")
        path = explanation.run_pretrained(a.pretrained, a.out, examples=min(a.examples, 8) if a.quick else a.examples,
                                          permutations=a.permutations, attention_impl=a.attention_impl)
        print(f"wrote {path}")
        return path
    a.out = a.out or explanation.OUT
    if not a.report_only:
        if a.quick:
            a.seeds, a.examples, a.adv_steps = 1, min(a.examples, 8), 20
        for name in ("seeds", "steps", "examples", "permutations", "adv_steps"):
            if getattr(a, name) < 1:
                raise SystemExit(f"--{name}={getattr(a, name)}; expected a positive int")
        if a.permutations < 100 and not a.quick:
            raise SystemExit(f"--permutations={a.permutations}; the protocol takes the median over >= 100")
        if not a.epsilon > 0:
            raise SystemExit(f"--epsilon={a.epsilon}; expected a positive output TVD")
        explanation.measure(a.out, seeds=a.seeds, steps=a.steps, examples=a.examples, permutations=a.permutations,
                            epsilon=a.epsilon, adv_steps=a.adv_steps, quick=a.quick)
    path = explanation.report(a.out)
    print(f"wrote {path}")
    return path


if __name__ == "__main__":
    from engine import cli

    cli.script(main)
