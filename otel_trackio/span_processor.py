"""Span processors that see sample roots *start*, so a sample flushed while still open keeps its
identity.

An exporter only sees spans once they end. When it must log a sample early (``force_flush``,
shutdown, TTL, a full buffer) and the root — which carries ``step`` and ``sample_index`` — is still
open, only the root's start attributes can say which sample it was. These processors record them
at ``on_start`` for every span carrying the sample attribute, whatever started it (the plain OTel
API, ``rollout()``, a framework), and forget them at ``on_end``.

- :class:`TrackioSpanProcessor`: a ``BatchSpanProcessor`` that does it too (what ``configure()``
  installs; use it instead of ``BatchSpanProcessor`` when you build the provider yourself).
- :class:`OpenSampleTracker`: only the recording, to add beside another processor (the zero-code
  setup adds it, since the SDK configurator builds its own ``BatchSpanProcessor``).

The OTLP receiver cannot do this: OTLP carries ended spans only.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_trackio._codec.sdk import attributes_view
from otel_trackio._engine.open_samples import OPEN_SAMPLES, OpenSampleRegistry
from otel_trackio.settings import active_settings
from otel_trackio.span_exporter import TrackioSpanExporter

__all__ = ["OpenSampleTracker", "TrackioSpanProcessor"]


class OpenSampleTracker(SpanProcessor):
    """Records the start attributes of sample roots until they end (no export of its own).

    Args:
        sample_attribute: the attribute marking a sample root (default: the process's active
            settings, i.e. the latest exporter's or ``configure()``'s ``sample_attribute``).
        registry: where to record them (default: the process's, which exporters read).
    """

    def __init__(
        self, sample_attribute: str | None = None, registry: OpenSampleRegistry = OPEN_SAMPLES
    ) -> None:
        self._sample_attribute = sample_attribute
        self._registry = registry

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        """Record a starting sample root (cost for other spans: one dict lookup)."""
        attributes = attributes_view(span)
        if (self._sample_attribute or active_settings().sample_attribute) in attributes:
            context = span.get_span_context()
            self._registry.register(context.trace_id, context.span_id, dict(attributes))

    def on_end(self, span: ReadableSpan) -> None:
        """Forget a sample root once it ended (the exporter then has the root itself)."""
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
    """A ``BatchSpanProcessor`` for :class:`TrackioSpanExporter` that also records sample roots
    as they start, so a sample still open at a flush keeps its step and sample index.

    Takes the ``BatchSpanProcessor`` arguments (``max_queue_size``, ``schedule_delay_millis``,
    ``max_export_batch_size``, ``export_timeout_millis``).
    """

    def __init__(self, span_exporter: TrackioSpanExporter, **batch_options: Any) -> None:
        super().__init__(span_exporter, **batch_options)
        self._tracker = OpenSampleTracker(span_exporter.settings.sample_attribute)

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        """Record a starting sample root, then what ``BatchSpanProcessor`` does."""
        self._tracker.on_start(span, parent_context)
        super().on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        """Forget an ended sample root, then queue the span for export."""
        self._tracker.on_end(span)
        super().on_end(span)
