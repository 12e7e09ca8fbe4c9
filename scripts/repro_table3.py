"""Vaswani et al. (2017) Table 3 rows (A) and (B) at CPU scale, d_model 128, 256 or 512 (the study's spec, claims
and conditions: ``studies/specs/table3.py``; its reports: ``docs/results/table3``, ``table3_d256``, ``table3_d512``).

    python scripts/repro_table3.py                   # d_model 128: train the points without a record, then the reports
    python scripts/repro_table3.py --d_model=256     # the wider model (d_model 512: scripts/gpu_sweeps.py)
    python scripts/repro_table3.py --report_only     # every width's report from the committed records
    python scripts/repro_table3.py --quick           # tiny models, one seed, into runs/repro/table3_quick (tests)
"""
import sys

from studies.cli import study_main

NAMES = {"128": "table3", "256": "table3_d256", "512": "table3_d512"}

if __name__ == "__main__":
    from engine import cli

    args = sys.argv[1:]
    width = next((a.split("=", 1)[1] for a in args if a.startswith("--d_model=")), "128")
    if width not in NAMES:
        cli.fail(f"--d_model={width}; expected one of {sorted(NAMES, key=int)}")
    sys.exit(cli.script(study_main, NAMES[width], [a for a in args if not a.startswith("--d_model=")], __doc__))
