"""Quiet, informative logs: one ``attnlab`` logger, progress that suits a terminal and a file, no third-party noise.

    from engine import logs
    logs.quiet_third_party()                     # first thing in a CLI: no libtpu probe, no TFDS chatter
    log = logs.setup_logging("runs/x/train.log") # INFO to stderr and the file; "[p<i>] " with several hosts
                                                 # (on every line), and there C++ std::cout muted (Gloo's chatter)
    for chunk in logs.progress(chunks, "decode test", unit="sentences", size=len):
        ...                                      # a bar on a terminal, a line every 30 s in a file or pipe

On a terminal ``progress`` draws a tqdm bar; otherwise (a file, a pipe, ``nohup``) it logs one line every
``every_s`` seconds and one at the end, each with the rate of that phase alone, so a log never holds the
carriage-return redraws or ``ESC[A`` cursor moves of a progress bar. Every log line is written with one
``write`` call, so the lines of several processes sharing a terminal are never glued together.
"""
from __future__ import annotations

import ctypes
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

# std::cout and std::basic_ios<char>::clear(iostate) in libstdc++, whose ABI is versioned and stable (GLIBCXX_3.4).
LIBSTDCXX, COUT = "libstdc++.so.6", "_ZSt4cout"
IOS_CLEAR = "_ZNSt9basic_iosIcSt11char_traitsIcEE5clearESt12_Ios_Iostate"
BADBIT = 1  # std::ios_base::badbit in libstdc++

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


def mute_cpp_stdout() -> bool:
    """Puts C++ ``std::cout`` in a failed state, so native code prints nothing through it. The Gloo library in
    jaxlib writes ``[Gloo] Rank 0 is connected to 3 peer ranks. ...`` there unconditionally (no log level or
    environment variable governs it) each time a multi-process CPU run first uses a new set of devices. Python's
    ``sys.stdout``, C ``printf``, file descriptor 1 and stderr are untouched, so results, native errors and
    warnings (absl, XLA, Gloo's own errors: stderr) stay visible. Returns whether ``std::cout`` was muted: False
    when the process has not loaded libstdc++ (call it after importing JAX) or uses another C++ library."""
    try:
        lib = ctypes.CDLL(LIBSTDCXX, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)  # the copy jaxlib uses, never a new one
        cout = ctypes.addressof(ctypes.c_char.in_dll(lib, COUT))
        clear = getattr(lib, IOS_CLEAR)
    except (OSError, AttributeError, ValueError):
        return False
    # std::ostream derives virtually from std::basic_ios; the Itanium C++ ABI keeps that base's offset in the
    # word three before the address the object's vtable pointer holds.
    vtable = ctypes.c_ssize_t.from_address(cout).value
    ios = cout + ctypes.c_ssize_t.from_address(vtable - 3 * ctypes.sizeof(ctypes.c_ssize_t)).value
    clear.argtypes, clear.restype = [ctypes.c_void_p, ctypes.c_int], None
    clear(ios, BADBIT)
    return True


def process_prefix() -> str:
    """``"[p<i>] "`` when several processes run (JAX initialized for several hosts), else ``""``."""
    import jax

    return f"[p{jax.process_index()}] " if jax.process_count() > 1 else ""


class HostFormatter(logging.Formatter):
    """``<prefix>HH:MM:SS LEVEL message``, with ``prefix`` (``process_prefix()``) on every line of a message of
    several lines too (a data summary, a traceback), so each line shows its host."""

    def __init__(self, prefix: str = ""):
        super().__init__(prefix + "%(asctime)s %(levelname)s %(message)s", "%H:%M:%S")
        self.prefix = prefix

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        return text.replace("\n", "\n" + self.prefix) if self.prefix else text


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
    every line starts with the time, the level and, with several hosts, ``[p<i>]``. With several hosts C++
    ``std::cout`` is muted too (``mute_cpp_stdout``: Gloo's connection lines)."""
    quiet_third_party()
    logger = logging.getLogger(LOGGER)
    logger.setLevel(level)
    logger.propagate = False
    prefix = process_prefix()
    if prefix:
        mute_cpp_stdout()
    fmt = HostFormatter(prefix)
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
