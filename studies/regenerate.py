"""Regenerate a report folder whose study writes its own report (``generate(into)`` of a spec module without
``STUDIES``): copy the records into a fresh folder, generate the report there, list what the folder then holds in
``generated.txt``, and copy it into the committed folder (or leave it under ``into``).

A separate addition beside the core (``studies.study.write_report`` does the same for generic studies).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Callable, Optional, Sequence

from studies.report import REPO
from studies.study import GENERATED

RESULTS = os.path.join(REPO, "docs", "results")


def regenerate(out: str, records: Sequence[str], make: Callable[[str], str], into: Optional[str] = None) -> str:
    """Generate the report of folder ``out`` with ``make(folder) -> README path`` from copies of ``records``
    (names of files or folders in ``out``; missing ones are skipped), into ``<into>/<out relative to
    docs/results>`` when ``into`` is given, else into ``out`` itself. Returns the README path there."""
    out = os.path.abspath(out)
    target = os.path.join(into, os.path.relpath(out, RESULTS)) if into else out
    with tempfile.TemporaryDirectory() as tmp:
        work = os.path.join(tmp, "report")
        os.makedirs(work)
        for name in records:
            src = os.path.join(out, name)
            if os.path.isdir(src):
                shutil.copytree(src, os.path.join(work, name))
            elif os.path.isfile(src):
                shutil.copy2(src, os.path.join(work, name))
        if os.path.isfile(os.path.join(out, "README.md")):  # unchanged but for its Measured line: kept as it is
            shutil.copy2(os.path.join(out, "README.md"), os.path.join(work, "README.md"))
        make(work)
        files = sorted({f for f in os.listdir(work) if os.path.isfile(os.path.join(work, f))} | {GENERATED})
        with open(os.path.join(work, GENERATED), "w") as f:
            f.write("\n".join(files) + "\n")
        os.makedirs(target, exist_ok=True)
        for name in os.listdir(work):
            src, dst = os.path.join(work, name), os.path.join(target, name)
            if os.path.isdir(src):
                shutil.copytree(src, dst, dirs_exist_ok=True)
            elif not (os.path.isfile(dst) and _same(src, dst)):
                shutil.copy2(src, dst)
    return os.path.join(target, "README.md")


def _same(a: str, b: str) -> bool:
    with open(a, "rb") as x, open(b, "rb") as y:
        return x.read() == y.read()
