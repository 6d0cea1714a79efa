"""SDK spans and log records → records: what the in-process exporters export.

Cheap on purpose (it runs on the rollout's export path): fields are copied, nothing converted.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

try:
    from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
except ImportError:  # opentelemetry-sdk before 1.39 named them LogExporter, LogExportResult
    from opentelemetry.sdk._logs.export import LogExporter as LogRecordExporter
    from opentelemetry.sdk._logs.export import (  # type: ignore[assignment]
        LogExportResult as LogRecordExportResult,
    )

from otel_trackio._codec.events import LogSkip, log_event_record
from otel_trackio._codec.tables import SPAN_KINDS, STATUS_NAMES
from otel_trackio._core.records import EventRecord, LogEventRecord, SpanRecord

__all__ = [
    "LogRecordExportResult",
    "LogRecordExporter",
    "record_from_readable_log",
    "record_from_readable_span",
]


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
        status=STATUS_NAMES[status.status_code.value] if status is not None else "unset",
        status_description=status.description if status is not None else None,
        kind=SPAN_KINDS[span.kind.value] if span.kind is not None else "INTERNAL",
        resource=dict(resource.attributes) if resource is not None else {},
        scope=scope.name if scope is not None else None,
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
