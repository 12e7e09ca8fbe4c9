"""Attention variants on multi-query associative recall (Zoology) (the study's spec, claims and conditions:
``studies/specs/mqar_variants.py``; its report: ``docs/results/mqar_variants``).

    python scripts/repro_mqar_variants.py                 # train the points without a record, then the report
    python scripts/repro_mqar_variants.py --report_only   # the report from the committed records
    python scripts/repro_mqar_variants.py --quick         # tiny models, one seed (for tests)
"""
import sys

from studies.cli import study_main

if __name__ == "__main__":
    from engine import cli

    sys.exit(cli.script(study_main, "mqar_variants", sys.argv[1:], __doc__))
