"""What the receiver counts: per request (:class:`Outcome`) and in all (:class:`ReceiverStats`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Outcome:
    """What became of one request's items: how many were rejected, and why."""

    rejected: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def message(self) -> str:
        """The ``partial_success.error_message`` text ("" when all went well)."""
        return "; ".join(self.problems)


@dataclass(slots=True)
class ReceiverStats:
    """Counters of the receiver as a whole (exporter counters are summed on demand)."""

    requests: int = 0
    spans_received: int = 0
    points_received: int = 0
    log_records_received: int = 0
    log_events_received: int = 0
    rejected_items: int = 0
    rejected_requests: int = 0
    refused_busy: int = 0
