"""Shared by the study tests: a command-line script loaded by path (``load_script``), a tiny sweep config and a
stand-in train.py, and readers for the reports the studies write."""
from __future__ import annotations

import csv
import importlib.util
import os
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(REPO, "scripts")
FAKE_TRAIN = os.path.join(REPO, "tests", "fake_train.py")  # metrics from the overrides; see its docstring
# A config file with a sweep over h = 1, 8 (qk_dim 64 / h) x seeds (config argument "seeds=<n>", default 1).
TINY_CONFIG = textwrap.dedent('''
    import ml_collections

    def get_config(arg=None):
        c = ml_collections.ConfigDict()
        c.seed = 0
        c.model = ml_collections.ConfigDict({"num_heads": 8, "qk_dim": 64})
        c.train = ml_collections.ConfigDict({"num_steps": 10})
        return c

    def sweep(arg=None):
        seeds = int(dict(kv.split("=") for kv in (arg or "seeds=1").split(","))["seeds"])
        for seed in range(seeds):
            for h in (1, 8):
                yield {"model.num_heads": h, "model.qk_dim": 64 // h, "seed": seed}
''')


def load_script(name: str):
    """The module of ``scripts/<name>.py``, loaded by its path (scripts are command lines, not a package)."""
    spec = importlib.util.spec_from_file_location(f"scripts_{name}", os.path.join(SCRIPTS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
