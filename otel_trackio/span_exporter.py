from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_trackio._codec.sdk import record_from_readable_span
from otel_trackio._core.records import SpanRecord
from otel_trackio._engine.gc_freeze import freeze_setup, no_hold
from otel_trackio._engine.intake import EventIntake, register_intake
from otel_trackio._engine.report import RunSummary, say
from otel_trackio._engine.stats import ExportStats
from otel_trackio._plan import plan_run
from otel_trackio._settings import TrackioSettings, activate_first, settings_for
from otel_trackio._trackio.installed import RunLike, trackio_dir
from otel_trackio._trackio.runs import split_from
from otel_trackio._wiring import SpanWiring, build_spans, observe
from otel_trackio.sampling import StepSampler

if TYPE_CHECKING:  # the in-process engine is imported only when an exporter runs in process
    from otel_trackio._engine.pipeline import TracePipeline

_logger = logging.getLogger("otel_trackio")

__all__ = ["ExportStats", "Offload", "TrackioSpanExporter"]


class Offload(Protocol):
    """What an offloading exporter shows of its spool and writer process (see
    :attr:`TrackioSpanExporter.offloaded`)."""

    @property
    def path(self) -> Path:
        """This process's spool directory."""

    @property
    def writer_pid(self) -> int | None:
        """The writer process's pid."""

    @property
    def writer_starts(self) -> int:
        """How many times a writer process was started (restarts after a crash included)."""

    def backlog(self) -> int:
        """Bytes spooled but not handed to the writer's pipeline yet."""


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
        situation = observe(asked, run=run)
        wiring = build_spans(plan_run(asked, situation), run=run)
        self._take(wiring)
        # Built by hand (not by configure(), which holds the freeze itself): the same setting.
        self._thaw = freeze_setup() if wiring.settings.gc_freeze else no_hold

    @classmethod
    def _from_wiring(cls, wiring: SpanWiring) -> TrackioSpanExporter:
        """The exporter of a span path :func:`~otel_trackio._wiring.build_spans` built
        (``configure()`` plans and builds it itself: it holds the same run and the GC freeze)."""
        exporter = cls.__new__(cls)
        exporter._take(wiring)
        exporter._thaw = no_hold
        return exporter

    def _take(self, wiring: SpanWiring) -> None:
        settings = wiring.settings
        self.settings = settings
        self.open_spans = wiring.open_spans
        """Spans started and not ended (fed by ``TrackioSpanProcessor``/``OpenSampleTracker``):
        a flush logs them, unfinished, in their samples."""
        self.step_sampler: StepSampler | None = None
        """The sampler choosing which samples reach this exporter, when ``configure()`` or the
        zero-code setup installed one (the summary at shutdown counts what it left out)."""
        activate_first(settings)
        self._closed = False
        self._sink = wiring.sink
        self._offload = wiring.offload
        self._engine = wiring.engine
        # In process: the run engine's span pipeline; with offload: None (the writer has it).
        self._pipeline: TracePipeline | None = (
            wiring.engine.spans if wiring.engine is not None else None
        )
        # A TrackioLogExporter of the same project and run finds where to send GenAI events.
        register_intake(self.event_intake, settings.project, settings.name)
        register_intake(self.event_intake, self._sink.project, self._sink.run_name)

    @property
    def run(self) -> RunLike:
        """The ``trackio.Run`` this exporter logs into. With offload the writer process opened
        it: asking for it opens it in this process too (importing Trackio), joined to the same
        run — to log your own values to it."""
        return self._sink.run

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
        assert self._engine is not None
        return self._engine.stats

    @property
    def event_intake(self) -> EventIntake:
        """Where GenAI log events joining this exporter's samples go (see
        :class:`~otel_trackio.TrackioLogExporter`): the pipeline, or with offload the spool."""
        if self._offload is not None:
            return self._offload
        assert self._pipeline is not None
        return self._pipeline

    @property
    def offloaded(self) -> Offload | None:
        """The spool and writer process when ``offload=True`` took effect, else None."""
        return self._offload

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Buffer the spans and hand every sample they complete to Trackio's store process,
        which writes it even if this process dies next (with ``offload``: append them to the
        spool); ``force_flush`` returns once it is stored. Never raises."""
        if self._closed:
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
            self.stats.failed_exports += 1
            _logger.warning("otel-trackio: could not read %d spans: %r", len(spans), exc)
            return SpanExportResult.FAILURE
        return self._export_records(records)

    def _export_records(
        self, records: Iterable[SpanRecord], timeout_seconds: float = 30.0
    ) -> SpanExportResult:
        """Like ``export`` for span records already decoded (tests feed the pipeline directly)."""
        if self._closed or self._pipeline is None:
            return SpanExportResult.FAILURE
        ok = self._pipeline.add(records, timeout_seconds)
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Log every open sample now, as partial; True once all is durable in Trackio. False when
        that failed or timed out."""
        if self._closed:
            return False
        open_spans = self.open_spans.records()
        if self._offload is not None:
            return self._offload.force_flush(timeout_millis / 1000, open_spans)
        assert self._pipeline is not None
        return self._pipeline.flush(max(0.0, timeout_millis / 1000), open_spans)

    def shutdown(self, timeout_millis: int | None = None, **kwargs: Any) -> None:
        """Log open samples as partial, then finish the run if this exporter started it.

        Idempotent. With offload it returns once everything spooled is in Trackio's storage
        (a writer that cannot keep up hands over to one at this process's priority), or once
        ``timeout_millis`` (default: the ``shutdown_timeout_seconds`` setting, no limit while
        storing moves on) has passed: what is left then stays spooled, and a warning says where.
        In process it waits at most ``timeout_millis`` (default 30 s) for an export in progress.
        """
        if self._closed:
            return
        self._closed = True
        open_spans = self.open_spans.records()  # shown unfinished in their samples
        if self._offload is not None:
            limit = (
                self.settings.shutdown_timeout_seconds
                if timeout_millis is None
                else max(0.0, timeout_millis / 1000)
            )
            try:
                self._offload.shutdown(limit, open_spans)
            finally:
                self._sink.release()
        elif self._engine is not None:
            timeout = 30.0 if timeout_millis is None else max(0.0, timeout_millis / 1000)
            self._engine.shutdown(timeout, open_spans=open_spans)
        self._thaw()
        if self.settings.summary:
            for line in self.summary().lines(trackio_dir()):
                say(line)

    def summary(self) -> RunSummary:
        """What this exporter did, as the summary printed at shutdown says it."""
        sampler = self.step_sampler
        return RunSummary(
            self._sink.project,
            self._sink.run_name,
            self.stats,
            not_traced=sampler.dropped_samples if sampler is not None else None,
            max_samples_per_step=sampler.max_samples_per_step if sampler is not None else None,
            server=self.settings.server_url or self.settings.space_id,
            refused_why=self._offload.refused_why if self._offload is not None else None,
            left_behind=self._offload.left_behind if self._offload is not None else None,
            split=self._split(),
        )

    def _split(self) -> str | None:
        """What to say of the run being one of several of its name: the writer's finding when
        offloaded, else read from storage now (a run opened or borrowed here)."""
        if self._offload is not None:
            return self._offload.split
        try:
            return split_from(self._sink.run) if self._sink.opened else None
        except Exception:  # noqa: BLE001 - a summary never fails a shutdown
            return None
