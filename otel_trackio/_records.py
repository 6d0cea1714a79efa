"""Plain-data span records: what the assembly and conversion code works on.

Both the in-process exporter (from SDK ``ReadableSpan``) and the OTLP receiver (from protobuf)
build these, so everything after this point is one pipeline, testable without the SDK.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode


@dataclass(frozen=True, slots=True)
class EventRecord:
    """A span event: name, time (ns since epoch) and attributes."""

    name: str
    time_ns: int
    attributes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class SpanRecord:
    """One finished span, reduced to the fields otel-trackio reads.

    ``status`` is ``"unset"``, ``"ok"`` or ``"error"``. ``parent_id`` is None for a trace root;
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
    def is_local_root(self) -> bool:
        """True when no span of this process is the parent."""
        return self.parent_id is None or self.parent_is_remote


_STATUS = {StatusCode.UNSET: "unset", StatusCode.OK: "ok", StatusCode.ERROR: "error"}


def record_from_readable_span(span: ReadableSpan) -> SpanRecord:
    """Copy what otel-trackio needs out of an SDK span (cheap: no conversion happens here)."""
    context = span.context
    parent = span.parent
    status = span.status
    resource = span.resource
    scope = span.instrumentation_scope
    start = span.start_time or 0
    return SpanRecord(
        trace_id=context.trace_id if context is not None else 0,
        span_id=context.span_id if context is not None else 0,
        name=span.name,
        start_ns=start,
        end_ns=span.end_time or start,
        parent_id=parent.span_id if parent is not None else None,
        parent_is_remote=bool(parent is not None and parent.is_remote),
        # A plain dict: the SDK's BoundedAttributes mapping is slow to read key by key.
        attributes=dict(span.attributes) if span.attributes else {},
        events=tuple(
            EventRecord(e.name, e.timestamp or 0, e.attributes or {}) for e in span.events
        ),
        status=_STATUS.get(status.status_code, "unset") if status is not None else "unset",
        status_description=status.description if status is not None else None,
        kind=span.kind.name if span.kind is not None else "INTERNAL",
        resource=dict(resource.attributes) if resource is not None else {},
        scope=scope.name if scope is not None else None,
    )
