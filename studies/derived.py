"""A study whose claims and tables read measures derived from each record (steps to learn, a sweep's degradation
learning rate, a run's first health warning) by name, as if the record had logged them."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional

from studies.records import Record
from studies.study import Arm, Study

Derive = Callable[[Record, Mapping[str, list[tuple[Arm, Record]]]], Mapping[str, Any]]


def with_metrics(rec: Record, metrics: Mapping[str, Any]) -> Record:
    """``rec`` with ``metrics`` (name -> number) added to its ``metrics`` section (``Record.metric`` reads them)."""
    return Record(rec.path, dict(rec.raw, metrics={**(rec.raw.get("metrics") or {}), **metrics}))


@dataclasses.dataclass(frozen=True)
class DerivedStudy(Study):
    """A ``Study`` whose records carry ``derive(record, groups)`` in their metrics; ``groups`` (setting label ->
    (arm, record)) lets a measure depend on the record's sweep, e.g. its neighbours in a learning-rate grid."""

    derive: Optional[Derive] = None

    def records(self, out: Optional[str] = None) -> dict[str, list[tuple[Arm, Record]]]:
        groups = super().records(out)
        if self.derive is None:
            return groups
        return {label: [(arm, with_metrics(rec, self.derive(rec, groups))) for arm, rec in members]
                for label, members in groups.items()}
