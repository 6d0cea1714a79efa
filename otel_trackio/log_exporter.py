"""``TrackioLogExporter``: GenAI events sent as OTel log records, joined to their rollout samples.

The OTel GenAI conventions deliver a model call's content on the span (attributes), as span
events, or as *log-based events*: log records named ``gen_ai.*`` (``gen_ai.client.inference.
operation.details``, ``gen_ai.user.message``, ``gen_ai.choice``, ...) carrying the trace and span
id of the model call. This exporter hands those records to the span exporter's pipeline
(:meth:`~._pipeline.TracePipeline.add_events`), where each joins its span as one more span event,
so the Trace shows the conversation as if the events had been recorded on the span. Log records
that are not GenAI events are counted (:attr:`TrackioLogExporter.stats`) and left out.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from otel_trackio._codec.sdk import (
    LogRecordExporter,
    LogRecordExportResult,
    record_from_readable_log,
)
from otel_trackio._core.records import LogEventRecord
from otel_trackio._engine.intake import EventIntake, find_intake
from otel_trackio._engine.warn import Warnings
from otel_trackio._settings import TrackioSettings, settings_for
from otel_trackio.span_exporter import TrackioSpanExporter

if TYPE_CHECKING:  # a lone log exporter's own engine, imported only when it needs one
    from otel_trackio._engine.run import RunEngine

_logger = logging.getLogger("otel_trackio")

__all__ = ["LogExportStats", "TrackioLogExporter"]


@dataclass(slots=True)
class LogExportStats:
    """What a log exporter did with the records it was given.

    ``genai_events`` went to the pipeline; the others were left out: ``not_genai`` (any other log
    record), ``no_span`` (a GenAI event emitted outside any span: no sample to join),
    ``unsampled`` (a GenAI event of a span the sampler dropped).
    """

    records_received: int = 0
    genai_events: int = 0
    not_genai: int = 0
    no_span: int = 0
    unsampled: int = 0
    failed_exports: int = 0


class TrackioLogExporter(LogRecordExporter):
    """An OTel ``LogRecordExporter`` that joins GenAI log events to their rollout samples.

    Put it behind a ``BatchLogRecordProcessor`` on the logger provider the GenAI
    instrumentation uses (``configure()`` and ``OTEL_LOGS_EXPORTER=trackio`` do it).

    Args:
        span_exporter: the :class:`TrackioSpanExporter` whose samples the events join.
        project, name, settings, **options: without ``span_exporter``, the span exporter of this
            ``project``/``name`` in this process is looked up (at each export until found); with
            none, the events are logged on their own pipeline, as partial Traces of placeholder
            spans (with a warning). ``options`` are settings by name or ``trackio.init`` keywords.

    A pipeline fed by a log exporter holds each completed sample 2 s (``LOG_GRACE_SECONDS``,
    unless ``sample_grace_seconds`` is set) so that events exported after their sample's root
    still join it.
    """

    def __init__(
        self,
        span_exporter: TrackioSpanExporter | None = None,
        *,
        project: str | None = None,
        name: str | None = None,
        settings: TrackioSettings | None = None,
        **options: Any,
    ) -> None:
        self.stats = LogExportStats()
        self._lock = threading.Lock()
        self._closed = False
        self._fixed = span_exporter is not None
        self._own: RunEngine | None = None
        self._warn = Warnings()
        self._pipeline: EventIntake | None
        if span_exporter is not None:
            self.settings = span_exporter.settings
            self._pipeline = span_exporter.event_intake
            self._pipeline.expect_log_events()
        else:
            self.settings = settings_for(project, name, settings, options)
            self._pipeline = self._find()

    def export(self, batch: Sequence[Any]) -> LogRecordExportResult:
        """Hand the GenAI events of ``batch`` to the samples of their spans; count the other
        records. Never raises; FAILURE after shutdown or when the pipeline failed."""
        if self._closed:
            return LogRecordExportResult.FAILURE
        try:
            events: list[LogEventRecord] = []
            for item in batch:
                record = record_from_readable_log(item)
                if not isinstance(record, LogEventRecord):
                    self._count_skipped(record)
                elif not record.sampled:
                    # The SDK's trace flags are exact: that span is never exported.
                    self.stats.unsampled += 1
                else:
                    events.append(record)
            self.stats.records_received += len(batch)
            self.stats.genai_events += len(events)
            if not events:
                return LogRecordExportResult.SUCCESS
            ok = self._target().add_events(events)
        except Exception as exc:  # noqa: BLE001 - export() must never raise
            self.stats.failed_exports += 1
            self._warn("export", f"could not export {len(batch)} log records: {exc!r}")
            return LogRecordExportResult.FAILURE
        if not ok:
            self.stats.failed_exports += 1
        return LogRecordExportResult.SUCCESS if ok else LogRecordExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing waits in the exporter itself (events wait in the pipeline for their spans)."""
        return not self._closed

    def shutdown(self, timeout_millis: int = 30000, **kwargs: Any) -> None:
        """Stop exporting. The span exporter's pipeline stays open (it closes with the span
        exporter); a pipeline of this exporter's own is flushed and closed. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            own = self._own
        if own is not None:
            own.shutdown(max(0.0, timeout_millis / 1000))

    # -- where the events go ------------------------------------------------------------------

    def _find(self) -> EventIntake | None:
        pipeline = find_intake(self.settings.project, self.settings.name)
        if pipeline is not None:
            pipeline.expect_log_events()
        return pipeline

    def _target(self) -> EventIntake:
        """The span exporter's pipeline (looked up again once it closed), else our own."""
        with self._lock:
            pipeline = self._pipeline
            if pipeline is not None and (self._fixed or not pipeline.closed):
                return pipeline
            pipeline = self._own.spans if self._own is not None else self._find()
            if pipeline is None:
                self._own = contextvars.Context().run(self._own_engine)
                pipeline = self._own.spans
            self._pipeline = pipeline
            return pipeline

    def _own_engine(self) -> RunEngine:
        settings = self.settings
        self._warn(
            "alone",
            f"no TrackioSpanExporter for project {settings.project!r}, run {settings.name!r} in "
            "this process: GenAI log events are logged without their spans (partial Traces)",
        )
        from otel_trackio._plan import plan_run
        from otel_trackio._wiring import build_engine, observe

        alone = dataclasses.replace(settings, offload=False)  # its own engine is in process
        return build_engine(plan_run(alone, observe(alone)), log_events=True)

    def _count_skipped(self, reason: str) -> None:
        if reason == "no_span":
            self.stats.no_span += 1
            self._warn(
                "no_span",
                "GenAI log events emitted outside any span cannot join a sample and are left "
                "out (is a tracer provider installed?)",
            )
        else:
            self.stats.not_genai += 1
