"""``TrackioMetricExporter``: OTel metrics in, Trackio scalar plots at the rollout's steps out.

An OTel ``MetricExporter`` over the engine's metric path
(:class:`~otel_trackio._engine.metrics.MetricPath`): ``export(MetricsData)`` → one
``run.log(values, step=s)`` per step, on the run held by a Trackio sink (shared with a span
exporter for the same project and name).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExporter,
    MetricExportResult,
    MetricsData,
)
from opentelemetry.sdk.metrics.view import Aggregation

from otel_trackio._engine.metrics import DEFAULT_TEMPORALITY, MetricExportStats, MetricPath
from otel_trackio._settings import TrackioSettings, settings_for
from otel_trackio._trackio.installed import RunLike
from otel_trackio._trackio.sink import TrackioSink

if TYPE_CHECKING:
    from otel_trackio._core.metric_convert import ConverterMemory

__all__ = ["DEFAULT_TEMPORALITY", "MetricExportStats", "TrackioMetricExporter"]


class TrackioMetricExporter(MetricExporter):
    """An OTel ``MetricExporter`` that logs instruments as Trackio scalars at the training step.

    Use it with a ``PeriodicExportingMetricReader`` (or ``math.inf`` interval and ``force_flush``).
    A counter plots what was added at each step (``counter_totals=True``: its running total);
    up-down counters and gauges plot their value; histograms become the ``histogram_stats``
    among ``/count``, ``/sum``, ``/mean``, ``/min``, ``/max`` (default ``/mean``, ``/min`` and
    ``/max``, as verl logs a reward; and ``/distribution`` with ``log_distributions=True``). Each
    attribute set is its own series ``<name>/<key>=<value>`` (keys sorted, ``step`` left out).

    Step of a point: its ``step`` attribute; else the latest rollout step known in this process
    (``otel_trackio.set_step`` or spans seen by ``TrackioSpanExporter``); else the run's own
    clock: once anything else has logged to the run, its latest step (so your own auto-stepped
    ``trackio.log`` calls never shift); while only this exporter logs, the next step.

    Args:
        project, name: the Trackio project and run, when no run is given or active.
        run: a ``trackio.Run`` to log into (never finished by the exporter).
        settings: a :class:`~otel_trackio.TrackioSettings` (``step_attribute``,
            ``histogram_stats``, ``log_distributions``, ``counter_totals``, the run's
            ``trackio.init`` options).
        preferred_temporality, preferred_aggregation: the standard OTel exporter preferences,
            merged over the defaults (counters cumulative, histograms delta).
        **options: any setting by name, applied over ``settings``; any other keyword goes to
            ``trackio.init``.
    """

    def __init__(
        self,
        project: str | None = None,
        name: str | None = None,
        *,
        run: RunLike | None = None,
        settings: TrackioSettings | None = None,
        preferred_temporality: dict[type, AggregationTemporality] | None = None,
        preferred_aggregation: dict[type, Aggregation] | None = None,
        **options: Any,
    ) -> None:
        temporality = dict(DEFAULT_TEMPORALITY)
        temporality.update(preferred_temporality or {})
        super().__init__(
            preferred_temporality=temporality, preferred_aggregation=preferred_aggregation
        )
        chosen = settings_for(project, name, settings, options)
        sink = TrackioSink(chosen.project, chosen.name, run=run, init_kwargs=chosen.init_kwargs)
        self._path = MetricPath(chosen, sink)

    @classmethod
    def _holding(cls, sink: TrackioSink, settings: TrackioSettings) -> TrackioMetricExporter:
        """An exporter into the run ``sink`` holds (``configure()``'s: its plan chose the run)."""
        exporter = cls.__new__(cls)
        MetricExporter.__init__(exporter, preferred_temporality=dict(DEFAULT_TEMPORALITY))
        exporter._path = MetricPath(settings, sink.share())
        return exporter

    @property
    def settings(self) -> TrackioSettings:
        """The settings this exporter runs with."""
        return self._path.settings

    @property
    def stats(self) -> MetricExportStats:
        """What this exporter did (points, values logged, skipped, failed exports)."""
        return self._path.stats

    @property
    def run(self) -> RunLike:
        """The ``trackio.Run`` this exporter logs into."""
        return self._path.run

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        """Log every point of ``metrics_data``: one ``run.log`` per step. Never raises.

        Takes any resource and scope (the OTLP receiver's entry point too); resource attributes
        are not part of series names.
        """
        try:
            seconds = float(timeout_millis) / 1000
        except (TypeError, ValueError):
            seconds = 10.0
        ok = self._path.export(metrics_data, seconds)
        return MetricExportResult.SUCCESS if ok else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        """Nothing is buffered here (each export is logged at once): True unless shut down."""
        return not self._path.closed

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        """Stop exporting and finish the run if this exporter started it and is its last holder.

        Idempotent. Waits at most ``timeout_millis`` (or the reader's ``timeout=``, in ms) for
        an export in progress.
        """
        timeout = kwargs.get("timeout", timeout_millis)
        try:
            seconds = max(0.0, float(timeout) / 1000)
        except (TypeError, ValueError):
            seconds = 30.0
        self._path.shutdown(seconds)

    def memory(self) -> ConverterMemory:
        """What this exporter remembers of what it logged (see
        :meth:`~otel_trackio._engine.metrics.MetricPath.memory`)."""
        return self._path.memory()

    def recall(self, memory: ConverterMemory) -> None:
        """Take over what an exporter of this run remembered before (see :meth:`memory`)."""
        self._path.recall(memory)

    def follow_steps(self, latest: Callable[[], int | None]) -> None:
        """Take step-less points to ``latest()`` rather than this process's latest step."""
        self._path.follow_steps(latest)
