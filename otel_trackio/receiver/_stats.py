"""What the receiver counts: per request (:class:`Outcome`) and in all (:class:`ReceiverStats`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

REFUSAL_REASONS = {
    400: "malformed",
    401: "no or wrong bearer token",
    408: "body too slow",
    413: "too large",
    415: "unsupported type or encoding",
}
"""What a refused request's HTTP status (gRPC calls map to one) says, in the summary's words."""


def refusal_reason(status: int) -> str:
    """``401 no or wrong bearer token``: a refused request's status and what it means."""
    return f"{status} {REFUSAL_REASONS.get(status, 'refused')}"


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
    refused_why: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True, slots=True)
class ReceiverTotals:
    """The receiver's counters so far, all runs together: what its summary and stop lines say
    (:meth:`~otel_trackio.receiver._routing.Router.totals`)."""

    requests: int = 0
    """Requests taken (all three signals, both doors)."""
    spans: int = 0
    """Spans received."""
    points: int = 0
    """Metric points received."""
    log_records: int = 0
    """Log records received."""
    log_events: int = 0
    """GenAI log events among them (they join their spans)."""
    log_events_unsampled: int = 0
    """GenAI log events of unsampled spans, left out."""
    samples: int = 0
    """Samples written to Trackio's storage."""
    partial: int = 0
    """Of those, samples logged before they were whole (TTL, flush, capacity)."""
    lost: int = 0
    """Samples given up (never stored)."""
    retried: int = 0
    """Samples logged again after a failed write."""
    retried_writes: int = 0
    """Writes or checkpoints that failed and were tried again."""
    already_stored: int = 0
    """Samples sent again (or replayed) that were found stored already, kept once."""
    unusable_steps: int = 0
    """Samples not stored: their ``step`` is no step."""
    resent: int = 0
    """Spans sent again that matched one buffered, held or logged, kept once."""
    unwritten: int = 0
    """Samples waiting for a write to be retried."""
    torn_entries: int = 0
    """Torn spool entries skipped (a producer killed mid-write)."""
    waiting: int = 0
    """Samples held in their grace period."""
    metrics: int = 0
    """Metric values logged."""
    rejected: int = 0
    """Items and requests rejected (the client was told why)."""
    rejected_why: tuple[tuple[str, int], ...] = ()
    """Of those, how many for each reason (``("401 no or wrong bearer token", 2)``), items in
    accepted requests as ``("items of accepted requests", n)``; most first."""
    busy: int = 0
    """Requests refused busy (503)."""
    backlog_spans: int = 0
    """Spans received and not yet handed to a run."""
    backlog_bytes: int = 0
    """Bytes waiting in the spool."""
    behind_seconds: float = 0.0
    """How old the oldest waiting spool entry is (0 with nothing waiting)."""
    runs: int = 0
    """Runs (routes) open or closed while idle."""
