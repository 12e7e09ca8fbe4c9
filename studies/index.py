"""docs/results/README.md, generated from the registered studies (``studies.specs``) and their records."""
from __future__ import annotations

import os
from typing import Optional, Sequence

from studies import claims as claims_lib
from studies import specs
from studies import study as study_lib
from studies.report import REPO, markdown_table

RESULTS = os.path.join(REPO, "docs", "results")


def summaries(module) -> list[specs.Summary]:
    """The rows of a spec module: its own ``summary()``, else one per study of ``STUDIES`` with its verdict counts."""
    if hasattr(module, "summary"):
        return list(module.summary())
    verdicts = study_lib.evaluate(module.STUDIES)
    out = []
    for s in module.STUDIES:
        records = sum(len(m) for m in s.records().values())
        counts: dict[str, int] = {}
        for v in verdicts[s.name]:
            counts[v.kind] = counts.get(v.kind, 0) + 1
        reading = f"{records} of {len(s.points())} points recorded"
        if counts and records:
            reading += "; verdicts: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))
            decided = [f"{v.claim.id}: {v.reading()}" for v in verdicts[s.name] if v.kind != "unresolved"]
            reading += (" — " + "; ".join(decided)) if decided else ""
        if s.criteria and records:
            rows = claims_lib.judge_criteria(s.criteria, {k: [r for _, r in m] for k, m in s.records().items()})
            reading += "; rules: " + "; ".join(f"{row[0]}: {row[3]}" for row in rows)
        out.append(specs.Summary(s.out, s.title, reading))
    return out


def write(modules: Sequence = (), path: Optional[str] = None) -> str:
    """Write docs/results/README.md (or ``path``); its path."""
    modules = list(modules) or specs.modules()
    rows = [s for m in modules for s in summaries(m)]
    listed = {os.path.relpath(os.path.join(REPO, s.out), RESULTS) for s in rows}
    others = sorted(d for d in os.listdir(RESULTS) if os.path.isdir(os.path.join(RESULTS, d)) and d not in listed)
    text = ["# Results", "",
            "Every study below is a spec file in `studies/specs/`; its report is generated from its committed records "
            "by `python -m studies report <name>`, and this page by `python -m studies index` (never edited by hand; "
            "`tests/test_studies_reports.py` regenerates both and fails on any difference). How to add a study: "
            "[docs/studies.md](../studies.md).", "",
            markdown_table(["study", "records and verdicts"],
                           [[f"[{s.title}]({os.path.relpath(os.path.join(REPO, s.out), RESULTS)}/README.md)",
                             s.reading] for s in rows])]
    if others:
        text += ["", "Reports not generated from a spec yet (written by their scripts): "
                 + ", ".join(f"[{d}]({d}/)" for d in others) + "."]
    path = path or os.path.join(RESULTS, "README.md")
    with open(path, "w") as f:
        f.write("\n".join(text) + "\n")
    return path
