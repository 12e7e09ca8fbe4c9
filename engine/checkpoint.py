"""Checkpoints (Orbax ``CheckpointManager``) and clean stops on SIGTERM / SIGINT.

A checkpoint step directory ``<workdir>/checkpoints/<step>/`` holds two items:
- ``state``: the train state pytree (params, optimizer state, step, RNG key, NaN-guard flags), saved with
  ``StandardSave`` and restored with ``StandardRestore`` onto the shardings of the running job;
- ``data``: the data iterator's state (JSON), so a resumed run sees exactly the batches an uninterrupted one
  would.
"""
from __future__ import annotations

import base64
import logging
import os
import signal
import time
from typing import Any, Optional

import jax
import numpy as np
import orbax.checkpoint as ocp

log = logging.getLogger("attnlab")


def _encode_data_state(state: Any) -> Any:
    if isinstance(state, bytes):
        return {"__bytes_b64__": base64.b64encode(state).decode("ascii")}
    return state


def _decode_data_state(state: Any) -> Any:
    if isinstance(state, dict) and set(state) == {"__bytes_b64__"}:
        return base64.b64decode(state["__bytes_b64__"])
    return state


class Checkpointer:
    """Periodic and final checkpoints of (train state, data iterator state) under ``directory``."""

    def __init__(self, directory: str, *, max_to_keep: int = 3, async_save: bool = True):
        self.directory = os.path.abspath(directory)
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, create=True, enable_async_checkpointing=async_save
        )
        self.manager = ocp.CheckpointManager(self.directory, options=options, item_names=("state", "data"))

    def latest_step(self) -> Optional[int]:
        return self.manager.latest_step()

    def all_steps(self) -> list[int]:
        return list(self.manager.all_steps())

    def save(self, step: int, state: Any, data_state: Any) -> None:
        """Save (asynchronously when enabled) at ``step``; a step already saved is left as it is."""
        if step in self.manager.all_steps():
            return
        self.manager.save(
            int(step),
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state),
                data=ocp.args.JsonSave(_encode_data_state(data_state)),
            ),
        )

    def restore(self, abstract_state: Any, step: Optional[int] = None) -> tuple[Any, Any, int]:
        """(state, data_state, step) at ``step`` (default: latest) onto the shardings of ``abstract_state``.

        abstract_state: a pytree of ``jax.ShapeDtypeStruct`` with ``sharding`` set, matching the saved state.
        """
        step = self.latest_step() if step is None else int(step)
        if step is None:
            raise ValueError(f"no checkpoint found in {self.directory}")
        if step not in self.manager.all_steps():
            raise ValueError(f"no checkpoint at step {step} in {self.directory}; have {self.all_steps()}")
        restored = self.manager.restore(
            step,
            args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state), data=ocp.args.JsonRestore()),
        )
        return restored["state"], _decode_data_state(restored["data"]), step

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()


class StopRequest:
    """Turns SIGTERM / SIGINT into a flag the train loop polls, so it can checkpoint and exit cleanly.

    A second SIGINT while a stop is pending raises KeyboardInterrupt at once. Use as a context manager; the
    previous handlers come back on exit.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.signal_name: Optional[str] = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum, frame):
        if self.signal_name is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal_name = signal.Signals(signum).name
        log.warning("%s received: saving a checkpoint and stopping at the end of this step", self.signal_name)

    def __enter__(self) -> "StopRequest":
        for sig in self.SIGNALS:
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not in the main thread: signals stay with their owner.
                pass
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def requested(self) -> bool:
        """True once this process received a stop signal."""
        return self.signal_name is not None

    def check(self, deadline: Optional[float] = None) -> Optional[str]:
        """Why to stop now: the signal's name, ``"max_minutes"`` once ``time.time()`` passed ``deadline``, or
        None. With several hosts every host gets the same answer (one small all-gather), so call it at the same
        steps on every host."""
        code = 1 if self.signal_name is not None else 2 if deadline is not None and time.time() > deadline else 0
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            codes = np.asarray(multihost_utils.process_allgather(np.asarray([code], np.int32))).reshape(-1)
            code = 1 if np.any(codes == 1) else int(codes.max())
        return {0: None, 1: self.signal_name or "SIGTERM", 2: "max_minutes"}[code]
