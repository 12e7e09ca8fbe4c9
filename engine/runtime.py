"""Process set-up for the entry points (logging, multi-host initialization) and the few multi-host
primitives the engine uses: ``is_lead``, ``barrier``, ``allgather_strings``.

Multi-host rule: only the lead process (index 0) writes shared files (config, tokenizer copy, metrics,
outputs, heatmaps, W&B); the other processes read what it wrote after a ``barrier``. Checkpoints are written
collectively by Orbax.
"""
from __future__ import annotations

import importlib.metadata
import logging
import os
import platform
from typing import Sequence


def multi_process_launch() -> bool:
    """Whether the environment shows a launch of several processes (manual, SLURM, Open MPI, TPU pod)."""
    env = os.environ
    if env.get("JAX_COORDINATOR_ADDRESS"):
        return True
    for key in ("JAX_NUM_PROCESSES", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"):
        try:
            if int(env.get(key) or 1) > 1:
                return True
        except ValueError:
            pass
    return "," in env.get("TPU_WORKER_HOSTNAMES", "")


def setup_logging(logfile: str | None = None, level: int = logging.INFO) -> logging.Logger:
    """The ``attnlab`` logger (``engine.logs.setup_logging``): INFO to stderr and, when given, to ``logfile``."""
    from engine import logs

    return logs.setup_logging(logfile, level)


def maybe_initialize_distributed(mode: str) -> bool:
    """Call ``jax.distributed.initialize()`` for multi-host runs, before any other JAX call.

    mode: "yes" (always), "no" (never) or "auto" (when the environment shows a multi-process launch: a
    coordinator address, SLURM, Open MPI, or a Cloud TPU pod). Returns whether it initialized.
    A manual launch sets ``JAX_COORDINATOR_ADDRESS=host:port``, ``JAX_NUM_PROCESSES`` and ``JAX_PROCESS_ID``
    on every host; cluster launchers (SLURM, Open MPI, TPU pods) are detected by JAX itself. CPU processes
    talk through gloo (``$JAX_CPU_COLLECTIVES_IMPLEMENTATION`` overrides it). JAX's preemption service stays off:
    its SIGTERM notifier would take the signal from ``engine.watchdog`` and keep a stopping process alive.
    """
    if mode not in ("auto", "yes", "no"):
        raise ValueError(f"--distributed={mode!r}; expected auto, yes or no")
    if mode == "no":
        return False
    if mode == "auto" and not multi_process_launch():
        return False
    import jax

    kwargs = {}
    for env, arg in (("JAX_NUM_PROCESSES", "num_processes"), ("JAX_PROCESS_ID", "process_id")):
        if os.environ.get(env):
            try:
                kwargs[arg] = int(os.environ[env])
            except ValueError:
                raise ValueError(f"${env}={os.environ[env]!r}; expected an integer") from None
    jax.config.update("jax_cpu_collectives_implementation",
                      os.environ.get("JAX_CPU_COLLECTIVES_IMPLEMENTATION") or "gloo")
    jax.config.update("jax_enable_preemption_service", False)
    jax.distributed.initialize(**kwargs)
    return True


def is_lead() -> bool:
    """Whether this is the process that writes shared files (process 0)."""
    import jax

    return jax.process_index() == 0


def process_logfile(path: str) -> str:
    """``path`` for the lead process; ``<stem>.p<i><ext>`` for process i > 0, so hosts never share a log."""
    import jax

    if jax.process_index() == 0:
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}.p{jax.process_index()}{ext}"


def barrier(name: str) -> None:
    """Wait until every process reached ``barrier(name)`` (no-op with one process)."""
    import jax

    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def allgather_strings(strings: Sequence[str]) -> list[list[str]]:
    """Every process's ``strings`` (lists of any length), in process order, on every process."""
    import jax
    import numpy as np

    if jax.process_count() == 1:
        return [list(strings)]
    from jax.experimental import multihost_utils

    encoded = [s.encode("utf-8") for s in strings]
    sizes = np.asarray([len(encoded), max((len(b) for b in encoded), default=0)], np.int32)
    rows, width = np.asarray(multihost_utils.process_allgather(sizes)).reshape(-1, 2).max(axis=0)
    lengths = np.full((max(rows, 1),), -1, np.int32)
    buf = np.zeros((max(rows, 1), max(width, 1)), np.uint8)
    for i, b in enumerate(encoded):
        lengths[i] = len(b)
        buf[i, : len(b)] = np.frombuffer(b, np.uint8)
    all_lengths = np.asarray(multihost_utils.process_allgather(lengths))
    all_bufs = np.asarray(multihost_utils.process_allgather(buf))
    return [[bytes(all_bufs[p, i, :n]).decode("utf-8") for i, n in enumerate(all_lengths[p]) if n >= 0]
            for p in range(all_lengths.shape[0])]


def enable_compilation_cache(path: str | None = None) -> str:
    """Persist compiled XLA programs (``$JAX_COMPILATION_CACHE_DIR`` or ``~/.cache/attnlab/xla``), so a resumed
    or repeated run skips recompiling the same steps."""
    import jax

    path = path or os.environ.get("JAX_COMPILATION_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "attnlab", "xla")
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    return path


SOFTWARE = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy")  # what a run's numerics depend on


VECTOR_ISAS = ("avx512f", "avx2", "avx", "sve2", "sve", "asimd")  # widest first: what XLA:CPU can compile for


def cpu_model(path: str = "/proc/cpuinfo") -> str:
    """The host CPU: its model name with family, model, stepping and widest vector instruction set from ``path``
    ("AMD EPYC, family 26 model 2 stepping 1, avx512f": cloud CPUs often give only a generic model name, and runs
    on another generation or instruction set need not repeat each other bit for bit); the model name from
    ``platform.processor()`` where ``path`` has none; "" when nothing says."""
    fields: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    if fields:
                        break  # the first processor's block only
                    continue
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name") or platform.processor()
    ident = " ".join(f"{k.split()[-1]} {fields[k]}" for k in ("cpu family", "model", "stepping") if fields.get(k))
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    isa = next((i for i in VECTOR_ISAS if i in flags), "")
    return ", ".join(x for x in (name, ident, isa) if x)


def boot_id(path: str = "/proc/sys/kernel/random/boot_id") -> str:
    """This boot's id, its first 8 hex digits ("" where the kernel gives none): machines that share a host name and
    CPU model (cloud VMs from one image) differ in it; one machine has a new one after a reboot."""
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip().replace("-", "")[:8]
    except OSError:
        return ""


def software_versions() -> dict[str, str]:
    """Python and the installed versions of ``SOFTWARE`` (a package not installed is left out)."""
    out = {"python": platform.python_version()}
    for name in SOFTWARE:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out
