"""Quiet, informative logs: one ``attnlab`` logger, progress that suits a terminal and a file, no third-party noise.

    from engine import logs
    logs.quiet_third_party()                     # first thing in a CLI: no libtpu probe, no TFDS chatter
    log = logs.setup_logging("runs/x/train.log") # INFO to stderr and the file; "[p<i>] " with several hosts
    for chunk in logs.progress(chunks, "decode test", unit="sentences", size=len):
        ...                                      # a bar on a terminal, a line every 30 s in a file or pipe

On a terminal ``progress`` draws a tqdm bar; otherwise (a file, a pipe, ``nohup``) it logs one line every
``every_s`` seconds and one at the end, each with the rate of that phase alone, so a log never holds the
carriage-return redraws or ``ESC[A`` cursor moves of a progress bar. Every log line is written with one
``write`` call, so the lines of several processes sharing a terminal are never glued together.
"""
from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any, Callable, Iterable, Iterator, Optional, TypeVar

T = TypeVar("T")
LOGGER = "attnlab"
EVERY_S = 30.0  # seconds between progress lines when stderr is not a terminal
NOISY_LOGGERS = {  # third-party loggers whose INFO lines say nothing a user can act on
    "jax._src.xla_bridge": logging.WARNING,  # "Unable to initialize backend 'tpu' ... libtpu.so" on every start
    "jax._src.distributed": logging.WARNING,  # coordinator connection chatter
}

log = logging.getLogger(LOGGER)


def is_terminal(stream: Any = None) -> bool:
    """Whether ``stream`` (default stderr) is an interactive terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def quiet_third_party() -> None:
    """Raise the noisy third-party loggers (``NOISY_LOGGERS``, absl's INFO) to WARNING. Call it before JAX
    initializes its backends (the libtpu probe logs then). TFDS's preparation output is quieted where the data
    is prepared (``data.translation``)."""
    for name, level in NOISY_LOGGERS.items():
        logging.getLogger(name).setLevel(level)
    try:
        from absl import logging as absl_logging

        absl_logging.set_verbosity(absl_logging.WARNING)  # Orbax logs every save at INFO through absl.
    except ImportError:
        pass


def process_prefix() -> str:
    """``"[p<i>] "`` when several processes run (JAX initialized for several hosts), else ``""``."""
    import jax

    return f"[p{jax.process_index()}] " if jax.process_count() > 1 else ""


class LineHandler(logging.StreamHandler):
    """Writes each record as one line with a single ``write`` (never glued to another process's line), above
    an active tqdm bar without breaking it."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + "\n"
            stream = self.stream
            from tqdm import tqdm

            with tqdm.external_write_mode(file=stream):
                stream.write(line)
                stream.flush()
        except Exception:  # logging must never raise into the training loop.
            self.handleError(record)


def setup_logging(logfile: Optional[str] = None, level: int = logging.INFO) -> logging.Logger:
    """The ``attnlab`` logger: INFO to stderr (one write per line, tqdm-safe) and, when given, to ``logfile``;
    every line starts with the time, the level and, with several hosts, ``[p<i>]``."""
    quiet_third_party()
    logger = logging.getLogger(LOGGER)
    logger.setLevel(level)
    logger.propagate = False
    fmt = logging.Formatter(process_prefix() + "%(asctime)s %(levelname)s %(message)s", "%H:%M:%S")
    handler = next((h for h in logger.handlers if isinstance(h, LineHandler)), None)
    if handler is None:
        handler = LineHandler(sys.stderr)
        logger.addHandler(handler)
    handler.setFormatter(fmt)
    if logfile:
        path = os.path.abspath(logfile)
        if not any(getattr(h, "baseFilename", None) == path for h in logger.handlers):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fh = logging.FileHandler(path)
            fh.setFormatter(fmt)
            logger.addHandler(fh)
    return logger


def _fmt_seconds(s: float) -> str:
    s = int(round(max(s, 0.0)))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class Progress:
    """Counts work done in one phase and reports it (see the module docstring). ``update(n)`` adds n units."""

    def __init__(self, desc: str, total: Optional[float] = None, unit: str = "it", *, every_s: float = EVERY_S,
                 terminal: Optional[bool] = None, enabled: bool = True, min_report_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic):
        self.desc, self.total, self.unit = desc, total, unit
        self.every_s, self.min_report_s, self.clock = every_s, min_report_s, clock
        self.enabled = enabled
        self.terminal = is_terminal() if terminal is None else terminal
        self.done, self.start = 0.0, clock()
        self.last_line, self.lines = self.start, 0
        self.bar = None
        if enabled and self.terminal:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, unit=f" {unit}", dynamic_ncols=True, leave=False)

    def rate(self) -> float:
        """Units per second since this phase started."""
        return self.done / max(self.clock() - self.start, 1e-9)

    def status(self) -> str:
        """``"<desc>: 120/1326 sentences, 14.2 sentences/s, 1:25 left"`` (no total: no fraction or time left)."""
        n = f"{self.done:g}" + (f"/{self.total:g}" if self.total else "")
        text = f"{self.desc}: {n} {self.unit}, {self.rate():.3g} {self.unit}/s"
        if self.total and self.done:
            text += f", {_fmt_seconds((self.total - self.done) / max(self.rate(), 1e-9))} left"
        return text

    def update(self, n: float = 1) -> None:
        self.done += n
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(n)
            return
        now = self.clock()
        if now - self.last_line >= self.every_s and (self.total is None or self.done < self.total):
            self.last_line, self.lines = now, self.lines + 1
            log.info("%s", self.status())

    def close(self) -> None:
        """Ends the phase: the bar disappears; a phase that took ``min_report_s`` or more logs its total."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elapsed = self.clock() - self.start
        if self.enabled and (elapsed >= self.min_report_s or self.lines):
            log.info("%s: %g %s in %s, %.3g %s/s", self.desc, self.done, self.unit, _fmt_seconds(elapsed),
                     self.rate(), self.unit)
        self.enabled = False


def progress(items: Iterable[T], desc: str, *, total: Optional[float] = None, unit: str = "it",
             size: Optional[Callable[[T], float]] = None, enabled: bool = True, **kwargs: Any) -> Iterator[T]:
    """Yields ``items`` while reporting progress; ``size(item)`` units per item (default 1), ``total`` units in
    all (default ``sum(size(item))`` when ``items`` has a length). ``enabled=False`` counts silently (other
    processes than the lead). Keyword arguments go to ``Progress``."""
    if total is None and hasattr(items, "__len__"):
        items = list(items)
        total = float(sum(size(x) for x in items) if size else len(items))
    p = Progress(desc, total, unit, enabled=enabled, **kwargs)
    try:
        for item in items:
            yield item
            p.update(size(item) if size else 1)
    finally:
        p.close()


def attention_text(kind: str, implementation: str, platform: str) -> str:
    """``"softmax via auto (cpu: xla > chunked > reference; chunked first from 1024x1024 scores)"``: the attention
    kind and the backend that serves it (for ``auto``, the platform's preference order)."""
    from attention import api

    if kind != "softmax":
        return f"{kind} (attention/variants.py)"
    text = f"{kind} via {implementation}"
    if implementation == "auto":
        order = " > ".join(api.AUTO_ORDER.get(platform, api.AUTO_ORDER["cpu"]))
        long = (f"; {api.AUTO_ORDER['cpu_long'][0]} first from {int(api.CPU_LONG_SEQUENCE ** 0.5)}^2 scores"
                if platform == "cpu" else "")
        text += f" ({platform}: {order}{long})"
    return text


def wandb_folder(run: Any) -> Optional[str]:
    """The folder of a W&B run (``<workdir>/wandb/offline-run-...`` or ``run-...``); None without a run."""
    path = getattr(run, "dir", None) if run is not None else None
    if not path:
        return None
    path = os.path.normpath(str(path))
    return os.path.dirname(path) if os.path.basename(path) == "files" else path


def devices_text(devices: list) -> str:
    """``"cpu x8"``, ``"gpu NVIDIA H100 80GB HBM3 x8"``: the platform, the device kind when it says more, the count."""
    first = devices[0]
    kind = "" if str(first.device_kind).lower() == first.platform else f" {first.device_kind}"
    return f"{first.platform}{kind} x{len(devices)}"


def start_line(*, model: str, params: int, attention: str, mesh_shape: dict, wandb_mode: str,
               wandb_dir: Optional[str], process_index: int, process_count: int, devices: str) -> str:
    """The one line every process logs at start: what runs where, and where its W&B run is."""
    mesh = " x ".join(f"{k}={v}" for k, v in mesh_shape.items())
    if process_index > 0:
        wandb = "W&B: written by process 0"
    elif wandb_mode == "disabled":
        wandb = "W&B disabled"
    else:
        wandb = f"W&B {wandb_mode} at {wandb_dir}" if wandb_dir else f"W&B {wandb_mode}"
        if wandb_mode == "offline":
            wandb += " (upload later: wandb sync <that folder>)"
    host = f"process {process_index} of {process_count}, " if process_count > 1 else ""
    return (f"start: {host}{devices}; {model}, {params / 1e6:.2f}M parameters; attention {attention}; "
            f"mesh {mesh}; {wandb}")


def summary_line(final: dict[str, Any], shown_prefixes: tuple[str, ...] = ("train/", "perf/")) -> str:
    """The run's closing line: its facts (step, stop reason, minutes, parameters) and the training metrics of
    the last interval; evaluation results are left out, their own lines printed them already."""
    items = []
    for k, v in final.items():
        if not isinstance(v, (int, float, str)) or k.endswith("signature"):
            continue
        if "/" in k and not k.startswith(shown_prefixes):
            continue
        items.append(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}")
    return ", ".join(items)
