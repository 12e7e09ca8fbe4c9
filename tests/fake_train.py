"""Stand-in for train.py in the sweep tests: writes the metrics.jsonl records engine/loop.py writes.

Records: a start event with params, train loss, tokens/s and steps/s, per-head attention entropy for two layers,
final validation perplexity and test BLEU, and a train_end event. Values depend on num_heads / qk_dim /
seed so tables can be checked. Env: CALLS_FILE (append the workdir per call), FAIL_POINT (exit 3 when the
workdir ends with it), END_REASON (train_end reason, default num_steps), SLEEP_S (seconds to take first).
"""
import json
import os
import sys
import time

args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
workdir = args["workdir"]
os.makedirs(workdir, exist_ok=True)
if os.environ.get("CALLS_FILE"):
    with open(os.environ["CALLS_FILE"], "a") as f:
        f.write(workdir + "\n")
if os.environ.get("FAIL_POINT") and workdir.endswith(os.environ["FAIL_POINT"]):
    sys.exit(3)
time.sleep(float(os.environ.get("SLEEP_S", "0")))
h = int(args.get("config.model.num_heads", 8))
dk = int(args.get("config.model.qk_dim", 64))
seed = int(args.get("config.seed", 0))
recs = [{"step": 0, "event": "start", "params": 1000 + h, "device": "cpu cpu x1", "matmul_precision": "default",
         "cpu": "Fake CPU", "software": {"python": "3.11.0", "jax": "0.0.1"}},
        {"step": 10, "train/loss": 2.0 / h, "perf/tokens_per_sec": 500.0, "perf/steps_per_sec": 4.0}]
recs.append(dict({"step": 10}, **{f"attn/decoder_self/entropy/L{layer}H{k}": 0.1 * (layer + 1) * (k + 1)
                                  for layer in range(2) for k in range(h)}))
recs.append({"step": 10, "validation/perplexity": 10.0 / h + dk / 64 + seed, "test/bleu": 5.0 * h + dk / 8 + seed})
recs.append({"step": 10, "event": "train_end", "reason": os.environ.get("END_REASON", "num_steps")})
with open(os.path.join(workdir, "metrics.jsonl"), "a") as f:
    for r in recs:
        f.write(json.dumps(dict({"time": 0.0}, **r)) + "\n")
