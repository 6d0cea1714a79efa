"""Records ↔ spool entry bytes: what an entry holds, and the lean encoding that keeps the rollout
process cheap.

An entry is a kind byte and a MessagePack payload (:mod:`.packing`: data and this package's
records only, so an entry cannot run code when it is read). Spans travel as plain rows
(:mod:`.rows`) read straight from the SDK's span and laid end to end in one list
(:func:`.sdk.extend_rows`: no object to build per span in the producer), their trace ids as 16
bytes, with each resource's attributes sent once per entry.

Kinds: :data:`SPANS` (a batch of spans, optionally with a route), :data:`EVENTS` (GenAI log
events, which join their spans), :data:`METRICS` (a route and a serialised OTLP
``ExportMetricsServiceRequest``), :data:`FLUSH` (a flush request: everything before it must be
durable in Trackio, open samples logged as partial), :data:`EXPECT_LOGS` (a log exporter feeds
this spool: samples wait for their log events), :data:`OPEN_SPANS` (the producer's spans open
long, for a trace the writer logs at the TTL), :data:`STEP` (the producer's ``set_step``: samples
without a step take it), :data:`CLOSE` (the producer is done: drain and stop).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from otel_trackio._codec.events import plain_value
from otel_trackio._codec.packing import Classes, UnreadablePayload, pack, unpack
from otel_trackio._codec.routes import NO_ROUTE, Route
from otel_trackio._codec.rows import RESOURCE_KEY, packed_rows, record_from_row, rows_of
from otel_trackio._codec.sdk import extend_rows
from otel_trackio._codec.tables import KIND_CODES, STATUS_CODES
from otel_trackio._core.records import EventRecord, LogEventRecord, SpanRecord

SPANS = 1
EVENTS = 2
METRICS = 3
FLUSH = 10
CLOSE = 11
EXPECT_LOGS = 12
OPEN_SPANS = 13
STEP = 14


def _event_record(fields: dict[str, Any]) -> EventRecord:
    """An event record built again. A log event's attributes are JSON-like (lists, not the
    tuples every array is read back as): made so again."""
    if fields.get("from_log"):
        fields["attributes"] = plain_value(fields.get("attributes") or {})
    return EventRecord(**fields)


_RECORDS = Classes.of(SpanRecord, EventRecord, LogEventRecord, build={EventRecord: _event_record})
"""The classes a spool entry may hold (the rest is plain data)."""


def _pack(value: Any) -> bytes:
    return pack(value, _RECORDS)


def _unpack(payload: bytes) -> Any:
    return unpack(payload, _RECORDS)


@contextmanager
def _reading(kind: str) -> Iterator[None]:
    """Data of another shape than its kind's (a payload not written by this package) is
    :class:`~.packing.UnreadablePayload`, like one that does not read at all."""
    try:
        yield
    except UnreadablePayload:
        raise
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
        raise UnreadablePayload(f"it is not a {kind} entry: {exc!r}") from None


def encode_sdk_spans(spans: Sequence[ReadableSpan], route: Route = NO_ROUTE) -> bytes:
    """SDK spans as one :data:`SPANS` payload (what ``offload=True`` pays per export, most of it
    the one MessagePack call for the batch)."""
    resources: dict[int, Mapping[str, Any]] = {}
    flat: list[Any] = []
    extend_rows(spans, flat, resources)
    return _pack((route, resources, packed_rows(flat)))


class SpanChunk:
    """A :data:`SPANS` payload built span by span, as spans end (what
    :class:`~otel_trackio._offload.span_spooler.SpanSpooler` fills on the rollout's threads):
    the same rows as :func:`encode_sdk_spans`, read from each span while its data is still in
    the cache of the CPU that just ended it."""

    __slots__ = ("_flat", "_resources", "roots", "spans")

    def __init__(self) -> None:
        self._flat: list[Any] = []
        self._resources: dict[int, Mapping[str, Any]] = {}
        self.spans = 0
        self.roots = 0
        """Spans with no parent in this process: the samples (or parts of one) it holds."""

    def add(self, span: ReadableSpan) -> None:
        """Append one ended span's row."""
        extend_rows((span,), self._flat, self._resources)
        self.spans += 1
        if span.parent is None or span.parent.is_remote:
            self.roots += 1

    def payload(self, route: Route = NO_ROUTE) -> bytes:
        """The chunk's spans as one :data:`SPANS` payload."""
        return _pack((route, self._resources, packed_rows(self._flat)))


def encode_records(records: Sequence[SpanRecord], route: Route = NO_ROUTE) -> bytes:
    """Span records (decoded from OTLP) as one :data:`SPANS` payload."""
    resources: dict[int, Mapping[str, Any]] = {}
    flat: list[Any] = []
    extend = flat.extend
    for r in records:
        key = id(r.resource)
        resources.setdefault(key, r.resource)
        extend(
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
    return _pack((route, resources, packed_rows(flat)))


def decode_spans(payload: bytes) -> tuple[Route, list[SpanRecord]]:
    """A :data:`SPANS` payload back as (route, span records)."""
    with _reading("spans"):
        route, resources, flat = _unpack(payload)
        empty: Mapping[str, Any] = {}
        records = [
            record_from_row(row, resources.get(row[RESOURCE_KEY]) or empty) for row in rows_of(flat)
        ]
        for record in records:
            if record.attributes.__class__ is not dict or record.resource.__class__ is not dict:
                raise TypeError("a span's attributes are not a map")
        return _route(route), records


def encode_events(events: Sequence[LogEventRecord], route: Route = NO_ROUTE) -> bytes:
    """GenAI log events as one :data:`EVENTS` payload."""
    return _pack((route, events))


def decode_events(payload: bytes) -> tuple[Route, list[LogEventRecord]]:
    """An :data:`EVENTS` payload back as (route, log events)."""
    with _reading("events"):
        route, events = _unpack(payload)
        if not all(isinstance(event, LogEventRecord) for event in events):
            raise TypeError("it holds other values than log events")
        return _route(route), list(events)


def encode_metrics(route: Route, request: bytes) -> bytes:
    """A route and a serialised OTLP metrics request as one :data:`METRICS` payload."""
    return _pack((route, request))


def decode_metrics(payload: bytes) -> tuple[Route, bytes]:
    """A :data:`METRICS` payload back as (route, serialised request)."""
    with _reading("metrics"):
        route, request = _unpack(payload)
        if not isinstance(request, bytes):
            raise TypeError("its request is not bytes")
        return _route(route), request


OpenRoots = dict[tuple[int, int], Mapping[str, Any]]
"""(trace id, span id) → start attributes of the sample roots open in the producer."""


def encode_flush(
    number: int, open_roots: OpenRoots | None = None, open_spans: Sequence[SpanRecord] = ()
) -> bytes:
    """A :data:`FLUSH` request numbered ``number``, with the producer's open sample roots (so
    samples logged early as partial keep their identity) and its spans still open (unfinished
    records, shown in their samples)."""
    return _pack((number, open_roots or {}, open_spans))


def decode_flush(payload: bytes) -> FlushRequest:
    """What a :data:`FLUSH` request carries (one of a producer without open spans too)."""
    with _reading("flush"):
        number, open_roots, *rest = _unpack(payload)
        return FlushRequest(int(number), dict(open_roots), _span_records(rest[0] if rest else ()))


def encode_step(step: int | None) -> bytes:
    """A :data:`STEP` payload: the producer's latest step (None: none declared)."""
    return b"" if step is None else str(int(step)).encode()


def decode_step(payload: bytes) -> int | None:
    """The step of a :data:`STEP` payload (None: none, or unreadable)."""
    try:
        return int(payload) if payload else None
    except ValueError:
        return None


def encode_open_spans(open_spans: Sequence[SpanRecord]) -> bytes:
    """An :data:`OPEN_SPANS` report: the producer's spans open long (unfinished records ending
    at the report), every one of each trace concerned; it replaces the report before it."""
    return _pack(open_spans)


def decode_open_spans(payload: bytes) -> list[SpanRecord]:
    """An :data:`OPEN_SPANS` payload back as its records."""
    with _reading("open spans"):
        return _span_records(_unpack(payload))


def _route(value: Any) -> Route:
    project, run = value
    if not all(part is None or isinstance(part, str) for part in (project, run)):
        raise TypeError("its route is not two names")
    return project, run


def _span_records(values: Any) -> list[SpanRecord]:
    records = list(values)
    if not all(isinstance(record, SpanRecord) for record in records):
        raise TypeError("it holds other values than span records")
    return records


@dataclass(frozen=True, slots=True)
class FlushRequest:
    """A decoded :data:`FLUSH` entry: its number, the open sample roots, the open spans."""

    number: int
    open_roots: OpenRoots
    open_spans: list[SpanRecord]
