"""Launch the same multi-host training run N times in a row and report hangs, exit codes and losses.

    python scripts/stress_multihost.py --runs=20 --out=/tmp/stress
    python scripts/stress_multihost.py --runs=3 --processes=2 --devices=2 -- --config.train.num_steps=10

Each launch is ``--processes`` CPU processes of ``--devices`` devices each (gloo collectives, one shared fresh
workdir) running ``train.py`` with ``--config`` and the arguments after ``--``. A launch that has not finished
after ``--timeout`` seconds is a hang: every process gets SIGTERM (the run's own grace period then applies), then
SIGKILL ``--kill_after`` seconds later. Before the launches, one process of ``processes x devices`` devices runs
the same config; every launch's train losses must equal its losses. Writes ``<out>/stress.json`` (one record per
launch: exit codes, seconds, hung, losses equal) and prints a table; exits 1 when a launch hung, failed or
trained differently.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_ARGS = ("--config=configs/translation.py:runlocal", "--config.train.num_steps=20",
                "--config.train.checkpoint_every=10", "--config.eval.split_examples=300")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _losses(workdir: str) -> dict[int, float]:
    out = {}
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.exists(path):
        return out
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "train/loss" in r and "event" not in r:
                out[int(r["step"])] = float(r["train/loss"])
    return out


def launch(workdir: str, args: list[str], *, processes: int, devices: int, timeout: float, kill_after: float,
           logs: str) -> dict:
    """One launch of ``processes`` train.py processes on ``workdir``; returns its record."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
               JAX_CPU_COLLECTIVES_IMPLEMENTATION="gloo", PYTHONPATH=REPO, WANDB_MODE="disabled",
               OMP_NUM_THREADS="1")
    if "JAX_COMPILATION_CACHE_DIR" in os.environ:
        env["JAX_COMPILATION_CACHE_DIR"] = os.environ["JAX_COMPILATION_CACHE_DIR"]
    if processes > 1:
        env.update(JAX_COORDINATOR_ADDRESS=f"localhost:{_free_port()}", JAX_NUM_PROCESSES=str(processes))
    os.makedirs(logs, exist_ok=True)
    procs, paths = [], []
    t0 = time.monotonic()
    for i in range(processes):
        path = os.path.join(logs, f"p{i}.out")
        paths.append(path)
        with open(path, "w") as out:
            procs.append(subprocess.Popen([sys.executable, os.path.join(REPO, "train.py"), f"--workdir={workdir}",
                                           *args], env=dict(env, JAX_PROCESS_ID=str(i)), cwd=REPO, stdout=out,
                                          stderr=subprocess.STDOUT, start_new_session=True))
    hung = False
    for p in procs:
        try:
            p.wait(timeout=max(t0 + timeout - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            hung = True
            break
    if hung:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        end = time.monotonic() + kill_after
        for p in procs:
            try:
                p.wait(timeout=max(end - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    return {"seconds": round(time.monotonic() - t0, 1), "hung": hung, "exit_codes": [p.returncode for p in procs],
            "logs": paths}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--devices", type=int, default=2, help="CPU devices per process")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before a launch counts as hung")
    parser.add_argument("--kill_after", type=float, default=90.0, help="seconds from SIGTERM to SIGKILL")
    parser.add_argument("--out", default="runs/stress_multihost")
    parser.add_argument("train_args", nargs="*", help="train.py arguments (after --)")
    a = parser.parse_args(argv)
    if a.runs < 1 or a.processes < 1 or a.devices < 1:
        parser.error("--runs, --processes and --devices must be >= 1")
    args = list(a.train_args) or list(DEFAULT_ARGS)
    if os.path.exists(a.out):
        shutil.rmtree(a.out)
    os.makedirs(a.out)
    reference = launch(os.path.join(a.out, "reference"), args, processes=1, devices=a.processes * a.devices,
                       timeout=a.timeout, kill_after=a.kill_after, logs=os.path.join(a.out, "reference-logs"))
    want = _losses(os.path.join(a.out, "reference"))
    reference["losses"] = len(want)
    print(f"reference: 1 process x {a.processes * a.devices} devices, exit {reference['exit_codes']}, "
          f"{reference['seconds']} s, {len(want)} logged losses", flush=True)
    if reference["exit_codes"] != [0] or not want:
        print(f"the reference run failed; see {reference['logs'][0]}")
        return 1
    records = []
    print(f"{'run':>4} {'exit codes':>12} {'seconds':>8} {'hung':>5} losses equal", flush=True)
    for i in range(a.runs):
        workdir = os.path.join(a.out, f"run{i}")
        r = launch(workdir, args, processes=a.processes, devices=a.devices, timeout=a.timeout,
                   kill_after=a.kill_after, logs=os.path.join(a.out, f"run{i}-logs"))
        got = _losses(workdir)
        r["losses_equal"] = sorted(got) == sorted(want) and all(
            abs(got[s] - want[s]) <= 1e-5 * abs(want[s]) + 1e-6 for s in want)
        r["max_abs_loss_diff"] = max((abs(got[s] - want[s]) for s in want if s in got), default=None)
        records.append(r)
        print(f"{i:>4} {str(r['exit_codes']):>12} {r['seconds']:>8} {str(r['hung']):>5} {r['losses_equal']}",
              flush=True)
        if not r["hung"] and r["exit_codes"] == [0] * a.processes:
            shutil.rmtree(workdir, ignore_errors=True)  # keep the workdirs of the launches that went wrong
    bad = [i for i, r in enumerate(records)
           if r["hung"] or r["exit_codes"] != [0] * a.processes or not r["losses_equal"]]
    seconds = [r["seconds"] for r in records]
    summary = {"args": args, "processes": a.processes, "devices": a.devices, "reference": reference,
               "runs": records, "hung": sum(r["hung"] for r in records), "failed_or_different": bad,
               "seconds_min_median_max": [min(seconds), sorted(seconds)[len(seconds) // 2], max(seconds)]}
    with open(os.path.join(a.out, "stress.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"{a.runs} launches: {summary['hung']} hung, {len(bad)} failed or trained differently; seconds "
          f"min/median/max {summary['seconds_min_median_max']}; record: {os.path.join(a.out, 'stress.json')}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
