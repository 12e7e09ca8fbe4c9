"""Metric logging: a local JSONL file always, plus Weights & Biases.

W&B mode (``config.wandb.mode``):
- ``"auto"`` (default): ``$WANDB_MODE`` when set; else ``online`` when an API key is configured
  (``$WANDB_API_KEY`` or a ``~/.netrc`` entry for the W&B host), else ``offline`` (sync later with
  ``wandb sync <workdir>/wandb/offline-run-*``).
- ``"online"`` / ``"offline"`` / ``"disabled"``: as named.
An online start that fails or times out (``config.wandb.init_timeout`` seconds) falls back to offline, so a
run never waits on the network. The run id is kept in ``<workdir>/wandb_run_id`` (``wandb_run_id_eval`` for eval.py) so a resumed run continues
the same W&B run.
"""
from __future__ import annotations

import json
import logging
import math
import netrc
import os
import secrets
import string
import time
from typing import Any, Iterable, Mapping, Optional
from urllib.parse import urlparse

import ml_collections
import numpy as np

log = logging.getLogger("attnlab")


def _has_api_key() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    try:
        return netrc.netrc().authenticators(host) is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


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


def _to_json(value: Any) -> Any:
    if isinstance(value, (np.floating, np.integer)):
        value = value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class MetricLogger:
    """Writes scalars to ``<workdir>/metrics.jsonl`` (one JSON object per call, with ``step``) and to W&B.

    Only the lead process (``process_index == 0``) writes anything.
    """

    def __init__(
        self,
        workdir: str,
        config: ml_collections.ConfigDict,
        *,
        process_index: int = 0,
        run_name: Optional[str] = None,
        filename: str = "metrics.jsonl",
        job_type: Optional[str] = None,
    ):
        self.workdir = workdir
        self.active = process_index == 0
        self.wandb_run = None
        self.mode = "disabled"
        if not self.active:
            return
        os.makedirs(workdir, exist_ok=True)
        self._jsonl = open(os.path.join(workdir, filename), "a", encoding="utf-8")
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
        try:
            return wandb.init(mode=self.mode, settings=wandb.Settings(**settings), **kwargs)
        except Exception as e:  # W&B raises many types (CommError, UsageError, timeouts); never stop training.
            if self.mode != "online":
                log.warning("W&B (%s) could not start (%s); logging to %s only", self.mode, e, self.workdir)
                self.mode = "disabled"
                return None
            log.warning("W&B online start failed (%s); falling back to offline mode", e)
            self.mode = "offline"
            try:
                return wandb.init(mode="offline", settings=wandb.Settings(**settings), **kwargs)
            except Exception as e2:
                log.warning("W&B offline start failed too (%s); logging to %s only", e2, self.workdir)
                self.mode = "disabled"
                return None

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Log scalars (numbers, numpy scalars, short strings) at ``step``."""
        if not self.active:
            return
        record = {"step": int(step), "time": time.time()}
        record.update({k: _to_json(v) for k, v in metrics.items()})
        self._jsonl.write(json.dumps(record) + "\n")
        self._jsonl.flush()
        if self.wandb_run is not None:
            self.wandb_run.log({k: v for k, v in metrics.items() if not isinstance(v, str)}, step=int(step))

    def log_images(self, step: int, images: Mapping[str, str]) -> None:
        """Log PNG files (``key -> path``) as W&B images; the JSONL gets the paths."""
        if not self.active:
            return
        self.log_event(step, "images", paths=dict(images))
        if self.wandb_run is not None:
            import wandb

            self.wandb_run.log({k: wandb.Image(p) for k, p in images.items()}, step=int(step))

    def log_table(self, step: int, key: str, columns: list[str], rows: Iterable[Iterable[Any]]) -> None:
        """Log a small table (e.g. sample translations): a W&B Table and a JSONL event."""
        if not self.active:
            return
        rows = [list(r) for r in rows]
        self.log_event(step, key, columns=columns, rows=rows)
        if self.wandb_run is not None:
            import wandb

            self.wandb_run.log({key: wandb.Table(columns=columns, data=rows)}, step=int(step))

    def log_event(self, step: int, event: str, **fields: Any) -> None:
        """A non-metric record in the JSONL file (health warnings, eval signatures, samples)."""
        if not self.active:
            return
        record = {k: _to_json(v) for k, v in fields.items()}
        record.update({"step": int(step), "time": time.time(), "event": event})
        self._jsonl.write(json.dumps(record) + "\n")
        self._jsonl.flush()

    def summary(self, values: Mapping[str, Any]) -> None:
        """Set W&B run summary values (final BLEU etc.)."""
        if self.wandb_run is not None:
            for k, v in values.items():
                self.wandb_run.summary[k] = v

    def close(self) -> None:
        if not self.active:
            return
        self._jsonl.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()
            self.wandb_run = None


def read_jsonl(path: str) -> list[dict]:
    """All records of a metrics.jsonl file."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
