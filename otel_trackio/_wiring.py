"""How one run's telemetry is wired in a rollout process: decided here only.

Three decisions, made once from the settings and the run, for ``configure()``, the zero-code
exporters, a :class:`~otel_trackio.TrackioSpanExporter` built by hand and the verl integration
alike:

- **Offload or not** (:func:`offload_enabled`, :func:`plan_spans`): spans go through a spool to a
  writer process unless ``offload=False`` (or ``OTEL_EXPORTER_TRACKIO_OFFLOAD=false``) says not
  to, or they cannot — settings that cannot cross to another process, a writer process itself,
  a run held here that logs to a server the settings do not name. Falling back to in process is
  warned about, since it costs the rollout more.
- **Where the run is opened**: offloaded, the writer process opens it (this process never
  imports Trackio) unless it is given or already active here; in process, here.
- **Where Trackio's writes run in process** (:func:`in_process_store`): in a store process
  started beside the rollout process, which writes each export's Traces while the next export
  is converted, so Trackio's serialisation and files never hold the rollout's GIL; not for a
  run that logs to a Trackio server (Trackio's client sends those).
- **Where metrics go** (:func:`metrics_spool`): through the spans' spool when the writer holds
  the run, so metrics and spans land in one run with one latest step; else straight into the
  run held here.

The rest of the package asks; it never re-derives these from the settings.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from otel_trackio._engine.open_samples import OPEN_SAMPLES
from otel_trackio._engine.open_spans import FirstKnown, OpenSpans
from otel_trackio._engine.steps import PROCESS_STEPS
from otel_trackio._environment_variables import OTEL_EXPORTER_TRACKIO_OFFLOAD
from otel_trackio._offload.client import OffloadClient, portable, writer_environment
from otel_trackio._settings import TrackioSettings
from otel_trackio._trackio.installed import RunLike, is_remote, trackio_dir
from otel_trackio._trackio.sink import TrackioSink
from otel_trackio._trackio.store import PROCESS_STORES, TraceStore

if TYPE_CHECKING:  # the in-process engine is imported only when spans stay in process
    from otel_trackio._engine.run import RunEngine

_logger = logging.getLogger("otel_trackio")


def offload_enabled(settings: TrackioSettings) -> bool:
    """Whether offload is asked for: the ``offload`` setting; when None, the
    ``OTEL_EXPORTER_TRACKIO_OFFLOAD`` variable; else on.

    On by default because that is what keeps the rollout cheap: in process, the conversion and
    Trackio's writes run on the export thread of the rollout process, taking CPU and the GIL
    from the rollout. A malformed variable raises :class:`~otel_trackio.TrackioConfigError`,
    as every other malformed setting does.
    """
    if settings.offload is not None:
        return settings.offload
    raw = os.environ.get(OTEL_EXPORTER_TRACKIO_OFFLOAD, "").strip()
    if not raw:
        return True
    return bool(TrackioSettings.from_env({OTEL_EXPORTER_TRACKIO_OFFLOAD: raw}).offload)


def with_offload_resolved(settings: TrackioSettings) -> TrackioSettings:
    """``settings`` with ``offload`` set to what :func:`offload_enabled` decides."""
    return dataclasses.replace(settings, offload=offload_enabled(settings))


@dataclass(frozen=True)
class SpanWiring:
    """Where one run's spans go from this process, built by :func:`plan_spans`."""

    settings: TrackioSettings
    """The settings, ``offload`` resolved to what was asked for."""

    sink: TrackioSink
    """The run: held here, or deferred to the writer process that opens it."""

    open_spans: OpenSpans
    """The spans started and not ended, which a flush shows unfinished in their samples."""

    offload: OffloadClient | None
    """The spool and writer process, when the spans are offloaded."""

    engine: RunEngine | None
    """The run engine in this process, when the spans are not offloaded."""

    why_in_process: str | None
    """Why offload was asked for and not taken (warned once); None otherwise."""


def plan_spans(
    settings: TrackioSettings, *, run: RunLike | None = None, open_spans: OpenSpans | None = None
) -> SpanWiring:
    """Decide where spans go and where the run is opened, and build that path: a spool and its
    writer process (which opens the run unless it is given or active here), or the run engine in
    this process.

    Raises what opening the run raises (a run Trackio cannot open), as ``trackio.init`` would.
    """
    settings = with_offload_resolved(settings)
    open_spans = open_spans if open_spans is not None else OpenSpans()
    asked = bool(settings.offload)
    why_not = portable(settings) if asked else None
    # In process for sure: its store process imports Trackio while the run is opened here.
    store = None if asked and why_not is None else in_process_store(settings)
    sink = TrackioSink(
        settings.project,
        settings.name,
        run=run,
        init_kwargs=settings.init_kwargs,
        defer=asked and why_not is None,
    )
    if asked and why_not is None:
        why_not = _why_not_writer_run(settings, sink)
    if asked and why_not is None:
        try:
            client = OffloadClient(settings, sink, open_spans)
        except BaseException:
            sink.release()
            raise
        return SpanWiring(settings, sink, open_spans, client, None, None)
    if why_not is not None:  # said whether asked for or the default: in process costs more
        _logger.warning(
            "otel-trackio: exporting spans in this process, not through an offload writer "
            "process: %s (offload=False says so and silences this)",
            why_not,
        )
    engine = in_process_engine(settings, sink=sink, open_spans=open_spans, store=store)
    return SpanWiring(settings, sink, open_spans, None, engine, why_not)


def in_process_engine(
    settings: TrackioSettings,
    *,
    sink: TrackioSink | None = None,
    open_spans: OpenSpans | None = None,
    log_events: bool = False,
    store: TraceStore | None = None,
) -> RunEngine:
    """A run engine in the rollout process, handed the process's state: its latest step (what
    ``set_step`` sets) and the sample roots open in it (``rollout()`` registers them), read after
    the exporter's own ``open_spans``; its Traces written through ``store`` (default: see
    :func:`in_process_store`)."""
    from otel_trackio._engine.run import build_run_engine

    if store is None:
        store = in_process_store(settings)
    if store is not None and sink is not None and sink.opened and is_remote(sink.run):
        store = None  # a run on a Trackio server: Trackio's client sends what it logs
    if store is not None and not store.ready(STORE_READY_SECONDS) and not store.given_up:
        _logger.warning(
            "otel-trackio: the Trackio store process is not ready after %.0f s; Traces are "
            "written on the export thread until it is",
            STORE_READY_SECONDS,
        )
    return build_run_engine(
        settings,
        sink=sink,
        open_samples=(
            FirstKnown(open_spans, OPEN_SAMPLES) if open_spans is not None else OPEN_SAMPLES
        ),
        open_spans=open_spans,
        steps=PROCESS_STEPS,
        log_events=log_events,
        store=store,
    )


#: How long building an in-process engine waits for its store process to take writes (it
#: imports Trackio meanwhile, mostly while the run is opened).
STORE_READY_SECONDS = 30.0


def in_process_store(settings: TrackioSettings) -> TraceStore | None:
    """The store process in-process engines write their Traces through: this process's one
    for the Trackio directory, started with the first (afresh, never forked) in the
    environment a writer process gets (it never traces itself), and shared by the others.
    None for a run the settings send to a Trackio server."""
    if settings.server_url or settings.space_id:
        return None
    return PROCESS_STORES.store_for(trackio_dir(), writer_environment())


def metrics_spool(spans: object) -> OffloadClient | None:
    """The spool metrics go through so that they follow the spans' run: ``spans`` (where the
    run's spans go: a spool, a pipeline, or None) when it is a spool whose writer process holds
    the run and is still open; None when metrics are logged straight into a run held here."""
    if not isinstance(spans, OffloadClient) or spans.sink.opened or spans.closed:
        return None
    return spans


def _why_not_writer_run(settings: TrackioSettings, sink: TrackioSink) -> str | None:
    """Why the writer process could not log into this run (None when it can): a run held here
    that logs to a server the settings do not name."""
    named = settings.server_url or settings.space_id
    if sink.opened and is_remote(sink.run) and not named:
        return "the run logs to a Trackio server that the settings do not name"
    return None
