"""The attention doctor on the calibration checkpoints: train each (``CHECKPOINTS``: healthy runs that are hard for
the doctor, and the fault library's planted checkpoint faults, ``configs/faults.py``), run ``eval.py --diagnose``
on it and keep one record per checkpoint in ``docs/results/diagnose/records/`` (the report,
``studies/specs/diagnose.py``, is generated from them).

    python scripts/diagnose_calibration.py                 # train what is missing, diagnose every checkpoint
    python scripts/diagnose_calibration.py --only=tr-main  # some checkpoints (comma-separated names)

Workdirs live under ``--runs`` (default /tmp/attnlab-diagnose); a checkpoint already trained there is reused.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORDS = os.path.join(ROOT, "docs", "results", "diagnose", "records")
STEPS = 300  # healthy runs; planted faults train FAULT_STEPS (enough for the model to settle on its fault)
FAULT_STEPS = 200


def _faults(task: str, fault: str, d_model: int = 64, heads: int = 4, steps: int = FAULT_STEPS) -> str:
    return f"configs/faults.py:task={task},d_model={d_model},heads={heads},steps={steps},fault={fault}"


# name -> (planted fault, "" for a healthy run; config; extra --config.* overrides)
CHECKPOINTS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "tr-main": ("", f"configs/translation.py:d_model=64,d_ff=256,layers=2,steps={STEPS},minutes=0", ()),
    "tr-healthy": ("", _faults("translation", "healthy", steps=STEPS), ()),
    "tr-healthy-h16": ("", _faults("translation", "healthy", heads=16, steps=STEPS), ()),
    "tr-hard": ("", _faults("translation", "healthy", steps=STEPS), ("--config.model.attention_kind=hard",)),
    "mqar-healthy": ("", _faults("mqar", "healthy", heads=2, steps=STEPS), ()),
    "mqar-healthy-h16": ("", _faults("mqar", "healthy", d_model=128, heads=16, steps=STEPS), ()),
    "induction-healthy": ("", _faults("induction", "healthy", heads=2, steps=STEPS), ()),
    "cls-healthy": ("", f"configs/classification.py:steps={STEPS}", ()),
    **{f"tr-{f}": (f, _faults("translation", f), ()) for f in ("scale_missing", "scale_dk", "temperature_x10",
                                                              "no_padding_mask", "causal_leak")},
    **{f"mqar-{f}": (f, _faults("mqar", f, heads=2), ()) for f in ("scale_missing", "temperature_x10", "causal_leak",
                                                                   "logit_growth")},
}


def _run(cmd: list[str], log: str) -> None:
    env = dict(os.environ, PYTHONPATH=ROOT, WANDB_MODE="disabled")
    with open(log, "a") as f:
        subprocess.run(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, check=True)


def _training(log: str) -> dict:
    """The training's wall minutes and last validation accuracy / NLL, from its log."""
    out = {}
    with open(log, encoding="utf-8") as f:
        text = f.read()
    for key, pattern in (("train_minutes", r"wall_minutes=([0-9.]+)"),
                         ("validation_accuracy", r"validation/accuracy=([0-9.]+)"),
                         ("validation_nll", r"validation/nll=([0-9.]+)")):
        found = re.findall(pattern, text)
        out[key] = round(float(found[-1]), 4) if found else None
    return out


def diagnose(name: str, runs: str) -> dict:
    """Train ``name`` (unless its workdir has a checkpoint), run the doctor, return its record."""
    fault, config, extra = CHECKPOINTS[name]
    workdir = os.path.join(runs, name)
    log = os.path.join(runs, f"{name}.log")
    if not glob.glob(os.path.join(workdir, "checkpoints", "*")):
        _run([sys.executable, "train.py", f"--config={config}", f"--workdir={workdir}",
              "--config.eval.split_examples=16", *extra], log)
    _run([sys.executable, "eval.py", f"--config={config}", f"--workdir={workdir}", "--diagnose", *extra], log)
    report = sorted(glob.glob(os.path.join(workdir, "eval", "diagnose_step*", "report.json")))[-1]
    with open(report, encoding="utf-8") as f:
        r = json.load(f)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return {"name": name, "fault": fault, "config": config, "overrides": list(extra), "step": r["meta"]["step"],
            "summary": r["summary"], "commit": commit.stdout.strip(), **_training(log),
            "findings": [[x["check"], x["group"], x["layer"], x["head"], x["value"], x["status"], x["cause"]]
                         for x in r["findings"]]}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="", help="comma-separated checkpoint names (default: all)")
    p.add_argument("--runs", default="/tmp/attnlab-diagnose", help="where the workdirs live")
    a = p.parse_args(argv)
    names = [n for n in a.only.split(",") if n] or list(CHECKPOINTS)
    unknown = [n for n in names if n not in CHECKPOINTS]
    if unknown:
        raise SystemExit(f"--only: unknown checkpoints {unknown}; expected some of {list(CHECKPOINTS)}")
    os.makedirs(RECORDS, exist_ok=True)
    os.makedirs(a.runs, exist_ok=True)
    for name in names:
        record = diagnose(name, a.runs)
        with open(os.path.join(RECORDS, f"{name}.json"), "w", encoding="utf-8") as f:
            json.dump(record, f, indent=0)
            f.write("\n")
        print(f"{name}: {record['summary']}", flush=True)


if __name__ == "__main__":
    main()
