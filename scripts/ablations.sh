#!/usr/bin/env bash
# The long CPU sweeps behind docs/results/table3*/ (hours on 2 cores), at the lowest priority so other work
# goes on. Every point is a train.py run with checkpoints and a completion marker: rerunning this script
# skips finished points and resumes interrupted ones. Logs: runs/repro/ablations.log.
set -u
cd "$(dirname "$0")/.."
mkdir -p runs/repro
{
  date -u +"%F %T start"
  nice -n 19 python scripts/repro_table3.py                  # rows (A) h 1..32 and (B) d_k 8, 4; 3 seeds; d 128
  nice -n 19 python scripts/repro_table3.py --d_model=256    # the same at d_model 256 (h 16 still has d_k 16)
  date -u +"%F %T end"
} >> runs/repro/ablations.log 2>&1
