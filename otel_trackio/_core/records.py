"""Plain-data span and log event records: what the assembly and conversion code works on.

Both the in-process exporters (from SDK ``ReadableSpan`` / ``ReadableLogRecord``) and the OTLP
receiver (from protobuf) build these (:mod:`otel_trackio._codec`), so everything after this point
is one pipeline, testable without the SDK.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class EventRecord:
    """A span event: name, time (ns since epoch) and attributes; ``from_log`` when it came as a
    log record (a GenAI log event joined to its span), which comes after the span's own events
    in the span's event list and in the conversation's precedence."""

    name: str
    time_ns: int
    attributes: Mapping[str, Any] = field(default_factory=dict)
    from_log: bool = False


UNFINISHED = "unfinished"
"""The status of a span record read from a span still open at a flush (see
:mod:`otel_trackio._engine.open_spans`); Trackio shows it as the span's status."""


@dataclass(slots=True)
class SpanRecord:
    """One finished span, reduced to the fields otel-trackio reads.

    ``status`` is ``"unset"``, ``"ok"`` or ``"error"``, or :data:`UNFINISHED` for a span still
    open at a flush (its ``end_ns`` is the flush's time). ``parent_id`` is None for a trace root;
    ``parent_is_remote`` marks a parent that lives in another process (a local root).
    """

    trace_id: int
    span_id: int
    name: str
    start_ns: int
    end_ns: int
    parent_id: int | None = None
    parent_is_remote: bool = False
    attributes: Mapping[str, Any] = field(default_factory=dict)
    events: Sequence[EventRecord] = ()
    status: str = "unset"
    status_description: str | None = None
    kind: str = "INTERNAL"
    resource: Mapping[str, Any] = field(default_factory=dict)
    scope: str | None = None

    @property
    def unfinished(self) -> bool:
        """True for a span still open when it was read (status :data:`UNFINISHED`)."""
        return self.status == UNFINISHED

    @property
    def is_local_root(self) -> bool:
        """True when no span of this process is the parent."""
        return self.parent_id is None or self.parent_is_remote


@dataclass(frozen=True, slots=True)
class LogEventRecord:
    """A GenAI event delivered as an OTel log record ("log-based event"), for the span it names.

    The assembler attaches ``event`` to the span ``trace_id``/``span_id`` as one more span event,
    so conversion reads it exactly like an event recorded on the span. ``resource`` and ``scope``
    are the log record's (shown when the span itself never arrives). ``sampled`` is False when
    the record's W3C trace flags say the span was not sampled: such an event joins its span if
    the span comes after all, and is otherwise left out (a sampler dropped that sample).
    """

    trace_id: int
    span_id: int
    event: EventRecord
    resource: Mapping[str, Any] = field(default_factory=dict)
    scope: str | None = None
    sampled: bool = True
