"""Routing OTLP data through the spool into the same run engine the in-process exporters use.

A request's spans, GenAI log events and metrics are validated and decoded by the HTTP layer, then
*appended to the receiver's spool* and answered at once; a drain thread feeds the spool into one
span :class:`~otel_trackio._engine.run.RunEngine` per (project, run) — its span pipeline (where log
events join their spans) and metric path share one Trackio run —, created lazily (the route
table). So a client never waits for Trackio, and when the spool is at its bound — or the drain is
stalled because Trackio's storage or the checkpoint cannot be written — the request is refused
with 503 and ``Retry-After`` (OTLP exporters retry) instead of being acknowledged. A request's
entries for several routes are appended as one unit: all kept, or none. What is not drained at
shutdown stays in the spool and the next start with the same spool finishes it.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2

from otel_trackio._codec import spool as codec
from otel_trackio._codec.otlp import DecodedLogs, DecodedMetrics, DecodedSpans, decode_metrics
from otel_trackio._codec.routes import Route
from otel_trackio._core.records import SpanRecord
from otel_trackio._engine.pipeline import TracePipeline
from otel_trackio._engine.report import RunSummary
from otel_trackio._engine.run import RunEngine
from otel_trackio._engine.stats import ExportStats
from otel_trackio._engine.warn import Warnings
from otel_trackio._plan import Role, plan_run
from otel_trackio._settings import TrackioSettings, split_options
from otel_trackio._spool.decoded import DecodedEntries
from otel_trackio._spool.drain import Drainer, leave_to_the_spool
from otel_trackio._spool.paths import receiver_spool, remove_spool, spool_root
from otel_trackio._spool.segments import Producer, SpoolFull, holds_segments
from otel_trackio._trackio.installed import trackio_dir
from otel_trackio._trackio.store import TraceStore
from otel_trackio._wiring import build_engine, observe
from otel_trackio.receiver._errors import ReceiverBusy, ReceiverUnavailable, RoutesExhausted
from otel_trackio.receiver._in_flight import RequestsInFlight
from otel_trackio.receiver._limits import DEFAULT_LIMITS, ROOM_IDLE_SECONDS
from otel_trackio.receiver._names import printable_name
from otel_trackio.receiver._run_names import RunNames
from otel_trackio.receiver._stats import Outcome, ReceiverStats, ReceiverTotals, refusal_reason

_logger = logging.getLogger("otel_trackio.receiver")

Key = tuple[str, str | None]
"""(project, requested run name) of a route."""
_T = TypeVar("_T")


def _spooled_metrics(request: bytes) -> list[Any]:
    """A spooled metrics request (one route's part) as SDK ``MetricsData``."""
    message = metrics_service_pb2.ExportMetricsServiceRequest.FromString(request)
    return list(decode_metrics(message).by_route.values())


@dataclass(frozen=True, slots=True)
class RetiredRoute:
    """What a route closed while idle had done (its engine, and its memory, are gone)."""

    project: str
    run: str
    stats: ExportStats
    resent: int
    unsampled_events: int
    metrics_logged: int

    @classmethod
    def of(cls, route: RunEngine) -> RetiredRoute:
        """The counters of a closed route."""
        assembler = route.spans.assembler
        return cls(
            route.sink.project,
            route.sink.run_name,
            dataclasses.replace(route.stats),
            assembler.resent,
            assembler.unsampled_events_dropped,
            route.metrics.stats.values_logged if route.metrics else 0,
        )

    def plus(self, before: RetiredRoute | None) -> RetiredRoute:
        """These counters added to those of an earlier closing of the same run."""
        if before is None:
            return self
        return RetiredRoute(
            self.project,
            self.run,
            ExportStats.total([before.stats, self.stats]),
            before.resent + self.resent,
            before.unsampled_events + self.unsampled_events,
            before.metrics_logged + self.metrics_logged,
        )


def _quiet(route: RunEngine) -> bool:
    """Nothing waits in the route: no span buffered or held, no log event, nothing unwritten."""
    return route.spans.assembler.buffered_spans == 0 and route.spans.unwritten_samples == 0


def _route_engine(settings: TrackioSettings, store: TraceStore) -> RunEngine:
    """The run engine of one route: spans, GenAI log events and metrics of one Trackio run,
    its Traces written by ``store``. A named run it continues is made to exist first (the plan's
    ``continue_by_name``), so receivers that start together with one name all continue that one
    run."""
    plan = plan_run(settings, observe(settings, role=Role.RECEIVER))
    return build_engine(plan, store=store, decode_metrics=_spooled_metrics)


class Router:
    """OTLP data → the spool → per-(project, run) pipelines → Trackio.

    Args:
        project, name: the server's own Trackio project and run, used when a request's resource
            carries no ``trackio.project`` / ``trackio.run``.
        settings: settings of every route (project and name set per route).
        spool: the spool directory (default :func:`receiver_spool`); entries left in it by an
            earlier run of the receiver are drained first.
        max_routes: at most this many (project, run) routes (the server's own included); data
            for a new one past it is refused with :class:`RoutesExhausted` (503, retryable),
            and the quiet route used least recently is closed to make room.
        route_idle_seconds: a route that got nothing for this long, nothing waiting in it, is
            closed (see :meth:`close_idle_routes`); None: never.
        stored_once: metric values a run has stored already are not logged again (data read
            again, ``otel-trackio ingest`` of a file ingested before; spans are always looked
            up in the steps already stored).
        **options: settings by name, or ``trackio.init`` keywords for every run it starts.
    """

    def __init__(
        self,
        project: str,
        name: str | None = None,
        *,
        settings: TrackioSettings | None = None,
        spool: Path | str | None = None,
        max_routes: int = DEFAULT_LIMITS.max_routes,
        route_idle_seconds: float | None = DEFAULT_LIMITS.route_idle_seconds,
        stored_once: bool = False,
        **options: Any,
    ) -> None:
        chosen = split_options(options, settings)
        self._stored_once = stored_once
        # A named run is continued when it exists (--name of an existing run resumes it), and
        # so are the runs of spooled data left by an unclean stop (see RunNames).
        if chosen.resume is None:
            chosen = dataclasses.replace(chosen, resume="allow")
        self.settings = chosen
        self.project = project
        self.name = name
        self.max_routes = max_routes
        self.route_idle_seconds = route_idle_seconds
        self._last_used: dict[Key, float] = {}  # when (monotonic) data last named each route
        # What closed routes did, by (project, run), for the summaries.
        self._retired: dict[tuple[str, str], RetiredRoute] = {}
        self._room_wanted = False  # a new route was refused: close the least recent quiet one
        self._idle_checked = 0.0
        self.spool_path = Path(spool) if spool else receiver_spool(chosen, project, name)
        self._routes: dict[Key, RunEngine] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.stats = ReceiverStats()
        self._stats_lock = threading.Lock()
        self._warn = Warnings(every_seconds=60.0)
        # Data left by an earlier start that did not stop cleanly belongs to that start's runs:
        # resume them. Otherwise a start without --name is a fresh run.
        self.resumed = holds_segments(self.spool_path)
        # The requests the app is taking; the drain reads them to settle the pipelines.
        self.in_flight = RequestsInFlight()
        self.producer = Producer(
            self.spool_path, int(chosen.spool_max_mb * 1024 * 1024), fsync=chosen.spool_fsync
        )
        # The span entries appended here are kept decoded for the drain until it takes them.
        self.decoded = DecodedEntries()
        # Every route's Traces are written in this process of their own, beside the drain. It
        # starts now, afresh (not forked: gRPC is loaded here); until it has imported Trackio,
        # Traces are written on the drain thread.
        self._store = TraceStore(trackio_dir())
        self._store.start(fork=False)
        try:
            self._names = RunNames(self.spool_path, resume=self.resumed)
            self.default = self._route_for((project, name))
            self._drainer = Drainer(
                self.spool_path,
                self._drain_target,
                fsync=chosen.spool_fsync,
                receiving=self.in_flight.oldest,
                between_cycles=self.close_idle_routes,
                earlier_runs=self._earlier_runs,
                decoded=self.decoded,
            )
        except BaseException:
            self.producer.close()
            self._store.close()
            raise
        self._stop_draining = threading.Event()
        self._drain_thread = threading.Thread(
            target=self._drainer.run,
            args=(self._stop_draining,),
            name="otel-trackio-drain",
            daemon=True,
        )
        self._drain_thread.start()

    # -- routing -------------------------------------------------------------------------------

    @property
    def run_name(self) -> str:
        """The name of the server's own run (Trackio picks one when none was given)."""
        return str(self.default.sink.run_name)

    def _key(self, target: Route) -> Key:
        """The route of a request part; client-chosen names made safe to print."""
        project, run = target
        return (
            printable_name(project) if project else self.project,
            printable_name(run) if run else self.name,
        )

    def _earlier_runs(self, pipeline: TracePipeline) -> tuple[str, ...]:
        """The runs earlier starts of this spool made for a route Trackio names (see
        :class:`RunNames`): a request sent again to this start may be stored there already."""
        sink = pipeline.sink
        return self._names.earlier(sink.project) if sink.requested_name is None else ()

    def _remember_name(self, key: Key, destination: RunEngine) -> None:
        if key[1] is None:
            self._names.remember(key[0], destination.sink.run_name)

    def _route_for(self, key: Key, *, accepting: bool = True) -> RunEngine:
        """The destination of ``key``, created on first use. ``accepting``: for new data, which
        a closing receiver refuses (the drain thread still places data it accepted before)."""
        with self._lock:
            if accepting and self._closed:
                raise ReceiverUnavailable("the receiver is shutting down")
            self._last_used[key] = time.monotonic()
            route = self._routes.get(key)
            if route is not None:
                return route
            if accepting and len(self._routes) >= self.max_routes:  # spooled data: always
                self._room_wanted = True
                self._last_used.pop(key, None)
                message = (
                    f"all {self.max_routes} routes are in use (--max-routes); "
                    f"trackio.project/trackio.run {key[0]!r}/{key[1]!r} refused, retry later"
                )
                self._warn(
                    "routes exhausted",
                    f"{message} (the client retries; a larger --max-routes takes it)",
                )
                raise RoutesExhausted(message)
            name = key[1] if key[1] is not None else self._names.get(key[0])
            settings = self.settings.with_options(project=key[0], name=name)
            # A fresh context: no user run is "active" here, and trackio.init's context
            # variables stay out of the worker thread that happens to build the route.
            route = contextvars.Context().run(_route_engine, settings, self._store)
            if self._stored_once and route.metrics is not None:
                route.metrics.skip_stored = True
            self._routes[key] = route
            self._remember_name(key, route)
            if key != (self.project, self.name):
                _logger.info("otel-trackio: new route → project %r, run %r", key[0], key[1])
            return route

    def close_idle_routes(self, now: float | None = None) -> int:
        """Close the routes that got no data for ``route_idle_seconds`` and have nothing waiting
        (no span buffered or held, nothing unwritten): their runs are finished and their memory
        freed; data for one later opens it again and continues the same run. When a new route
        was refused for want of room, the quiet route used least recently (idle for at least
        :data:`ROOM_IDLE_SECONDS`) goes too. The server's own route stays. The drain thread
        calls this between its cycles (nothing is being handed to the routes then), at most once
        a second unless room is wanted; returns how many were closed."""
        now = time.monotonic() if now is None else now
        if now - self._idle_checked < 1.0 and not self._room_wanted:
            return 0
        self._idle_checked = now
        with self._lock:
            if self._closed:
                return 0
            quiet = sorted(
                (
                    (self._last_used.get(key, now), key)
                    for key, route in self._routes.items()
                    if route is not self.default and _quiet(route)
                ),
                key=lambda used_key: used_key[0],
            )
            idle = self.route_idle_seconds
            closing = [k for used, k in quiet if idle is not None and now - used >= idle]
            if self._room_wanted and not closing:
                closing = [k for used, k in quiet[:1] if now - used >= ROOM_IDLE_SECONDS]
            self._room_wanted = False
            routes = [(key, self._routes.pop(key)) for key in closing]
            for key in closing:
                self._last_used.pop(key, None)
        for key, route in routes:
            self._drainer.forget(route.spans)
            try:
                route.shutdown()
            except Exception as exc:  # noqa: BLE001 - close the other routes anyway
                _logger.warning("otel-trackio: closing an idle route failed: %r", exc)
            done = RetiredRoute.of(route)
            with self._lock:
                before = self._retired.get((done.project, done.run))
                self._retired[(done.project, done.run)] = done.plus(before)
            _logger.info(
                "otel-trackio: route → project %r, run %r idle: closed (new data opens it again)",
                key[0],
                route.sink.run_name,
            )
        return len(routes)

    def _resolve(self, target: Route, items: int, outcome: Outcome) -> Key | None:
        """The route's key once its destination exists; None (items rejected) when it cannot."""
        key = self._key(target)
        try:
            self._route_for(key)
        except ReceiverUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - a bad route must not fail the whole request
            outcome.rejected += items
            outcome.problems.append(f"{items} items rejected: {exc}")
            return None
        return key

    def _resolve_all(self, items: dict[Route, int], outcome: Outcome) -> dict[Route, Key | None]:
        """:meth:`_resolve` for every route of a request before any of it is spooled, so a
        refused route (503) never follows an appended one the client would send again."""
        return {target: self._resolve(target, n, outcome) for target, n in items.items()}

    def _drain_target(self, route: Route) -> RunEngine | None:
        project, name = route
        if project is None:
            return None
        try:
            return self._route_for((project, name), accepting=False)
        except Exception as exc:  # noqa: BLE001 - an unknown route left in the spool
            _logger.warning("otel-trackio: spooled data for %r dropped: %s", route, exc)
            return None

    # -- data ------------------------------------------------------------------------------

    def _append(self, entries: list[tuple[int, bytes]]) -> None:
        """Spool one request's entries, all or none; refuse (503) while the drain is stalled:
        what is acknowledged then would wait behind a failure nobody can fix by retrying."""
        stalled = self._drainer.stalled
        if stalled is not None:
            with self._stats_lock:
                self.stats.refused_busy += 1
            raise ReceiverBusy(f"the receiver cannot store data now ({stalled}), retry later")
        if not entries:
            return
        try:
            self.producer.append_all(entries)
        except SpoolFull as exc:
            with self._stats_lock:
                self.stats.refused_busy += 1
            raise ReceiverBusy(f"the receiver's spool is full, retry later ({exc})") from None
        except (OSError, RuntimeError) as exc:
            raise ReceiverUnavailable(f"the receiver cannot spool this request: {exc!r}") from None

    def export_spans(self, decoded: DecodedSpans) -> Outcome:
        """Spool each route's span records (one unit); the drain thread logs them. Raises
        :class:`ReceiverBusy` when the spool is full or the drain stalled."""
        outcome = Outcome(decoded.rejected, list(decoded.problems))
        parts = {t: (len(r), r) for t, r in decoded.by_route.items()}
        self._spool_routes(
            parts, codec.SPANS, codec.encode_records, outcome, keep=self._keep_decoded
        )
        self._count(spans=decoded.accepted, rejected=outcome.rejected)
        return outcome

    def export_logs(self, decoded: DecodedLogs) -> Outcome:
        """Spool each route's GenAI log events (the drain thread joins them to their samples);
        other log records are only counted."""
        outcome = Outcome(decoded.rejected, list(decoded.problems))
        parts = {t: (len(r), r) for t, r in decoded.by_route.items()}
        events = self._spool_routes(parts, codec.EVENTS, codec.encode_events, outcome)
        self._count(logs=decoded.accepted, events=events, rejected=outcome.rejected)
        return outcome

    def export_metrics(self, decoded: DecodedMetrics) -> Outcome:
        """Spool each route's part of a metrics request; the drain thread logs it."""
        outcome = Outcome(decoded.rejected, list(decoded.problems))
        parts = {t: (decoded.points.get(t, 0), part) for t, part in decoded.parts.items()}
        self._spool_routes(
            parts, codec.METRICS, lambda part, key: codec.encode_metrics(key, part), outcome
        )
        self._count(points=decoded.accepted, rejected=outcome.rejected)
        return outcome

    def _spool_routes(
        self,
        parts: Mapping[Route, tuple[int, _T]],
        kind: int,
        encode: Callable[[_T, Key], bytes],
        outcome: Outcome,
        keep: Callable[[bytes, _T, Key], bool] | None = None,
    ) -> int:
        """Resolve each route of a request (``parts``: its item count and its data), encode the
        data of every route taken as one spool entry each, and append them as one unit; the
        items of the routes taken. ``keep``: offered each entry's data as it is, for the drain
        (see :class:`~otel_trackio._spool.decoded.DecodedEntries`)."""
        keys = self._resolve_all({target: count for target, (count, _) in parts.items()}, outcome)
        entries = []
        kept: list[bytes] = []
        taken = 0
        for target, (count, data) in parts.items():
            key = keys[target]
            if key is not None:
                taken += count
                payload = encode(data, key)
                entries.append((kind, payload))
                if keep is not None and keep(payload, data, key):
                    kept.append(payload)
        try:
            self._append(entries)
        except BaseException:
            for payload in kept:
                self.decoded.forget(payload)
            raise
        return taken

    def _keep_decoded(self, payload: bytes, records: list[SpanRecord], key: Key) -> bool:
        return self.decoded.keep(payload, (key, records))

    def count_refused(self, status: int, why: str | None = None) -> None:
        """Count a request refused before decoding (bad token, size, type, body) by the HTTP
        status it was answered (a gRPC call's maps to one), or ``why`` when it got none; 503
        is refused for now (the body budget), the client retries."""
        with self._stats_lock:
            self.stats.requests += 1
            if status == 503:
                self.stats.refused_busy += 1
            else:
                self.stats.rejected_requests += 1
                self.stats.refused_why[why or refusal_reason(status)] += 1

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

    @property
    def stalled(self) -> str | None:
        """Why the drain does not move on (``... no space left on <folder>``), or None."""
        return self._drainer.stalled

    def backlog(self) -> tuple[int, float | None]:
        """(bytes spooled but not yet handed to the pipelines, seconds the oldest has waited)."""
        return self._drainer.backlog()

    def drained(self) -> bool:
        """True when everything spooled was handed to the pipelines and what they logged is
        in Trackio's storage (no write is failing)."""
        if self._drainer.stalled is not None:
            return False
        if any(route.spans.unwritten_samples for route in self._open_routes()):
            return False
        return self._drainer.backlog()[0] == 0

    def wait_drained(self, timeout_seconds: float) -> bool:
        """Wait up to ``timeout_seconds`` for :meth:`drained`; True once it was seen (it may
        not last: a sample held in a pipeline is logged later, and written)."""
        deadline = time.monotonic() + max(0.0, timeout_seconds)
        while not self.drained():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    def totals(self) -> ReceiverTotals:
        """Counters for the summary line: received, logged, waiting and rejected so far."""
        routes = self._open_routes(include_closed=True)
        with self._lock:
            retired = list(self._retired.values())
        spans = ExportStats.total([*(p.spans.stats for p in routes), *(r.stats for r in retired)])
        with self._stats_lock:
            stats = dataclasses.replace(self.stats)
        waiting, behind = self.backlog()
        return ReceiverTotals(
            requests=stats.requests,
            spans=stats.spans_received,
            points=stats.points_received,
            log_records=stats.log_records_received,
            log_events=stats.log_events_received,
            log_events_unsampled=sum(p.spans.assembler.unsampled_events_dropped for p in routes)
            + sum(r.unsampled_events for r in retired),
            samples=spans.samples_logged,
            partial=spans.partial_samples,
            lost=spans.samples_lost,
            retried=spans.samples_retried,
            retried_writes=spans.failed_writes + self._drainer.stats.failed_checkpoints,
            already_stored=spans.already_stored,
            unusable_steps=spans.unusable_steps,
            resent=sum(p.spans.assembler.resent for p in routes) + sum(r.resent for r in retired),
            unwritten=sum(p.spans.unwritten_samples for p in routes),
            torn_entries=self._drainer.stats.torn_entries,
            waiting=sum(p.spans.assembler.held_samples for p in routes),
            metrics=sum(p.metrics.stats.values_logged for p in routes if p.metrics)
            + sum(r.metrics_logged for r in retired),
            rejected=stats.rejected_items + stats.rejected_requests,
            rejected_why=rejected_why(stats),
            busy=stats.refused_busy,
            backlog_spans=max(0, stats.spans_received - self._drainer.stats.spans),
            backlog_bytes=waiting,
            behind_seconds=round(behind, 1) if behind is not None and waiting else 0.0,
            runs=len(routes),
        )

    def run_summaries(self) -> list[RunSummary]:
        """What each run (route) logged, as the end-of-run summary says it (a route closed while
        idle and opened again: one run, its counters summed)."""
        with self._lock:
            retired = list(self._retired.values())
        by_run: dict[tuple[str, str], list[ExportStats]] = {}
        for r in retired:
            by_run.setdefault((r.project, r.run), []).append(r.stats)
        for route in self._open_routes(include_closed=True):
            by_run.setdefault((route.sink.project, route.sink.run_name), []).append(route.stats)
        return [
            RunSummary(project, run, ExportStats.total(parts))
            for (project, run), parts in by_run.items()
        ]

    def _open_routes(self, include_closed: bool = False) -> list[RunEngine]:
        with self._lock:
            return [p for p in self._routes.values() if include_closed or not p.closed]

    def shutdown(self, drain_seconds: float = 30.0) -> bool:
        """Stop taking data, drain the spool for up to ``drain_seconds``, then finish every
        run. When all was drained, open samples are logged as partial; otherwise what is left
        stays in the spool for the next start. Returns True when all was drained. Idempotent;
        later requests get :class:`ReceiverUnavailable`.
        """
        with self._lock:
            if self._closed:
                return self.drained()
            self._closed = True
        deadline = time.monotonic() + max(0.0, drain_seconds)
        if not self.wait_drained(drain_seconds):
            routes = self._open_routes(include_closed=True)
            leave_to_the_spool([route.spans for route in routes], self._store)
        self._stop_draining.set()
        self._drain_thread.join()
        # Drained is not for good: samples the spool had handed over wait in their pipeline
        # (their grace, the next settle) and, once logged, until the store answers. Their
        # writes are waited for too, within the same deadline.
        drained = self.wait_drained(deadline - time.monotonic())
        with self._lock:
            routes = list(self._routes.values())
        for route in routes:
            try:
                route.shutdown(flush=drained)
            except Exception as exc:  # noqa: BLE001 - finish the other runs anyway
                _logger.warning("otel-trackio: shutting down a route failed: %r", exc)
        self._drainer.close()
        self.producer.close()
        self._store.close()
        if drained and not any(route.stats.samples_lost for route in routes):
            # Everything is in Trackio: no segment, lock or runs.json left behind (the next
            # start is a fresh run, which still looks up requests sent again in these runs for
            # a while). After a failed write the spool stays, to be replayed.
            try:
                self._names.keep_as_earlier()
            except OSError as exc:
                _logger.warning(
                    "otel-trackio: cannot keep the names of this start's runs in %s (%r): a "
                    "request sent again to the next start may be stored in its run too",
                    self.spool_path,
                    exc,
                )
            remove_spool(self.spool_path, spool_root(self.settings))
        if not drained:
            waiting, _ = self.backlog()
            _logger.warning(
                "otel-trackio: %d bytes not drained stay in the spool %s; the next start with "
                "this spool (or `otel-trackio drain`) logs them",
                waiting,
                self.spool_path,
            )
        return drained


def rejected_why(stats: ReceiverStats) -> tuple[tuple[str, int], ...]:
    """What the rejections were, most first: refused requests by status, then items."""
    reasons = list(stats.refused_why.items())
    if stats.rejected_items:
        reasons.append(("items of accepted requests", stats.rejected_items))
    return tuple(sorted(reasons, key=lambda reason: (-reason[1], reason[0])))
