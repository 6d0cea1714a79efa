"""Records ↔ spool entry bytes: what an entry holds, and the lean encoding that keeps the rollout
process cheap.

An entry is a kind byte and a pickled payload. Spans travel as plain tuples (no objects to build
in the producer: about 6 µs per span with the pickling, against ~15 µs for full records), with
each resource's attributes sent once per entry.

Kinds: :data:`SPANS` (a batch of spans, optionally with a route), :data:`EVENTS` (GenAI log
events, which join their spans), :data:`METRICS` (a route and a serialised OTLP
``ExportMetricsServiceRequest``), :data:`FLUSH` (a flush request: everything before it must be
durable in Trackio, open samples logged as partial), :data:`EXPECT_LOGS` (a log exporter feeds
this spool: samples wait for their log events), :data:`CLOSE` (the producer is done: drain and
stop).
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from otel_trackio._codec.routes import NO_ROUTE, Route
from otel_trackio._codec.tables import KIND_CODES, STATUS_CODES, kind_name, status_name
from otel_trackio._core.records import EventRecord, LogEventRecord, SpanRecord

SPANS = 1
EVENTS = 2
METRICS = 3
FLUSH = 10
CLOSE = 11
EXPECT_LOGS = 12

_PROTOCOL = pickle.HIGHEST_PROTOCOL


def encode_sdk_spans(spans: Sequence[ReadableSpan], route: Route = NO_ROUTE) -> bytes:
    """SDK spans as one :data:`SPANS` payload (what ``offload=True`` pays per export)."""
    resources: dict[int, Mapping[str, Any]] = {}
    rows = []
    for span in spans:
        context = span.context
        parent = span.parent
        status = span.status
        resource = span.resource
        key = id(resource)
        if key not in resources:
            resources[key] = dict(resource.attributes) if resource is not None else {}
        events = span.events
        scope = span.instrumentation_scope
        start = span.start_time or 0
        rows.append(
            (
                context.trace_id if context is not None else 0,
                context.span_id if context is not None else 0,
                span.name,
                start,
                span.end_time or start,
                parent.span_id if parent is not None else None,
                parent is not None and parent.is_remote,
                dict(span.attributes) if span.attributes else None,
                tuple((e.name, e.timestamp or 0, dict(e.attributes or {})) for e in events)
                if events
                else None,
                status.status_code.value if status is not None else 0,
                status.description if status is not None else None,
                span.kind.value if span.kind is not None else 0,
                key,
                scope.name if scope is not None else None,
            )
        )
    return pickle.dumps((route, resources, rows), _PROTOCOL)


def encode_records(records: Sequence[SpanRecord], route: Route = NO_ROUTE) -> bytes:
    """Span records (decoded from OTLP) as one :data:`SPANS` payload."""
    resources: dict[int, Mapping[str, Any]] = {}
    rows = []
    for r in records:
        key = id(r.resource)
        resources.setdefault(key, r.resource)
        rows.append(
            (
                r.trace_id,
                r.span_id,
                r.name,
                r.start_ns,
                r.end_ns,
                r.parent_id,
                r.parent_is_remote,
                dict(r.attributes) or None,
                tuple((e.name, e.time_ns, dict(e.attributes)) for e in r.events) or None,
                STATUS_CODES.get(r.status, 0),
                r.status_description,
                KIND_CODES.get(r.kind, 0),
                key,
                r.scope,
            )
        )
    return pickle.dumps((route, resources, rows), _PROTOCOL)


def decode_spans(payload: bytes) -> tuple[Route, list[SpanRecord]]:
    """A :data:`SPANS` payload back as (route, span records)."""
    route, resources, rows = pickle.loads(payload)
    records = []
    for row in rows:
        (trace_id, span_id, name, start, end, parent_id, remote, attributes, events) = row[:9]
        status, description, kind, resource_key, scope = row[9:]
        records.append(
            SpanRecord(
                trace_id=trace_id,
                span_id=span_id,
                name=name,
                start_ns=start,
                end_ns=end,
                parent_id=parent_id,
                parent_is_remote=remote,
                attributes=attributes or {},
                events=tuple(EventRecord(n, t, a) for n, t, a in events) if events else (),
                status=status_name(status),
                status_description=description,
                kind=kind_name(kind),
                resource=resources.get(resource_key) or {},
                scope=scope,
            )
        )
    return route, records


def encode_events(events: Sequence[LogEventRecord], route: Route = NO_ROUTE) -> bytes:
    """GenAI log events as one :data:`EVENTS` payload."""
    return pickle.dumps((route, list(events)), _PROTOCOL)


def decode_events(payload: bytes) -> tuple[Route, list[LogEventRecord]]:
    """An :data:`EVENTS` payload back as (route, log events)."""
    route, events = pickle.loads(payload)
    return route, list(events)


def encode_metrics(route: Route, request: bytes) -> bytes:
    """A route and a serialised OTLP metrics request as one :data:`METRICS` payload."""
    return pickle.dumps((route, request), _PROTOCOL)


def decode_metrics(payload: bytes) -> tuple[Route, bytes]:
    """A :data:`METRICS` payload back as (route, serialised request)."""
    route, request = pickle.loads(payload)
    return route, request


OpenRoots = dict[tuple[int, int], Mapping[str, Any]]
"""(trace id, span id) → start attributes of the sample roots open in the producer."""


def encode_flush(number: int, open_roots: OpenRoots | None = None) -> bytes:
    """A :data:`FLUSH` request numbered ``number``, with the producer's open sample roots (so
    samples logged early as partial keep their identity)."""
    return pickle.dumps((number, open_roots or {}), _PROTOCOL)


def decode_flush(payload: bytes) -> tuple[int, OpenRoots]:
    """The number of a :data:`FLUSH` request and the open sample roots it carries."""
    number, open_roots = pickle.loads(payload)
    return int(number), dict(open_roots)
