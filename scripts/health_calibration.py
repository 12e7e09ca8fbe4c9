"""Calibrating the attention health monitor: train the fault library's missing runs, then the report.

The study is ``studies/specs/health_calibration.py`` (splits, report); this is its command line.

    python scripts/health_calibration.py                  # train the runs without a record, then the report
    python scripts/health_calibration.py --report_only    # the report from the committed records and traces
"""
from __future__ import annotations

import sys

from studies.specs import health_calibration

main = health_calibration.run

if __name__ == "__main__":
    from engine import cli

    sys.exit(0 if cli.script(main) else 1)
