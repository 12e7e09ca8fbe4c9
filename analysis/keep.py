"""A hook that keeps a trained model for analysis after ``engine.run`` returns."""
from __future__ import annotations

from engine.hooks import Hook


class KeepModel(Hook):
    """Keeps the trained parameters, the setup, the task, the data and the evaluator when training ends:
    ``keep.setup.model(keep.params)`` is the trained model."""

    def end(self, run) -> None:
        self.params, self.setup, self.task, self.data = run.state["params"], run.setup, run.task, run.data
        self.evaluator = run.evaluator
