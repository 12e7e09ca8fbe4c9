"""Runs that never hang: stop signals with a grace period, and a watchdog over steps, evaluations and saves.

``StopRequest`` (a context manager around the train loop): the first SIGTERM / SIGINT asks the loop to save
and stop at the next step (``check``); the process then exits with 128 + the signal number (143 after
SIGTERM, 130 after SIGINT). When the loop does not get there within ``grace_seconds`` (blocked in a collective
that never returns, say) or a second signal arrives, every thread's stack is dumped (``faulthandler``) and the
process exits at once with that code. The signal is noticed by a thread that reads the signal wakeup file
descriptor, so a main thread blocked in C code cannot keep the process alive.

``StopRequest(at_once=True)`` guards a whole command (``train.py``, ``eval.py``: data build, restore, evaluation,
everything outside the train loop's own ``StopRequest``): there is nothing to save there, so the first signal
raises ``StopSignal`` in the main thread (the command exits with 143 / 130) and the grace period bounds the
exit, also when the main thread is blocked in C code or the interpreter's shutdown waits on a thread. A stop
the train loop's ``StopRequest`` received and did not finish within its block is handed on to that guard, so
its grace period keeps running.

``Watchdog``: ``with watchdog.phase("train step 12"):`` around a piece of work; one that runs longer than
``seconds`` is a hang: one ERROR line (what hung, for how long, the last good checkpoint), every thread's stack
dumped, and exit code ``HUNG_EXIT_CODE`` on this host; the other hosts, blocked in the same collective, do the
same when their own deadline passes. A hang never leaves a half-written checkpoint as the latest: Orbax only
makes a step visible once it is complete. Time the process spends stopped (SIGSTOP, as when a queue pauses its
workers, or a suspended machine) is not work: the watcher, which wakes at least every ``TICK_SECONDS``, notices
that it slept past its wait and moves the deadlines by that time (to within ``TICK_SECONDS``), so a paused run
goes on when continued.
"""
from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

import numpy as np

log = logging.getLogger("attnlab")

HUNG_EXIT_CODE = 1
TICK_SECONDS = 5.0  # the watchdog's longest sleep
STOPPED_AFTER_SECONDS = 1.0  # a sleep this much longer than asked for: the process was stopped, not working
GRACE_SECONDS = 60.0  # the default of train.stop_grace_seconds (also for runs recorded before it existed)


class StopSignal(BaseException):
    """A stop signal outside the train loop (``StopRequest(at_once=True)``); ``code``: the exit code (143 / 130).
    A BaseException, so ``except Exception`` on the way out cannot swallow it."""

    def __init__(self, name: str):
        super().__init__(f"{name} received")
        self.name = name
        self.code = 128 + int(getattr(signal, name))


def signal_exit_code(name: Optional[str]) -> Optional[int]:
    """128 + the signal number for a stop reason named after a signal ("SIGTERM" -> 143), else None."""
    if name in ("SIGTERM", "SIGINT"):
        return 128 + int(getattr(signal, name))
    return None


def dump_stacks(header: str) -> None:
    """``header`` and every thread's Python stack to stderr and to the run's log files (``faulthandler``)."""
    streams = [sys.stderr] + [h.stream for h in logging.getLogger("attnlab").handlers
                              if isinstance(h, logging.FileHandler) and h.stream is not None]
    for stream in streams:
        try:
            stream.write(f"{header}\n")
            stream.flush()
            faulthandler.dump_traceback(file=stream, all_threads=True)
            stream.flush()
        except (OSError, ValueError, AttributeError):  # a closed or unusable stream: the others still get it
            continue


def _said(describe: Callable[[], str]) -> str:
    """``describe()``, or "" when it fails: a line about the last checkpoint must never keep a hung run alive."""
    try:
        return describe()
    except Exception:  # noqa: BLE001
        return ""


def _exit_now(code: int, message: str) -> None:
    log.error("%s", message)
    dump_stacks(f"--- stacks of every thread of pid {os.getpid()} ({message[:80]}...)")
    for h in logging.getLogger("attnlab").handlers:
        try:
            h.flush()
        except Exception:  # noqa: BLE001  exiting anyway
            pass
    os._exit(code)


class StopRequest:
    """Turns SIGTERM / SIGINT into a flag the train loop polls (see the module docstring). Use as a context
    manager in the main thread; the previous handlers and wakeup fd come back on exit.

    grace_seconds: after the first signal, how long the loop has to stop by itself before the process dumps its
    stacks and exits (0 = no limit). describe: called for the line shown when the grace period ends (e.g. the
    last good checkpoint). at_once: a command-wide guard (see the module docstring): the first signal raises
    ``StopSignal`` in the main thread instead of waiting to be polled.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)
    received: Optional[str] = None  # the first stop signal this process received (for the exit code)
    guard: Optional["StopRequest"] = None  # the active command-wide guard (at_once=True), if any

    def __init__(self, grace_seconds: float = GRACE_SECONDS, describe: Callable[[], str] = lambda: "", *,
                 at_once: bool = False):
        self.grace_seconds = float(grace_seconds)
        self.describe = describe
        self.at_once = bool(at_once)
        self.signal_name: Optional[str] = None
        self._raised = False
        self._first: Optional[tuple[int, float]] = None  # (signal number, time.monotonic()) of the first signal
        self._outer: Optional[StopRequest] = None
        self._previous: dict[int, Any] = {}
        self._previous_fd: Optional[int] = None
        self._pipe: Optional[tuple[int, int]] = None
        self._thread: Optional[threading.Thread] = None
        self._announce_lock = threading.Lock()
        self._announced = False

    def _handle(self, signum, frame):
        self.signal_name = self.signal_name or signal.Signals(signum).name
        StopRequest.received = StopRequest.received or self.signal_name
        if self.at_once and not self._raised:
            self._raised = True
            raise StopSignal(self.signal_name)

    def _grace_left(self) -> Optional[float]:
        if self._first is None or self.grace_seconds <= 0:
            return None
        return max(self._first[1] + self.grace_seconds - time.monotonic(), 0.0)

    def _grace_ended(self) -> None:
        name = signal.Signals(self._first[0]).name
        _exit_now(128 + self._first[0], f"{name}: the run did not stop within the grace period of "
                  f"{self.grace_seconds:g} s (train.stop_grace_seconds); exiting now{_said(self.describe)}")

    def _watch(self, read_fd: int) -> None:
        """Reads signal numbers from the wakeup pipe: logs the first, exits on a second or when the grace ends."""
        import select

        while True:
            ready, _, _ = select.select([read_fd], [], [], self._grace_left())
            if not ready:
                self._grace_ended()
            try:
                data = os.read(read_fd, 64)
            except OSError:
                data = b""
            if not data:  # the block ended; a command-wide guard keeps a pending stop's grace period running
                if self.at_once and self._grace_left() is not None:
                    time.sleep(self._grace_left())
                    self._grace_ended()
                return
            for signum in data:
                if signum not in [int(s) for s in self.SIGNALS]:
                    continue  # 0: a stop handed on by an inner StopRequest (``_take_over``)
                name = signal.Signals(signum).name
                if self._first is None:
                    self._first = (signum, time.monotonic())
                    self.signal_name = self.signal_name or name
                    StopRequest.received = StopRequest.received or name
                    self.announce(name)
                else:
                    _exit_now(128 + self._first[0], f"{name} received again while stopping: exiting "
                              f"now{_said(self.describe)}")

    def announce(self, name: str) -> None:
        """Logs, once, what the stop signal ``name`` does (in the train loop: save and stop at the end of the step;
        outside it: stop now): from the watcher thread, or from the main thread that acts on the signal (``check``,
        or the command that caught the ``StopSignal``), which may otherwise end the process before the watcher
        runs."""
        with self._announce_lock:
            if self._announced:
                return
            self._announced = True
        if self.at_once:
            log.warning("%s received: stopping now (outside the train loop there is nothing to save; a second "
                        "signal, or %g s without stopping, exits at once)", name, self.grace_seconds)
        else:
            log.warning("%s received: saving a checkpoint and stopping at the end of this step (a second signal, "
                        "or %g s without stopping, exits at once)", name, self.grace_seconds)

    def _take_over(self, first: tuple[int, float]) -> None:
        """Continue the grace period of a stop an inner StopRequest received (its block ended first)."""
        if self._first is None and self._pipe is not None:
            self._first = first
            self.signal_name = self.signal_name or signal.Signals(first[0]).name
            os.write(self._pipe[1], b"\0")  # wakes the watcher to start the timer

    def __enter__(self) -> "StopRequest":
        if not self.at_once:
            StopRequest.received = None
        if threading.current_thread() is not threading.main_thread():
            return self  # not in the main thread: signals stay with their owner.
        for sig in self.SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        self._pipe = (read_fd, write_fd)
        self._previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        self._thread = threading.Thread(target=self._watch, args=(read_fd,), name="attnlab-stop-signals",
                                        daemon=True)
        self._thread.start()
        self._outer = StopRequest.guard
        if self.at_once:
            StopRequest.guard = self
        return self

    def __exit__(self, *exc) -> None:
        if self.at_once:
            StopRequest.guard = self._outer
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        if self._pipe is not None:
            signal.set_wakeup_fd(self._previous_fd if self._previous_fd is not None else -1)
            if self._first is not None and not self.at_once and self._outer is not None:
                self._outer._take_over(self._first)
            read_fd, write_fd = self._pipe
            os.close(write_fd)  # the watcher reads EOF and ends (a command-wide guard's after its grace period)
            self._thread.join(timeout=0 if self.at_once else 1.0)
            if not self._thread.is_alive():
                os.close(read_fd)
            self._pipe = None

    def requested(self) -> bool:
        """True once this process received a stop signal."""
        return self.signal_name is not None

    def check(self, deadline: Optional[float] = None, save_failed: bool = False) -> Optional[str]:
        """Why to stop now: ``"save_failed"`` when ``save_failed`` (this host's checkpoint save failed), the
        signal's name, ``"max_minutes"`` once ``time.time()`` passed ``deadline``, or None. With several hosts every
        host gets the same answer (one small all-gather; a failed save on any host comes first), so call it at the
        same steps on every host."""
        import jax

        code = 3 if save_failed else 1 if self.signal_name is not None else \
            2 if deadline is not None and time.time() > deadline else 0
        name = self.signal_name
        if name is not None:
            self.announce(name)
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            mine = int(getattr(signal, self.signal_name)) if self.signal_name else 0
            got = np.asarray(multihost_utils.process_allgather(np.asarray([code, mine], np.int32))).reshape(-1, 2)
            code = int(got[:, 0].max()) if np.any(got[:, 0] == 3) or not np.any(got[:, 0] == 1) else 1
            if name is None and np.any(got[:, 1] > 0):
                name = signal.Signals(int(got[got[:, 1] > 0][0, 1])).name
        return {0: None, 1: name or "SIGTERM", 2: "max_minutes", 3: "save_failed"}[code]


def set_grace(seconds: float) -> None:
    """The grace period of the active command-wide guard (``StopRequest(at_once=True)``) and of the command's exit
    (``bound_exit``), once the config says it."""
    global _exit_grace
    _exit_grace = float(seconds)
    if StopRequest.guard is not None:
        StopRequest.guard.grace_seconds = float(seconds)


_exit_grace = GRACE_SECONDS


def bound_exit(code: int) -> None:
    """Bound the exit of a command that is ending with ``code``: when the interpreter has not ended within the grace
    period (``set_grace``; 0 = no bound) because it waits for a thread that never ends (an abandoned background
    save, say), one ERROR line, every thread's stack, and exit ``code`` (``HUNG_EXIT_CODE`` for 0) at once."""
    if _exit_grace <= 0:
        return
    code = int(code) or HUNG_EXIT_CODE
    timer = threading.Timer(_exit_grace, _exit_now, (code, f"the command did not exit within {_exit_grace:g} s of "
                                                         "ending (a thread it waits for never ended); exiting now"))
    timer.daemon = True
    timer.name = "attnlab-exit-bound"
    timer.start()


class Watchdog:
    """Exits the process (stacks dumped, one ERROR line, ``HUNG_EXIT_CODE``) when a ``phase`` outlasts
    ``seconds`` (0 = off). describe: called for the end of the line (e.g. the last good checkpoint)."""

    def __init__(self, seconds: float, describe: Callable[[], str] = lambda: ""):
        self.seconds = float(seconds)
        self.describe = describe
        self._phase: Optional[tuple[str, float, int]] = None
        self._count = 0
        self._cond = threading.Condition()
        self._closed = False
        self._stopped = 0.0  # seconds the process was seen stopped; deadlines are on time.monotonic() minus this
        self._thread: Optional[threading.Thread] = None
        if self.seconds > 0:
            self._thread = threading.Thread(target=self._watch, name="attnlab-watchdog", daemon=True)
            self._thread.start()

    @contextmanager
    def phase(self, name: str, seconds: Optional[float] = None) -> Iterator[None]:
        """Watch the work inside the block: longer than ``seconds`` (default: the watchdog's) is a hang."""
        limit = self.seconds if seconds is None else float(seconds)
        if self._thread is None or limit <= 0:
            yield
            return
        with self._cond:
            self._count += 1
            token = self._count
            outer = self._phase
            self._phase = (name, self._clock() + limit, token)
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self._phase = outer
                self._cond.notify_all()

    def _watch(self) -> None:
        # Every wait is at most TICK_SECONDS, with or without a phase, so a stop that begins at any moment (also
        # between a phase's start and this thread's first look at it) shows as a wait that overran by all but that.
        with self._cond:
            while not self._closed:
                wait = TICK_SECONDS
                if self._phase is not None:
                    name, deadline, token = self._phase
                    left = deadline - self._clock()
                    if left <= 0:
                        stopped = f", not counting {self._stopped:.0f} s the process was stopped" if self._stopped \
                            else ""
                        _exit_now(HUNG_EXIT_CODE, f"{name} did not finish within {self.seconds:g} s "
                                  f"(train.watchdog_seconds{stopped}): a hang; stacks of every thread dumped to stderr "
                                  f"and the log{_said(self.describe)}")
                    wait = min(left, TICK_SECONDS)
                start = time.monotonic()
                self._cond.wait(timeout=wait)
                overslept = time.monotonic() - start - wait
                if overslept > STOPPED_AFTER_SECONDS:
                    self._stopped += overslept
                    log.info("the watchdog did not run for %.0f s (the process was stopped, or held up); not counted "
                             "against train.watchdog_seconds", overslept)

    def _clock(self) -> float:
        """time.monotonic() less the time the process was seen stopped."""
        return time.monotonic() - self._stopped

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
