"""The errors attnlab anticipates: each one is a user-facing problem with a one-line message that names the
bad value and what was expected. The CLIs (engine/cli.py) print ``ERROR <message>`` and exit 1 for these;
any other exception is a bug and keeps its traceback.

- ``ConfigError``: an impossible or unknown config setting (a ValueError);
- ``data.DataError``: a missing file or dataset, a bad line, a vocabulary the corpus cannot fill (a
  ValueError, defined in ``data/`` because that package sits below ``engine/``);
- ``CheckpointError``: no checkpoint, a damaged one, one of another model config (a ValueError);
- ``WorkdirError``: a workdir that is not writable, full, in use or holds a run of another config;
- ``NonFiniteError``: the loss or a gradient became NaN/Inf (a RuntimeError).
"""
from data.errors import DataError


class AttnlabError(Exception):
    """Base of the engine's anticipated errors; ``str(e)`` is the one line the user sees."""


class ConfigError(AttnlabError, ValueError):
    """An impossible or unknown config setting; the message names the field."""


class CheckpointError(AttnlabError, ValueError):
    """A checkpoint that is missing, damaged, or written by another model config; the message names the step,
    the directory and the steps that exist."""


class WorkdirError(AttnlabError):
    """The workdir cannot hold the run: not writable, full, in use by another run, or its record is of another
    config (engine/workdir.py); the message names the path and the cause."""


class NonFiniteError(AttnlabError, RuntimeError):
    """The loss or a gradient became NaN/Inf; the message names the step and the quantity."""


ANTICIPATED = (AttnlabError, DataError)
