"""A log record's fields → a GenAI :class:`~otel_trackio._core.records.LogEventRecord`, or why not.

The SDK reader (:mod:`.sdk`) and the OTLP reader (:mod:`.otlp`) both end here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from otel_trackio._core.records import EventRecord, LogEventRecord

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
