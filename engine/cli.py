"""The one error path of train.py and eval.py: every anticipated mistake is one ``ERROR ...`` line and exit code 1.

    from engine import cli
    ...
    if __name__ == "__main__":
        cli.run(main)   # instead of absl.app.run(main)

``run`` parses the flags itself: before absl and ml_collections see them, it checks the ``--config`` flag (the
file exists, ``get_config(arg)`` accepts its argument) and every ``--config.a.b=v`` override (the field exists),
with a "did you mean" hint; flag errors (a bad value, an unknown flag, a missing required flag) become one line
too. Inside ``main``, the errors of ``engine.errors.ANTICIPATED`` (config, data, checkpoint, non-finite) become
one line; any other exception is a bug and keeps its traceback. A stop signal ends the command with 143 / 130
(``engine.watchdog``): outside the train loop at once (``StopSignal``), and an error that follows one (a collective
whose other host already stopped) is one line too.
"""
from __future__ import annotations

import importlib.util
import logging
import os
import re
import sys
from typing import Any, Callable, NoReturn, Optional, Sequence

from absl import app, flags

from data.errors import did_you_mean  # noqa: F401  (re-exported for the CLIs)
from engine import logs
from engine.errors import ANTICIPATED

CONFIG_FLAG = "config"
_UNKNOWN_ARG = re.compile(r"unknown config arg '([^']+)'; expected one of \[([^\]]*)\]")


class UsageError(Exception):
    """A command-line mistake found before anything is built; the message is the line the user sees."""


def fail(message: str, at_once: bool = False) -> NoReturn:
    """Report ``message`` as one ``ERROR`` line (through the run's log when it is set up) and exit with 1 (with
    128 + the signal number when a stop signal came first: 143 after SIGTERM, 130 after SIGINT). at_once: exit
    without waiting for other threads or the multi-host shutdown (``engine.checkpoint.SaveFailedOnAHost``)."""
    from engine.watchdog import StopRequest, signal_exit_code

    line = " ".join(str(message).split())
    log = logging.getLogger("attnlab")
    if log.handlers:
        log.error("%s", line)
    else:
        sys.stderr.write(f"ERROR {line}\n")
    code = signal_exit_code(StopRequest.received) or 1
    if at_once:
        for stream in [h for h in log.handlers] + [sys.stdout, sys.stderr]:
            stream.flush()
        os._exit(code)
    sys.exit(code)


def run(main: Callable[[list[str]], Any]) -> None:
    """``absl.app.run(main)`` with the checks and the one-line error path described in the module docstring; it
    ends the process, and an exit stuck on a thread that never ends is cut off after the grace period
    (``engine.watchdog.bound_exit``)."""

    def guarded(argv: list[str]) -> Any:
        from engine.watchdog import StopRequest, StopSignal

        guard = StopRequest(at_once=True)  # its grace period: train.stop_grace_seconds (``watchdog.set_grace``)
        try:
            with guard:
                return main(argv)
        except StopSignal as e:
            guard.announce(e.name)
            sys.exit(e.code)
        except ANTICIPATED as e:
            fail(str(e), at_once=getattr(e, "exit_at_once", False))
        except UsageError as e:
            fail(str(e))
        except Exception as e:  # noqa: BLE001  after a stop signal, not a bug: the command was being stopped
            if StopRequest.received is None:
                raise
            fail(f"stopped after {StopRequest.received}: {type(e).__name__}: {e}")

    logs.quiet_third_party()  # before JAX starts its backends: no libtpu probe line
    try:
        app.run(guarded, flags_parser=parse_flags)
    except SystemExit as e:  # app.run always ends this way: the interpreter's exit is bounded too
        from engine import watchdog

        watchdog.bound_exit(e.code if isinstance(e.code, int) else 1)
        raise


def script(main: Callable[..., Any], *args: Any) -> Any:
    """``main(*args)`` for a script under ``scripts/``: a bad argument (a ``ValueError`` itself, not a subclass
    such as ``statistics.StatisticsError``; a ``UsageError``; an ``engine.errors.ANTICIPATED`` error) becomes one
    ``ERROR`` line and exit code 1; any other exception is a bug and keeps its traceback."""
    from engine.watchdog import StopRequest

    logs.quiet_third_party()
    StopRequest.received = None  # a new command has seen no stop signal yet (in-process callers run several)
    try:
        return main(*args)
    except ANTICIPATED as e:
        fail(str(e))
    except UsageError as e:
        fail(str(e))
    except ValueError as e:
        if type(e) is not ValueError:
            raise
        fail(str(e))


def parse_flags(argv: Sequence[str]) -> list[str]:
    """absl's flag parsing, preceded by the ``--config`` checks; every problem exits through ``fail``."""
    try:
        check_config_flags(list(argv))
        return flags.FLAGS(list(argv))
    except flags.Error as e:
        fail(str(e))
    except UsageError as e:
        fail(str(e))


def _flag_values(argv: Sequence[str], name: str) -> list[str]:
    """Values given to ``--name`` (``--name=v`` or ``--name v``), in order."""
    out = []
    for i, a in enumerate(argv):
        if a in (f"--{name}", f"-{name}") and i + 1 < len(argv):
            out.append(argv[i + 1])
        elif a.startswith((f"--{name}=", f"-{name}=")):
            out.append(a.split("=", 1)[1])
    return out


def load_config_file(spec: str, flag: str = CONFIG_FLAG) -> Any:
    """``get_config(arg)`` of ``path[:arg]`` as ml_collections' config flag calls it; raises UsageError for a
    missing file or an argument ``get_config`` rejects (ValueError), naming the flag."""
    path, sep, arg = spec.partition(":")
    if not os.path.isfile(path):
        folder = os.path.dirname(path) or "."
        options = sorted(f for f in os.listdir(folder) if f.endswith(".py")) if os.path.isdir(folder) else []
        hint = did_you_mean(os.path.basename(path), options)
        listed = f"; config files in {folder}/: {', '.join(options)}" if options and not hint else ""
        raise UsageError(f"--{flag}={spec}: config file {path!r} does not exist{hint}{listed}")
    module_spec = importlib.util.spec_from_file_location(f"{flag}_config_check", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    if not hasattr(module, "get_config"):
        raise UsageError(f"--{flag}={spec}: {path} defines no get_config()")
    try:
        return module.get_config(arg) if sep else module.get_config()
    except ValueError as e:
        message = " ".join(str(e).split())
        unknown = _UNKNOWN_ARG.search(message)
        if unknown and "did you mean" not in message:
            options = [o.strip().strip("'\"") for o in unknown.group(2).split(",")]
            message += did_you_mean(unknown.group(1), options)
        raise UsageError(f"--{flag}={spec}: {message}") from None


def check_override(config: Any, field_path: str, flag: str = CONFIG_FLAG) -> None:
    """Raise UsageError unless ``config`` has the dotted field ``field_path`` (as ``--config.<field_path>``)."""
    node, walked = config, flag
    for part in field_path.split("."):
        keys = list(node.keys()) if hasattr(node, "keys") else None
        if keys is None:
            raise UsageError(f"--{flag}.{field_path}: {walked} is a value ({node!r}), not a section with fields")
        if part not in keys:
            hint = did_you_mean(part, keys)
            listed = "" if hint else f"; its fields: {', '.join(sorted(map(str, keys)))}"
            raise UsageError(f"--{flag}.{field_path}: {walked} has no field {part!r}{hint}{listed}")
        node, walked = node[part], f"{walked}.{part}"


def check_config_flags(argv: Sequence[str], flag: str = CONFIG_FLAG) -> Optional[Any]:
    """Check the config file flag and its ``--<flag>.field`` overrides in ``argv`` (see ``load_config_file``
    and ``check_override``); returns the loaded config, or None when the flag is absent (absl reports it)."""
    specs = _flag_values(argv, flag)
    if not specs:
        return None
    config = load_config_file(specs[-1], flag)
    for a in argv:
        for prefix in (f"--{flag}.", f"--no{flag}."):
            if a.startswith(prefix):
                check_override(config, a[len(prefix):].split("=", 1)[0], flag)
    return config
