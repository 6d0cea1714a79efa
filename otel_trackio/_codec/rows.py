"""The plain row a span travels as: read from an SDK span (:mod:`.sdk`), packed into a spool
entry (:mod:`.spool`), made into a :class:`~otel_trackio._core.records.SpanRecord` at the end.

A row is a tuple of plain values, so building one costs the rollout's export thread almost
nothing and packing a batch of them is one C call.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from otel_trackio._codec.tables import kind_name, status_name
from otel_trackio._core.records import EventRecord, SpanRecord

SpanRow = tuple[Any, ...]
"""``(trace_id, span_id, name, start_ns, end_ns, parent_id, parent_is_remote, attributes or
None, events or None, status code (0 unset, 1 ok, 2 error), status description, kind (the
``SpanKind`` value), resource key, scope name)``; events are ``(name, time_ns, attributes)``.
The attributes may be a finished span's own dict: read them, never change them."""

ROW_WIDTH = 14
"""Fields per row: a spool entry holds its rows end to end in one flat list (:func:`rows_of`)."""

RESOURCE_KEY = 12
"""Where a row holds its resource's key (``id(resource)``: the rows of one spool entry share
their resources' attributes)."""


def rows_of(flat: Sequence[Any]) -> Iterator[SpanRow]:
    """The rows of a flat list (rows end to end, :data:`ROW_WIDTH` fields each)."""
    fields = iter(flat)
    return zip(*([fields] * ROW_WIDTH), strict=True)


_TRACE_ID_LIMIT = 1 << 128


def packed_rows(flat: list[Any]) -> list[Any]:
    """A copy of ``flat`` to pack: each trace id as its 16 big-endian bytes (MessagePack holds
    integers up to 64 bits; the copy leaves the rows given as they were). A trace id no SDK
    makes (negative, wider) stays an integer."""
    packed = flat.copy()
    try:
        packed[0::ROW_WIDTH] = [trace.to_bytes(16, "big") for trace in flat[0::ROW_WIDTH]]
    except OverflowError:
        packed[0::ROW_WIDTH] = [
            trace.to_bytes(16, "big") if 0 <= trace < _TRACE_ID_LIMIT else trace
            for trace in flat[0::ROW_WIDTH]
        ]
    return packed


def record_from_row(row: SpanRow, resource: Mapping[str, Any]) -> SpanRecord:
    """The span record of ``row`` (its trace id an integer, or 16 bytes as packed), with its
    resource's attributes."""
    (trace_id, span_id, name, start, end, parent_id, remote, attributes, events) = row[:9]
    status, description, kind, _, scope = row[9:]
    return SpanRecord(
        trace_id=trace_id if trace_id.__class__ is int else int.from_bytes(trace_id, "big"),
        span_id=span_id,
        name=name,
        start_ns=start,
        end_ns=end,
        parent_id=parent_id,
        parent_is_remote=bool(remote),
        attributes=attributes or {},
        events=tuple(EventRecord(n, t, a) for n, t, a in events) if events else (),
        status=status_name(status),
        status_description=description,
        kind=kind_name(kind),
        resource=resource,
        scope=scope,
    )
