"""Induction heads and the in-context-learning phase change (Olsson et al. 2022), 1 vs 2 attention-only layers.

The study is ``studies/specs/induction.py`` (runs, records, claims, report); this is its command line.

    python scripts/repro_induction.py                 # about 10 minutes on 2 CPU cores -> docs/results/induction/
    python scripts/repro_induction.py --report_only   # the report from the committed records (no training)
    python scripts/repro_induction.py --quick --out /tmp/induction   # seconds; for tests
"""
from __future__ import annotations

import argparse
import os
from typing import Optional, Sequence

from studies.report import REPO
from studies.specs import induction


def main(argv: Optional[Sequence[str]] = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
            raise SystemExit(f"--seeds={args.seeds!r}; expected comma-separated ints")
        if args.steps is not None and args.steps < 2:
            raise SystemExit(f"--steps={args.steps}; expected >= 2 (the ICL score needs two measurements)")
        induction.measure(out, seeds=seeds, steps=args.steps, quick=args.quick)
    path = induction.report(out)
    print(f"wrote {path}")
    return path


if __name__ == "__main__":
    from engine import cli

    cli.script(main)
