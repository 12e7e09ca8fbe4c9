"""Reproduction 3: attention logit growth, learning-rate sensitivity and its trend across widths (Wortsman et

The study is ``studies/specs/logit_growth.py`` (points, claims, report); this is its command line.

    python scripts/repro_logit_growth.py                  # train the points without a record, then the report
    python scripts/repro_logit_growth.py --report_only    # the report from the committed records
    python scripts/repro_logit_growth.py --quick          # tiny sizes, one seed; for tests
"""
from __future__ import annotations

import sys

from studies.specs import logit_growth

main = logit_growth.run

if __name__ == "__main__":
    from engine import cli

    sys.exit(0 if cli.script(main) else 1)
