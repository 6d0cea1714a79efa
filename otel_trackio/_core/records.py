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

from otel_trackio._core.sdk_span import SpanRow, resource_attributes, span_row


@dataclass(frozen=True, slots=True)
class EventRecord:
    """A span event: name, time (ns since epoch) and attributes; ``from_log`` when it came as a
    log record (a GenAI log event joined to its span), which comes after the span's own events
    in the span's event list and in the conversation's precedence."""

    name: str
    time_ns: int
    attributes: Mapping[str, Any] = field(default_factory=dict)
    from_log: bool = False


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


STATUSES = ("unset", "ok", "error")
"""``SpanRecord.status`` by status code (``StatusCode`` values: 0 unset, 1 ok, 2 error)."""
KINDS = ("INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
"""``SpanRecord.kind`` by ``SpanKind`` value."""


def record_from_row(row: SpanRow, resource: Mapping[str, Any]) -> SpanRecord:
    """A span record from a :data:`~otel_trackio._core.sdk_span.SpanRow` and its resource's
    attributes (what the in-process exporter and the spool's reader both build)."""
    (trace_id, span_id, name, start, end, parent_id, remote, attributes, events) = row[:9]
    status, description, kind, _, scope = row[9:]
    return SpanRecord(
        trace_id=trace_id,
        span_id=span_id,
        name=name,
        start_ns=start,
        end_ns=end,
        parent_id=parent_id,
        parent_is_remote=bool(remote),
        attributes=attributes or {},
        events=tuple(EventRecord(n, t, a) for n, t, a in events) if events else (),
        status=STATUSES[status] if 0 <= status < len(STATUSES) else "unset",
        status_description=description,
        kind=KINDS[kind] if 0 <= kind < len(KINDS) else "INTERNAL",
        resource=resource,
        scope=scope,
    )


def record_from_readable_span(span: ReadableSpan) -> SpanRecord:
    """Copy what otel-trackio needs out of an SDK span (cheap: no conversion happens here)."""
    row, resource = span_row(span)
    return record_from_row(row, resource_attributes(resource))


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
