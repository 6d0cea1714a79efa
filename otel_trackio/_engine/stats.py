"""``ExportStats``: the counters of one run's span pipeline, one type on every path.

The in-process exporter reads its pipeline's; with ``offload=True`` the writer process saves the
same counters into its spool checkpoint (:meth:`ExportStats.as_dict`) and the exporter reads them
back (:meth:`ExportStats.from_dict`) without losing a field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class ExportStats:
    """Counters of what a span pipeline did, for summaries, tests and the fault tally."""

    spans_received: int = 0
    log_events_received: int = 0
    samples_logged: int = 0
    partial_samples: int = 0
    log_calls: int = 0
    failed_exports: int = 0
    samples_lost: int = 0
    conversion_errors: int = 0
    evicted_samples: int = 0
    already_stored: int = 0

    def as_dict(self) -> dict[str, int]:
        """Every counter by its field name (what a spool checkpoint stores)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExportStats:
        """The counters :meth:`as_dict` gave (other keys ignored, missing ones 0)."""
        return cls(**{f.name: int(data.get(f.name) or 0) for f in dataclasses.fields(cls)})

    @classmethod
    def total(cls, parts: Iterable[ExportStats]) -> ExportStats:
        """The sum of several pipelines' counters (a drainer feeding many)."""
        out = cls()
        for part in parts:
            for f in dataclasses.fields(cls):
                setattr(out, f.name, getattr(out, f.name) + getattr(part, f.name))
        return out
