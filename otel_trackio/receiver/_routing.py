"""Routing decoded OTLP data into the same pipeline the in-process exporters use.

One span :class:`~otel_trackio._pipeline.TracePipeline` (which also takes GenAI log events) +
:class:`TrackioMetricExporter` pair per (project, run), created lazily; both share one Trackio
run. Everything here blocks (Trackio calls), so the HTTP layer calls it from worker threads,
never on the event loop.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.metrics.export import MetricExportResult

from .._open_samples import OpenSampleRegistry
from .._pipeline import TracePipeline, grace_seconds
from .._trackio import TrackioSink
from ..metric_exporter import TrackioMetricExporter
from ..settings import TrackioSettings, split_options
from ._decode import DecodedLogs, DecodedMetrics, DecodedSpans, Route

_logger = logging.getLogger("otel_trackio.receiver")


class ReceiverUnavailable(RuntimeError):
    """The pipeline is shutting down or could not take the data; the client may retry."""


@dataclass(slots=True)
class Outcome:
    """What became of one request's items: how many were rejected, and why."""

    rejected: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def message(self) -> str:
        """The ``partial_success.error_message`` text ("" when all went well)."""
        return "; ".join(self.problems)


@dataclass(slots=True)
class ReceiverStats:
    """Counters of the receiver as a whole (exporter counters are summed on demand)."""

    requests: int = 0
    spans_received: int = 0
    points_received: int = 0
    log_records_received: int = 0
    log_events_received: int = 0
    rejected_items: int = 0
    rejected_requests: int = 0


class _Destination:
    """Where one (project, run) goes: its span pipeline and its metric exporter."""

    def __init__(self, settings: TrackioSettings) -> None:
        sink = TrackioSink(settings.project, settings.name, init_kwargs=settings.init_kwargs)
        # OTLP carries ended spans only: no open sample roots are known here.
        self.spans = TracePipeline(
            settings,
            sink,
            grace_seconds=grace_seconds(settings, receiver=True),
            open_samples=OpenSampleRegistry(),
        )
        try:
            self.metrics = TrackioMetricExporter(settings.project, settings.name, settings=settings)
        except BaseException:
            self.spans.close()
            raise
        self.closed = False

    def shutdown(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.spans.close()  # logs open samples as partial
        self.metrics.shutdown()  # the last holder of the run finishes it


class Router:
    """Decoded spans and metrics → per-(project, run) pipelines → Trackio.

    Args:
        project, name: the server's own Trackio project and run, used when a request's resource
            carries no ``trackio.project`` / ``trackio.run``.
        settings: settings of every route (project and name set per route).
        max_routes: at most this many (project, run) routes; data for more is rejected.
        **options: settings by name, or ``trackio.init`` keywords for every run it starts.
    """

    def __init__(
        self,
        project: str,
        name: str | None = None,
        *,
        settings: TrackioSettings | None = None,
        max_routes: int = 64,
        **options: Any,
    ) -> None:
        self.settings = split_options(options, settings)
        self.project = project
        self.name = name
        self.max_routes = max_routes
        self._routes: dict[tuple[str, str | None], _Destination] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.stats = ReceiverStats()
        self._stats_lock = threading.Lock()
        self.default = self._route_for((project, name))

    # -- routing -------------------------------------------------------------------------------

    @property
    def run_name(self) -> str:
        """The name of the server's own run (Trackio picks one when none was given)."""
        return str(self.default.spans.sink.run_name)

    def _key(self, target: Route) -> tuple[str, str | None]:
        project, run = target
        return (project or self.project, run or self.name)

    def _route_for(self, key: tuple[str, str | None]) -> _Destination:
        with self._lock:
            if self._closed:
                raise ReceiverUnavailable("the receiver is shutting down")
            route = self._routes.get(key)
            if route is not None:
                return route
            if len(self._routes) >= self.max_routes:
                raise OverflowError(
                    f"too many Trackio runs ({self.max_routes}); trackio.project/trackio.run "
                    f"{key[0]!r}/{key[1]!r} refused"
                )
            # A fresh context: no user run is "active" here, and trackio.init's context
            # variables stay out of the worker thread that happens to build the route.
            settings = self.settings.with_options(project=key[0], name=key[1])
            route = contextvars.Context().run(_Destination, settings)
            self._routes[key] = route
            if self._routes.get((self.project, self.name)) is not route:
                _logger.info("otel-trackio: new route → project %r, run %r", key[0], key[1])
            return route

    def _resolve(self, target: Route, items: int, outcome: Outcome) -> _Destination | None:
        try:
            return self._route_for(self._key(target))
        except ReceiverUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - a bad route must not fail the whole request
            outcome.rejected += items
            outcome.problems.append(f"{items} items rejected: {exc}")
            return None

    # -- data ------------------------------------------------------------------------------

    def export_spans(self, decoded: DecodedSpans) -> Outcome:
        """Hand each route's span records to its span exporter. Blocking."""
        outcome = Outcome(decoded.rejected, list(decoded.problems))
        for target, records in decoded.by_route.items():
            route = self._resolve(target, len(records), outcome)
            if route is None:
                continue
            if not route.spans.add(records):
                if self._closed:
                    raise ReceiverUnavailable("the receiver is shutting down")
                outcome.problems.append(
                    "some samples could not be logged to Trackio (see the receiver's log)"
                )
        self._count(spans=decoded.accepted, rejected=outcome.rejected)
        return outcome

    def export_logs(self, decoded: DecodedLogs) -> Outcome:
        """Hand each route's GenAI log events to its pipeline, where they join their samples;
        other log records are only counted. Blocking."""
        outcome = Outcome(decoded.rejected, list(decoded.problems))
        events = 0
        for target, records in decoded.by_route.items():
            route = self._resolve(target, len(records), outcome)
            if route is None:
                continue
            events += len(records)
            if not route.spans.add_events(records):
                if self._closed:
                    raise ReceiverUnavailable("the receiver is shutting down")
                outcome.problems.append(
                    "some samples could not be logged to Trackio (see the receiver's log)"
                )
        self._count(logs=decoded.accepted, events=events, rejected=outcome.rejected)
        return outcome

    def export_metrics(self, decoded: DecodedMetrics) -> Outcome:
        """Hand each route's ``MetricsData`` to its metric exporter. Blocking."""
        outcome = Outcome(decoded.rejected, list(decoded.problems))
        for target, data in decoded.by_route.items():
            points = sum(
                len(m.data.data_points)
                for rm in data.resource_metrics
                for sm in rm.scope_metrics
                for m in sm.metrics
            )
            route = self._resolve(target, points, outcome)
            if route is None:
                continue
            if route.metrics.export(data) is not MetricExportResult.SUCCESS:
                if self._closed:
                    raise ReceiverUnavailable("the receiver is shutting down")
                outcome.problems.append(
                    "some metric values could not be logged to Trackio (see the receiver's log)"
                )
        self._count(points=decoded.accepted, rejected=outcome.rejected)
        return outcome

    def count_refused(self) -> None:
        """Count a request refused before decoding (bad token, size, type, body)."""
        with self._stats_lock:
            self.stats.requests += 1
            self.stats.rejected_requests += 1

    def _count(
        self, spans: int = 0, points: int = 0, logs: int = 0, events: int = 0, rejected: int = 0
    ) -> None:
        with self._stats_lock:
            self.stats.requests += 1
            self.stats.spans_received += spans
            self.stats.points_received += points
            self.stats.log_records_received += logs
            self.stats.log_events_received += events
            self.stats.rejected_items += rejected

    # -- housekeeping ----------------------------------------------------------------------

    def totals(self) -> dict[str, int]:
        """Counters for the summary line: received, logged and rejected so far."""
        routes = self._open_routes(include_closed=True)
        with self._stats_lock:
            stats = dataclasses.replace(self.stats)
        return {
            "spans": stats.spans_received,
            "points": stats.points_received,
            "log_records": stats.log_records_received,
            "log_events": stats.log_events_received,
            "log_events_unsampled": sum(p.spans.assembler.unsampled_events_dropped for p in routes),
            "samples": sum(p.spans.stats.samples_logged for p in routes),
            "partial": sum(p.spans.stats.partial_samples for p in routes),
            "waiting": sum(p.spans.assembler.held_samples for p in routes),
            "metrics": sum(p.metrics.stats.values_logged for p in routes),
            "rejected": stats.rejected_items + stats.rejected_requests,
            "runs": len(routes),
        }

    def _open_routes(self, include_closed: bool = False) -> list[_Destination]:
        with self._lock:
            return [p for p in self._routes.values() if include_closed or not p.closed]

    def shutdown(self) -> None:
        """Log every open sample as partial and finish every run the receiver started.

        Idempotent; later requests get :class:`ReceiverUnavailable`.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            routes = list(self._routes.values())
        for route in routes:
            try:
                route.shutdown()
            except Exception as exc:  # noqa: BLE001 - finish the other runs anyway
                _logger.warning("otel-trackio: shutting down a route failed: %r", exc)


class Summary:
    """Formats the periodic one-line summary; silent while no data flows."""

    def __init__(self, router: Router, clock: Callable[[], float] = time.monotonic) -> None:
        self._router = router
        self._clock = clock
        self._last = router.totals()
        self._last_time = clock()

    def line(self) -> str | None:
        """The summary since the previous call, or None when nothing happened."""
        now = self._clock()
        totals = self._router.totals()
        previous, elapsed = self._last, max(now - self._last_time, 1e-9)
        self._last, self._last_time = totals, now
        if totals == previous:
            return None
        rate = (totals["spans"] - previous["spans"]) / elapsed
        return (
            f"otel-trackio: {rate:.1f} spans/s, {totals['samples']} samples logged "
            f"({totals['partial']} partial, {totals['waiting']} in their grace period), "
            f"{totals['log_events']} GenAI log events of {totals['log_records']} log records, "
            f"{totals['metrics']} metrics logged, "
            f"{totals['rejected']} rejected, {totals['runs']} run(s)"
        )
