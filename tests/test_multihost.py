"""Multi-host training as two CPU processes of two devices each (gloo collectives, one shared workdir):
train -> checkpoint -> SIGTERM to one process -> rerun both -> resume -> final evaluation, compared with one
process of four devices running the same config.

Every child process runs ``train.py`` in its own process group with a time limit; on a timeout the whole
group is killed and the test fails with the logs' tails, so the test never hangs.
"""
import glob
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from typing import Optional

import pytest

from data.builders import bible_es_en
from engine import writer as writer_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 8
KILL_AT_BATCH = 5  # process 1 gets SIGTERM when it fetches the batch of step 6: all stop after step 6
TIMEOUT_S = 240  # per launch
pytestmark = pytest.mark.slow  # 10 train.py / eval.py processes: `pytest -m slow` (CI runs it after the README line)

CONFIG = '''
import ml_collections

import data
from engine import config as config_lib


def get_config():
    c = config_lib.base_config()
    c.task = "translation"
    c.data = data.default_translation_config()
    c.data.update(source="text_files", train_files={corpus!r}, cache_dir={cache!r}, vocab_size=200,
                  max_source_len=24, max_target_len=24, batch_size=8, eval_batch_size=8, batch_multiple=4,
                  validation_fraction=0.05, test_fraction=0.05, prefetch=0)
    c.model = ml_collections.ConfigDict(dict(
        d_model=32, num_heads=2, d_ff=64, num_encoder_layers=1, num_decoder_layers=1, dropout_rate=0.1,
        attention_dropout_rate=0.0, norm="pre", position="sinusoidal", max_len=32, dtype="float32",
        attention_impl="auto"))
    c.train.update(learning_rate=3e-3, warmup_steps=4, num_steps={steps}, log_every=1, stats_every=0,
                   checkpoint_every=4, eval_every=0, async_checkpoint=False, peak_flops=1e12)
    c.eval.update(decode="greedy", decode_batch_size=4, length_bucket=32, max_decode_extra=4, num_samples=1,
                  heatmap_examples=1, at_end=True)
    c.wandb.mode = "offline"
    return c
'''

# train.py (or $LAUNCH_SCRIPT), with process SIGTERM_PROCESS sending itself SIGTERM when it fetches training
# batch SIGTERM_AT, and every greedy hypothesis prefixed with its source's first 3 tokens (a model of 8 steps says
# the same thing to every sentence; the prefix makes a hypothesis gathered into the wrong place show), and each
# process that writes the doctor's report adding its index to the file $DOCTOR_WRITES.
LAUNCHER = '''
import os
import runpy
import sys
import time

import jax.numpy as jnp
import models

decode = models.greedy_decode
models.greedy_decode = lambda model, inputs, **kw: jnp.concatenate([inputs[:, :3], decode(model, inputs, **kw)], 1)
at, who = int(os.environ.get("SIGTERM_AT", "-1")), int(os.environ.get("SIGTERM_PROCESS", "-1"))
if at >= 0:
    from engine import tasks
    from kill_at import KillAt

    build = tasks.TranslationTask.build_data

    def build_data(self, workdir, process_index, process_count):
        d = build(self, workdir, process_index, process_count)
        if process_index == who:
            make = d.train_iter
            d.train_iter = lambda: KillAt(make(), at)
        return d

    tasks.TranslationTask.build_data = build_data
if os.environ.get("HANG_AT"):  # process HANG_PROCESS hangs after step HANG_AT; the others block in a collective
    from engine import hooks, loop

    class Hang(hooks.Hook):
        def after_step(self, run):
            if run.step == int(os.environ["HANG_AT"]) and os.environ["JAX_PROCESS_ID"] == os.environ["HANG_PROCESS"]:
                print("HANGING", flush=True)
                while True:
                    time.sleep(3600)

    defaults = loop.default_hooks
    loop.default_hooks = lambda config, workdir: defaults(config, workdir) + [Hang()]
if os.environ.get("BLOCK_DATA"):  # the lead blocks building the data (in Python); the others wait at the barrier
    from engine import tasks

    build_blocked = tasks.TranslationTask.build_data

    def blocked_build_data(self, workdir, process_index, process_count):
        if os.environ["JAX_PROCESS_ID"] == "0":
            print("BUILDING", flush=True)
            while True:
                time.sleep(3600)
        return build_blocked(self, workdir, process_index, process_count)

    tasks.TranslationTask.build_data = blocked_build_data
if os.environ.get("FAIL_SAVE_AT") and os.environ["JAX_PROCESS_ID"] == os.environ["FAIL_SAVE_PROCESS"]:
    import errno

    from orbax.checkpoint._src.checkpointers import async_checkpointer

    wait_for_writes = async_checkpointer._background_wait_for_commit_futures

    def failing_writes(directory, *args, **kwargs):  # this host's writes of the step fail as on a full disk
        if directory.name.split(".")[0] == os.environ["FAIL_SAVE_AT"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return wait_for_writes(directory, *args, **kwargs)

    async_checkpointer._background_wait_for_commit_futures = failing_writes
if os.environ.get("DOCTOR_WRITES"):
    from engine import doctor

    write_report = doctor.write_report

    def counted_write_report(*args, **kwargs):
        with open(os.environ["DOCTOR_WRITES"], "a") as f:
            f.write(os.environ.get("JAX_PROCESS_ID", "0") + "\\n")
        return write_report(*args, **kwargs)

    doctor.write_report = counted_write_report
sys.argv = [os.path.join({repo!r}, os.environ.get("LAUNCH_SCRIPT", "train.py"))] + sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def start(tmp, workdir: str, *, processes: int, devices: int, env_extra=None, script: str = "train.py",
          args=()) -> list[tuple[subprocess.Popen, pathlib.Path]]:
    """Start ``processes`` copies of the launcher (``devices`` CPU devices each) of ``script`` with ``args`` on
    ``workdir``, each in its own process group; returns (process, log path) per process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    # conftest's compile-time flags: compiling the tiny programs costs more than running them.
    xla_flags = f"--xla_force_host_platform_device_count={devices} {os.environ['ATTNLAB_TEST_XLA_FLAGS']}"
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags, LAUNCH_SCRIPT=script, WANDB_MODE="offline",
               PYTHONPATH=os.pathsep.join([REPO, os.path.join(REPO, "tests")]),
               WANDB_SILENT="true", JAX_COMPILATION_CACHE_DIR=str(tmp / "xla_cache"), OMP_NUM_THREADS="1")
    env.update(env_extra or {})
    if processes > 1:
        env.update(JAX_COORDINATOR_ADDRESS=f"localhost:{free_port()}", JAX_NUM_PROCESSES=str(processes))
    out = []
    launch_id = len(glob.glob(str(tmp / "*-p0.out")))
    for i in range(processes):
        log_path = tmp / f"launch{launch_id}-p{i}.out"
        out.append((subprocess.Popen(
            [sys.executable, str(tmp / "launch.py"), f"--config={tmp / 'tiny.py'}", f"--workdir={workdir}", *args],
            env=dict(env, JAX_PROCESS_ID=str(i)), cwd=REPO, stdout=open(log_path, "w"), stderr=subprocess.STDOUT,
            start_new_session=True), log_path))
    return out


def kill_all(started) -> None:
    """SIGKILL the process group of every process still running."""
    for p, _ in started:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def launch(tmp, workdir: str, **kwargs) -> list[tuple[int, str]]:
    """``start`` and wait; returns (exit code, log text) per process. Fails the test, killing every process group,
    after TIMEOUT_S."""
    started = start(tmp, workdir, **kwargs)
    deadline = time.monotonic() + TIMEOUT_S
    try:
        for p, _ in started:
            p.wait(timeout=max(deadline - time.monotonic(), 1))
    except subprocess.TimeoutExpired:
        kill_all(started)
        tails = "\n".join(f"--- {path.name}\n" + path.read_text()[-3000:] for _, path in started)
        pytest.fail(f"launch on {workdir} did not finish within {TIMEOUT_S}s\n{tails}")
    return [(p.returncode, path.read_text()) for p, path in started]


def signal_when(started, marker: str, sig: int = signal.SIGTERM, settle: float = 3.0,
                wait: float = 60.0) -> tuple[list[Optional[int]], float, list[str]]:
    """Once a process's log shows ``marker`` (and ``settle`` seconds more), send ``sig`` to every process;
    returns (exit codes, seconds from the signal to the last exit, log texts). A process still running ``wait``
    seconds after the signal is killed and its code is None."""
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not any(marker in path.read_text() for _, path in started):
            assert time.monotonic() < deadline and all(p.poll() is None for p, _ in started), \
                [path.read_text()[-3000:] for _, path in started]
            time.sleep(0.5)
        time.sleep(settle)
        sent = time.monotonic()
        for p, _ in started:
            p.send_signal(sig)
        codes = []
        for p, _ in started:
            try:
                codes.append(p.wait(timeout=max(sent + wait - time.monotonic(), 0.1)))
            except subprocess.TimeoutExpired:
                codes.append(None)
        waited = time.monotonic() - sent
    finally:
        kill_all(started)
    return codes, waited, [path.read_text() for _, path in started]


def losses(workdir: str) -> dict[int, float]:
    return {r["step"]: r["train/loss"] for r in writer_lib.read_jsonl(os.path.join(workdir, "metrics.jsonl"))
            if "train/loss" in r and "event" not in r}


def assert_ok(results):
    for code, text in results:
        assert code == 0, text[-4000:]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A folder holding the corpus, the config (tiny.py) and the launcher (launch.py)."""
    tmp = tmp_path_factory.mktemp("multihost")
    rows = bible_es_en.read_pairs(bible_es_en.CORPUS_PATH)[:300]
    corpus = tmp / "pairs.tsv"
    corpus.write_text("".join(f"{r[3]}\t{r[4]}\n" for r in rows), encoding="utf-8")
    (tmp / "tiny.py").write_text(CONFIG.format(corpus=str(corpus), cache=str(tmp / "cache"), steps=STEPS))
    (tmp / "launch.py").write_text(LAUNCHER.format(repo=REPO))
    return tmp


@pytest.fixture(scope="module")
def runs(files):
    tmp = files
    one, two = str(tmp / "one_process"), str(tmp / "two_processes")
    single = launch(tmp, one, processes=1, devices=4)
    assert_ok(single)
    first = launch(tmp, two, processes=2, devices=2, env_extra=dict(SIGTERM_AT=str(KILL_AT_BATCH),
                                                                       SIGTERM_PROCESS="1"))
    for code, text in first:  # every process stopped after SIGTERM: 128 + 15
        assert code == 143, text[-4000:]
    second = launch(tmp, two, processes=2, devices=2)
    assert_ok(second)
    return one, two, first, second


def test_sigterm_to_one_process_stops_both_at_the_same_checkpoint(runs):
    _, two, first, _ = runs
    events = [r for r in writer_lib.read_jsonl(os.path.join(two, "metrics.jsonl")) if r.get("event") == "train_end"]
    assert [(e["step"], e["reason"]) for e in events] == [(KILL_AT_BATCH + 1, "SIGTERM"), (STEPS, "num_steps")]
    assert "SIGTERM received" in first[1][1]
    assert sorted(int(d) for d in os.listdir(os.path.join(two, "checkpoints")) if d.isdigit()) == [4, 6, 8]
    assert "resumed from" in open(os.path.join(two, "train.log")).read()
    assert "resumed from" in open(os.path.join(two, "train.p1.log")).read()


def test_loss_curve_equals_one_process_of_four_devices(runs):
    one, two, _, _ = runs
    a, b = losses(one), losses(two)
    assert sorted(a) == sorted(b) == list(range(1, STEPS + 1))
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=1e-5, abs=1e-6), step


def test_evaluation_outputs_equal_one_process(runs):
    one, two, _, _ = runs
    out_one = open(os.path.join(one, "outputs", f"test_step{STEPS}.txt"), encoding="utf-8").read()
    out_two = open(os.path.join(two, "outputs", f"test_step{STEPS}.txt"), encoding="utf-8").read()
    assert out_two == out_one and len(set(out_one.splitlines())) > 8
    bleu = [[r for r in writer_lib.read_jsonl(os.path.join(w, "metrics.jsonl")) if r.get("event") == "bleu"]
            for w in (one, two)]
    assert [(r["bleu"], r["chrf"], r["sentences"]) for r in bleu[0]] == \
        [(r["bleu"], r["chrf"], r["sentences"]) for r in bleu[1]]
    assert sorted(os.listdir(os.path.join(two, "heatmaps"))) == sorted(os.listdir(os.path.join(one, "heatmaps")))


def test_only_the_lead_writes_shared_files(runs):
    _, two, _, _ = runs
    assert sorted(glob.glob(os.path.join(two, "*.jsonl"))) == [os.path.join(two, "metrics.jsonl")]
    assert sorted(os.listdir(os.path.join(two, "tokenizer"))) == ["shared.json", "shared.model"]
    assert os.path.exists(os.path.join(two, "config.json"))
    run_id = open(os.path.join(two, "wandb_run_id")).read().strip()
    offline = glob.glob(os.path.join(two, "wandb", "offline-run-*"))
    assert len(offline) == 2 and {d.rsplit("-", 1)[1] for d in offline} == {run_id}  # one run, two launches
    starts = [r for r in writer_lib.read_jsonl(os.path.join(two, "metrics.jsonl")) if r.get("event") == "start"]
    assert [s["resumed"] for s in starts] == [False, True]
    assert {s["device"] for s in starts} == {"cpu cpu x4"}  # two processes of two devices: one global count


def test_the_doctor_on_two_processes_prints_once_and_the_lead_writes(runs):
    _, two, _, _ = runs
    tmp = pathlib.Path(os.path.dirname(two))
    writes = tmp / "doctor_writes.txt"
    pair = launch(tmp, two, processes=2, devices=2, script="eval.py", args=["--diagnose"],
                  env_extra=dict(DOCTOR_WRITES=str(writes)))
    assert_ok(pair)
    assert writes.read_text().split() == ["0"]  # the lead alone writes the report
    summary = [line for _, text in pair for line in text.splitlines()
               if line.startswith("attention doctor, checkpoint step")]
    assert len(summary) == 1, summary  # printed once, by the lead
    report = json.load(open(os.path.join(two, "eval", f"diagnose_step{STEPS}", "report.json")))
    assert report["findings"] and summary[0].endswith(report["summary"])


def test_admin_scales_are_the_same_on_two_processes(runs):
    """norm="admin" profiles the first global batch: two processes of two devices set the scales (and train) as one
    process of four devices does."""
    one, _, _, _ = runs
    tmp = pathlib.Path(os.path.dirname(one))
    args = ["--config.model.norm=admin", "--config.train.num_steps=3"]
    single = launch(tmp, str(tmp / "admin_one"), processes=1, devices=4, args=args)
    pair = launch(tmp, str(tmp / "admin_two"), processes=2, devices=2, args=args)
    assert_ok(single + pair)
    lines = [[line.split("INFO ", 1)[1] for line in text.splitlines() if "INFO Admin:" in line]
             for _, text in single + pair[:1]]
    assert lines[0] == lines[1] and len(lines[0]) == 1 and lines[0][0].startswith("Admin: 5 residual scales")
    a, b = losses(str(tmp / "admin_one")), losses(str(tmp / "admin_two"))
    assert sorted(a) == sorted(b) == [1, 2, 3]
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=1e-5, abs=1e-6), step


def test_a_run_hung_on_one_host_exits_on_every_host_after_sigterm(files):
    """Process 1 hangs after step 3 (a hook that never returns), so process 0 blocks in the next collective, in C
    code; SIGTERM to both: each exits 143 at the end of the grace period with every thread's stack dumped."""
    started = start(files, str(files / "hung"), processes=2, devices=2, args=[
        "--config.train.num_steps=50", "--config.train.stop_grace_seconds=5"],
        env_extra=dict(WANDB_MODE="disabled", HANG_AT="3", HANG_PROCESS="1"))
    codes, waited, texts = signal_when(started, "HANGING")
    assert codes == [143, 143], [t[-3000:] for t in texts]
    assert waited < 5 + 20, waited
    for text in texts:
        errors = [line for line in text.splitlines() if " ERROR " in line]
        assert len(errors) == 1 and "SIGTERM: the run did not stop within the grace period of 5 s" in errors[0]
        assert "Thread 0x" in text and "Traceback" not in text
    # where the lead waited when the grace period ended: in the collective, or (when the signal reached it between
    # two programs and the loop stopped) in the run's closing W&B flush that its peer never lets finish
    assert any(f"in {where}" in texts[0] for where in ("block_until_ready", "process_allgather", "finish")), \
        texts[0][-3000:]


def test_sigterm_outside_the_train_loop_ends_every_host(files):
    """SIGTERM while the lead builds the data (Python code) and process 1 waits for it at a barrier (C code): JAX's
    preemption notifier does not swallow it; the lead stops at once, process 1 at the latest when the grace
    period ends, both with exit code 143 and no traceback."""
    started = start(files, str(files / "outside"), processes=2, devices=2,
                    args=["--config.train.stop_grace_seconds=5"], env_extra=dict(WANDB_MODE="disabled", BLOCK_DATA="1"))
    codes, waited, texts = signal_when(started, "BUILDING")
    print(f"SIGTERM while building the data: exit codes {codes}, {waited:.1f} s after the signal")
    assert codes == [143, 143], [t[-3000:] for t in texts]
    assert waited < 5 + 20, waited
    for text in texts:
        assert "SIGTERM received: stopping now" in text and "Traceback" not in text, text[-3000:]
        assert len([line for line in text.splitlines() if " ERROR " in line]) <= 1, text[-3000:]


def test_a_save_failing_on_one_host_stops_every_host_with_its_line(files):
    """Process 1's background save of step 8 fails (no space left); process 0's waits for it at Orbax's barrier.
    Both stop at the next step with the same line and exit 1, at once (no wait for the abandoned save); step 4
    stays the latest checkpoint and a rerun resumes from it."""
    workdir = files / "save_failed"
    args = ["--config.train.num_steps=12", "--config.train.async_checkpoint=True"]
    t0 = time.monotonic()
    failed = launch(files, str(workdir), processes=2, devices=2, args=args,
                    env_extra=dict(WANDB_MODE="disabled", FAIL_SAVE_AT="8", FAIL_SAVE_PROCESS="1"))
    seconds = time.monotonic() - t0
    print(f"save failed on process 1: exit codes {[code for code, _ in failed]}, launch {seconds:.1f} s")
    lines = []
    for code, text in failed:
        errors = [line for line in text.splitlines() if " ERROR " in line]
        assert code == 1 and len(errors) == 1 and "Traceback" not in text, text[-4000:]
        lines.append(errors[0].split(" ERROR ", 1)[1])
    assert lines[0] == lines[1], lines
    assert lines[0].startswith(f"saving checkpoint step 8 to {workdir / 'checkpoints' / '8'} failed: OSError: [Errno "
                               f"28] No space left on device; last good checkpoint: step 4"), lines[0]
    assert seconds < TIMEOUT_S / 2, seconds
    assert sorted(int(d) for d in os.listdir(workdir / "checkpoints") if d.isdigit()) == [4]
    events = [r for r in writer_lib.read_jsonl(os.path.join(workdir, "metrics.jsonl")) if "step" in r
              and "train/loss" in r]
    assert max(r["step"] for r in events) in (8, 9, 10), events[-1]
    rerun = launch(files, str(workdir), processes=2, devices=2, args=args, env_extra=dict(WANDB_MODE="disabled"))
    assert_ok(rerun)
    assert "at step 4" in rerun[0][1] and "resumed from" in rerun[0][1], rerun[0][1][-3000:]


ORDER = """
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

from engine import runtime
from engine.steps import in_order

runtime.maybe_initialize_distributed("yes")
mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
params = jax.device_put(jnp.ones((16, 16)), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))
step = jax.jit(lambda p, x: {k: jnp.sum(jnp.tanh(x @ p) * i) for i, k in enumerate("abcdefg")})
step = in_order(step) if sys.argv[1] == "ordered" else step
local = np.random.RandomState(jax.process_index()).randn(4, 16).astype(np.float32)
sums = None
for _ in range(200):  # independent programs with an all-reduce each, as an evaluation's batches are
    terms = step(params, jax.make_array_from_process_local_data(rows, local))
    sums = terms if sums is None else jax.tree.map(jnp.add, sums, terms)
print("sum", float(jax.device_get(sums)["b"]), flush=True)
"""


def test_independent_collective_steps_on_two_processes_finish_in_order(tmp_path):
    """The cause of the multi-host evaluation hang: on XLA:CPU, programs that do not depend on each other run
    concurrently, so their all-reduces reach gloo in different orders on different devices. ``steps.in_order``
    (every train, evaluation and statistics step of a multi-process CPU run) keeps the order: 200 evaluation-like
    steps finish, and both processes agree."""
    (tmp_path / "order.py").write_text(ORDER)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2", PYTHONPATH=REPO,
               JAX_COORDINATOR_ADDRESS=f"localhost:{free_port()}", JAX_NUM_PROCESSES="2", OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, str(tmp_path / "order.py"), "ordered"], env=dict(env, JAX_PROCESS_ID=str(i)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
             for i in range(2)]
    try:
        outs = [p.communicate(timeout=180)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    sums = [[line for line in out.splitlines() if line.startswith("sum ")] for out in outs]
    assert [p.returncode for p in procs] == [0, 0] and len(sums[0]) == 1 and sums[0] == sums[1], outs
