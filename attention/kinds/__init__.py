"""Attention kinds: one module each, registered with ``attention.register_kind`` when imported.

Every module in this package is imported here (the four built-in kinds first, in the order reports list them,
then the others by name), so a new kind is one file in this folder; ``tests/test_attention_kinds.py`` then runs
the shared checks on it.
"""
import importlib
import pkgutil

from attention.kinds import softmax, linear, additive, hard  # noqa: F401,I001  (registry order)

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
