"""Bad arguments to the study command lines (``python -m studies train``) are one ERROR line and exit code 1, before anything is written;
a bug (any other exception) keeps its traceback."""
import os
import statistics
import subprocess
import sys

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
