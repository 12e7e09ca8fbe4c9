"""Test-wide setup, set before jax is imported: 8 simulated CPU devices, W&B off, and one XLA compilation cache
for the whole run (both pytest workers and the train.py subprocesses the tests start), so a program that several
tests compile (the same tiny model's train step, say) is compiled once per run."""
import importlib.metadata
import os
import shutil
import tempfile
import uuid


def _fast_compile_flags() -> str:
    """XLA flags that cut compile time, which dominates the suite (its programs are tiny; no test measures speed):
    optimization level 0 (halves a train step's compile time) and, where jaxlib still has them (before 0.11,
    which rejects the flag), the older CPU fusion emitters (39% less time on test_loop + test_interventions,
    125 -> 76 s)."""
    flags = "--xla_backend_optimization_level=0"
    major_minor = tuple(int(x) for x in importlib.metadata.version("jaxlib").split(".")[:2])
    if major_minor < (0, 11):
        flags += " --xla_cpu_use_fusion_emitters=false"
    return flags


# The subprocesses the tests start (train.py, multi-host launches) add the same flags to their own XLA_FLAGS.
FAST_COMPILE_FLAGS = os.environ.setdefault("ATTNLAB_TEST_XLA_FLAGS", _fast_compile_flags())
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8 "
                           + FAST_COMPILE_FLAGS).strip()
os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["WANDB_MODE"] = "disabled"
os.environ["WANDB_SILENT"] = "true"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# NumPy's BLAS threads spin on the tiny reference products the tests make; one thread is faster here.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# A fresh cache per run (the suite's time is measured cold): the controller names it, the workers it starts
# inherit the name through the environment.
_RUN_ID = os.environ.setdefault("ATTNLAB_TEST_RUN", uuid.uuid4().hex[:12])
XLA_CACHE = os.path.join(tempfile.gettempdir(), f"attnlab-test-xla-{_RUN_ID}")
os.environ["JAX_COMPILATION_CACHE_DIR"] = XLA_CACHE
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"


def pytest_sessionfinish(session, exitstatus):
    """The controller (or a run without workers) removes the run's compilation cache."""
    if not hasattr(session.config, "workerinput"):
        shutil.rmtree(XLA_CACHE, ignore_errors=True)


# The slowest files (seconds of worker time each, measured with `pytest --durations=0` on 2 cores on 2026-12-03),
# run first: with `--dist loadfile` each file is one unit, and a long file started last would leave the other
# worker idle for its whole length. The default run (`-m 'not slow'`, pyproject.toml) first, then the files of
# the slow tests (`pytest -m slow`: the study scripts' --quick runs, the multi-process launches, the CLI
# fault-scenario batteries of test_faults.py and test_reliability.py).
SLOW_FILES_FIRST = ("test_attention.py", "test_train.py", "test_faults.py", "test_reliability.py", "test_docs.py",
                    "test_studies_reports.py", "test_tensor_parallel.py", "test_logs.py", "test_tasks.py",
                    "test_interventions.py", "test_loop.py", "test_models.py", "test_doctor.py", "test_chunked.py",
                    "test_multihost.py", "test_repro_head_importance.py", "test_repro.py",
                    "test_repro_explanation.py")


def pytest_collection_modifyitems(session, config, items):
    """The files of ``SLOW_FILES_FIRST`` in that order, then the others in collection order."""
    rank = {name: i for i, name in enumerate(SLOW_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
