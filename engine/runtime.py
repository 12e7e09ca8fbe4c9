"""Process set-up for the entry points: logging, multi-host initialization."""
from __future__ import annotations

import logging
import os
import sys


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


class _TqdmHandler(logging.StreamHandler):
    """Log lines that do not break an active tqdm progress bar."""

    def emit(self, record):
        from tqdm import tqdm

        try:
            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # logging must never raise into the training loop.
            self.handleError(record)


def setup_logging(logfile: str | None = None, level: int = logging.INFO) -> logging.Logger:
    """The ``attnlab`` logger: INFO to stderr (tqdm-safe) and, when given, to ``logfile``."""
    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.WARNING)  # Orbax logs every save at INFO through absl.
    logger = logging.getLogger("attnlab")
    logger.setLevel(level)
    logger.propagate = False
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S")
    if not any(isinstance(h, _TqdmHandler) for h in logger.handlers):
        h = _TqdmHandler()
        h.setFormatter(fmt)
        logger.addHandler(h)
    if logfile:
        path = os.path.abspath(logfile)
        if not any(getattr(h, "baseFilename", None) == path for h in logger.handlers):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fh = logging.FileHandler(path)
            fh.setFormatter(fmt)
            logger.addHandler(fh)
    return logger


def maybe_initialize_distributed(mode: str) -> bool:
    """Call ``jax.distributed.initialize()`` for multi-host runs, before any other JAX call.

    mode: "yes" (always), "no" (never) or "auto" (when the environment shows a multi-process launch: a
    coordinator address, SLURM, Open MPI, or a Cloud TPU pod). Returns whether it initialized.
    A manual launch sets ``JAX_COORDINATOR_ADDRESS=host:port``, ``JAX_NUM_PROCESSES`` and ``JAX_PROCESS_ID``
    on every host; cluster launchers (SLURM, Open MPI, TPU pods) are detected by JAX itself.
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
    jax.distributed.initialize(**kwargs)
    return True


def enable_compilation_cache(path: str | None = None) -> str:
    """Persist compiled XLA programs (``$JAX_COMPILATION_CACHE_DIR`` or ``~/.cache/attnlab/xla``), so a resumed
    or repeated run skips recompiling the same steps."""
    import jax

    path = path or os.environ.get("JAX_COMPILATION_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "attnlab", "xla")
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    return path
