"""``TrackioMetricExporter``: OTel metrics in, Trackio scalar plots at the rollout's steps out.

The data path: ``export(MetricsData)`` → :class:`MetricConverter` (``{step: {series: value}}``)
→ one ``run.log(values, step=s)`` per step, on the run held by :class:`._trackio.TrackioSink`
(shared with a span exporter for the same project and name).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExporter,
    MetricExportResult,
    MetricsData,
)
from opentelemetry.sdk.metrics.view import Aggregation

from otel_trackio._engine import sink as _trackio
from otel_trackio._engine import steps as _steps
from otel_trackio._engine.sink import RunLike, TrackioSink
from otel_trackio._engine.warn import Warnings
from otel_trackio.settings import TrackioSettings, settings_for

if TYPE_CHECKING:
    from otel_trackio._core.metric_convert import ConverterMemory

_logger = logging.getLogger("otel_trackio")

# The SDK keeps counter totals (the converter plots what each step added, or the total with
# counter_totals=True); histograms report one distribution per interval.
DEFAULT_TEMPORALITY: dict[type, AggregationTemporality] = {
    Counter: AggregationTemporality.CUMULATIVE,
    UpDownCounter: AggregationTemporality.CUMULATIVE,
    ObservableCounter: AggregationTemporality.CUMULATIVE,
    ObservableUpDownCounter: AggregationTemporality.CUMULATIVE,
    ObservableGauge: AggregationTemporality.CUMULATIVE,
    Histogram: AggregationTemporality.DELTA,
}
try:  # synchronous Gauge exists in newer SDKs only
    from opentelemetry.sdk.metrics import _Gauge as _SyncGauge

    DEFAULT_TEMPORALITY[_SyncGauge] = AggregationTemporality.CUMULATIVE
except ImportError:  # pragma: no cover - older SDK
    pass

_WARN_INTERVAL_SECONDS = 60.0


@dataclass(slots=True)
class MetricExportStats:
    """Counters of what a metric exporter did, for summaries and tests."""

    exports: int = 0
    points_received: int = 0
    points_logged: int = 0
    values_logged: int = 0
    skipped_nonfinite: int = 0
    skipped_unchanged: int = 0
    skipped_resent: int = 0  # delta points sent again (their interval was logged already)
    unsupported_metrics: int = 0
    renamed_keys: int = 0
    log_calls: int = 0
    failed_exports: int = 0
    values_lost: int = 0


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
        settings = settings_for(project, name, settings, options)
        self.settings = settings
        self._sink = TrackioSink(
            settings.project, settings.name, run=run, init_kwargs=settings.init_kwargs
        )
        from otel_trackio._core.metric_convert import MetricConverter

        self._converter = MetricConverter(
            step_attribute=settings.step_attribute,
            stats=settings.histogram_stats,
            distributions=settings.log_distributions,
            counter_increments=not settings.counter_totals,
            reserved_keys=_trackio.reserved_keys(),
        )
        self._lock = threading.Lock()
        self._shutdown = False
        # The run's next step right after our last log call: if it moved since, someone else
        # logs to the run and step-less metrics attach to that step instead of advancing it.
        self._clock_after_us: int | None = None
        self._others_log = False
        # Our own step clock, for a Trackio that does not expose the run's.
        self._own_next_step = 0
        # Where a point without a step finds the latest step: this process's (set_step, the
        # spans of its in-process exporters), or the run's own in a writer or receiver.
        self._latest_step: Callable[[], int | None] = _steps.latest_step
        self._warn = Warnings(every_seconds=_WARN_INTERVAL_SECONDS)
        self.stats = MetricExportStats()

    @property
    def run(self) -> RunLike:
        """The ``trackio.Run`` this exporter logs into."""
        return self._sink.run

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        """Log every point of ``metrics_data``: one ``run.log`` per step. Never raises.

        Takes any resource and scope (the OTLP receiver's entry point too); resource attributes
        are not part of series names.
        """
        if self._shutdown:
            return MetricExportResult.FAILURE
        if not self._lock.acquire(timeout=max(0.0, float(timeout_millis) / 1000)):
            self.stats.failed_exports += 1
            self._warn("busy", f"exporter busy for {timeout_millis} ms; this export was dropped")
            return MetricExportResult.FAILURE
        try:
            if self._shutdown:
                return MetricExportResult.FAILURE
            return self._export(metrics_data)
        except Exception as exc:  # noqa: BLE001 - export() must never raise
            self.stats.failed_exports += 1
            self._warn("export", f"metric export failed: {exc!r}")
            return MetricExportResult.FAILURE
        finally:
            self._lock.release()

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        """Nothing is buffered here (each export is logged at once): True unless shut down."""
        return not self._shutdown

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
        acquired = self._lock.acquire(timeout=seconds)
        try:
            if self._shutdown:
                return
            self._shutdown = True
        finally:
            if acquired:
                self._lock.release()
        self._sink.release()

    def memory(self) -> ConverterMemory:
        """What this exporter remembers of what it logged (points, counter totals, delta
        intervals). A process taking over its run's metrics passes it to :meth:`recall`, so a
        point sent again or replayed is not logged twice (the receiver and the offload writer
        keep it beside their spool)."""
        with self._lock:
            return self._converter.memory()

    def recall(self, memory: ConverterMemory) -> None:
        """Take over what an exporter of this run remembered before (see :meth:`memory`)."""
        with self._lock:
            self._converter.recall(memory)

    # -- the pipeline -------------------------------------------------------------------------

    def _export(self, metrics_data: MetricsData) -> MetricExportResult:
        self.stats.exports += 1
        conversion = self._converter.convert(metrics_data, self._fallback_step)
        stats = self.stats
        stats.points_received += conversion.points
        stats.skipped_nonfinite += conversion.skipped_nonfinite
        stats.skipped_unchanged += conversion.unchanged
        stats.skipped_resent += conversion.resent
        stats.unsupported_metrics += conversion.unsupported
        stats.renamed_keys += conversion.renamed
        if conversion.skipped_nonfinite:
            self._warn(
                "nonfinite",
                f"skipped {conversion.skipped_nonfinite} NaN/inf/non-numeric metric values in "
                f"this export (e.g. {', '.join(conversion.skipped_series)}); "
                f"{stats.skipped_nonfinite} so far",
            )
        if conversion.unsupported:
            self._warn(
                "unsupported",
                f"skipped {conversion.unsupported} metrics of unsupported data types "
                f"({', '.join(sorted(conversion.unsupported_types))})",
            )
        result = MetricExportResult.SUCCESS
        logged_any = False
        for step in sorted(conversion.by_step):
            values = conversion.by_step[step]
            payload = {key: self._value(key, v) for key, v in values.items()}
            payload = {key: v for key, v in payload.items() if v is not None}
            try:
                self._sink.log(payload, step)
            except Exception as exc:  # noqa: BLE001
                stats.failed_exports += 1
                stats.values_lost += len(values)
                self._warn("log", f"trackio log at step {step} failed: {exc!r}")
                result = MetricExportResult.FAILURE
                continue
            self._converter.commit(conversion, step)
            logged_any = True
            stats.log_calls += 1
            stats.values_logged += len(values)
            stats.points_logged += conversion.points_by_step.get(step, 0)
        if logged_any:
            self._own_next_step = max(self._own_next_step, max(conversion.by_step) + 1)
            self._clock_after_us = self._sink.next_step()
            # Durable now, and a full disk or read-only folder is reported, not only warned.
            if not self._sink.flush():
                stats.failed_exports += 1
                self._warn(
                    "storage",
                    f"Trackio could not write metrics to storage ({self._sink.last_failures}); "
                    "values of this export may be lost",
                )
                result = MetricExportResult.FAILURE
        return result

    def _value(self, key: str, value: Any) -> Any:
        from otel_trackio._core.metric_convert import Distribution

        if not isinstance(value, Distribution):
            return value
        try:
            return _trackio.histogram(value.counts, value.edges)
        except Exception as exc:  # noqa: BLE001 - a bad distribution must not cost the scalars
            self._warn("distribution", f"could not build the distribution {key!r}: {exc!r}")
            return None

    def follow_steps(self, latest: Callable[[], int | None]) -> None:
        """Take step-less points to ``latest()`` (a run engine's own step memory: in a writer or
        the receiver each run keeps its own) rather than this process's latest step."""
        self._latest_step = latest

    def _fallback_step(self) -> int:
        known = self._latest_step()
        if known is not None:
            return known
        clock = self._sink.next_step()
        if clock is None:
            return self._own_next_step  # Trackio does not say: advance our own clock
        if self._clock_after_us is None:
            foreign = clock > 0  # the run already has steps we did not log
        else:
            foreign = clock != self._clock_after_us  # someone logged since our last export
        self._others_log = self._others_log or foreign
        if self._others_log:
            return max(clock - 1, 0)  # join their latest step; never shift their steps
        return clock  # only this exporter logs to the run: advance it
