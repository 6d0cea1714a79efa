"""Plain-data span and log event records: what the assembly and conversion code works on.

Both the in-process exporters (from SDK ``ReadableSpan`` / ``ReadableLogRecord``) and the OTLP
receiver (from protobuf) build these, so everything after this point is one pipeline, testable
without the SDK.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode


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


LogSkip = Literal["not_genai", "no_span"]
"""Why a log record is no :class:`LogEventRecord`: not a GenAI event (``not_genai``), or a GenAI
event emitted outside any span (``no_span``: no sample to join)."""

GENAI_EVENT_PREFIX = "gen_ai."
# Where producers older than the log record's own ``event_name`` field put the event's name.
_EVENT_NAME_ATTRIBUTE = "event.name"
_SAMPLED = 0x01


def plain_value(value: Any) -> Any:
    """A log value as JSON-like data: mappings as dicts, sequences (the SDK and the OTLP decoder
    give tuples) as lists, recursively; strings and bytes unchanged."""
    if isinstance(value, Mapping):
        return {str(k): plain_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_value(v) for v in value]
    return value


def log_event_record(
    *,
    event_name: str | None,
    body: Any,
    attributes: Mapping[str, Any] | None,
    time_ns: int,
    trace_id: int,
    span_id: int,
    trace_flags: int | None,
    resource: Mapping[str, Any] | None = None,
    scope: str | None = None,
) -> LogEventRecord | LogSkip:
    """A GenAI log event as a :class:`LogEventRecord`, or why it is not one.

    A GenAI event is a log record whose event name (the ``event_name`` field, else the older
    ``event.name`` attribute) starts with ``gen_ai.``. Its span event gets the record's attributes
    and, when the body is a map (the per-message events), the body's keys too; another body is
    the event's ``content``. ``trace_flags`` None means unknown (taken as sampled).
    """
    attrs = attributes or {}
    name = event_name or attrs.get(_EVENT_NAME_ATTRIBUTE)
    if not isinstance(name, str) or not name.startswith(GENAI_EVENT_PREFIX):
        return "not_genai"
    if not trace_id or not span_id:
        return "no_span"
    merged = {k: plain_value(v) for k, v in attrs.items() if k != _EVENT_NAME_ATTRIBUTE}
    if isinstance(body, Mapping):
        for key, value in body.items():
            merged.setdefault(str(key), plain_value(value))
    elif body is not None:
        merged.setdefault("content", plain_value(body))
    return LogEventRecord(
        trace_id=trace_id,
        span_id=span_id,
        event=EventRecord(name, time_ns, merged, from_log=True),
        resource=dict(resource) if resource else {},
        scope=scope,
        sampled=trace_flags is None or bool(trace_flags & _SAMPLED),
    )


def record_from_readable_log(item: Any) -> LogEventRecord | LogSkip:
    """:func:`log_event_record` for what the SDK hands a log exporter: a ``ReadableLogRecord``
    (SDK >= 1.39: resource beside the record) or the older ``LogData`` (resource on the record)."""
    log = getattr(item, "log_record", item)
    resource = getattr(item, "resource", None) or getattr(log, "resource", None)
    scope = getattr(item, "instrumentation_scope", None)
    flags = getattr(log, "trace_flags", None)
    return log_event_record(
        event_name=getattr(log, "event_name", None),
        body=getattr(log, "body", None),
        attributes=getattr(log, "attributes", None),
        time_ns=getattr(log, "timestamp", None) or getattr(log, "observed_timestamp", None) or 0,
        trace_id=getattr(log, "trace_id", None) or 0,
        span_id=getattr(log, "span_id", None) or 0,
        trace_flags=int(flags) if flags is not None else None,
        resource=getattr(resource, "attributes", None),
        scope=getattr(scope, "name", None),
    )
