"""Faults through the real CLI (``train.py`` as a subprocess), each asserting the exit code, the one line the user
sees, no traceback, and that nothing is lost (docs/reliability.md):

stop signals (exit 143 / 130 after a save), a run hung on purpose that ignores SIGTERM (killed at the end of the
grace period with every thread's stack dumped), an exit stuck on a thread that never ends (cut off the same way), the
watchdog, two runs on one workdir, stale locks, a read-only
workdir, a disk that fills up during a checkpoint save, W&B online without network, a damaged tokenizer file, an
empty training file, a rerun with a changed config (refused, leaving the workdir as it was; or recorded with
``--allow_config_change``), a rerun of a finished run, a record of another task or model (refused before anything
is written), another host's lock, and signals outside the train loop (building the data, ``eval.py``).

Faults are injected by a launcher (``LAUNCHER``) that adds a hook to ``train.py``'s run: it sends a signal, hangs,
or fills the disk at a given step; or slows the data build or ``eval.py``'s evaluation and sends a signal then.
All scenarios start in one module fixture, ``PARALLEL`` processes at a time; its tests, and the two that start
their own runs at a step, are marked ``slow`` (``pytest -m slow``; the README's ``pytest`` keeps the others).
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from data.builders import bible_es_en

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LM = ["--config=configs/lm_copy.py:runlocal"]
PARALLEL = 4
TIMEOUT_S = 300

LAUNCHER = '''
import errno
import os
import runpy
import signal
import sys
import threading
import time

from engine import hooks, loop

env = os.environ


def at(name):
    return int(env.get(name, "-1"))


def fill_disk(path):
    """Fill the file system holding ``path`` until less than 48 KiB are free."""
    with open(os.path.join(os.path.dirname(os.path.abspath(path)), "filler"), "wb") as f:
        for size in (1 << 20, 1 << 16, 1 << 12):
            while os.statvfs(path).f_bavail * os.statvfs(path).f_frsize > (48 << 10):
                try:
                    f.write(b"x" * size)
                    f.flush()
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break


class Fault(hooks.Hook):
    def before_step(self, run, batch):
        if run.step + 1 == at("FAULT_FILL_DISK_AT"):
            fill_disk(run.workdir)

    def after_step(self, run):
        if run.step == at("FAULT_SIGNAL_AT"):
            os.kill(os.getpid(), getattr(signal, env["FAULT_SIGNAL"]))
        if run.step == at("FAULT_THREAD_AT"):  # a thread that never ends: the interpreter's exit waits for it
            threading.Thread(target=time.sleep, args=(3600,), name="fault-never-ends").start()
        if run.step == at("FAULT_HANG_AT"):
            if env.get("FAULT_SIGNAL_WHEN_HUNG"):
                sig = getattr(signal, env["FAULT_SIGNAL_WHEN_HUNG"])
                threading.Timer(1.0, os.kill, (os.getpid(), sig)).start()
            print(f"FAULT hanging at step {run.step}", flush=True)
            while True:
                time.sleep(3600)


defaults = loop.default_hooks
loop.default_hooks = lambda config, workdir: defaults(config, workdir) + [Fault()]
if env.get("FAULT_SIGNAL_IN_DATA"):  # a signal while the data is being built (a slow build), outside the loop
    build_data = loop.build_data

    def slow_build_data(task, workdir):
        threading.Timer(1.0, os.kill, (os.getpid(), getattr(signal, env["FAULT_SIGNAL_IN_DATA"]))).start()
        print("FAULT building the data", flush=True)
        time.sleep(120)
        return build_data(task, workdir)

    loop.build_data = slow_build_data
if env.get("FAULT_SIGNAL_IN_FINAL_EVAL"):  # a signal once training ended, during the final evaluation
    evaluation_end = hooks.Evaluation.end

    def signalled_end(self, run):
        os.kill(os.getpid(), getattr(signal, env["FAULT_SIGNAL_IN_FINAL_EVAL"]))
        return evaluation_end(self, run)

    hooks.Evaluation.end = signalled_end
if env.get("FAULT_SIGNAL_IN_EVAL"):  # eval.py: a signal while it evaluates
    from engine import restore

    def slow_evaluate_checkpoint(*args, **kwargs):
        threading.Timer(1.0, os.kill, (os.getpid(), getattr(signal, env["FAULT_SIGNAL_IN_EVAL"]))).start()
        print("FAULT evaluating", flush=True)
        time.sleep(120)

    restore.evaluate_checkpoint = slow_evaluate_checkpoint
sys.argv = [os.path.join(env["ATTNLAB_REPO"], env.get("FAULT_SCRIPT", "train.py"))] + sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
'''


def base_env(tmp) -> dict:
    return dict(os.environ, JAX_PLATFORMS="cpu", WANDB_MODE="disabled", PYTHONPATH=REPO, ATTNLAB_REPO=REPO,
                PYTHONFAULTHANDLER="1",
                ATTNLAB_CACHE_DIR=str(tmp / "cache"), JAX_COMPILATION_CACHE_DIR=str(tmp / "xla"),
                XLA_FLAGS=os.environ["ATTNLAB_TEST_XLA_FLAGS"])


def start(tmp, name: str, args, env_extra=None):
    """A ``train.py`` process (through the fault launcher) writing ``tmp/<name>.log``."""
    log_path = tmp / f"{name}.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, str(tmp / "launch.py"), *map(str, args)], stdout=log,
                                stderr=subprocess.STDOUT, env=dict(base_env(tmp), **(env_extra or {})), cwd=REPO,
                                start_new_session=True)
    return proc, log_path, time.monotonic()


def finish(proc, log_path, t0) -> tuple[int, str, float]:
    try:
        proc.wait(timeout=max(TIMEOUT_S - (time.monotonic() - t0), 1))
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGABRT)  # PYTHONFAULTHANDLER: every thread's stack goes to the log first
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"{log_path.name} did not end within {TIMEOUT_S}s:\n{log_path.read_text()[-8000:]}")
    return proc.returncode, log_path.read_text(), time.monotonic() - t0


def run_all(tmp, jobs: dict) -> dict[str, tuple[int, str, float]]:
    """name -> (exit code, output, seconds) of each name -> (args, env_extra), PARALLEL at a time."""
    pending, running, out = list(jobs.items()), {}, {}
    while pending or running:
        while pending and len(running) < PARALLEL:
            name, (args, env_extra) = pending.pop(0)
            running[name] = start(tmp, name, args, env_extra)
        for name, (proc, log_path, t0) in list(running.items()):
            if proc.poll() is not None or time.monotonic() - t0 > TIMEOUT_S:
                out[name] = finish(proc, log_path, t0)
                del running[name]
        time.sleep(0.1)
    return out


def one_error(out: str, code: int, expected_code: int = 1) -> str:
    """The one ERROR line of a failed run (asserting the exit code, one line, no traceback)."""
    errors = [line for line in out.splitlines() if " ERROR " in f" {line}"]
    assert code == expected_code, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert len(errors) == 1, out[-3000:]
    return errors[0]


def snapshot(directory) -> dict[str, tuple[int, float]]:
    """Every file under ``directory`` with its size and modification time."""
    out = {}
    for dirpath, _, files in os.walk(directory):
        for f in files:
            st = os.stat(os.path.join(dirpath, f))
            out[os.path.relpath(os.path.join(dirpath, f), directory)] = [st.st_size, st.st_mtime_ns]
    return out


def mount_tmpfs(path, size: str, read_only: bool = False) -> bool:
    os.makedirs(path, exist_ok=True)
    opts = f"size={size}" + (",ro" if read_only else "")
    return subprocess.call(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], stderr=subprocess.DEVNULL) == 0


TINY_TRANSLATION = '''
import ml_collections

import data
from engine import config as config_lib


def get_config():
    c = config_lib.base_config()
    c.task = "translation"
    c.data = data.default_translation_config()
    c.data.update(source="text_files", train_files={corpus!r}, vocab_size=200, max_source_len=24,
                  max_target_len=24, batch_size=8, eval_batch_size=8, validation_fraction=0.05, test_fraction=0.05,
                  prefetch=0)
    c.model = ml_collections.ConfigDict(dict(
        d_model=32, num_heads=2, d_ff=64, num_encoder_layers=1, num_decoder_layers=1, dropout_rate=0.0,
        attention_dropout_rate=0.0, norm="pre", position="sinusoidal", max_len=32, dtype="float32",
        attention_impl="auto"))
    c.train.update(learning_rate=3e-3, warmup_steps=2, num_steps=2, log_every=1, stats_every=0,
                   checkpoint_every=0, eval_every=0, peak_flops=1e12)
    c.eval.at_end = False
    return c
'''


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faults")
    (tmp / "launch.py").write_text(LAUNCHER)
    rows = bible_es_en.read_pairs(bible_es_en.CORPUS_PATH)[:200]
    (tmp / "pairs.tsv").write_text("".join(f"{r[3]}\t{r[4]}\n" for r in rows), encoding="utf-8")
    (tmp / "empty.tsv").write_text("", encoding="utf-8")
    (tmp / "tiny.py").write_text(TINY_TRANSLATION.format(corpus=str(tmp / "pairs.tsv")))
    (tmp / "empty.py").write_text(TINY_TRANSLATION.format(corpus=str(tmp / "empty.tsv")))
    yield tmp
    for mount in (tmp / "small", tmp / "ro"):
        if os.path.ismount(mount):
            subprocess.call(["umount", "-l", str(mount)])


@pytest.fixture(scope="module")
def finished(tmp):
    """One finished 20-step run (checkpoints 10 and 20); tests copy it."""
    code, out, _ = run_all(tmp, {"finished": ([*LM, "--config.train.num_steps=20", f"--workdir={tmp / 'done'}"],
                                              None)})["finished"]
    assert code == 0, out
    return tmp / "done"


@pytest.fixture(scope="module")
def runs(tmp, finished):
    """The scenarios, all at once: name -> (exit code, output, seconds)."""
    for name in ("changed", "allowed", "same", "other_task", "no_record", "eval_sigterm"):
        shutil.copytree(finished, tmp / name)
    os.remove(tmp / "no_record" / "config.json")  # a run from before the record: only its checkpoints say
    record = json.loads((tmp / "other_task" / "config.json").read_text())
    record["task"] = "classification"
    (tmp / "other_task" / "config.json").write_text(json.dumps(record))
    (tmp / "locked").mkdir()
    (tmp / "locked" / "run.lock").write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                                         "since": "2026-12-05T22:00:00"}))
    (tmp / "elsewhere").mkdir()
    (tmp / "elsewhere" / "run.lock").write_text(json.dumps({"pid": 4242, "host": "another-host",
                                                            "since": "2026-12-05T20:00:00"}))
    (tmp / "stale").mkdir()
    (tmp / "stale" / "run.lock").write_text(json.dumps({"pid": 2 ** 22 + 7, "host": socket.gethostname(),
                                                        "since": "2026-12-05T21:00:00"}))
    for name in ("locked", "changed", "same", "other_task", "no_record"):
        (tmp / f"{name}.before").write_text(json.dumps(snapshot(tmp / name)))
    long = [*LM, "--config.train.num_steps=400", "--config.train.checkpoint_every=5"]
    jobs = {
        "sigterm": ([*long, f"--workdir={tmp / 'sigterm'}"], dict(FAULT_SIGNAL_AT="7", FAULT_SIGNAL="SIGTERM")),
        "sigint": ([*long, f"--workdir={tmp / 'sigint'}"], dict(FAULT_SIGNAL_AT="7", FAULT_SIGNAL="SIGINT")),
        "hung_sigterm": ([*long, "--config.train.stop_grace_seconds=3", f"--workdir={tmp / 'hung'}"],
                         dict(FAULT_HANG_AT="6", FAULT_SIGNAL_WHEN_HUNG="SIGTERM")),
        "watchdog": ([*long, "--config.train.watchdog_seconds=40", f"--workdir={tmp / 'watchdog'}"],
                     dict(FAULT_HANG_AT="12")),
        "exit_hang": ([*LM, "--config.train.num_steps=4", "--config.train.stop_grace_seconds=3",
                       f"--workdir={tmp / 'exit_hang'}"], dict(FAULT_THREAD_AT="2")),
        "locked": ([*LM, f"--workdir={tmp / 'locked'}"], None),
        "stale": ([*LM, "--config.train.num_steps=2", f"--workdir={tmp / 'stale'}"], None),
        "elsewhere": ([*LM, f"--workdir={tmp / 'elsewhere'}"], None),
        "data_sigterm": ([*LM, f"--workdir={tmp / 'data_sigterm'}"], dict(FAULT_SIGNAL_IN_DATA="SIGTERM")),
        "data_sigint": ([*LM, f"--workdir={tmp / 'data_sigint'}"], dict(FAULT_SIGNAL_IN_DATA="SIGINT")),
        "final_sigterm": ([*LM, "--config.train.num_steps=10", f"--workdir={tmp / 'final_sigterm'}"],
                          dict(FAULT_SIGNAL_IN_FINAL_EVAL="SIGTERM")),
        "eval_sigterm": ([f"--workdir={tmp / 'eval_sigterm'}"], dict(FAULT_SIGNAL_IN_EVAL="SIGTERM",
                                                                      FAULT_SCRIPT="eval.py")),
        "changed": ([*LM, "--config.train.num_steps=20", "--config.train.learning_rate=3e-3",
                     f"--workdir={tmp / 'changed'}"], None),
        "allowed": ([*LM, "--config.train.num_steps=22", "--config.train.learning_rate=3e-3",
                     "--allow_config_change", f"--workdir={tmp / 'allowed'}"], None),
        "same": ([*LM, "--config.train.num_steps=20", f"--workdir={tmp / 'same'}"], None),
        "other_task": ([*LM, "--config.train.num_steps=20", f"--workdir={tmp / 'other_task'}"], None),
        "no_record": ([*LM, "--config.train.num_steps=30", "--config.model.num_decoder_layers=1",
                       f"--workdir={tmp / 'no_record'}"], dict(WANDB_MODE="offline")),
        "wandb": ([*LM, "--config.train.num_steps=2", f"--workdir={tmp / 'wandb'}"],
                  dict(WANDB_MODE="online", WANDB_API_KEY="x" * 40, WANDB_BASE_URL="http://127.0.0.1:9",
                       WANDB_SILENT="true")),
        "empty_tsv": ([f"--config={tmp / 'empty.py'}", f"--workdir={tmp / 'empty'}"], None),
        "tokenizer": ([f"--config={tmp / 'tiny.py'}", f"--workdir={tmp / 'tok'}"], None),
    }
    return run_all(tmp, jobs)


@pytest.mark.slow
def test_sigterm_saves_and_exits_143(runs, tmp):
    code, out, _ = runs["sigterm"]
    assert code == 143 and "Traceback" not in out and " ERROR " not in out, out[-3000:]
    assert "SIGTERM received: saving a checkpoint" in out
    assert "7" in os.listdir(tmp / "sigterm" / "checkpoints")  # saved at the step it stopped


@pytest.mark.slow
def test_sigint_saves_and_exits_130(runs, tmp):
    code, out, _ = runs["sigint"]
    assert code == 130 and "Traceback" not in out and " ERROR " not in out, out[-3000:]
    assert "7" in os.listdir(tmp / "sigint" / "checkpoints")


@pytest.mark.slow
@pytest.mark.parametrize("name, expected", [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_signal_outside_the_train_loop_stops_at_once(runs, tmp, name, expected):
    code, out, seconds = runs[f"data_{name.lower()}"]
    assert code == expected and "Traceback" not in out and " ERROR " not in out, out[-3000:]
    assert f"{name} received: stopping now (outside the train loop there is nothing to save" in out, out[-3000:]
    assert seconds < 60  # the data build would take 120 s
    assert not (tmp / f"data_{name.lower()}").exists()  # the new workdir of a run that never started is gone


def test_a_stop_signal_outside_the_loop_is_announced_even_when_the_process_ends_before_the_watcher_reads_it():
    # The watcher thread never reads the signal here (as when the main thread exits before it is scheduled): the
    # main thread that catches the StopSignal says it, once, before exiting 143.
    script = """
import os, signal, time
from engine import cli, watchdog
watchdog.StopRequest._watch = lambda self, read_fd: None
def main(argv):
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
cli.run(main)
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=REPO))
    out = done.stdout + done.stderr
    assert done.returncode == 143 and "Traceback" not in out, out
    assert out.count("SIGTERM received: stopping now (outside the train loop there is nothing to save") == 1, out


@pytest.mark.slow
def test_a_signal_during_the_final_evaluation_lets_it_finish_and_exits_143(runs):
    code, out, _ = runs["final_sigterm"]
    assert code == 143 and "Traceback" not in out and " ERROR " not in out, out[-3000:]
    assert out.index("training stopped at step 10 (num_steps)") < out.index("SIGTERM received") < out.index("done:")


@pytest.mark.slow
def test_a_signal_during_eval_py_stops_it_at_once(runs):
    code, out, seconds = runs["eval_sigterm"]
    assert code == 143 and "Traceback" not in out and " ERROR " not in out, out[-3000:]
    assert "SIGTERM received: stopping now" in out and seconds < 60, out[-3000:]


@pytest.mark.slow
def test_a_hung_run_exits_after_the_grace_period_with_stacks(runs, tmp):
    code, out, _ = runs["hung_sigterm"]
    line = one_error(out, code, 143)
    assert "SIGTERM: the run did not stop within the grace period of 3 s (train.stop_grace_seconds)" in line
    assert "last good checkpoint: step 5 in" in line
    assert "in after_step" in out and "Thread 0x" in out  # every thread's stack, the hung one included
    hung_at = out.index("FAULT hanging at step 6")
    assert out.index("SIGTERM received") > hung_at


@pytest.mark.slow
def test_an_exit_stuck_on_a_thread_is_cut_off_after_the_grace_period_with_stacks(runs, tmp):
    code, out, seconds = runs["exit_hang"]
    line = one_error(out, code, 1)
    assert "the command did not exit within 3 s of ending (a thread it waits for never ended)" in line
    assert out.index("done:") < out.index(line) and "Thread 0x" in out and seconds < 60, out[-3000:]
    assert "4" in os.listdir(tmp / "exit_hang" / "checkpoints")  # the run itself finished and saved


@pytest.mark.slow
def test_the_watchdog_ends_a_hung_step_and_keeps_the_checkpoints(runs, tmp):
    code, out, _ = runs["watchdog"]
    line = one_error(out, code, 1)
    assert "train step 12 did not finish within 40 s (train.watchdog_seconds): a hang" in line, line
    assert "last good checkpoint: step 10 in" in line and "Thread 0x" in out
    assert sorted(int(s) for s in os.listdir(tmp / "watchdog" / "checkpoints")) == [5, 10]


@pytest.mark.slow
def test_a_second_run_on_a_workdir_is_refused_naming_the_holder(runs, tmp):
    code, out, _ = runs["locked"]
    line = one_error(out, code)
    assert f"is in use by another run: pid {os.getpid()} on host {socket.gethostname()}" in line
    assert json.loads((tmp / "locked.before").read_text()) == snapshot(tmp / "locked")  # no train.log either


@pytest.mark.slow
def test_a_lock_of_another_host_is_refused_naming_the_file_to_delete(runs, tmp):
    code, out, _ = runs["elsewhere"]
    line = one_error(out, code)
    assert "is in use by another run: pid 4242 on host another-host" in line, line
    assert f"when no run lives there, delete {tmp / 'elsewhere' / 'run.lock'}" in line, line
    assert (tmp / "elsewhere" / "run.lock").exists()


@pytest.mark.slow
def test_a_stale_lock_is_taken_over(runs, tmp):
    code, out, _ = runs["stale"]
    assert code == 0 and "Traceback" not in out, out[-3000:]
    assert f"taking over the stale lock {tmp / 'stale' / 'run.lock'} (pid {2 ** 22 + 7} on host" in out
    assert not (tmp / "stale" / "run.lock").exists()  # released at the end


@pytest.mark.slow
def test_two_runs_at_once_one_is_refused_and_the_record_has_each_step_once(tmp):
    w = tmp / "race"
    jobs = [start(tmp, f"race{i}", [*LM, "--config.train.num_steps=12", f"--workdir={w}"]) for i in range(2)]
    results = [finish(*j) for j in jobs]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 1], [out[-2000:] for _, out, _ in results]
    refused = next(out for code, out, _ in results if code == 1)
    assert "is in use by another run: pid" in one_error(refused, 1)
    steps = [r["step"] for r in map(json.loads, open(w / "metrics.jsonl")) if "train/loss" in r and "event" not in r]
    assert steps == sorted(set(steps)) and steps[-1] == 12


@pytest.mark.slow
def test_a_changed_config_is_refused_and_the_workdir_is_untouched(runs, tmp):
    code, out, _ = runs["changed"]
    line = one_error(out, code)
    assert "holds a run of another config: train.learning_rate=0.001 in the record, 0.003 now" in line, line
    assert "--allow_config_change" in line
    assert json.loads((tmp / "changed.before").read_text()) == snapshot(tmp / "changed")


@pytest.mark.slow
def test_an_allowed_change_is_recorded_with_its_step(runs, tmp, finished):
    code, out, _ = runs["allowed"]
    assert code == 0 and "Traceback" not in out, out[-3000:]
    history = [json.loads(line) for line in open(tmp / "allowed" / "config_history.jsonl")]
    assert len(history) == 1 and history[0]["step"] == 20
    assert history[0]["changes"] == {"train.learning_rate": [0.001, 0.003], "train.num_steps": [20, 22]}
    assert (tmp / "allowed" / "config.json").read_text() == (finished / "config.json").read_text()


@pytest.mark.slow
def test_a_finished_run_says_so_and_does_nothing(runs, tmp):
    code, out, _ = runs["same"]
    assert code == 0 and "Traceback" not in out and " ERROR " not in out, out[-3000:]
    assert f"the run in {tmp / 'same'} already finished at step 20 (num_steps)" in out
    assert "training stopped" not in out and "eval step" not in out
    assert json.loads((tmp / "same.before").read_text()) == snapshot(tmp / "same")


@pytest.mark.slow
def test_a_record_of_another_task_leads_with_the_task(runs, tmp):
    code, out, _ = runs["other_task"]
    line = one_error(out, code)
    assert "holds a run of another config: task='classification' in the record, 'lm' now" in line, line
    assert json.loads((tmp / "other_task.before").read_text()) == snapshot(tmp / "other_task")


@pytest.mark.slow
def test_a_checkpoint_of_another_model_is_refused_before_anything_is_written(runs, tmp):
    code, out, _ = runs["no_record"]
    line = one_error(out, code)
    assert f"checkpoint step 20 in {tmp / 'no_record' / 'checkpoints'} was written by another model config" in line
    assert "model.num_decoder_layers=2 in the checkpoint, 1 now" in line, line
    assert json.loads((tmp / "no_record.before").read_text()) == snapshot(tmp / "no_record")  # no log, JSONL, W&B


@pytest.mark.slow
def test_wandb_online_without_network_logs_offline_at_once(runs, tmp):
    code, out, seconds = runs["wandb"]
    assert code == 0 and "Traceback" not in out, out[-3000:]
    warnings = [line for line in out.splitlines() if "W&B" in line and " WARNING " in line]
    assert len(warnings) == 1 and "W&B is unreachable (127.0.0.1:9:" in warnings[0], out[-3000:]
    assert [d for d in os.listdir(tmp / "wandb" / "wandb") if d.startswith("offline-run-")]
    assert seconds < 60  # W&B's own init timeout is 60 s


@pytest.mark.slow
def test_an_empty_training_file_is_one_line_naming_field_and_file(runs, tmp):
    code, out, _ = runs["empty_tsv"]
    line = one_error(out, code)
    assert f"data.train_files: {tmp / 'empty.tsv'} holds no usable sentence pair (0 lines)" in line, line
    assert not (tmp / "empty").exists()  # the refused run's new workdir is gone again (no train.log, no lock)


@pytest.mark.slow
def test_a_damaged_tokenizer_is_rebuilt_from_the_cache_or_refused(runs, tmp):
    code, out, _ = runs["tokenizer"]
    assert code == 0, out[-3000:]
    model = tmp / "tok" / "tokenizer" / "shared.model"
    good = model.read_bytes()
    model.write_bytes(good[: len(good) // 3])
    args = [f"--config={tmp / 'tiny.py'}", "--config.train.num_steps=3", f"--workdir={tmp / 'tok'}"]
    code, out, _ = finish(*start(tmp, "tokenizer-rebuilt", args))
    assert code == 0 and "Traceback" not in out, out[-3000:]
    assert f"tokenizer file {model} is damaged" in out and "rebuilding it from the cache" in out
    assert model.read_bytes() == good
    model.write_bytes(good[: len(good) // 3])
    shutil.rmtree(tmp / "cache" / "tokenizers")
    args[1] = "--config.train.num_steps=4"
    code, out, _ = finish(*start(tmp, "tokenizer-refused", args))
    line = one_error(out, code)
    assert f"tokenizer file {model} is damaged" in line and "the tokenizer cache has no copy" in line


def test_read_only_workdir_is_one_line(tmp):
    ro = tmp / "ro"
    if os.geteuid() == 0:
        if not mount_tmpfs(ro, "1m", read_only=True):
            pytest.skip("cannot mount a read-only tmpfs here")
    else:
        ro.mkdir()
        os.chmod(ro, 0o555)
    for workdir in (ro, ro / "new"):
        code, out, _ = finish(*start(tmp, f"ro-{workdir.name}", [*LM, f"--workdir={workdir}"]))
        line = one_error(out, code)
        assert f"workdir {workdir} is not writable: Read-only file system ({ro})" in line or \
            f"workdir {workdir} is not writable: Permission denied ({ro})" in line, line


@pytest.mark.slow
def test_disk_full_during_a_save_is_one_line_and_the_last_checkpoint_survives(tmp):
    small = tmp / "small"
    if os.geteuid() != 0 or not mount_tmpfs(small, "24m"):
        pytest.skip("needs root to mount a small tmpfs")
    workdir = small / "run"
    args = [*LM, "--config.train.num_steps=30", "--config.train.watchdog_seconds=120", f"--workdir={workdir}"]
    code, out, _ = finish(*start(tmp, "disk-full", args, dict(FAULT_FILL_DISK_AT="20")))
    line = one_error(out, code)
    assert "No space left on device" in line and "last good checkpoint: step 10" in line, line
    assert out.count("No space left on device") == 1, out[-4000:]  # Orbax's own error logs are silenced
    assert [s for s in os.listdir(workdir / "checkpoints") if s.isdigit()] == ["10"]
    os.remove(small / "filler")
    code, out, _ = finish(*start(tmp, "disk-full-rerun", args))
    assert code == 0 and "resumed from" in out and "at step 10" in out, out[-3000:]
    assert sorted(int(s) for s in os.listdir(workdir / "checkpoints") if s.isdigit()) == [10, 20, 30]
