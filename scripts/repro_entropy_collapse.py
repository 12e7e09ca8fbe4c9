"""Reproduction 4: attention entropy collapse and training instability (Zhai et al. 2023), seen by the health

The study is ``studies/specs/entropy_collapse.py`` (points, claims, report); this is its command line.

    python scripts/repro_entropy_collapse.py                  # train the points without a record, then the report
    python scripts/repro_entropy_collapse.py --report_only    # the report from the committed records
    python scripts/repro_entropy_collapse.py --quick          # tiny sizes, one seed; for tests
"""
from __future__ import annotations

import sys

from studies.specs import entropy_collapse

main = entropy_collapse.run

if __name__ == "__main__":
    from engine import cli

    sys.exit(0 if cli.script(main) else 1)
