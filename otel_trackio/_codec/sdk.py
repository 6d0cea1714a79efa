"""SDK spans and log records → records: what the in-process exporters export.

Cheap on purpose (it runs on the rollout's export path): fields are copied, nothing converted.
The SDK's public accessors cost more than that path can afford per span (the export thread holds
the GIL the rollout's event loop needs): ``attributes`` wraps the ``BoundedAttributes`` in a
``MappingProxyType`` whose copy runs Python code per key, ``events`` copies the list under a
lock, ``kind.value`` and ``status.status_code.value`` go through ``enum``'s descriptors.
:func:`span_row` reads the same fields from the span's own slots, several times faster, and reads
them through the public API instead for any span without the
SDK's layout (another SDK version, a hand-made ``ReadableSpan``). This module is the one place
that knows the SDK's private layout; ``tests/unit/test_sdk_span.py`` checks both ways agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import SpanContext

try:
    from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
except ImportError:  # opentelemetry-sdk before 1.39 named them LogExporter, LogExportResult
    from opentelemetry.sdk._logs.export import LogExporter as LogRecordExporter
    from opentelemetry.sdk._logs.export import (  # type: ignore[assignment]
        LogExportResult as LogRecordExportResult,
    )

from otel_trackio._codec.events import LogSkip, log_event_record
from otel_trackio._codec.rows import SpanRow, record_from_row
from otel_trackio._core.records import LogEventRecord, SpanRecord

__all__ = [
    "LogRecordExportResult",
    "LogRecordExporter",
    "attributes_view",
    "extend_rows",
    "record_from_readable_log",
    "record_from_readable_span",
    "resource_attributes",
    "span_row",
]


def record_from_readable_span(span: ReadableSpan) -> SpanRecord:
    """Copy what otel-trackio needs out of an SDK span (cheap: no conversion happens here)."""
    row, resource = span_row(span)
    return record_from_row(row, resource_attributes(resource))


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


# -- reading SDK spans fast ---------------------------------------------------------------------


def span_row(span: ReadableSpan) -> tuple[SpanRow, Any]:
    """(the span's :data:`~.rows.SpanRow`, its ``Resource``): read from the SDK's slots, else
    through the public API."""
    try:
        return _row_from_slots(span)
    except AttributeError:
        return public_span_row(span)


def _plain(attributes: Any) -> dict[str, Any] | None:
    """Attributes as a plain dict (None when empty). For ``BoundedAttributes``, the SDK's own
    dict, not a copy: a finished span's attributes never change, and not copying spares the
    rollout process an allocation per span (less work for its garbage collector)."""
    if attributes.__class__ is BoundedAttributes:
        inner: dict[str, Any] = attributes._dict
        return inner or None
    return dict(attributes) if attributes else None


def _row_from_slots(span: ReadableSpan) -> tuple[SpanRow, Any]:
    status = span._status
    events = span._events
    if events.__class__ is BoundedList:
        events = events._dq  # type: ignore[attr-defined]  # the list's deque, without its lock
    return _row(
        span._context,
        span._parent,
        span._name,
        span._start_time,
        span._end_time,
        _plain(span._attributes),
        _event_rows(events) if events else None,
        (status._status_code._value_, status._description) if status is not None else (0, None),
        span._kind._value_ if span._kind is not None else 0,
        span._resource,
        span._instrumentation_scope,
    )


def extend_rows(
    spans: Iterable[ReadableSpan], flat: list[Any], resources: dict[int, Mapping[str, Any]]
) -> None:
    """Append each span's :data:`~.rows.SpanRow` fields to ``flat`` (rows end to end, no tuple
    per span) and its resource's attributes to ``resources`` (by ``id``): the offload export
    path, a whole batch in one loop.

    :func:`_row_from_slots` inlined: the export thread holds the GIL the rollout's event loop
    waits for, and a call and a tuple per span would cost a good part of the encoding. A span
    without the SDK's layout takes the public
    accessors (:func:`span_row`)."""
    extend = flat.extend
    last_scope: Any = None
    scope_name: str | None = None
    last_resource: Any = _UNSEEN
    for span in spans:
        try:
            context = span._context
            parent = span._parent
            attributes = span._attributes
            events: Any = span._events
            status = span._status
            resource = span._resource
            scope = span._instrumentation_scope
            if scope is not last_scope:  # a batch's spans mostly share one scope
                last_scope, scope_name = scope, scope.name if scope is not None else None
            start = span._start_time or 0
            # A SpanContext is a tuple (trace_id, span_id, is_remote, ...): indexing it spares
            # a property call per field.
            if context.__class__ is not SpanContext or (
                parent is not None and parent.__class__ is not SpanContext
            ):
                raise AttributeError("not the SDK's span context")
            if events.__class__ is BoundedList:
                events = events._dq  # type: ignore[attr-defined]  # its deque, no lock
            row: tuple[Any, ...] = (
                context[0],
                context[1],
                span._name,
                start,
                span._end_time or start,
                parent[1] if parent is not None else None,
                parent is not None and parent[2],
                (attributes._dict or None)
                if attributes.__class__ is BoundedAttributes
                else _plain(attributes),
                _event_rows(events) if events else None,
                status._status_code._value_ if status is not None else 0,
                status._description if status is not None else None,
                span._kind._value_ if span._kind is not None else 0,
                id(resource),
                scope_name,
            )
        except AttributeError:
            row, resource = public_span_row(span)
        extend(row)
        if resource is not last_resource:
            last_resource = resource
            key = id(resource)
            if key not in resources:
                resources[key] = resource_attributes(resource)


_UNSEEN = object()


def _event_rows(events: Any) -> tuple[Any, ...]:
    """A span's events (a sequence; a ``BoundedList``'s deque, since the list's ``__len__`` is
    Python code, a microsecond per span) as rows."""
    return tuple((e.name, e.timestamp or 0, _plain(e.attributes) or {}) for e in events)


def public_span_row(span: ReadableSpan) -> tuple[SpanRow, Any]:
    """:func:`span_row` through the SDK's public accessors only (slower; any ``ReadableSpan``)."""
    status = span.status
    events = span.events
    attributes: Mapping[str, Any] | None = span.attributes
    return _row(
        span.context,
        span.parent,
        span.name,
        span.start_time,
        span.end_time,
        dict(attributes) if attributes else None,
        tuple((e.name, e.timestamp or 0, dict(e.attributes or {})) for e in events)
        if events
        else None,
        (status.status_code.value, status.description) if status is not None else (0, None),
        span.kind.value if span.kind is not None else 0,
        span.resource,
        span.instrumentation_scope,
    )


def _row(
    context: Any,
    parent: Any,
    name: str,
    start: int | None,
    end: int | None,
    attributes: dict[str, Any] | None,
    events: tuple[Any, ...] | None,
    status: tuple[int, str | None],
    kind: int,
    resource: Any,
    scope: Any,
) -> tuple[SpanRow, Any]:
    """The row of a span's fields, however they were read, and its resource."""
    start = start or 0
    return (
        context.trace_id if context is not None else 0,
        context.span_id if context is not None else 0,
        name,
        start,
        end or start,
        parent.span_id if parent is not None else None,
        parent is not None and parent.is_remote,
        attributes,
        events,
        status[0],
        status[1],
        kind,
        id(resource),
        scope.name if scope is not None else None,
    ), resource


def resource_attributes(resource: Any) -> dict[str, Any]:
    """A resource's attributes as a plain dict (``{}`` for None)."""
    if resource is None:
        return {}
    return _plain(resource.attributes) or {}


_EMPTY: Mapping[str, Any] = {}


def attributes_view(span: ReadableSpan) -> Mapping[str, Any]:
    """A span's attributes to read at once (never to keep): the SDK's own dict when it has one,
    so that ``key in attributes_view(span)`` is one dict lookup (the public mapping answers a
    missing key by raising and catching a ``KeyError`` in Python)."""
    attributes = getattr(span, "_attributes", None)
    if attributes.__class__ is BoundedAttributes:
        inner: dict[str, Any] = attributes._dict
        return inner
    return span.attributes or _EMPTY
