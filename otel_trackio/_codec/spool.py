"""Records ↔ spool entry bytes: what an entry holds, and the lean encoding that keeps the rollout
process cheap.

An entry is a kind byte and a pickled payload, read back by :mod:`.safe_pickle` (plain data and
this package's records only: an entry cannot run code when it is read). Spans travel as plain
rows (:mod:`.rows`) read straight from the SDK's span and laid end to end in one list
(:func:`.sdk.extend_rows`: no object to build per span in the producer), with each resource's
attributes sent once per entry.

Kinds: :data:`SPANS` (a batch of spans, optionally with a route), :data:`EVENTS` (GenAI log
events, which join their spans), :data:`METRICS` (a route and a serialised OTLP
``ExportMetricsServiceRequest``), :data:`FLUSH` (a flush request: everything before it must be
durable in Trackio, open samples logged as partial), :data:`EXPECT_LOGS` (a log exporter feeds
this spool: samples wait for their log events), :data:`OPEN_SPANS` (the producer's spans open
long, for a trace the writer logs at the TTL), :data:`STEP` (the producer's ``set_step``: samples
without a step take it), :data:`CLOSE` (the producer is done: drain and stop).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from otel_trackio._codec.routes import NO_ROUTE, Route
from otel_trackio._codec.rows import RESOURCE_KEY, record_from_row, rows_of
from otel_trackio._codec.safe_pickle import dumps as _dumps
from otel_trackio._codec.safe_pickle import loads
from otel_trackio._codec.sdk import extend_rows
from otel_trackio._codec.tables import KIND_CODES, STATUS_CODES
from otel_trackio._core.records import LogEventRecord, SpanRecord

SPANS = 1
EVENTS = 2
METRICS = 3
FLUSH = 10
CLOSE = 11
EXPECT_LOGS = 12
OPEN_SPANS = 13
STEP = 14



_RECORDS = frozenset(
    {
        ("otel_trackio._core.records", "LogEventRecord"),
        ("otel_trackio._core.records", "EventRecord"),
        ("otel_trackio._core.records", "SpanRecord"),
    }
)
"""The classes a spool entry may hold (the rest is plain data)."""


def _loads(payload: bytes) -> Any:
    return loads(payload, _RECORDS)


def encode_sdk_spans(spans: Sequence[ReadableSpan], route: Route = NO_ROUTE) -> bytes:
    """SDK spans as one :data:`SPANS` payload (what ``offload=True`` pays per export, most of it
    the one ``pickle.dumps`` of the batch)."""
    resources: dict[int, Mapping[str, Any]] = {}
    flat: list[Any] = []
    extend_rows(spans, flat, resources)
    return _dumps((route, resources, flat))


class SpanChunk:
    """A :data:`SPANS` payload built span by span, as spans end (what
    :class:`~otel_trackio._offload.span_spooler.SpanSpooler` fills on the rollout's threads):
    the same rows as :func:`encode_sdk_spans`, read from each span while its data is still in
    the cache of the CPU that just ended it."""

    __slots__ = ("_flat", "_resources", "spans")

    def __init__(self) -> None:
        self._flat: list[Any] = []
        self._resources: dict[int, Mapping[str, Any]] = {}
        self.spans = 0

    def add(self, span: ReadableSpan) -> None:
        """Append one ended span's row."""
        extend_rows((span,), self._flat, self._resources)
        self.spans += 1

    def payload(self, route: Route = NO_ROUTE) -> bytes:
        """The chunk's spans as one :data:`SPANS` payload."""
        return _dumps((route, self._resources, self._flat))


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
    return _dumps((route, resources, flat))


def decode_spans(payload: bytes) -> tuple[Route, list[SpanRecord]]:
    """A :data:`SPANS` payload back as (route, span records)."""
    route, resources, flat = _loads(payload)
    empty: Mapping[str, Any] = {}
    return route, [
        record_from_row(row, resources.get(row[RESOURCE_KEY]) or empty) for row in rows_of(flat)
    ]


def encode_events(events: Sequence[LogEventRecord], route: Route = NO_ROUTE) -> bytes:
    """GenAI log events as one :data:`EVENTS` payload."""
    return _dumps((route, list(events)))


def decode_events(payload: bytes) -> tuple[Route, list[LogEventRecord]]:
    """An :data:`EVENTS` payload back as (route, log events)."""
    route, events = _loads(payload)
    return route, list(events)


def encode_metrics(route: Route, request: bytes) -> bytes:
    """A route and a serialised OTLP metrics request as one :data:`METRICS` payload."""
    return _dumps((route, request))


def decode_metrics(payload: bytes) -> tuple[Route, bytes]:
    """A :data:`METRICS` payload back as (route, serialised request)."""
    route, request = _loads(payload)
    return route, request


OpenRoots = dict[tuple[int, int], Mapping[str, Any]]
"""(trace id, span id) → start attributes of the sample roots open in the producer."""


def encode_flush(
    number: int, open_roots: OpenRoots | None = None, open_spans: Sequence[SpanRecord] = ()
) -> bytes:
    """A :data:`FLUSH` request numbered ``number``, with the producer's open sample roots (so
    samples logged early as partial keep their identity) and its spans still open (unfinished
    records, shown in their samples)."""
    return _dumps((number, open_roots or {}, list(open_spans)))


def decode_flush(payload: bytes) -> FlushRequest:
    """What a :data:`FLUSH` request carries (one of a producer without open spans too)."""
    number, open_roots, *rest = _loads(payload)
    return FlushRequest(int(number), dict(open_roots), list(rest[0]) if rest else [])


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
    return _dumps(list(open_spans))


def decode_open_spans(payload: bytes) -> list[SpanRecord]:
    """An :data:`OPEN_SPANS` payload back as its records."""
    return list(_loads(payload))


@dataclass(frozen=True, slots=True)
class FlushRequest:
    """A decoded :data:`FLUSH` entry: its number, the open sample roots, the open spans."""

    number: int
    open_roots: OpenRoots
    open_spans: list[SpanRecord]
