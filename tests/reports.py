"""Shared by the reproduction tests: ``scripts/`` on the import path, and readers for the reports they write."""
from __future__ import annotations

import csv
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(REPO, "scripts")
if SCRIPTS not in sys.path:
    sys.path.insert(0, SCRIPTS)


def read_csv(path) -> list[dict[str, str]]:
    """The rows of a report's CSV file, as dicts keyed by its header."""
    with open(path) as f:
        return list(csv.DictReader(f))


def read_report(out_dir, *figures: str) -> str:
    """The text of ``<out_dir>/README.md``, after checking that each figure's PNG exists and is linked."""
    text = open(os.path.join(out_dir, "README.md")).read()
    for fig in figures:
        assert os.path.getsize(os.path.join(out_dir, f"{fig}.png")) > 0
        assert f"]({fig}.png)" in text
    return text


_STAND_IN_HEAD = """\
import json, math, os, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
workdir = args["workdir"]
os.makedirs(workdir, exist_ok=True)
with open(os.environ["CALLS_FILE"], "a") as f:
    f.write(workdir + "\\n")
"""

_STAND_IN_TAIL = """
with open(os.path.join(workdir, "metrics.jsonl"), "a") as f:
    for i, r in enumerate(recs):
        f.write(json.dumps(dict({"time": 1000.0 + i}, **r)) + "\\n")
"""


def install_stand_in(tmp_path, monkeypatch, body: str):
    """Write a stand-in for train.py to ``tmp_path`` and point ``CALLS_FILE`` at a file that lists the run folder
    of every call; (stand-in path, calls file). ``body`` (source) sets ``recs``, the records engine/loop.py would
    write to ``metrics.jsonl``, from ``args`` (the ``--key=value`` arguments) and ``workdir``."""
    train = tmp_path / "stand_in_train.py"
    train.write_text(_STAND_IN_HEAD + body + _STAND_IN_TAIL)
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("CALLS_FILE", str(calls))
    return train, calls


def calls_of(calls) -> list[str]:
    """The run folders the stand-in was called with, in order."""
    return calls.read_text().split() if calls.exists() else []
