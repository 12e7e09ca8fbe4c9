"""Bad arguments to the study command lines (``python -m studies train``) are one ERROR line and exit code 1, before anything is written;
a bug (any other exception) keeps its traceback; the CPU queue's workers (scripts/queue.sh)."""
import os
import statistics
import subprocess
import sys
import time

import pytest

from engine import cli

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("study, args, line", [
    ("table3", ["--max_points=-1"], "ERROR --max_points=-1; expected a number >= 0"),
    ("heads_vs_depth", ["--max_points=-3"], "ERROR --max_points=-3; expected a number >= 0"),
    ("scale", ["--max_points=-2"], "ERROR --max_points=-2; expected a number >= 0"),
])
def test_bad_argument_is_one_error_line(tmp_path, study, args, line):
    out, workdir = tmp_path / "out", tmp_path / "runs"
    env = dict(os.environ, WANDB_MODE="disabled", PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, "-m", "studies", "train", study, *args, f"--out={out}",
                           f"--workdir={workdir}"], capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [line], proc.stderr
    assert not out.exists() and not workdir.exists()


def test_script_guard_passes_results_and_keeps_bug_tracebacks(capsys):
    assert cli.script(lambda x: x + 1, 1) == 2
    with pytest.raises(SystemExit) as exit_info:
        cli.script(lambda: int("seven"))
    assert exit_info.value.code == 1
    assert capsys.readouterr().err.startswith("ERROR invalid literal for int()")
    with pytest.raises(statistics.StatisticsError):  # a ValueError subclass: a bug in a report, not an argument
        cli.script(statistics.stdev, [1.0])
    with pytest.raises(KeyError):
        cli.script(lambda: {}["missing"])


def test_the_cpu_queue_runs_named_workers_side_by_side_pinned_and_names_bad_settings(tmp_path):
    """scripts/queue.sh: one copy per worker name (QUEUE_WORKER), each with its own lock and log, its steps pinned
    to QUEUE_CPUS; a bad worker name or CPU list is one line and exit code 1 before the queue starts."""
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "queue.sh").write_text(open(os.path.join(REPO, "scripts", "queue.sh")).read())
    (scripts / "q.sh").write_text('source "$(dirname "$0")/queue.sh"\nstart_queue q\nqueue_step step -c '
                                  '"import os, time; print(sorted(os.sched_getaffinity(0))); time.sleep(float('
                                  'os.environ.get(\'HOLD\', 0)))"\n')

    def queue(**env):
        return ["bash", str(scripts / "q.sh")], dict(os.environ, PYTHON=sys.executable, **env)

    cmd, env = queue(QUEUE_WORKER="a", QUEUE_CPUS="0", HOLD="3")
    first = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    log = tmp_path / "runs" / "repro" / "q-a.log"
    for _ in range(100):
        if log.exists() and "start" in log.read_text():
            break
        time.sleep(0.05)
    cmd, env = queue(QUEUE_WORKER="a")
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and again.stderr.splitlines() == [
        "scripts/q.sh worker a is already running (runs/repro/q-a.lock); not starting a second copy"]
    cmd, env = queue(QUEUE_WORKER="b")
    assert subprocess.run(cmd, env=env, timeout=60).returncode == 0  # beside worker a
    assert first.wait(timeout=60) == 0
    text = log.read_text()
    assert "start (commit , worker a, CPUs 0)" in text and "\n[0]\n" in text and "step ended (0)" in text
    assert "step ended (0)" in (tmp_path / "runs" / "repro" / "q-b.log").read_text()
    for env_var, line in (({"QUEUE_WORKER": "a/b"}, "QUEUE_WORKER=a/b: expected letters, digits or _ (it names "
                                                     "the queue's lock and log)"),
                          ({"QUEUE_CPUS": "4096"}, "QUEUE_CPUS=4096: taskset cannot pin to those CPUs (this "
                                                   f"machine has {os.cpu_count()})")):
        cmd, env = queue(**env_var)
        cmd = ["taskset", "-c", str(min(os.sched_getaffinity(0)))] + cmd  # the machine's CPUs, not this process's
        bad = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
        assert bad.returncode == 1 and bad.stderr.splitlines() == [line]
