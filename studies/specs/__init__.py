"""The registry of studies: every module in this package is a study spec, found without being listed.

A spec module defines ``STUDIES``, a tuple of ``studies.study.Study``; the claims of one module are evaluated
together (a family may span its studies). A study whose report is not ``studies.study``'s generic one defines, in
its spec module, ``generate() -> list[str]`` (write the reports; their README paths) and ``summary() ->
list[Summary]`` (its rows of ``docs/results/README.md``) instead of, or beside, ``STUDIES``.
"""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from types import ModuleType


@dataclasses.dataclass(frozen=True)
class Summary:
    """A study's row in docs/results/README.md: its folder under docs/results, title, and a one-cell reading."""

    out: str
    title: str
    reading: str


def modules() -> list[ModuleType]:
    """Every spec module of this package, by name."""
    return [importlib.import_module(f"{__name__}.{m.name}") for m in sorted(pkgutil.iter_modules(__path__),
                                                                           key=lambda m: m.name)]


def find(name: str) -> ModuleType:
    """The spec module of study (or module) ``name``; ValueError listing the known names when none."""
    known = []
    for module in modules():
        names = [module.__name__.rsplit(".", 1)[1]] + [s.name for s in getattr(module, "STUDIES", ())]
        if name in names:
            return module
        known += names
    raise ValueError(f"study {name!r} is not registered; expected one of {sorted(set(known))}")
