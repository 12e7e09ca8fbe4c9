"""Reproduction 2: why attention logits are scaled by 1/sqrt(d_k) (Vaswani et al. 2017, section 3.2.1).

The study is ``studies/specs/scale.py`` (points, claims, report); this is its command line.

    python scripts/repro_scale.py                  # train the points without a record, then the report
    python scripts/repro_scale.py --report_only    # the report from the committed records
    python scripts/repro_scale.py --quick          # tiny sizes, one seed; for tests
"""
from __future__ import annotations

import sys

from studies.specs import scale

main = scale.run

if __name__ == "__main__":
    from engine import cli

    sys.exit(0 if cli.script(main) else 1)
