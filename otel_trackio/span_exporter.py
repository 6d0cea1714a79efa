"""``TrackioSpanExporter``: OTel spans in, one Trackio Trace per rollout sample out.

The data path, one stage per module: ``export()`` → span records (:mod:`._records`) → samples
with their identity and step (:mod:`._assembly`) → Trace dicts (:mod:`._convert`) → one
``run.log`` per step, written durably (:mod:`._pipeline`, :mod:`._trackio`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_trackio._core.records import SpanRecord, record_from_readable_span
from otel_trackio._engine.pipeline import (
    EventIntake,
    ExportStats,
    TracePipeline,
    grace_seconds,
    register_intake,
)
from otel_trackio._engine.sink import RunLike, TrackioSink, is_remote
from otel_trackio._offload.client import OffloadClient, portable
from otel_trackio.settings import (
    TrackioSettings,
    activate,
    settings_for,
    with_offload_default,
)

_logger = logging.getLogger("otel_trackio")

__all__ = ["ExportStats", "TrackioSpanExporter"]


class TrackioSpanExporter(SpanExporter):
    """An OTel ``SpanExporter`` that logs each rollout sample as one ``trackio.Trace``.

    Use it behind a ``BatchSpanProcessor`` (or :class:`~otel_trackio.TrackioSpanProcessor`).
    Spans are grouped into samples (the subtree under the outermost span carrying
    ``sample_index``; a trace without one is one sample), converted into Trace dicts with chat
    ``messages`` and a ``spans`` tree, and logged under ``key`` at the sample's step (its
    ``step`` attribute, else its ancestor's, else the latest step seen, else 0; never Trackio's
    auto step).

    Args:
        project, name: the Trackio project and run to log into when no run is given or active.
        run: a ``trackio.Run`` to log into; it is never finished by the exporter.
        settings: a :class:`~otel_trackio.TrackioSettings` (default: all defaults).
        **options: any setting by name (``key``, ``step_attribute``, ``sample_ttl_seconds``,
            ``max_buffered_spans``, ``max_value_chars``, ``token_decoder``, ...), applied over
            ``settings``; any other keyword goes to ``trackio.init`` (``server_url``, ...).
    """

    def __init__(
        self,
        project: str | None = None,
        name: str | None = None,
        *,
        run: RunLike | None = None,
        settings: TrackioSettings | None = None,
        **options: Any,
    ) -> None:
        asked = settings_for(project, name, settings, options)
        settings = with_offload_default(asked)
        self.settings = settings
        activate(settings)
        sink = TrackioSink(
            settings.project, settings.name, run=run, init_kwargs=settings.init_kwargs
        )
        self._offload: OffloadClient | None = None
        if settings.offload:
            why_not = portable(settings)
            if (
                why_not is None
                and is_remote(sink.run)
                and not (settings.server_url or settings.space_id)
            ):
                why_not = "the run logs to a Trackio server that the settings do not name"
            if why_not is None:
                self._offload = OffloadClient(settings, sink)
            else:  # a warning when asked for; by default, in process is the answer
                _logger.log(
                    logging.WARNING if asked.offload else logging.INFO,
                    "otel-trackio: offload=True ignored, exporting in process: %s",
                    why_not,
                )
        self._pipeline = TracePipeline(
            settings, sink, grace_seconds=grace_seconds(settings, receiver=False)
        )
        # A TrackioLogExporter of the same project and run finds where to send GenAI events.
        register_intake(self.event_intake, settings.project, settings.name)
        register_intake(self.event_intake, sink.project, sink.run_name)

    @property
    def run(self) -> RunLike:
        """The ``trackio.Run`` this exporter logs into."""
        return self._pipeline.sink.run

    @property
    def key(self) -> str:
        """The Trackio key the Traces are logged under."""
        return self.settings.key

    @property
    def stats(self) -> ExportStats:
        """What this exporter did so far (samples logged, partial, lost, ...); with offload, as
        of the writer process's last checkpoint."""
        if self._offload is not None:
            return self._offload.stats()
        return self._pipeline.stats

    @property
    def event_intake(self) -> EventIntake:
        """Where GenAI log events joining this exporter's samples go (see
        :class:`~otel_trackio.TrackioLogExporter`): the pipeline, or with offload the spool."""
        return self._offload if self._offload is not None else self._pipeline

    @property
    def offloaded(self) -> OffloadClient | None:
        """The spool and writer process when ``offload=True`` took effect, else None."""
        return self._offload

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Buffer the spans and log every sample they complete, durably (with ``offload``:
        append them to the spool). Never raises."""
        if self._pipeline.closed:
            return SpanExportResult.FAILURE
        if self._offload is not None:
            try:
                ok = self._offload.export(spans)
            except Exception as exc:  # noqa: BLE001 - export() must never raise
                _logger.warning("otel-trackio: could not spool %d spans: %r", len(spans), exc)
                ok = False
            return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE
        try:
            records = [record_from_readable_span(s) for s in spans]
        except Exception as exc:  # noqa: BLE001 - export() must never raise
            self._pipeline.stats.failed_exports += 1
            _logger.warning("otel-trackio: could not read %d spans: %r", len(spans), exc)
            return SpanExportResult.FAILURE
        return self.export_records(records)

    def export_records(
        self, records: Iterable[SpanRecord], timeout_seconds: float = 30.0
    ) -> SpanExportResult:
        """Like ``export`` for span records already decoded (from OTLP, a spool, a test)."""
        ok = self._pipeline.add(records, timeout_seconds)
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Log every open sample now, as partial; True once all is durable in Trackio. False when
        that failed or timed out."""
        if self._offload is not None:
            return not self._pipeline.closed and self._offload.force_flush(timeout_millis / 1000)
        return self._pipeline.flush(max(0.0, timeout_millis / 1000))

    def shutdown(self, timeout_millis: int = 30000, **kwargs: Any) -> None:
        """Log open samples as partial, then finish the run if this exporter started it.

        Idempotent; waits at most ``timeout_millis`` for an export in progress (with offload:
        for the writer to drain; what it did not drain stays spooled for the next start).
        """
        if self._offload is not None and not self._pipeline.closed:
            self._offload.shutdown(max(0.0, timeout_millis / 1000))
        self._pipeline.close(max(0.0, timeout_millis / 1000))
