"""attnlab's engine: the one training/evaluation loop, its hooks and tasks.

    import engine
    result = engine.run(config)                       # in-process: nothing written, metrics returned
    result = engine.run(config, workdir="runs/x")     # what train.py does: checkpoints, resume, JSONL, W&B
    result = engine.run(config, hooks=[MyHook()])     # a new measurement is a hook (engine.hooks.Hook)

Submodules load lazily, so config files can import ``engine.config`` before JAX is initialized.
"""
import importlib

_EXPORTS = {"run": "engine.loop", "Run": "engine.loop", "Hook": "engine.hooks", "Task": "engine.tasks",
            "get_task": "engine.tasks", "TASKS": "engine.tasks"}


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
