"""``configure()``: one call that sends this process's OTel spans, GenAI log events and metrics
to one Trackio run.

OpenTelemetry lets a process set its global tracer, logger and meter providers only once, so the
first ``configure()`` installs providers whose sampler, span processor, log record processor and
metric exporter are *switchable*; each ``configure()`` plugs its own exporters into them, and
``shutdown()`` unplugs them again. Calling ``configure()`` twice therefore never adds a second
exporter: the same project and run return the existing handle, a different one replaces it.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from opentelemetry import _logs as otel_logs
from opentelemetry import context as otel_context
from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.sdk._logs import LoggerProvider, LogRecordProcessor
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import DEFAULT_ON, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes

from otel_trackio._engine.gc_freeze import freeze_setup, no_hold
from otel_trackio._offload.metric_exporter import SpooledMetricExporter
from otel_trackio._plan import MetricRoute, plan_run
from otel_trackio._preemption import PREEMPTION_SECONDS, SigtermStore, store_on_sigterm
from otel_trackio._settings import TrackioSettings, activate, settings_for
from otel_trackio._trackio.installed import RunLike
from otel_trackio._trackio.sink import TrackioSink
from otel_trackio._wiring import build_spans, observe
from otel_trackio.log_exporter import TrackioLogExporter
from otel_trackio.metric_exporter import DEFAULT_TEMPORALITY, TrackioMetricExporter
from otel_trackio.sampling import StepSampler, step_sampler
from otel_trackio.span_exporter import TrackioSpanExporter
from otel_trackio.span_processor import DEEP_QUEUE_SIZE, TrackioSpanProcessor

_logger = logging.getLogger("otel_trackio")


class _SwitchableSampler(Sampler):
    """The global provider's sampler: delegates to the active configuration's sampler.

    The tracer asks its sampler about every span, so the current target's own
    ``should_sample`` is bound on this object: no forwarding call per span.
    """

    def __init__(self) -> None:
        self.target = DEFAULT_ON

    @property
    def target(self) -> Sampler:
        """The sampler that decides (``DEFAULT_ON`` while no configuration sets one)."""
        return self._target

    @target.setter
    def target(self, sampler: Sampler) -> None:
        self._target = sampler
        self.__dict__["should_sample"] = sampler.should_sample

    def should_sample(
        self,
        parent_context: otel_context.Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        """Ask the current target sampler (shadowed by the target's own method, see above)."""
        return self._target.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        """Names the current target."""
        return f"OtelTrackio{{{self._target.get_description()}}}"


class _Processor(Protocol):
    def shutdown(self) -> None: ...

    def force_flush(self, timeout_millis: int = 30000) -> bool: ...


P = TypeVar("P", bound=_Processor)


class _Forwarding(Generic[P]):
    """Shutdown and flush of a switchable processor: forwarded to its current ``target``."""

    target: P | None = None

    def shutdown(self) -> None:
        """The provider is shutting down: shut the current processor down."""
        target = self.target
        if target is not None:
            target.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Flush the current processor."""
        target = self.target
        return True if target is None else target.force_flush(timeout_millis)


class _SwitchableSpanProcessor(_Forwarding[SpanProcessor], SpanProcessor):
    """The global provider's span processor: forwards to the active batch processor, if any.

    The provider calls ``on_start``/``on_end`` for every span, so the current target's own
    methods are bound on this object when it is set: no forwarding call per span.
    """

    def __init__(self) -> None:
        self.target = None

    @property
    def target(self) -> SpanProcessor | None:
        """The processor spans go to (None: nowhere)."""
        return self._target

    @target.setter
    def target(self, processor: SpanProcessor | None) -> None:
        self._target = processor
        self.__dict__["on_start"] = processor.on_start if processor is not None else _not_started
        self.__dict__["on_end"] = processor.on_end if processor is not None else _not_ended

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        """Forward to the current processor (shadowed by its own method, see above)."""
        target = self._target
        if target is not None:
            target.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        """Forward to the current processor (spans end nowhere while nothing is configured)."""
        target = self._target
        if target is not None:
            target.on_end(span)


def _not_started(span: Span, parent_context: otel_context.Context | None = None) -> None:
    """``on_start`` while no configuration is active."""


def _not_ended(span: ReadableSpan) -> None:
    """``on_end`` while no configuration is active: the span goes nowhere."""


class _SwitchableLogProcessor(_Forwarding[LogRecordProcessor], LogRecordProcessor):
    """The global logger provider's processor: forwards to the active batch processor, if any."""

    def on_emit(self, log_record: Any) -> None:
        """Forward to the current processor (records go nowhere while nothing is configured)."""
        target = self.target
        if target is not None:
            target.on_emit(log_record)


class _SwitchableMetricExporter(MetricExporter):
    """The global periodic reader's exporter: forwards to the active metric exporter, if any."""

    def __init__(self) -> None:
        super().__init__(preferred_temporality=dict(DEFAULT_TEMPORALITY))
        self.target: MetricExporter | None = None

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        """Forward to the current exporter; without one the interval's data is dropped."""
        target = self.target
        if target is None:
            return MetricExportResult.SUCCESS
        return target.export(metrics_data, timeout_millis=timeout_millis, **kwargs)

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        """Flush the current exporter."""
        target = self.target
        return True if target is None else target.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        """The reader is shutting down (process exit): shut the current exporter down."""
        target = self.target
        if target is not None:
            target.shutdown(timeout_millis=timeout_millis)


class _Installed:
    """What the first ``configure()`` installed globally, reused by every later one."""

    def __init__(self, resource: Resource | None, metric_export_interval_millis: float) -> None:
        self.sampler = _SwitchableSampler()
        self.span_switch = _SwitchableSpanProcessor()
        self.log_switch = _SwitchableLogProcessor()
        self.metric_switch = _SwitchableMetricExporter()
        self.reader: PeriodicExportingMetricReader | None = None
        self.sampler_applies = False

        current = trace.get_tracer_provider()
        if isinstance(current, TracerProvider):
            # Someone installed an SDK provider first: add our processor to it; its sampler stays.
            self.tracer_provider = current
        elif isinstance(current, trace.ProxyTracerProvider):
            self.tracer_provider = TracerProvider(
                sampler=self.sampler, resource=resource, shutdown_on_exit=False
            )
            trace.set_tracer_provider(self.tracer_provider)
            self.sampler_applies = trace.get_tracer_provider() is self.tracer_provider
        else:
            raise RuntimeError(
                f"otel-trackio: the global tracer provider is a {type(current).__name__}, not the "
                "OTel SDK's; add TrackioSpanExporter to it yourself"
            )
        self.tracer_provider.add_span_processor(self.span_switch)
        self.logger_provider = self._install_logger_provider(resource)

        meter_provider = otel_metrics.get_meter_provider()
        if isinstance(meter_provider, MeterProvider):
            self.meter_provider: MeterProvider | None = None
            _logger.warning(
                "otel-trackio: a MeterProvider is already installed, so configure() cannot add "
                "its metric reader; add PeriodicExportingMetricReader(TrackioMetricExporter("
                "run=handle.run)) to your provider to get metrics"
            )
        else:
            self.reader = PeriodicExportingMetricReader(
                self.metric_switch, export_interval_millis=metric_export_interval_millis
            )
            provider = MeterProvider(
                metric_readers=[self.reader], resource=resource, shutdown_on_exit=False
            )
            otel_metrics.set_meter_provider(provider)
            self.meter_provider = (
                provider if otel_metrics.get_meter_provider() is provider else None
            )

    def _install_logger_provider(self, resource: Resource | None) -> LoggerProvider | None:
        """The SDK logger provider GenAI log events go through: one installed before (our
        processor is added to it), else a new global one; None when another kind is there."""
        current = otel_logs.get_logger_provider()
        if not isinstance(current, LoggerProvider):
            # The API's proxy stands in until a provider is set (GenAI loggers made before
            # follow it); anything else is another library's provider we cannot add to.
            if type(current).__name__ != "ProxyLoggerProvider":
                _logger.warning(
                    "otel-trackio: the global logger provider is a %s, not the OTel SDK's; GenAI "
                    "log events are not sent (add TrackioLogExporter to it yourself)",
                    type(current).__name__,
                )
                return None
            provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
            otel_logs.set_logger_provider(provider)
            current = otel_logs.get_logger_provider()
            if current is not provider:
                return self._install_logger_provider(resource)
        current.add_log_record_processor(self.log_switch)
        return current


_lock = threading.RLock()

_installed: _Installed | None = None
_active: TrackioTelemetry | None = None


class TrackioTelemetry:
    """What :func:`configure` set up: the run, the exporters and the global providers.

    ``shutdown()`` (also run at interpreter exit) flushes spans, then metrics, and only then
    finishes the Trackio run (when ``configure`` started it). Usable as a context manager.
    """

    def __init__(
        self,
        installed: _Installed,
        sink: TrackioSink,
        span_exporter: TrackioSpanExporter,
        span_processor: BatchSpanProcessor,
        log_exporter: TrackioLogExporter | None,
        log_processor: BatchLogRecordProcessor | None,
        metric_exporter: MetricExporter | None,
        sampler: Sampler | None,
        request: _Request,
    ) -> None:
        self._installed = installed
        self._sink = sink
        self._span_processor = span_processor
        self._log_processor = log_processor
        self._sampler = sampler
        self._request = request
        self._lock = threading.Lock()
        self._closed = False
        self._thaw: Callable[[], None] = no_hold  # releases configure()'s hold of gc_freeze
        self._sigterm: SigtermStore | None = None  # stores what was recorded on SIGTERM
        self.span_exporter = span_exporter
        self.log_exporter = log_exporter
        self.metric_exporter = metric_exporter

    @property
    def run(self) -> RunLike:
        """The ``trackio.Run`` spans and metrics go to (log your own metrics to it too). With
        offload the writer process opened it; asking for it opens it here too (importing
        Trackio), joined to the same run."""
        return self._sink.run

    @property
    def _metrics_spooled(self) -> bool:
        """Metrics go through the offload spool: they must be handed over before the spans'
        flush or close entry, which the writer serves in order."""
        return isinstance(self.metric_exporter, SpooledMetricExporter)

    @property
    def settings(self) -> TrackioSettings:
        """The settings this configuration runs with (``offload`` resolved)."""
        return self.span_exporter.settings

    @property
    def tracer_provider(self) -> TracerProvider:
        """The global SDK tracer provider spans go through."""
        return self._installed.tracer_provider

    @property
    def logger_provider(self) -> LoggerProvider | None:
        """The global SDK logger provider GenAI log events go through (None when another kind
        of provider was installed before, or with ``logs=False``)."""
        return self._installed.logger_provider if self._log_processor is not None else None

    @property
    def meter_provider(self) -> MeterProvider | None:
        """The global SDK meter provider, or None when metrics could not be installed."""
        return self._installed.meter_provider

    @property
    def closed(self) -> bool:
        """True once :meth:`shutdown` ran."""
        return self._closed

    def get_tracer(self, name: str = "otel_trackio") -> trace.Tracer:
        """A tracer of the global provider (same as ``opentelemetry.trace.get_tracer``)."""
        return self.tracer_provider.get_tracer(name)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Log everything recorded so far: finished samples, open samples (as partial), metrics."""
        if self._closed:
            return False
        ok = True
        if self._log_processor is not None:  # log events first: they join spans still open
            ok = self._log_processor.force_flush(timeout_millis)
        ok = self._span_processor.force_flush(timeout_millis) and ok
        reader = self._installed.reader if self.metric_exporter is not None else None
        if reader is not None and self._metrics_spooled:  # spooled before the flush entry
            ok = reader.force_flush(timeout_millis) and ok
        ok = self.span_exporter.force_flush(timeout_millis) and ok
        if reader is not None and not self._metrics_spooled:  # after spans: their latest step
            ok = reader.force_flush(timeout_millis) and ok
        return ok

    def shutdown(self, timeout_millis: int = 30000) -> None:
        """Flush spans, then metrics, then finish the run (if ``configure`` started it).

        Idempotent; afterwards spans and metrics go nowhere until ``configure`` is called again.
        """
        global _active
        with self._lock:
            if self._closed:
                return
            self._closed = True
        installed = self._installed
        try:
            # Log events first (they wait in the pipeline for their spans), then spans: the
            # metric exporter places step-less points at the latest span step.
            if self._log_processor is not None:
                if installed.log_switch.target is self._log_processor:
                    installed.log_switch.target = None
                self._log_processor.shutdown()  # type: ignore[no-untyped-call]  # drains, then shuts down
            if installed.span_switch.target is self._span_processor:
                installed.span_switch.target = None
            metrics_flushed = False
            if self._metrics_spooled and installed.reader is not None:
                # Spooled metrics must precede the spool's close entry: the spans' processor
                # is drained first (their steps), then the last metrics, then the spool closed.
                self._span_processor.force_flush(timeout_millis)
                installed.reader.force_flush(timeout_millis)
                metrics_flushed = True
            self._span_processor.shutdown()  # type: ignore[no-untyped-call]  # drains, then shuts down
            if self.metric_exporter is not None:
                if (
                    installed.reader is not None
                    and installed.metric_switch.target is not None
                    and not metrics_flushed
                ):
                    installed.reader.force_flush(timeout_millis)
                if installed.metric_switch.target is self.metric_exporter:
                    installed.metric_switch.target = None
                self.metric_exporter.shutdown(timeout_millis=timeout_millis)
            if self._sampler is not None and installed.sampler.target is self._sampler:
                installed.sampler.target = DEFAULT_ON
        finally:
            if self._sigterm is not None:
                self._sigterm.uninstall()
            self._sink.release()  # finishes the run only when configure() started it
            self._thaw()  # what was alive at configure() is collectable again
            with _lock:
                if _active is self:
                    _active = None
            atexit.unregister(self.shutdown)

    def __enter__(self) -> TrackioTelemetry:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()


@dataclass(frozen=True)
class _Request:
    """What a ``configure()`` call asked for (a later identical call returns the same handle)."""

    settings: TrackioSettings
    run: RunLike | None
    metrics: bool
    logs: bool

    def same_target(self, other: _Request) -> bool:
        if self.run is not None or other.run is not None:
            return self.run is other.run
        return (self.settings.project, self.settings.name) == (
            other.settings.project,
            other.settings.name,
        )


def configure(
    project: str | None = None,
    name: str | None = None,
    *,
    run: RunLike | None = None,
    settings: TrackioSettings | None = None,
    metrics: bool = True,
    logs: bool = True,
    metric_export_interval_millis: float = 10_000,
    resource: Resource | None = None,
    **options: Any,
) -> TrackioTelemetry:
    """Send this process's OTel spans, GenAI log events and metrics to one Trackio run; returns
    the handle.

    Installs global tracer, logger and meter providers (the first time), a
    ``BatchSpanProcessor`` with a :class:`TrackioSpanExporter`, a ``BatchLogRecordProcessor`` with
    a :class:`TrackioLogExporter` (GenAI events sent as log records join their samples) and a
    periodic reader with a :class:`TrackioMetricExporter`, all logging to one run, and a
    per-step sampler when ``max_samples_per_step`` is set. The run is
    found or started by the usual rules (``run=`` / the active run / ``trackio.init``).

    Args:
        project, name: the Trackio project and run.
        run: a ``trackio.Run`` to log into (never finished by otel-trackio).
        settings: a :class:`TrackioSettings`; ``options`` are applied over it.
        metrics: also export OTel metrics to the run.
        logs: also take GenAI events sent as OTel log records (completed samples then wait
            ``LOG_GRACE_SECONDS`` for them unless ``sample_grace_seconds`` is set).
        metric_export_interval_millis: how often metrics are exported (first call decides).
        resource: the OTel resource of the providers (first call decides).
        **options: any setting by name (``key``, ``step_attribute``, ``token_decoder``,
            ``max_samples_per_step``, ``sampling_seed``, ``log_distributions`` ...); anything
            else goes to ``trackio.init`` (``server_url``, ``config``, ``resume`` ...).

    Calling it again with the same project and run returns the active handle (other arguments
    are then ignored, with a warning); a different project or run shuts the old handle down
    first. Spans are never exported twice.
    """
    global _installed, _active
    asked = settings_for(project, name, settings, options)
    request = _Request(asked, run, metrics, logs)
    with _lock:
        previous = _active
        if previous is not None and not previous.closed:
            if previous._request.same_target(request):
                if previous._request != request:
                    _logger.warning(
                        "otel-trackio: configure() already active for this run; new arguments "
                        "ignored (call .shutdown() on the handle first to change them)"
                    )
                return previous
            _logger.warning(
                "otel-trackio: configure() for another project/run: shutting down the previous one"
            )
            previous.shutdown()

        # What this process has, then the decisions (otel_trackio._plan), then the parts.
        situation = observe(asked, run=run)
        plan = plan_run(asked, situation)
        chosen = plan.settings
        wiring = build_spans(plan, run=run)
        span_exporter = TrackioSpanExporter._from_wiring(wiring)
        sink = wiring.sink.share()  # this handle's hold: it finishes a run configure() started
        try:
            if _installed is None:
                _installed = _Installed(resource, metric_export_interval_millis)
            installed = _installed
            # A deep queue: a burst of spans faster than Trackio writes waits instead of being
            # dropped by the SDK (64k spans is a few tens of MB at most).
            processor = TrackioSpanProcessor(span_exporter, max_queue_size=DEEP_QUEUE_SIZE)
            log_exporter = (
                TrackioLogExporter(span_exporter)
                if logs and installed.logger_provider is not None
                else None
            )
            log_processor = (
                BatchLogRecordProcessor(log_exporter, max_queue_size=DEEP_QUEUE_SIZE)
                if log_exporter is not None
                else None
            )
            metric_exporter: MetricExporter | None = None
            if metrics and installed.reader is not None:
                if plan.metrics is MetricRoute.SPOOL and wiring.offload is not None:
                    # metrics follow the run: to the writer that holds it
                    metric_exporter = SpooledMetricExporter(wiring.offload)
                else:
                    metric_exporter = TrackioMetricExporter._holding(sink, chosen)
            sampler: Sampler | None = None
            if chosen.max_samples_per_step is not None:
                sampler = step_sampler(chosen)
                if installed.sampler_applies:
                    installed.sampler.target = sampler
                    if isinstance(sampler, StepSampler):  # its drops go in the summary
                        span_exporter.step_sampler = sampler
                else:
                    _logger.warning(
                        "otel-trackio: max_samples_per_step ignored: another tracer provider was "
                        "installed before configure(), and its sampler stays"
                    )
        except BaseException:
            span_exporter.shutdown(timeout_millis=0)
            sink.release()
            raise
        activate(chosen)
        installed.span_switch.target = processor
        installed.log_switch.target = log_processor
        installed.metric_switch.target = metric_exporter
        handle = TrackioTelemetry(
            installed,
            sink,
            span_exporter,
            processor,
            log_exporter,
            log_processor,
            metric_exporter,
            sampler,
            request,
        )
        _active = handle
        if chosen.gc_freeze:  # everything set up and imported: out of the collector's way
            handle._thaw = freeze_setup()
        # Preempted (SIGTERM from Slurm, Kubernetes): what was recorded is stored first.
        handle._sigterm = store_on_sigterm(
            lambda seconds: handle.shutdown(int(seconds * 1000)),
            chosen.shutdown_timeout_seconds or PREEMPTION_SECONDS,
        )
        # Registered after trackio.init()'s own exit hook, so it runs first: everything is
        # logged before Trackio finishes the run at exit.
        atexit.register(handle.shutdown)
        return handle


def active_telemetry() -> TrackioTelemetry | None:
    """The handle of the active :func:`configure`, if any."""
    return _active
