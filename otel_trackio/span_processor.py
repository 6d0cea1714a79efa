"""Span processors that see spans *start*, so a sample flushed while still open shows where it
stopped and keeps its identity.

An exporter only sees spans once they end. When it must log a sample early (``force_flush``,
shutdown) its root — which carries ``step`` and ``sample_index`` — and the span it is stuck in
(a hung tool call) are still open. These processors record every span as it starts and forget
it when it ends; at a flush the exporter reads the spans still open as *unfinished* spans
(status ``unfinished``, duration up to the flush, the attributes known so far) and logs them in
their samples' trees. Whatever started them: the plain OTel API, ``rollout()``, a framework.

- :class:`TrackioSpanProcessor`: a ``BatchSpanProcessor`` that does it too (what ``configure()``
  installs; use it instead of ``BatchSpanProcessor`` when you build the provider yourself).
- :class:`OpenSampleTracker`: only the recording, to add beside another processor (the zero-code
  setup adds it, since the SDK configurator builds its own ``BatchSpanProcessor``).

The OTLP receiver cannot do this: OTLP carries ended spans only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.sdk.environment_variables import (
    OTEL_BSP_MAX_EXPORT_BATCH_SIZE,
    OTEL_BSP_MAX_QUEUE_SIZE,
    OTEL_BSP_SCHEDULE_DELAY,
)
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_trackio._codec.sdk import attributes_view
from otel_trackio._engine.open_samples import OPEN_SAMPLES, OpenSampleRegistry
from otel_trackio._offload.client import OffloadClient
from otel_trackio._offload.span_spooler import SpanSpooler
from otel_trackio._settings import active_settings
from otel_trackio.span_exporter import TrackioSpanExporter

__all__ = ["DEEP_QUEUE_SIZE", "OpenSampleTracker", "TrackioSpanProcessor"]

DEEP_QUEUE_SIZE = 65_536
"""The ``max_queue_size`` that ``configure()`` and the verl integration give
:class:`TrackioSpanProcessor`: a burst of spans faster than Trackio writes waits instead of being
dropped (64k spans are a few tens of MB at most)."""


class OpenSampleTracker(SpanProcessor):
    """Records the start attributes of sample roots until they end (no export of its own), and,
    given the ``exporter``, every open span for it to show at a flush.

    Args:
        sample_attribute: the attribute marking a sample root (default: the process's active
            settings, i.e. the latest exporter's or ``configure()``'s ``sample_attribute``).
        registry: where to record them (default: the process's, which exporters read).
        exporter: the :class:`TrackioSpanExporter` behind the provider's other processor; at a
            flush it logs the spans still open, unfinished, in their samples.
    """

    def __init__(
        self,
        sample_attribute: str | None = None,
        registry: OpenSampleRegistry = OPEN_SAMPLES,
        *,
        exporter: TrackioSpanExporter | None = None,
    ) -> None:
        self._sample_attribute = sample_attribute
        self._registry = registry
        self._open_spans = exporter.open_spans if exporter is not None else None

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        """Record a starting span (for the exporter) and sample root (the registry)."""
        if self._open_spans is not None:
            self._open_spans.started(span)
        attributes = attributes_view(span)
        if (self._sample_attribute or active_settings().sample_attribute) in attributes:
            context = span.get_span_context()
            self._registry.register(context.trace_id, context.span_id, dict(attributes))

    def on_end(self, span: ReadableSpan) -> None:
        """Forget a span once it ended (the exporter then has it itself)."""
        if self._open_spans is not None:
            self._open_spans.ended(span)
        if (self._sample_attribute or active_settings().sample_attribute) in attributes_view(span):
            context = span.context
            if context is not None:
                self._registry.unregister(context.trace_id, context.span_id)

    def shutdown(self) -> None:
        """Nothing to release."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing is buffered."""
        return True


class TrackioSpanProcessor(BatchSpanProcessor):
    """A ``BatchSpanProcessor`` for :class:`TrackioSpanExporter` that also records spans as they
    start, so a sample still open at a flush is logged with its open spans, unfinished (its
    root among them: it keeps its step and sample index).

    With an offloading exporter (the default) ended spans skip the batch queue: each is encoded
    as it ends, on the thread that ends it, and a thread of the processor's own appends the
    encoded chunks to the spool (:mod:`otel_trackio._offload.span_spooler`: on a busy asyncio
    rollout the export thread would hold the GIL the event loop needs for longer). Either way
    the ``BatchSpanProcessor`` arguments mean what they say: ``max_queue_size`` spans wait at
    most (more are dropped, counted), ``schedule_delay_millis`` is the longest a span waits,
    ``max_export_batch_size`` spans make a batch, and ``force_flush`` returns once every span
    ended before it is exported (offloaded: in the spool).
    """

    def __init__(self, span_exporter: TrackioSpanExporter, **batch_options: Any) -> None:
        super().__init__(span_exporter, **batch_options)
        self._open_spans = span_exporter.open_spans
        client = span_exporter.offloaded  # offloaded: the spool the encoded spans go to
        self._spooler = (
            SpanSpooler(client, **_spooler_options(batch_options))
            if isinstance(client, OffloadClient)
            else None
        )
        if type(self).on_start is TrackioSpanProcessor.on_start and _batch_on_start_is_empty():
            # Per span on the rollout's thread: one call, not this method, then the SDK's (not
            # for a subclass with an on_start of its own).
            self.on_start = self._open_spans.started  # type: ignore[method-assign]

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        """Record a starting span (one dict store), then what ``BatchSpanProcessor`` does."""
        self._open_spans.started(span)
        BatchSpanProcessor.on_start(self, span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        """Forget an ended span (one dict pop), then queue it for export (offloaded: encode it
        into the spooler's chunk)."""
        self._open_spans.ended(span)
        spooler = self._spooler
        if spooler is None:
            BatchSpanProcessor.on_end(self, span)
            return
        context = span.context
        if context is not None and context.trace_flags.sampled:
            spooler.add(span)

    def force_flush(self, timeout_millis: int | None = None) -> bool:
        """Export every span ended before this call (offloaded: append it to the spool)."""
        spooled = self._spooler.flush() if self._spooler is not None else True
        return BatchSpanProcessor.force_flush(self, timeout_millis) and spooled

    def shutdown(self) -> None:
        """Export what is left, then shut the exporter down (idempotent)."""
        if self._spooler is not None:
            self._spooler.close()
        BatchSpanProcessor.shutdown(self)  # type: ignore[no-untyped-call]


def _spooler_options(batch_options: Mapping[str, Any]) -> dict[str, Any]:
    """The ``BatchSpanProcessor`` arguments as :class:`SpanSpooler` takes them: the value given,
    else the SDK's environment variable, else the SDK's default."""

    def option(name: str, variable: str, default: int) -> float:
        value = batch_options.get(name)
        if value is None:
            try:
                value = float(os.environ.get(variable, default))
            except ValueError:
                value = default  # the SDK logged it already, and took its default too
        return float(value)

    return {
        "max_queue_size": int(option("max_queue_size", OTEL_BSP_MAX_QUEUE_SIZE, 2048)),
        "schedule_delay_seconds": option("schedule_delay_millis", OTEL_BSP_SCHEDULE_DELAY, 5000)
        / 1000,
        "batch_spans": int(option("max_export_batch_size", OTEL_BSP_MAX_EXPORT_BATCH_SIZE, 512)),
    }


def _batch_on_start_is_empty() -> bool:
    """Whether the installed SDK's ``BatchSpanProcessor.on_start`` does nothing (its body is
    ``pass``, as in every SDK so far): then :class:`TrackioSpanProcessor` skips calling it."""
    code = BatchSpanProcessor.on_start.__code__
    return code.co_code == _EMPTY.co_code and code.co_consts[:1] == (None,)


_EMPTY = (lambda span, parent_context=None: None).__code__
"""The code of a function that does nothing (no docstring: ``None`` is its first constant)."""
