"""Samples whose root span has started but not ended, known by trace and span id.

An exporter only sees spans once they end, so when it must flush a sample early (shutdown, TTL,
a full buffer) the root, which carries ``step`` and ``sample_index``, is not there yet. Whatever
sees roots start records their attributes here — ``otel_trackio.rollout()`` and
:class:`otel_trackio.TrackioSpanProcessor` (every span carrying the sample attribute, started
with the plain OTel API too) — and removes them when they end, so such partial samples keep their
identity. The assembler is given a registry to look in (an
:class:`~otel_trackio._core.samples.OpenSampleLookup`; by default :data:`OPEN_SAMPLES`).
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from otel_trackio._core.records import SpanRecord


class OpenSampleRegistry:
    """Thread-safe map of open sample roots to their start attributes, bounded in size.

    Registering and forgetting take no lock (they run on the rollout's thread, at every root's
    start and end): each is one dict operation, atomic on its own; only the bound's eviction,
    rare, and the copies take the lock.
    """

    def __init__(self, max_entries: int = 1_000_000) -> None:
        self._lock = threading.Lock()
        self._open: dict[tuple[int, int], Mapping[str, Any]] = {}
        self._max = max_entries
        # Another process's last report of its spans open long, by trace (see open_records).
        self._open_spans: dict[int, list[SpanRecord]] = {}

    def register(self, trace_id: int, span_id: int, attributes: Mapping[str, Any]) -> None:
        """Remember the attributes (``step``, ``sample_index``, ...) of a started root."""
        if len(self._open) >= self._max:
            with self._lock:  # a leak elsewhere must not grow forever
                while len(self._open) >= self._max:
                    self._open.pop(next(iter(self._open)), None)
        self._open[(trace_id, span_id)] = attributes

    def unregister(self, trace_id: int, span_id: int) -> None:
        """Forget a sample root once it has ended."""
        self._open.pop((trace_id, span_id), None)

    def lookup(self, trace_id: int, span_id: int) -> Mapping[str, Any] | None:
        """The attributes of a started, not yet ended sample root, if it was registered."""
        return self._open.get((trace_id, span_id))

    def snapshot(self) -> dict[tuple[int, int], Mapping[str, Any]]:
        """A copy of every open root (to hand to another process)."""
        with self._lock:
            return dict(self._open)

    def update(self, roots: Mapping[tuple[int, int], Mapping[str, Any]]) -> None:
        """Register many roots at once (what another process's :meth:`snapshot` gave)."""
        with self._lock:
            self._open.update(roots)

    def report_open_spans(self, records: Iterable[SpanRecord]) -> None:
        """Another process's spans open long (its latest report replaces the one before, so
        what is kept is bounded by what is open there now; at most ``max_entries`` spans)."""
        by_trace: dict[int, list[SpanRecord]] = {}
        for count, record in enumerate(records):
            if count >= self._max:
                break
            by_trace.setdefault(record.trace_id, []).append(record)
        self._open_spans = by_trace

    def open_records(self, trace_ids: Collection[int]) -> list[SpanRecord]:
        """The spans of ``trace_ids`` open at the last report (unfinished, ending then): what
        traces logged at the TTL show (see :class:`~otel_trackio._core.samples.OpenSpanSource`)."""
        reported = self._open_spans
        return [record for trace_id in trace_ids for record in reported.get(trace_id, ())]

    def __len__(self) -> int:
        return len(self._open)


OPEN_SAMPLES = OpenSampleRegistry()
"""The process's registry: what ``rollout()`` and ``TrackioSpanProcessor`` write to."""


def register_open_sample(trace_id: int, span_id: int, identity: Mapping[str, Any]) -> None:
    """Remember the identity attributes (``step``, ``sample_index``, ...) of a started root."""
    OPEN_SAMPLES.register(trace_id, span_id, identity)


def unregister_open_sample(trace_id: int, span_id: int) -> None:
    """Forget a sample root once it has ended."""
    OPEN_SAMPLES.unregister(trace_id, span_id)


def lookup_open_sample(trace_id: int, span_id: int) -> Mapping[str, Any] | None:
    """The identity attributes of a started, not yet ended sample root, if it was registered."""
    return OPEN_SAMPLES.lookup(trace_id, span_id)
