"""The registry of studies: every module in this package is a study spec, found without being listed.

A spec module defines ``STUDIES``, a tuple of ``studies.study.Study``; the claims of one module are evaluated
together (a family may span its studies). A study whose report is not ``studies.study``'s generic one defines, in
its spec module, ``generate(into=None) -> list[str]`` (write its reports, into ``<into>/<folder>`` instead of
``docs/results/<folder>`` when ``into`` is given; their README paths; every file it writes listed in the folder's
``generated.txt``) and ``summary() -> list[Summary]`` (its rows of ``docs/results/README.md``) instead of ``STUDIES``.
``tests/test_studies_reports.py`` regenerates every registered module into a temporary folder and compares.
"""
from __future__ import annotations

import dataclasses
import importlib
import os
import pkgutil
from types import ModuleType
from typing import Optional


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


def study(name: str):
    """The registered ``studies.study.Study`` named ``name``; ValueError listing the known names when none."""
    for s in getattr(find(name), "STUDIES", ()):
        if s.name == name:
            return s
    raise ValueError(f"study {name!r} is a spec module, not one study; expected one of "
                     f"{[s.name for s in getattr(find(name), 'STUDIES', ())]}")


def generate(module: ModuleType, into: Optional[str] = None) -> list[str]:
    """Write every report of spec ``module`` from its records (into ``<into>/<folder>`` when given); their README
    paths."""
    if hasattr(module, "generate"):
        return list(module.generate(into))
    from studies import study as study_lib

    verdicts = study_lib.evaluate(module.STUDIES)
    return [study_lib.write_report(s, verdicts[s.name], into=into and os.path.join(into, os.path.basename(s.out)))
            for s in module.STUDIES]
