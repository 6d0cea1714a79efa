"""OTLP/HTTP bodies in, span records, GenAI log event records and SDK ``MetricsData`` out: pure,
no I/O, no trackio.

Decoding uses the official ``opentelemetry-proto`` messages (``google.protobuf`` does the wire
format and, for JSON bodies, ``json_format``). OTLP JSON differs from protobuf's canonical JSON in
one way that matters here: trace and span ids are hex strings, not base64; :func:`parse_request`
rewrites them before parsing.

Every function raises :class:`RequestError` (with the HTTP status to answer) on bad input.
"""

from __future__ import annotations

import base64
import itertools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from google.rpc import status_pb2
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

from otel_trackio._core.records import EventRecord, LogEventRecord, SpanRecord, log_event_record

Encoding = Literal["protobuf", "json"]
# (trackio.project, trackio.run) resource attributes of a request part; None when absent.
Route = tuple[str | None, str | None]
M = TypeVar("M", bound=Message)

PROJECT_ATTRIBUTE = "trackio.project"
RUN_ATTRIBUTE = "trackio.run"
#: set on a span, event or log record whose attributes were cut: how many were left out (by the
#: sender's SDK, ``dropped_attributes_count``, and here).
DROPPED_ATTRIBUTES = "otel_trackio.dropped_attributes"
#: set on a span whose events were cut: how many were left out (by the sender and here).
DROPPED_EVENTS = "otel_trackio.dropped_events"

_CONTENT_TYPES: dict[str, Encoding] = {
    "application/x-protobuf": "protobuf",
    "application/protobuf": "protobuf",
    "application/json": "json",
}
_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"})
_SPAN_KINDS = {0: "INTERNAL", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
_STATUS = {0: "unset", 1: "ok", 2: "error"}
_HAS_IS_REMOTE = trace_pb2.SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_IS_REMOTE = trace_pb2.SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
_NO_RECORDED_VALUE = metrics_pb2.DataPointFlags.DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK
_TRACE_FLAGS = logs_pb2.LogRecordFlags.LOG_RECORD_FLAGS_TRACE_FLAGS_MASK


class RequestError(ValueError):
    """A request the receiver refuses, with the HTTP status and a message for the client.

    ``headers`` go on the answer (``Retry-After``, ``Connection: close``); ``warn``: the
    receiver also logs a (rate-limited) warning line, for refusals an operator should see.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        headers: Mapping[str, str] | None = None,
        warn: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})
        self.warn = warn


@dataclass(frozen=True, slots=True)
class ItemLimits:
    """Caps applied while decoding, before anything is held as records: the OTel SDK's span
    limits semantics (``OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT``, ``OTEL_SPAN_EVENT_COUNT_LIMIT``):
    the first ``attributes`` attributes of a span, event, log record or resource and the first
    ``events`` events of a span are kept, the cut is marked (:data:`DROPPED_ATTRIBUTES`,
    :data:`DROPPED_EVENTS`). None: no cap."""

    attributes: int | None = None
    events: int | None = None


# -- content type and encoding -----------------------------------------------------------------


def encoding_of(content_type: str | None) -> Encoding:
    """``"protobuf"`` or ``"json"`` from a Content-Type header; 415 for anything else."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    encoding = _CONTENT_TYPES.get(media)
    if encoding is None:
        raise RequestError(
            415,
            f"unsupported content type {content_type!r}: OTLP/HTTP takes "
            "application/x-protobuf or application/json",
        )
    return encoding


# -- parsing -----------------------------------------------------------------------------------


#: the nesting of a JSON body allowed by default (arrays and objects; see ``ReceiverLimits``).
MAX_JSON_DEPTH = 128


def parse_request(
    body: bytes,
    encoding: Encoding,
    message_type: type[M],
    max_json_depth: int = MAX_JSON_DEPTH,
    limits: ItemLimits = ItemLimits(),
) -> M:
    """Parse an OTLP request message from protobuf bytes or OTLP JSON; 400 when malformed or,
    for JSON, nested deeper than ``max_json_depth`` (checked before any recursive step). JSON
    attribute and event lists are cut to ``limits`` before the message is built (the cut counted
    in ``droppedAttributesCount`` / ``droppedEventsCount``), as building it is the costly part."""
    message: M = message_type()
    if encoding == "protobuf":
        try:
            message.ParseFromString(body)
        except (DecodeError, ValueError, RuntimeError) as exc:
            raise RequestError(400, f"malformed protobuf body: {exc}") from None
        return message
    try:
        document = json.loads(body)
    except RecursionError:  # the C parser's own guard, far deeper than max_json_depth
        raise _too_deep(max_json_depth) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise RequestError(400, f"malformed JSON body: {exc}") from None
    if not isinstance(document, dict):
        raise RequestError(400, "malformed JSON body: the top level must be an object")
    _prepare_json(document, max_json_depth, limits)
    try:
        json_format.ParseDict(document, message, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        raise RequestError(400, f"malformed OTLP JSON: {exc}") from None
    return message


def _too_deep(max_depth: int) -> RequestError:
    return RequestError(
        400, f"malformed OTLP JSON: nested deeper than {max_depth} levels", warn=True
    )


def _prepare_json(document: dict[str, Any], max_depth: int, limits: ItemLimits) -> None:
    """Make OTLP JSON protobuf JSON, bounded: trace/span ids from hex to base64 (protobuf JSON
    expects base64 for bytes fields), attribute and event lists cut to ``limits``.

    Walks the document with an explicit stack (no recursion), refusing it past ``max_depth``.
    """
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            raise _too_deep(max_depth)
        if isinstance(node, dict):
            _cut(node, "attributes", limits.attributes, "droppedAttributesCount")
            _cut(node, "events", limits.events, "droppedEventsCount")
            for key, value in node.items():
                if key in _ID_KEYS and isinstance(value, str):
                    try:
                        raw = bytes.fromhex(value)
                    except ValueError:
                        raise RequestError(
                            400, f"malformed OTLP JSON: {key} {value[:40]!r} is not a hex string"
                        ) from None
                    node[key] = base64.b64encode(raw).decode("ascii")
                elif isinstance(value, (dict, list)):
                    stack.append((value, depth + 1))
        else:
            stack.extend((item, depth + 1) for item in node if isinstance(item, (dict, list)))


def _cut(node: dict[str, Any], key: str, limit: int | None, counter: str) -> None:
    """Keep the first ``limit`` items of the list ``node[key]``, adding the rest to the count
    ``node[counter]`` (which protobuf ignores on messages without that field)."""
    items = node.get(key)
    if limit is None or not isinstance(items, list) or len(items) <= limit:
        return
    before = node.get(counter)
    dropped = int(str(before)) if isinstance(before, int) or str(before).isdigit() else 0
    node[key] = items[:limit]
    node[counter] = dropped + len(items) - limit


def encode_message(message: Message, encoding: Encoding) -> bytes:
    """A response message in the request's encoding (OTLP JSON for ``"json"``)."""
    if encoding == "protobuf":
        return bytes(message.SerializeToString())
    return str(json_format.MessageToJson(message, indent=None)).encode("utf-8")


def status_body(status: int, message: str, encoding: Encoding) -> bytes:
    """An error response body: a ``google.rpc.Status`` in the request's encoding."""
    return encode_message(status_pb2.Status(code=_grpc_code(status), message=message), encoding)


def _grpc_code(status: int) -> int:
    return {400: 3, 401: 16, 413: 8, 415: 3, 429: 8, 503: 14}.get(status, 13)


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


def attributes(pairs: Iterable[common_pb2.KeyValue]) -> dict[str, Any]:
    """OTLP key-value pairs as a dict; pairs without a value are left out."""
    out: dict[str, Any] = {}
    for pair in pairs:
        value = any_value(pair.value)
        if value is not None:
            out[pair.key] = value
    return out


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


def route_of(resource_attributes: Mapping[str, Any]) -> Route:
    """The (project, run) a resource asks for through ``trackio.project`` / ``trackio.run``."""
    project = resource_attributes.get(PROJECT_ATTRIBUTE)
    run = resource_attributes.get(RUN_ATTRIBUTE)
    return (
        str(project) if project not in (None, "") else None,
        str(run) if run not in (None, "") else None,
    )


# -- traces ------------------------------------------------------------------------------------


@dataclass(slots=True)
class DecodedSpans:
    """Span records by route, and what was rejected (with why)."""

    by_route: dict[Route, list[SpanRecord]] = field(default_factory=dict)
    accepted: int = 0
    rejected: int = 0
    problems: list[str] = field(default_factory=list)


def decode_traces(
    request: trace_service_pb2.ExportTraceServiceRequest, limits: ItemLimits = ItemLimits()
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
        status=_STATUS.get(span.status.code, "unset"),
        status_description=span.status.message or None,
        kind=_SPAN_KINDS.get(span.kind, "INTERNAL"),
        resource=resource,
        scope=scope,
    )


def trace_response(rejected: int, message: str) -> trace_service_pb2.ExportTraceServiceResponse:
    """An ``ExportTraceServiceResponse``; ``partial_success`` only when there is news."""
    response = trace_service_pb2.ExportTraceServiceResponse()
    if rejected or message:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    return response


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
    request: logs_service_pb2.ExportLogsServiceRequest, limits: ItemLimits = ItemLimits()
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


def logs_response(rejected: int, message: str) -> logs_service_pb2.ExportLogsServiceResponse:
    """An ``ExportLogsServiceResponse``; ``partial_success`` only when there is news."""
    response = logs_service_pb2.ExportLogsServiceResponse()
    if rejected or message:
        response.partial_success.rejected_log_records = rejected
        response.partial_success.error_message = message
    return response


# -- metrics -----------------------------------------------------------------------------------


@dataclass(slots=True)
class DecodedMetrics:
    """SDK ``MetricsData`` by route, and what was rejected (with why)."""

    by_route: dict[Route, MetricsData] = field(default_factory=dict)
    accepted: int = 0
    rejected: int = 0
    problems: list[str] = field(default_factory=list)


def decode_metrics(request: metrics_service_pb2.ExportMetricsServiceRequest) -> DecodedMetrics:
    """Turn an ``ExportMetricsServiceRequest`` into SDK ``MetricsData``, one per route."""
    out = DecodedMetrics()
    grouped: dict[Route, list[ResourceMetrics]] = {}
    rejected_by_reason: dict[str, int] = {}
    for resource_metrics in request.resource_metrics:
        resource_attributes = attributes(resource_metrics.resource.attributes)
        scopes: list[ScopeMetrics] = []
        for scope_metrics in resource_metrics.scope_metrics:
            metrics: list[Metric] = []
            for metric in scope_metrics.metrics:
                data, accepted, rejected, reason = _metric_data(metric)
                out.accepted += accepted
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
            grouped.setdefault(route_of(resource_attributes), []).append(
                ResourceMetrics(
                    resource=Resource(_sdk_attributes(resource_attributes)),
                    scope_metrics=scopes,
                    schema_url=resource_metrics.schema_url,
                )
            )
    out.by_route = {route: MetricsData(resource_metrics=rms) for route, rms in grouped.items()}
    out.problems.extend(f"{n} data points rejected: {why}" for why, n in rejected_by_reason.items())
    return out


def split_metrics(request: metrics_service_pb2.ExportMetricsServiceRequest) -> dict[Route, bytes]:
    """The request's resource metrics grouped by route, each serialised as a request of its own
    (what the receiver spools; :func:`decode_metrics` reads it back)."""
    grouped: dict[Route, metrics_service_pb2.ExportMetricsServiceRequest] = {}
    for resource_metrics in request.resource_metrics:
        route = route_of(attributes(resource_metrics.resource.attributes))
        part = grouped.setdefault(route, metrics_service_pb2.ExportMetricsServiceRequest())
        part.resource_metrics.append(resource_metrics)
    return {route: bytes(part.SerializeToString()) for route, part in grouped.items()}


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


def metrics_response(
    rejected: int, message: str
) -> metrics_service_pb2.ExportMetricsServiceResponse:
    """An ``ExportMetricsServiceResponse``; ``partial_success`` only when there is news."""
    response = metrics_service_pb2.ExportMetricsServiceResponse()
    if rejected or message:
        response.partial_success.rejected_data_points = rejected
        response.partial_success.error_message = message
    return response
