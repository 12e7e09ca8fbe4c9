"""A hook that keeps a trained model for analysis after ``engine.run`` returns, and ``train_kept``: a config
trained (or a finished run restored) into one."""
from __future__ import annotations

import json
import os
from typing import Any, Optional

import ml_collections

from engine.hooks import Hook


class KeepModel(Hook):
    """Keeps the trained parameters, the setup, the task, the data and the evaluator when training ends:
    ``keep.setup.model(keep.params)`` is the trained model."""

    def end(self, run) -> None:
        self.params, self.setup, self.task, self.data = run.state["params"], run.setup, run.task, run.data
        self.evaluator = run.evaluator


def train_kept(config: ml_collections.ConfigDict, workdir: Optional[str] = None) -> tuple[KeepModel, dict[str, Any]]:
    """``config`` trained through ``engine.run`` (in ``workdir`` when given, where a rerun resumes it); a run
    ``workdir`` already finished is restored from its last checkpoint instead of trained again. Returns the
    kept model and ``{"steps", "engine_bleu", "train_minutes"}`` of the run."""
    import engine
    from engine.workdir import RunFinished

    keep = KeepModel()
    try:
        result = engine.run(config, workdir, hooks=[keep])
    except RunFinished:
        return restored(config, workdir)
    return keep, {"steps": result["step"], "engine_bleu": result.get("test/bleu"),
                  "train_minutes": result["wall_minutes"]}


def restored(config: ml_collections.ConfigDict, workdir: str) -> tuple[KeepModel, dict[str, Any]]:
    """The model of ``workdir``'s finished run, restored from its last checkpoint, with what its final record
    holds (``train_kept``'s second value)."""
    from engine import evaluation, restore, writer

    task, data, setup, state, step = restore.restore_run(config, workdir)
    keep = KeepModel()
    keep.params, keep.setup, keep.task, keep.data = state["params"], setup, task, data
    keep.evaluator = evaluation.for_task(setup, data, writer.MetricLogger(None, config, process_index=0), None)
    final: dict = {}
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        for line in f:
            if '"event": "final"' in line:
                final = json.loads(line)
    return keep, {"steps": step, "engine_bleu": final.get("test/bleu"),
                  "train_minutes": final.get("wall_minutes", 0.0)}
