"""The metrics writer: every record kept in memory (``history``), a local JSONL file when the run has a
workdir, and Weights & Biases.

W&B mode (``config.wandb.mode``):
- ``"auto"`` (default): ``$WANDB_MODE`` when set; else ``online`` when an API key is configured
  (``$WANDB_API_KEY`` or a ``~/.netrc`` entry for the W&B host), else ``offline`` (sync later with
  ``wandb sync <workdir>/wandb/offline-run-*``).
- ``"online"`` / ``"offline"`` / ``"disabled"``: as named.
An online start first checks that the W&B host answers (a TCP connection within ``PROBE_SECONDS``); when it
does not (no network, no route, no DNS) the run logs offline at once, in one warning line, and is synced later.
An online start that still fails or times out (``config.wandb.init_timeout`` seconds) falls back to offline
too, so a run never waits on the network. The run id is kept in ``<workdir>/wandb_run_id`` (``wandb_run_id_eval`` for eval.py) so a resumed run continues
the same W&B run.

Every JSONL record carries ``step``, ``time`` (Unix seconds) and ``cpu_s``: the CPU seconds this process has used
so far, every thread counted and time stopped or waiting for a core left out, so a record of runs that were paused,
resumed or shared their cores can say what they cost.
"""
from __future__ import annotations

import json
import logging
import math
import netrc
import os
import secrets
import socket
import string
import threading
import time
from typing import Any, Iterable, Mapping, Optional
from urllib.parse import urlparse

import ml_collections
import numpy as np

log = logging.getLogger("attnlab")

METRICS_FILE = "metrics.jsonl"  # a training run's records in its workdir


def _last_byte(path: str) -> bytes:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1)


def _has_api_key() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    try:
        return netrc.netrc().authenticators(host) is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


PROBE_SECONDS = 3.0  # how long an online start waits for the W&B host to answer before logging offline


def wandb_unreachable(timeout: float = PROBE_SECONDS) -> Optional[str]:
    """Why the W&B host (``$WANDB_BASE_URL``, default https://api.wandb.ai) cannot be reached (a TCP connection,
    name lookup included, within ``timeout`` seconds), or None when it answers."""
    url = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai"))
    host, port = url.hostname or "api.wandb.ai", url.port or (80 if url.scheme == "http" else 443)
    result: list[Optional[str]] = ["no answer within %gs" % timeout]

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result[0] = None
        except OSError as e:
            result[0] = " ".join(str(e.strerror or e).split())

    thread = threading.Thread(target=probe, daemon=True)  # a name lookup can outlast the socket's timeout
    thread.start()
    thread.join(timeout)
    return None if result[0] is None else f"{host}:{port}: {result[0]}"


def _new_run_id() -> str:
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(8))


def resolve_wandb_mode(mode: str) -> str:
    """The W&B mode a run will use, from ``config.wandb.mode`` (see the module docstring)."""
    if mode not in ("auto", "online", "offline", "disabled"):
        raise ValueError(f"config.wandb.mode={mode!r}; expected one of ('auto', 'online', 'offline', 'disabled')")
    if mode != "auto":
        return mode
    env = os.environ.get("WANDB_MODE")
    if env:
        if env in ("dryrun",):
            return "offline"
        if env not in ("online", "offline", "disabled"):
            raise ValueError(f"$WANDB_MODE={env!r}; expected one of ('online', 'offline', 'disabled')")
        return env
    return "online" if _has_api_key() else "offline"


def _cpu_s() -> float:
    """CPU seconds this process has used (user + system, every thread)."""
    return round(time.process_time(), 3)


def _to_json(value: Any) -> Any:
    if isinstance(value, (np.floating, np.integer)):
        value = value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class MetricLogger:
    """Keeps every record in ``history`` (a list of dicts with ``step``; events also have ``event``), and
    with a ``workdir`` writes them to ``<workdir>/metrics.jsonl`` and to W&B.

    ``workdir=None``: in memory only (in-process runs, tests, notebooks); W&B stays off. Only the lead process
    (``process_index == 0``) writes files or W&B.
    """

    def __init__(
        self,
        workdir: Optional[str],
        config: ml_collections.ConfigDict,
        *,
        process_index: int = 0,
        run_name: Optional[str] = None,
        filename: str = METRICS_FILE,
        job_type: Optional[str] = None,
    ):
        self.workdir = workdir
        self.active = process_index == 0 and workdir is not None
        self.history: list[dict[str, Any]] = []
        self.wandb_run = None
        self.mode = "disabled"
        self._jsonl = None
        if not self.active:
            return
        os.makedirs(workdir, exist_ok=True)
        path = os.path.join(workdir, filename)
        cut_short = os.path.exists(path) and os.path.getsize(path) > 0 and _last_byte(path) != b"\n"
        self._jsonl = open(path, "a", encoding="utf-8")
        if cut_short:  # a run killed mid-line: its partial record stays on a line of its own
            self._jsonl.write("\n")
        self.mode = resolve_wandb_mode(config.wandb.mode)
        if self.mode != "disabled":
            self.wandb_run = self._start_wandb(config, run_name, job_type or config.wandb.job_type)

    def _start_wandb(self, config: ml_collections.ConfigDict, run_name: Optional[str], job_type: str):
        import wandb

        # Training runs keep their W&B id in the workdir so a resumed run continues the same W&B run.
        id_file = "wandb_run_id" if job_type == "train" else f"wandb_run_id_{job_type}"
        id_path = os.path.join(self.workdir, id_file)
        run_id = open(id_path).read().strip() if os.path.exists(id_path) else _new_run_id()
        with open(id_path, "w") as f:
            f.write(run_id)
        w = config.wandb
        kwargs = dict(
            project=w.project, entity=w.entity or None, group=w.group or None, tags=list(w.tags) or None,
            name=w.name or run_name, notes=w.notes or None, dir=self.workdir, id=run_id, resume="allow",
            config=config.to_dict(), job_type=job_type or None,
        )
        settings = dict(init_timeout=float(w.init_timeout), silent=True, console="off")
        if self.mode == "online":
            why = wandb_unreachable()
            if why is not None:
                log.warning("W&B is unreachable (%s): logging offline to %s/wandb; sync later with `wandb sync "
                            "%s/wandb/offline-run-*`", why, self.workdir, self.workdir)
                self.mode = "offline"
        try:
            return wandb.init(mode=self.mode, settings=wandb.Settings(**settings), **kwargs)
        except Exception as e:  # W&B raises many types (CommError, UsageError, timeouts); never stop training.
            if self.mode != "online":
                log.warning("W&B (%s) could not start (%s); logging to %s only", self.mode, _line(e), self.workdir)
                self.mode = "disabled"
                return None
            self.mode = "offline"
            try:
                wandb.teardown()  # the failed online start still holds the run id; offline needs it free
                run = wandb.init(mode="offline", settings=wandb.Settings(**settings), **kwargs)
            except Exception as e2:  # noqa: BLE001
                log.warning("W&B online start failed (%s) and offline too (%s); logging to %s only", _line(e),
                            _line(e2), self.workdir)
                self.mode = "disabled"
                return None
            log.warning("W&B online start failed (%s): logging offline to %s/wandb; sync later with `wandb sync "
                        "%s/wandb/offline-run-*`", _line(e), self.workdir, self.workdir)
            return run

    def _write(self, record: dict[str, Any]) -> None:
        self.history.append(record)
        if self._jsonl is not None:
            try:
                self._jsonl.write(json.dumps(record) + "\n")
                self._jsonl.flush()
            except OSError as e:  # a full or vanished disk: one line, not a traceback from deep in the loop
                from engine.errors import WorkdirError

                path = self._jsonl.name
                self._jsonl = None  # closing would flush the same bytes again
                raise WorkdirError(f"writing {path} failed at step {record.get('step')}: {e.strerror or e}; "
                                   f"free the space (or fix the directory) and rerun to resume from the last "
                                   f"checkpoint") from None

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Log scalars (numbers, numpy scalars, short strings) and small arrays (JSONL only) at ``step``."""
        record = {"step": int(step), "time": time.time(), "cpu_s": _cpu_s()}
        record.update({k: _to_json(v) for k, v in metrics.items()})
        self._write(record)
        if self.wandb_run is not None:
            scalars = {k: v for k, v in metrics.items() if not isinstance(v, (str, list, tuple, np.ndarray))}
            self.wandb_run.log(scalars, step=int(step))

    def log_html(self, step: int, pages: Mapping[str, str]) -> None:
        """Log self-contained HTML files (``key -> path``) as ``wandb.Html``; the JSONL gets the paths."""
        self.log_event(step, "html", paths=dict(pages))
        if self.wandb_run is not None:
            import wandb

            self.wandb_run.log({k: wandb.Html(open(p, encoding="utf-8").read()) for k, p in pages.items()},
                               step=int(step))

    def log_images(self, step: int, images: Mapping[str, str]) -> None:
        """Log PNG files (``key -> path``) as W&B images; the JSONL gets the paths."""
        self.log_event(step, "images", paths=dict(images))
        if self.wandb_run is not None:
            import wandb

            self.wandb_run.log({k: wandb.Image(p) for k, p in images.items()}, step=int(step))

    def log_table(self, step: int, key: str, columns: list[str], rows: Iterable[Iterable[Any]]) -> None:
        """Log a small table (e.g. sample translations): a W&B Table and a JSONL event."""
        rows = [list(r) for r in rows]
        self.log_event(step, key, columns=columns, rows=rows)
        if self.wandb_run is not None:
            import wandb

            self.wandb_run.log({key: wandb.Table(columns=columns, data=rows)}, step=int(step))

    def log_event(self, step: int, event: str, **fields: Any) -> None:
        """A non-metric record (health warnings, eval signatures, samples)."""
        record = {k: _to_json(v) for k, v in fields.items()}
        record.update({"step": int(step), "time": time.time(), "cpu_s": _cpu_s(), "event": event})
        self._write(record)

    def events(self, event: str) -> list[dict[str, Any]]:
        """The recorded events named ``event``, in order."""
        return [r for r in self.history if r.get("event") == event]

    def summary(self, values: Mapping[str, Any]) -> None:
        """Set W&B run summary values (final BLEU etc.)."""
        if self.wandb_run is not None:
            for k, v in values.items():
                self.wandb_run.summary[k] = v

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None
        if self.wandb_run is not None:
            self.wandb_run.finish()
            self.wandb_run = None


def _line(e: BaseException, limit: int = 200) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:limit]}"


def read_jsonl(path: str) -> list[dict]:
    """All records of a metrics.jsonl file; a line that does not parse (the last line of a run killed while
    writing it) is skipped."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    return out
