#!/usr/bin/env bash
# The single-head follow-up (issue 49; docs/results/single_head/), as one queue at the lowest priority:
#   1. the learning-rate arm (studies/specs/single_head_lr.py: 6 rows x 3 rates, 2,400 steps, one seed; about 4.5
#      hours, from the wall times of the committed Table 3 and heads-vs-depth records), rerun until it trains
#      nothing: a row whose chosen rate sits at the grid's edge gets one more rate beyond it on the next pass (at
#      most 2 a side), so the passes after the first train only those;
#   2. the long arms (studies/specs/single_head.py: 42 points of 7,200 steps; about 38 hours), which refuse to
#      start, in one line, until every row has its rate.
# Safe to kill at any moment and to rerun: a finished point writes its record under docs/results/single_head*/points/
# (commit those: a point with a record is never trained again, even in a fresh checkout), an interrupted point
# resumes from its checkpoints in runs/repro/ (gone on a fresh machine: it then trains from step 0), and the reports
# are rebuilt from the records after each study.
# The replicate arm (points/replicate, after rows h2, h32 and dk4) is the same points as h8-s0 re-run on another
# machine (its claim reads a re-run on the first run's machine as "same machine again"; a record names its machine:
# ATTNLAB_MACHINE=<name>, default the host name, and the boot id of each training call, which tells apart machines
# cloned from one image).
# A second copy started while one runs exits at once (lock: runs/repro/single_head.lock), unless each copy is a
# named worker: "QUEUE_WORKER=a QUEUE_CPUS=0 scripts/single_head.sh &" and the same with b and 1 share the
# points between two copies, one core each (scripts/queue.sh; docs/studies.md has the measured gain).
# Log: runs/repro/single_head.log (a worker's: single_head-W.log). PYTHON=/path/to/python picks the interpreter.
set -u
source "$(dirname "$0")/queue.sh"
start_queue single_head
for pass in 1 2 3 4 5; do  # the grid, then at most 2 extensions a side (each pass re-reads the records)
  queue_step "single_head_lr pass $pass" -m studies train single_head_lr
done
queue_step single_head -m studies train single_head
