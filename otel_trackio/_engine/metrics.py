"""The engine's metric path: OTel ``MetricsData`` in, Trackio scalar plots at the rollout's steps
out, on a run held by a :class:`~otel_trackio._trackio.sink.TrackioSink`.

``export(MetricsData)`` → :class:`~otel_trackio._core.metric_convert.MetricConverter`
(``{step: {series: value}}``) → one ``run.log(values, step=s)`` per step. The public
:class:`~otel_trackio.TrackioMetricExporter` is the OTel adapter over it; a run engine (the
offload writer's, each receiver route's) holds one directly.
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
from opentelemetry.sdk.metrics.export import AggregationTemporality, MetricsData

from otel_trackio._engine import steps as _steps
from otel_trackio._engine.warn import Warnings
from otel_trackio._settings import TrackioSettings
from otel_trackio._trackio.installed import RunLike, reserved_keys
from otel_trackio._trackio.payloads import histogram
from otel_trackio._trackio.sink import TrackioSink
from otel_trackio._trackio.storage import stored_metric_values

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
_NONE = object()  # no stored value


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


class MetricPath:
    """Logs ``MetricsData`` to one run: conversion, the step of a point without one, the
    run's storage, stats and warnings. Thread-safe; never raises from :meth:`export`.

    Step of a point: its ``step`` attribute; else the latest rollout step (:meth:`follow_steps`:
    this process's by default); else the run's own clock: once anything else has logged to the
    run, its latest step (so a user's own auto-stepped ``trackio.log`` calls never shift); while
    only this path logs, the next step.
    """

    def __init__(self, settings: TrackioSettings, sink: TrackioSink) -> None:
        self.settings = settings
        self._sink = sink  # released at shutdown
        from otel_trackio._core.metric_convert import MetricConverter

        self._converter = MetricConverter(
            step_attribute=settings.step_attribute,
            stats=settings.histogram_stats,
            distributions=settings.log_distributions,
            counter_increments=not settings.counter_totals,
            reserved_keys=reserved_keys(),
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
        # Values the run has stored already, by (step, key): skipped (``skip_stored``), so data
        # read again (the same Collector file ingested twice) is stored once.
        self.skip_stored = False
        self._stored: dict[tuple[int, str], Any] | None = None

    @property
    def run(self) -> RunLike:
        """The ``trackio.Run`` this path logs into."""
        return self._sink.run

    @property
    def closed(self) -> bool:
        """True once :meth:`shutdown` began."""
        return self._shutdown

    def export(self, metrics_data: MetricsData, timeout_seconds: float = 10.0) -> bool:
        """Log every point of ``metrics_data``: one ``run.log`` per step. False when something
        was not logged (warned and counted). Never raises.

        Takes any resource and scope (the OTLP receiver's entry point too); resource attributes
        are not part of series names.
        """
        if self._shutdown:
            return False
        if not self._lock.acquire(timeout=max(0.0, timeout_seconds)):
            self.stats.failed_exports += 1
            self._warn(
                "busy",
                f"exporter busy for {timeout_seconds * 1000:.0f} ms; this export was dropped",
            )
            return False
        try:
            if self._shutdown:
                return False
            return self._export(metrics_data)
        except Exception as exc:  # noqa: BLE001 - an export must never raise
            self.stats.failed_exports += 1
            self._warn("export", f"metric export failed: {exc!r}")
            return False
        finally:
            self._lock.release()

    def shutdown(self, timeout_seconds: float = 30.0) -> None:
        """Stop exporting and finish the run if this path started it and is its last holder.
        Idempotent; waits at most ``timeout_seconds`` for an export in progress."""
        acquired = self._lock.acquire(timeout=max(0.0, timeout_seconds))
        try:
            if self._shutdown:
                return
            self._shutdown = True
        finally:
            if acquired:
                self._lock.release()
        self._sink.release()

    def memory(self) -> ConverterMemory:
        """What this path remembers of what it logged (points, counter totals, delta
        intervals). A process taking over its run's metrics passes it to :meth:`recall`, so a
        point sent again or replayed is not logged twice (the receiver and the offload writer
        keep it beside their spool)."""
        with self._lock:
            return self._converter.memory()

    def recall(self, memory: ConverterMemory) -> None:
        """Take over what a path of this run remembered before (see :meth:`memory`)."""
        with self._lock:
            self._converter.recall(memory)

    def follow_steps(self, latest: Callable[[], int | None]) -> None:
        """Take step-less points to ``latest()`` (a run engine's own step memory: in a writer or
        the receiver each run keeps its own) rather than this process's latest step."""
        self._latest_step = latest

    def _export(self, metrics_data: MetricsData) -> bool:
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
        ok = True
        logged_any = False
        for step in sorted(conversion.by_step):
            values = conversion.by_step[step]
            payload = {key: self._value(key, v) for key, v in values.items()}
            payload = {key: v for key, v in payload.items() if v is not None}
            if self.skip_stored:
                stored = self._stored_values()
                kept = {k: v for k, v in payload.items() if stored.get((step, k), _NONE) != v}
                stats.skipped_resent += len(payload) - len(kept)
                payload = kept
                if not payload:
                    continue
            try:
                self._sink.log(payload, step)
            except Exception as exc:  # noqa: BLE001
                stats.failed_exports += 1
                stats.values_lost += len(values)
                self._warn("log", f"trackio log at step {step} failed: {exc!r}")
                ok = False
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
                ok = False
        return ok

    def _stored_values(self) -> dict[tuple[int, str], Any]:
        """The run's stored metric values by (step, key), read once (what ``skip_stored``
        compares with; empty when storage cannot be read)."""
        if self._stored is None:
            self._stored = stored_metric_values(self._sink)
        return self._stored

    def _value(self, key: str, value: Any) -> Any:
        from otel_trackio._core.metric_convert import Distribution

        if not isinstance(value, Distribution):
            return value
        try:
            return histogram(value.counts, value.edges)
        except Exception as exc:  # noqa: BLE001 - a bad distribution must not cost the scalars
            self._warn("distribution", f"could not build the distribution {key!r}: {exc!r}")
            return None

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
