"""A training run's workdir: checked before any work, held by one run at a time, and its record append-only.

- ``check_writable``: the workdir (or, for a new one, its nearest existing parent) takes a file; otherwise one
  line naming the path and the cause, before anything is built or written.
- ``check_free_space``: a warning when the disk holds less than the checkpoints will take (the train state's
  bytes, times the checkpoints kept plus one being written).
- ``Lock``: ``<workdir>/run.lock`` (pid, host, start time, command), held by the lead process while the run
  lives. A second run on the workdir is refused naming the pid and host holding it; a lock left by a process
  that is gone (same host, dead pid) is taken over with a warning. A lock of another host is never taken over
  (its pid cannot be checked from here): the refusal names the file to delete once no run lives there.
- The record: ``config.json`` is the config the run started with, written once and never rewritten;
  ``config_history.jsonl`` gets one line per later start whose config differs (the step it took effect, every
  changed field with its old and new value). A rerun whose config differs in a field that changes training or
  data (``training_fields``) is refused in one line naming the fields, most important first (task, model shape,
  data, optimizer), unless the caller allows it (``train.py --allow_config_change``). Fields that only change
  what is logged, evaluated or saved, the time budget and the mesh are recorded without asking.
- ``finished``: a run that trained to its ``train.num_steps`` (or stopped early on its metric), wrote its
  final record and still has that step's checkpoint; ``train.py`` says so and exits 0 instead of training or decoding again.

Every refusal happens before the workdir is touched, so a refused run leaves it exactly as it was. With several
hosts the lead decides and every process gets the same answer (``runtime.agree``).
"""
from __future__ import annotations

import datetime
import json
import logging
import os
import socket
import sys
import tempfile
from typing import Any, Mapping, Optional

from engine.checkpoint import field_rank, flatten_config, step_problem
from engine.errors import WorkdirError

log = logging.getLogger("attnlab")

LOCK_FILE = "run.lock"
CONFIG_FILE = "config.json"
HISTORY_FILE = "config_history.jsonl"
METRICS_FILE = "metrics.jsonl"

# Fields whose change does not change what the model trains on or how: logging, evaluation, checkpointing, the
# time budget, health thresholds, W&B, the mesh (the same global batch on other devices) and the fault settings.
NOT_TRAINING = ("name", "wandb.", "eval.", "health.", "doctor.", "mesh.", "train.log_every", "train.stats_every",
                "train.eval_every", "train.checkpoint_every", "train.keep_checkpoints", "train.async_checkpoint",
                "train.max_minutes", "train.peak_flops", "train.on_non_finite", "train.watchdog_seconds",
                "train.stop_grace_seconds")
_SHOWN = 4  # fields named in a refusal before "(+N more)"


class RunFinished(Exception):
    """The workdir's run already trained to the end; ``str(e)`` says so (not an error: train.py exits 0)."""


def _existing_ancestor(path: str) -> str:
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def check_writable(workdir: str) -> None:
    """Raise WorkdirError unless ``workdir`` (or, when it does not exist yet, its nearest existing parent) takes
    a new file. Writes nothing that stays."""
    where = _existing_ancestor(workdir)
    if not os.path.isdir(where):
        raise WorkdirError(f"workdir {os.path.abspath(workdir)}: {where} is a file, not a directory; "
                           f"use another --workdir")
    try:
        fd, probe = tempfile.mkstemp(dir=where, prefix=".attnlab-write-check-")
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        raise WorkdirError(f"workdir {os.path.abspath(workdir)} is not writable: {e.strerror or e} ({where}); "
                           f"use a writable --workdir") from None


def check_free_space(workdir: str, state_bytes: int, keep: int) -> Optional[str]:
    """A warning (logged and returned) when the workdir's disk has less free space than ``keep + 1`` checkpoints
    of ``state_bytes`` each; None when it has enough."""
    import shutil

    need = int(state_bytes) * (max(int(keep), 1) + 1)
    free = shutil.disk_usage(_existing_ancestor(workdir)).free
    if free >= need:
        return None
    message = (f"workdir {os.path.abspath(workdir)} has {free / 2**20:.0f} MiB free; {keep} checkpoints of this "
               f"run (plus one being written) need about {need / 2**20:.0f} MiB: saves may fail")
    log.warning("%s", message)
    return message


# ------------------------------------------------------------------------------------------------- lock
def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_lock(path: str) -> Optional[dict]:
    try:
        with open(path, encoding="utf-8") as f:
            holder = json.load(f)
        return holder if isinstance(holder, dict) else None
    except (OSError, ValueError):
        return None


class Lock:
    """The exclusive ``<workdir>/run.lock`` of one run (see the module docstring); ``release`` removes it.
    ``file``: another lock file in ``workdir`` with the same rules (a sweep worker's claim on a point)."""

    def __init__(self, workdir: str, file: str = LOCK_FILE):
        self.path = os.path.join(workdir, file)
        self.held = False
        self.me = {"pid": os.getpid(), "host": socket.gethostname(),
                   "since": datetime.datetime.now().isoformat(timespec="seconds"), "command": " ".join(sys.argv)}

    def holder(self) -> Optional[dict]:
        """The live process holding the lock (pid, host, since, command), None when it is free or stale."""
        holder = _read_lock(self.path) if os.path.exists(self.path) else None
        return None if holder is None or self._stale(holder) else holder

    def problem(self) -> Optional[str]:
        """Why the lock cannot be taken (another live run holds it), else None; takes nothing."""
        holder = self.holder()
        if holder is None:
            return None
        where = ("wait for it to end or use another --workdir" if holder.get("host") == self.me["host"] else
                 f"a lock of another host is never taken over: when no run lives there, delete {self.path}; or use "
                 f"another --workdir")
        return (f"workdir {os.path.dirname(os.path.abspath(self.path))} is in use by another run: pid "
                f"{holder.get('pid')} on host {holder.get('host')} since {holder.get('since')} ({self.path}); {where}")

    def _stale(self, holder: Mapping[str, Any]) -> bool:
        return holder.get("host") == self.me["host"] and not _pid_alive(int(holder.get("pid") or 0))

    def acquire(self) -> None:
        """Take the lock: create it, or take over a stale one with a warning; WorkdirError when a live run holds
        it."""
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        payload = json.dumps(self.me).encode()
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = _read_lock(self.path)
                if holder is not None and not self._stale(holder):
                    raise WorkdirError(self.problem() or f"workdir lock {self.path} is held") from None
                what = (f"pid {holder.get('pid')} on host {holder.get('host')} is gone" if holder is not None
                        else "it does not parse")
                log.warning("taking over the stale lock %s (%s)", self.path, what)
                try:
                    os.remove(self.path)
                except FileNotFoundError:
                    pass
                continue
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
            self.held = True
            return
        raise WorkdirError(f"could not take the workdir lock {self.path}: other runs keep taking it")

    def release(self) -> None:
        """Remove the lock if this process still holds it."""
        if self.held and (_read_lock(self.path) or {}).get("pid") == self.me["pid"]:
            try:
                os.remove(self.path)
            except FileNotFoundError:
                pass
        self.held = False


# ----------------------------------------------------------------------------------------------- record
def training_fields(flat: Mapping[str, Any]) -> set[str]:
    """The fields of a flattened config whose change changes training or data (``train.num_steps`` only with
    a schedule that decays to it)."""
    out = {k for k in flat if not k.startswith(NOT_TRAINING)}
    if flat.get("train.schedule") != "cosine":
        out.discard("train.num_steps")
    return out


def recorded_config(workdir: str) -> Optional[dict[str, Any]]:
    """The run's config as it stands now: ``config.json`` with every change of ``config_history.jsonl`` applied
    (flattened); None for a workdir without a record."""
    path = os.path.join(workdir, CONFIG_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            flat = flatten_config(json.load(f))
    except (OSError, ValueError) as e:
        raise WorkdirError(f"{path} does not parse ({e}); move it away to start the record anew") from None
    for entry in read_history(workdir):
        for k, (_, new) in entry.get("changes", {}).items():
            flat[k] = new
    return flat


def read_history(workdir: str) -> list[dict]:
    """The records of ``config_history.jsonl`` (a line that does not parse is skipped)."""
    path = os.path.join(workdir, HISTORY_FILE)
    out = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
    return out


def config_changes(recorded: Mapping[str, Any], now: Mapping[str, Any]) -> dict[str, list]:
    """{field: [recorded, now]} of every field that differs, most important first (``field_rank``)."""
    keys = sorted(set(recorded) | set(now), key=field_rank)
    return {k: [recorded.get(k), now.get(k)] for k in keys if recorded.get(k) != now.get(k)}


def describe_changes(changes: Mapping[str, list], limit: int = _SHOWN) -> str:
    """``task='lm' in the record, 'translation' now; ...`` for the first ``limit`` changes (+N more)."""
    items = list(changes.items())
    text = "; ".join(f"{k}={old!r} in the record, {new!r} now" for k, (old, new) in items[:limit])
    return text + (f" (+{len(items) - limit} more)" if len(items) > limit else "")


def check_record(config: Any, workdir: str, *, allow_change: bool = False) -> dict[str, list]:
    """The changes of ``config`` against the workdir's record (empty for a new workdir or the same config).
    Raises WorkdirError, naming the fields, when a field that changes training or data differs and
    ``allow_change`` is False."""
    recorded = recorded_config(workdir)
    if recorded is None:
        return {}
    now = flatten_config(config)
    changes = config_changes(recorded, now)
    training = training_fields(now) | training_fields(recorded)
    refused = {k: v for k, v in changes.items() if k in training}
    if refused and not allow_change:
        raise WorkdirError(
            f"workdir {os.path.abspath(workdir)} holds a run of another config: {describe_changes(refused)}. Use "
            f"the recorded config ({os.path.join(workdir, CONFIG_FILE)}), a fresh --workdir, or "
            f"--allow_config_change to continue this run with the change recorded in {HISTORY_FILE}")
    return changes


def write_record(config: Any, workdir: str, changes: Mapping[str, list], step: int) -> None:
    """Write ``config.json`` for a new run, or append ``changes`` (taking effect at ``step``) to the history."""
    path = os.path.join(workdir, CONFIG_FILE)
    if not os.path.exists(path):
        with open(path, "w", encoding="utf-8") as f:
            f.write(config.to_json_best_effort(indent=1, sort_keys=True) if hasattr(config, "to_json_best_effort")
                    else json.dumps(config, indent=1, sort_keys=True, default=str))
        return
    if not changes:
        return
    entry = {"step": int(step), "time": datetime.datetime.now().isoformat(timespec="seconds"),
             "command": " ".join(sys.argv), "changes": dict(changes)}
    with open(os.path.join(workdir, HISTORY_FILE), "a", encoding="utf-8") as f:
        f.write(json.dumps(entry, default=str) + "\n")
    log.warning("config changed from step %d on (recorded in %s): %s", step, HISTORY_FILE,
                describe_changes(changes, limit=len(changes)))


def finished(config: Any, workdir: str) -> Optional[str]:
    """The line to show when the workdir's run already finished (its last ``train_end`` reached
    ``train.num_steps``, or stopped early on its metric, and a ``final`` record follows), else None."""
    path = os.path.join(workdir, METRICS_FILE)
    if not os.path.exists(path):
        return None
    end, final = None, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("event") == "train_end":
                end, final = r, None
            elif r.get("event") == "final" and end is not None:
                final = r
    if end is None or final is None:
        return None
    step, reason = int(end["step"]), end.get("reason")
    if not (reason == "early_stop" or (reason == "num_steps" and step >= int(config.train.num_steps))):
        return None
    if step_problem(os.path.join(workdir, "checkpoints", str(step))) is not None:
        return None  # its last checkpoint is gone or damaged: a rerun restores what is left and trains on
    shown = ", ".join(f"{k}={v:.4g}" for k, v in final.items()
                      if isinstance(v, float) and k.split("/")[0] in ("validation", "test") and k.count("/") == 1
                      and k.split("/")[1] in ("loss", "accuracy", "bleu"))
    return (f"the run in {os.path.abspath(workdir)} already finished at step {step} ({reason})"
            + (f": {shown}" if shown else "") + "; nothing to train. Evaluate it with eval.py, or raise "
            "--config.train.num_steps to train on")


class Session:
    """A run's hold on its workdir (from ``open_run``): the lock (lead process) and the config changes to
    record once the run starts (``write_record``)."""

    def __init__(self, lock: Optional[Lock], changes: Mapping[str, list], workdir: str, created: bool):
        self.lock = lock
        self.changes = dict(changes)
        self.workdir = workdir
        self.created = created  # the workdir did not exist before this run
        self.started = False  # set by the loop once the run writes its record (right before the first step)

    def close(self, failed: bool = False) -> None:
        """Release the lock; a run that failed before it started, in a workdir it created, removes the workdir
        again (a refused run leaves no trace)."""
        if self.lock is not None:
            self.lock.release()
            if failed and self.created and not self.started:
                import shutil

                shutil.rmtree(self.workdir, ignore_errors=True)


def open_run(config: Any, workdir: str, *, allow_change: bool = False) -> Session:
    """Check ``workdir`` for a run of ``config`` and take its lock (lead process); every process gets the same
    outcome. Raises WorkdirError (not writable, in use, a record of another config) or RunFinished before
    anything is written."""
    from engine import runtime

    lead = runtime.is_lead()
    lock = Lock(workdir) if lead else None
    outcome, changes, created = "", {}, False
    try:
        check_writable(workdir)  # every process: each writes its own log file
        if lead:
            problem = lock.problem()
            if problem:
                raise WorkdirError(problem)
            changes = check_record(config, workdir, allow_change=allow_change)
            done = finished(config, workdir)
            if done:
                outcome = "finished\t" + done
            else:
                created = not os.path.exists(workdir)
                os.makedirs(workdir, exist_ok=True)
                lock.acquire()  # O_EXCL: of two runs that passed the check together, one gets it
    except WorkdirError as e:
        outcome = "error\t" + str(e)
    outcomes = [o[0] for o in runtime.allgather_strings([outcome])]
    outcome = outcomes[0] or next((o for o in outcomes if o), "")  # the lead's word first
    kind, _, message = outcome.partition("\t")
    if kind:
        if lock is not None and lock.held:  # another host refused: leave the workdir as it was
            lock.release()
            if created and not os.listdir(workdir):
                os.rmdir(workdir)
        raise (WorkdirError if kind == "error" else RunFinished)(message)
    return Session(lock, changes, workdir, created)
