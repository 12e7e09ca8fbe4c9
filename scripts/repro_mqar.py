"""Multi-query associative recall (Zoology) over num_heads x qk_dim (the study's spec, claims and conditions:
``studies/specs/mqar.py``; its report: ``docs/results/mqar``).

    python scripts/repro_mqar.py                 # train the points without a record, then the report
    python scripts/repro_mqar.py --report_only   # the report from the committed records
    python scripts/repro_mqar.py --quick         # tiny models, one seed (for tests)
"""
import sys

from studies.cli import study_main

if __name__ == "__main__":
    from engine import cli

    sys.exit(cli.script(study_main, "mqar", sys.argv[1:], __doc__))
