"""Logs a user reads: progress with the phase's own rate, one write per line, the start-up and closing lines, and
train.py piped to a file: no progress-bar escapes, no third-party start-up
noise, the start-up line present, each result printed once (marked ``slow``: CI's leg 1b)."""
import logging
import os
import re
import subprocess
import sys
import textwrap

import pytest

from engine import logs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


@pytest.fixture
def records():
    got = []

    class Keep(logging.Handler):
        def emit(self, record):
            got.append(record.getMessage())

    logger = logging.getLogger(logs.LOGGER)
    handler, level = Keep(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield got
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_progress_in_a_file_logs_lines_with_the_phase_rate(records):
    clock = Clock()
    p = logs.Progress("decoding", total=100, unit="sentences", every_s=30, terminal=False, clock=clock)
    for _ in range(10):
        clock.t += 10
        p.update(5)  # 0.5 sentences/s
    p.close()
    assert records == ["decoding: 15/100 sentences, 0.5 sentences/s, 2:50 left",
                       "decoding: 30/100 sentences, 0.5 sentences/s, 2:20 left",
                       "decoding: 45/100 sentences, 0.5 sentences/s, 1:50 left",
                       "decoding: 50 sentences in 1:40, 0.5 sentences/s"]


def test_short_or_disabled_phases_stay_silent(records):
    clock = Clock()
    p = logs.Progress("validation loss", total=3, terminal=False, clock=clock)
    clock.t = 2.0
    p.update(3)
    p.close()
    q = logs.Progress("decoding", total=3, terminal=False, enabled=False, clock=clock)
    clock.t = 100.0
    q.update(3)
    q.close()
    assert records == []


def test_progress_iterates_with_sizes_and_reports_the_total(records):
    clock = Clock()

    def slow(items):
        for x in items:
            clock.t += 3
            yield x

    chunks = [[1, 2], [3], [4, 5, 6]]
    seen = list(logs.progress(slow(chunks), "decoding", total=6, unit="sentences", size=len, terminal=False,
                              clock=clock))
    assert seen == chunks
    assert records == ["decoding: 6 sentences in 0:09, 0.667 sentences/s"]
    assert list(logs.progress(chunks, "x", size=len, terminal=False)) == chunks  # total from the list


def test_one_write_per_line_and_no_bar_escapes():
    writes = []

    class Stream:
        def write(self, s):
            writes.append(s)

        def flush(self):
            pass

        def isatty(self):
            return False

    logger = logging.getLogger("attnlab.test_logs")
    handler = logs.LineHandler(Stream())
    handler.setFormatter(logging.Formatter("[p1] %(message)s"))
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("first")
        logger.warning("second")
    finally:
        logger.removeHandler(handler)
    assert writes == ["[p1] first\n", "[p1] second\n"]


def test_start_line_names_backend_attention_mesh_and_wandb():
    line = logs.start_line(model="EncoderDecoder", params=2_400_000,
                           attention=logs.attention_text("softmax", "auto", "cpu"), mesh_shape={"data": 8, "model": 1},
                           wandb_mode="offline", wandb_dir="runs/x/wandb/offline-run-1", process_index=0,
                           process_count=2, devices="cpu cpu x8")
    assert line == ("start: process 0 of 2, cpu cpu x8; EncoderDecoder, 2.40M parameters; attention softmax via auto "
                    "(cpu: xla > chunked > reference; chunked first from 1024^2 scores); mesh data=8 x model=1; "
                    "W&B offline at runs/x/wandb/offline-run-1 (upload later: wandb sync <that folder>)")
    other = logs.start_line(model="DecoderOnly", params=1000, attention=logs.attention_text("linear", "auto", "gpu"),
                            mesh_shape={"data": 1}, wandb_mode="disabled", wandb_dir=None, process_index=1,
                            process_count=2, devices="gpu H100 x1")
    assert "attention linear (attention/variants.py)" in other and other.endswith("W&B: written by process 0")
    assert logs.attention_text("softmax", "pallas", "gpu") == "softmax via pallas"


def test_devices_text():
    class Device:
        def __init__(self, platform, kind):
            self.platform, self.device_kind = platform, kind

    assert logs.devices_text([Device("cpu", "cpu")] * 8) == "cpu x8"
    assert logs.devices_text([Device("gpu", "NVIDIA H100")]) == "gpu NVIDIA H100 x1"


def test_wandb_folder_and_summary_line():
    class Run:
        dir = "/w/wandb/offline-run-7/files"

    assert logs.wandb_folder(Run()) == "/w/wandb/offline-run-7"
    assert logs.wandb_folder(None) is None
    final = {"train/loss": 2.5, "test/bleu": 21.9, "bleu_signature": "nrefs:1", "step": 20, "stop_reason": "num_steps",
             "validation/loss": 3.0, "perf/tokens_per_sec": 8000.0}
    assert logs.summary_line(final) == "train/loss=2.5, step=20, stop_reason=num_steps, perf/tokens_per_sec=8000"


@pytest.mark.slow  # ~47 s of worker time (a fresh corpus, tokenizer and compile): CI's leg 1b, not the README line
def test_train_py_piped_to_a_file_is_quiet_and_informative(tmp_path):
    """The smoke run as a user pipes it (`| tee log`): a fresh cache, so TFDS prepares the embedded corpus."""
    # As a user runs it: JAX probes its platforms, C++ logs at its default level, one CPU device, W&B offline.
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "WANDB_MODE", "TF_CPP_MIN_LOG_LEVEL")}
    env.update(ATTNLAB_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=REPO, WANDB_SILENT="true",
               XLA_FLAGS=os.environ.get("ATTNLAB_TEST_XLA_FLAGS", ""))
    workdir = tmp_path / "run"
    cmd = [sys.executable, os.path.join(REPO, "train.py"), "--config=configs/translation.py:runlocal",
           f"--workdir={workdir}", "--config.train.num_steps=3", "--config.train.log_every=1",
           "--config.train.eval_every=0", "--config.eval.split_examples=4", "--config.eval.heatmap_examples=1",
           "--config.data.vocab_size=300", "--config.wandb.mode=offline"]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO, env=env, timeout=400)
    out = proc.stdout.decode("utf-8", "replace")
    assert proc.returncode == 0, out[-3000:]
    assert "\x1b[" not in out and "\r" not in out, "progress-bar escapes in piped output"
    for noise in ("libtpu", "Unable to initialize backend", "Downloading and preparing", "Generating splits",
                  "has no dataset_info.json"):
        assert noise not in out, f"third-party noise {noise!r} in:\n{out}"
    assert "first run only" in out  # the corpus preparation is announced in our own words
    start = [line for line in out.splitlines() if " INFO start: " in line]
    assert len(start) == 1, out
    assert re.search(r"start: cpu x1; EncoderDecoder, [\d.]+M parameters; attention softmax via auto \(cpu: .*\); "
                     r"mesh data=\d+ x model=1; W&B offline at "
                     + re.escape(str(workdir / "wandb")) + r"/offline-run-", start[0]), start[0]
    assert len(re.findall(r"test BLEU|test/bleu", out)) == 1, out  # each result printed once
    assert re.search(r" INFO done: .*step=3, stop_reason=num_steps", out), out
    with open(workdir / "train.log", encoding="utf-8") as f:
        log_file = f.read()
    assert "\x1b[" not in log_file and " INFO start: " in log_file
