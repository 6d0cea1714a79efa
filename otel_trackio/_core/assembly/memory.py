"""What was logged already: which sample each emitted span went out with, and the one sample
logged from each trace, so spans and log events arriving late continue their sample (bounded)."""

from __future__ import annotations

from collections import OrderedDict

from otel_trackio._core.records import SpanRecord
from otel_trackio._core.samples import SampleIdentity

_AMBIGUOUS = object()  # several samples were logged from one trace


class EmittedSamples:
    """span id → identity of the emitted sample it went out with; trace id → the identity of the
    one sample logged from it. Each map keeps its ``limit`` most recent entries."""

    def __init__(self, limit: int = 50_000) -> None:
        self._limit = max(0, limit)
        self._spans: OrderedDict[int, SampleIdentity] = OrderedDict()
        self._traces: OrderedDict[int, object] = OrderedDict()

    def identity_of(self, trace_id: int, span_id: int | None) -> SampleIdentity | None:
        """The identity of the emitted sample span ``span_id`` of ``trace_id`` went out with."""
        if span_id is None:
            return None
        identity = self._spans.get(span_id)
        if identity is None or identity.trace_id != trace_id:
            return None
        return identity

    def only_sample_of(self, trace_id: int) -> SampleIdentity | None:
        """The one sample logged from ``trace_id`` (None: none, or several)."""
        known = self._traces.get(trace_id)
        return known if isinstance(known, SampleIdentity) else None

    def remember(self, spans: list[SpanRecord], identity: SampleIdentity) -> None:
        """``spans`` went out with (or continue) the sample ``identity``."""
        if self._limit <= 0:
            return
        emitted = self._spans
        for span in spans:
            emitted[span.span_id] = identity
            emitted.move_to_end(span.span_id)
        while len(emitted) > self._limit:
            emitted.popitem(last=False)
        traces = self._traces
        trace_id = identity.trace_id
        known = traces.get(trace_id, identity)
        traces[trace_id] = identity if known == identity else _AMBIGUOUS
        traces.move_to_end(trace_id)
        while len(traces) > self._limit:
            traces.popitem(last=False)
