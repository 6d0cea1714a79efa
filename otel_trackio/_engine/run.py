"""The run engine: everything one Trackio run needs, built in one place for every path.

A :class:`RunEngine` is the sink (the held run), the span pipeline (records → samples → Traces →
``run.log``), the metric path when the data carries metrics, the grace policy and the stats. The
in-process :class:`~otel_trackio.TrackioSpanExporter`, the offload writer process, each route of
the OTLP receiver and a lone :class:`~otel_trackio.TrackioLogExporter` all build theirs with
:func:`build_run_engine`; the transports around it (the SDK export call, the spool, OTLP/HTTP)
only move records into it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from otel_trackio._core.assembly.grace import GracePolicy
from otel_trackio._core.records import SpanRecord
from otel_trackio._core.samples import OpenSampleLookup, OpenSpanSource, OwnSteps, StepMemory
from otel_trackio._engine.metrics import MetricPath
from otel_trackio._engine.open_samples import OpenSampleRegistry
from otel_trackio._engine.pipeline import TracePipeline
from otel_trackio._engine.stats import ExportStats
from otel_trackio._settings import TrackioSettings
from otel_trackio._trackio.sink import TrackioSink
from otel_trackio._trackio.store import TraceStore

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricsData

Transport = Literal["process", "offload", "receiver"]
"""How data reaches the engine: in the rollout process itself (SDK exporters), from a spool in
the offload writer process, or from other processes through the OTLP receiver."""

MetricDecoder = Callable[[bytes], Iterable["MetricsData"]]
"""Turns a spooled metrics entry (an OTLP request, or the offload codec's SDK metrics) into SDK
``MetricsData``."""


@dataclass(eq=False)
class RunEngine:
    """One Trackio run's sink, span pipeline and (optional) metric path.

    Build it with :func:`build_run_engine`. It is also what a spool drainer hands entries to
    (``spans`` and :meth:`export_metrics`).
    """

    settings: TrackioSettings
    sink: TrackioSink
    spans: TracePipeline
    metrics: MetricPath | None = None
    decode_metrics: MetricDecoder | None = None
    closed: bool = False

    @property
    def stats(self) -> ExportStats:
        """The span pipeline's counters."""
        return self.spans.stats

    @property
    def grace(self) -> GracePolicy:
        """The grace policy the span pipeline runs with."""
        return self.spans.grace

    def export_metrics(self, request: bytes) -> None:
        """Log a spooled metrics entry of this run (an OTLP request in the receiver, the rollout
        process's SDK metrics in the offload writer; without a metric path: ignored)."""
        if self.metrics is None or self.decode_metrics is None:
            return
        for data in self.decode_metrics(request):
            self.metrics.export(data)

    def shutdown(
        self,
        timeout_seconds: float = 30.0,
        *,
        flush: bool = True,
        open_spans: Iterable[SpanRecord] = (),
    ) -> None:
        """Log open samples as partial (unless ``flush=False``: a spool keeps them; the
        ``open_spans`` read at the end shown unfinished in them) and let the run go (finished
        by its last holder when this package started it). Idempotent."""
        if self.closed:
            return
        self.closed = True
        try:
            self.spans.close(timeout_seconds, flush=flush, open_spans=open_spans)
        finally:
            if self.metrics is not None:
                self.metrics.shutdown()


def build_run_engine(
    settings: TrackioSettings,
    sink: TrackioSink,
    *,
    transport: Transport = "process",
    open_samples: OpenSampleLookup | None = None,
    open_spans: OpenSpanSource | None = None,
    steps: StepMemory | None = None,
    log_events: bool = False,
    decode_metrics: MetricDecoder | None = None,
    store: TraceStore | None = None,
) -> RunEngine:
    """The engine of one run.

    Args:
        settings: the run's settings.
        sink: the run, held (the engine releases it at shutdown; its metric path holds it too).
        transport: where the data comes from; it decides the defaults below.
        open_samples: where open sample roots are looked up at a flush (in process: the
            process's registry; offload writer: the roots its spool carries; default: none
            known, as in the receiver: OTLP carries ended spans only).
        open_spans: where the spans still open of a trace logged at the TTL are read (in
            process: the exporter's tracked open spans; elsewhere none are known).
        steps: the run's latest step, read by a sample without a step and by the metric path
            (in process: the process's, which ``set_step`` sets; default: the run's own, as
            data of other processes needs). Process-wide state is handed in, never imported
            (the builder, :mod:`otel_trackio._wiring`, does it for the rollout process).
        log_events: GenAI log events feed the pipeline from the start (a lone log exporter).
        decode_metrics: with it, the engine has a metric path (a
            :class:`~otel_trackio._engine.metrics.MetricPath` on the same run) fed by
            :meth:`RunEngine.export_metrics`.
        store: a store process: Trace entries are written there, behind the conversion of the
            next ones (see :mod:`otel_trackio._trackio.store`). None: they are written on the
            logging thread before the call returns.
    """
    if open_samples is None:
        open_samples = OpenSampleRegistry()
    if steps is None:
        steps = OwnSteps()
    metrics = None
    if decode_metrics is not None:  # first: it holds its own share of the run
        metrics = MetricPath(settings, sink.share())
    grace = GracePolicy.of(settings, receiver=transport == "receiver")
    pipeline = TracePipeline(
        settings,
        sink,
        grace=grace,
        open_samples=open_samples,
        open_spans=open_spans,
        steps=steps,
        beside_rollout=transport == "process",
        write_behind=store is not None,
    )
    if metrics is not None:
        metrics.follow_steps(pipeline.latest_step)  # the run's latest step, spans' and metrics'
    if store is not None:
        sink.write_behind_to(store)
    if log_events:
        pipeline.expect_log_events()
    return RunEngine(settings, sink, pipeline, metrics, decode_metrics)
