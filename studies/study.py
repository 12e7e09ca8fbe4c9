"""A study: its arms (sweeps whose points leave committed records), how a record maps to a setting, its claims,
and the report generated from the records and the claims alone.

    STUDY = Study(name="table3_d256", title="...", out="docs/results/table3_d256", protocol="...",
                  arms=(Arm("A", "configs/table3_heads.py", "seeds=3,d_model=256"), ...),
                  setting=lambda arm, rec: f"h={rec.override('model.num_heads')}", claims=(Claim(...), ...))

``train(study)`` trains the points without a record (seed-major within each arm, arms in ``order``);
``generate(studies)`` evaluates the claims of ``studies`` together (a family may span studies) and writes each
report: ``README.md``, ``verdicts.csv``, ``settings.csv``, ``runs.csv``, ``paired_bleu.csv`` (tasks with BLEU),
``contrasts_by_step.csv`` and the figures. A report is a function of the records, the spec and the committed
inputs it names (``inputs``), so regenerating it changes nothing (``tests/test_studies_reports.py``).
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import os
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from engine.cli import UsageError
from studies import claims as claims_lib
from studies import points as points_lib
from studies import stats as stats_lib
from studies.records import Record, records_in, values
from studies.runner import Job, train_jobs
from studies.report import REPO, Report, markdown_table, mean_std, plt, read_csv, significant

METRICS = {"nll": "valid NLL", "ppl": "valid perplexity", "accuracy": "valid accuracy", "bleu": "test BLEU",
           "chrf": "test chrF", "wall": "wall (min)", "cpu": "CPU (min)", "grad": "max grad norm",
           "jump": "max loss jump", "logit": "max attention logit"}


@dataclasses.dataclass(frozen=True)
class Arm:
    """A sweep of the study: ``config`` at argument ``arg`` (``quick,seeds=1`` is appended for ``--quick``), its records
    in ``<out>/points/<name>/`` (``<out>/points/`` when ``name`` is empty); arms train in ``order``."""

    name: str
    config: str
    arg: str
    order: int = 0
    records: str = ""  # the records folder relative to the study's (default points/<name>)
    only: tuple[str, ...] = ()  # the sweep's points this arm trains, by name (default every one)


@dataclasses.dataclass(frozen=True)
class Section:
    """A study-specific table computed from the records (``Study.sections``): written as ``csv`` beside the
    report and shown under ``title`` after ``intro``."""

    title: str
    intro: str
    headers: Sequence[str]
    rows: Sequence[Sequence]
    csv: str


@dataclasses.dataclass(frozen=True)
class Plot:
    """A figure of ``metric`` against override ``x``, one line per value of override ``line`` (one panel per
    value of ``panel`` when given), the seeds aggregated: mean, with their range as a band."""

    name: str
    metric: str
    x: str
    line: str
    panel: Optional[str] = None


@functools.lru_cache(maxsize=None)
def _sweep_points(spec: str) -> tuple[points_lib.Point, ...]:
    """A config's sweep points (configs do not change while a process runs)."""
    return tuple(points_lib.sweep_points(spec))


Groups = Mapping[str, Sequence[tuple[Arm, Record]]]  # setting label -> (arm, record), as ``Study.records``


@dataclasses.dataclass(frozen=True)
class Study:
    name: str
    title: str
    out: str  # relative to the repository
    protocol: str  # Markdown: what was trained and how
    arms: tuple[Arm, ...]
    setting: Callable[[str, Record], str]  # (arm name, record) -> the label of its setting (a claim's group)
    claims: tuple[claims_lib.Claim, ...]
    metrics: tuple[str, ...] = ("nll", "ppl", "bleu", "chrf")  # settings-table columns (``Record.metric`` names)
    notes: tuple[str, ...] = ()  # Markdown paragraphs after the verdicts (context fixed in the spec)
    inputs: tuple[tuple[str, ...], ...] = ()  # (title, CSV under out[, column]) committed inputs shown as tables
    # (only the rows where ``column`` is set, when given)
    runner: str = "train.py"  # "train.py" (subprocess) or "in_process" (engine.run)
    command: str = ""  # how its points are trained when not ``python -m studies train <name>``
    quick: Optional[Callable[[Arm, points_lib.Point], bool]] = None  # the --quick points (default: every one)
    sections: tuple[Callable[["Groups"], Optional["Section"]], ...] = ()  # study-specific tables from the records
    criteria: tuple[claims_lib.Criterion, ...] = ()  # rules without a test statistic
    plots: tuple["Plot", ...] = ()  # metric against a setting, one line per another setting, seeds aggregated
    keep: tuple[str, ...] = ()  # committed files in the report folder that other tools write (not inputs)
    source: Optional[Callable[[str], list[tuple[Arm, Record]]]] = None  # records from a committed table instead
    # of points/*.json (studies whose points left no record), given the report folder
    margins_note: str = ""  # when the claims' margins and the magnitude rule were fixed (default MARGINS_WITH_CLAIMS)
    ready: Optional[Callable[[], Optional[str]]] = None  # the train gate: None when its points may train, else the
    # one line that says why not (e.g. an input another study has not recorded yet); ``train`` checks it first
    after: Optional[Callable[[str, str], None]] = None  # (record path, run folder): ``train`` calls it after each
    # point that trained or already had a record, e.g. to add to the record what only the run folder holds
    retests: tuple[tuple[str, str, tuple[str, ...]], ...] = ()  # (study, its claim id, this study's claims that
    # re-test it): docs/results/README.md marks that claim re-tested here, and superseded once these are resolved

    def records_dir(self, arm: Arm, out: Optional[str] = None) -> str:
        base = out or os.path.join(REPO, self.out)
        return os.path.join(base, arm.records) if arm.records else os.path.join(base, "points",
                                                                                 *([arm.name] if arm.name else []))

    def points(self, quick: bool = False) -> list[tuple[Arm, points_lib.Point]]:
        """Every (arm, point) of the study in training order: arms by ``order``, seed-major within each."""
        out = []
        for arm in sorted(self.arms, key=lambda a: a.order):
            pts = _sweep_points(self.spec(arm, quick))
            out += [(arm, p) for p in sorted(pts, key=lambda p: p.overrides.get("seed", 0))
                    if (not quick or self.quick is None or self.quick(arm, p)) and (not arm.only or p.name in arm.only)]
        return out

    def spec(self, arm: Arm, quick: bool = False) -> str:
        """The config spec of ``arm`` (absolute path), with ``quick`` sizes and one seed when asked."""
        return f"{os.path.join(REPO, arm.config)}:{arm.arg}" + (",quick,seeds=1" if quick else "")

    def records(self, out: Optional[str] = None) -> dict[str, list[tuple[Arm, Record]]]:
        """setting label -> (arm, record) of every committed record, in arm and point order."""
        groups: dict[str, list[tuple[Arm, Record]]] = {}
        order = {(a.name, p.name): i for i, (a, p) in enumerate(self.points())}
        if self.source is not None:
            found = self.source(out or os.path.join(REPO, self.out))
        else:
            found = [(arm, rec) for arm in self.arms for rec in records_in(self.records_dir(arm, out)).values()]
        found.sort(key=lambda ar: (order.get((ar[0].name, ar[1].name), len(order)), ar[0].name, ar[1].name))
        for arm, rec in sorted(found, key=lambda ar: (ar[0].order, order.get((ar[0].name, ar[1].name), len(order)))):
            groups.setdefault(self.setting(arm.name, rec), []).append((arm, rec))
        return groups


def jobs(study: Study, *, quick: bool = False, out: Optional[str] = None, workdir: Optional[str] = None
         ) -> list[Job]:
    """The study's points as jobs in training order, recorded or not: records under ``out`` (default the study's
    folder, or ``runs/repro/<name>_quick`` with ``quick``), run folders under ``workdir``."""
    tag = study.name + ("_quick" if quick else "")
    out = out or os.path.join(REPO, "runs/repro" if quick else "", tag if quick else study.out)
    workdir = workdir or os.path.join(REPO, "runs/repro", tag)
    return [Job(study.spec(arm, quick), point, os.path.join(workdir, arm.name),
                os.path.join(study.records_dir(arm, out), f"{point.name}.json"),
                f"{arm.name}/{point.name}" if arm.name else point.name) for arm, point in study.points(quick)]


def train(study: Study, *, quick: bool = False, max_points: Optional[int] = None, out: Optional[str] = None,
          workdir: Optional[str] = None, train_script: Optional[str] = None) -> list[str]:
    """Train the study's points that have no record (at most ``max_points``), calling the study's ``after`` hook
    after each point that trained or had a record; the names of those that failed.
    Raises ``UsageError`` with the line of the study's ``ready`` gate, before anything is trained or written, when
    the gate says its points cannot train yet (not for ``quick``: the tiny points take no committed input)."""
    waiting = None if quick or study.ready is None else study.ready()
    if waiting:
        raise UsageError(waiting)
    todo = jobs(study, quick=quick, out=out, workdir=workdir)
    run_dirs = {j.record: os.path.join(j.workdir, j.point.name) for j in todo}
    after = None if study.after is None else lambda record, point: study.after(record, run_dirs[record])
    return train_jobs(todo, train_script, max_points=max_points, after=after,
                      in_process=study.runner == "in_process", group=study.name)


# -------------------------------------------------------------------------------------------------- report
def evaluate(studies: Sequence[Study], out: Optional[Mapping[str, str]] = None
             ) -> dict[str, list[claims_lib.Verdict]]:
    """study name -> the verdicts of its claims, evaluated over every study's records together (a claim's group
    ``"<study>:<label>"`` names another study's setting; Holm runs within each family across the studies)."""
    groups, qualified, owner = {}, [], {}
    for s in studies:
        for label, members in s.records((out or {}).get(s.name)).items():
            groups[f"{s.name}:{label}"] = [r for _, r in members]
        for c in s.claims:
            q = lambda gs: tuple(g if ":" in g else f"{s.name}:{g}" for g in gs)  # noqa: E731
            for g in q(c.a) + q(c.b):
                groups.setdefault(g, [])
            qualified.append(dataclasses.replace(c, a=q(c.a), b=q(c.b)))
            owner[c.id] = s.name
    verdicts: dict[str, list[claims_lib.Verdict]] = {s.name: [] for s in studies}
    for v in claims_lib.evaluate(qualified, groups):
        verdicts[owner[v.claim.id]].append(v)
    return verdicts


def _p(p: Optional[float]) -> str:
    return "—" if p is None else ("<0.001" if p < 0.001 else significant(p, 2))


def _label(group: str) -> str:
    return group.split(":", 1)[1]


def _short(v: claims_lib.Verdict) -> str:
    """A claim without its interval: "—" with no records, else "<a>/<b> (needs <min_seeds> a side)"."""
    return "—" if v.counts == (0, 0) else f"{v.counts[0]}/{v.counts[1]} (needs {v.claim.min_seeds} a side)"


def verdict_rows(verdicts: Sequence[claims_lib.Verdict]) -> list[list]:
    """The verdicts table: one row per claim."""
    rows = []
    for v in verdicts:
        c = v.claim
        n = f"{v.interval.n_a}/{v.interval.n_b}" if v.interval is not None else _short(v)
        paper = "—" if c.paper is None else ("0" if c.paper == 0 else f"{c.paper:+.3f}")
        if c.paper is None and c.sign:
            paper = "lower" if c.sign < 0 else "higher"
        elif c.paper == 0 and c.sign:
            paper = "no higher" if c.sign < 0 else "no lower"
        rows.append([c.id, c.text, c.family, METRICS.get(c.metric, c.metric), n, paper, f"±{c.margin:g}", v.measured(),
                     _p(v.interval and v.interval.p),
                     _p(v.p_adjusted), v.reading(), v.kind_raw, v.registration])
    return rows


VERDICT_HEADERS = ["id", "claim", "family", "metric", "n a/b", "paper Δ", "margin", "measured Δ [Welch 95%]", "p",
                   "p (Holm)", "verdict", "verdict without correction", "registration"]


def machine_of(record: Record) -> str:
    """The machine a record trained on: its ``machine`` name and CPU model; "machine not recorded" with the CPU
    model the run logged (else its host description) in records made before records named it."""
    logged = record.raw.get("cpu") or record.raw.get("host") or "CPU model not recorded"
    return record.machine_cpu or f"machine not recorded ({logged})"


def _record_label(record: Record) -> str:
    """``<arm folder>/<point>`` of a record under ``points/``."""
    return f"{os.path.basename(os.path.dirname(record.path))}/{record.name}"


def _config_changes_text(recs: Sequence[Record]) -> str:
    """" Config changed on a resume: <arm>/<point> from step <s>: <field> <before> -> <after>, ... (<k> of <n>
    records keep such changes)." ("" when no record keeps the field)."""
    kept = [r for r in recs if r.config_changes is not None]
    if not kept:
        return ""
    changed = []
    for r in kept:
        for step, fields in r.config_changes:
            what = ", ".join(f"{k} {before!r} -> {after!r}" for k, (before, after) in fields.items())
            changed.append(f"{_record_label(r)} from step {step}: {what}")
    older = "; the others predate the field" if len(kept) < len(recs) else ""
    return (f" Config changed on a resume: {'; '.join(changed) or 'in no run'} ({len(kept)} of {len(recs)} "
            f"records keep such changes{older}).")


def _budget_paragraph(study: Study, recs: Sequence[Record]) -> str:
    commits = sorted({r.commit for r in recs})
    machines = collections.Counter(machine_of(r) for r in recs)
    walls = sorted(w for w in (r.wall_minutes for r in recs) if w is not None)
    where = ("the study's committed per-run table (its points predate records)" if study.source is not None else
             "`points/`, one JSON per finished point with its decoded test sentences and attention trace beside it "
             "where the task has them")
    text = (f"Records: {len(recs)} ({where}); trained on "
            + "; ".join(f"{m}: {n}" for m, n in sorted(machines.items())) + f"; by {len(commits)} commit(s).")
    if walls:
        text += (f" Wall time {walls[0]:.1f} to {walls[-1]:.1f} minutes a point, {sum(walls) / 60:.1f} hours in all "
                 "(the queue shared 2 CPU cores with other work and counts its pauses).")
    text += _config_changes_text(recs)
    cpu = [h for h in (r.cpu_hours for r in recs) if h is not None]
    if cpu:
        text += (f" CPU time {sum(cpu):.1f} hours in all ({len(cpu)} of {len(recs)} records; every thread of each "
                 "training process, pauses left out" + ("; the others predate the engine's `cpu_s`"
                                                       if len(cpu) < len(recs) else "") + ").")
    return text


def write_report(study: Study, verdicts: Sequence[claims_lib.Verdict], out: Optional[str] = None,
                 into: Optional[str] = None, quick: bool = False) -> str:
    """Write the study's report from the records under ``out`` (default its ``out``) into ``into`` (default
    ``out``; ``quick``: the --quick points are the expected ones); the README path. The names of the files it
    wrote are listed in its ``generated.txt``."""
    out = out or os.path.join(REPO, study.out)
    groups = study.records(out)
    recs = [r for members in groups.values() for _, r in members]
    expected = study.points(quick)
    have = {(a.name, r.name) for members in groups.values() for a, r in members}
    missing = [f"{a.name}/{p.name}" if a.name else p.name for a, p in expected if (a.name, p.name) not in have]
    report = Report(into or out, study.title)
    command = study.command or f"python -m studies train {study.name}"
    report.text(study.protocol)
    report.text(f"Generated from the records by `python -m studies report {study.name}` (never edited by hand); "
                f"the points train with `{command}` (resumable; a point with a record is never retrained). "
                f"Points recorded: {len(expected) - len(missing)} of {len(expected)}."
                + (f" Not recorded yet: {', '.join(f'`{m}`' for m in missing)}." if missing else "")
                + (" " + _budget_paragraph(study, recs) if recs else ""))
    if study.claims:
        _verdict_section(report, study, verdicts)
    if study.criteria:
        report.section("Rules without a test statistic")
        rows = claims_lib.judge_criteria(study.criteria, {k: [r for _, r in m] for k, m in groups.items()})
        report.table(["id", "claim", "measured", "verdict", "reason", "conditions", "registration"], rows,
                     csv_name="criteria.csv")
    for note in study.notes:
        report.text(note)
    if recs:
        _settings_section(report, study, groups)
        _runs_section(report, study, groups)
        if any(r.bleu_rows is not None for r in recs):
            _paired_bleu_section(report, study, verdicts, groups)
        _by_step_section(report, verdicts, groups)
        _curves_figure(report, groups)
        for plot in study.plots:
            _plot(report, plot, groups)
        for make in study.sections:
            section = make(groups)
            if section is not None:
                report.section(section.title)
                report.text(section.intro)
                report.table(section.headers, section.rows, csv_name=section.csv)
    for title, name, *column in study.inputs:
        report.section(title)
        rows = [r for r in read_csv(out, name, f"the spec of {study.name}") if not column or r[column[0]]]
        if rows:
            report.table(list(rows[0]), [list(r.values()) for r in rows])
        report.text(f"(committed input: [{name}]({name})" + (f", the rows with {column[0]}" if column else "") + ")")
    path = report.write()
    with open(os.path.join(report.out_dir, GENERATED), "w") as f:
        f.write("\n".join(sorted(set(report.files + [GENERATED]))) + "\n")
    return path


GENERATED = "generated.txt"  # in a report folder: the files its last generation wrote


MARGINS_WITH_CLAIMS = ("The equivalence margins and the magnitude rule (reproduced against direction only) are part of "
                       "each claim's criterion and share its registration.")
POST_HOC_MARGINS = ("The equivalence margins and the magnitude rule were added on 2026-12-05 after the data, so the "
                    "sizes (reproduced against direction only) are post-hoc readings in this study.")


def _verdict_section(report: Report, study: Study, verdicts: Sequence[claims_lib.Verdict]) -> None:
    report.section("Verdicts")
    metrics = ", ".join(dict.fromkeys(METRICS.get(v.claim.metric, v.claim.metric) for v in verdicts))
    report.text(
        f"Each claim is a contrast of one metric ({metrics}; NLL in nats per target token) between two groups of "
        "points, mean(a) - mean(b) with Welch's 95% interval over seeds (with 3 to 6 seeds a side the seed "
        "bootstrap is too coarse to show). Verdicts: **reproduced** (excludes 0 with the paper's sign and reaches the "
        "paper's "
        "value within the margin), **direction only** (the paper's sign, another size: the ratio to the paper's "
        "value with its interval), **no effect** (inside +- margin), **contradicted** (the other sign, or an "
        "effect where the paper has none), **differs from 0** (no paper value), **unresolved**. \"Excludes 0\" "
        f"is p < {claims_lib.ALPHA} after Holm's correction over every claim of its family (one without data yet "
        "counts as p = 1, so a verdict can only strengthen as the rest arrive); the uncorrected verdict is beside "
        "it. Registration: a claim is pre-registered when the commit that first held its criterion precedes the "
        "start of every record it reads (git history). " + (study.margins_note or MARGINS_WITH_CLAIMS))
    report.table(VERDICT_HEADERS, verdict_rows(verdicts), csv_name="verdicts.csv")
    report.text(correction_text(verdicts))
    report.text(conditions_text(verdicts))


def correction_text(verdicts: Sequence[claims_lib.Verdict]) -> str:
    """The verdicts Holm's correction changed, each with the size of its family and how many of it have no data
    yet (those count as p = 1)."""
    def family(v: claims_lib.Verdict) -> str:
        size, waiting = v.family_size
        return (f"{v.kind_raw} -> {v.kind}; Holm over the {size} claims of its family"
                + (f", {waiting} of them without enough records yet, counted p = 1" if waiting else ""))

    changed = [v for v in verdicts if v.changed]
    return "Changed by the correction: " + ("; ".join(f"{v.claim.id} ({family(v)})" for v in changed)
                                            if changed else "none") + "."


def conditions_text(verdicts: Sequence[claims_lib.Verdict]) -> str:
    """The conditions of every verdict: what all of them share once, then each set of claims with what it adds."""
    parts = {v.claim.id: tuple(v.conditions.split("; ")) for v in verdicts}
    first = next(iter(parts.values()), ())
    common = [p for p in first if all(p in ps for ps in parts.values())] if len(set(parts.values())) > 1 else []
    groups: dict[str, list[str]] = {}
    for cid, ps in parts.items():
        groups.setdefault("; ".join(p for p in ps if p not in common) or "nothing further", []).append(cid)
    head = "Conditions of every verdict (budget from the records, the rest from the spec)"
    head += f". Common to all: {'; '.join(common)}.\n\nAnd per claim:" if common else ":"
    return head + "\n\n" + "\n".join(f"- {', '.join(ids)}: {text}" for text, ids in groups.items())


def _settings_section(report: Report, study: Study, groups) -> None:
    report.section("Results per setting (mean ± std over seeds)")
    metrics = [m for m in study.metrics if any(r.metric(m) is not None for ms in groups.values() for _, r in ms)]
    arms = any(a.name for ms in groups.values() for a, _ in ms)
    rows = []
    for label, members in groups.items():
        recs = [r for _, r in members]
        rows.append([label] + ([", ".join(sorted({a.name for a, _ in members}))] if arms else [])
                    + [str(sorted(r.seed for r in recs if r.seed is not None)), recs[0].params,
                       claims_lib.budget_text(recs)] + [mean_std(values(recs, m)) for m in metrics])
    report.table(["setting"] + (["arm"] if arms else []) + ["seeds", "parameters", "budget"]
                 + [METRICS.get(m, m) for m in metrics], rows, csv_name="settings.csv")


def _runs_section(report: Report, study: Study, groups) -> None:
    report.section("Every run")
    names = list(dict.fromkeys(("nll", "ppl", "accuracy", "bleu", "chrf") + study.metrics + (
        "grad", "spikes", "jump", "logit", "wall", "train", "cpu")))
    metrics = [m for m in names if any(r.metric(m) is not None for ms in groups.values() for _, r in ms)]
    arms = any(a.name for ms in groups.values() for a, _ in ms)
    rows = [[label] + ([a.name] if arms else []) + [r.name, r.seed, r.steps] + [r.metric(m) for m in metrics]
            + [r.commit] for label, members in groups.items() for a, r in members]
    report.table(["setting"] + (["arm"] if arms else []) + ["point", "seed", "steps"] + metrics + ["commit"], rows,
                 csv_name="runs.csv", digits=4)


def _members(v: claims_lib.Verdict, groups, side: str) -> list[Record]:
    names = v.claim.a if side == "a" else v.claim.b
    return [r for g in names for _, r in groups.get(_label(g), [])]


def _paired_bleu_section(report: Report, study: Study, verdicts, groups) -> None:
    report.section("Test BLEU (secondary)")
    report.text("Per claim: the difference of mean test BLEU over seeds (Welch), and a paired bootstrap over test "
                "sentences (1,000 resamples, the same sentences for both systems) for each pair of points with the "
                "same seed; greedy decoding, sacreBLEU. BLEU is read beside the NLL verdict, not instead of it; a "
                "claim short of its registered seeds has no contrast here either.")
    rows, csv_rows = [], []
    for v in verdicts:
        if v.interval is None:  # short of min_seeds a side: no verdict, so no secondary contrast
            rows.append([v.claim.id, v.claim.text, _short(v), "—", "—", "—"])
            continue
        a, b = _members(v, groups, "a"), _members(v, groups, "b")
        va, vb = values(a, "bleu"), values(b, "bleu")
        welch = stats_lib.welch_ci(va, vb).text(2) if len(va) >= 2 and len(vb) >= 2 else "—"
        pairs = []
        by_seed = {r.seed: r for r in b if r.bleu_rows is not None}
        if not {r.seed for r in a} & set(by_seed):  # other seeds (the A/A control): pair them in seed order
            by_seed = dict(zip(sorted(r.seed for r in a), [by_seed[k] for k in sorted(by_seed)]))
        for ra in a:
            rb = by_seed.get(ra.seed)
            if ra.bleu_rows is None or rb is None or ra.bleu_rows.shape != rb.bleu_rows.shape:
                continue
            iv = stats_lib.paired_bootstrap_bleu(ra.bleu_rows, rb.bleu_rows)
            pairs.append(iv)
            csv_rows.append([v.claim.id, ra.seed, ra.name, rb.name, iv.diff, iv.lo, iv.hi, iv.p])
        below = sum(1 for iv in pairs if iv.hi is not None and iv.hi < 0)
        above = sum(1 for iv in pairs if iv.lo is not None and iv.lo > 0)
        rows.append([v.claim.id, v.claim.text, welch, len(pairs), above, below])
    report.table(["id", "claim", "Δ BLEU [Welch 95%]", "seed pairs", "pairs above 0", "pairs below 0"], rows)
    report.csv("paired_bleu.csv", ["claim", "seed", "point a", "point b", "Δ BLEU", "lo", "hi", "p"], csv_rows)


def contrasts_by_step(a: Sequence[Record], b: Sequence[Record],
                      min_n: int = 2) -> list[tuple[int, stats_lib.Interval]]:
    """Welch's Δ validation NLL, mean(a) - mean(b), at every step both sides evaluated with at least ``min_n``
    records a side (a record without a validation at a step leaves its side's n short there, the step stays)."""
    steps_of = lambda rs: set().union(*[set(r.curve.valid_step) for r in rs])  # noqa: E731
    out = []
    for s in sorted(steps_of(a) & steps_of(b)):
        va = [x for x in (r.valid_nll_at(s) for r in a) if x is not None]
        vb = [x for x in (r.valid_nll_at(s) for r in b) if x is not None]
        if len(va) >= min_n and len(vb) >= min_n:
            out.append((s, stats_lib.welch_ci(va, vb)))
    return out


def _by_step_section(report: Report, verdicts, groups) -> None:
    rows, series = [], []
    for v in verdicts:
        if v.interval is None:  # short of min_seeds a side, as in the verdicts table
            continue
        pts = contrasts_by_step(_members(v, groups, "a"), _members(v, groups, "b"))
        rows += [[v.claim.id, s, iv.n_a, iv.n_b, iv.diff, iv.lo, iv.hi] for s, iv in pts]
        if len(pts) > 1:
            series.append((v.claim.id, pts))
    if not series:
        return
    report.section("Contrasts against the training budget")
    report.text("Each claim's Δ validation NLL at every validation step both sides evaluated (one run per point "
                "evaluated along the way, not a run per budget): does the sign hold as training goes on? n counts "
                "the records with a validation at that step (at least 2 a side). Only claims with their registered "
                "seeds a side are shown, as in the verdicts.")
    steps = sorted({s for _, pts in series for s, _ in pts})
    table = [[cid] + [next((f"{iv.text(3)} (n {iv.n_a}/{iv.n_b})" for s, iv in pts if s == step), "—")
                      for step in steps] for cid, pts in series]
    report.table(["id"] + [f"Δ NLL at {s}" for s in steps], table)
    report.csv("contrasts_by_step.csv", ["id", "step", "n a", "n b", "Δ NLL", "lo", "hi"], rows)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.set_prop_cycle(color=plt.cm.tab20.colors)
    for cid, pts in series:
        xs = [s for s, _ in pts]
        ax.plot(xs, [iv.diff for _, iv in pts], marker="o", label=cid)
        ax.fill_between(xs, [iv.lo for _, iv in pts], [iv.hi for _, iv in pts], alpha=0.12)
    ax.axhline(0, color="k", lw=0.6)
    ax.set_xlabel("step")
    ax.set_ylabel("Δ valid NLL (a - b)")
    ax.legend(fontsize=6, ncol=2)
    report.figure(fig, "contrasts_by_step", "Each claim's Δ validation NLL against the step, with its 95% Welch band.")


def _curves_figure(report: Report, groups) -> None:
    fig, (ax_t, ax_v) = plt.subplots(1, 2, figsize=(11, 4))
    drawn = False
    for label, members in groups.items():
        recs = [r for _, r in members]
        for ax, get in ((ax_t, lambda r: (r.curve.step, r.curve.train_loss)),
                        (ax_v, lambda r: (r.curve.valid_step, r.curve.valid_nll))):
            by_step: dict[int, list[float]] = {}
            for r in recs:
                for s, y in zip(*get(r)):
                    if y is not None:
                        by_step.setdefault(s, []).append(y)
            if not by_step:
                continue
            xs = sorted(by_step)
            ax.plot(xs, [float(np.mean(by_step[s])) for s in xs], label=label, lw=1)
            if max(len(v) for v in by_step.values()) > 1:
                ax.fill_between(xs, [min(by_step[s]) for s in xs], [max(by_step[s]) for s in xs], alpha=0.15)
            drawn = True
    if not drawn:
        plt.close(fig)
        return
    ax_t.set_title("training loss (mean over seeds; band: their range)", fontsize=9)
    ax_v.set_title("validation NLL", fontsize=9)
    for ax in (ax_t, ax_v):
        ax.set_xlabel("step")
    for ax in (ax_t, ax_v):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6, ncol=2)
    report.section("Learning curves")
    report.figure(fig, "learning_curves", "One line per setting, the seeds aggregated.")


def _plot(report: Report, plot: Plot, groups) -> None:
    recs = [r for members in groups.values() for _, r in members if r.metric(plot.metric) is not None]
    order = lambda v: (not isinstance(v, (int, float)), v if isinstance(v, (int, float)) else str(v))  # noqa: E731
    panels = sorted({r.override(plot.panel) for r in recs}, key=order) if plot.panel else [None]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False, sharey=True)
    for ax, panel in zip(axes[0], panels):
        lines: dict = {}
        for r in recs:
            if plot.panel and r.override(plot.panel) != panel:
                continue
            lines.setdefault(r.override(plot.line), {}).setdefault(r.override(plot.x), []).append(r.metric(plot.metric))
        every = sorted({x for by_x in lines.values() for x in by_x})
        for key in sorted(lines, key=order):
            xs = sorted(lines[key])
            ax.plot(xs, [float(np.mean(lines[key][x])) for x in xs], marker="o", label=str(key))
            ax.fill_between(xs, [min(lines[key][x]) for x in xs], [max(lines[key][x]) for x in xs], alpha=0.15)
        if every and min(every) > 0 and max(every) / min(every) >= 8:
            ax.set_xscale("log", base=2)
        ax.set_xlabel(plot.x.rsplit(".", 1)[-1])
        ax.set_title(f"{plot.panel.rsplit('.', 1)[-1]} = {panel}" if plot.panel else plot.metric, fontsize=9)
        if lines:  # no record has the metric yet: an empty panel, without matplotlib's empty-legend warning
            ax.legend(fontsize=7, title=plot.line.rsplit(".", 1)[-1], title_fontsize=7)
    axes[0][0].set_ylabel(METRICS.get(plot.metric, plot.metric))
    report.figure(fig, plot.name, f"{METRICS.get(plot.metric, plot.metric)} against {plot.x.rsplit('.', 1)[-1]}, one "
                  f"line per {plot.line.rsplit('.', 1)[-1]} (mean over seeds; band: their range).")


def markdown_verdicts(verdicts: Sequence[claims_lib.Verdict]) -> str:
    """A compact verdict table (claim, measured, verdict) for the results index."""
    return markdown_table(["claim", "measured Δ", "verdict", "registration"],
                          [[v.claim.text, v.measured(), v.reading(), v.registration.split(" (")[0]] for v in verdicts])
