"""The health monitor in W&B: attention and health series plotted against the step they describe, the first
warning of a run as a W&B alert, and every warning in a table.

Attention summaries are logged at the step of the flush that carries them (W&B steps only go forward) with
``attn/step``, the step they were measured at; ``define_metrics`` makes W&B plot every ``attn/*`` and
``health/*`` series against ``attn/step``. ``HealthReporter`` is called by ``engine.hooks.AttentionStatistics``
with each new warning (``warn``) and once at the end (``finish``).
"""
from __future__ import annotations

import time
from typing import Any, Optional, Sequence

STEP_METRIC = "attn/step"
TABLE_KEY = "health/warnings"
TABLE_COLUMNS = ("step", "kind", "group", "layers", "heads", "of_heads", "value", "threshold", "cause", "message")


def define_metrics(wandb_run: Any) -> None:
    """Plot ``attn/*`` and ``health/*`` against ``attn/step`` in ``wandb_run`` (None: nothing)."""
    if wandb_run is None:
        return
    wandb_run.define_metric(STEP_METRIC)
    for pattern in ("attn/*", "health/*"):
        wandb_run.define_metric(pattern, step_metric=STEP_METRIC)


class HealthReporter:
    """Sends a run's first health warning as a W&B alert (at most one alert per ``min_alert_s`` seconds after
    that, so a burst is one alert) and logs all of them as the ``health/warnings`` table at the end."""

    def __init__(self, wandb_run: Any, min_alert_s: float = 600.0):
        self.wandb_run = wandb_run
        self.min_alert_s = float(min_alert_s)
        self.rows: list[list[Any]] = []
        self._last_alert: Optional[float] = None
        define_metrics(wandb_run)

    def warn(self, warning: Any, title: str = "attnlab health warning") -> bool:
        """Keep ``warning`` (an ``engine.health.HealthWarning``) for the table; alert when allowed. True when an
        alert was sent."""
        self.rows.append([warning.step, warning.kind, warning.group, ",".join(map(str, warning.layers)),
                          warning.heads, warning.of_heads, warning.value, warning.threshold, warning.cause,
                          warning.message()])
        if self.wandb_run is None:
            return False
        now = time.monotonic()
        if self._last_alert is not None and now - self._last_alert < self.min_alert_s:
            return False
        import wandb

        self.wandb_run.alert(title=title, text=warning.message(), level=wandb.AlertLevel.WARN)
        self._last_alert = now
        return True

    def finish(self, step: int) -> None:
        """Log the table of every warning (when there was any) at ``step``."""
        if self.wandb_run is None or not self.rows:
            return
        import wandb

        self.wandb_run.log({TABLE_KEY: wandb.Table(columns=list(TABLE_COLUMNS), data=self.rows)}, step=int(step))


def table_rows(warnings: Sequence[Any]) -> list[list[Any]]:
    """The table rows ``HealthReporter`` logs for ``warnings``."""
    reporter = HealthReporter(None)
    for w in warnings:
        reporter.warn(w)
    return reporter.rows
