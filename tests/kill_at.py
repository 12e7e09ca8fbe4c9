"""A training-batch iterator that interrupts its own process, for the resume tests."""
import os
import signal


class KillAt:
    """Wraps a training iterator (``get_state``/``set_state`` passed through); sends this process SIGTERM when
    batch ``at`` (0-based) is requested, then goes on yielding as the loop drains and checkpoints."""

    def __init__(self, inner, at: int):
        self.inner, self.at, self.count = inner, at, 0

    def __next__(self):
        if self.count == self.at:
            os.kill(os.getpid(), signal.SIGTERM)
        self.count += 1
        return next(self.inner)

    def get_state(self):
        return self.inner.get_state()

    def set_state(self, state):
        self.inner.set_state(state)
