"""Heads vs depth (Liu, Liu & Han 2021) at CPU scale (the study's spec, claims and conditions:
``studies/specs/heads_depth.py``; its report: ``docs/results/heads_vs_depth``).

    python scripts/repro_heads_depth.py                 # train the points without a record, then the report
    python scripts/repro_heads_depth.py --report_only   # the report from the committed records
    python scripts/repro_heads_depth.py --quick         # tiny models, one seed (for tests)
"""
import sys

from studies.cli import study_main

if __name__ == "__main__":
    from engine import cli

    sys.exit(cli.script(study_main, "heads_vs_depth", sys.argv[1:], __doc__))
