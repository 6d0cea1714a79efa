"""What was logged already: which sample each emitted span went out with, and the one sample
logged from each trace, so spans and log events arriving late continue their sample (bounded);
and what each emitted span was, so a span or log event sent again (a client retrying a request
whose response it never got) is told from a late one and goes out once."""

from __future__ import annotations

from collections import OrderedDict

from otel_trackio._core.assembly.events import PLACEHOLDER_ATTRIBUTE
from otel_trackio._core.records import EventRecord, LogEventRecord, SpanRecord
from otel_trackio._core.samples import SampleIdentity

_AMBIGUOUS = object()  # several samples were logged from one trace


def sent_again(first: SpanRecord, again: SpanRecord) -> bool:
    """True when ``again`` is ``first`` sent again, not another span reusing its id (nor
    ``first`` ended, after a flush logged it still open: the status differs)."""
    return first.trace_id == again.trace_id and _sameness(first) == _sameness(again)


def _sameness(span: SpanRecord) -> int:
    return hash((span.span_id, span.name, span.start_ns, span.end_ns, span.parent_id, span.status))


class EmittedSamples:
    """(trace id, span id) → identity of the emitted sample the span went out with (and how it
    ended: a span is known by both ids, since a source that numbers span ids per trace reuses
    them across traces);
    trace id → the identity of the one sample logged from it; the GenAI log events that went
    out. Each map keeps its ``limit`` most recent entries; :attr:`forgotten_steps` says at
    which steps spans were let go (a span sent again there is no longer known here)."""

    def __init__(self, limit: int = 50_000) -> None:
        self._limit = max(0, limit)
        # (trace id, span id) -> (identity, what the span was: see sent_again)
        self._spans: OrderedDict[tuple[int, int], tuple[SampleIdentity, int]] = OrderedDict()
        self._traces: OrderedDict[int, object] = OrderedDict()
        self._events: OrderedDict[tuple[int, int, str, int, int], None] = OrderedDict()
        self.forgotten_steps: set[int] = set()
        """The steps of the spans let go past ``limit``: there a span sent again must be looked
        up in storage (see :class:`~otel_trackio._spool.replay.ReplayCheck`)."""

    def identity_of(self, trace_id: int, span_id: int | None) -> SampleIdentity | None:
        """The identity of the emitted sample span ``span_id`` of ``trace_id`` went out with."""
        if span_id is None:
            return None
        known = self._spans.get((trace_id, span_id))
        return None if known is None else known[0]

    def went_out(self, record: SpanRecord) -> bool:
        """True when this very span went out already (see :func:`sent_again`)."""
        known = self._spans.get((record.trace_id, record.span_id))
        return known is not None and known[1] == _sameness(record)

    def event_went_out(self, event: LogEventRecord) -> bool:
        """True when this GenAI log event went out already, on its span."""
        return _event_key(event.trace_id, event.span_id, event.event) in self._events

    def sent_samples_of(self, trace_id: int) -> bool:
        """True when samples of ``trace_id`` went out (as far as remembered)."""
        return trace_id in self._traces

    def only_sample_of(self, trace_id: int) -> SampleIdentity | None:
        """The one sample logged from ``trace_id`` (None: none, or several)."""
        known = self._traces.get(trace_id)
        return known if isinstance(known, SampleIdentity) else None

    def remember(self, spans: list[SpanRecord], identity: SampleIdentity) -> None:
        """``spans`` went out with (or continue) the sample ``identity``."""
        if self._limit <= 0:
            return
        emitted = self._spans
        events = self._events
        for span in spans:
            placeholder = PLACEHOLDER_ATTRIBUTE in span.attributes
            key = (span.trace_id, span.span_id)
            if not (placeholder and key in emitted):  # the span it stands for stays
                emitted[key] = (identity, _sameness(span))
                emitted.move_to_end(key)
            for event in span.events:
                if event.from_log:
                    events[_event_key(span.trace_id, span.span_id, event)] = None
        while len(emitted) > self._limit:
            self.forgotten_steps.add(emitted.popitem(last=False)[1][0].step)
        while len(events) > self._limit:
            events.popitem(last=False)
        traces = self._traces
        trace_id = identity.trace_id
        known = traces.get(trace_id, identity)
        traces[trace_id] = identity if known == identity else _AMBIGUOUS
        traces.move_to_end(trace_id)
        while len(traces) > self._limit:
            traces.popitem(last=False)


def _event_key(trace_id: int, span_id: int, event: EventRecord) -> tuple[int, int, str, int, int]:
    """What tells a GenAI log event sent again from another one: its span, name, time and
    content (instrumentations stamp a request's messages with one time, and each message is an
    event of the same name)."""
    return (trace_id, span_id, event.name, event.time_ns, hash(repr(event.attributes)))
