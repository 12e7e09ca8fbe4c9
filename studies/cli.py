"""``python -m studies``: list the registered studies, train a study's missing points, regenerate reports, run a
config's sweep.

    python -m studies list
    python -m studies train table3_d256 [--max_points=3] [--quick]   # resumable; never retrains a recorded point
    python -m studies train table3 --report_only  # train nothing: the reports of its spec module, as `report`
    python -m studies train induction --help  # a spec with its own report: its own command line (studies.commands)
    python -m studies report table3_d256      # the reports of its spec module, from the records (no training)
    python -m studies report                  # every registered report, then docs/results/README.md
    python -m studies index                   # docs/results/README.md only
    python -m studies sweep --config=configs/mqar_grid.py:quick   # any config's sweep() (studies.sweeps)
"""
from __future__ import annotations

import argparse
import sys
from types import ModuleType
from typing import Callable, Optional, Sequence

from studies import index, specs
from studies import study as study_lib


def command_line(module: ModuleType) -> Optional[Callable[[Optional[Sequence[str]]], str]]:
    """The command line of a spec module that writes its own report (no ``STUDIES``): its ``main(argv)``, else the
    one in ``studies.commands``; None for a module of ``STUDIES`` (the generic ``train``)."""
    if hasattr(module, "STUDIES"):
        return None
    if hasattr(module, "main"):
        return module.main
    from studies import commands

    name = module.__name__.rsplit(".", 1)[1]
    found = commands.COMMAND_LINES.get(name)
    if found is None:
        raise ValueError(f"study {name!r} writes its own report but has no command line (a main(argv))")
    return found


def listing() -> list[str]:
    """One line per registered study: "<name>: <title> (<report folder>)"."""
    lines = []
    for module in specs.modules():
        if hasattr(module, "STUDIES"):
            lines += [f"{s.name}: {s.title} ({s.out})" for s in module.STUDIES]
        else:
            name = module.__name__.rsplit(".", 1)[1]
            lines += [f"{name}: {row.title} ({row.out})" for row in module.summary()]
    return lines


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["sweep"]:
        from studies import sweeps

        return sweeps.main(argv[1:])
    if argv[:1] == ["train"] and len(argv) > 1 and not argv[1].startswith("-"):
        custom = command_line(specs.find(argv[1]))
        if custom is not None:
            custom(argv[2:])
            return 0
    parser = argparse.ArgumentParser(prog="python -m studies", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the registered studies")
    t = sub.add_parser("train", help="train the points of a study that have no record")
    t.add_argument("name")
    t.add_argument("--quick", action="store_true", help="tiny sizes into runs/repro/<name>_quick (for tests)")
    t.add_argument("--max_points", type=int, default=None, help="train at most this many missing points")
    t.add_argument("--workdir", default=None, help="run folders (default runs/repro/<name>[_quick])")
    t.add_argument("--out", default=None, help="report and records folder (default the study's)")
    t.add_argument("--train_script", default=None, help="training entry point (default <repo>/train.py)")
    t.add_argument("--report_only", action="store_true", help="train nothing; the committed reports of its spec "
                   "module, as `report <name>` (not with --quick or --out)")
    r = sub.add_parser("report", help="regenerate reports from the records")
    r.add_argument("names", nargs="*")
    sub.add_parser("index", help="regenerate docs/results/README.md")
    sub.add_parser("sweep", help="run a config's sweep(), then aggregate it (--help: its own options)")
    args = parser.parse_args(argv)
    if args.command == "list":
        print("\n".join(listing()))
        return 0
    if args.command == "train":
        if args.max_points is not None and args.max_points < 0:
            raise ValueError(f"--max_points={args.max_points}; expected a number >= 0")
        if args.report_only and (args.quick or args.out is not None):
            given = "--quick" if args.quick else f"--out={args.out}"
            raise ValueError(f"--report_only with {given}; --report_only writes the committed reports only")
        module = specs.find(args.name)
        study = specs.study(args.name)
        failed = [] if args.report_only else study_lib.train(
            study, quick=args.quick, max_points=args.max_points, out=args.out, workdir=args.workdir,
            train_script=args.train_script)
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
