"""The documentation as a user reads it: every relative link in README.md and docs/**/*.md resolves (anchors
are not checked), every ``configs/...`` path the docs name exists, every ``scripts/...`` file README.md and
docs/*.md name exists, and every fenced ```python block in README.md and docs/*.md runs as written, from the
repository root as a user runs it (each block in a fresh namespace; all blocks in one subprocess, so the imports
are paid once; marked ``slow``, so CI's leg 1b runs it and the README's test line does not)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CONFIG_PATH = re.compile(r"(?<![\w/.])configs/[\w/.-]*?\.py\b")
SCRIPT_PATH = re.compile(r"(?<![\w/.])scripts/[\w-]+\.(?:py|sh)\b")
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```\s*$", re.S | re.M)


def doc_files(recursive: bool = True) -> list[str]:
    """README.md and the Markdown files under docs/ (only docs/*.md when not ``recursive``), repo-relative."""
    out = ["README.md"]
    for folder, _, files in os.walk(os.path.join(ROOT, "docs")):
        rel = os.path.relpath(folder, ROOT)
        if not recursive and rel != "docs":
            continue
        out += sorted(os.path.join(rel, f) for f in files if f.endswith(".md"))
    return out


def read(path: str) -> str:
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def relative_links(text: str) -> list[str]:
    """Link targets in ``text`` that point into the repository (no scheme, not a bare anchor); code (fenced
    blocks and inline spans) holds no links."""
    prose = re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))
    targets = [m.group(1) for m in LINK.finditer(prose)]
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I) and not t.startswith("#")]


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(line number, code) of each fenced ```python block."""
    return [(text.count("\n", 0, m.start()) + 1, m.group(2)) for m in FENCE.finditer(text) if m.group(1) == "python"]


def test_helpers_find_links_paths_and_blocks():
    text = textwrap.dedent("""\
        See [a](docs/a.md#x), ![img](images/p.png), [web](https://x.org), [top](#y) and `configs/t.py:quick`.
        ```python
        x = 1
        ```
        ```bash
        echo no
        ```
        """)
    assert relative_links(text) == ["docs/a.md#x", "images/p.png"]
    assert relative_links("`TASKS[\"x\"](None)`\n```python\nf = d[\"k\"](None)\n```\n") == []
    assert CONFIG_PATH.findall(text) == ["configs/t.py"]
    assert SCRIPT_PATH.findall("run `python scripts/a_b.py` or scripts/q.sh, not my_scripts/x.py") == [
        "scripts/a_b.py", "scripts/q.sh"]
    assert python_blocks(text) == [(2, "x = 1\n")]


@pytest.mark.parametrize("doc", doc_files())
def test_relative_links_resolve(doc):
    base = os.path.dirname(os.path.join(ROOT, doc))
    broken = [t for t in relative_links(read(doc))
              if not os.path.exists(os.path.normpath(os.path.join(base, t.split("#", 1)[0])))]
    assert not broken, f"{doc}: links to missing files: {broken}"


@pytest.mark.parametrize("doc", doc_files())
def test_named_configs_exist(doc):
    missing = sorted({p for p in CONFIG_PATH.findall(read(doc)) if not os.path.isfile(os.path.join(ROOT, p))})
    assert not missing, f"{doc} names config files that do not exist: {missing}"


@pytest.mark.parametrize("doc", doc_files(recursive=False))
def test_named_scripts_exist(doc):
    """The command lines the docs show (the reports under docs/results/ keep the names they were made with)."""
    missing = sorted({p for p in SCRIPT_PATH.findall(read(doc)) if not os.path.isfile(os.path.join(ROOT, p))})
    assert not missing, f"{doc} names scripts that do not exist: {missing}"


_RUNNER = textwrap.dedent("""\
    import json, sys, traceback
    failures = []
    for name, line, code in json.load(sys.stdin):
        try:
            exec(compile(code, f"{name}:{line}", "exec"), {"__name__": "__docs__"})
        except BaseException:
            failures.append(f"{name}, block at line {line}:\\n{traceback.format_exc(limit=-3)}")
    print(json.dumps(failures))
    """)


@pytest.mark.slow  # ~46 s of worker time (every example, in one process): CI's leg 1b, not the README line
def test_python_blocks_run_as_written():
    blocks = [(doc, line, code) for doc in doc_files(recursive=False) for line, code in python_blocks(read(doc))]
    assert blocks, "no ```python block found"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", _RUNNER], input=json.dumps(blocks), capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    failures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not failures, "\n\n".join(failures)
