"""docs/results/README.md, generated from the registered studies (``studies.specs``) and their records."""
from __future__ import annotations

import os
from typing import Mapping, Optional, Sequence

from studies import claims as claims_lib
from studies import specs
from studies import study as study_lib
from studies.report import REPO, markdown_table

RESULTS = os.path.join(REPO, "docs", "results")


def summaries(module, verdicts: Optional[Mapping[str, list]] = None) -> list[specs.Summary]:
    """The rows of a spec module: its own ``summary()``, else one per study of ``STUDIES`` with its verdict counts
    (``verdicts``: ``study_lib.evaluate(module.STUDIES)`` when already computed)."""
    if hasattr(module, "summary"):
        return list(module.summary())
    verdicts = verdicts if verdicts is not None else study_lib.evaluate(module.STUDIES)
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


def so_far(verdict: Optional[claims_lib.Verdict], claim_id: str) -> str:
    """``L h2 (-0.012 [-0.037, +0.012], unresolved)`` for a re-testing claim with its seeds a side, else its id."""
    if verdict is None or verdict.interval is None:
        return claim_id
    return f"{claim_id} ({verdict.measured()}, {verdict.reading()})"


def retest_notes(modules: Sequence, evaluated: Optional[Mapping[str, Mapping[str, list]]] = None) -> dict[str, str]:
    """study folder (``Study.out``) -> the sentence its row of docs/results/README.md ends with when a later study
    re-tests its claims (``Study.retests``): per later study, its progress and, per claim, the claims that re-test
    it (with its measured difference and verdict so far where it has its seeds), or "superseded" with their verdicts
    once every one is resolved or the later study has all its points.
    ``evaluated``: module name -> its ``study_lib.evaluate`` result, where already computed."""
    notes: dict[str, list[str]] = {}
    for module in modules:
        follow_ups = [s for s in getattr(module, "STUDIES", ()) if s.retests]
        if not follow_ups:
            continue
        module_verdicts = (evaluated or {}).get(module.__name__) or study_lib.evaluate(module.STUDIES)
        verdicts = {v.claim.id: v for vs in module_verdicts.values() for v in vs}
        for s in follow_ups:
            recorded, total = sum(len(m) for m in s.records().values()), len(s.points())
            items: dict[str, list[str]] = {}
            for name, claim, ids in s.retests:
                kinds = [verdicts[i].reading() if i in verdicts else claims_lib.UNRESOLVED for i in ids]
                done = recorded == total or all(not k.startswith(claims_lib.UNRESOLVED) for k in kinds)
                items.setdefault(specs.study(name).out, []).append(
                    f"{claim} superseded ({', '.join(f'{i}: {k}' for i, k in zip(ids, kinds))})" if done else
                    f"{claim} by {', '.join(so_far(verdicts.get(i), i) for i in ids)}")
            link = f"[{s.name}]({os.path.relpath(os.path.join(REPO, s.out), RESULTS)}/README.md)"
            for out, said in items.items():
                notes.setdefault(out, []).append(f"re-tested by {link} ({recorded} of {total} points): "
                                                 + "; ".join(said))
    return {out: "; ".join(n) for out, n in notes.items()}


def write(modules: Sequence = (), path: Optional[str] = None) -> str:
    """Write docs/results/README.md (or ``path``); its path."""
    modules = list(modules) or specs.modules()
    evaluated = {m.__name__: study_lib.evaluate(m.STUDIES) for m in modules
                 if hasattr(m, "STUDIES") and not hasattr(m, "summary")}  # once per module, for both uses below
    notes = retest_notes(modules, evaluated)
    rows = [specs.Summary(s.out, s.title, s.reading + (f". Claims {notes[s.out]}" if s.out in notes else ""))
            for m in modules for s in summaries(m, evaluated.get(m.__name__))]
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
