"""``python -m studies``: list the registered studies, train a study's missing points, regenerate reports.

    python -m studies list
    python -m studies train table3_d256 [--max_points=3] [--quick]   # resumable; never retrains a recorded point
    python -m studies report table3_d256      # the reports of its spec module, from the records (no training)
    python -m studies report                  # every registered report, then docs/results/README.md
    python -m studies index                   # docs/results/README.md only

``study_main`` is the command line every ``scripts/repro_<study>.py`` shares.
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from studies import index, specs
from studies import study as study_lib


def study_main(name: str, argv: Optional[Sequence[str]] = None, doc: str = "") -> int:
    """The command line of one study's script (``scripts/repro_<name>.py``): ``--report_only`` regenerates its
    reports from the records; otherwise its points without a record train first (``--max_points``, ``--quick``,
    ``--workdir``, ``--out``, ``--train_script`` as ``python -m studies train``)."""
    parser = argparse.ArgumentParser(description=(doc or __doc__).splitlines()[0])
    parser.add_argument("--report_only", action="store_true", help="train nothing; the reports from the records")
    parser.add_argument("--quick", action="store_true", help="tiny sizes into runs/repro/<name>_quick (for tests)")
    parser.add_argument("--max_points", type=int, default=None, help="train at most this many missing points")
    parser.add_argument("--workdir", default=None, help="run folders (default runs/repro/<name>[_quick])")
    parser.add_argument("--out", default=None, help="records folder (default the study's)")
    parser.add_argument("--train_script", default=None, help="training entry point (default <repo>/train.py)")
    args = parser.parse_args(argv)
    if args.report_only:
        return main(["report", name])
    rest = [f"--{k}={v}" for k, v in (("max_points", args.max_points), ("workdir", args.workdir), ("out", args.out),
                                      ("train_script", args.train_script)) if v is not None]
    return main(["train", name] + (["--quick"] if args.quick else []) + rest)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the registered studies")
    t = sub.add_parser("train", help="train the points of a study that have no record")
    t.add_argument("name")
    t.add_argument("--quick", action="store_true", help="tiny sizes into runs/repro/<name>_quick (for tests)")
    t.add_argument("--max_points", type=int, default=None)
    t.add_argument("--workdir", default=None)
    t.add_argument("--out", default=None, help="report and records folder (default the study's)")
    t.add_argument("--train_script", default=None)
    r = sub.add_parser("report", help="regenerate reports from the records")
    r.add_argument("names", nargs="*")
    sub.add_parser("index", help="regenerate docs/results/README.md")
    args = parser.parse_args(argv)
    if args.command == "list":
        for module in specs.modules():
            for s in getattr(module, "STUDIES", ()):
                print(f"{s.name}: {s.title} ({s.out})")
        return 0
    if args.command == "train":
        if args.max_points is not None and args.max_points < 0:
            raise ValueError(f"--max_points={args.max_points}; expected a number >= 0")
        module = specs.find(args.name)
        study = specs.study(args.name)
        failed = study_lib.train(study, quick=args.quick, max_points=args.max_points, out=args.out,
                                 workdir=args.workdir, train_script=args.train_script)
        if args.out is None and not args.quick:
            for path in specs.generate(module):
                print(f"wrote {path}")
        if failed:
            print(f"[studies] failed points: {failed}; rerun the same command to retry them", file=sys.stderr)
        return 1 if failed else 0
    if args.command == "report":
        modules = list(dict.fromkeys(specs.find(n) for n in args.names)) if args.names else specs.modules()
        for module in modules:
            for path in specs.generate(module):
                print(f"wrote {path}")
        if not args.names:
            print(f"wrote {index.write()}")
        return 0
    print(f"wrote {index.write()}")
    return 0
