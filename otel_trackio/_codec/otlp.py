"""OTLP protobuf messages in, span records, GenAI log event records and SDK ``MetricsData`` out.

Pure: no I/O, no trackio, no HTTP (the receiver parses bodies and answers with statuses; here a
malformed item is counted as rejected, with why). Needs the ``receiver`` extra
(``opentelemetry-proto``); only the receiver imports this module, so a plain install works.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.metrics.v1 import metrics_pb2
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    ExponentialHistogram,
    ExponentialHistogramDataPoint,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.metrics.export import Buckets as _Buckets
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from otel_trackio._codec.events import log_event_record
from otel_trackio._codec.routes import Route, route_of
from otel_trackio._codec.tables import kind_from_otlp, status_name
from otel_trackio._core.records import EventRecord, LogEventRecord, SpanRecord

_HAS_IS_REMOTE = trace_pb2.SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_IS_REMOTE = trace_pb2.SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
_NO_RECORDED_VALUE = metrics_pb2.DataPointFlags.DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK
_TRACE_FLAGS = logs_pb2.LogRecordFlags.LOG_RECORD_FLAGS_TRACE_FLAGS_MASK
#: set on a span, event or log record whose attributes were cut: how many were left out (by the
#: sender's SDK, ``dropped_attributes_count``, and here).
DROPPED_ATTRIBUTES = "otel_trackio.dropped_attributes"
#: set on a span whose events were cut: how many were left out (by the sender and here).
DROPPED_EVENTS = "otel_trackio.dropped_events"


@dataclass(frozen=True, slots=True)
class ItemLimits:
    """Caps applied while decoding, before anything is held as records: the OTel SDK's span
    limits semantics (``OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT``, ``OTEL_SPAN_EVENT_COUNT_LIMIT``):
    the first ``attributes`` attributes of a span, event, log record or resource and the first
    ``events`` events of a span are kept, the cut is marked (:data:`DROPPED_ATTRIBUTES`,
    :data:`DROPPED_EVENTS`). None: no cap."""

    attributes: int | None = None
    events: int | None = None


# -- values ------------------------------------------------------------------------------------


def any_value(value: common_pb2.AnyValue) -> Any:
    """An OTLP ``AnyValue`` as a Python value (arrays as tuples, key-value lists as dicts)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return tuple(any_value(v) for v in value.array_value.values)
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values)
    return getattr(value, kind)


_NESTED = frozenset({"array_value", "kvlist_value"})


def attributes(pairs: Iterable[common_pb2.KeyValue]) -> dict[str, Any]:
    """OTLP key-value pairs as a dict; pairs without a value are left out. A scalar (nearly
    every attribute) is read in place: no Python call per value."""
    out: dict[str, Any] = {}
    for pair in pairs:
        value = pair.value
        kind = value.WhichOneof("value")
        if kind is None:
            continue
        out[pair.key] = any_value(value) if kind in _NESTED else getattr(value, kind)
    return out


NO_LIMITS = ItemLimits()


def bounded_attributes(
    pairs: Sequence[common_pb2.KeyValue], limit: int | None, dropped_before: int = 0
) -> dict[str, Any]:
    """:func:`attributes` of the first ``limit`` pairs, with :data:`DROPPED_ATTRIBUTES` when
    some were left out (``dropped_before``: by the sender)."""
    kept = pairs if limit is None else itertools.islice(pairs, limit)
    out = attributes(kept)
    dropped = dropped_before + (max(0, len(pairs) - limit) if limit is not None else 0)
    if dropped:
        out[DROPPED_ATTRIBUTES] = dropped
    return out


# -- traces ------------------------------------------------------------------------------------


@dataclass(slots=True)
class DecodedSpans:
    """Span records by route, and what was rejected (with why)."""

    by_route: dict[Route, list[SpanRecord]] = field(default_factory=dict)
    accepted: int = 0
    rejected: int = 0
    problems: list[str] = field(default_factory=list)


def decode_traces(
    request: trace_service_pb2.ExportTraceServiceRequest, limits: ItemLimits = NO_LIMITS
) -> DecodedSpans:
    """Turn an ``ExportTraceServiceRequest`` into :class:`SpanRecord` lists, one per route."""
    out = DecodedSpans()
    bad_ids = 0
    for resource_spans in request.resource_spans:
        resource = bounded_attributes(resource_spans.resource.attributes, limits.attributes)
        records = out.by_route.setdefault(route_of(resource), [])
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope.name or None
            for span in scope_spans.spans:
                record = _span_record(span, resource, scope, limits)
                if record is None:
                    bad_ids += 1
                    continue
                records.append(record)
                out.accepted += 1
    out.by_route = {route: spans for route, spans in out.by_route.items() if spans}
    if bad_ids:
        out.rejected += bad_ids
        out.problems.append(
            f"{bad_ids} spans rejected: trace_id must be 16 non-zero bytes, span_id 8 non-zero "
            "bytes, parent_span_id empty or 8 bytes"
        )
    return out


def _span_record(
    span: trace_pb2.Span, resource: Mapping[str, Any], scope: str | None, limits: ItemLimits
) -> SpanRecord | None:
    trace_id = int.from_bytes(span.trace_id, "big")
    span_id = int.from_bytes(span.span_id, "big")
    if len(span.trace_id) != 16 or len(span.span_id) != 8 or not trace_id or not span_id:
        return None
    parent = span.parent_span_id
    if parent and len(parent) != 8:
        return None
    parent_id = int.from_bytes(parent, "big") if parent else None
    start = span.start_time_unix_nano
    span_attributes = bounded_attributes(
        span.attributes, limits.attributes, span.dropped_attributes_count
    )
    events = span.events if limits.events is None else span.events[: limits.events]
    dropped_events = span.dropped_events_count + len(span.events) - len(events)
    if dropped_events:
        span_attributes[DROPPED_EVENTS] = dropped_events
    return SpanRecord(
        trace_id=trace_id,
        span_id=span_id,
        name=span.name,
        start_ns=start,
        end_ns=span.end_time_unix_nano or start,
        parent_id=parent_id or None,
        parent_is_remote=bool(span.flags & _HAS_IS_REMOTE and span.flags & _IS_REMOTE),
        attributes=span_attributes,
        events=tuple(
            EventRecord(
                e.name,
                e.time_unix_nano,
                bounded_attributes(e.attributes, limits.attributes, e.dropped_attributes_count),
            )
            for e in events
        ),
        status=status_name(span.status.code),
        status_description=span.status.message or None,
        kind=kind_from_otlp(span.kind),
        resource=resource,
        scope=scope,
    )


# -- logs --------------------------------------------------------------------------------------


@dataclass(slots=True)
class DecodedLogs:
    """GenAI log event records by route; how many other records were acknowledged and left out
    (by :data:`~otel_trackio._core.records.LogSkip` reason); what was rejected (with why)."""

    by_route: dict[Route, list[LogEventRecord]] = field(default_factory=dict)
    accepted: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    rejected: int = 0
    problems: list[str] = field(default_factory=list)


def decode_logs(
    request: logs_service_pb2.ExportLogsServiceRequest, limits: ItemLimits = NO_LIMITS
) -> DecodedLogs:
    """Turn an ``ExportLogsServiceRequest`` into :class:`LogEventRecord` lists, one per route.

    Only GenAI events (``gen_ai.*`` event names) become records; the other log records are
    counted in ``skipped``. Records with malformed ids are rejected.
    """
    out = DecodedLogs()
    bad_ids = 0
    for resource_logs in request.resource_logs:
        resource = bounded_attributes(resource_logs.resource.attributes, limits.attributes)
        route = route_of(resource)
        for scope_logs in resource_logs.scope_logs:
            scope = scope_logs.scope.name or None
            for log in scope_logs.log_records:
                if len(log.trace_id) not in (0, 16) or len(log.span_id) not in (0, 8):
                    bad_ids += 1
                    continue
                record = log_event_record(
                    event_name=getattr(log, "event_name", None),
                    body=any_value(log.body) if log.HasField("body") else None,
                    attributes=bounded_attributes(
                        log.attributes, limits.attributes, log.dropped_attributes_count
                    ),
                    time_ns=log.time_unix_nano or log.observed_time_unix_nano,
                    trace_id=int.from_bytes(log.trace_id, "big"),
                    span_id=int.from_bytes(log.span_id, "big"),
                    trace_flags=log.flags & _TRACE_FLAGS,
                    resource=resource,
                    scope=scope,
                )
                out.accepted += 1
                if isinstance(record, LogEventRecord):
                    out.by_route.setdefault(route, []).append(record)
                else:
                    out.skipped[record] = out.skipped.get(record, 0) + 1
    if bad_ids:
        out.rejected += bad_ids
        out.problems.append(
            f"{bad_ids} log records rejected: trace_id must be empty or 16 bytes, span_id empty "
            "or 8 bytes"
        )
    return out


# -- metrics -----------------------------------------------------------------------------------


@dataclass(slots=True)
class DecodedMetrics:
    """SDK ``MetricsData`` by route, and what was rejected (with why)."""

    by_route: dict[Route, MetricsData] = field(default_factory=dict)
    accepted: int = 0
    rejected: int = 0
    problems: list[str] = field(default_factory=list)
    points: dict[Route, int] = field(default_factory=dict)
    """Accepted data points by route."""
    parts: dict[Route, bytes] = field(default_factory=dict)
    """Each route's resource metrics serialised as a request of its own (what the receiver
    spools; :func:`decode_metrics` reads it back on the other side of the spool)."""


def decode_metrics(request: metrics_service_pb2.ExportMetricsServiceRequest) -> DecodedMetrics:
    """Turn an ``ExportMetricsServiceRequest`` into SDK ``MetricsData``, one per route (and the
    route's part of the request, serialised, with its count of accepted points)."""
    out = DecodedMetrics()
    grouped: dict[Route, list[ResourceMetrics]] = {}
    requests: dict[Route, metrics_service_pb2.ExportMetricsServiceRequest] = {}
    rejected_by_reason: dict[str, int] = {}
    for resource_metrics in request.resource_metrics:
        resource_attributes = attributes(resource_metrics.resource.attributes)
        route = route_of(resource_attributes)
        part = requests.setdefault(route, metrics_service_pb2.ExportMetricsServiceRequest())
        part.resource_metrics.append(resource_metrics)
        scopes: list[ScopeMetrics] = []
        for scope_metrics in resource_metrics.scope_metrics:
            metrics: list[Metric] = []
            for metric in scope_metrics.metrics:
                data, accepted, rejected, reason = _metric_data(metric)
                out.accepted += accepted
                out.points[route] = out.points.get(route, 0) + accepted
                if rejected:
                    out.rejected += rejected
                    rejected_by_reason[reason] = rejected_by_reason.get(reason, 0) + rejected
                if data is not None:
                    metrics.append(
                        Metric(
                            name=metric.name,
                            description=metric.description or None,
                            unit=metric.unit or None,
                            data=data,
                        )
                    )
            if metrics:
                scope = scope_metrics.scope
                scopes.append(
                    ScopeMetrics(
                        scope=InstrumentationScope(
                            scope.name, scope.version or None, scope_metrics.schema_url or None
                        ),
                        metrics=metrics,
                        schema_url=scope_metrics.schema_url,
                    )
                )
        if scopes:
            grouped.setdefault(route, []).append(
                ResourceMetrics(
                    resource=Resource(_sdk_attributes(resource_attributes)),
                    scope_metrics=scopes,
                    schema_url=resource_metrics.schema_url,
                )
            )
    out.by_route = {route: MetricsData(resource_metrics=rms) for route, rms in grouped.items()}
    out.parts = {route: bytes(requests[route].SerializeToString()) for route in out.by_route}
    out.problems.extend(f"{n} data points rejected: {why}" for why, n in rejected_by_reason.items())
    return out


_DataType = Sum | Gauge | Histogram | ExponentialHistogram


def _metric_data(metric: metrics_pb2.Metric) -> tuple[_DataType | None, int, int, str]:
    """(SDK data or None, accepted points, rejected points, reason for the rejection)."""
    kind = metric.WhichOneof("data")
    if kind in ("sum", "gauge"):
        proto = getattr(metric, kind)
        points = [_number_point(p) for p in proto.data_points]
        good = [p for p in points if p is not None and p is not _EMPTY]
        bad = sum(1 for p in points if p is None)
        if not good:
            return None, 0, bad, "number points without a value"
        if kind == "sum":
            data: _DataType = Sum(
                data_points=good,
                aggregation_temporality=_temporality(proto.aggregation_temporality),
                is_monotonic=proto.is_monotonic,
            )
        else:
            data = Gauge(data_points=good)
        return data, len(good), bad, "number points without a value"
    if kind == "histogram":
        proto = metric.histogram
        hist = [_histogram_point(p) for p in proto.data_points if not p.flags & _NO_RECORDED_VALUE]
        if not hist:
            return None, 0, 0, ""
        temporality = _temporality(proto.aggregation_temporality)
        return Histogram(data_points=hist, aggregation_temporality=temporality), len(hist), 0, ""
    if kind == "exponential_histogram":
        proto = metric.exponential_histogram
        expo = [
            _exponential_point(p) for p in proto.data_points if not p.flags & _NO_RECORDED_VALUE
        ]
        if not expo:
            return None, 0, 0, ""
        data = ExponentialHistogram(
            data_points=expo, aggregation_temporality=_temporality(proto.aggregation_temporality)
        )
        return data, len(expo), 0, ""
    if kind == "summary":
        n = len(metric.summary.data_points)
        return None, 0, n, "Summary metrics are not supported (use a histogram)"
    return None, 0, 0, ""


_EMPTY = object()  # a point flagged "no recorded value": skipped, not rejected


def _number_point(point: metrics_pb2.NumberDataPoint) -> Any:
    if point.flags & _NO_RECORDED_VALUE:
        return _EMPTY
    which = point.WhichOneof("value")
    if which is None:
        return None
    return NumberDataPoint(
        attributes=_sdk_attributes(attributes(point.attributes)),
        start_time_unix_nano=point.start_time_unix_nano,
        time_unix_nano=point.time_unix_nano,
        value=getattr(point, which),
    )


def _histogram_point(point: metrics_pb2.HistogramDataPoint) -> HistogramDataPoint:
    return HistogramDataPoint(
        attributes=_sdk_attributes(attributes(point.attributes)),
        start_time_unix_nano=point.start_time_unix_nano,
        time_unix_nano=point.time_unix_nano,
        count=point.count,
        sum=point.sum if point.HasField("sum") else math.nan,
        bucket_counts=list(point.bucket_counts),
        explicit_bounds=list(point.explicit_bounds),
        min=point.min if point.HasField("min") else math.inf,
        max=point.max if point.HasField("max") else -math.inf,
    )


def _exponential_point(
    point: metrics_pb2.ExponentialHistogramDataPoint,
) -> ExponentialHistogramDataPoint:
    return ExponentialHistogramDataPoint(
        attributes=_sdk_attributes(attributes(point.attributes)),
        start_time_unix_nano=point.start_time_unix_nano,
        time_unix_nano=point.time_unix_nano,
        count=point.count,
        sum=point.sum if point.HasField("sum") else math.nan,
        scale=point.scale,
        zero_count=point.zero_count,
        positive=_Buckets(point.positive.offset, list(point.positive.bucket_counts)),
        negative=_Buckets(point.negative.offset, list(point.negative.bucket_counts)),
        flags=point.flags,
        min=point.min if point.HasField("min") else math.inf,
        max=point.max if point.HasField("max") else -math.inf,
    )


def _temporality(value: int) -> AggregationTemporality:
    try:
        return AggregationTemporality(value)
    except ValueError:
        return AggregationTemporality.UNSPECIFIED


def _sdk_attributes(values: Mapping[str, Any]) -> dict[str, Any]:
    """Attribute values the SDK types accept: nested key-value lists become JSON text."""
    return {
        k: json.dumps(v, default=repr, sort_keys=True) if isinstance(v, Mapping) else v
        for k, v in values.items()
    }
