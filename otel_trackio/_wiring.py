"""The builder: a :class:`~otel_trackio._plan.RunPlan` made into the parts of one run, in one pass.

Every entry point calls :func:`observe` (what this process already has), then
:func:`~otel_trackio._plan.plan_run` (the decisions, pure), then one builder here:

- :func:`build_spans` — a rollout process's span path: the store process (when Trackio's writes
  run beside this process), the held run, then either the spool and its writer process or the run
  engine in this process. ``configure()``, a hand-built
  :class:`~otel_trackio.TrackioSpanExporter`, the zero-code exporters and ``otel_trackio.verl``.
- :func:`build_engine` — a run engine in this process from its plan: the in-process exporter's,
  a lone :class:`~otel_trackio.TrackioLogExporter`'s, the offload writer's and each of the
  receiver's routes (``otel-trackio serve`` and ``drain``).

Builders decide nothing: what a plan says is built as it says, and its warnings are said once,
here. The rest of the package asks the plan; it never re-derives a decision from the settings.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from otel_trackio._engine.open_samples import OPEN_SAMPLES
from otel_trackio._engine.open_spans import FirstKnown, OpenSpans
from otel_trackio._engine.steps import PROCESS_STEPS
from otel_trackio._environment_variables import OTEL_EXPORTER_TRACKIO_OFFLOAD
from otel_trackio._offload.client import (
    OffloadClient,
    in_writer_process,
    portable,
    writer_environment,
)
from otel_trackio._plan import Role, RunPlan, Situation, TraceWrites
from otel_trackio._settings import TrackioSettings
from otel_trackio._trackio.installed import RunLike, active_run, trackio_dir
from otel_trackio._trackio.runs import (
    held_run,
    open_run_by_name,
    opening_banner,
    seen,
    split_from,
)
from otel_trackio._trackio.sink import TrackioSink
from otel_trackio._trackio.store import PROCESS_STORES, TraceStore

if TYPE_CHECKING:  # the run engine is imported only when spans stay in this process
    from otel_trackio._core.samples import OpenSampleLookup, OpenSpanSource
    from otel_trackio._engine.run import MetricDecoder, RunEngine, Transport

_logger = logging.getLogger("otel_trackio")

_TRACKIO_SERVER_VARIABLES = ("TRACKIO_SERVER_URL", "TRACKIO_SPACE_ID")
"""Trackio's own variables that send a run ``trackio.init`` opens to a server."""


def observe(
    settings: TrackioSettings, *, run: RunLike | None = None, role: Role = Role.ROLLOUT
) -> Situation:
    """What this process already has for a run of ``settings``: the run given, the run active in
    the calling thread, the run this package holds for the same project and name, the offload
    variable, whether the settings can cross to a writer process, whether this is one. Read
    here, on the calling thread (an active run lives in its context), and decided nowhere."""
    return Situation(
        role=role,
        in_writer_process=in_writer_process(),
        settings_stay=portable(settings) if role is Role.ROLLOUT else None,
        given=seen(run),
        active=seen(active_run()),
        held=held_run(settings.project, settings.name),
        trackio_dir=trackio_dir(),
        offload_variable=os.environ.get(OTEL_EXPORTER_TRACKIO_OFFLOAD, ""),
        trackio_server=any(os.environ.get(name) for name in _TRACKIO_SERVER_VARIABLES),
    )


@dataclass(frozen=True)
class SpanWiring:
    """A rollout process's span path, as :func:`build_spans` made it from its plan."""

    plan: RunPlan
    """What was decided."""

    sink: TrackioSink
    """The run: held here, or deferred to the writer process that opens it."""

    open_spans: OpenSpans
    """The spans started and not ended, which a flush shows unfinished in their samples."""

    offload: OffloadClient | None
    """The spool and writer process, when the spans are offloaded."""

    engine: RunEngine | None
    """The run engine in this process, when the spans are not offloaded."""

    @property
    def settings(self) -> TrackioSettings:
        """The plan's settings (``offload`` resolved)."""
        return self.plan.settings

    @property
    def why_in_process(self) -> str | None:
        """Why offload was asked for and not taken (warned once); None otherwise."""
        return self.plan.why_in_process


def say_warnings(plan: RunPlan) -> None:
    """Say what the plan warns about (a fallback that costs the rollout), once per build."""
    for warning in plan.warnings:
        _logger.warning("%s", warning)


def build_spans(
    plan: RunPlan, *, run: RunLike | None = None, open_spans: OpenSpans | None = None
) -> SpanWiring:
    """Make a rollout process's span path as ``plan`` says: the store process first (it imports
    Trackio while the run is opened), the held run, then the spool and its writer process (which
    opens the run unless it is open here) or the run engine in this process.

    Raises what opening the run raises (a run Trackio cannot open), as ``trackio.init`` would.
    """
    say_warnings(plan)
    settings = plan.settings
    open_spans = open_spans if open_spans is not None else OpenSpans()
    store = process_store() if plan.writes is TraceWrites.STORE_PROCESS else None
    sink = hold_run(plan, run=run)
    if plan.offloaded:
        try:
            client = OffloadClient(settings, sink, open_spans, root=plan.spool_root)
        except BaseException:
            sink.release()
            raise
        return SpanWiring(plan, sink, open_spans, client, None)
    engine = build_engine(plan, sink=sink, open_spans=open_spans, store=store)
    return SpanWiring(plan, sink, open_spans, None, engine)


def hold_run(plan: RunPlan, *, run: RunLike | None = None) -> TrackioSink:
    """The run ``plan`` chose, held: made findable by its name first when the plan continues
    it by name (every process opening that name then continues this one run), then opened,
    joined or left to the writer process as the plan says."""
    settings = plan.settings
    if not (plan.continue_by_name and settings.project and settings.name):
        sink = TrackioSink.planned(
            plan.opener,
            settings.project,
            settings.name,
            run=run,
            init_kwargs=settings.init_kwargs,
            defer=plan.offloaded,
        )
    else:
        made = open_run_by_name(settings.project, settings.name)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            sink = TrackioSink.planned(
                plan.opener, settings.project, settings.name, init_kwargs=settings.init_kwargs
            )
        sys.stdout.write(opening_banner(made, printed.getvalue()))
    if not plan.offloaded and plan.role is Role.ROLLOUT:  # (offloaded, the writer says it)
        split = split_from(sink.run)
        if split is not None:
            _logger.warning("otel-trackio: %s", split)
    return sink


#: How long building an in-process engine waits for its store process to take writes (it
#: imports Trackio meanwhile, mostly while the run is opened).
STORE_READY_SECONDS = 30.0


def process_store() -> TraceStore:
    """The store process this process's engines write their Traces through: one per Trackio
    directory, started with the first (afresh, never forked) in the environment a writer process
    gets (it never traces itself), and shared by the others."""
    return PROCESS_STORES.store_for(trackio_dir(), writer_environment())


def build_engine(
    plan: RunPlan,
    *,
    run: RunLike | None = None,
    sink: TrackioSink | None = None,
    open_spans: OpenSpanSource | None = None,
    open_samples: OpenSampleLookup | None = None,
    log_events: bool = False,
    store: TraceStore | None = None,
    decode_metrics: MetricDecoder | None = None,
) -> RunEngine:
    """The run engine of ``plan`` in this process, holding ``sink`` (else the run the plan
    says). In a rollout process it is handed the process's state: its latest step (what
    ``set_step`` sets) and the sample roots open in it (``rollout()`` registers them), read after
    the exporter's own ``open_spans``; in the writer and the receiver, the run's own steps and
    ``open_samples``. Its Traces are written through ``store`` (the writer's or the receiver's),
    else through this process's store process when the plan says so."""
    from otel_trackio._engine.run import build_run_engine

    settings = plan.settings
    rollout = plan.role is Role.ROLLOUT
    if plan.writes is TraceWrites.LOGGING_THREAD:
        store = None  # a run on a Trackio server: Trackio's client sends what it logs
    elif rollout and plan.writes is TraceWrites.STORE_PROCESS:
        store = store if store is not None else process_store()
        if not store.ready(STORE_READY_SECONDS) and not store.given_up:
            _logger.warning(
                "otel-trackio: the Trackio store process is not ready after %.0f s; Traces are "
                "written on the export thread until it is",
                STORE_READY_SECONDS,
            )
    if sink is None:
        sink = hold_run(plan, run=run)
    if rollout:
        open_samples = (
            FirstKnown(open_spans, OPEN_SAMPLES)
            if isinstance(open_spans, OpenSpans)
            else OPEN_SAMPLES
        )
    return build_run_engine(
        settings,
        transport=_TRANSPORTS[plan.role],
        sink=sink,
        open_samples=open_samples,
        open_spans=open_spans,
        steps=PROCESS_STEPS if rollout else None,
        log_events=log_events,
        decode_metrics=decode_metrics,
        store=store,
    )


_TRANSPORTS: dict[Role, Transport] = {
    Role.ROLLOUT: "process",
    Role.WRITER: "offload",
    Role.RECEIVER: "receiver",
}


def metrics_spool(spans: object) -> OffloadClient | None:
    """The spool a metric exporter built after the spans (zero code: ``spans`` is where the
    run's spans go, a spool, a pipeline, or None) sends metrics through, as
    :attr:`~otel_trackio._plan.RunPlan.metrics` says for a plan: the spool while its writer
    process holds the run (nothing opened it here since) and it is still open; else None, and
    metrics are logged straight into the run held here."""
    if not isinstance(spans, OffloadClient) or spans.sink.opened or spans.closed:
        return None
    return spans
