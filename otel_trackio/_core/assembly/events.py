"""GenAI log events on spans: joining a span's events, and the placeholder span that carries
events whose own span is not here (never received, or logged already)."""

from __future__ import annotations

from otel_trackio._core.records import EventRecord, LogEventRecord, SpanRecord

PLACEHOLDER_NAME = "(log events of a span not received)"
"""Name of the span that carries GenAI log events whose own span never arrived (or had been
logged already: then the continuation row shows it)."""
PLACEHOLDER_ATTRIBUTE = "otel_trackio.placeholder"
"""Attribute of such a span: ``"span not received"`` or ``"span already logged"``."""


def attach_events(record: SpanRecord, events: list[EventRecord]) -> None:
    """Add log events to a span's events: after its own events, in time order; an event it
    already has (a retried export) is not added twice."""
    new = [e for e in events if e not in record.events]
    if new:
        own = [e for e in record.events if not e.from_log]
        logged = [e for e in record.events if e.from_log]
        record.events = (*own, *sorted((*logged, *new), key=lambda e: e.time_ns))


def placeholder(events: list[LogEventRecord], why: str) -> SpanRecord:
    """A span standing in for the one ``events`` name, which is not here to carry them."""
    first = events[0]
    unique: list[EventRecord] = []
    for event in events:
        if event.event not in unique:  # a retried export: once
            unique.append(event.event)
    ordered = tuple(sorted(unique, key=lambda e: e.time_ns))
    return SpanRecord(
        trace_id=first.trace_id,
        span_id=first.span_id,
        name=PLACEHOLDER_NAME,
        start_ns=ordered[0].time_ns,
        end_ns=ordered[-1].time_ns,
        attributes={PLACEHOLDER_ATTRIBUTE: why},
        events=ordered,
        resource=first.resource,
        scope=first.scope,
    )
