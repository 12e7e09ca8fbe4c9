#!/usr/bin/env bash
# The long CPU sweeps behind docs/results/entropy_collapse/, logit_growth/, table3/, mqar_variants/,
# heads_vs_depth/, head_importance/replication/, health_calibration/ and table3_d256/ (about 60 hours on 2 cores),
# as one queue at the lowest priority so other work goes on, the short studies first:
#   1. entropy collapse (4 lrs x QK-LayerNorm off/on x 3 seeds, 1,500 steps; about 30 min)
#   2. logit growth (6 lrs x d_model 64/128 x QK-LayerNorm off/on x 3 seeds, 1,500 steps; about 2 hours)
#   3. Table 3 at d_model 128: rows (A), (B) and the A/A control (3 seeds each, 2,400 steps per point; about
#      5 hours), then h = 1 with seeds 3-5 (the single-head extension) and h = 1 at the base's d_k (the d_k
#      control; 3 seeds; about 30 minutes each)
#   4. attention variants on MQAR (softmax, linear, additive, hard x pairs x width, 3 seeds; about 3-4 hours)
#   5. heads vs depth (8 heads x 3+3 against 1 head x 6+6, 12+12, 24+24 at equal parameters, pre-LN with
#      QK-LayerNorm off/on, post-LN with the short warmup, with Admin, then 8 heads x 3+3 and 1 head x 6+6 with
#      QK-LayerNorm off at 3x the steps, then post-LN with a long warmup, 3 seeds; about 19 hours)
#   6. head-importance replication on fresh seeds 3-5 (3 models + 3 uniform-baseline models, 2,200 steps each, and
#      the head analyses; about 3 hours), testing the verdict criteria written after the first run
#   6b. the health monitor's calibration runs (the fault library and the held-out runs of configs/faults.py, the
#       main job, Table 3 at d_model 128 again with traces: about 9 hours) and its report
#   7. Table 3 at d_model 256, learning rate 1.5e-3 (about 12 hours on a quiet machine: 20 minutes a point at
#      h <= 8, 25 at h 16, 35 at h 32)
# A session lent a GPU can train what is left of 5 and 7 (and Table 3 at d_model 512) in one device call:
# scripts/gpu_sweeps.py (README, "On a GPU").
# Safe to kill at any moment and to rerun: a finished point writes its record under docs/results/<study>/points/
# (and beside it its attention trace and its decoded test sentences, if any; commit those: a point with a record
# is never trained again, even in a fresh checkout without runs/; the head-importance replication keeps one record
# per trained model in docs/results/head_importance/replication/points/), an interrupted point resumes from its
# checkpoints in runs/repro/, and every report is rebuilt from the records.
# A second copy started while one runs exits at once (lock: runs/repro/ablations.lock).
# Log: runs/repro/ablations.log.   PYTHON=/path/to/python scripts/ablations.sh to pick the interpreter.
set -u
source "$(dirname "$0")/queue.sh"
start_queue ablations
queue_step entropy_collapse -m studies train entropy_collapse   # 4 lrs x QK-LN off/on x 3 seeds
queue_step logit_growth -m studies train logit_growth           # 6 lrs x d_model 64/128 x QK-LN off/on x 3 seeds
queue_step "table3 d128" -m studies train table3                # (A), (B), A/A, h 1 seeds 3-5, h 1 at d_k 16
queue_step mqar_variants -m studies train mqar_variants         # softmax/linear/additive/hard x pairs x d_model
queue_step heads_depth -m studies train heads_vs_depth          # 8 heads x 3+3 vs 1 head x 6+6 .. 24+24; QK-LN
queue_step "head_importance replication" -m studies train head_importance --first_seed 3 --seeds 3 \
  --uniform_seeds 3 --steps 2200 --minutes 0 \
  --out docs/results/head_importance/replication --workdir runs/repro/head_importance_replication
queue_step health_calibration -m studies train health_calibration   # the fault library and held-out runs; report
queue_step "table3 d256" -m studies train table3_d256           # d 256: h 16 still has d_k 16
