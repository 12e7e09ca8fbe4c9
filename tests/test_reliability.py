"""Nothing lost, nothing cryptic, through the real CLIs.

- A damaged latest checkpoint (a truncated array file, a garbled ``state/_METADATA`` or data-iterator JSON): a
  rerun resumes from the previous step and its losses after it equal an uninterrupted run's.
- A missing validation file fails before the first training step (no checkpoint written).
- Every CLI mistake (config field, config file, config argument, data option, missing or bad data, vocabulary
  too large, eval --split / --step, empty or missing checkpoints, another model config): exit code 1, one
  ``ERROR`` line, no traceback, in under 10 s of CPU time (the process's user + system time: wall time on a
  shared 2-core machine depends on its load).

One uninterrupted 30-step run of ``configs/lm_copy.py:runlocal`` (checkpoints at 10, 20, 30) is shared by the
module; each damage scenario copies it, keeps steps 10 and 20 and damages 20. The damage and mistake batteries
are marked ``slow`` (``pytest -m slow``); the README's ``pytest`` keeps the ``eval.py`` run.
"""
import itertools
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from data.builders import bible_es_en

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LM = ["--config=configs/lm_copy.py:runlocal", "--config.train.num_steps=30"]
MAX_SECONDS = 10.0
PARALLEL = 4  # CLI processes at a time (most of their time is Python start-up and imports)
_LOG_IDS = itertools.count()


def env(tmp_root) -> dict:
    return dict(os.environ, JAX_PLATFORMS="cpu", WANDB_MODE="disabled", PYTHONPATH=REPO,
                ATTNLAB_CACHE_DIR=str(tmp_root / "cache"), JAX_COMPILATION_CACHE_DIR=str(tmp_root / "xla"),
                # one CPU device, as a user runs the CLIs; conftest's compile-time flags
                XLA_FLAGS=os.environ["ATTNLAB_TEST_XLA_FLAGS"])


def run_clis(jobs: dict, tmp_root) -> dict[str, tuple[int, str, float]]:
    """name -> (exit code, stderr + stdout, CPU seconds) of ``python <script> <args>`` for each name -> (script,
    args) of ``jobs``, run from the repository root, PARALLEL at a time."""
    pending, running, results = list(jobs.items()), {}, {}
    while pending or running:
        while pending and len(running) < PARALLEL:
            name, (script, args) = pending.pop(0)
            log_path = tmp_root / f"cli-{next(_LOG_IDS)}.log"
            with open(log_path, "w") as log:
                proc = subprocess.Popen([sys.executable, os.path.join(REPO, script), *map(str, args)], stdout=log,
                                        stderr=subprocess.STDOUT, env=env(tmp_root), cwd=REPO)
            running[name] = (proc, log_path)
        for name, (proc, log_path) in list(running.items()):
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                results[name] = (proc.returncode, log_path.read_text(), usage.ru_utime + usage.ru_stime)
                del running[name]
        time.sleep(0.05)
    return results


def losses(workdir) -> dict[int, float]:
    """train/loss per step; for a step logged twice (before and after a resume) the later record wins."""
    out = {}
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if "train/loss" in r:
                out[r["step"]] = r["train/loss"]
    return out


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("reliability")


@pytest.fixture(scope="module")
def baseline(root):
    """The uninterrupted run: 30 steps, checkpoints at 10, 20 and 30."""
    workdir = root / "baseline"
    code, out, _ = run_clis({"baseline": ("train.py", [*LM, f"--workdir={workdir}"])}, root)["baseline"]
    assert code == 0, out
    assert sorted(os.listdir(workdir / "checkpoints")) == ["10", "20", "30"]
    return workdir


@pytest.fixture(scope="module")
def corpus(root):
    rows = bible_es_en.read_pairs(bible_es_en.CORPUS_PATH)[:300]
    path = root / "pairs.tsv"
    path.write_text("".join(f"{r[3]}\t{r[4]}\n" for r in rows), encoding="utf-8")
    bad = root / "bad.tsv"
    bad.write_text("".join(f"{r[3]}\t{r[4]}\n" for r in rows[:7]) + "a line without a tab\n", encoding="utf-8")
    return path, bad


def truncate_array_file(step_dir):
    d = step_dir / "state" / "ocdbt.process_0" / "d"
    biggest = max(d.iterdir(), key=lambda p: p.stat().st_size)
    os.truncate(biggest, biggest.stat().st_size // 2)


def garble(path):
    os.truncate(path, path.stat().st_size // 2)


DAMAGE = {"truncated array file": truncate_array_file,
          "garbled state/_METADATA": lambda step_dir: garble(step_dir / "state" / "_METADATA"),
          "garbled data JSON": lambda step_dir: garble(step_dir / "data" / "metadata")}


@pytest.fixture(scope="module")
def reruns(baseline, root):
    """damage -> (workdir, rerun result): a copy of the baseline cut back to steps 10 and 20 (as if the run had
    stopped after step 20), step 20 damaged, then ``train.py`` rerun with the same config."""
    workdirs, jobs = {}, {}
    for damage, apply in DAMAGE.items():
        workdir = root / f"damaged-{damage.replace(' ', '_').replace('/', '_')}"
        shutil.copytree(baseline, workdir)
        shutil.rmtree(workdir / "checkpoints" / "30")
        apply(workdir / "checkpoints" / "20")
        workdirs[damage] = workdir
        jobs[damage] = ("train.py", [*LM, f"--workdir={workdir}"])
    results = run_clis(jobs, root)
    return {damage: (workdirs[damage], results[damage]) for damage in DAMAGE}


@pytest.mark.slow
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_rerun_past_a_damaged_latest_checkpoint_matches_the_uninterrupted_run(baseline, reruns, damage):
    workdir, (code, out, _) = reruns[damage]
    assert code == 0 and "Traceback" not in out, out
    step20 = workdir / "checkpoints" / "20"
    warnings = [line for line in out.splitlines() if "cannot be restored" in line]
    assert len(warnings) == 1 and f"checkpoint step 20 at {step20} cannot be restored (" in warnings[0], out
    assert f"moved it to {workdir / 'checkpoints_damaged' / '20'} and resumed from step 10" in warnings[0]
    assert (workdir / "checkpoints_damaged" / "20" / "state").is_dir()  # kept aside, not deleted
    assert sorted(os.listdir(workdir / "checkpoints")) == ["10", "20", "30"]
    resumed, uninterrupted = losses(workdir), losses(baseline)
    for step in (15, 20, 25, 30):
        assert resumed[step] == pytest.approx(uninterrupted[step], abs=1e-6), step


TR = ["--config=configs/translation.py:runlocal", "--config.data.source=text_files", "--config.data.vocab_size=200"]


def mistakes(root, corpus, baseline) -> dict[str, tuple[str, list, tuple[str, ...]]]:
    """name -> (script, arguments, texts the ERROR line must contain)."""
    damaged = root / "eval-damaged"
    shutil.copytree(baseline, damaged)
    garble(damaged / "checkpoints" / "20" / "state" / "_METADATA")
    (root / "empty" / "checkpoints").mkdir(parents=True)
    pairs, bad = corpus
    w = f"--workdir={root / 'mistakes'}"  # one workdir per case (below): concurrent runs of one workdir are refused
    cases = {
        "missing validation file": ("train.py", [*TR, f"--config.data.train_files={pairs}",
                                                 f"--config.data.validation_files={root / 'missing.tsv'}",
                                                 f"--workdir={root / 'no-validation'}"], (
            f"ERROR data.validation_files: TSV file '{root / 'missing.tsv'}' does not exist",)),
        "misspelled config field": ("train.py", [*LM, "--config.model.num_head=4", w], (
            "ERROR --config.model.num_head: config.model has no field 'num_head'; did you mean 'num_heads'?",)),
        "missing config file": ("train.py", ["--config=configs/nope.py", w], (
            "ERROR --config=configs/nope.py: config file 'configs/nope.py' does not exist",)),
        "config-argument typo": ("train.py", ["--config=configs/translation.py:runlocl", w], (
            "unknown config arg 'runlocl'; expected one of [", "; did you mean 'runlocal'?")),
        "bad override value": ("train.py", [*LM, "--config.model.num_heads=x", w], ("--config.model.num_heads=x",)),
        "data.source typo": ("train.py", [*TR, f"--config.data.train_files={pairs}", "--config.data.source=textfiles",
                                          w], (
            "data.source='textfiles'; expected one of ('bible_es_en', 'tfds', 'text_files'); "
            "did you mean 'text_files'?",)),
        "missing train file": ("train.py", [*TR, f"--config.data.train_files={root / 'nope.tsv'}", w], (
            f"data.train_files: TSV file '{root / 'nope.tsv'}' does not exist",)),
        "on_bad_line=error": ("train.py", [*TR, f"--config.data.train_files={bad}", "--config.data.on_bad_line=error",
                                           w], (
            f"{bad}:8: expected 2 tab-separated fields (source, target), found 1",)),
        "vocabulary too large": ("train.py", [*TR, f"--config.data.train_files={pairs}",
                                              "--config.data.vocab_size=8000", w], (
            "data.vocab_size=8000 is too large for the training split",)),
        "eval --split=bogus": ("eval.py", [LM[0], f"--workdir={baseline}", "--split=bogus"], (
            "ERROR --split=bogus: expected one of ('validation',)",)),
        "eval --step=15": ("eval.py", [LM[0], f"--workdir={baseline}", "--step=15"], (
            f"ERROR no checkpoint at --step=15 in {baseline / 'checkpoints'}; steps: [10, 20, 30]",)),
        "eval damaged --step=20": ("eval.py", [LM[0], f"--workdir={damaged}", "--step=20"], (
            f"ERROR checkpoint step 20 is damaged in {damaged / 'checkpoints'}; steps: [10, 30]; damaged: 20 "
            "(state/_METADATA is not valid JSON",)),
        "eval empty checkpoints/": ("eval.py", [LM[0], f"--workdir={root / 'empty'}"], (
            f"ERROR no checkpoint in {root / 'empty' / 'checkpoints'} (it is empty)",)),
        "eval missing workdir": ("eval.py", [LM[0], f"--workdir={root / 'nowhere'}"], (
            f"ERROR no checkpoints/ in --workdir={root / 'nowhere'}",)),
        "eval another config": ("eval.py", ["--config=configs/lm_copy.py:runlocal,heads=2", f"--workdir={baseline}"], (
            "ERROR --config differs from the config the run trained with", "model/data field(s): ",
            "model.num_heads: 4 in the run, 2 in --config", "Leave out --config to use the run's own")),
    }
    return {name: (script, [f"{w}-{i}" if a == w else a for a in args], texts)
            for i, (name, (script, args, texts)) in enumerate(cases.items())}


@pytest.fixture(scope="module")
def mistake_runs(root, corpus, baseline):
    """name -> (expected texts, (exit code, output, CPU seconds)) for every case of ``mistakes``."""
    cases = mistakes(root, corpus, baseline)
    results = run_clis({name: (script, args) for name, (script, args, _) in cases.items()}, root)
    return {name: (cases[name][2], results[name]) for name in cases}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["missing validation file", "misspelled config field", "missing config file",
                                  "config-argument typo", "bad override value", "data.source typo",
                                  "missing train file", "on_bad_line=error", "vocabulary too large",
                                  "eval --split=bogus", "eval --step=15", "eval damaged --step=20",
                                  "eval empty checkpoints/", "eval missing workdir", "eval another config"])
def test_cli_mistake_is_one_error_line_without_traceback(mistake_runs, name):
    expected, (code, out, cpu_seconds) = mistake_runs[name]
    errors = [line for line in out.splitlines() if "ERROR" in line]
    assert code == 1 and "Traceback" not in out, out
    assert len(errors) == 1, out
    for text in expected:
        assert text in errors[0], errors[0]
    assert cpu_seconds < MAX_SECONDS, (name, cpu_seconds)


@pytest.mark.slow
def test_missing_validation_file_fails_before_the_first_step(mistake_runs, root):
    workdir = root / "no-validation"
    assert mistake_runs["missing validation file"][1][0] == 1
    assert not (workdir / "checkpoints").exists() or not os.listdir(workdir / "checkpoints")
    assert not (workdir / "metrics.jsonl").exists()  # no step was logged


@pytest.mark.slow
def test_eval_creates_no_workdir(mistake_runs, root):
    assert mistake_runs["eval missing workdir"][1][0] == 1 and not (root / "nowhere").exists()


def test_eval_says_what_it_evaluates_then_decodes_with_progress(root, corpus):
    """eval.py on a 4-step translation run: one start line naming the checkpoint, the workdir and the split
    before anything loads, the decoding line of the final evaluation, the results in their folder."""
    workdir = root / "translation"
    train = [*TR, f"--config.data.train_files={corpus[0]}", "--config.train.num_steps=4", f"--workdir={workdir}",
             "--config.train.checkpoint_every=4", "--config.eval.at_end=false"]
    code, out, _ = run_clis({"train": ("train.py", train)}, root)["train"]
    assert code == 0, out
    code, out, _ = run_clis({"eval": ("eval.py", [f"--workdir={workdir}", "--split=validation", "--examples="])},
                            root)["eval"]
    assert code == 0 and "Traceback" not in out, out
    lines = [line.split(" INFO ", 1)[1] for line in out.splitlines() if " INFO " in line]
    assert lines[0] == f"evaluating checkpoint step 4 (the latest intact) of {workdir} on the validation split", out
    assert "decoding the validation split with greedy search (config.eval.decode)" in lines, out
    assert sorted(os.listdir(workdir / "eval" / "validation_step4")) == [
        "attention.txt", "metrics.jsonl", "outputs", "results.json"]
