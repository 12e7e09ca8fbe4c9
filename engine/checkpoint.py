"""Checkpoints (Orbax ``CheckpointManager``) that survive damage, and saves that fail in one line.

A checkpoint step directory ``<workdir>/checkpoints/<step>/`` holds two items:
- ``state``: the train state pytree (params, optimizer state, step, RNG key, NaN-guard flags), saved with
  ``StandardSave`` and restored with ``StandardRestore`` onto the shardings of the running job;
- ``data``: the data iterator's state (JSON), so a resumed run sees exactly the batches an uninterrupted one
  would.
When the Checkpointer is given the run's config, every step also records it (flattened) in Orbax's step
metadata (``custom_metadata["config"]``), so a checkpoint of another model config is named with the fields
that differ.

Damage: a step whose files are incomplete or unreadable (an item directory or ``state/_METADATA`` /
``state/manifest.ocdbt`` / ``data/metadata`` missing, or a JSON file garbled) is never the latest step; a
truncated array file shows only when it is read. Restoring
the latest step falls back to the newest step that restores, logs one line per step it skipped (step, path,
what failed) and moves each skipped step into ``<checkpoints>_damaged/`` (renamed, never deleted; outside the
directory Orbax lists). Steps are only moved once an older one restored, so a problem that hits every step
(for instance a changed optimizer) moves nothing and raises CheckpointError naming each step's failure.
"""
from __future__ import annotations

import base64
import json
import logging
import os
import re
import sys
import time
import traceback
from typing import Any, Callable, Mapping, Optional

import jax
import numpy as np
import orbax.checkpoint as ocp

from engine import runtime
from engine import sharding as sharding_lib
from etils import epath

from engine.errors import CheckpointError

log = logging.getLogger("attnlab")

_STEP_NAME = re.compile(r"^(0|[1-9]\d*)$")  # Orbax's standard step names (no prefix, no padding)
_SET_ASIDE_NAME = re.compile(r"^(0|[1-9]\d*)(-\d+)?$")
_CONFIG_SECTIONS = ("task", "model.", "data.")  # config fields that decide what a checkpoint holds
_SHOWN = 3  # differing parameters / fields shown in a message


def _encode_data_state(state: Any) -> Any:
    if isinstance(state, bytes):
        return {"__bytes_b64__": base64.b64encode(state).decode("ascii")}
    return state


def _decode_data_state(state: Any) -> Any:
    if isinstance(state, dict) and set(state) == {"__bytes_b64__"}:
        return base64.b64decode(state["__bytes_b64__"])
    return state


def _one_line(e: BaseException, limit: int = 300) -> str:
    """``Type: message`` of the innermost explicit cause of ``e`` (TensorStore's error, not Orbax's wrapper)."""
    seen = {id(e)}
    while e.__cause__ is not None and id(e.__cause__) not in seen:
        e = e.__cause__
        seen.add(id(e))
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:limit]}{'...' if len(text) > limit else ''}"


def _read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def step_problem(step_dir: str) -> Optional[str]:
    """What makes the step directory unusable, found without reading arrays (missing item directories or
    metadata files, garbled JSON), or None when its files look complete."""
    for rel in ("state", "data"):
        if not os.path.isdir(os.path.join(step_dir, rel)):
            return f"item directory {rel}/ is missing"
    needed = ["state/_METADATA", "data/metadata"]
    if any(n.startswith("ocdbt.process_") for n in os.listdir(os.path.join(step_dir, "state"))):
        needed.append("state/manifest.ocdbt")  # the root of the OCDBT database the arrays live in
    for rel in needed:
        if not os.path.isfile(os.path.join(step_dir, rel)):
            return f"{rel} is missing"
    for rel in ("state/_METADATA", "data/metadata"):
        try:
            _read_json(os.path.join(step_dir, rel))
        except (OSError, UnicodeDecodeError, ValueError) as e:
            return f"{rel} is not valid JSON ({_one_line(e, 120)})"
    return None


def set_aside_directory(directory: str) -> str:
    """Where damaged steps of the checkpoint directory ``directory`` are moved: ``<directory>_damaged``."""
    return os.path.abspath(directory).rstrip(os.sep) + "_damaged"


def inventory(directory: str) -> tuple[list[int], dict[int, str], list[str]]:
    """(steps that look complete, {damaged step: what is wrong}, set-aside step directories) of a checkpoint
    directory, sorted; reads only file names and JSON metadata, creates nothing."""
    intact, damaged = [], {}
    if os.path.isdir(directory):
        for name in os.listdir(directory):
            path = os.path.join(directory, name)
            if _STEP_NAME.match(name) and os.path.isdir(path):
                problem = step_problem(path)
                if problem is None:
                    intact.append(int(name))
                else:
                    damaged[int(name)] = problem
    aside_dir = set_aside_directory(directory)
    aside = sorted((n for n in os.listdir(aside_dir) if _SET_ASIDE_NAME.match(n)),
                   key=lambda n: tuple(int(x) for x in n.split("-"))) if os.path.isdir(aside_dir) else []
    return sorted(intact), dict(sorted(damaged.items())), [os.path.join(aside_dir, n) for n in aside]


def describe_inventory(directory: str) -> str:
    """"steps: [10, 20]; damaged: 30 (what is wrong); set aside earlier: <paths>" for error messages."""
    intact, damaged, aside = inventory(directory)
    parts = [f"steps: {intact}" if intact else "steps: none intact"]
    if damaged:
        parts.append("damaged: " + ", ".join(f"{s} ({p})" for s, p in damaged.items()))
    if aside:
        parts.append(f"set aside earlier: {', '.join(aside)}")
    return "; ".join(parts)


def _shapes(tree: Any) -> dict[str, tuple[tuple[int, ...], str]]:
    return {sharding_lib.path_str(p): (tuple(getattr(x, "shape", ())),
                                       str(np.dtype(x.dtype)) if hasattr(x, "dtype") else "")
            for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


# Fields named first when configs differ: what the run is, then the model's shape, then data and optimizer.
_FIRST_FIELDS = ("task", "model.d_model", "model.num_heads", "model.num_kv_heads", "model.num_layers",
                 "model.num_encoder_layers", "model.num_decoder_layers", "model.d_ff", "model.qk_dim", "model.v_dim",
                 "model.vocab_size", "model.max_len")
_SECTION_ORDER = ("model.", "data.", "seed", "train.", "mesh.", "eval.")


def field_rank(key: str) -> tuple[int, int, str]:
    """Sort key of a dotted config field for messages: ``task`` and the model's shape first, then the rest of
    ``model``, ``data``, ``seed``, ``train``, ``mesh``, ``eval`` and everything else, alphabetically within."""
    if key in _FIRST_FIELDS:
        return 0, _FIRST_FIELDS.index(key), key
    for i, prefix in enumerate(_SECTION_ORDER):
        if key.startswith(prefix):
            return 1 + i, 0, key
    return 1 + len(_SECTION_ORDER), 0, key


def flatten_config(config: Any) -> dict[str, Any]:
    """{"model.num_heads": 4, ...}: the JSON-able leaves of a (Config)Dict, keyed by dotted path."""
    config = config.to_dict() if hasattr(config, "to_dict") else config
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(f"{prefix}{k}.", v)
        else:
            out[prefix[:-1]] = list(value) if isinstance(value, tuple) else value

    walk("", config)
    return json.loads(json.dumps(out, default=str))


def _frames(record: logging.LogRecord) -> traceback.StackSummary:
    """The frames of the exception a log record carries (none without one)."""
    tb = record.exc_info[2] if record.exc_info else None
    return traceback.extract_tb(tb) if tb is not None else traceback.StackSummary()


def _from_orbax(record: logging.LogRecord) -> bool:
    """Whether a log record comes from Orbax: logged there, naming it, or carrying an exception raised in its code
    (asyncio's "Future exception was never retrieved" names only the future; its traceback runs through Orbax)."""
    if "orbax" in record.pathname or "orbax" in record.getMessage():
        return True
    return any("orbax" in frame.filename for frame in _frames(record))


_READ_FRAMES = ("deserializ", "restore", "_read_shard", "_read_array")  # Orbax's read path


def _from_orbax_read(record: logging.LogRecord) -> bool:
    """Whether a log record carries an exception raised while Orbax read a checkpoint (the abandoned reads of a
    failed restore are reported whenever their futures are collected, possibly after a save has started)."""
    return any(part in frame.name for frame in _frames(record) for part in _READ_FRAMES)


class _SaveFailures(logging.Filter):
    """On absl's and asyncio's loggers: drops Orbax's error records (a failed background save is logged there,
    with its traceback, and then carried on from; its abandoned write tasks report "Task exception was never
    retrieved") and keeps the first one's cause for ``Checkpointer.check``. A cause is kept only once a save has
    started (``armed``) and only from a write: the noise of an earlier failed read is dropped, never reported
    as a failed save."""

    def __init__(self):
        super().__init__()
        self.cause: Optional[str] = None
        self.armed = False

    LOGGERS = ("absl", "asyncio")  # Orbax logs through absl; its abandoned write tasks through asyncio

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR or not _from_orbax(record):
            return True
        if self.cause is None and self.armed and not _from_orbax_read(record):
            exc = record.exc_info[1] if record.exc_info else None
            self.cause = _one_line(exc) if exc is not None else " ".join(record.getMessage().split())[:300]
        return False


class Checkpointer:
    """Periodic and final checkpoints of (train state, data iterator state) under ``directory``.

    config: the run's config (a ConfigDict or dict), recorded with every step so a mismatching checkpoint is
    named with the config fields that differ.

    A save that fails (disk full, a read-only or vanished directory), in the call or in Orbax's background
    thread, is reported by ``check`` (called by the train loop's hook every step) as one CheckpointError naming
    the step, the path, the cause and the last good step; Orbax's own error logs of it are silenced. With
    several processes a save can fail on one host only: ``check`` leaves it to the train loop's cross-host
    agreement (``failure``, then ``raise_agreed`` on every host) and ``wait`` agrees by itself, so every host
    stops at the same step with the same line.
    """

    def __init__(self, directory: str, *, max_to_keep: int = 3, async_save: bool = True,
                 config: Optional[Any] = None):
        self.directory = os.path.abspath(directory)
        self.config = flatten_config(config) if config is not None else None
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, create=True, enable_async_checkpointing=async_save
        )
        self.manager = ocp.CheckpointManager(self.directory, options=options, item_names=("state", "data"))
        self._failures = _SaveFailures()
        for name in _SaveFailures.LOGGERS:
            logging.getLogger(name).addFilter(self._failures)
        self._saving: Optional[int] = None
        self._reported = False
        self._abandoned = False  # a save failed on some host: its background work is not waited for

    def step_dir(self, step: int) -> str:
        return os.path.join(self.directory, str(int(step)))

    def latest_step(self) -> Optional[int]:
        """The newest step whose files look complete (see ``step_problem``), or None."""
        for step in sorted(self.manager.all_steps(), reverse=True):
            if step_problem(self.step_dir(step)) is None:
                return step
        return None

    def all_steps(self) -> list[int]:
        return list(self.manager.all_steps())

    def save(self, step: int, state: Any, data_state: Any) -> None:
        """Save (asynchronously when enabled) at ``step``; a step already saved is left as it is, unless its
        files are damaged: then they are moved aside first."""
        if step in self.manager.all_steps():
            problem = step_problem(self.step_dir(step)) if os.path.isdir(self.step_dir(step)) else None
            if problem is None:  # saved, or still being written asynchronously
                return
            moved = self._set_aside(step)
            log.warning("checkpoint step %d at %s is damaged (%s); moved it to %s and saving step %d again",
                        step, self.step_dir(step), problem, moved, step)
        self.check()
        self._saving = int(step)
        self._failures.armed = True
        _filter_abandoned_read_noise()  # a failed write leaves the same abandoned-coroutine noise as a read
        try:
            self.manager.save(
                int(step),
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave(state),
                    data=ocp.args.JsonSave(_encode_data_state(data_state)),
                ),
                custom_metadata={"config": self.config} if self.config is not None else None,
            )
        except Exception as e:  # noqa: BLE001  any failure to write is the one line of check()
            self._failures.cause = self._failures.cause or _one_line(e)
        self.check()

    def failure(self) -> Optional[str]:
        """The line reporting this process's failed save (the step, the path, the cause and the last good step),
        or None while every save succeeded."""
        if self._failures.cause is None:
            return None
        good = self.latest_step()
        last = f"last good checkpoint: step {good}" if good is not None else "no good checkpoint yet"
        return (f"saving checkpoint step {self._saving} to {self.step_dir(self._saving)} failed: "
                f"{self._failures.cause}; {last} in {self.directory}. Training stopped; free the space (or fix the "
                f"directory) and rerun to resume")

    def check(self) -> None:
        """Raise CheckpointError (once) when a save failed (``failure``). With several processes it raises
        nothing: the hosts agree first (``raise_agreed``)."""
        if self._reported or jax.process_count() > 1:
            return
        message = self.failure()
        if message is not None:
            self._reported = True
            raise CheckpointError(message)

    def raise_agreed(self) -> None:
        """On every process at once, after the processes agreed that a save failed on one of them: raise
        ``SaveFailedOnAHost`` with the first failing process's line. The save's background work is abandoned:
        on the other hosts it waits for the failed one at Orbax's barriers."""
        lines = [got[0] for got in runtime.allgather_strings([self.failure() or ""]) if got and got[0]]
        self._abandoned = True
        raise SaveFailedOnAHost(lines[0] if lines else f"saving checkpoint step {self._saving} failed on another "
                                f"host; {self.directory}")

    def _any_host_failed(self, state: int) -> bool:
        """Every process's ``state`` (0 done, 1 saving, 2 failed) gathered; raises when one failed, returns
        whether one is still saving."""
        from jax.experimental import multihost_utils

        got = np.asarray(multihost_utils.process_allgather(np.asarray([state], np.int32))).reshape(-1)
        if np.any(got == 2):
            self.raise_agreed()
        return bool(np.any(got == 1))

    def restore(self, abstract_state: Any, step: Optional[int] = None) -> tuple[Any, Any, int]:
        """(state, data_state, step) at ``step`` onto the shardings of ``abstract_state``.

        abstract_state: a pytree of ``jax.ShapeDtypeStruct`` (with ``sharding`` set to restore sharded),
        matching the saved state. step None: the latest step that restores, skipping (and moving aside) newer
        damaged ones. Raises CheckpointError for a missing or damaged ``step``, when no step restores, and for
        a checkpoint of another model config (found from Orbax's metadata before any array is read).
        """
        if step is not None:
            return self._restore_step(int(step), abstract_state)
        return self._restore_latest(abstract_state)

    def _restore_latest(self, abstract_state: Any) -> tuple[Any, Any, int]:
        steps = sorted(self.manager.all_steps(), reverse=True)
        if not steps:
            raise CheckpointError(f"no checkpoint in {self.directory}; {describe_inventory(self.directory)}")
        failed: list[tuple[int, str]] = []
        for s in steps:
            problem = step_problem(self.step_dir(s))
            if problem is None:
                restored, problem = self._attempt(s, abstract_state)
            if problem is not None:
                failed.append((s, problem))
                continue
            state, data_state = restored
            for bad, why in failed:
                moved = self._set_aside(bad)
                log.warning("checkpoint step %d at %s cannot be restored (%s); moved it to %s and resumed from "
                            "step %d", bad, self.step_dir(bad), why, moved, s)
            return state, data_state, s
        raise CheckpointError(f"no checkpoint in {self.directory} restores (nothing was moved): "
                              + "; ".join(f"step {s}: {why}" for s, why in failed))

    def _restore_step(self, step: int, abstract_state: Any) -> tuple[Any, Any, int]:
        if step not in self.manager.all_steps():
            raise CheckpointError(f"no checkpoint at step {step} in {self.directory}; "
                                  f"{describe_inventory(self.directory)}")
        problem = step_problem(self.step_dir(step))
        if problem is not None:
            raise CheckpointError(f"checkpoint step {step} at {self.step_dir(step)} is damaged: {problem}; "
                                  f"{describe_inventory(self.directory)}")
        restored, problem = self._attempt(step, abstract_state)
        if problem is not None:
            raise CheckpointError(f"checkpoint step {step} at {self.step_dir(step)} is damaged: {problem}; "
                                  f"{describe_inventory(self.directory)}")
        return (*restored, step)

    def _attempt(self, step: int, abstract_state: Any) -> tuple[Optional[tuple[Any, Any]], Optional[str]]:
        """((state, data_state), None), or (None, what failed) when reading the step fails; a checkpoint of
        another model config raises CheckpointError (see ``_check_structure``)."""
        problem = self._check_structure(step, abstract_state)
        if problem is not None:
            return None, problem
        remove_filter = _filter_abandoned_read_noise()
        try:
            restored = self._read(step, abstract_state)
        except Exception as e:  # noqa: BLE001  any read failure marks the step damaged (see the module doc)
            # The filter stays: the abandoned reads finish, and are collected, at any later time.
            return None, f"reading it failed: {_one_line(e)}"
        remove_filter()
        return restored, None

    def _read(self, step: int, abstract_state: Any) -> tuple[Any, Any]:
        restored = self.manager.restore(
            step,
            args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state), data=ocp.args.JsonRestore()),
        )
        return restored["state"], _decode_data_state(restored["data"])

    def saved_config(self, step: int) -> Optional[dict[str, Any]]:
        """The flattened config recorded with ``step`` (None for checkpoints saved without one)."""
        return saved_config(self.step_dir(step))

    def _check_structure(self, step: int, abstract_state: Any) -> Optional[str]:
        """``check_structure`` of ``step``."""
        return check_structure(self.directory, step, abstract_state, self.config)

    def _set_aside(self, step: int) -> str:
        """Move a damaged step directory out of Orbax's listing into ``<checkpoints>_damaged/<step>[-n]``."""
        aside_dir = set_aside_directory(self.directory)
        target = os.path.join(aside_dir, str(step))
        n = 0
        while os.path.exists(target):
            n += 1
            target = os.path.join(aside_dir, f"{step}-{n}")
        if jax.process_index() == 0:
            os.makedirs(aside_dir, exist_ok=True)
            os.rename(self.step_dir(step), target)
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices(f"attnlab_set_aside_{step}")
        self.manager.reload()
        return target

    def wait(self) -> None:
        """Wait for the background save; raise CheckpointError when it failed (see ``check``). With several
        processes on every process at once: the hosts poll each other until every save is done or one failed."""
        multi = jax.process_count() > 1
        while multi and self._any_host_failed(2 if self._failures.cause is not None
                                              else int(self.manager.is_saving_in_progress())):
            time.sleep(0.2)
        try:
            self.manager.wait_until_finished()
        except Exception as e:  # noqa: BLE001
            self._failures.cause = self._failures.cause or _one_line(e)
        if self._saving is not None and self._failures.cause is None:
            self.manager.reload()
            if self._saving not in self.manager.all_steps():
                self._failures.cause = "the step was not finalized"
        if multi:
            self._any_host_failed(2 if self._failures.cause is not None else 0)
        self.check()

    def close(self) -> None:
        """Finish the background work and let go of Orbax; a failure was already reported by ``check``. After a
        save failed on some host (``raise_agreed``) nothing is waited for."""
        if self._abandoned:
            return
        try:
            self.manager.wait_until_finished()
            self.manager.close()
        except Exception as e:  # noqa: BLE001
            self._failures.cause = self._failures.cause or _one_line(e)
        if self._failures.cause is None:  # after a failure the filter stays: abandoned writes log until exit
            for name in _SaveFailures.LOGGERS:
                logging.getLogger(name).removeFilter(self._failures)


class SaveFailedOnAHost(CheckpointError):
    """A save failed on one of several hosts (``Checkpointer.raise_agreed``), raised on every host. The process
    should end at once (``exit_at_once``): the other hosts' save threads wait for the failed host at Orbax's
    barriers, and the interpreter's exit would wait for them."""

    exit_at_once = True


def saved_config(step_dir: str) -> Optional[dict[str, Any]]:
    """The flattened config recorded with the checkpoint step in ``step_dir`` (None for one saved without)."""
    try:
        meta = _read_json(os.path.join(step_dir, "_CHECKPOINT_METADATA"))
    except (OSError, ValueError):
        return None
    config = (meta.get("custom_metadata") or {}).get("config") if isinstance(meta, dict) else None
    return config if isinstance(config, dict) else None


def check_structure(directory: str, step: int, abstract_state: Any,
                    config: Optional[Mapping[str, Any]] = None) -> Optional[str]:
    """Raise CheckpointError when the parameters saved at ``step`` of the checkpoint directory ``directory``
    (Orbax metadata: paths, shapes, dtypes) differ from ``abstract_state``'s, naming the fields of the flattened
    ``config`` that differ from the step's recorded one; the state's ``params`` are compared when both have them.
    Returns what failed when the metadata cannot be read, else None. Reads metadata only, writes nothing."""
    step_dir = os.path.join(directory, str(int(step)))
    try:
        saved = ocp.StandardCheckpointHandler().metadata(epath.Path(step_dir) / "state")
    except Exception as e:  # noqa: BLE001  unreadable metadata: a damaged step
        return f"reading its metadata failed: {_one_line(e)}"
    saved = getattr(saved, "tree", saved)
    wanted = abstract_state
    if isinstance(saved, Mapping) and isinstance(wanted, Mapping) and "params" in saved and "params" in wanted:
        saved, wanted = {"params": saved["params"]}, {"params": wanted["params"]}
    have, want = _shapes(saved), _shapes(wanted)
    diffs = [f"{k}: {_fmt(have.get(k))} in the checkpoint, {_fmt(want.get(k))} now"
             for k in sorted(set(have) | set(want)) if have.get(k) != want.get(k)]
    if not diffs:
        return None
    msg = f"checkpoint step {step} in {directory} was written by another model config"
    fields = _config_diffs(step_dir, config)
    if fields:
        msg += f"; config fields that differ: {', '.join(fields[:_SHOWN])}"
        msg += f" (+{len(fields) - _SHOWN} more)" if len(fields) > _SHOWN else ""
    msg += f"; {len(diffs)} parameter(s) differ: {'; '.join(diffs[:_SHOWN])}"
    msg += f" (+{len(diffs) - _SHOWN} more)" if len(diffs) > _SHOWN else ""
    raise CheckpointError(msg + ". Use the config the run was trained with, or a fresh --workdir.")


def _config_diffs(step_dir: str, config: Optional[Mapping[str, Any]]) -> list[str]:
    saved = saved_config(step_dir)
    if saved is None or config is None:
        return []
    keys = sorted((k for k in set(saved) | set(config) if k.startswith(_CONFIG_SECTIONS)), key=field_rank)
    return [f"{k}={saved.get(k)!r} in the checkpoint, {config.get(k)!r} now" for k in keys
            if saved.get(k) != config.get(k)]


def refuse_other_config(directory: str, abstract_state: Any, config: Optional[Any] = None) -> None:
    """Raise CheckpointError (``check_structure``) when the newest intact step of the checkpoint directory
    ``directory`` was written by another model config; before a run writes anything, so a refused run leaves
    the workdir as it was. A directory without intact steps, or unreadable metadata, passes: the restore
    reports those."""
    intact, _, _ = inventory(directory)
    if intact:
        check_structure(directory, intact[-1], abstract_state, flatten_config(config) if config is not None else None)


def _filter_abandoned_read_noise() -> Callable[[], None]:
    """Install a ``sys.unraisablehook`` that drops the noise of a failed Orbax read, and return a function that
    removes it again. Orbax reads arrays in concurrent coroutines: when one read fails, the others' errors
    surface as "Exception ignored in <coroutine>" tracebacks whenever those coroutines are collected, and
    TensorStore reads still in flight report "RuntimeError: Event loop is closed" when they complete. The first
    error is the one reported; every other unraisable error still reaches the previous hook."""
    previous = sys.unraisablehook
    if getattr(previous, "drops_abandoned_reads", False):
        return lambda: None

    def hook(unraisable) -> None:
        code = getattr(unraisable.object, "cr_code", None)
        if code is not None and "orbax" in code.co_filename:
            return
        if unraisable.exc_type is RuntimeError and str(unraisable.exc_value) == "Event loop is closed":
            return
        previous(unraisable)

    hook.drops_abandoned_reads = True
    sys.unraisablehook = hook

    def remove() -> None:
        sys.unraisablehook = previous

    return remove


def _fmt(entry: Optional[tuple[tuple[int, ...], str]]) -> str:
    if entry is None:
        return "absent"
    shape, dtype = entry
    return f"{list(shape)} {dtype}"
