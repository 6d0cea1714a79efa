"""Spans that have started and not ended, so a flush can show where a sample stopped.

An exporter sees a span only once it ends. A sample stuck in a tool call when the run ends has
its root and that tool span still open: without them its Trace would show the children that
ended (or nothing at all). :class:`OpenSpans` keeps a reference to every started span of the
provider it watches (``TrackioSpanProcessor`` and ``OpenSampleTracker`` feed it) until it ends;
at a flush (and for a trace logged at the TTL) :meth:`OpenSpans.records` reads each one as a
span record marked unfinished (:data:`~otel_trackio._core.records.UNFINISHED`): its start
attributes and whatever was set since, its events, and an end at the flush.

Cost per span (on the rollout's hot path): one dict store at start, one dict pop at end, no lock
(both are single operations on a builtin dict, atomic under the GIL), the span id read from the
SDK span's own context tuple (``tests/unit/test_sdk_span.py`` checks it is the public one). The
records are only built at a flush.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from otel_trackio._codec.sdk import record_from_readable_span
from otel_trackio._core.records import UNFINISHED, SpanRecord
from otel_trackio._core.samples import OpenSampleLookup

DEFAULT_MAX_OPEN_SPANS = 1_000_000
"""How many open spans are tracked at most: a span leaked open elsewhere must not grow memory
forever (past it, new starts are not tracked, and counted)."""


class OpenSpans:
    """Started, not yet ended spans of one tracer provider, by span id."""

    __slots__ = ("_max", "_open", "untracked")

    def __init__(self, max_spans: int = DEFAULT_MAX_OPEN_SPANS) -> None:
        self._open: dict[int, ReadableSpan] = {}
        self._max = max_spans
        self.untracked = 0

    def started(self, span: ReadableSpan, parent_context: Any = None) -> None:
        """Remember a span that started (O(1), lock-free). Takes ``on_start``'s arguments, so a
        processor can bind it as its ``on_start``: one call per span on the rollout's thread."""
        open_spans = self._open
        if len(open_spans) >= self._max:
            self.untracked += 1
            return
        try:
            # The SDK's span: its SpanContext (a tuple) indexed, not two property calls.
            span_id = span._context[1]  # type: ignore[index]
        except (AttributeError, TypeError, IndexError):
            context = span.context
            if context is None:
                return
            span_id = context.span_id
        open_spans[span_id] = span

    def ended(self, span: ReadableSpan) -> None:
        """Forget a span that ended (O(1), lock-free)."""
        try:
            span_id = span._context[1]  # type: ignore[index]  # as in started(), inline: hot path
        except (AttributeError, TypeError, IndexError):
            context = span.context
            if context is None:
                return
            span_id = context.span_id
        self._open.pop(span_id, None)

    def records(
        self, now_ns: int | None = None, trace_ids: Collection[int] | None = None
    ) -> list[SpanRecord]:
        """Every span still open (of ``trace_ids`` only, when given), as a record ending at
        ``now_ns`` (default: now) with status :data:`UNFINISHED`."""
        end = time.time_ns() if now_ns is None else now_ns
        out: list[SpanRecord] = []
        for span in self._open.copy().values():  # one C-level copy: safe while spans start
            if span.end_time is not None:
                continue  # it ended meanwhile: its record comes through the export path
            if trace_ids is not None and (
                span.context is None or span.context.trace_id not in trace_ids
            ):
                continue
            record = record_from_readable_span(span)
            record.end_ns = max(end, record.start_ns)
            record.status = UNFINISHED
            out.append(record)
        return out

    def open_records(self, trace_ids: Collection[int]) -> list[SpanRecord]:
        """The spans of ``trace_ids`` still open, ending now (what traces logged at the TTL
        show: see :class:`~otel_trackio._core.samples.OpenSpanSource`)."""
        return self.records(trace_ids=set(trace_ids))

    def traces_open_since(self, before_ns: int) -> set[int]:
        """The traces with a span open since before ``before_ns`` (ns since epoch)."""
        return {
            span.context.trace_id
            for span in self._open.copy().values()
            if span.context is not None
            and span.end_time is None
            and (span.start_time or 0) < before_ns
        }

    def lookup(self, trace_id: int, span_id: int) -> Mapping[str, Any] | None:
        """The attributes of the open span ``span_id`` and of its open ancestors (the nearest
        wins): what a partial sample hanging from it knows of its identity (``step``,
        ``sample_index`` on the sample root above it). None when that span is not open."""
        chain: list[Mapping[str, Any]] = []
        seen: set[int] = set()
        span = self._open.get(span_id)
        while span is not None and span_id not in seen:
            context = span.context
            if context is None or context.trace_id != trace_id:
                break
            seen.add(span_id)
            chain.append(dict(span.attributes or {}))
            parent = span.parent
            if parent is None or parent.is_remote:
                break
            span_id = parent.span_id
            span = self._open.get(span_id)
        if not chain:
            return None
        merged: dict[str, Any] = {}
        for attributes in reversed(chain):
            merged.update(attributes)
        return merged

    def __len__(self) -> int:
        return len(self._open)


class FirstKnown:
    """An :class:`OpenSampleLookup` asking several in turn (open spans, then the registry)."""

    def __init__(self, *lookups: OpenSampleLookup) -> None:
        self._lookups = lookups

    def lookup(self, trace_id: int, span_id: int) -> Mapping[str, Any] | None:
        """The first answer any of the lookups has."""
        for source in self._lookups:
            found = source.lookup(trace_id, span_id)
            if found is not None:
                return found
        return None
